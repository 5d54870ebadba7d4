//! Damage: what a read tolerated and what a scan of the store finds.
//!
//! Reads recover what the existing implementation's readers recover, and never stay silent about
//! it: a complete line glued onto a torn fragment is read, and the fragment is *noted* here (file
//! and offset). A command takes the notes ([`take_noted`]) and shows them as warnings. Noting
//! writes nothing to the store; sealed bytes are never rewritten.
//!
//! [`Store::doctor`](crate::Store::doctor) scans a store read-only and lists every damage it
//! finds with what a repair would do.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// One damaged place in the store.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Damage {
    /// The damaged file.
    pub path: PathBuf,
    /// Where the damage starts.
    pub offset: u64,
    /// What it is.
    pub kind: DamageKind,
}

/// What a damage is, and so what a repair does about it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DamageKind {
    /// A torn fragment with a complete line glued onto it, in the middle of a segment: the line
    /// is read, the fragment's bytes are lost, the sealed bytes are kept.
    GluedFragment {
        /// Bytes of the fragment.
        fragment_bytes: u64,
    },
    /// The unsynced end of the newest segment: the next writer truncates it.
    TornTail {
        /// Bytes past the last sound line.
        bytes: u64,
    },
    /// A delivery queue that readers read only in part and writers refuse.
    DamagedQueue {
        /// Why.
        reason: String,
    },
    /// A stale staging file of an interrupted replace: the next writer removes it.
    StaleStaging,
    /// An entry of the sessions directory that is no session (a name that is not a valid id, not
    /// UTF-8, or too long): the store ignores it.
    Foreign {
        /// Why it is no session.
        reason: String,
    },
    /// Damage no repair can undo (a damaged record, a mid-log line, a lost segment): the
    /// command that meets it refuses, naming it.
    Corrupt {
        /// Why.
        reason: String,
    },
}

impl Damage {
    /// What a repair does about this damage: a command to run where one helps, naming the
    /// session when the store's `layout` is given (each advice is followed in a test and leaves
    /// `doctor` clean).
    pub fn repair(&self, layout: Option<&crate::layout::Layout>) -> String {
        let id = layout.and_then(|layout| self.session(layout)).unwrap_or("ID");
        debug_assert!(!id.is_empty() && !id.contains(char::is_whitespace), "a command's argument");
        match self.kind {
            DamageKind::GluedFragment { .. } => {
                "none needed: the glued line is read; the fragment was lost when it was written"
                    .to_owned()
            }
            DamageKind::TornTail { .. } => format!(
                "the next write to the session truncates the torn tail (unacknowledged bytes), e.g. `spex session send {id} ...`"
            ),
            DamageKind::DamagedQueue { .. } => format!(
                "`spex session repair {id}` keeps the file beside, rebuilds the queue from its valid entries and the log's unsettled keyed receipts"
            ),
            DamageKind::StaleStaging => "the next write to the session removes it".to_owned(),
            DamageKind::Foreign { .. } => {
                "none by spex: it is no session and every command ignores it; move it out of the sessions directory"
                    .to_owned()
            }
            DamageKind::Corrupt { .. } => format!(
                "none in place: restore the file from a backup, or `spex session close {id}` (deletes the session; it does not read the damaged file)"
            ),
        }
    }

    /// The session the damaged file belongs to in the store laid out as `layout` (the first
    /// name under its sessions directory, when that is an id), if any.
    pub fn session(&self, layout: &crate::layout::Layout) -> Option<&str> {
        let sessions = layout.sessions_dir();
        let inside = self.path.strip_prefix(&sessions).ok()?;
        let name = inside.components().next()?.as_os_str().to_str()?;
        let id = crate::layout::SessionId::new(name).is_ok().then_some(name);
        debug_assert!(
            id.is_none_or(|id| self.path.starts_with(sessions.join(id))),
            "damage belongs to the session whose directory holds it"
        );
        id
    }

    /// Whether this damage is a warning (the store reads whole) rather than damage that loses or
    /// refuses something.
    pub fn is_warning(&self) -> bool {
        matches!(self.kind, DamageKind::GluedFragment { .. } | DamageKind::StaleStaging)
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display();
        match &self.kind {
            DamageKind::GluedFragment { fragment_bytes } => write!(
                f,
                "{path} at byte {}: a torn fragment of {fragment_bytes} bytes with a complete line glued onto it",
                self.offset
            ),
            DamageKind::TornTail { bytes } => {
                write!(f, "{path} at byte {}: a torn tail of {bytes} bytes", self.offset)
            }
            DamageKind::DamagedQueue { reason } => {
                write!(f, "{path}: damaged delivery queue: {reason}")
            }
            DamageKind::StaleStaging => write!(f, "{path}: a stale staging file"),
            DamageKind::Foreign { reason } => write!(f, "{path}: not a session: {reason}"),
            DamageKind::Corrupt { reason } => write!(f, "{path} at byte {}: {reason}", self.offset),
        }
    }
}

// What reads noted, by place: process-wide bookkeeping (std's mutex, not the loom switch: no
// model explores it), drained by the command that runs.
static NOTED: std::sync::Mutex<BTreeMap<(PathBuf, u64), Damage>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Notes damage a read tolerated (once per place).
pub(crate) fn note(damage: Damage) {
    let mut noted = NOTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let place = (damage.path.clone(), damage.offset);
    noted.entry(place.clone()).or_insert(damage);
    debug_assert!(noted.contains_key(&place), "damage is noted once per place");
}

/// The damage reads noted since the last call, in place order.
pub fn take_noted() -> Vec<Damage> {
    let mut noted = NOTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let taken: Vec<Damage> = std::mem::take(&mut *noted).into_values().collect();
    debug_assert!(noted.is_empty(), "what is taken is noted no more");
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, SessionId};

    /// The advice names the session the file is in, read under the store's own sessions
    /// directory: a root that lies under a directory named `sessions`, or a session named
    /// `sessions`, does not fool it.
    #[test]
    fn the_advice_names_the_session_the_file_is_in() {
        let layout = Layout::new("/home/me/sessions/store");
        let id = SessionId::new("sessions").unwrap_or_else(|error| panic!("{error}"));
        let damage = Damage {
            path: layout.record(&id),
            offset: 0,
            kind: DamageKind::Corrupt { reason: "not JSON".to_owned() },
        };
        assert_eq!(damage.session(&layout), Some("sessions"));
        assert!(damage.repair(Some(&layout)).contains("`spex session close sessions`"));
        let segment = layout.segment(&id, crate::layout::SegmentNo(1));
        let torn = Damage { path: segment, offset: 9, kind: DamageKind::TornTail { bytes: 3 } };
        assert_eq!(torn.session(&layout), Some("sessions"));
        // Outside the sessions directory (a lock), or without the layout: no name to give.
        let lock = Damage { path: layout.session_lock(&id), ..damage.clone() };
        assert_eq!(lock.session(&layout), None);
        assert!(damage.repair(None).contains("`spex session close ID`"));
    }
}
