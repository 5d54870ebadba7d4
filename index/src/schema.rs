//! Opening the index: the database, its pragmas and its tables (derived data: tables of
//! another schema version are recreated, never migrated).

use std::path::Path;

use crate::{Error, INDEX_FILE, Index, Result, SCHEMA_VERSION};
use rusqlite::Connection;

/// How many bytes of new terms each full-text table gathers in memory before it writes them as a
/// segment (SQLite's default is 1 MiB): a large fold writes fewer, larger segments, which are
/// merged less often.
const HASH_BYTES: u64 = 16 << 20;

/// How long opening the index waits for other processes to let go of it.
const BUSY_WAIT_MS: u64 = 30_000;

impl Index {
    /// Opens (creating) the index of the store at `root`.
    pub fn open(root: &Path) -> Result<Index> {
        let path = root.join(INDEX_FILE);
        let sqlite = |source| Error::Sqlite { path: path.clone(), source };
        let connection = Connection::open(&path).map_err(sqlite)?;
        connection.busy_timeout(std::time::Duration::from_millis(BUSY_WAIT_MS)).map_err(sqlite)?;
        // Switching a new database to WAL takes an exclusive lock, and SQLite answers SQLITE_BUSY
        // at once (without its busy handler) while another process is doing the same: retry,
        // within the same bound as the busy timeout.
        let mut delay_ms = 1;
        let mut waited_ms = 0;
        loop {
            match connection.pragma_update(None, "journal_mode", "WAL") {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(failure, _))
                    if failure.code == rusqlite::ErrorCode::DatabaseBusy
                        && waited_ms < BUSY_WAIT_MS =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(delay_ms));
                    waited_ms += delay_ms;
                    delay_ms = (delay_ms * 2).min(50);
                }
                Err(error) => return Err(sqlite(error)),
            }
        }
        // Derived data: a lost transaction is refolded from the logs, so NORMAL suffices.
        connection.pragma_update(None, "synchronous", "NORMAL").map_err(sqlite)?;
        let index = Index {
            path: path.clone(),
            connection,
            transcript_chunk: crate::TRANSCRIPT_CHUNK_BYTES,
        };
        index.ensure_schema()?;
        Ok(index)
    }

    pub(crate) fn sqlite(&self, source: rusqlite::Error) -> Error {
        Error::Sqlite { path: self.path.clone(), source }
    }

    fn ensure_schema(&self) -> Result<()> {
        let version: i64 = self
            .connection
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|e| self.sqlite(e))?;
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        // Another (or no) schema: the tables are derived, so they are recreated in one
        // transaction; the file itself is kept.
        self.connection
            .execute_batch(&format!(
                "BEGIN IMMEDIATE;
                 DROP TABLE IF EXISTS sessions;
                 DROP TABLE IF EXISTS content;
                 DROP TABLE IF EXISTS grams;
                 DROP TABLE IF EXISTS transcripts;
                 DROP TABLE IF EXISTS meta;
                 CREATE TABLE sessions(
                     id TEXT PRIMARY KEY,
                     status TEXT NOT NULL, proposal TEXT, note TEXT, display TEXT NOT NULL,
                     created_at TEXT, archived INTEGER NOT NULL,
                     last_activity TEXT,
                     cursor_segment INTEGER NOT NULL, cursor_offset INTEGER NOT NULL,
                     cursor_index INTEGER NOT NULL, cursor_pin TEXT NOT NULL,
                     log_mtime_ns INTEGER NOT NULL,
                     record_len INTEGER NOT NULL, record_mtime_ns INTEGER NOT NULL,
                     content_version INTEGER NOT NULL,
                     version INTEGER NOT NULL,
                     preview TEXT,
                     removed INTEGER NOT NULL DEFAULT 0,
                     harness TEXT, thread TEXT,
                     owed INTEGER,
                     queue_len INTEGER NOT NULL DEFAULT -1,
                     queue_mtime_ns INTEGER NOT NULL DEFAULT -1);
                 CREATE INDEX sessions_thread ON sessions(harness, thread);
                 CREATE INDEX sessions_version ON sessions(version);
                 CREATE INDEX sessions_activity
                     ON sessions(COALESCE(last_activity, created_at));
                 CREATE VIRTUAL TABLE content USING fts5(
                     said, notes, answers, session UNINDEXED, kind UNINDEXED, ts UNINDEXED,
                     mid UNINDEXED, source UNINDEXED, line UNINDEXED, tokenize = 'unicode61');
                 CREATE VIRTUAL TABLE grams USING fts5(said, notes, answers, tokenize = 'trigram',
                     content = '', contentless_delete = 1, detail = none);
                 INSERT INTO content(content, rank) VALUES ('hashsize', {HASH_BYTES});
                 INSERT INTO grams(grams, rank) VALUES ('hashsize', {HASH_BYTES});
                 CREATE TABLE transcripts(
                     path TEXT PRIMARY KEY, harness TEXT NOT NULL, id TEXT NOT NULL,
                     offset INTEGER NOT NULL, lines INTEGER NOT NULL, pin TEXT NOT NULL,
                     size INTEGER NOT NULL, modified_ns INTEGER NOT NULL,
                     cwd TEXT, version TEXT, branch TEXT, model TEXT,
                     first_ts TEXT, last_ts TEXT, last_activity TEXT, title TEXT,
                     content_version INTEGER NOT NULL,
                     counts TEXT, unknown TEXT, signals TEXT,
                     change_version INTEGER NOT NULL DEFAULT 0,
                     removed INTEGER NOT NULL DEFAULT 0);
                 CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
                 INSERT INTO meta VALUES ('version', 0);
                 INSERT INTO meta VALUES ('generation', 0);
                 PRAGMA user_version = {SCHEMA_VERSION};
                 COMMIT;"
            ))
            .map_err(|e| self.sqlite(e))
    }
}
