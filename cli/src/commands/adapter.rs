//! Drain adapters: where `spex session drain` hands each owed message.
//!
//! - `exec:CMD` (headless): runs `sh -c CMD` with the message text on stdin and `SPEX_MID`,
//!   `SPEX_FROM` (empty for a human) and `SPEX_SESSION_ID` in the environment; exit status 0
//!   accepts the message. The command's stdout is shown on stderr, labelled with the message id
//!   and framed, so `spex`'s own stdout carries only its result. A command that runs past
//!   the timeout is killed and counts as a refusal.
//! - `tmux:PANE` (pane-backed): pastes the message into a real tmux pane (as one bracketed paste,
//!   so a multi-line message arrives whole) and presses Enter. Accepted when tmux accepted both.
//!   `tmux:PANE@/SOCKET` names the server by its socket path (`tmux -S`); without it, the
//!   default server. `session new` refuses a pane tmux cannot find.
//!   Only literal characters reach the pane (see [`super::literal`]): nothing in a message can end the
//!   paste, press a key or reach the terminal as a control sequence.
//! - `stdout` (headless): prints one JSON line per message (`mid`, `from`, `text`) on stdout.
//! - `claude`, `codex` (headless): one run of the harness per message; `claude:tmux:PANE`,
//!   `codex:tmux:PANE`: the harness's terminal UI in a pane, pasted into (see `super::harness`).
//!
//! Delivery is at-least-once in one window (the adapter accepted, the process died before the
//! settlement): every adapter gets the message id so the receiving side can deduplicate.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use faultfs::RealFs;
use spex_engine::{Adapter, Message, SessionId, Store};

use super::harness::{HarnessAdapter, PaneAdapter};
use super::tmux::{Tmux, TmuxPane};
use crate::ops::agent::Harness;

use crate::exit::BadInput;

/// How long an `exec` command may run before it is killed and the attempt counts as refused.
pub(crate) const EXEC_TIMEOUT: Duration = Duration::from_secs(120);

/// A parsed adapter spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Spec {
    Exec(String),
    Tmux(TmuxPane),
    Stdout,
    /// `claude`, `codex`: the harness, one headless run per turn; `claude:tmux:PANE`,
    /// `codex:tmux:PANE`: its terminal UI in a tmux pane (see `super::harness`).
    Harness(Harness, Option<String>),
}

impl Spec {
    /// Parses `exec:CMD`, `tmux:PANE` or `stdout`.
    pub(crate) fn parse(text: &str) -> Result<Spec, BadInput> {
        let spec = if let Some(command) = text.strip_prefix("exec:") {
            if command.trim().is_empty() {
                return Err(BadInput(format!("adapter {text:?}: exec needs a command")));
            }
            Spec::Exec(command.to_owned())
        } else if let Some(pane) = text.strip_prefix("tmux:") {
            // A socket path is absolute, and no tmux target holds `@/`.
            let (target, socket) = match pane.split_once("@/") {
                Some((target, path)) => (target, Some(format!("/{path}"))),
                None => (pane, None),
            };
            if target.is_empty() || target.chars().any(char::is_whitespace) {
                return Err(BadInput(format!("adapter {text:?}: tmux needs a pane target")));
            }
            Spec::Tmux(TmuxPane { target: target.to_owned(), socket })
        } else if text == "stdout" {
            Spec::Stdout
        } else if let Some((harness, pane)) = Harness::from_spec(text) {
            Spec::Harness(harness, pane)
        } else {
            return Err(BadInput(format!(
                "unknown adapter {text:?} (expected exec:CMD, tmux:PANE, stdout, claude or codex)"
            )));
        };
        Ok(spec)
    }

    /// The adapter that delivers to this spec for session `session` of `store`.
    pub(crate) fn adapter<'s>(
        &self,
        store: &'s Store<RealFs>,
        session: &SessionId,
    ) -> anyhow::Result<Box<dyn Adapter + 's>> {
        Ok(match self {
            Spec::Harness(harness, None) => {
                Box::new(HarnessAdapter::new(store, session, *harness)?)
            }
            Spec::Harness(harness, Some(pane)) => {
                Box::new(PaneAdapter::new(store, session, *harness, pane)?)
            }
            Spec::Exec(command) => Box::new(Exec {
                command: command.clone(),
                session: session.to_string(),
                timeout: EXEC_TIMEOUT,
            }),
            Spec::Tmux(pane) => Box::new(Tmux { pane: pane.clone() }),
            Spec::Stdout => Box::new(Stdout),
        })
    }
}

/// `exec:CMD`.
#[derive(Debug)]
struct Exec {
    command: String,
    session: String,
    timeout: Duration,
}

impl Adapter for Exec {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .env("SPEX_MID", message.mid)
            .env("SPEX_FROM", message.from.unwrap_or(""))
            .env("SPEX_SESSION_ID", &self.session)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot run sh -c {:?}: {error}", self.command))?;
        // Written from a thread so a command that never reads its stdin cannot block the wait
        // (and its timeout) below. A command that exits without reading is not an error.
        let stdin = child.stdin.take();
        let text = message.text.as_bytes().to_vec();
        let writer = std::thread::spawn(move || {
            if let Some(mut stdin) = stdin {
                let _ignored = stdin.write_all(&text);
            }
        });
        // What the command prints is read as it runs (a full pipe would stall it) and shown
        // afterwards on stderr, framed, so `spex`'s own stdout carries only its result.
        let stdout = child.stdout.take();
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut stdout) = stdout {
                let _ignored = std::io::Read::read_to_end(&mut stdout, &mut bytes);
            }
            bytes
        });
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() >= self.timeout => {
                    let _ignored = child.kill();
                    let _ignored = child.wait();
                    // The reader is left behind: a process the command started may still hold
                    // the pipe open.
                    return Err(format!(
                        "{:?} ran past {} s and was killed",
                        self.command,
                        self.timeout.as_secs()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(error) => return Err(format!("waiting for {:?}: {error}", self.command)),
            }
        };
        let _ignored = writer.join();
        if let Ok(output) = reader.join() {
            show_output(&self.command, message.mid, &output);
        }
        if status.success() {
            Ok(())
        } else {
            Err(format!("{:?} exited with {status}", self.command))
        }
    }
}

/// An exec command's output on stderr, labelled with the message and framed line by line (its
/// last line always ends), literal characters only.
fn show_output(command: &str, mid: &str, output: &[u8]) {
    if output.is_empty() {
        return;
    }
    let text = crate::render::literal(&String::from_utf8_lossy(output));
    let mut framed = format!("spex: output of {command:?} for {mid}:\n");
    for line in text.trim_end_matches('\n').split('\n') {
        framed.push_str("  | ");
        framed.push_str(line);
        framed.push('\n');
    }
    let _ignored = std::io::stderr().lock().write_all(framed.as_bytes());
}

/// `stdout`.
#[derive(Debug)]
struct Stdout;

impl Adapter for Stdout {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        let line = serde_json::json!({
            "schema": crate::render::SCHEMA_VERSION,
            "mid": message.mid,
            "from": message.from,
            "text": message.text,
        });
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|error| {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                CLOSED_PIPE.to_owned()
            } else {
                error.to_string()
            }
        })
    }

    /// A write to stdout that failed does not succeed when tried again (above all a reader that
    /// closed the pipe): the drain stops at the first refusal, the message still owed.
    fn attempts_max(&self) -> Option<u32> {
        Some(1)
    }
}

/// What the stdout adapter says when its reader closed the pipe (`spex session drain s | head`):
/// the drain then ends quietly, with what was not written still owed.
pub(crate) const CLOSED_PIPE: &str = "the reader closed the pipe";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_specs_say_why() {
        assert_eq!(Spec::parse("exec:cat").unwrap(), Spec::Exec("cat".to_owned()));
        assert_eq!(
            Spec::parse("tmux:%3").unwrap(),
            Spec::Tmux(TmuxPane { target: "%3".to_owned(), socket: None })
        );
        assert_eq!(
            Spec::parse("tmux:work:0.1@/tmp/tmux-0/other").unwrap(),
            Spec::Tmux(TmuxPane {
                target: "work:0.1".to_owned(),
                socket: Some("/tmp/tmux-0/other".to_owned())
            })
        );
        assert!(Spec::parse("tmux:@/tmp/s").unwrap_err().0.contains("pane"));
        assert_eq!(Spec::parse("stdout").unwrap(), Spec::Stdout);
        assert_eq!(Spec::parse("claude").unwrap(), Spec::Harness(Harness::Claude, None));
        assert_eq!(Spec::parse("codex").unwrap(), Spec::Harness(Harness::Codex, None));
        assert_eq!(
            Spec::parse("claude:tmux:%4").unwrap(),
            Spec::Harness(Harness::Claude, Some("%4".to_owned()))
        );
        assert!(Spec::parse("codex:tmux:").is_err());
        assert!(Spec::parse("exec: ").unwrap_err().0.contains("needs a command"));
        assert!(Spec::parse("tmux:").unwrap_err().0.contains("pane"));
        assert!(Spec::parse("carrier-pigeon").unwrap_err().0.contains("unknown adapter"));
    }

    #[test]
    fn exec_accepts_on_exit_zero_and_refuses_otherwise() {
        let session = SessionId::new("s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            RealFs::new(),
            dir.path(),
            std::sync::Arc::new(spex_engine::env::SystemClock),
            std::sync::Arc::new(spex_engine::env::RandomIds),
            spex_engine::Config::default(),
        )
        .unwrap();
        let message = Message { mid: "m1", text: "hello", from: None, attributes: None };
        let mut accept = Spec::Exec("test \"$(cat)\" = hello && test \"$SPEX_MID\" = m1".into())
            .adapter(&store, &session)
            .unwrap();
        accept.deliver(&message).unwrap();
        let mut refuse = Spec::Exec("exit 7".into()).adapter(&store, &session).unwrap();
        assert!(refuse.deliver(&message).unwrap_err().contains("exit status: 7"));
        let mut slow =
            Exec { command: "sleep 5".into(), session: "s".into(), timeout: Duration::ZERO };
        assert!(slow.deliver(&message).unwrap_err().contains("killed"));
    }
}
