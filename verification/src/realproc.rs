//! Real-process crash sweeps: the real `spex` binary on a real directory, killed for real.
//!
//! The child (`spex verify run-scenario`) runs a scenario through `KillFs` over `RealFs`: it
//! aborts itself before mutating op `k` (`SPEX_KILL_AT`), or it is killed with SIGKILL from
//! outside at a seeded random moment (the soak). It journals, outside the store, each step it
//! begins, each adapter delivery the moment it happens, each answer, and the segments after each
//! acknowledged step. The parent rebuilds from the journal exactly what was acknowledged, then
//! recovers the real directory with the engine and applies the same oracle as the simulated
//! sweep (see `sweep::check`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use faultfs::{KILL_AT_ENV, KILL_TRACE_ENV, KillFs, RealFs};
use serde::{Deserialize, Serialize};
use spex_engine::Store;

use crate::sweep::phase;
use crate::sweep::run::{self, Answer, Execution, SegmentSnapshot};
use crate::sweep::scenario::{self, Scenario};

/// One journal line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Entry {
    Begin(usize),
    Deliver(String),
    Answer(usize, Answer),
    Segments(Vec<(String, u64, String, bool)>),
}

fn journal_line(file: &mut std::fs::File, entry: &Entry) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
    line.push(b'\n');
    // One write per line on an O_APPEND file: a kill can cut the journal only between lines.
    file.write_all(&line)
}

/// The child side: runs `scenario` on `root` through `KillFs::from_env(RealFs)`, journaling to
/// `journal`.
pub fn run_child(
    scenario: &Scenario,
    root: &Path,
    seed: u64,
    journal: &Path,
) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(journal)
        .map_err(|error| format!("journal {}: {error}", journal.display()))?;
    let fs = KillFs::from_env(RealFs::new())?;
    let store =
        open_store(fs, scenario, seed, 0, root).map_err(|error| format!("open: {error}"))?;
    for (index, step) in scenario.steps.iter().enumerate() {
        journal_line(&mut file, &Entry::Begin(index)).map_err(|e| e.to_string())?;
        let mut delivered = Vec::new();
        let mut violations = Vec::new();
        let mut delivery_file = file.try_clone().map_err(|error| format!("journal: {error}"))?;
        let mut journal_delivery = |mid: &str| {
            // Journaled before the engine hears the adapter accepted: a kill after this line
            // leaves a delivery the oracle knows about. A journal that cannot be written shows
            // up as an acceptance violation, never as silence.
            let _ = journal_line(&mut delivery_file, &Entry::Deliver(mid.to_owned()));
        };
        let answer = run::perform(
            &store,
            step,
            &mut delivered,
            &mut violations,
            Some(&mut journal_delivery),
        )
        .map_err(|error| format!("step {index}: {error}"))?;
        if !violations.is_empty() {
            return Err(violations.join("; "));
        }
        journal_line(&mut file, &Entry::Answer(index, answer)).map_err(|e| e.to_string())?;
        let segments = read_segments(root)
            .into_iter()
            .map(|(path, snapshot)| (path, snapshot.len, snapshot.sha256, snapshot.newest))
            .collect();
        journal_line(&mut file, &Entry::Segments(segments)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Opens the store at `root` as process `boot` of a run (0: the child that gets killed; 1: the
/// checker after it): each draws ids of its own, as real v4 ids never collide.
fn open_store<F: faultfs::Fs>(
    fs: F,
    scenario: &Scenario,
    seed: u64,
    boot: u64,
    root: &Path,
) -> spex_engine::Result<Store<F>> {
    let config = run::config(scenario);
    let ids = run::ids_seed(seed, boot);
    Store::open(
        fs,
        root,
        std::sync::Arc::new(spex_engine::env::SystemClock),
        std::sync::Arc::new(spex_engine::env::SeededIds::new(ids)),
        config,
    )
}

/// Snapshots of every numbered segment under `root`.
fn read_segments(root: &Path) -> std::collections::BTreeMap<String, SegmentSnapshot> {
    let mut files = Vec::new();
    if let Ok(sessions) = std::fs::read_dir(root.join("sessions")) {
        for session in sessions.flatten() {
            let timeline = session.path().join("timeline");
            if let Ok(segments) = std::fs::read_dir(&timeline) {
                for segment in segments.flatten() {
                    if let (Ok(bytes), Ok(relative)) =
                        (std::fs::read(segment.path()), segment.path().strip_prefix(root))
                    {
                        files.push((relative.to_string_lossy().into_owned(), bytes));
                    }
                }
            }
        }
    }
    run::snapshot_of(files)
}

/// Rebuilds what was acknowledged from a journal.
fn replay_journal(scenario: &Scenario, text: &str) -> Result<Execution, String> {
    let mut execution = Execution::default();
    let mut open_step: Option<usize> = None;
    for line in text.lines() {
        let entry: Entry = match serde_json::from_str(line) {
            Ok(entry) => entry,
            Err(error) => return Err(format!("journal line {line:?}: {error}")),
        };
        match entry {
            Entry::Begin(index) => {
                run::begin(&mut execution, &scenario.steps[index]);
                open_step = Some(index);
            }
            Entry::Deliver(mid) => execution.delivered.push(mid),
            Entry::Answer(index, answer) => {
                run::advance(&mut execution, &scenario.steps[index], &answer);
                open_step = None;
            }
            Entry::Segments(segments) => {
                execution.segments = segments
                    .into_iter()
                    .map(|(path, len, sha256, newest)| {
                        (path, SegmentSnapshot { len, sha256, newest })
                    })
                    .collect();
            }
        }
    }
    if let Some(index) = open_step {
        run::interrupt(&mut execution, index, &scenario.steps[index]);
    }
    Ok(execution)
}

/// How a child was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// Not at all (it ran to the end).
    None,
    /// It aborted itself before mutating op `k`.
    AtOp(u64),
    /// SIGKILL from outside after this delay.
    After(Duration),
}

/// One real-process run and its verdict.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// How it was stopped.
    pub kill: Kill,
    /// Whether the process actually died (rather than finishing first).
    pub died: bool,
    /// What the oracle found.
    pub violations: Vec<String>,
}

/// Runs the child once in a fresh directory under `work`, stops it per `kill`, recovers and
/// checks.
pub fn run_once(
    binary: &Path,
    scenario: &Scenario,
    seed: u64,
    kill: Kill,
    work: &Path,
) -> Result<Outcome, String> {
    let root = work.join("root");
    let journal = work.join("journal");
    let mut command = Command::new(binary);
    command
        .args(["verify", "run-scenario", "--scenario", &scenario.name, "--seed", &seed.to_string()])
        .arg("--root")
        .arg(&root)
        .arg("--journal")
        .arg(&journal)
        .env_remove(KILL_AT_ENV)
        .env_remove(KILL_TRACE_ENV)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if let Kill::AtOp(k) = kill {
        command.env(KILL_AT_ENV, k.to_string());
    }
    let mut child =
        command.spawn().map_err(|error| format!("spawn {}: {error}", binary.display()))?;
    if let Kill::After(delay) = kill {
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL; it may have finished already
    }
    let output = child.wait_with_output().map_err(|error| error.to_string())?;
    use std::os::unix::process::ExitStatusExt;
    let died = output.status.signal().is_some();
    if !died && !output.status.success() {
        return Err(format!(
            "the child failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let text = std::fs::read_to_string(&journal).unwrap_or_default();
    let execution = replay_journal(scenario, &text)?;
    let mut violations = execution.violations.clone();
    match open_store(RealFs::new(), scenario, seed, 1, &root) {
        Err(error) => violations.push(format!("the recovered store does not open: {error}")),
        Ok(store) => violations.extend(phase::check_store(&store, scenario, &execution).0),
    }
    Ok(Outcome { kill, died, violations })
}

/// Counts the mutating ops of a full run of `scenario` (pass 1).
pub fn count_ops(
    binary: &Path,
    scenario: &Scenario,
    seed: u64,
    work: &Path,
) -> Result<u64, String> {
    let trace = work.join("trace");
    let status = Command::new(binary)
        .args(["verify", "run-scenario", "--scenario", &scenario.name, "--seed", &seed.to_string()])
        .arg("--root")
        .arg(work.join("root"))
        .arg("--journal")
        .arg(work.join("journal"))
        .env(KILL_TRACE_ENV, &trace)
        .env_remove(KILL_AT_ENV)
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|error| error.to_string())?;
    if !status.success() {
        return Err(format!("pass 1 of {} failed: {status}", scenario.name));
    }
    Ok(std::fs::read_to_string(trace).map_err(|e| e.to_string())?.lines().count() as u64)
}

/// A violation of a real-process run, with the command that reproduces it.
#[derive(Clone, Debug)]
pub struct RealViolation {
    /// The scenario.
    pub scenario: String,
    /// How the child was stopped.
    pub kill: Kill,
    /// What was wrong.
    pub messages: Vec<String>,
    /// The command that reruns exactly this kill.
    pub replay: String,
}

/// The result of a real-process sweep.
#[derive(Clone, Debug, Default)]
pub struct RealReport {
    /// Runs made.
    pub runs: u64,
    /// Runs in which the child really died mid-way.
    pub kills: u64,
    /// Violations.
    pub violations: Vec<RealViolation>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Kills the child before every op of every scenario, then `soak` more times with SIGKILL at
/// seeded random moments; checks each recovered directory.
pub fn sweep(
    binary: &Path,
    scenarios: &[Scenario],
    seed: u64,
    soak: u64,
    scratch: &Path,
    progress: &mut dyn FnMut(RealProgress),
) -> Result<RealReport, String> {
    let started = Instant::now();
    let mut report = RealReport::default();
    let mut run_dir = 0u64;
    let mut fresh = || -> Result<PathBuf, String> {
        run_dir += 1;
        let dir = scratch.join(format!("run-{run_dir}"));
        std::fs::create_dir_all(&dir).map_err(|error| error.to_string())?;
        Ok(dir)
    };
    let mut full_run_ms = Vec::new();
    for scenario in scenarios {
        let counting = fresh()?;
        let timer = Instant::now();
        let ops = count_ops(binary, scenario, seed, &counting)?;
        full_run_ms.push((scenario.clone(), timer.elapsed()));
        for k in 0..=ops {
            progress(RealProgress {
                scenario: scenario.name.to_string(),
                done: k,
                total: ops + 1,
                violations: report.violations.len(),
            });
            let outcome = run_once(binary, scenario, seed, Kill::AtOp(k), &fresh()?)?;
            tally(&mut report, scenario, seed, outcome, binary);
        }
    }
    let mut state = seed ^ 0x50A4;
    for iteration in 0..soak {
        // xorshift: a seeded, printed sequence of (scenario, delay) choices.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let (scenario, full) = &full_run_ms[(state % full_run_ms.len() as u64) as usize];
        let delay = Duration::from_micros((state >> 16) % (full.as_micros() as u64).max(1));
        progress(RealProgress {
            scenario: "soak".to_owned(),
            done: iteration,
            total: soak,
            violations: report.violations.len(),
        });
        let outcome = run_once(binary, scenario, seed, Kill::After(delay), &fresh()?)?;
        tally(&mut report, scenario, seed, outcome, binary);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Where a real sweep is, for a progress bar: runs done of a phase (one scenario's kills at each
/// boundary, then the soak).
#[derive(Clone, Debug)]
pub struct RealProgress {
    /// The scenario whose boundaries are being killed, or `soak`.
    pub scenario: String,
    /// Runs done in this phase.
    pub done: u64,
    /// Runs in this phase.
    pub total: u64,
    /// Violations so far.
    pub violations: usize,
}

fn tally(report: &mut RealReport, scenario: &Scenario, seed: u64, outcome: Outcome, binary: &Path) {
    report.runs += 1;
    if outcome.died {
        report.kills += 1;
    }
    if !outcome.violations.is_empty() {
        let replay = match outcome.kill {
            Kill::AtOp(k) => format!(
                "{} verify real-sweep --scenario {} --seed {seed} --kill-at {k}",
                binary.display(),
                scenario.name
            ),
            Kill::After(delay) => format!(
                "{} verify real-sweep --scenario {} --seed {seed} --kill-after-us {}",
                binary.display(),
                scenario.name,
                delay.as_micros()
            ),
            Kill::None => format!(
                "{} verify real-sweep --scenario {} --seed {seed}",
                binary.display(),
                scenario.name
            ),
        };
        report.violations.push(RealViolation {
            scenario: scenario.name.to_string(),
            kill: outcome.kill,
            messages: outcome.violations,
            replay,
        });
    }
}

/// The scenario called `name`, or an error listing the names.
pub fn scenario_named(name: &str) -> Result<Scenario, String> {
    scenario::named(name).ok_or_else(|| {
        let names: Vec<String> = scenario::all().iter().map(|s| s.name.to_string()).collect();
        format!("unknown scenario {name:?} (expected one of: {})", names.join(", "))
    })
}
