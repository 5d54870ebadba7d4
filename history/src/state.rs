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
        }
    }
}

/// The state of a session whose transcript holds `events` and last changed at `modified_ns`
/// (`now_ns` is now); `finished` when a linked spex session declared its work done or closed.
pub fn state(events: &[Event], modified_ns: i64, now_ns: i64, finished: bool) -> State {
    if finished {
        return State::Finished;
    }
    if !events.iter().any(|event| event.ts.is_some()) {
        return State::Unknown { missing: "timestamps" };
    }
    let last = events.iter().rev().find(|event| {
        !matches!(
            event.kind,
            Kind::Usage { .. }
                | Kind::Unknown { .. }
                | Kind::Lifecycle(Lifecycle::Start | Lifecycle::Summary { .. })
        )
    });
    let Some(last) = last else { return State::Unknown { missing: "messages" } };
    match &last.kind {
        Kind::Lifecycle(Lifecycle::Aborted { reason }) if reason == "interrupted" => {
            State::WaitingForInput
        }
        Kind::Lifecycle(Lifecycle::Aborted { reason }) => State::Crashed { reason: reason.clone() },
        Kind::Lifecycle(Lifecycle::TurnEnd) | Kind::Assistant { .. } => State::WaitingForInput,
        _ if now_ns.saturating_sub(modified_ns) < RUNNING_WINDOW_NS => State::Running,
        _ => State::Unfinished,
    }
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
        let usage =
            event(Kind::Usage { model: None, input: 1, output: 1, cache_read: 0, cache_write: 0 });
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
}
