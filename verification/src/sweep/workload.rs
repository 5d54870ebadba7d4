//! What a workload is: its steps and its name (the embedded scenarios in `scenario`, the
//! generated ones in `generate`). A leaf: it names neither.

use std::fmt;

use spex_engine::{Proposal, Status};

/// One step of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create a session (queued), with an optional adapter spec.
    Create {
        /// The session.
        id: &'static str,
        /// Its adapter.
        adapter: Option<&'static str>,
    },
    /// A lifecycle write.
    Set {
        /// The session.
        id: &'static str,
        /// Status.
        status: Status,
        /// Proposal.
        proposal: Option<Proposal>,
        /// Note.
        note: Option<&'static str>,
    },
    /// A launch begins (`Lifecycle::BeginLaunch`): readers keep seeing the frozen state.
    BeginLaunch {
        /// The session.
        id: &'static str,
        /// Status the launch declares.
        status: Status,
        /// Note.
        note: Option<&'static str>,
    },
    /// The launch in flight failed (`Lifecycle::FailLaunch`).
    FailLaunch {
        /// The session.
        id: &'static str,
    },
    /// A send; keyed when `key` is set (operation `sweep`).
    Send {
        /// The target.
        to: &'static str,
        /// The raw text.
        text: &'static str,
        /// The sending session.
        from: Option<&'static str>,
        /// The idempotency key.
        key: Option<&'static str>,
    },
    /// Sends committed together (`Store::send_together`, what concurrent sends through one
    /// handle do): each a `Send`, all to one session.
    SendTogether {
        /// The target.
        to: &'static str,
        /// The sends, in order.
        sends: &'static [Step],
    },
    /// Drain a session with an accepting adapter.
    Drain {
        /// The session.
        id: &'static str,
    },
    /// Drain a session with an adapter that refuses everything (the drain stops, all stays owed).
    DrainRefusing {
        /// The session.
        id: &'static str,
    },
    /// Archive.
    Archive {
        /// The session.
        id: &'static str,
    },
    /// Close.
    Close {
        /// The session.
        id: &'static str,
    },
    /// The session's worktree disappears (it is retired).
    Retire {
        /// The session.
        id: &'static str,
    },
}

impl Step {
    /// The session the step acts on.
    pub fn session(&self) -> &'static str {
        match self {
            Step::Create { id, .. }
            | Step::Set { id, .. }
            | Step::BeginLaunch { id, .. }
            | Step::FailLaunch { id }
            | Step::Drain { id }
            | Step::DrainRefusing { id }
            | Step::Archive { id }
            | Step::Close { id }
            | Step::Retire { id } => id,
            Step::Send { to, .. } | Step::SendTogether { to, .. } => to,
        }
    }

    /// The transition's name, as in the sweep matrix.
    pub fn transition(&self) -> &'static str {
        match self {
            Step::Create { .. } => "create",
            Step::Set { .. } => "append",
            Step::BeginLaunch { .. } => "launch",
            Step::FailLaunch { .. } => "launch-fail",
            Step::Send { key: None, .. } => "send",
            Step::Send { key: Some(_), .. } => "send-keyed",
            Step::SendTogether { .. } => "send-together",
            Step::Drain { .. } | Step::DrainRefusing { .. } => "drain",
            Step::Archive { .. } => "archive",
            Step::Close { .. } => "close",
            Step::Retire { .. } => "retire",
        }
    }
}

/// A named workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Its name (a shrunk workload's names its kept steps: `drain[0,3]`).
    pub name: std::borrow::Cow<'static, str>,
    /// The segment bound the store runs with.
    pub segment_bytes_max: u64,
    /// The steps.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// The scenario's own spelling of session `id` (steps hold `'static` names).
    pub fn session_id(&self, id: &str) -> Option<&'static str> {
        self.steps.iter().find_map(|step| match step {
            Step::Create { id: created, .. } if *created == id => Some(*created),
            _ => None,
        })
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.name)
    }
}
