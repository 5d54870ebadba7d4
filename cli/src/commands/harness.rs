//! Harness adapters: Claude Code and Codex behind a session, headless (one harness process per
//! turn). Not a command: `session new --harness`, `session drain` and `session interrupt` use it.
//!
//! # A turn
//!
//! Each owed message is one run of the harness, in the session's worktree, with the message as
//! its prompt (on its standard input, never on a command line) and `SPEX_SESSION_ID`, `SPEX_ROOT`, `SPEX_RUN_ID` (and this binary's directory
//! first on `PATH`) in the agent's environment, so the agent's `spex session ask --note ...`
//! reaches this store:
//!
//! - Claude Code: `claude -p --output-format stream-json --verbose --session-id UUID` for
//!   the first turn (a fresh UUID), `--resume ID` after; `--settings` adds the hooks for this run
//!   only (SessionStart, UserPromptSubmit, Stop call `spex internal hook claude`), and
//!   `--allowedTools Bash(spex:*)` lets the agent answer through spex.
//! - Codex: `codex exec --json --skip-git-repo-check -s workspace-write --add-dir ROOT -`
//!   for the first turn, `codex exec resume ID ...` after; `notify` calls
//!   `spex internal hook codex` when a turn completes; `allow_login_shell=false` keeps the
//!   agent's shell on the PATH spex gave it (a login profile resets PATH).
//!
//! The native session id is read from the run's own stream (Claude Code's `init` event, Codex's
//! `thread.started`) and bound to the record (`harness_session_id`) as soon as it is seen, so a
//! run that fails after the harness created its conversation is resumed, not started again.
//!
//! # Accepted
//!
//! The harness accepted a turn when its run exited 0 and its stream reported the turn complete
//! (Claude Code's `result` with `is_error: false`, Codex's `turn.completed`): the prompt reached
//! the harness and the agent finished with it. Only then is the message settled. A non-zero
//! exit, a reported error (the model server's 500), a stream without a completed turn or a
//! timeout ([`TURN_TIMEOUT_DEFAULT`], `SPEX_TURN_TIMEOUT_MS`) is a refusal: the message stays
//! owed and the drain stops naming the run. A turn stopped by `spex session interrupt` counts as
//! accepted: the person stopped it on purpose, and resending it would undo that.
//!
//! # Crash story
//!
//! Every run is recorded in the session's run log (`spex_engine::runs`): its start before the
//! process is spawned, the process once it exists, its end after it exits. If spex dies during
//! a run, the harness process goes on (it is in a process group of its own) and the message
//! stays owed. The next drain of it first waits for that run's process to end, then looks at
//! its hook signals: a turn the hooks reported complete (Claude Code's `Stop`, Codex's
//! `agent-turn-complete`, after the prompt) is settled without running it again. Only a turn
//! with no such signal (the harness died too, or its hooks did not run) is run again: one
//! extra turn at most, the window the README's crash table states. The run reads
//! `interrupted` once its process is gone.

use std::io::Read as _;

use anyhow::Context as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use faultfs::{Fs as _, RealFs};
use serde_json::{Value, json};
use spex_engine::runs::{Outcome, RunLine, STDERR_TAIL_LINES, Usage};
use spex_engine::{Adapter, Message, SessionId, Store};

use crate::ops::agent::Harness;

/// How long one turn may run before it is stopped and counts as refused.
pub(crate) const TURN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30 * 60);

/// How long a stopped turn gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);

impl Harness {
    /// The line a ready terminal UI shows its input prompt on starts with this.
    const fn prompt_marker(self) -> &'static str {
        match self {
            Harness::Claude => "\u{276f}",
            Harness::Codex => "\u{203a}",
        }
    }

    /// The command that starts it: `SPEX_CLAUDE_CMD` / `SPEX_CODEX_CMD`, else its name.
    pub(crate) fn default_command(self) -> String {
        let variable = match self {
            Harness::Claude => "SPEX_CLAUDE_CMD",
            Harness::Codex => "SPEX_CODEX_CMD",
        };
        std::env::var(variable)
            .ok()
            .filter(|command| !command.trim().is_empty())
            .unwrap_or_else(|| self.name().to_owned())
    }
}

/// Claude Code's arguments for spex's hooks (for one run only, through `--settings`) and for
/// the agent to answer through spex without a permission prompt.
fn claude_hooks(spex: &str) -> [String; 4] {
    let hook = format!("{} internal hook claude", sh_quote(spex));
    let entry = json!([{"hooks": [{"type": "command", "command": hook}]}]);
    let settings = json!({"hooks": {
        "SessionStart": entry, "UserPromptSubmit": entry, "Stop": entry,
    }});
    ["--settings".into(), settings.to_string(), "--allowedTools".into(), "Bash(spex:*)".into()]
}

/// Codex's arguments for spex's turn-complete signal, and a shell that keeps the `PATH` spex
/// gave it (a login shell's profile resets it: the agent would not find this spex).
fn codex_notify(spex: &str) -> [String; 4] {
    let notify = json!([spex, "internal", "hook", "codex"]);
    ["-c".into(), format!("notify={notify}"), "-c".into(), "allow_login_shell=false".into()]
}

/// Quotes `text` for `sh`.
pub(crate) fn sh_quote(text: &str) -> String {
    if !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&byte))
    {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The headless adapter of one session.
#[derive(Debug)]
pub(crate) struct HarnessAdapter<'s> {
    store: &'s Store<RealFs>,
    session: SessionId,
    harness: Harness,
    /// The launch command (`launch_cmd`): a shell word list the arguments are appended to.
    command: String,
    worktree: Option<PathBuf>,
    timeout: Duration,
}

impl<'s> HarnessAdapter<'s> {
    /// The adapter of session `session`, run by `harness`.
    pub(crate) fn new(
        store: &'s Store<RealFs>,
        session: &SessionId,
        harness: Harness,
    ) -> anyhow::Result<HarnessAdapter<'s>> {
        let record = store.record(session)?;
        let command = record.launch_cmd().map_or_else(|| harness.default_command(), str::to_owned);
        let timeout = std::env::var("SPEX_TURN_TIMEOUT_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(TURN_TIMEOUT_DEFAULT, Duration::from_millis);
        Ok(HarnessAdapter {
            store,
            session: session.clone(),
            harness,
            command,
            worktree: record.worktree().map(PathBuf::from),
            timeout,
        })
    }

    /// The arguments of one turn (after the launch command). The prompt is not among them: the
    /// harness reads it on its standard input (never on a command line, where every local user
    /// could read it, and with no bound of an argument's length).
    fn arguments(&self, native: Option<&str>, fresh: &str) -> Vec<String> {
        let spex = spex_exe();
        let root = self.store.layout().root().to_string_lossy().into_owned();
        let mut args: Vec<String> = Vec::new();
        match self.harness {
            Harness::Claude => {
                args.push("-p".into());
                args.extend(["--output-format".into(), "stream-json".into(), "--verbose".into()]);
                match native {
                    Some(native) => args.extend(["--resume".into(), native.to_owned()]),
                    None => args.extend(["--session-id".into(), fresh.to_owned()]),
                }
                args.extend(claude_hooks(&spex));
            }
            Harness::Codex => {
                args.push("exec".into());
                if let Some(native) = native {
                    args.extend(["resume".into(), native.to_owned()]);
                }
                args.extend(["--json".into(), "--skip-git-repo-check".into()]);
                args.extend(codex_notify(&spex));
                if native.is_none() {
                    args.extend(["-s".into(), "workspace-write".into()]);
                    args.extend(["--add-dir".into(), root]);
                } else {
                    // A resumed thread keeps its sandbox; the store stays writable through it.
                    args.extend(["-c".into(), "sandbox_mode=\"workspace-write\"".into()]);
                    args.extend([
                        "-c".into(),
                        format!("sandbox_workspace_write.writable_roots={}", json!([root])),
                    ]);
                }
                args.push("-".into());
            }
        }
        args
    }

    /// Whether an earlier run of this message, cut off from its drainer (spex died during it),
    /// finished its turn: its hooks reported the turn complete after the prompt. A run of it
    /// still going is waited for first, so one message never runs twice at once. The earlier
    /// run is then closed in the log as accepted, and the message is settled without running
    /// it again.
    fn finished_before(&self, mid: &str) -> Result<bool, String> {
        let started = Instant::now();
        loop {
            let (runs, _) = self.store.runs(&self.session).map_err(|error| error.to_string())?;
            let earlier: Vec<_> =
                runs.iter().filter(|run| run.mid.as_deref() == Some(mid)).collect();
            if earlier.iter().any(|run| run.outcome == Outcome::Running) {
                if started.elapsed() >= self.timeout {
                    return Err(format!("an earlier run of {mid} is still running"));
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            // A run cut off from its drainer left its files behind.
            for cut in earlier.iter().filter(|run| run.outcome == Outcome::Interrupted) {
                RunFiles::of(self.store, &self.session, &cut.run).remove();
            }
            let Some(done) = earlier
                .iter()
                .rev()
                .find(|run| run.outcome == Outcome::Interrupted && run.turn_finished_by_hooks())
            else {
                return Ok(false);
            };
            let (ts, at_ms) = self.store.run_time();
            let end = RunLine::End {
                ts,
                at_ms,
                run: done.run.clone(),
                outcome: Outcome::Ok,
                exit_code: None,
                signal: None,
                native_id: done.native_id.clone(),
                usage: None,
                error: None,
                stderr_tail: vec![
                    "(its drainer died; the hooks reported the turn complete)".to_owned(),
                ],
            };
            self.store.append_run(&self.session, &end).map_err(|error| error.to_string())?;
            return Ok(true);
        }
    }

    /// Runs one turn; `Ok` when the harness accepted it (see the module header).
    fn turn(&self, message: &Message<'_>) -> Result<(), String> {
        if self.finished_before(message.mid)? {
            return Ok(());
        }
        let record = self.store.record(&self.session).map_err(|error| error.to_string())?;
        let native = record.harness_session_id().map(str::to_owned);
        let fresh = spex_engine::env::IdSource::mid(&spex_engine::env::RandomIds);
        let run = spex_engine::env::IdSource::mid(&spex_engine::env::RandomIds);
        let args = self.arguments(native.as_deref(), &fresh);
        let recorded: Vec<String> =
            std::iter::once(self.command.clone()).chain(args.iter().cloned()).collect();
        let (ts, at_ms) = self.store.run_time();
        let purpose = if native.is_none() { "launch" } else { "turn" };
        let start = RunLine::Start {
            ts,
            at_ms,
            run: run.clone(),
            harness: self.harness.name().to_owned(),
            purpose: purpose.to_owned(),
            mid: Some(message.mid.to_owned()),
            command: recorded,
            native_id: native
                .clone()
                .or_else(|| (self.harness == Harness::Claude).then(|| fresh.clone())),
        };
        self.store.append_run(&self.session, &start).map_err(|error| error.to_string())?;
        let outcome = self.spawn_and_wait(&run, &args, native.is_none(), message.text);
        let (ts, at_ms) = self.store.run_time();
        let stopped = self.stopped_by_a_person(&run);
        let accepted = outcome.accepted() || (stopped && outcome.started);
        let end = RunLine::End {
            ts,
            at_ms,
            run: run.clone(),
            outcome: if stopped {
                Outcome::Stopped
            } else if accepted {
                Outcome::Ok
            } else if outcome.timed_out {
                Outcome::Timeout
            } else {
                Outcome::Failed
            },
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            native_id: outcome.native.clone(),
            usage: outcome.usage,
            error: (!accepted).then(|| outcome.why()),
            stderr_tail: outcome.stderr_tail.clone(),
        };
        // The end is history; failing to write it must not turn an accepted turn into a
        // redelivery.
        if let Err(error) = self.store.append_run(&self.session, &end) {
            eprintln!("spex: cannot record the end of run {run}: {error}");
        }
        if accepted { Ok(()) } else { Err(format!("run {run}: {}", outcome.why())) }
    }

    /// Whether `spex session interrupt` stopped run `run`.
    fn stopped_by_a_person(&self, run: &str) -> bool {
        self.store.runs(&self.session).is_ok_and(|(runs, _)| {
            runs.iter().any(|folded| {
                folded.run == run && folded.signals.iter().any(|signal| signal.event == INTERRUPT)
            })
        })
    }

    fn spawn_and_wait(&self, run: &str, args: &[String], first: bool, prompt: &str) -> RunOutcome {
        let mut outcome = RunOutcome::default();
        // The harness reads its prompt from a file only the user can read and writes into
        // files, not pipes: if spex dies, the turn goes on (a pipe would end it with the next
        // write).
        let files = RunFiles::of(self.store, &self.session, run);
        let opened = write_private(&files.stdin, prompt.as_bytes()).and_then(|()| {
            let input = std::fs::File::open(&files.stdin)?;
            let out = create_private(&files.stdout)?;
            let err = create_private(&files.stderr)?;
            // The stream is read as the harness writes it, through a handle of its own.
            let stream = std::fs::File::open(&files.stdout)?;
            Ok((input, out, err, stream))
        });
        let (input, out, err, stream) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                outcome.error = Some(format!("cannot create the run's files: {error}"));
                files.remove();
                return outcome;
            }
        };
        let mut command = self.command_for(run, args, (input, out, err));
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                outcome.error = Some(format!("cannot run {}: {error}", self.command));
                files.remove();
                return outcome;
            }
        };
        outcome.started = true;
        let pid = child.id();
        self.record_process(run, pid);
        let mut stream = Lines::new(stream);
        let started = Instant::now();
        let mut bound = false;
        let status = loop {
            for event in stream.read_new() {
                self.observe(&event, &mut outcome, first, &mut bound);
            }
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= self.timeout => {
                    outcome.timed_out = true;
                    stop_group(pid, &mut child);
                    break child.wait().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(error) => {
                    outcome.error = Some(format!("waiting for the harness: {error}"));
                    break None;
                }
            }
        };
        for event in stream.read_new() {
            self.observe(&event, &mut outcome, first, &mut bound);
        }
        outcome.stderr_tail = tail_lines(&files.stderr);
        files.remove();
        if let Some(status) = status {
            use std::os::unix::process::ExitStatusExt as _;
            outcome.exit_code = status.code();
            outcome.signal = status.signal();
        }
        outcome
    }

    /// The harness's command for run `run`: its arguments, the agent environment, the run's
    /// files as its standard streams, in a process group of its own (an interrupt or a
    /// timeout reaches the harness and what it started, and a signal to spex's own group,
    /// Ctrl-C on a drain, does not), in the worktree.
    fn command_for(
        &self,
        run: &str,
        args: &[String],
        (input, out, err): (std::fs::File, std::fs::File, std::fs::File),
    ) -> Command {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("exec {} \"$@\"", self.command))
            .arg(self.harness.name())
            .args(args)
            .envs(agent_env(self.store, &self.session, run))
            .stdin(Stdio::from(input))
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0);
        if let Some(dir) = &self.worktree {
            command.current_dir(dir);
        }
        tracing::debug!(
            command = %self.command,
            args = ?args,
            dir = ?self.worktree,
            session = %self.session,
            run = %run,
            "starting the harness"
        );
        command
    }

    /// Records the process of run `run` (its pid and start time, so a reused pid is never taken
    /// for it); a failure to record it is said, not fatal.
    fn record_process(&self, run: &str, pid: u32) {
        let (ts, at_ms) = self.store.run_time();
        let process = RunLine::Process {
            ts,
            at_ms,
            run: run.to_owned(),
            pid,
            pid_start_ms: RealFs::new().process_start_ms(pid).ok().flatten(),
        };
        if let Err(error) = self.store.append_run(&self.session, &process) {
            eprintln!("spex: cannot record the process of run {run}: {error}");
        }
    }

    /// Folds one event of the harness's stream into the outcome; binds the native id to the
    /// record the first time it is seen.
    fn observe(&self, event: &Value, outcome: &mut RunOutcome, first: bool, bound: &mut bool) {
        let text = |key: &str| event.get(key).and_then(Value::as_str).map(str::to_owned);
        let kind = text("type").unwrap_or_default();
        match (self.harness, kind.as_str()) {
            (Harness::Claude, "system") if text("subtype").as_deref() == Some("init") => {
                outcome.native = text("session_id");
            }
            (Harness::Claude, "result") => {
                outcome.native = text("session_id").or(outcome.native.take());
                outcome.usage = usage(event.get("usage"), "input_tokens", "output_tokens");
                let error = event.get("is_error").and_then(Value::as_bool).unwrap_or(true);
                if error {
                    let why = text("result")
                        .or_else(|| text("subtype"))
                        .unwrap_or_else(|| "the harness reported an error".to_owned());
                    outcome.error = Some(why);
                } else {
                    outcome.completed = true;
                }
            }
            (Harness::Codex, "thread.started") => outcome.native = text("thread_id"),
            (Harness::Codex, "turn.completed") => {
                outcome.usage = usage(event.get("usage"), "input_tokens", "output_tokens");
                outcome.completed = true;
            }
            (Harness::Codex, "turn.failed") => {
                outcome.error = event
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| Some("the turn failed".to_owned()));
            }
            (Harness::Codex, "error") => {
                outcome.error = text("message").or_else(|| Some("the harness failed".to_owned()));
            }
            _ => {}
        }
        if first
            && !*bound
            && let Some(native) = &outcome.native
        {
            *bound = true;
            if let Err(error) =
                self.store.bind_harness(&self.session, &[("harness_session_id", native)])
            {
                eprintln!("spex: cannot bind {native} to session {}: {error}", self.session);
            }
        }
    }
}

impl Adapter for HarnessAdapter<'_> {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        self.turn(message)
    }

    fn attempts_max(&self) -> Option<u32> {
        Some(1)
    }
}

/// The hook event `spex session interrupt` writes into the run it stops.
pub(crate) const INTERRUPT: &str = "spex-interrupt";

/// Reads the JSON lines a harness appends to its output file, as they complete.
#[derive(Debug)]
struct Lines {
    file: std::fs::File,
    partial: Vec<u8>,
}

impl Lines {
    fn new(file: std::fs::File) -> Lines {
        Lines { file, partial: Vec::new() }
    }

    /// The events written since the last call (the handle's position is where it stopped).
    fn read_new(&mut self) -> Vec<Value> {
        let _partial_read = self.file.read_to_end(&mut self.partial);
        let mut events = Vec::new();
        while let Some(end) = self.partial.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                events.push(event);
            }
        }
        events
    }
}

/// The files of one headless run beside the run log: the prompt it reads, what it writes.
#[derive(Debug)]
struct RunFiles {
    stdin: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl RunFiles {
    /// `<root>/runs/<session>.<run>.{stdin,stdout,stderr}`.
    fn of(store: &Store<RealFs>, session: &SessionId, run: &str) -> RunFiles {
        let dir = spex_engine::runs::runs_dir(store.layout());
        let file = |kind: &str| dir.join(format!("{session}.{run}.{kind}"));
        RunFiles { stdin: file("stdin"), stdout: file("stdout"), stderr: file("stderr") }
    }

    /// Removes them (what mattered is in the run log).
    fn remove(&self) {
        for path in [&self.stdin, &self.stdout, &self.stderr] {
            let _ignored = std::fs::remove_file(path);
        }
    }
}

/// The most of a run's stderr read for its tail.
const STDERR_TAIL_BYTES: u64 = 64 * 1024;

/// The last [`STDERR_TAIL_LINES`] non-blank lines of the file at `path`, read from at most its
/// last [`STDERR_TAIL_BYTES`] (a harness may write any amount there).
fn tail_lines(path: &Path) -> Vec<String> {
    use std::io::Seek as _;
    let mut bytes = Vec::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let len = file.metadata().map_or(0, |metadata| metadata.len());
        let from = len.saturating_sub(STDERR_TAIL_BYTES);
        if file.seek(std::io::SeekFrom::Start(from)).is_ok() {
            let _partial_read = file.read_to_end(&mut bytes);
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].iter().map(|l| (*l).to_owned()).collect()
}

/// What one run did.
#[derive(Debug, Default)]
struct RunOutcome {
    started: bool,
    completed: bool,
    timed_out: bool,
    exit_code: Option<i32>,
    signal: Option<i32>,
    native: Option<String>,
    usage: Option<Usage>,
    error: Option<String>,
    stderr_tail: Vec<String>,
}

impl RunOutcome {
    fn accepted(&self) -> bool {
        self.completed && self.error.is_none() && self.exit_code == Some(0) && !self.timed_out
    }

    fn why(&self) -> String {
        if self.timed_out {
            return "ran past its timeout and was stopped".to_owned();
        }
        let exit = match (self.exit_code, self.signal) {
            (Some(code), _) => format!("exited with {code}"),
            (None, Some(signal)) => format!("ended by signal {signal}"),
            (None, None) if !self.started => "did not start".to_owned(),
            (None, None) => "ended".to_owned(),
        };
        let said = self.stderr_tail.last().map_or_else(String::new, |line| {
            format!(" (its stderr ends: {})", crate::render::literal(line))
        });
        match &self.error {
            Some(error) => format!("{exit}: {error}"),
            None if !self.completed => format!("{exit} without completing the turn{said}"),
            None => exit,
        }
    }
}

fn usage(value: Option<&Value>, input: &str, output: &str) -> Option<Usage> {
    let value = value?;
    Some(Usage {
        input_tokens: value.get(input).and_then(Value::as_u64).unwrap_or(0),
        output_tokens: value.get(output).and_then(Value::as_u64).unwrap_or(0),
    })
}

/// SIGTERM to the run's group, then SIGKILL after a grace period.
fn stop_group(pid: u32, child: &mut std::process::Child) {
    signal_group(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(pid, rustix::process::Signal::KILL);
}

/// Sends `signal` to the process group led by `pid`; false when there is none.
pub(crate) fn signal_group(pid: u32, signal: rustix::process::Signal) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return false;
    };
    rustix::process::kill_process_group(pid, signal).is_ok()
}

/// What spex adds to an agent's environment: its session, the store, the run, and a `PATH`
/// that finds this spex first.
fn agent_env(
    store: &Store<RealFs>,
    session: &SessionId,
    run: &str,
) -> [(&'static str, std::ffi::OsString); 4] {
    [
        ("SPEX_SESSION_ID", session.as_str().into()),
        ("SPEX_ROOT", store.layout().root().into()),
        ("SPEX_RUN_ID", run.into()),
        ("PATH", agent_path()),
    ]
}

/// The agent's `PATH`: this binary's directory first, so `spex` is this spex.
fn agent_path() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths: Vec<PathBuf> = std::env::split_paths(&path).collect();
    if let Some(dir) = Path::new(&spex_exe()).parent() {
        paths.insert(0, dir.to_path_buf());
    }
    std::env::join_paths(paths).unwrap_or(path)
}

/// This binary's path (what the agent runs as `spex`, and the hooks call).
fn spex_exe() -> String {
    std::env::current_exe()
        .map_or_else(|_| "spex".to_owned(), |path| path.to_string_lossy().into_owned())
}

/// The run of session `id` that is running now, if one is (its process alive).
pub(crate) fn running(
    store: &Store<RealFs>,
    id: &SessionId,
) -> anyhow::Result<Option<spex_engine::runs::Run>> {
    let (runs, _) = store.runs(id)?;
    Ok(runs.into_iter().rev().find(|run| run.outcome == Outcome::Running))
}

// ---- pane mode ---------------------------------------------------------------------------

/// How long a delivery waits for the terminal UI's input prompt.
const PANE_READY_WAIT: Duration = Duration::from_secs(30);

/// How long a delivery waits for the pasted prompt to reach the harness's transcript.
const PANE_ACCEPT_WAIT: Duration = Duration::from_secs(60);

/// Starts `harness`'s terminal UI for session `id` in a new window of tmux target `target`, in
/// `worktree`, with this process's environment and spex's (`SPEX_SESSION_ID`, `SPEX_ROOT`,
/// `SPEX_RUN_ID`, `PATH`). The launch is a run of its own in the session's run log (its
/// process: the pane's). Returns the pane id and the native session id when it is chosen here
/// (Claude Code's `--session-id`).
pub(crate) fn launch_pane(
    store: &Store<RealFs>,
    id: &SessionId,
    harness: Harness,
    command: &str,
    worktree: &str,
    target: &str,
) -> anyhow::Result<(String, Option<String>)> {
    let spex = spex_exe();
    let run = spex_engine::env::IdSource::mid(&spex_engine::env::RandomIds);
    let native = (harness == Harness::Claude)
        .then(|| spex_engine::env::IdSource::mid(&spex_engine::env::RandomIds));
    let args = pane_args(store, harness, &spex, native.as_deref());
    let (ts, at_ms) = store.run_time();
    store.append_run(
        id,
        &RunLine::Start {
            ts,
            at_ms,
            run: run.clone(),
            harness: harness.name().to_owned(),
            purpose: "launch".to_owned(),
            mid: None,
            command: std::iter::once(command.to_owned()).chain(args.iter().cloned()).collect(),
            native_id: native.clone(),
        },
    )?;
    let mut tmux_args: Vec<String> =
        ["new-window", "-d", "-P", "-F", "#{pane_id} #{pane_pid}"].map(str::to_owned).to_vec();
    tmux_args.extend(["-t".into(), target.to_owned(), "-c".into(), worktree.to_owned()]);
    // A tmux server has the environment it was started with: the harness gets this one. It
    // goes through a file only the user can read, which the pane's shell reads and removes, never
    // through tmux's command line (where every local user could read an API key in it).
    let env_file = write_env_file(store, id, &run)?;
    tmux_args.extend(["sh".into(), "-c".into()]);
    tmux_args.push(format!(". \"$0\"; rm -f \"$0\"; exec {command} \"$@\""));
    tmux_args.push(env_file.to_string_lossy().into_owned());
    tmux_args.extend(args);
    let borrowed: Vec<&str> = tmux_args.iter().map(String::as_str).collect();
    let launched = super::tmux::tmux(&borrowed, None);
    let (ts, at_ms) = store.run_time();
    let printed = match launched {
        Ok(printed) => printed,
        Err(error) => {
            let _removed = std::fs::remove_file(&env_file);
            end_failed_run(store, id, run, &error)?;
            return Err(anyhow::anyhow!("cannot open a tmux window in {target:?}: {error}"));
        }
    };
    let mut words = printed.split_whitespace();
    let pane = words.next().unwrap_or_default().to_owned();
    if let Some(pid) = words.next().and_then(|pid| pid.parse::<u32>().ok()) {
        store.append_run(
            id,
            &RunLine::Process {
                ts,
                at_ms,
                run,
                pid,
                pid_start_ms: RealFs::new().process_start_ms(pid).ok().flatten(),
            },
        )?;
    }
    Ok((pane, native))
}

/// The harness's own arguments in a pane: Claude Code with the session id chosen for it and
/// spex's hooks; Codex with spex's notify hook, writing its workspace and the store.
fn pane_args(
    store: &Store<RealFs>,
    harness: Harness,
    spex: &str,
    native: Option<&str>,
) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    match harness {
        Harness::Claude => {
            args.extend(["--session-id".into(), native.unwrap_or_default().to_owned()]);
            args.extend(claude_hooks(spex));
        }
        Harness::Codex => {
            args.extend(codex_notify(spex));
            args.extend(["-s".into(), "workspace-write".into(), "--add-dir".into()]);
            args.push(store.layout().root().to_string_lossy().into_owned());
        }
    }
    args
}

/// Writes the environment the harness gets in its pane to a file only the user can read, which
/// the pane's shell reads and removes: a tmux server has the environment it was started with,
/// and tmux's command line is readable by every local user (an API key must not go there).
fn write_env_file(
    store: &Store<RealFs>,
    id: &SessionId,
    run: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let env_file = spex_engine::runs::runs_dir(store.layout()).join(format!("{id}.{run}.env"));
    let mut exports = String::new();
    for (name, value) in std::env::vars() {
        let plain = name
            .chars()
            .enumerate()
            .all(|(at, c)| c == '_' || c.is_ascii_alphabetic() || (at > 0 && c.is_ascii_digit()));
        if plain
            && !matches!(name.as_str(), "TMUX" | "TMUX_PANE" | "PATH")
            && !name.starts_with("SPEX_")
        {
            exports.push_str(&format!("export {name}={}\n", sh_quote(&value)));
        }
    }
    for (name, value) in agent_env(store, id, run) {
        exports.push_str(&format!("export {name}={}\n", sh_quote(&value.to_string_lossy())));
    }
    write_private(&env_file, exports.as_bytes())
        .with_context(|| format!("cannot write {}", env_file.display()))?;
    Ok(env_file)
}

/// Ends run `run` of session `id` as failed with `error` (its harness never started).
fn end_failed_run(
    store: &Store<RealFs>,
    id: &SessionId,
    run: String,
    error: &str,
) -> anyhow::Result<()> {
    let (ts, at_ms) = store.run_time();
    let end = RunLine::End {
        ts,
        at_ms,
        run,
        outcome: Outcome::Failed,
        exit_code: None,
        signal: None,
        native_id: None,
        usage: None,
        error: Some(error.to_owned()),
        stderr_tail: Vec::new(),
    };
    store.append_run(id, &end)?;
    Ok(())
}

/// The adapter of a session whose harness runs its terminal UI in a tmux pane: each message is
/// pasted (literally, as one bracketed paste) once the UI shows its input prompt, and is
/// accepted when it reached the harness's transcript.
#[derive(Debug)]
pub(crate) struct PaneAdapter<'s> {
    store: &'s Store<RealFs>,
    session: SessionId,
    harness: Harness,
    pane: String,
    worktree: Option<String>,
}

impl<'s> PaneAdapter<'s> {
    /// The adapter of session `session`, whose `harness` runs in `pane`.
    pub(crate) fn new(
        store: &'s Store<RealFs>,
        session: &SessionId,
        harness: Harness,
        pane: &str,
    ) -> anyhow::Result<PaneAdapter<'s>> {
        let record = store.record(session)?;
        Ok(PaneAdapter {
            store,
            session: session.clone(),
            harness,
            pane: pane.to_owned(),
            worktree: record.worktree().map(str::to_owned),
        })
    }

    /// Waits until the pane shows the UI's input prompt (see the module header).
    fn ready(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let screen = super::tmux::tmux(&["capture-pane", "-p", "-t", &self.pane], None)?;
            let marker = self.harness.prompt_marker();
            if screen.lines().any(|line| line.trim_start().starts_with(marker)) {
                return Ok(());
            }
            if started.elapsed() >= PANE_READY_WAIT {
                return Err(format!(
                    "the {} pane {} shows no input prompt after {} s",
                    self.harness.name(),
                    self.pane,
                    PANE_READY_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether the harness's transcript holds a prompt starting with `first_line`, written
    /// after `since_ns`; binds a native id learned this way (Codex) to the record.
    fn in_transcript(&self, first_line: &str, since_ns: i64) -> bool {
        let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let roots = spex_history::Root::defaults(&env);
        let Ok(found) = spex_history::discover(&roots) else { return false };
        let wanted = match self.harness {
            Harness::Claude => spex_history::Harness::ClaudeCode,
            Harness::Codex => spex_history::Harness::Codex,
        };
        let native = self
            .store
            .record(&self.session)
            .ok()
            .and_then(|record| record.harness_session_id().map(str::to_owned));
        for candidate in found.iter().filter(|found| found.harness == wanted) {
            let mine = match &native {
                Some(native) => candidate.id == *native,
                None => candidate.modified_ns >= since_ns,
            };
            if !mine {
                continue;
            }
            let Ok((summary, events)) = spex_history::summarize(candidate) else { continue };
            if native.is_none() && summary.meta.cwd.as_deref() != self.worktree.as_deref() {
                continue;
            }
            let reached = events.iter().any(|event| {
                matches!(&event.kind, spex_history::Kind::User { text }
                    if text.trim_start().starts_with(first_line))
            });
            if reached {
                if native.is_none() {
                    self.bind(&candidate.id);
                }
                return true;
            }
        }
        false
    }
}

impl PaneAdapter<'_> {
    /// Binds the native id found in the transcript to the record, and to the launch's run.
    fn bind(&self, native: &str) {
        if let Err(error) =
            self.store.bind_harness(&self.session, &[("harness_session_id", native)])
        {
            eprintln!("spex: cannot bind {native} to {}: {error}", self.session);
        }
        let launch = running(self.store, &self.session).ok().flatten();
        if let Some(launch) = launch.filter(|run| run.mid.is_none()) {
            let (ts, at_ms) = self.store.run_time();
            let line = RunLine::Bound { ts, at_ms, run: launch.run, native_id: native.to_owned() };
            if let Err(error) = self.store.append_run(&self.session, &line) {
                eprintln!("spex: cannot record {native} for {}: {error}", self.session);
            }
        }
    }
}

impl Adapter for PaneAdapter<'_> {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        self.ready()?;
        let since_ns = jiff::Timestamp::now().as_nanosecond() as i64 - 1_000_000_000;
        super::tmux::paste(&self.pane, message)?;
        let first_line =
            crate::render::literal(message.text.lines().next().unwrap_or("")).trim().to_owned();
        let started = Instant::now();
        while started.elapsed() < PANE_ACCEPT_WAIT {
            if self.in_transcript(&first_line, since_ns) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(format!(
            "the prompt pasted into pane {} did not reach the {} transcript within {} s",
            self.pane,
            self.harness.name(),
            PANE_ACCEPT_WAIT.as_secs()
        ))
    }

    fn attempts_max(&self) -> Option<u32> {
        Some(1)
    }
}

/// Presses Escape in a harness's pane (its terminal UI's interrupt).
pub(crate) fn interrupt_pane(pane: &str) -> Result<(), String> {
    super::tmux::tmux(&["send-keys", "-t", pane, "Escape"], None).map(drop)
}

/// Writes `bytes` to a new file at `path` only its owner can read (mode 0600).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

/// Creates (or truncates) a file at `path` only its owner can read (0600): what a harness says
/// may hold what the agent read.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)
}

/// Closes a harness's pane (a launch whose session could not be created).
pub(crate) fn close_pane(pane: &str) {
    let _closed = super::tmux::tmux(&["kill-pane", "-t", pane], None);
}
