//! The reply-channel seam: the one function that composes what is delivered to a session.
//!
//! Input: the raw text, whether the target's adapter is headless, an optional explicit channel,
//! whether the sender is a human, and whether the previous human send used the note channel
//! (derived from the durable log, never cached). An explicit channel wins; otherwise a headless
//! target defaults to `note` and a pane-backed one keeps the terminal. An effective `note`
//! appends the note-reply hint. An effective terminal on a human send whose previous human send
//! used `note` appends the terminal-reply counter-hint, once: the send itself is logged without
//! the note marker, so the next terminal send ships bare. Agent sends neither set nor clear the
//! human's channel. The log records the raw text (and `replyVia:"note"` only when note was
//! effective); the queue carries the composed text.

use std::fmt;
use std::str::FromStr;

/// Appended to a message whose reply must come back through a declaration note.
pub const NOTE_HINT: &str = "\n\n[spex reply channel: the sender cannot see your terminal. Deliver \
your reply by running `spex session ask --note \"<your complete reply>\"` (or put the complete \
reply on the --note of a truthful `spex session done` or `spex session park`). Do this even if the \
message above forbids tools or asks for output only: that command is how the reply reaches the \
sender; printing it in your terminal does not.]";

/// Appended once when a human who was reading notes reads the terminal again.
pub const TERMINAL_HINT: &str = "\n\n[spex reply channel: the sender reads your terminal again; \
reply in normal output, not in --note.]";

/// A reply channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyChannel {
    /// The agent replies through a declaration note.
    Note,
    /// The agent replies in its terminal.
    Terminal,
}

impl ReplyChannel {
    /// The channel's name.
    pub const fn name(self) -> &'static str {
        match self {
            ReplyChannel::Note => "note",
            ReplyChannel::Terminal => "terminal",
        }
    }
}

impl fmt::Display for ReplyChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for ReplyChannel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "note" => Ok(ReplyChannel::Note),
            "terminal" => Ok(ReplyChannel::Terminal),
            other => Err(format!("unknown reply channel {other:?} (expected note or terminal)")),
        }
        .inspect(|channel: &ReplyChannel| {
            debug_assert_eq!(channel.name(), s, "a channel parses from its name");
        })
    }
}

/// Whether an adapter spec names a headless adapter (`exec:...`, `stdout`, a harness run one
/// process per turn: `claude`, `codex`). A pane-backed (`tmux:...`, `claude:tmux:...`) or unset
/// adapter keeps the terminal.
pub fn adapter_is_headless(spec: Option<&str>) -> bool {
    let headless = spec.is_some_and(|spec| {
        spec.starts_with("exec:") || matches!(spec, "stdout" | "claude" | "codex")
    });
    debug_assert!(
        !headless || spec.is_some_and(|spec| !spec.contains("tmux:")),
        "a pane-backed adapter keeps its terminal"
    );
    headless
}

/// What the seam decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Composed {
    /// The transport text.
    pub text: String,
    /// Whether the effective channel is the note.
    pub note: bool,
}

/// Composes the delivered text (see the module header).
pub fn compose(
    raw: &str,
    headless_target: bool,
    explicit: Option<ReplyChannel>,
    human: bool,
    previous_human_used_note: bool,
) -> Composed {
    let effective = explicit.unwrap_or(if headless_target {
        ReplyChannel::Note
    } else {
        ReplyChannel::Terminal
    });
    let composed = match effective {
        ReplyChannel::Note => Composed { text: format!("{raw}{NOTE_HINT}"), note: true },
        ReplyChannel::Terminal if human && previous_human_used_note => {
            Composed { text: format!("{raw}{TERMINAL_HINT}"), note: false }
        }
        ReplyChannel::Terminal => Composed { text: raw.to_owned(), note: false },
    };
    assert!(composed.text.starts_with(raw), "a composed text delivers the raw text first");
    debug_assert_eq!(composed.note, effective == ReplyChannel::Note, "the note is the channel's");
    composed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_wins_then_headless_defaults_to_note() {
        assert!(compose("x", true, None, true, false).note);
        assert!(!compose("x", false, None, true, false).note);
        assert!(!compose("x", true, Some(ReplyChannel::Terminal), true, false).note);
        assert!(compose("x", false, Some(ReplyChannel::Note), true, false).note);
        assert!(
            compose("x", false, Some(ReplyChannel::Note), true, false).text.ends_with(NOTE_HINT)
        );
    }

    #[test]
    fn counter_hint_only_for_a_human_leaving_the_note_channel() {
        assert_eq!(compose("x", false, None, true, true).text, format!("x{TERMINAL_HINT}"));
        assert_eq!(compose("x", false, None, false, true).text, "x", "agent sends say nothing");
        assert_eq!(compose("x", false, None, true, false).text, "x");
    }

    #[test]
    fn headless_adapters() {
        assert!(adapter_is_headless(Some("exec:cat")));
        assert!(adapter_is_headless(Some("stdout")));
        assert!(adapter_is_headless(Some("claude")));
        assert!(adapter_is_headless(Some("codex")));
        assert!(!adapter_is_headless(Some("tmux:%1")));
        assert!(!adapter_is_headless(Some("claude:tmux:work.0")));
        assert!(!adapter_is_headless(None));
    }
}
