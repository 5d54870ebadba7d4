//! Crash sweeps of the engine on `SimFs`.
//!
//! For each scenario, pass 1 runs it without faults and counts its boundaries (mutating ops).
//! Pass 2 crashes before every boundary `k` (and once after the last), and judges what comes
//! after, in sequences:
//!
//! - **kill**: the next process restarts on the killed one's writes, visible but still pending
//!   (a kill is not a sync); it recovers, is judged, goes on working (the keyed retry, a drain of
//!   every session) and is judged again (see `phase`);
//! - **power**: every image the crash model allows is rebooted and goes through the same phase;
//! - **then power** (`/kill+work+power`, `/power+work+power`): after that phase, the machine
//!   loses power, and every image of *that* crash (the killed process's pending writes among
//!   them) is judged against what the phase acknowledged;
//! - **crash the phase** (`/kill+kill`, `/kill+power`, ...): with `depth2`, every op of the phase
//!   (recovery, torn-tail repair, lock takeovers, the retry and its restore, drains and their
//!   settlements) is itself a crash point in both modes, judged against what the phase had
//!   acknowledged at that op.
//!
//! Injected faults (EIO, ENOSPC, short writes) at every boundary are followed by a reopen, more
//! work and a power loss. Per crash point the sweep counts whether its power-loss images were
//! enumerated exhaustively or sampled.
//!
//! The result is a matrix scenario x transition x boundary x mode with crash points, images and
//! violations. Every violation carries a replay token; `replay` reproduces it bit for bit (the
//! trace hash is printed so two replays can be compared).
//!
//! Here: the sweep over every point and the mutant catalogue's entry. `options` says what to
//! sweep, `point` judges one crash point, `faults` one injected fault, `phase` drives the process
//! after a crash and `check` judges it against the model's states (`run` holds what was
//! acknowledged, `decode` reads the files independently of the engine), `report` is the matrix,
//! `token`, `replay` and `shrink` reproduce a violation; `workload` is what a workload is,
//! `scenario` the embedded ones and every name's resolver, `generate` the generated ones. No child
//! imports from this module.

pub(crate) mod check;
pub(crate) mod decode;
mod faults;
pub mod generate;
mod memo;
mod options;
mod parallel;
pub(crate) mod phase;
mod point;
mod replay;
mod report;
pub mod run;
pub mod scenario;
pub mod shrink;
mod token;
pub mod workload;

use std::time::{Duration, Instant};

use faultfs::{CrashMode, FaultPlan, SimFs};

pub use check::{RULES, rules_named};
pub use options::{Options, cores};
pub use point::{crash_in_phase, judge_rebooted};
pub use replay::{Replay, replay};
pub use report::{Cell, CellKey, Enumeration, Progress, Reach, Report, Violation, merge};
pub use scenario::{Scenario, Step};
pub use token::Token;

use faults::fault_point;
use point::{sweep_point, token_base};

use run::execute;

/// One crash point of a sweep: a boundary `k` of one scenario's fault-free run.
#[derive(Clone, Copy, Debug)]
struct Point {
    /// The scenario's position in [`Options::scenarios`].
    scenario: usize,
    /// Crash before op `k` (`k == ops`: after the last).
    k: u64,
}

/// Runs a sweep.
///
/// Every crash point is judged on its own (its images deduplicated among themselves, never
/// against another point's), so a point's verdict is a function of the point alone: the
/// points are shared out over `options.jobs` threads and merged back in point order, and any
/// number of jobs, any shard split and any order of work give the same report.
pub fn sweep(options: &Options, progress: &mut dyn FnMut(Progress)) -> Report {
    let started = Instant::now();
    let mut report = Report::default();
    let (shard, shards) = (options.shard.0, options.shard.1.max(1));
    let passes = fault_free_passes(options, &mut report);
    if options.stop_at_first && !report.violations.is_empty() {
        report.truncated = true;
        report.elapsed = started.elapsed();
        return report;
    }
    for (boundaries, _) in &passes {
        report.reached.extend(boundaries.iter().cloned());
    }
    let points: Vec<Point> = passes
        .iter()
        .enumerate()
        .flat_map(|(scenario, (_, ops))| {
            (0..=*ops).filter(|k| k % shards == shard).map(move |k| Point { scenario, k })
        })
        .collect();
    report.planned_points = points.len() as u64;
    for point in &points {
        let name = options.scenarios[point.scenario].name.to_string();
        report.reach.entry(name).or_default().planned += 1;
    }
    let judge = |point: &Point| {
        let scenario = &options.scenarios[point.scenario];
        let (boundaries, ops) = &passes[point.scenario];
        let mut part = Report::for_point(options);
        sweep_point(options, scenario, boundaries, point.k, &mut part);
        for &fault in &options.faults {
            if point.k < *ops {
                fault_point(options, scenario, boundaries, point.k, fault, &mut part);
            }
        }
        part
    };
    let parts = parallel::run(&points, options, started, judge, progress);
    for (point, part) in points.iter().zip(parts) {
        let Some(part) = part else {
            report.truncated = true;
            continue;
        };
        let stop = options.stop_at_first && !part.violations.is_empty();
        let name = options.scenarios[point.scenario].name.to_string();
        report.reach.entry(name).or_default().done += 1;
        report.absorb(part);
        if stop {
            report.truncated = report.crash_points < report.planned_points;
            break;
        }
    }
    report.elapsed = started.elapsed();
    report.jobs = options.jobs.max(1);
    report
}

/// Each scenario's fault-free pass: its boundaries (one per op) and its op count. Every shard
/// runs them; the first one reports a pass that fails.
fn fault_free_passes(options: &Options, report: &mut Report) -> Vec<(Vec<String>, u64)> {
    let seed = options.seed;
    options
        .scenarios
        .iter()
        .map(|scenario| {
            let fs = SimFs::new(FaultPlan::none(seed));
            let run = execute(&fs, scenario, seed);
            if !run.violations.is_empty() && options.shard.0 == 0 {
                report.violations.push(Violation {
                    token: token_base(options, scenario, CrashMode::ProcessKill, fs.op_count(), 0),
                    transition: "none".to_owned(),
                    boundary: "no crash".to_owned(),
                    messages: run.violations.clone(),
                    cell: None,
                });
            }
            let boundaries =
                fs.trace().entries().iter().map(|entry| entry.boundary.to_string()).collect();
            (boundaries, fs.op_count())
        })
        .collect()
}

/// The scenario whose crash points show `mutant`'s window soonest (where the catalogue has
/// found it); `None`: the first scenario does.
fn home_scenario(mutant: spex_engine::mutant::Mutant) -> Option<&'static str> {
    use spex_engine::mutant::Mutant;
    match mutant {
        Mutant::CloseDeletesBeforeRevoking
        | Mutant::CloseRecoveryFromUnsynced
        | Mutant::CloseLedgerUnsynced
        | Mutant::LedgerAppendAfterTornTail
        | Mutant::RevokeWithoutDirSync => Some("close"),
        Mutant::RecordBeforeEvent | Mutant::NoRollForward | Mutant::RollForwardBeforeVouch => {
            Some("lifecycle")
        }
        Mutant::DrainCommitsRefused
        | Mutant::DrainTakeoverWithoutVouch
        | Mutant::ReleaseAfterFailedWrite => Some("drain"),
        Mutant::RolloverTouchesSealed
        | Mutant::EmptyPinAtSegmentStart
        | Mutant::VouchSyncsOldestSegment
        | Mutant::ArchiveTakeoverWithoutVouch => Some("rollover"),
        Mutant::BatchSharesOneSync => Some("together"),
        Mutant::LockFreeReceiptWithoutRefresh => Some("send"),
        Mutant::RollForwardIgnoresLaunch => Some("launch"),
        _ => None,
    }
}

/// The result of sweeping one mutant.
#[derive(Clone, Debug)]
pub struct Caught {
    /// The mutant.
    pub mutant: spex_engine::mutant::Mutant,
    /// The first violation found, if any.
    pub first: Option<Violation>,
    /// Time to the first violation (or the whole sweep).
    pub elapsed: Duration,
    /// Images checked until then.
    pub images: u64,
}

/// Sweeps with `mutant` selected until the first violation (in a build without the engine's
/// `mutants` feature nothing is selected, and nothing is caught).
pub fn catch(mutant: spex_engine::mutant::Mutant, options: &Options) -> Caught {
    let mut options = Options { stop_at_first: true, ..options.clone() };
    // Sweep the scenario the catalogue found the mutant in first, then every other one: the
    // same points, so the verdict is the default sweep's; only the time to it changes.
    if let Some(home) = home_scenario(mutant)
        && let Some(at) = options.scenarios.iter().position(|scenario| scenario.name == home)
    {
        let first = options.scenarios.remove(at);
        options.scenarios.insert(0, first);
    }
    spex_engine::mutant::select(Some(mutant));
    let report = sweep(&options, &mut |_| {});
    spex_engine::mutant::select(None);
    Caught {
        mutant,
        first: report.violations.first().cloned(),
        elapsed: report.elapsed,
        images: report.images,
    }
}

/// [`catch`] for each mutant of `catalogue`, shared out over `workers` threads (mutants are
/// selected per thread and each sweep runs on machines of its own); `done` hears each result as
/// it comes. The results are in catalogue order, one per mutant, whatever `workers` is.
pub fn catch_each(
    catalogue: &[spex_engine::mutant::Mutant],
    options: &Options,
    workers: usize,
    done: &(dyn Fn(&Caught) + Sync),
) -> Vec<Caught> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found = std::sync::Mutex::new(Vec::with_capacity(catalogue.len()));
    std::thread::scope(|scope| {
        for _ in 0..workers.clamp(1, catalogue.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&mutant) = catalogue.get(index) else { break };
                    let caught = catch(mutant, options);
                    done(&caught);
                    found
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((index, caught));
                }
            });
        }
    });
    let mut found = found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    found.sort_by_key(|(index, _)| *index);
    assert_eq!(found.len(), catalogue.len(), "one result per mutant");
    found.into_iter().map(|(_, caught)| caught).collect()
}
