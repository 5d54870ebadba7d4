//! What to sweep: scenarios, crash modes, depth, shard, budget, injected faults, media, jobs.

use std::time::Duration;

use faultfs::CrashMode;

use super::scenario::{self, Scenario};

/// What to sweep.
#[derive(Clone, Debug)]
pub struct Options {
    /// The seed of every plan and every sampled image.
    pub seed: u64,
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// The crash modes.
    pub modes: Vec<CrashMode>,
    /// Crash recovery again, at each of its boundaries.
    pub depth2: bool,
    /// This shard of crash points: (index, count); point `k` is swept when `k % count == index`.
    pub shard: (u64, u64),
    /// Stop at the first violation.
    pub stop_at_first: bool,
    /// Stop starting new crash points after this long.
    pub budget: Option<Duration>,
    /// Also inject each of these faults at every boundary (instead of crashing there).
    pub faults: Vec<faultfs::Fault>,
    /// Of each crash point's power-loss images, how many (the first ones: the durable state
    /// and the structured families come first) also get the deep treatment a kill gets: a
    /// power loss after their phase, and a crash at every op of it.
    pub deep_power_images: usize,
    /// What the medium shows where a file grew without its data (the default keeps zeros; the
    /// named harsher mode shows stale bytes).
    pub media: faultfs::Media,
    /// Threads judging crash points at once (the report does not depend on it).
    pub jobs: usize,
    /// Leave out the images a judged image stands for (see `Report::equivalent`); off, every
    /// distinct image is judged (the verdicts are the same, which a test checks).
    pub reduce_equivalent: bool,
    /// Judge the images stood for anyway and compare each verdict with the one of the image
    /// that stood for it (see `Report::unequal_stand_ins`): a check of the reduction, as slow
    /// as judging every image.
    pub verify_equivalent: bool,
}

/// The machine's cores: the default number of jobs.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

impl Options {
    /// Every scenario, both modes, depth 2, one shard.
    pub fn full(seed: u64) -> Options {
        Options {
            seed,
            scenarios: scenario::all(),
            modes: vec![CrashMode::ProcessKill, CrashMode::PowerLoss],
            depth2: true,
            shard: (0, 1),
            stop_at_first: false,
            budget: None,
            faults: vec![faultfs::Fault::Eio, faultfs::Fault::Enospc, faultfs::Fault::ShortWrite],
            deep_power_images: 1,
            media: faultfs::Media::ZeroTails,
            jobs: cores(),
            reduce_equivalent: true,
            verify_equivalent: false,
        }
    }
}
