//! tmux, as the adapters use it: one pane of a server (`TmuxPane`), the `tmux:PANE` adapter
//! (a message pasted as one bracketed paste from a named buffer, then Enter), and the `tmux`
//! command run with its output or why it failed. A leaf: the plain adapters and the harness's
//! pane adapter both build on it.

use std::io::Write as _;
use std::process::{Command, Stdio};

use spex_engine::{Adapter, Message};

/// Pastes `message` into tmux pane `pane` of the default server as one literal bracketed paste
/// and presses Enter (a harness's terminal UI in a pane is delivered to the way `tmux:PANE` is).
pub(crate) fn paste(pane: &str, message: &Message<'_>) -> Result<(), String> {
    Tmux { pane: TmuxPane { target: pane.to_owned(), socket: None } }.deliver(message)
}

/// A tmux pane: its target, on the server at `socket` (the default server without one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TmuxPane {
    pub(crate) target: String,
    pub(crate) socket: Option<String>,
}

impl TmuxPane {
    /// Runs `tmux args` against this pane's server.
    fn tmux(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<String, String> {
        let mut full: Vec<&str> = Vec::with_capacity(args.len() + 2);
        if let Some(socket) = &self.socket {
            full.extend(["-S", socket.as_str()]);
        }
        full.extend_from_slice(args);
        tmux(&full, stdin).map_err(|error| format!("{error} (pane {self})"))
    }

    /// Whether tmux finds the pane, or why not (`list-panes` refuses a target it cannot
    /// resolve; `display-message` would fall back to the current pane).
    pub(crate) fn check(&self) -> Result<(), String> {
        self.tmux(&["list-panes", "-t", &self.target, "-F", "#{pane_id}"], None).map(drop)
    }
}

impl std::fmt::Display for TmuxPane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.socket {
            Some(socket) => write!(f, "{} on the tmux server at {socket}", self.target),
            None => f.write_str(&self.target),
        }
    }
}

/// `tmux:PANE`.
#[derive(Debug)]
pub(crate) struct Tmux {
    pub(crate) pane: TmuxPane,
}

impl Tmux {
    fn tmux(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<(), String> {
        self.pane.tmux(args, stdin).map(drop)
    }
}

/// Runs `tmux args` (with `stdin` on its standard input, if given); its stdout, or why it
/// failed.
pub(crate) fn tmux(args: &[&str], stdin: Option<&[u8]>) -> Result<String, String> {
    let mut child = Command::new("tmux")
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot run tmux: {error}"))?;
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(bytes).map_err(|error| format!("tmux {}: {error}", args[0]))?;
    }
    let output = child.wait_with_output().map_err(|error| format!("tmux: {error}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!("tmux {}: {}", args[0], String::from_utf8_lossy(&output.stderr).trim()))
    }
}

impl Adapter for Tmux {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        // One named buffer per message, deleted by the paste, so concurrent drains into
        // different panes never paste each other's text.
        let buffer = format!("spex-{}", message.mid);
        let text = crate::render::literal(message.text);
        let target = self.pane.target.as_str();
        self.tmux(&["load-buffer", "-b", &buffer, "-"], Some(text.as_bytes()))?;
        if let Err(error) =
            self.tmux(&["paste-buffer", "-p", "-d", "-b", &buffer, "-t", target], None)
        {
            let _ignored = self.tmux(&["delete-buffer", "-b", &buffer], None);
            return Err(error);
        }
        self.tmux(&["send-keys", "-t", target, "Enter"], None)
    }
}
