//! Crash sweeps of the engine on `SimFs`.
//!
//! For each scenario, pass 1 runs it without faults and counts its boundaries (mutating ops).
//! Pass 2 crashes before every boundary `k` (and once after the last), takes every image the
//! crash model yields under process kill and power loss, reboots each one, recovers, checks
//! every oracle rule (see `check`), continues the workload and checks again. With `depth2`, the
//! recovery of every process-kill image is itself crashed at each of its boundaries and those
//! images are checked the same way.
//!
//! The result is a matrix scenario x transition x boundary x mode with crash points, images and
//! violations. Every violation carries a replay token; `replay` reproduces it bit for bit (the
//! trace hash is printed so two replays can be compared).

pub(crate) mod check;
pub mod run;
pub mod scenario;
pub mod shrink;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use faultfs::{CrashMode, FaultPlan, SimFs};
use sha2::{Digest, Sha256};

pub use scenario::{Scenario, Step};

use run::execute;

/// Where a violation was found; its text form is what `spex verify replay` takes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    /// The scenario.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// The first crash's mode.
    pub mode: CrashMode,
    /// The first crash point (before op `k`).
    pub k: u64,
    /// Which image of that crash.
    pub image: usize,
    /// A second crash inside recovery: (mode, point, image).
    pub second: Option<(CrashMode, u64, usize)>,
    /// An injected I/O fault at op `k` instead of a crash (`image` then names the power-loss
    /// image taken after the failure, or is `usize::MAX` for the reopened process).
    pub fault: Option<faultfs::Fault>,
}

fn mode_name(mode: CrashMode) -> &'static str {
    mode.name()
}

fn parse_mode(text: &str) -> Result<CrashMode, String> {
    match text {
        "kill" => Ok(CrashMode::ProcessKill),
        "power" => Ok(CrashMode::PowerLoss),
        other => Err(format!("unknown crash mode {other:?} (expected kill or power)")),
    }
}

impl fmt::Display for Token {
    /// `v1:<scenario>:<seed>:<mode>:<k>:<image>[:<mode2>:<j>:<image2>]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "v1:{}:{}:{}:{}:{}",
            self.scenario,
            self.seed,
            mode_name(self.mode),
            self.k,
            self.image
        )?;
        if let Some((mode, j, image)) = self.second {
            write!(f, ":{}:{j}:{image}", mode_name(mode))?;
        }
        if let Some(fault) = self.fault {
            write!(f, ":{fault}")?;
        }
        Ok(())
    }
}

impl FromStr for Token {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = |what: &str| format!("replay token {s:?}: {what}");
        if parts.first() != Some(&"v1") || !matches!(parts.len(), 6 | 7 | 9) {
            return Err(bad(
                "expected v1:<scenario>:<seed>:<mode>:<k>:<image>[:<mode>:<j>:<image> | :<fault>]",
            ));
        }
        let fault = if parts.len() == 7 {
            Some(parts[6].parse::<faultfs::Fault>().map_err(|error| bad(&error))?)
        } else {
            None
        };
        let number =
            |text: &str| text.parse::<u64>().map_err(|_| bad(&format!("{text:?} is not a number")));
        let second = if parts.len() == 9 {
            Some((parse_mode(parts[6])?, number(parts[7])?, number(parts[8])? as usize))
        } else {
            None
        };
        Ok(Token {
            scenario: parts[1].to_owned(),
            seed: number(parts[2])?,
            mode: parse_mode(parts[3])?,
            k: number(parts[4])?,
            image: number(parts[5])? as usize,
            second,
            fault,
        })
    }
}

/// A violation: where, and what broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// How to replay it.
    pub token: Token,
    /// The transition in flight.
    pub transition: String,
    /// The boundary of the crash point.
    pub boundary: String,
    /// What was wrong.
    pub messages: Vec<String>,
}

impl Violation {
    /// The one command that reproduces it.
    pub fn replay_command(&self) -> String {
        format!("spex verify replay {}", self.token)
    }
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// Crash points in this cell.
    pub points: u64,
    /// Images checked.
    pub images: u64,
    /// Images with a violation.
    pub violations: u64,
}

/// Key of a matrix cell: (scenario, transition, boundary, mode).
pub type CellKey = (String, String, String, CrashMode);

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
        }
    }
}

/// Progress, for a progress bar.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Crash points done.
    pub done: u64,
    /// Crash points in all.
    pub total: u64,
    /// Images checked so far.
    pub images: u64,
    /// Violations so far.
    pub violations: u64,
}

/// The result of a sweep.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The matrix.
    pub cells: BTreeMap<CellKey, Cell>,
    /// Every violation (the first few per cell are kept in full).
    pub violations: Vec<Violation>,
    /// Crash points visited.
    pub crash_points: u64,
    /// Images checked (first and second crashes).
    pub images: u64,
    /// Whether the budget ran out before every point was visited.
    pub truncated: bool,
    /// Wall time.
    pub elapsed: Duration,
}

/// Violations kept in full per cell; the rest are only counted.
const VIOLATIONS_KEPT_PER_CELL: u64 = 3;

/// Runs a sweep.
pub fn sweep(options: &Options, progress: &mut dyn FnMut(Progress)) -> Report {
    let started = Instant::now();
    let mut report = Report::default();
    let seed = options.seed;
    let passes: Vec<(Scenario, Vec<String>, u64)> = options
        .scenarios
        .iter()
        .map(|scenario| {
            let fs = SimFs::new(FaultPlan::none(seed));
            let run = execute(&fs, scenario, seed);
            if !run.violations.is_empty() {
                report.violations.push(Violation {
                    token: Token {
                        scenario: scenario.name.to_string(),
                        seed,
                        mode: CrashMode::ProcessKill,
                        k: fs.op_count(),
                        image: 0,
                        second: None,
                        fault: None,
                    },
                    transition: "none".to_owned(),
                    boundary: "no crash".to_owned(),
                    messages: run.violations.clone(),
                });
            }
            let boundaries =
                fs.trace().entries().iter().map(|entry| entry.boundary.to_string()).collect();
            (scenario.clone(), boundaries, fs.op_count())
        })
        .collect();
    let (shard, shards) = (options.shard.0, options.shard.1.max(1));
    let total: u64 = passes
        .iter()
        .map(|(_, _, ops)| (0..=*ops).filter(|k| k % shards == shard).count() as u64)
        .sum();
    let mut done = 0;
    'scenarios: for (scenario, boundaries, ops) in &passes {
        for k in (0..=*ops).filter(|k| k % shards == shard) {
            if options.budget.is_some_and(|budget| started.elapsed() >= budget)
                || (options.stop_at_first && !report.violations.is_empty())
            {
                report.truncated = true;
                break 'scenarios;
            }
            sweep_point(options, scenario, boundaries, k, &mut report);
            for &fault in &options.faults {
                if k < *ops {
                    fault_point(options, scenario, boundaries, k, fault, &mut report);
                }
            }
            done += 1;
            progress(Progress {
                done,
                total,
                images: report.images,
                violations: report.violations.len() as u64,
            });
        }
    }
    report.elapsed = started.elapsed();
    report
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
    let run = execute(&fs, scenario, seed);
    report.crash_points += 1;
    let boundary = boundaries.get(k as usize).cloned().unwrap_or_else(|| "end".to_owned());
    let transition = match run.in_flight {
        Some(index) => scenario.steps[index].transition().to_owned(),
        None if k as usize >= boundaries.len() => "end".to_owned(),
        None => "open".to_owned(),
    };
    for &mode in &options.modes {
        let key = (scenario.name.to_string(), transition.clone(), boundary.clone(), mode);
        report.cells.entry(key.clone()).or_default().points += 1;
        let crash = fs.crash(mode);
        for (image_index, image) in crash.images.iter().enumerate() {
            let token = Token {
                scenario: scenario.name.to_string(),
                seed,
                mode,
                k,
                image: image_index,
                second: None,
                fault: None,
            };
            let mut messages = run.violations.clone();
            messages.extend(check_rebooted(image, scenario, &run, seed));
            record(report, &key, token, &transition, &boundary, messages);
            if options.depth2 && mode == CrashMode::ProcessKill {
                sweep_recovery(
                    options,
                    scenario,
                    &run,
                    image,
                    &token_base(scenario, seed, mode, k, image_index),
                    &transition,
                    &boundary,
                    report,
                );
            }
        }
    }
}

/// Injects `fault` at op `k`: the failing step must not be acknowledged and must poison its
/// session in that handle; then the process reopens the store (and, separately, the machine
/// loses power right after the failure) and every rule is checked.
fn fault_point(
    options: &Options,
    scenario: &Scenario,
    boundaries: &[String],
    k: u64,
    fault: faultfs::Fault,
    report: &mut Report,
) {
    let seed = options.seed;
    let fs = SimFs::new(FaultPlan::fault_at(seed, k, fault));
    let (run, store) = run::execute_with(&fs, scenario, seed);
    let boundary = boundaries.get(k as usize).cloned().unwrap_or_else(|| "end".to_owned());
    let faulted_step = run.step_ops.iter().position(|(start, end)| (*start..*end).contains(&k));
    let transition = match run.in_flight.or(faulted_step) {
        Some(index) => format!("{}+{fault}", scenario.steps[index].transition()),
        None => format!("open+{fault}"),
    };
    // The harness's own ops (worktrees) are fault points too, but the engine's rules about
    // failed writes do not apply to them.
    let engine_op = !boundary.starts_with("harness.");
    let mut common = run.violations.clone();
    // A refusal (e.g. a key conflict) acknowledges nothing; its lock release may fail quietly.
    if let Some(index) = faulted_step
        && engine_op
        && run.in_flight != Some(index)
        && !run.refused.contains(&index)
    {
        common.push(format!(
            "an injected {fault} at op {k} ({boundary}) failed step {index} ({}), which was acknowledged anyway",
            scenario.steps[index].transition()
        ));
    }
    if let (Some(store), Some(index)) = (&store, run.in_flight)
        && run.failed.is_some()
        && engine_op
    {
        let id = match &scenario.steps[index] {
            Step::Create { id, .. }
            | Step::Set { id, .. }
            | Step::Drain { id }
            | Step::DrainRefusing { id } => id,
            Step::Archive { id } | Step::Close { id } | Step::Retire { id } => id,
            Step::Send { to, .. } => to,
        };
        match store.recover_session(&run::sid(id)) {
            Err(spex_engine::Error::Poisoned { .. }) => {}
            other => common
                .push(format!("after a failed {fault} the handle was not poisoned: {other:?}")),
        }
    }
    // Power loss right after the failure (fsyncgate: dropped data is visible but not durable).
    let power = fs.crash(CrashMode::PowerLoss);
    let key =
        (scenario.name.to_string(), transition.clone(), boundary.clone(), CrashMode::PowerLoss);
    report.cells.entry(key.clone()).or_default().points += 1;
    for (image_index, image) in power.images.iter().enumerate() {
        let token = Token {
            scenario: scenario.name.to_string(),
            seed,
            mode: CrashMode::PowerLoss,
            k,
            image: image_index,
            second: None,
            fault: Some(fault),
        };
        let mut messages = common.clone();
        messages.extend(check_rebooted(image, scenario, &run, seed));
        record(report, &key, token, &transition, &boundary, messages);
    }
    // The process goes on: a new handle on the same filesystem recovers.
    drop(store);
    let key =
        (scenario.name.to_string(), transition.clone(), boundary.clone(), CrashMode::ProcessKill);
    report.cells.entry(key.clone()).or_default().points += 1;
    let token = Token {
        scenario: scenario.name.to_string(),
        seed,
        mode: CrashMode::ProcessKill,
        k,
        image: usize::MAX,
        second: None,
        fault: Some(fault),
    };
    let mut messages = common;
    match check::check_image(fs, scenario, &run, seed) {
        Ok(found) => messages.extend(found),
        Err(_) => messages.push("recovery crashed without a planned fault".to_owned()),
    }
    record(report, &key, token, &transition, &boundary, messages);
}

/// Reboots `image` with no fault planned and checks it.
fn check_rebooted(
    image: &faultfs::Image,
    scenario: &Scenario,
    run: &run::Execution,
    seed: u64,
) -> Vec<String> {
    match check::check_image(SimFs::from_image(image, FaultPlan::none(seed)), scenario, run, seed) {
        Ok(found) => found,
        Err(_) => vec!["recovery crashed without a planned fault".to_owned()],
    }
}

fn token_base(scenario: &Scenario, seed: u64, mode: CrashMode, k: u64, image: usize) -> Token {
    Token { scenario: scenario.name.to_string(), seed, mode, k, image, second: None, fault: None }
}

/// Depth 2: crash the recovery of `image` at each of its boundaries, check those images.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site; the arguments are the sweep's coordinates"
)]
fn sweep_recovery(
    options: &Options,
    scenario: &Scenario,
    run: &run::Execution,
    image: &faultfs::Image,
    base: &Token,
    transition: &str,
    boundary: &str,
    report: &mut Report,
) {
    let seed = options.seed;
    let counting = SimFs::from_image(image, FaultPlan::none(seed));
    let Ok(store) = run::open(counting.clone(), scenario, seed) else { return };
    let _ = check::recover_all(&store, run);
    let recovery_ops = counting.op_count();
    for j in 0..recovery_ops {
        let crashing = SimFs::from_image(image, FaultPlan::crash_at(seed, j));
        let Err(halted) = check::check_image(crashing, scenario, run, seed) else { continue };
        for &mode in &options.modes {
            let key = (
                scenario.name.to_string(),
                format!("{transition}+recovery"),
                boundary.to_owned(),
                mode,
            );
            report.cells.entry(key.clone()).or_default().points += 1;
            for (index, second) in halted.crash(mode).images.iter().enumerate() {
                let token = Token { second: Some((mode, j, index)), ..base.clone() };
                let messages = match check::check_image(
                    SimFs::from_image(second, FaultPlan::none(seed)),
                    scenario,
                    run,
                    seed,
                ) {
                    Ok(found) => found,
                    Err(_) => vec!["recovery crashed without a planned fault".to_owned()],
                };
                record(report, &key, token, transition, boundary, messages);
            }
        }
    }
}

fn record(
    report: &mut Report,
    key: &CellKey,
    token: Token,
    transition: &str,
    boundary: &str,
    messages: Vec<String>,
) {
    report.images += 1;
    let cell = report.cells.entry(key.clone()).or_default();
    cell.images += 1;
    if messages.is_empty() {
        return;
    }
    cell.violations += 1;
    if cell.violations <= VIOLATIONS_KEPT_PER_CELL {
        report.violations.push(Violation {
            token,
            transition: transition.to_owned(),
            boundary: boundary.to_owned(),
            messages,
        });
    }
}

/// What a replay found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The violations of that one image (empty: it passes).
    pub messages: Vec<String>,
    /// SHA-256 over every trace of the replay and the image hashes: equal for equal runs.
    pub trace_hash: String,
    /// The boundary of the first crash point.
    pub boundary: String,
    /// The full op trace of the first run, up to the crash.
    pub trace: String,
}

/// Replays the one image a token names.
pub fn replay(token: &Token) -> Result<Replay, String> {
    let scenario = scenario::named(&token.scenario)
        .ok_or_else(|| format!("unknown scenario {:?}", token.scenario))?;
    let seed = token.seed;
    if let Some(fault) = token.fault {
        return replay_fault(token, &scenario, fault);
    }
    let fs = SimFs::new(FaultPlan::crash_at(seed, token.k));
    let run = execute(&fs, &scenario, seed);
    let trace = fs.trace();
    let boundary = trace
        .entries()
        .get(token.k as usize)
        .map_or_else(|| "end".to_owned(), |entry| entry.boundary.to_string());
    let crash = fs.crash(token.mode);
    let image = crash
        .images
        .get(token.image)
        .ok_or_else(|| format!("crash point {} has only {} images", token.k, crash.images.len()))?;
    let mut hasher = Sha256::new();
    hasher.update(trace.hash_hex());
    hasher.update(image.hash_hex());
    let messages = run.violations.clone();
    let checked = match token.second {
        None => SimFs::from_image(image, FaultPlan::none(seed)),
        Some((mode, j, index)) => {
            let crashing = SimFs::from_image(image, FaultPlan::crash_at(seed, j));
            let halted = match check::check_image(crashing, &scenario, &run, seed) {
                Err(halted) => halted,
                Ok(_) => return Err(format!("recovery has no crash point {j}")),
            };
            hasher.update(halted.trace().hash_hex());
            let images = halted.crash(mode).images;
            let second = images
                .get(index)
                .ok_or_else(|| format!("the second crash has only {} images", images.len()))?;
            hasher.update(second.hash_hex());
            SimFs::from_image(second, FaultPlan::none(seed))
        }
    };
    Ok(finish_replay(checked, &scenario, &run, seed, hasher, messages, boundary, &trace))
}

/// Replays an injected-fault token: the power-loss image after the failure, or (image
/// `usize::MAX`) the reopened process.
fn replay_fault(
    token: &Token,
    scenario: &Scenario,
    fault: faultfs::Fault,
) -> Result<Replay, String> {
    let seed = token.seed;
    let fs = SimFs::new(FaultPlan::fault_at(seed, token.k, fault));
    let (run, store) = run::execute_with(&fs, scenario, seed);
    drop(store);
    let trace = fs.trace();
    let boundary = trace
        .entries()
        .get(token.k as usize)
        .map_or_else(|| "end".to_owned(), |entry| entry.boundary.to_string());
    let mut hasher = Sha256::new();
    hasher.update(trace.hash_hex());
    let checked = if token.image == usize::MAX {
        fs
    } else {
        let images = fs.crash(CrashMode::PowerLoss).images;
        let image = images
            .get(token.image)
            .ok_or_else(|| format!("only {} images after the failure", images.len()))?;
        hasher.update(image.hash_hex());
        SimFs::from_image(image, FaultPlan::none(seed))
    };
    let messages = run.violations.clone();
    Ok(finish_replay(checked, scenario, &run, seed, hasher, messages, boundary, &trace))
}

/// Checks the rebooted (or reopened) filesystem of a replay and seals its trace hash.
#[allow(
    clippy::too_many_arguments,
    reason = "the two replay paths hand over everything they built"
)]
fn finish_replay(
    checked: SimFs,
    scenario: &Scenario,
    run: &run::Execution,
    seed: u64,
    mut hasher: Sha256,
    mut messages: Vec<String>,
    boundary: String,
    trace: &faultfs::Trace,
) -> Replay {
    match check::check_image(checked.clone(), scenario, run, seed) {
        Ok(found) => messages.extend(found),
        Err(_) => messages.push("recovery crashed without a planned fault".to_owned()),
    }
    hasher.update(checked.trace().hash_hex());
    Replay {
        messages,
        trace_hash: hex::encode(hasher.finalize()),
        boundary,
        trace: trace.to_string(),
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

/// Sweeps with `mutant` selected until the first violation.
pub fn catch(mutant: spex_engine::mutant::Mutant, options: &Options) -> Caught {
    let options = Options { stop_at_first: true, ..options.clone() };
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
