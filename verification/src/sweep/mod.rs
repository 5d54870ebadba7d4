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

pub(crate) mod check;
pub(crate) mod decode;
mod faults;
pub mod generate;
mod parallel;
pub(crate) mod phase;
mod replay;
mod report;
pub mod run;
pub mod scenario;
pub mod shrink;
mod token;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use faultfs::{CrashMode, FaultPlan, SimFs};
use sha2::{Digest, Sha256};

pub use check::{RULES, rules_named};
pub use replay::{Replay, replay};
pub use report::{Cell, CellKey, Enumeration, Progress, Reach, Report, Violation, merge};
pub use scenario::{Scenario, Step};
pub use token::Token;

use faults::fault_point;
use report::record;

use run::execute;

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
        }
    }
}

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
    let seed = options.seed;
    let (shard, shards) = (options.shard.0, options.shard.1.max(1));
    let passes: Vec<(Vec<String>, u64)> = options
        .scenarios
        .iter()
        .map(|scenario| {
            let fs = SimFs::new(FaultPlan::none(seed));
            let run = execute(&fs, scenario, seed);
            // Every shard runs the fault-free pass; the first one reports it.
            if !run.violations.is_empty() && shard == 0 {
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
        .collect();
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
        let mut part = Report::default();
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

/// Where the first phase of a sequence runs: the restarted machine after a kill (or after an
/// injected fault), or a rebooted power-loss image. Each call gives a fresh copy.
#[derive(Clone, Copy)]
enum Source<'a> {
    Restart(&'a SimFs),
    Reboot(&'a faultfs::Image),
}

impl Source<'_> {
    fn machine(self, plan: FaultPlan) -> SimFs {
        match self {
            Source::Restart(fs) => fs.restart(plan),
            Source::Reboot(image) => SimFs::from_image(image, plan),
        }
    }
}

/// The coordinates of one sequence in the matrix and its token.
struct Place<'a> {
    scenario: &'a Scenario,
    transition: String,
    boundary: String,
    token: Token,
}

impl Place<'_> {
    fn key(&self, sequence: &str, mode: CrashMode) -> CellKey {
        let transition = if sequence.is_empty() {
            self.transition.clone()
        } else {
            format!("{}/{sequence}", self.transition)
        };
        (self.scenario.name.to_string(), transition, self.boundary.clone(), mode)
    }
}

fn sweep_point(
    options: &Options,
    scenario: &Scenario,
    boundaries: &[String],
    k: u64,
    report: &mut Report,
) {
    let seed = options.seed;
    let fs = SimFs::new(FaultPlan::crash_at(seed, k));
    fs.set_media(options.media);
    let run = execute(&fs, scenario, seed);
    report.crash_points += 1;
    let boundary = boundaries.get(k as usize).cloned().unwrap_or_else(|| "end".to_owned());
    if let Some(name) = boundaries.get(k as usize) {
        report.note_crashed(name);
    }
    let transition = match run.in_flight {
        Some(index) => scenario.steps[index].transition().to_owned(),
        None if k as usize >= boundaries.len() => "end".to_owned(),
        None => "open".to_owned(),
    };
    for &mode in &options.modes {
        let base = Place {
            scenario,
            transition: transition.clone(),
            boundary: boundary.clone(),
            token: token_base(options, scenario, mode, k, 0),
        };
        report.cells.entry(base.key("", mode)).or_default().points += 1;
        match mode {
            CrashMode::ProcessKill => {
                judge_sequence(options, &run, Source::Restart(&fs), &base, true, report);
            }
            CrashMode::PowerLoss => {
                let crash = fs.crash(mode);
                report.count_enumeration(scenario, &crash);
                let torn = crash.images.iter().position(torn_tail);
                for (index, image) in crash.images.iter().enumerate() {
                    let place = Place {
                        token: token_base(options, scenario, mode, k, index),
                        transition: transition.clone(),
                        boundary: boundary.clone(),
                        scenario,
                    };
                    // The first images, and the first whose log ends torn (its recovery
                    // repairs the tail: that repair must be crash-safe too).
                    let deep = index < options.deep_power_images
                        || (options.deep_power_images > 0 && Some(index) == torn);
                    judge_sequence(options, &run, Source::Reboot(image), &place, deep, report);
                }
            }
        }
    }
}

/// Judges the phase that follows a crash of `run` on `source`; when `deep`, also a power loss
/// after that phase, and (with `depth2`) a crash at every op of it in every mode.
fn judge_sequence(
    options: &Options,
    run: &run::Execution,
    source: Source<'_>,
    place: &Place<'_>,
    deep: bool,
    report: &mut Report,
) {
    let seed = options.seed;
    let scenario = place.scenario;
    let first = place.token.mode;
    let fs = source.machine(FaultPlan::none(seed));
    let checked = match phase::check_image(fs.clone(), scenario, run, seed) {
        Ok(checked) => checked,
        Err(_) => {
            let messages = vec!["recovery crashed without a planned fault".to_owned()];
            record(report, &place.key("", first), place.token.clone(), place, messages);
            return;
        }
    };
    let mut messages = run.violations.clone();
    messages.extend(checked.violations);
    let clean = messages.is_empty();
    record(report, &place.key("", first), place.token.clone(), place, messages);
    if !deep || !clean {
        return;
    }
    report.note_reached(&fs);
    // Kill (or reboot), restart, work, power loss.
    let sequence = format!("{}+work+power", first.name());
    let key = place.key(&sequence, CrashMode::PowerLoss);
    report.cells.entry(key.clone()).or_default().points += 1;
    let crash = fs.crash(CrashMode::PowerLoss);
    report.count_enumeration(scenario, &crash);
    let run_digest = digest_of(&checked.run);
    for (index, image) in crash.images.iter().enumerate() {
        if !report.first_judgement(&key, image, &run_digest) {
            continue;
        }
        let token = Token { then_power: Some(index), ..place.token.clone() };
        let machine = SimFs::from_image(image, FaultPlan::none(seed));
        let messages = judge_last(machine, scenario, &checked.run, seed);
        record(report, &key, token, place, messages);
    }
    if first == CrashMode::ProcessKill {
        judge_first_commands(options, run, &source, place, report);
    }
    if !options.depth2 {
        return;
    }
    // A crash at every op of the phase.
    for j in 0..fs.op_count() {
        let Err(halted) =
            phase::check_image(source.machine(FaultPlan::crash_at(seed, j)), scenario, run, seed)
        else {
            continue;
        };
        if let Some((boundary, _)) = halted.fs.halted() {
            report.note_crashed(boundary.name());
        }
        for &second in &options.modes {
            let key = place.key(&format!("{}+{}", first.name(), second.name()), second);
            report.cells.entry(key.clone()).or_default().points += 1;
            for (index, machine) in
                after_second_crash(&halted, second, &key, scenario, seed, report)
            {
                let token = Token { second: Some((second, j, index)), ..place.token.clone() };
                let messages = judge_last(machine, scenario, &halted.run, seed);
                record(report, &key, token, place, messages);
            }
        }
    }
}

/// The machines a crash in `mode` of the halted phase leaves, each with its image number: the
/// restarted machine after a kill; after a power loss, each image not yet judged in `key`
/// against the same run.
fn after_second_crash(
    halted: &phase::Halted,
    mode: CrashMode,
    key: &CellKey,
    scenario: &Scenario,
    seed: u64,
    report: &mut Report,
) -> Vec<(usize, SimFs)> {
    match mode {
        CrashMode::ProcessKill => vec![(0, halted.fs.restart(FaultPlan::none(seed)))],
        CrashMode::PowerLoss => {
            let crash = halted.fs.crash(mode);
            report.count_enumeration(scenario, &crash);
            let run_digest = digest_of(&halted.run);
            let mut machines = Vec::new();
            for (index, image) in crash.images.iter().enumerate() {
                if report.first_judgement(key, image, &run_digest) {
                    machines.push((index, SimFs::from_image(image, FaultPlan::none(seed))));
                }
            }
            machines
        }
    }
}

/// After a kill, each transition the CLI may run first (no recovery before it: it takes the
/// dead holder's lock over itself), then a power loss right after its answer: everything it
/// acknowledged, on whatever it found, must survive. At depth 2, also a crash at every op of
/// the command's takeover (`phase::is_takeover`), in every mode, judged by the process after.
///
/// After an injected I/O error too: the failed transition leaves its lock behind, so that the
/// next command takes it over and vouches for the failed step's unsynced bytes (the
/// `release-after-failed-write` mutant removes it, and a keyed retry then acknowledges what a
/// power loss loses).
fn judge_first_commands(
    options: &Options,
    run: &run::Execution,
    source: &Source<'_>,
    place: &Place<'_>,
    report: &mut Report,
) {
    let seed = options.seed;
    let scenario = place.scenario;
    for (n, step) in phase::first_commands(scenario, run).iter().enumerate() {
        let sequence = format!("kill+first-{}+power", step.transition());
        let key = place.key(&sequence, CrashMode::PowerLoss);
        report.cells.entry(key.clone()).or_default().points += 1;
        let fs = source.machine(FaultPlan::none(seed));
        let (messages, next) = match phase::first_command(fs.clone(), scenario, run, step, seed) {
            Ok(answered) => answered,
            Err(_) => {
                (vec!["the first command crashed without a planned fault".to_owned()], run.clone())
            }
        };
        report.note_reached(&fs);
        if !messages.is_empty() {
            let token = Token { first: Some((n, usize::MAX)), ..place.token.clone() };
            record(report, &key, token, place, messages);
            continue;
        }
        let crash = fs.crash(CrashMode::PowerLoss);
        report.count_enumeration(scenario, &crash);
        let run_digest = digest_of(&next);
        for (index, image) in crash.images.iter().enumerate() {
            if !report.first_judgement(&key, image, &run_digest) {
                continue;
            }
            let token = Token { first: Some((n, index)), ..place.token.clone() };
            let machine = SimFs::from_image(image, FaultPlan::none(seed));
            let messages = judge_last(machine, scenario, &next, seed);
            record(report, &key, token, place, messages);
        }
        if !options.depth2 {
            continue;
        }
        let takeover: Vec<u64> = (fs.trace().entries().iter().enumerate())
            .filter(|(_, entry)| phase::is_takeover(entry.boundary.name()))
            .map(|(j, _)| j as u64)
            .collect();
        for j in takeover {
            let machine = source.machine(FaultPlan::crash_at(seed, j));
            let Err(halted) = phase::first_command(machine, scenario, run, step, seed) else {
                continue;
            };
            if let Some((boundary, _)) = halted.fs.halted() {
                report.note_crashed(boundary.name());
            }
            for &second in &options.modes {
                let sequence = format!("kill+takeover-{}+{}", step.transition(), second.name());
                let key = place.key(&sequence, second);
                report.cells.entry(key.clone()).or_default().points += 1;
                for (index, machine) in
                    after_second_crash(&halted, second, &key, scenario, seed, report)
                {
                    let token =
                        Token { first_crash: Some((n, second, j, index)), ..place.token.clone() };
                    let messages = judge_last(machine, scenario, &halted.run, seed);
                    record(report, &key, token, place, messages);
                }
            }
        }
    }
}

/// A digest of everything a judgement of `run` depends on.
fn digest_of(run: &run::Execution) -> [u8; 32] {
    Sha256::digest(format!("{run:?}").as_bytes()).into()
}

/// Whether some session's newest segment in `image` ends in a torn line (unterminated, or with
/// NUL bytes in its last line), which the next writer repairs.
fn torn_tail(image: &faultfs::Image) -> bool {
    let mut newest: BTreeMap<&str, &str> = BTreeMap::new();
    for path in image.nodes().keys() {
        if let Some((dir, _)) = path.rsplit_once("/timeline/")
            && path.ends_with(".ndjson")
            && newest.get(dir).is_none_or(|current| *current < path.as_str())
        {
            newest.insert(dir, path);
        }
    }
    newest.values().any(|path| {
        let bytes = image.file(path).unwrap_or_default();
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let last = body.rsplit(|&b| b == b'\n').next().unwrap_or_default();
        !bytes.is_empty() && (!bytes.ends_with(b"\n") || last.contains(&0))
    })
}

/// The last phase of a sequence: judged, not crashed again.
fn judge_last(fs: SimFs, scenario: &Scenario, run: &run::Execution, seed: u64) -> Vec<String> {
    match phase::check_image(fs, scenario, run, seed) {
        Ok(checked) => checked.violations,
        Err(_) => vec!["recovery crashed without a planned fault".to_owned()],
    }
}

fn token_base(
    options: &Options,
    scenario: &Scenario,
    mode: CrashMode,
    k: u64,
    image: usize,
) -> Token {
    Token {
        media: options.media,
        scenario: scenario.name.to_string(),
        seed: options.seed,
        mode,
        k,
        image,
        second: None,
        then_power: None,
        first: None,
        first_crash: None,
        fault: None,
    }
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
