//! Execution records: what every harness run of a session did, and the live signals its hooks
//! reported (DESIGN.md section 10).
//!
//! # Format
//!
//! `<root>/runs/<id>.ndjson`, one JSON object per line, `\n`-terminated, append-only:
//!
//! ```text
//! {"kind":"start","ts":"..","at_ms":..,"run":"<uuid>","harness":"claude","purpose":"turn","mid":"..","command":[..],"native_id":null}
//! {"kind":"process","ts":"..","at_ms":..,"run":"<uuid>","pid":4242,"pid_start_ms":..}
//! {"kind":"hook","ts":"..","at_ms":..,"run":"<uuid>","harness":"claude","event":"Stop","native_id":".."}
//! {"kind":"end","ts":"..","at_ms":..,"run":"<uuid>","outcome":"ok","exit_code":0,"native_id":"..","usage":{..},"error":null,"stderr_tail":[..]}
//! ```
//!
//! A run's `start` is written (and synced) before its process is spawned, so a run that failed
//! before the harness created a conversation (a command not found, a model server down) is
//! still listed; `process` names the process once it exists (pid and start time, so a reused pid
//! is never taken for it); `end` closes the run. `hook` lines come from the harness's hooks,
//! in processes of their own, whenever the harness calls them.
//!
//! # Writers and crash story
//!
//! Two kinds of writer append to one file: the drainer (which holds the session's delivery lock,
//! so one at a time) and hook processes. Each append takes the file's advisory lock, writes one
//! whole line at the end, syncs it and releases the lock, so lines never interleave. A crash
//! leaves at most a torn last line, which readers skip (and the next append starts on a fresh
//! line after it, so the torn bytes stay one unreadable line, never a merged one). A run whose
//! `end` is missing reads as still running while its process lives and as `interrupted` once it
//! is gone. The file is derived from no other state and nothing else is derived from it: losing
//! it loses the history of runs, never a message.
//!
//! # Reconciliation
//!
//! Readers fold the lines of a run in any arrival order: every field is taken from the richest
//! line that has it (`end` over `bound` over `hook` over `process` over `start`), and a later partial line
//! never clears what an earlier one set. Between lines of the same rank the first in the file
//! wins: a terminal UI's side threads (Codex runs a title or a summary as threads of their own)
//! report their ids through the same hook after the conversation's own.

use std::collections::HashMap;
use std::path::PathBuf;

use faultfs::{Boundary, File as _, FileKind, Fs, OpenOptions};
use serde::{Deserialize, Serialize};

use crate::env::{Clock, UnixMs};
use crate::error::{Error, Result};
use crate::layout::{Layout, SessionId, expect_kind};
use crate::timeline::{Status, Triple};

const OPEN: Boundary = Boundary::new("runs.open");
const MKDIR: Boundary = Boundary::new("runs.mkdir");
const MKDIR_SYNC: Boundary = Boundary::new("runs.mkdir-sync");
const CREATE_SYNC: Boundary = Boundary::new("runs.create-dirsync");
const APPEND: Boundary = Boundary::new("runs.append");
const SYNC: Boundary = Boundary::new("runs.sync");

/// How long an append waits for another writer's lock before giving up.
pub const APPEND_WAIT_MS: u64 = 5_000;

/// The most stderr lines a run keeps.
pub const STDERR_TAIL_LINES: usize = 20;

/// Token usage a run reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// One line of a run log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RunLine {
    /// A run is about to start (written before its process is spawned).
    Start {
        /// When (ISO-8601 UTC, ms).
        ts: String,
        /// When (epoch ms).
        at_ms: UnixMs,
        /// The run id.
        run: String,
        /// `claude`, `codex`.
        harness: String,
        /// `launch` or `turn`.
        purpose: String,
        /// The message this run delivers, if any.
        mid: Option<String>,
        /// The command line, with the prompt and any secret replaced by placeholders.
        command: Vec<String>,
        /// The native session id the run continues or was told to take, if known.
        native_id: Option<String>,
    },
    /// The run's process exists.
    Process {
        /// When.
        ts: String,
        /// When (epoch ms).
        at_ms: UnixMs,
        /// The run id.
        run: String,
        /// Its pid.
        pid: u32,
        /// Its start time (epoch ms), to tell it from a later process with the same pid.
        pid_start_ms: Option<u64>,
    },
    /// A harness hook reported a signal.
    Hook {
        /// When.
        ts: String,
        /// When (epoch ms).
        at_ms: UnixMs,
        /// The run the hook's process belongs to, if it knew (`SPEX_RUN_ID`).
        run: Option<String>,
        /// `claude`, `codex`.
        harness: String,
        /// The hook's event (`SessionStart`, `UserPromptSubmit`, `Stop`, `agent-turn-complete`).
        event: String,
        /// The native session id the hook reported.
        native_id: Option<String>,
    },
    /// spex learned the run's native session id from the harness's transcript (a terminal UI
    /// reports no id of its own when it starts): richer than any hook's report.
    Bound {
        /// When.
        ts: String,
        /// When (epoch ms).
        at_ms: UnixMs,
        /// The run id.
        run: String,
        /// The native session id.
        native_id: String,
    },
    /// The run ended.
    End {
        /// When.
        ts: String,
        /// When (epoch ms).
        at_ms: UnixMs,
        /// The run id.
        run: String,
        /// How it ended: `ok`, `failed`, `timeout` or `stopped`.
        outcome: Outcome,
        /// The exit code, if the process exited.
        exit_code: Option<i32>,
        /// The signal that ended it, if one did.
        signal: Option<i32>,
        /// The native session id the run reported.
        native_id: Option<String>,
        /// Token usage, if the harness reported it.
        usage: Option<Usage>,
        /// Why it failed.
        error: Option<String>,
        /// The last lines of its stderr.
        stderr_tail: Vec<String>,
    },
}

impl RunLine {
    fn run(&self) -> Option<&str> {
        let run = match self {
            RunLine::Start { run, .. }
            | RunLine::Process { run, .. }
            | RunLine::Bound { run, .. }
            | RunLine::End { run, .. } => Some(run.as_str()),
            RunLine::Hook { run, .. } => run.as_deref(),
        };
        debug_assert!(
            run.is_some() || matches!(self, RunLine::Hook { .. }),
            "only a hook may be unowned"
        );
        run
    }
}

/// How a run stands: the word an `end` line writes (`ok`, `failed`, `timeout`, `stopped`), or,
/// for a run with no end, whether its process lives (`running`, `interrupted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// No end yet, and its process is alive.
    Running,
    /// No end, and its process is gone (spex or the machine died during the run).
    Interrupted,
    /// Ended: the harness accepted the turn.
    Ok,
    /// Ended: failed (a non-zero exit, an error reported).
    Failed,
    /// Ended: ran past its timeout and was stopped.
    Timeout,
    /// Ended: a person stopped the turn (`spex session interrupt`); the message counts as
    /// delivered.
    Stopped,
}

impl Outcome {
    /// The word listings show (and an `end` line writes).
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Interrupted => "interrupted",
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Timeout => "timeout",
            Outcome::Stopped => "stopped",
        }
    }

    /// Whether the run did not do what it was for: it failed, timed out, or was cut off.
    pub const fn unsuccessful(self) -> bool {
        matches!(self, Outcome::Failed | Outcome::Timeout | Outcome::Interrupted)
    }
}

/// A hook signal, folded into its run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    /// When (epoch ms).
    pub at_ms: UnixMs,
    /// The event.
    pub event: String,
}

/// One run, folded from its lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The run id.
    pub run: String,
    /// The session.
    pub session: String,
    /// The harness.
    pub harness: String,
    /// `launch` or `turn`.
    pub purpose: String,
    /// The message delivered.
    pub mid: Option<String>,
    /// The command line (no prompt, no secret).
    pub command: Vec<String>,
    /// Start (ISO) and epoch ms.
    pub started: Option<(String, UnixMs)>,
    /// The process and its start time.
    pub pid: Option<(u32, Option<u64>)>,
    /// End (ISO) and epoch ms.
    pub ended: Option<(String, UnixMs)>,
    /// How it ended, or how it stands.
    pub outcome: Outcome,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Signal.
    pub signal: Option<i32>,
    /// The native session id (the richest report of it).
    pub native_id: Option<String>,
    /// Usage.
    pub usage: Option<Usage>,
    /// Why it failed.
    pub error: Option<String>,
    /// Last stderr lines.
    pub stderr_tail: Vec<String>,
    /// Hook signals, in arrival order.
    pub signals: Vec<Signal>,
}

impl Run {
    /// A run known only by its id, until its lines say more.
    fn new(run: &str, session: &str) -> Run {
        debug_assert!(!run.is_empty(), "a run has an id");
        Run {
            run: run.to_owned(),
            session: session.to_owned(),
            harness: String::new(),
            purpose: String::new(),
            mid: None,
            command: Vec::new(),
            started: None,
            pid: None,
            ended: None,
            outcome: Outcome::Interrupted,
            exit_code: None,
            signal: None,
            native_id: None,
            usage: None,
            error: None,
            stderr_tail: Vec::new(),
            signals: Vec::new(),
        }
    }

    /// Milliseconds from start to end, when both are known.
    pub fn duration_ms(&self) -> Option<u64> {
        Some(self.ended.as_ref()?.1.saturating_sub(self.started.as_ref()?.1))
    }

    /// Whether the hooks say the turn finished (a `Stop` or a turn-complete after the last
    /// prompt).
    pub fn turn_finished_by_hooks(&self) -> bool {
        let last_prompt = self.signals.iter().rposition(|signal| is_prompt(&signal.event));
        let last_stop = self.signals.iter().rposition(|signal| is_stop(&signal.event));
        debug_assert!(
            last_prompt.is_none() || last_prompt != last_stop,
            "no signal both prompts and stops"
        );
        match (last_prompt, last_stop) {
            (Some(prompt), Some(stop)) => stop > prompt,
            (None, Some(_)) => true,
            _ => false,
        }
    }
}

fn is_prompt(event: &str) -> bool {
    let prompt = event == "UserPromptSubmit";
    debug_assert!(!(prompt && is_stop(event)), "a prompt is no stop");
    prompt
}

fn is_stop(event: &str) -> bool {
    matches!(event, "Stop" | "agent-turn-complete")
}

/// `<root>/runs`.
pub fn runs_dir(layout: &Layout) -> PathBuf {
    let dir = layout.root().join("runs");
    debug_assert!(!dir.starts_with(layout.sessions_dir()), "runs outlive their sessions");
    dir
}

/// `<root>/runs/<id>.ndjson`.
pub fn run_log(layout: &Layout, id: &SessionId) -> PathBuf {
    let dir = runs_dir(layout);
    let log = dir.join(format!("{}.ndjson", id.as_str()));
    debug_assert_eq!(log.parent(), Some(dir.as_path()), "a run log is one name in runs/");
    log
}

/// Appends `line` to session `id`'s run log (see the module header): under the file's lock, one
/// whole line, synced. Waits at most [`APPEND_WAIT_MS`] for another writer.
pub fn append<F: Fs>(
    fs: &F,
    clock: &dyn Clock,
    layout: &Layout,
    id: &SessionId,
    line: &RunLine,
) -> Result<()> {
    let dir = runs_dir(layout);
    // Neither may be a link or a special file (a FIFO would block the open).
    if !expect_kind(fs, &dir, FileKind::Dir)? {
        match fs.create_dir(&dir, MKDIR) {
            Ok(()) => fs.sync_dir(layout.root(), MKDIR_SYNC)?,
            // Another writer made it first.
            Err(_) if fs.exists(&dir)? => {}
            Err(error) => return Err(error.into()),
        }
    }
    let path = run_log(layout, id);
    let created = !expect_kind(fs, &path, FileKind::File)?;
    let file = fs.open(&path, OpenOptions::create(), OPEN)?;
    if created {
        fs.sync_dir(&dir, CREATE_SYNC)?;
    }
    let mut waited = 0;
    while !file.try_lock()? {
        if waited >= APPEND_WAIT_MS {
            return Err(Error::Locked { path, holder: None, waited_ms: waited });
        }
        clock.sleep_ms(10);
        waited += 10;
    }
    let mut bytes = serde_json::to_vec(line)
        .map_err(|error| Error::InvalidInput { what: "run line", reason: error.to_string() })?;
    debug_assert!(!bytes.contains(&b'\n'), "JSON escapes newlines: a run line is one line");
    bytes.push(b'\n');
    // A torn line left by a crash ends without a newline: start on a fresh line after it.
    let len = file.len()?;
    if len > 0 {
        let mut last = [0u8; 1];
        file.read_full_at(len - 1, &mut last)?;
        if last[0] != b'\n' {
            bytes.insert(0, b'\n');
        }
    }
    let result = file.append(&bytes, APPEND).and_then(|()| file.sync_data(SYNC));
    debug_assert!(
        result.is_err() || file.len().is_ok_and(|grown| grown >= len + bytes.len() as u64),
        "a run line appended is in the log"
    );
    let _unlocked = file.unlock();
    Ok(result?)
}

/// Reads session `id`'s run log: its lines in order, and how many were unreadable (a torn last
/// line, a damaged one). No log reads as no lines; a link or a special file in its place is
/// corrupt (never followed, never opened).
pub fn read<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<(Vec<RunLine>, usize)> {
    let path = run_log(layout, id);
    if !expect_kind(fs, &path, FileKind::File)? {
        return Ok((Vec::new(), 0));
    }
    let bytes = fs.read(&path)?;
    let mut lines = Vec::new();
    let mut unreadable = 0;
    // Up to and including the last newline: what follows it is a torn line.
    let complete_len = bytes.iter().rposition(|byte| *byte == b'\n').map_or(0, |end| end + 1);
    let complete = bytes.get(..complete_len).unwrap_or_default();
    for raw in complete.split(|byte| *byte == b'\n') {
        if raw.is_empty() {
            continue;
        }
        match serde_json::from_slice::<RunLine>(raw) {
            Ok(line) => lines.push(line),
            Err(_) => unreadable += 1,
        }
    }
    if complete.len() < bytes.len() {
        unreadable += 1;
    }
    debug_assert!(
        lines.len() + unreadable <= bytes.iter().filter(|byte| **byte == b'\n').count() + 1,
        "at most one reading per line"
    );
    Ok((lines, unreadable))
}

/// Folds lines into runs, in order of their first line (see the module header). `alive` tells
/// whether a process (pid, start time) still runs. Hook lines that name no run attach to the
/// newest run started before them. One pass: linear in the lines.
pub fn fold(
    session: &str,
    lines: &[RunLine],
    alive: &dyn Fn(u32, Option<u64>) -> bool,
) -> Vec<Run> {
    let mut folding: Vec<Folding> = Vec::new();
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for line in lines {
        let index = match line.run() {
            Some(id) => *by_id.entry(id).or_insert_with(|| {
                folding.push(Folding { run: Run::new(id, session), rank: 0, ended: false });
                folding.len() - 1
            }),
            None => match folding.len() {
                0 => continue,
                len => len - 1,
            },
        };
        let Some(run) = folding.get_mut(index) else { continue };
        run.take(line);
    }
    debug_assert_eq!(by_id.len(), folding.len(), "one run per id, in order of its first line");
    folding
        .into_iter()
        .map(|Folding { mut run, ended, .. }| {
            if !ended {
                run.outcome = match run.pid {
                    Some((pid, start)) if alive(pid, start) => Outcome::Running,
                    _ => Outcome::Interrupted,
                };
            }
            debug_assert!(
                ended != matches!(run.outcome, Outcome::Running | Outcome::Interrupted),
                "a run that ended says how; one that did not is running or interrupted"
            );
            run
        })
        .collect()
}

/// A run being folded: the run, the rank of its native id's source (end 4, bound 3, hook 2,
/// start 1), and whether an end was seen.
struct Folding {
    run: Run,
    rank: u8,
    ended: bool,
}

impl Folding {
    /// Takes what `line` says of the run (see the module header for which line wins).
    fn take(&mut self, line: &RunLine) {
        let Folding { run, rank, ended } = self;
        debug_assert!(*rank <= 4, "a native id's source ranks 0 to 4");
        let mut offer = |native: Option<&str>, source: u8, run: &mut Run| {
            if let Some(native) = native.filter(|native| !native.is_empty())
                && (source > *rank || run.native_id.is_none())
            {
                run.native_id = Some(native.to_owned());
                *rank = source;
            }
        };
        match line {
            RunLine::Start { ts, at_ms, harness, purpose, mid, command, native_id, .. } => {
                run.started = Some((ts.clone(), *at_ms));
                run.harness.clone_from(harness);
                run.purpose.clone_from(purpose);
                run.mid.clone_from(mid);
                run.command.clone_from(command);
                offer(native_id.as_deref(), 1, run);
            }
            RunLine::Process { pid, pid_start_ms, .. } => {
                run.pid = Some((*pid, *pid_start_ms));
            }
            RunLine::Hook { at_ms, harness, event, native_id, .. } => {
                if run.harness.is_empty() {
                    run.harness.clone_from(harness);
                }
                run.signals.push(Signal { at_ms: *at_ms, event: event.clone() });
                offer(native_id.as_deref(), 2, run);
            }
            RunLine::Bound { native_id, .. } => offer(Some(native_id), 3, run),
            RunLine::End {
                ts,
                at_ms,
                outcome,
                exit_code,
                signal,
                native_id,
                usage,
                error,
                stderr_tail,
                ..
            } => {
                *ended = true;
                run.ended = Some((ts.clone(), *at_ms));
                // An end claims how the run ended; one claiming it is still going is wrong.
                run.outcome = match outcome {
                    Outcome::Running | Outcome::Interrupted => Outcome::Failed,
                    said => *said,
                };
                run.exit_code = *exit_code;
                run.signal = *signal;
                run.usage = *usage;
                run.error.clone_from(error);
                run.stderr_tail.clone_from(stderr_tail);
                offer(native_id.as_deref(), 4, run);
            }
        }
    }
}

/// Whether process `pid`, started at `start_ms` (when known), still runs, as `fs` sees it.
pub fn process_alive<F: Fs>(fs: &F, pid: u32, start_ms: Option<u64>) -> bool {
    match (fs.process_start_ms(pid), start_ms) {
        (Ok(Some(now)), Some(then)) => now.abs_diff(then) <= 1_000,
        (Ok(Some(_)), None) => true,
        _ => false,
    }
}

/// A session's progress, derived from its runs, their hook signals and its declared state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A run's process is alive and its turn has not finished.
    Running,
    /// The agent asked, parked, or its terminal waits for the next prompt.
    WaitingForInput,
    /// The last turn ended and the agent declared nothing final.
    IdleUnfinished,
    /// The process died in the middle of a turn.
    Crashed,
    /// The agent declared the work done.
    Finished,
    /// The last run failed (the message it carried stays owed).
    Failed,
    /// A signal needed to say more is missing.
    Unknown(String),
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Running => f.write_str("running"),
            Progress::WaitingForInput => f.write_str("waiting for input"),
            Progress::IdleUnfinished => f.write_str("idle unfinished"),
            Progress::Crashed => f.write_str("crashed"),
            Progress::Finished => f.write_str("finished"),
            Progress::Failed => f.write_str("failed"),
            Progress::Unknown(missing) => write!(f, "unknown ({missing})"),
        }
    }
}

/// The progress of a session whose runs are `runs` (oldest first) and whose declared triple is
/// `declared`.
pub fn progress(runs: &[Run], declared: &Triple) -> Progress {
    let Some(last) = runs.last() else {
        return Progress::Unknown("no run recorded".to_owned());
    };
    debug_assert!(
        runs.iter().all(|run| run.session == last.session),
        "a session's progress comes from its own runs"
    );

    let settled = || match declared.status {
        Status::Awaiting => Progress::Finished,
        Status::Asking | Status::Parked => Progress::WaitingForInput,
        Status::Error => Progress::Failed,
        _ => Progress::IdleUnfinished,
    };
    let prompted = last.signals.iter().any(|signal| is_prompt(&signal.event));
    match last.outcome {
        // A terminal UI (a launch that carries no message) between turns, or before its first.
        Outcome::Running if last.mid.is_none() && !prompted && !last.turn_finished_by_hooks() => {
            if last.signals.iter().any(|signal| signal.event == "SessionStart") {
                Progress::WaitingForInput
            } else {
                Progress::Unknown("no hook signal from the terminal UI yet".to_owned())
            }
        }
        Outcome::Running if last.turn_finished_by_hooks() => Progress::WaitingForInput,
        Outcome::Running => Progress::Running,
        Outcome::Ok | Outcome::Stopped => settled(),
        Outcome::Failed | Outcome::Timeout => Progress::Failed,
        Outcome::Interrupted if last.pid.is_none() => {
            Progress::Unknown(format!("no process recorded for run {}", last.run))
        }
        Outcome::Interrupted if last.turn_finished_by_hooks() => settled(),
        Outcome::Interrupted => Progress::Crashed,
    }
}

/// Session `id`'s runs, folded, with their liveness as `fs` sees it, and the count of unreadable
/// lines.
pub fn runs<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<(Vec<Run>, usize)> {
    let (lines, unreadable) = read(fs, layout, id)?;
    let alive = |pid, start| process_alive(fs, pid, start);
    let runs = fold(id.as_str(), &lines, &alive);
    debug_assert!(runs.len() <= lines.len(), "a run has at least one line");
    debug_assert!(
        runs.iter().all(|run| run.session == id.as_str()),
        "a session's runs are its own"
    );
    Ok((runs, unreadable))
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests: an index out of bounds fails the test")]
mod tests {
    use super::*;
    use crate::timeline::Proposal;

    fn start(run: &str, native: Option<&str>) -> RunLine {
        RunLine::Start {
            ts: "t".into(),
            at_ms: 1,
            run: run.into(),
            harness: "claude".into(),
            purpose: "turn".into(),
            mid: Some("m".into()),
            command: vec!["claude".into()],
            native_id: native.map(str::to_owned),
        }
    }

    fn hook(run: &str, event: &str, native: Option<&str>) -> RunLine {
        RunLine::Hook {
            ts: "t".into(),
            at_ms: 2,
            run: Some(run.into()),
            harness: "claude".into(),
            event: event.into(),
            native_id: native.map(str::to_owned),
        }
    }

    fn process(run: &str) -> RunLine {
        RunLine::Process {
            ts: "t".into(),
            at_ms: 2,
            run: run.into(),
            pid: 7,
            pid_start_ms: Some(5),
        }
    }

    fn end(run: &str, outcome: Outcome, native: Option<&str>) -> RunLine {
        RunLine::End {
            ts: "t".into(),
            at_ms: 9,
            run: run.into(),
            outcome,
            exit_code: Some(0),
            signal: None,
            native_id: native.map(str::to_owned),
            usage: Some(Usage { input_tokens: 3, output_tokens: 4 }),
            error: None,
            stderr_tail: Vec::new(),
        }
    }

    fn triple(status: Status) -> Triple {
        Triple {
            status,
            proposal: (status == Status::Awaiting).then_some(Proposal::Merge),
            note: None,
        }
    }

    #[test]
    fn the_richest_identity_wins_in_any_arrival_order() {
        let lines =
            [start("r", Some("chosen")), process("r"), hook("r", "SessionStart", Some("hooked"))];
        let dead = |_, _| false;
        let mut orders = vec![lines.to_vec()];
        orders.push(lines.iter().rev().cloned().collect());
        orders.push(vec![lines[2].clone(), lines[0].clone(), lines[1].clone()]);
        for order in &orders {
            let runs = fold("s", order, &dead);
            assert_eq!(runs.len(), 1);
            assert_eq!(runs[0].native_id.as_deref(), Some("hooked"), "{order:?}");
            assert_eq!(runs[0].pid, Some((7, Some(5))));
        }
        // The end's report is the richest; an earlier partial line never clears it.
        let mut order =
            vec![end("r", Outcome::Ok, Some("final")), start("r", None), hook("r", "Stop", None)];
        let runs = fold("s", &order, &dead);
        assert_eq!(runs[0].native_id.as_deref(), Some("final"));
        order.reverse();
        assert_eq!(fold("s", &order, &dead)[0].native_id.as_deref(), Some("final"));
    }

    #[test]
    fn progress_comes_from_signals_never_a_guess() {
        let alive = |_, _| true;
        let dead = |_, _| false;
        let active = triple(Status::Active);
        assert_eq!(progress(&[], &active), Progress::Unknown("no run recorded".into()));
        let running = fold("s", &[start("r", None), process("r")], &alive);
        assert_eq!(progress(&running, &active), Progress::Running);
        let crashed = fold("s", &[start("r", None), process("r")], &dead);
        assert_eq!(crashed[0].outcome, Outcome::Interrupted);
        assert_eq!(progress(&crashed, &active), Progress::Crashed);
        let no_process = fold("s", &[start("r", None)], &dead);
        assert!(matches!(progress(&no_process, &active), Progress::Unknown(_)));
        let stopped = [
            start("r", None),
            process("r"),
            hook("r", "UserPromptSubmit", None),
            hook("r", "Stop", None),
        ];
        assert_eq!(progress(&fold("s", &stopped, &alive), &active), Progress::WaitingForInput);
        assert_eq!(progress(&fold("s", &stopped, &dead), &active), Progress::IdleUnfinished);
        let done = fold("s", &[start("r", None), process("r"), end("r", Outcome::Ok, None)], &dead);
        assert_eq!(progress(&done, &triple(Status::Awaiting)), Progress::Finished);
        assert_eq!(progress(&done, &triple(Status::Asking)), Progress::WaitingForInput);
        assert_eq!(progress(&done, &active), Progress::IdleUnfinished);
        let failed = fold("s", &[start("r", None), end("r", Outcome::Failed, None)], &dead);
        assert_eq!(progress(&failed, &active), Progress::Failed);
        for (ended, expected) in [
            (Outcome::Timeout, Progress::Failed),
            (Outcome::Stopped, Progress::IdleUnfinished),
            (Outcome::Running, Progress::Failed),
        ] {
            let runs = fold("s", &[start("r", None), end("r", ended, None)], &alive);
            assert_eq!(progress(&runs, &active), expected, "{ended:?}");
        }
        // A terminal UI launched in a pane carries no message.
        let pane = |extra: &[RunLine]| {
            let mut lines = vec![
                RunLine::Start {
                    ts: "t".into(),
                    at_ms: 1,
                    run: "p".into(),
                    harness: "claude".into(),
                    purpose: "launch".into(),
                    mid: None,
                    command: Vec::new(),
                    native_id: None,
                },
                process("p"),
            ];
            lines.extend_from_slice(extra);
            progress(&fold("s", &lines, &alive), &active)
        };
        assert!(matches!(pane(&[]), Progress::Unknown(_)));
        assert_eq!(pane(&[hook("p", "SessionStart", None)]), Progress::WaitingForInput);
        assert_eq!(pane(&[hook("p", "UserPromptSubmit", None)]), Progress::Running);
        let turned = [hook("p", "UserPromptSubmit", None), hook("p", "Stop", None)];
        assert_eq!(pane(&turned), Progress::WaitingForInput);
    }

    #[test]
    fn a_side_threads_id_does_not_replace_the_conversations() {
        let dead = |_, _| false;
        let lines = [
            start("r", None),
            hook("r", "agent-turn-complete", Some("conversation")),
            hook("r", "agent-turn-complete", Some("title-thread")),
        ];
        assert_eq!(fold("s", &lines, &dead)[0].native_id.as_deref(), Some("conversation"));
        // The side thread may report first: the id spex found in the transcript decides.
        let bound = RunLine::Bound {
            ts: "t".into(),
            at_ms: 3,
            run: "r".into(),
            native_id: "conversation".into(),
        };
        let lines = [
            start("r", None),
            hook("r", "agent-turn-complete", Some("title-thread")),
            hook("r", "agent-turn-complete", Some("conversation")),
            bound,
        ];
        for order in [lines.to_vec(), lines.iter().rev().cloned().collect()] {
            assert_eq!(fold("s", &order, &dead)[0].native_id.as_deref(), Some("conversation"));
        }
    }

    /// A store on real files whose session `s` has a run log of one `start` line.
    fn real_log() -> (tempfile::TempDir, faultfs::RealFs, Layout, SessionId) {
        let dir = tempfile::tempdir().unwrap();
        let fs = faultfs::RealFs::new();
        let layout = Layout::new(dir.path());
        let id = SessionId::new("s").unwrap();
        append(&fs, &crate::env::SystemClock, &layout, &id, &start("r", None)).unwrap();
        (dir, fs, layout, id)
    }

    #[test]
    fn appended_lines_read_back_and_a_torn_line_is_skipped() {
        let (_dir, fs, layout, id) = real_log();
        let clock = crate::env::SystemClock;
        // A crash in the middle of the next append.
        let path = run_log(&layout, &id);
        let file = fs.open(&path, OpenOptions::read_write(), OPEN).unwrap();
        file.append(b"{\"kind\":\"end\",\"ru", APPEND).unwrap();
        assert_eq!(read(&fs, &layout, &id).unwrap().1, 1);
        append(&fs, &clock, &layout, &id, &end("r", Outcome::Ok, None)).unwrap();
        let (lines, unreadable) = read(&fs, &layout, &id).unwrap();
        assert_eq!(lines, vec![start("r", None), end("r", Outcome::Ok, None)]);
        assert_eq!(unreadable, 1, "the torn bytes stay one unreadable line");
    }

    #[test]
    fn a_fifo_in_the_logs_place_is_refused_not_opened() {
        let (_dir, fs, layout, id) = real_log();
        let clock = crate::env::SystemClock;
        let path = run_log(&layout, &id);
        fs.remove_file(&path, APPEND).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(made.success());
        // Opening a FIFO would block until a writer came: both refuse at once instead.
        assert!(matches!(read(&fs, &layout, &id), Err(Error::Corrupt { .. })));
        let appended = append(&fs, &clock, &layout, &id, &start("r2", None));
        assert!(matches!(appended, Err(Error::Corrupt { .. })));
    }
}
