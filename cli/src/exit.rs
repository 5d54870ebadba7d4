//! The exit codes of `spex`, one table for every command.
//!
//! | code | meaning                                          |
//! |------|--------------------------------------------------|
//! | 0    | ok                                               |
//! | 1    | failed (an error was reported on stderr)         |
//! | 2    | usage (bad arguments; printed by the parser)     |
//! | 3    | busy (a lock is held)                            |
//! | 4    | corrupt (the store is damaged)                   |
//! | 5    | violation found (a crash check failed)           |

/// An exit code from the table above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code, reason = "busy and corrupt arrive with the session commands")]
pub(crate) enum Code {
    Ok = 0,
    Failed = 1,
    Usage = 2,
    Busy = 3,
    Corrupt = 4,
    Violation = 5,
}

impl From<Code> for std::process::ExitCode {
    fn from(code: Code) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}
