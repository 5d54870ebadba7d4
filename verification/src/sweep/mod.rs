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
pub mod generate;
pub(crate) mod phase;
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
    /// Which image of that crash (a kill has one: the restarted machine).
    pub image: usize,
    /// A second crash inside the phase that followed: (mode, op of the phase, image).
    pub second: Option<(CrashMode, u64, usize)>,
    /// A power loss after the (last) phase ran to its end: which of its images.
    pub then_power: Option<usize>,
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

/// The image number as tokens spell it (`reopen` for the process that goes on after a fault).
fn image_text(image: usize) -> String {
    if image == usize::MAX { "reopen".to_owned() } else { image.to_string() }
}

impl fmt::Display for Token {
    /// `v2:<scenario>:<seed>:<mode>:<k>:<image>[:in:<mode>:<j>:<image>][:then:<image>][:<fault>]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "v2:{}:{}:{}:{}:{}",
            self.scenario,
            self.seed,
            mode_name(self.mode),
            self.k,
            image_text(self.image)
        )?;
        if let Some((mode, j, image)) = self.second {
            write!(f, ":in:{}:{j}:{image}", mode_name(mode))?;
        }
        if let Some(image) = self.then_power {
            write!(f, ":then:{image}")?;
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
        if parts.first() != Some(&"v2") || parts.len() < 6 {
            return Err(bad(
                "expected v2:<scenario>:<seed>:<mode>:<k>:<image>[:in:<mode>:<j>:<image>][:then:<image>][:<fault>]",
            ));
        }
        let number =
            |text: &str| text.parse::<u64>().map_err(|_| bad(&format!("{text:?} is not a number")));
        let image = |text: &str| {
            if text == "reopen" { Ok(usize::MAX) } else { number(text).map(|n| n as usize) }
        };
        let mut token = Token {
            scenario: parts[1].to_owned(),
            seed: number(parts[2])?,
            mode: parse_mode(parts[3])?,
            k: number(parts[4])?,
            image: image(parts[5])?,
            second: None,
            then_power: None,
            fault: None,
        };
        let mut rest = &parts[6..];
        while let Some((&tag, tail)) = rest.split_first() {
            match (tag, tail) {
                ("in", [mode, j, index, more @ ..]) => {
                    token.second = Some((parse_mode(mode)?, number(j)?, image(index)?));
                    rest = more;
                }
                ("then", [index, more @ ..]) => {
                    token.then_power = Some(image(index)?);
                    rest = more;
                }
                (fault, []) => {
                    token.fault = Some(fault.parse::<faultfs::Fault>().map_err(|e| bad(&e))?);
                    rest = &[];
                }
                (other, _) => return Err(bad(&format!("unexpected {other:?}"))),
            }
        }
        Ok(token)
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
    /// Images skipped: already judged against the same run elsewhere in the sweep.
    pub repeated: u64,
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
    /// Of each crash point's power-loss images, how many (the first ones: the durable state
    /// and the structured families come first) also get the deep treatment a kill gets: a
    /// power loss after their phase, and a crash at every op of it.
    pub deep_power_images: usize,
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
    /// Per scenario, power-loss crashes whose images were every subset of the pending pieces
    /// (exhaustive) and those that were families plus samples (sampled).
    pub enumeration: BTreeMap<String, Enumeration>,
    /// Images not judged again because the same image had already been judged against the
    /// same run (same content hash, same boot, same acknowledgements): the verdict would be
    /// the same.
    pub repeated: u64,
    /// (image, boot, run) digests already judged.
    judged: std::collections::HashSet<[u8; 32]>,
    /// Wall time.
    pub elapsed: Duration,
}

/// How one scenario's power-loss crashes were enumerated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Enumeration {
    /// Crashes whose every pending subset was an image.
    pub exhaustive: u64,
    /// Crashes with too many pending pieces: structured families and seeded samples.
    pub sampled: u64,
    /// The most pending pieces seen at one crash.
    pub pieces_max: usize,
}

impl Report {
    fn count_enumeration(&mut self, scenario: &Scenario, crash: &faultfs::CrashImages) {
        let entry = self.enumeration.entry(scenario.name.to_string()).or_default();
        if crash.exhaustive {
            entry.exhaustive += 1;
        } else {
            entry.sampled += 1;
        }
        entry.pieces_max = entry.pieces_max.max(crash.pending_pieces);
    }
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
                    token: token_base(scenario, seed, CrashMode::ProcessKill, fs.op_count(), 0),
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
    let run = execute(&fs, scenario, seed);
    report.crash_points += 1;
    let boundary = boundaries.get(k as usize).cloned().unwrap_or_else(|| "end".to_owned());
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
            token: token_base(scenario, seed, mode, k, 0),
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
                        token: token_base(scenario, seed, mode, k, index),
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
        for &second in &options.modes {
            let key = place.key(&format!("{}+{}", first.name(), second.name()), second);
            report.cells.entry(key.clone()).or_default().points += 1;
            let machines: Vec<(usize, SimFs)> = match second {
                CrashMode::ProcessKill => vec![(0, halted.fs.restart(FaultPlan::none(seed)))],
                CrashMode::PowerLoss => {
                    let crash = halted.fs.crash(second);
                    report.count_enumeration(scenario, &crash);
                    let run_digest = digest_of(&halted.run);
                    let mut machines = Vec::new();
                    for (index, image) in crash.images.iter().enumerate() {
                        if report.first_judgement(&key, image, &run_digest) {
                            machines.push((index, SimFs::from_image(image, FaultPlan::none(seed))));
                        }
                    }
                    machines
                }
            };
            for (index, machine) in machines {
                let token = Token { second: Some((second, j, index)), ..place.token.clone() };
                let messages = judge_last(machine, scenario, &halted.run, seed);
                record(report, &key, token, place, messages);
            }
        }
    }
}

/// A digest of everything a judgement of `run` depends on.
fn digest_of(run: &run::Execution) -> [u8; 32] {
    Sha256::digest(format!("{run:?}").as_bytes()).into()
}

impl Report {
    /// Whether `image` has not yet been judged against the run with digest `run`; marks it.
    fn first_judgement(&mut self, key: &CellKey, image: &faultfs::Image, run: &[u8; 32]) -> bool {
        let mut hasher = Sha256::new();
        hasher.update(image.hash());
        hasher.update(image.boot().to_le_bytes());
        hasher.update(run);
        let fresh = self.judged.insert(hasher.finalize().into());
        if !fresh {
            self.repeated += 1;
            self.cells.entry(key.clone()).or_default().repeated += 1;
        }
        fresh
    }
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

/// Injects `fault` at op `k`: the failing step must not be acknowledged and must poison its
/// session in that handle. Then the machine loses power right after the failure; and,
/// separately, a new process reopens the store, recovers, works, and the machine loses power
/// after that (a failed sync may have dropped data that reads still return).
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
    drop(store);
    let mut run = run;
    run.violations = common;
    // Power loss right after the failure (fsyncgate: dropped data is visible but not durable).
    let power = fs.crash(CrashMode::PowerLoss);
    report.count_enumeration(scenario, &power);
    let key =
        (scenario.name.to_string(), transition.clone(), boundary.clone(), CrashMode::PowerLoss);
    report.cells.entry(key.clone()).or_default().points += 1;
    for (image_index, image) in power.images.iter().enumerate() {
        let place = Place {
            scenario,
            transition: transition.clone(),
            boundary: boundary.clone(),
            token: Token {
                fault: Some(fault),
                ..token_base(scenario, seed, CrashMode::PowerLoss, k, image_index)
            },
        };
        judge_sequence(options, &run, Source::Reboot(image), &place, false, report);
    }
    // A new process reopens on what the failing one left, works, and the power goes.
    let key =
        (scenario.name.to_string(), transition.clone(), boundary.clone(), CrashMode::ProcessKill);
    report.cells.entry(key).or_default().points += 1;
    let place = Place {
        scenario,
        transition,
        boundary,
        token: Token {
            fault: Some(fault),
            ..token_base(scenario, seed, CrashMode::ProcessKill, k, usize::MAX)
        },
    };
    let depth2 = Options { depth2: false, ..options.clone() };
    judge_sequence(&depth2, &run, Source::Restart(&fs), &place, true, report);
}

fn token_base(scenario: &Scenario, seed: u64, mode: CrashMode, k: u64, image: usize) -> Token {
    Token {
        scenario: scenario.name.to_string(),
        seed,
        mode,
        k,
        image,
        second: None,
        then_power: None,
        fault: None,
    }
}

fn record(
    report: &mut Report,
    key: &CellKey,
    token: Token,
    place: &Place<'_>,
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
            transition: key.1.clone(),
            boundary: place.boundary.clone(),
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

/// Replays the one sequence a token names.
pub fn replay(token: &Token) -> Result<Replay, String> {
    let scenario = scenario::named(&token.scenario)
        .ok_or_else(|| format!("unknown scenario {:?}", token.scenario))?;
    let seed = token.seed;
    let plan = match token.fault {
        Some(fault) => FaultPlan::fault_at(seed, token.k, fault),
        None => FaultPlan::crash_at(seed, token.k),
    };
    let fs = SimFs::new(plan);
    let (mut run, store) = run::execute_with(&fs, &scenario, seed);
    drop(store);
    if token.fault.is_some() {
        // The checks of the failing handle itself are the sweep's; a replay judges what follows.
        run.violations.clear();
    }
    let trace = fs.trace();
    let boundary = trace
        .entries()
        .get(token.k as usize)
        .map_or_else(|| "end".to_owned(), |entry| entry.boundary.to_string());
    let mut hasher = Sha256::new();
    hasher.update(trace.hash_hex());
    let first_mode = if token.fault.is_some() && token.image == usize::MAX {
        CrashMode::ProcessKill
    } else {
        token.mode
    };
    let images;
    let source = match first_mode {
        CrashMode::ProcessKill => Source::Restart(&fs),
        CrashMode::PowerLoss => {
            images = fs.crash(CrashMode::PowerLoss).images;
            let image = images.get(token.image).ok_or_else(|| {
                format!("crash point {} has only {} images", token.k, images.len())
            })?;
            hasher.update(image.hash_hex());
            Source::Reboot(image)
        }
    };
    let mut messages = run.violations.clone();
    let (mut machine, mut judged) = (source.machine(FaultPlan::none(seed)), run.clone());
    if let Some((mode, j, index)) = token.second {
        let halted = match phase::check_image(
            source.machine(FaultPlan::crash_at(seed, j)),
            &scenario,
            &run,
            seed,
        ) {
            Err(halted) => halted,
            Ok(_) => return Err(format!("the phase after the crash has no op {j}")),
        };
        hasher.update(halted.fs.trace().hash_hex());
        machine = match mode {
            CrashMode::ProcessKill => halted.fs.restart(FaultPlan::none(seed)),
            CrashMode::PowerLoss => {
                let images = halted.fs.crash(mode).images;
                let image = images
                    .get(index)
                    .ok_or_else(|| format!("the second crash has only {} images", images.len()))?;
                hasher.update(image.hash_hex());
                SimFs::from_image(image, FaultPlan::none(seed))
            }
        };
        judged = *halted.run;
    }
    if let Some(index) = token.then_power {
        let checked = phase::check_image(machine.clone(), &scenario, &judged, seed)
            .map_err(|_| "the phase crashed without a planned fault".to_owned())?;
        hasher.update(machine.trace().hash_hex());
        let images = machine.crash(CrashMode::PowerLoss).images;
        let image = images.get(index).ok_or_else(|| {
            format!("the power loss after the phase has only {} images", images.len())
        })?;
        hasher.update(image.hash_hex());
        machine = SimFs::from_image(image, FaultPlan::none(seed));
        judged = checked.run;
    }
    messages.extend(judge_last(machine.clone(), &scenario, &judged, seed));
    hasher.update(machine.trace().hash_hex());
    Ok(Replay {
        messages,
        trace_hash: hex::encode(hasher.finalize()),
        boundary,
        trace: trace.to_string(),
    })
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
