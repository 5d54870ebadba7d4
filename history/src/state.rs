//! Where a history session stands, from the signals its transcript has (and, when a spex session
//! is linked to it, what that session declared). A state the signals cannot support is `Unknown`,
//! naming the missing signal, never a guess; a finished session never reads as idle.

use crate::event::{Event, Kind, Lifecycle};

/// How recently a transcript must have changed for a turn in progress to read as running.
pub const RUNNING_WINDOW_NS: i64 = 120 * 1_000_000_000;

/// Where a session stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// A turn is in progress and the transcript changed within [`RUNNING_WINDOW_NS`].
    Running,
    /// The agent answered (or the person interrupted it): the person's move is next.
    WaitingForInput,
    /// A turn was left in the middle (the agent owes an answer) and the transcript stopped
    /// changing: idle and unfinished. A harness killed mid-turn looks the same.
    Unfinished,
    /// The harness recorded that the turn failed.
    Crashed { reason: String },
    /// The linked spex session declared its work done (or was closed).
    Finished,
    /// The transcript lacks the signal a state needs.
    Unknown { missing: &'static str },
    /// A signal the session should have is damaged or gone: a linked transcript that is not
    /// found, or one that cannot be read.
    Degraded { reason: String },
}

impl State {
    /// The state as people read it and JSON carries it.
    pub fn name(&self) -> String {
        match self {
            State::Running => "running".to_owned(),
            State::WaitingForInput => "waiting for input".to_owned(),
            State::Unfinished => "unfinished".to_owned(),
            State::Crashed { reason } => format!("crashed ({reason})"),
            State::Finished => "finished".to_owned(),
            State::Unknown { missing } => format!("unknown (no {missing})"),
            State::Degraded { reason } => format!("degraded ({reason})"),
        }
    }
}

/// What a transcript's events say about where its session stands, folded event by event (so an
/// index can keep it per transcript and continue it from where a scan stopped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// Some event carried a timestamp.
    pub timed: bool,
    /// The last event that moves a turn (a message, a tool call or result, a turn's end or
    /// abort; not usage, summaries, starts or unknown records).
    pub last: Option<Signal>,
}

/// The last event that moves a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// The agent answered, or the turn ended.
    Answered,
    /// The turn was aborted, with the harness's reason (`interrupted` by the person).
    Aborted { reason: String },
    /// A person's message, a tool call or a tool result: the turn goes on.
    InTurn,
}

impl Signals {
    /// The signals of `events`.
    pub fn of(events: &[Event]) -> Signals {
        let mut signals = Signals::default();
        signals.fold(events);
        signals
    }

    /// Continues the signals with `events` (the events after those already folded).
    pub fn fold(&mut self, events: &[Event]) {
        for event in events {
            self.timed |= event.ts.is_some();
            self.last = match &event.kind {
                Kind::Usage { .. }
                | Kind::Unknown { .. }
                | Kind::Lifecycle(Lifecycle::Start | Lifecycle::Summary { .. }) => continue,
                // The reason is shown as part of a state (and kept by the index): redacted
                // whole here, before any surface cuts it.
                Kind::Lifecycle(Lifecycle::Aborted { reason }) => Some(Signal::Aborted {
                    reason: crate::redact(reason, &crate::Identity::default()),
                }),
                Kind::Lifecycle(Lifecycle::TurnEnd) | Kind::Assistant { .. } => {
                    Some(Signal::Answered)
                }
                Kind::User { .. } | Kind::ToolCall { .. } | Kind::ToolResult { .. } => {
                    Some(Signal::InTurn)
                }
            };
        }
    }

    /// The signals as one short text (`timed` or `untimed`, then the last signal), as an index
    /// keeps them; [`Signals::decode`] reads it back.
    pub fn encode(&self) -> String {
        let timed = if self.timed { "timed" } else { "untimed" };
        match &self.last {
            None => timed.to_owned(),
            Some(Signal::Answered) => format!("{timed} answered"),
            Some(Signal::InTurn) => format!("{timed} in-turn"),
            Some(Signal::Aborted { reason }) => format!("{timed} aborted {reason}"),
        }
    }

    /// Reads [`Signals::encode`]'s text; `None` for any other.
    pub fn decode(text: &str) -> Option<Signals> {
        let (timed, rest) = text.split_once(' ').unwrap_or((text, ""));
        let timed = match timed {
            "timed" => true,
            "untimed" => false,
            _ => return None,
        };
        let last = match rest.split_once(' ').unwrap_or((rest, "")) {
            ("", "") => None,
            ("answered", "") => Some(Signal::Answered),
            ("in-turn", "") => Some(Signal::InTurn),
            ("aborted", reason) => Some(Signal::Aborted { reason: reason.to_owned() }),
            _ => return None,
        };
        Some(Signals { timed, last })
    }

    /// Where the session stands: its transcript last changed at `modified_ns` (`now_ns` is now);
    /// `finished` when a linked spex session declared its work done or closed.
    pub fn state(&self, modified_ns: i64, now_ns: i64, finished: bool) -> State {
        if finished {
            return State::Finished;
        }
        if !self.timed {
            return State::Unknown { missing: "timestamps" };
        }
        match &self.last {
            None => State::Unknown { missing: "messages" },
            Some(Signal::Aborted { reason }) if reason == "interrupted" => State::WaitingForInput,
            Some(Signal::Aborted { reason }) => State::Crashed { reason: reason.clone() },
            Some(Signal::Answered) => State::WaitingForInput,
            Some(Signal::InTurn) if now_ns.saturating_sub(modified_ns) < RUNNING_WINDOW_NS => {
                State::Running
            }
            Some(Signal::InTurn) => State::Unfinished,
        }
    }
}

/// The state of a session whose transcript holds `events` and last changed at `modified_ns`
/// (`now_ns` is now); `finished` when a linked spex session declared its work done or closed.
pub fn state(events: &[Event], modified_ns: i64, now_ns: i64, finished: bool) -> State {
    Signals::of(events).state(modified_ns, now_ns, finished)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: Kind) -> Event {
        Event { ts: Some("2026-11-30T10:00:00Z".to_owned()), line: 1, kind }
    }

    #[test]
    fn states_follow_the_signals() {
        let user = event(Kind::User { text: "go".to_owned() });
        let tool = event(Kind::ToolCall { name: "shell".to_owned(), summary: String::new() });
        let answer = event(Kind::Assistant { text: "done".to_owned() });
        let usage = event(Kind::Usage {
            model: None,
            input: 1,
            output: 1,
            cache_read: 0,
            cache_write: 0,
            reply: None,
        });
        let minute = 60 * 1_000_000_000;
        assert_eq!(state(&[user.clone(), tool.clone()], 0, minute, false), State::Running);
        assert_eq!(state(&[user.clone(), tool], 0, 10 * minute, false), State::Unfinished);
        assert_eq!(
            state(&[user.clone(), answer, usage], 0, 10 * minute, false),
            State::WaitingForInput
        );
        let aborted =
            |reason: &str| event(Kind::Lifecycle(Lifecycle::Aborted { reason: reason.to_owned() }));
        assert_eq!(
            state(&[user.clone(), aborted("interrupted")], 0, 0, false),
            State::WaitingForInput
        );
        assert_eq!(
            state(&[user.clone(), aborted("error")], 0, 0, false),
            State::Crashed { reason: "error".to_owned() }
        );
        // Finished never reads as idle, whatever the transcript's last line.
        assert_eq!(state(std::slice::from_ref(&user), 0, 10 * minute, true), State::Finished);
        let untimed = Event { ts: None, ..user };
        assert_eq!(state(&[untimed], 0, 0, false), State::Unknown { missing: "timestamps" });
        assert_eq!(state(&[], 0, 0, false).name(), "unknown (no timestamps)");
    }

    #[test]
    fn signals_fold_in_parts_and_read_back() {
        let user = event(Kind::User { text: "go".to_owned() });
        let answer = event(Kind::Assistant { text: "done".to_owned() });
        let aborted =
            event(Kind::Lifecycle(Lifecycle::Aborted { reason: "rate limit".to_owned() }));
        let summary = event(Kind::Lifecycle(Lifecycle::Summary { text: "s".to_owned() }));
        let events = [user, answer, summary.clone(), aborted, summary];
        for split in 0..=events.len() {
            let mut signals = Signals::of(&events[..split]);
            signals.fold(&events[split..]);
            assert_eq!(signals, Signals::of(&events), "split at {split}");
        }
        for signals in [
            Signals::default(),
            Signals::of(&events),
            Signals::of(&events[..1]),
            Signals::of(&events[..2]),
        ] {
            assert_eq!(Signals::decode(&signals.encode()), Some(signals.clone()));
        }
        assert_eq!(Signals::decode("sometimes"), None);
        assert_eq!(
            Signals::of(&events).state(0, 0, false),
            State::Crashed { reason: "rate limit".to_owned() }
        );
    }
}
