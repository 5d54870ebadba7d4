//! Harness adapters: Claude Code and Codex behind a session, headless (one harness process per
//! turn). Not a command: `session new --harness`, `session drain` and `session interrupt` use it.
//!
//! # A turn
//!
//! Each owed message is one run of the harness, in the session's worktree, with the message as
//! its prompt and `SPEX_SESSION_ID`, `SPEX_ROOT`, `SPEX_RUN_ID` (and this binary's directory
//! first on `PATH`) in the agent's environment, so the agent's `spex session ask --note ...`
//! reaches this store:
//!
//! - Claude Code: `claude -p PROMPT --output-format stream-json --verbose --session-id UUID` for
//!   the first turn (a fresh UUID), `--resume ID` after; `--settings` adds the hooks for this run
//!   only (SessionStart, UserPromptSubmit, Stop call `spex internal hook claude`), and
//!   `--allowedTools Bash(spex:*)` lets the agent answer through spex.
//! - Codex: `codex exec --json --skip-git-repo-check -s workspace-write --add-dir ROOT PROMPT`
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
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use faultfs::{Fs as _, RealFs};
use serde_json::{Value, json};
use spex_engine::runs::{Outcome, RunLine, STDERR_TAIL_LINES, Usage};
use spex_engine::{Adapter, Message, SessionId, Store};

/// How long one turn may run before it is stopped and counts as refused.
pub(crate) const TURN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30 * 60);

/// How long a stopped turn gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);

/// A harness spex can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Harness {
    /// Claude Code.
    Claude,
    /// Codex.
    Codex,
}

impl Harness {
    /// The harness's name (the record's `harness`, the adapter spec).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Harness::Claude => "claude",
            Harness::Codex => "codex",
        }
    }

    /// The harness an adapter spec names, if it names one.
    pub(crate) fn from_spec(spec: &str) -> Option<Harness> {
        match spec {
            "claude" => Some(Harness::Claude),
            "codex" => Some(Harness::Codex),
            _ => None,
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

    /// The arguments of one turn (after the launch command), and the command line as recorded
    /// (the prompt replaced by a placeholder).
    fn arguments(&self, prompt: &str, native: Option<&str>, fresh: &str) -> Vec<String> {
        let spex = spex_exe();
        let root = self.store.layout().root().to_string_lossy().into_owned();
        let mut args: Vec<String> = Vec::new();
        match self.harness {
            Harness::Claude => {
                let hook = format!("{} internal hook claude", sh_quote(&spex));
                let entry = json!([{"hooks": [{"type": "command", "command": hook}]}]);
                let settings = json!({"hooks": {
                    "SessionStart": entry, "UserPromptSubmit": entry, "Stop": entry,
                }});
                args.extend(["-p".into(), prompt.to_owned()]);
                args.extend(["--output-format".into(), "stream-json".into(), "--verbose".into()]);
                match native {
                    Some(native) => args.extend(["--resume".into(), native.to_owned()]),
                    None => args.extend(["--session-id".into(), fresh.to_owned()]),
                }
                args.extend(["--settings".into(), settings.to_string()]);
                args.extend(["--allowedTools".into(), "Bash(spex:*)".into()]);
            }
            Harness::Codex => {
                let notify = json!([spex, "internal", "hook", "codex"]);
                args.push("exec".into());
                if let Some(native) = native {
                    args.extend(["resume".into(), native.to_owned()]);
                }
                args.extend(["--json".into(), "--skip-git-repo-check".into()]);
                args.extend(["-c".into(), format!("notify={notify}")]);
                // A login shell's profile resets PATH: the agent would not find this spex.
                args.extend(["-c".into(), "allow_login_shell=false".into()]);
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
                args.push(prompt.to_owned());
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
                outcome: "ok".to_owned(),
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
        let args = self.arguments(message.text, native.as_deref(), &fresh);
        let recorded: Vec<String> =
            std::iter::once(self.command.clone())
                .chain(args.iter().map(|arg| {
                    if arg == message.text { "<prompt>".to_owned() } else { arg.clone() }
                }))
                .collect();
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
        let outcome = self.spawn_and_wait(&run, &args, native.is_none());
        let (ts, at_ms) = self.store.run_time();
        let interrupted = self.interrupted(&run);
        let accepted = outcome.accepted() || (interrupted && outcome.started);
        let end = RunLine::End {
            ts,
            at_ms,
            run: run.clone(),
            outcome: if interrupted {
                "interrupted".to_owned()
            } else if accepted {
                "ok".to_owned()
            } else if outcome.timed_out {
                "timeout".to_owned()
            } else {
                "failed".to_owned()
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
    fn interrupted(&self, run: &str) -> bool {
        self.store.runs(&self.session).is_ok_and(|(runs, _)| {
            runs.iter().any(|folded| {
                folded.run == run && folded.signals.iter().any(|signal| signal.event == INTERRUPT)
            })
        })
    }

    fn spawn_and_wait(&self, run: &str, args: &[String], first: bool) -> RunOutcome {
        let mut outcome = RunOutcome::default();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths: Vec<PathBuf> = std::env::split_paths(&path).collect();
        if let Some(dir) = Path::new(&spex_exe()).parent() {
            paths.insert(0, dir.to_path_buf());
        }
        // The harness writes into files, not pipes: if spex dies, the turn goes on (a pipe
        // would end it with the next write), and the next drain can tell how it ended.
        let dir = spex_engine::runs::runs_dir(self.store.layout());
        let out_path = dir.join(format!("{}.{run}.stdout", self.session));
        let err_path = dir.join(format!("{}.{run}.stderr", self.session));
        let files = std::fs::File::create(&out_path).and_then(|out| {
            let err = std::fs::File::create(&err_path)?;
            Ok((out, err))
        });
        let (out, err) = match files {
            Ok(files) => files,
            Err(error) => {
                outcome.error = Some(format!("cannot create {}: {error}", out_path.display()));
                return outcome;
            }
        };
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("exec {} \"$@\"", self.command))
            .arg(self.harness.name())
            .args(args)
            .env("SPEX_SESSION_ID", self.session.as_str())
            .env("SPEX_ROOT", self.store.layout().root())
            .env("SPEX_RUN_ID", run)
            .env("PATH", std::env::join_paths(paths).unwrap_or(path))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            // A group of its own: an interrupt or a timeout reaches the harness and what it
            // started, and a signal to spex's own group (Ctrl-C on a drain) does not.
            .process_group(0);
        if let Some(dir) = &self.worktree {
            command.current_dir(dir);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                outcome.error = Some(format!("cannot run {}: {error}", self.command));
                remove_outputs(&out_path, &err_path);
                return outcome;
            }
        };
        outcome.started = true;
        let pid = child.id();
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
        let mut stream = Lines::default();
        let started = Instant::now();
        let mut bound = false;
        let status = loop {
            for event in stream.read_new(&out_path) {
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
        for event in stream.read_new(&out_path) {
            self.observe(&event, &mut outcome, first, &mut bound);
        }
        let stderr = std::fs::read(&err_path).unwrap_or_default();
        let text = String::from_utf8_lossy(&stderr);
        let lines: Vec<String> =
            text.lines().filter(|line| !line.trim().is_empty()).map(str::to_owned).collect();
        outcome.stderr_tail = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].to_vec();
        remove_outputs(&out_path, &err_path);
        if let Some(status) = status {
            use std::os::unix::process::ExitStatusExt as _;
            outcome.exit_code = status.code();
            outcome.signal = status.signal();
        }
        outcome
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
#[derive(Debug, Default)]
struct Lines {
    offset: u64,
    partial: Vec<u8>,
}

impl Lines {
    /// The events written since the last call.
    fn read_new(&mut self, path: &Path) -> Vec<Value> {
        use std::io::Seek as _;
        let mut fresh = Vec::new();
        if let Ok(mut file) = std::fs::File::open(path)
            && file.seek(std::io::SeekFrom::Start(self.offset)).is_ok()
        {
            let _ignored = file.read_to_end(&mut fresh);
        }
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
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

/// Removes a finished run's output files (what mattered is in the run log).
fn remove_outputs(out: &Path, err: &Path) {
    let _ignored = std::fs::remove_file(out);
    let _ignored = std::fs::remove_file(err);
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
        match &self.error {
            Some(error) => format!("{exit}: {error}"),
            None if !self.completed => format!("{exit} without completing the turn"),
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

/// Session `id`'s progress from its runs (see `spex_engine::runs::progress`), when it has a run
/// log or a harness behind it (`harness`); `None` for a session no harness ever ran for.
pub(crate) fn agent_progress(
    store: &Store<RealFs>,
    id: &SessionId,
    triple: &spex_engine::Triple,
    harness: bool,
) -> anyhow::Result<Option<spex_engine::runs::Progress>> {
    let log = spex_engine::runs::run_log(store.layout(), id);
    if !harness && !RealFs::new().exists(&log)? {
        return Ok(None);
    }
    let (runs, _) = store.runs(id)?;
    Ok(Some(spex_engine::runs::progress(&runs, triple)))
}

/// The progress word of session `id` for a table (`session ls`, the live `watch` table): only
/// for a session with a run log; `None` for any other, or when its record cannot be read.
pub(crate) fn agent_word(store: &Store<RealFs>, id: &str) -> Option<String> {
    let id = SessionId::new(id).ok()?;
    let triple = store.record(&id).ok()?.public_triple();
    agent_progress(store, &id, &triple, false).ok()?.map(|progress| progress.to_string())
}
