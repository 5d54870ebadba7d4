pub(crate) mod demo;
pub(crate) mod verify;

use faultfs::CrashMode;

/// Which crash modes a command sweeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    Kill,
    Power,
    All,
}

impl ModeArg {
    /// The crash modes selected.
    pub(crate) fn modes(self) -> &'static [CrashMode] {
        match self {
            ModeArg::Kill => &[CrashMode::ProcessKill],
            ModeArg::Power => &[CrashMode::PowerLoss],
            ModeArg::All => &[CrashMode::ProcessKill, CrashMode::PowerLoss],
        }
    }
}
