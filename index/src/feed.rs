//! The change feed: the generation and change version watchers follow, and the changes since
//! a version.

use rusqlite::params;

use crate::query::{ROW_COLUMNS, row_of};
use crate::transcripts::{History, TRANSCRIPT_COLUMNS, history_at};
use crate::{Index, Result, Row};

/// One change of the index, for watchers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The session's row changed (or appeared).
    Updated(Row),
    /// The session was removed (closed).
    Removed {
        /// The session id.
        id: String,
        /// The index version of the removal.
        version: i64,
    },
    /// A history session (a harness transcript) changed or appeared.
    History(Box<History>),
    /// A history session's transcript is gone.
    HistoryRemoved {
        /// Its harness.
        harness: String,
        /// The harness's session id.
        id: String,
        /// The index version of the removal.
        version: i64,
    },
}

impl Change {
    /// The index version of this change.
    pub fn version(&self) -> i64 {
        match self {
            Change::Updated(row) => row.version,
            Change::History(history) => history.version,
            Change::Removed { version, .. } | Change::HistoryRemoved { version, .. } => *version,
        }
    }

    /// The change as every surface shows it: a history session's texts redacted (see
    /// [`History::shown`]).
    pub fn shown(self, identity: &spex_history::Identity) -> Change {
        match self {
            Change::History(history) => Change::History(Box::new(history.shown(identity))),
            other => other,
        }
    }

    /// The change as a watch-stream increment.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Change::Updated(row) => {
                serde_json::json!({ "type": "update", "version": row.version, "session": row.to_json() })
            }
            Change::Removed { id, version } => {
                serde_json::json!({ "type": "remove", "version": version, "id": id })
            }
            Change::History(history) => serde_json::json!({
                "type": "update", "version": history.version, "history": history.to_json(),
            }),
            Change::HistoryRemoved { harness, id, version } => serde_json::json!({
                "type": "remove", "version": version,
                "history": { "harness": harness, "id": id },
            }),
        }
    }
}

impl Index {
    /// The index's generation: bumped by every rebuild, after which watchers must reset (a
    /// rebuild forgets removals).
    pub fn generation(&self) -> Result<i64> {
        self.connection
            .query_row("SELECT value FROM meta WHERE key = 'generation'", [], |row| row.get(0))
            .map_err(|e| self.sqlite(e))
    }

    /// The index's current change version (strictly increases with every change).
    pub fn version(&self) -> Result<i64> {
        self.connection
            .query_row("SELECT value FROM meta WHERE key = 'version'", [], |row| row.get(0))
            .map_err(|e| self.sqlite(e))
    }

    /// Every change after `version`, oldest first: a row that was updated, or the id of one
    /// that was removed (its session closed).
    pub fn changes_since(&self, version: i64) -> Result<Vec<Change>> {
        let mut statement = self
            .connection
            .prepare_cached(&format!(
                "SELECT removed, {ROW_COLUMNS} FROM sessions WHERE version > ?1 ORDER BY version"
            ))
            .map_err(|e| self.sqlite(e))?;
        let changes = statement
            .query_map(params![version], |row| {
                let removed: bool = row.get(0)?;
                let row = row_of(row, 1)?;
                Ok(if removed {
                    Change::Removed { id: row.id, version: row.version }
                } else {
                    Change::Updated(row)
                })
            })
            .map_err(|e| self.sqlite(e))?;
        let mut changes: Vec<Change> =
            changes.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))?;
        let mut statement = self
            .connection
            .prepare_cached(&format!(
                "SELECT {TRANSCRIPT_COLUMNS}, t.change_version, t.removed, {LINK}
                 FROM transcripts t WHERE t.change_version > ?1"
            ))
            .map_err(|e| self.sqlite(e))?;
        let now_ns = now_ns();
        let histories = statement
            .query_map(params![version], |row| {
                let history = history_at(row, now_ns)?;
                let removed: bool = row.get(18)?;
                Ok(if removed {
                    Change::HistoryRemoved {
                        harness: history.transcript.harness,
                        id: history.transcript.id,
                        version: history.version,
                    }
                } else {
                    Change::History(Box::new(history))
                })
            })
            .map_err(|e| self.sqlite(e))?;
        for change in histories {
            changes.push(change.map_err(|e| self.sqlite(e))?);
        }
        changes.sort_by_key(Change::version);
        Ok(changes)
    }

    /// Every history session (harness transcript), most recently active first, with the spex
    /// session linked to it and where it stands now.
    pub fn history(&self) -> Result<Vec<History>> {
        let mut statement = self
            .connection
            .prepare_cached(&format!(
                "SELECT {TRANSCRIPT_COLUMNS}, t.change_version, t.removed, {LINK}
                 FROM transcripts t WHERE t.removed = 0
                 ORDER BY COALESCE(t.last_activity, t.last_ts) DESC, t.id"
            ))
            .map_err(|e| self.sqlite(e))?;
        let now_ns = now_ns();
        let rows =
            statement.query_map([], |row| history_at(row, now_ns)).map_err(|e| self.sqlite(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }
}

/// The spex session linked to a transcript row `t` (one naming its harness and thread), and its
/// display word: the two columns after a row's version and removal.
const LINK: &str = "(SELECT s.id FROM sessions s WHERE s.harness = t.harness AND s.thread = t.id
                       AND s.removed = 0 ORDER BY s.id LIMIT 1),
                    (SELECT s.display FROM sessions s WHERE s.harness = t.harness
                       AND s.thread = t.id AND s.removed = 0 ORDER BY s.id LIMIT 1)";

/// Now, in nanoseconds since the epoch.
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX))
}
