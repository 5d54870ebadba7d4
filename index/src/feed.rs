//! The change feed: the generation and change version watchers follow, and the changes since
//! a version.

use rusqlite::params;

use crate::query::row_of;
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
}

impl Change {
    /// The index version of this change.
    pub fn version(&self) -> i64 {
        match self {
            Change::Updated(row) => row.version,
            Change::Removed { version, .. } => *version,
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
            .prepare_cached(
                "SELECT id, status, proposal, note, display, created_at, archived, last_activity,
                        version, preview, removed
                 FROM sessions WHERE version > ?1 ORDER BY version",
            )
            .map_err(|e| self.sqlite(e))?;
        let changes = statement
            .query_map(params![version], |row| {
                let removed: bool = row.get(10)?;
                let row = row_of(row)?;
                Ok(if removed {
                    Change::Removed { id: row.id, version: row.version }
                } else {
                    Change::Updated(row)
                })
            })
            .map_err(|e| self.sqlite(e))?;
        changes.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }
}
