//! The session index: a derived SQLite database (`<root>/index.sqlite`, bundled SQLite with
//! FTS5) that answers "which sessions, in what order of last activity" without reading logs, and
//! searches what was said.
//!
//! # What it holds
//!
//! Per session: id, status, proposal, note, display word, created time, archived, last activity
//! (the timestamp of the last event [`is_activity`] accepts; null when there is none, and the
//! listing then falls back to the created time), a **watermark** (the cursor its log was folded
//! to), the record's size and mtime, the content version and a change version. The content index
//! holds every public event's text: what was said to the session, and the notes it declared.
//!
//! # Freshness without reading logs
//!
//! A refresh stats each session's record and its newest segment (one listing and one stat, see
//! `Store::stamp`); a session whose record and newest segment match what the row recorded is not
//! read at all. Otherwise only the log bytes past the watermark are folded (`Store::follow`), and
//! the record is read only if it changed. A log that no longer reaches the watermark (a power
//! loss took unacknowledged bytes) or a content-version bump re-extracts that session.
//!
//! # Crash and concurrency story
//!
//! The index is derived: deleting it loses nothing (`spex index rebuild`). Each session's update
//! is one `IMMEDIATE` transaction that re-reads the row inside it, so refreshers in several
//! processes serialize per update, never fold the same bytes twice and never lose an update; a
//! refresh killed at any point leaves whole updates only, and the next refresh continues from the
//! watermarks, which yields the same rows and content as a rebuild.
//!
//! [`is_activity`]: spex_engine::timeline::activity::is_activity

use std::path::{Path, PathBuf};

use faultfs::Fs;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use spex_engine::timeline::activity::last_activity;
use spex_engine::{Cursor, Event, SessionId, Signature, Store};

/// Version of the tables; a different version on disk recreates them (they are derived).
pub const SCHEMA_VERSION: i64 = 1;
/// Version of what is extracted into the content index; a session indexed under another version
/// is re-extracted on its next refresh.
pub const CONTENT_VERSION: i64 = 1;
/// The index file under the store root.
pub const INDEX_FILE: &str = "index.sqlite";

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The index database failed.
    #[error("session index {path}: {source}", path = path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// The store failed while the index read it (the engine's error is the source).
    #[error("the session index could not read the store")]
    Store(#[from] spex_engine::Error),
    /// A search query with nothing to search for.
    #[error("the search query is empty")]
    EmptyQuery,
}

impl Error {
    /// Whether another process held the index database past the wait.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Sqlite { source, .. } if matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        ))
    }
}

/// A result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// One session as the index lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The session id.
    pub id: String,
    /// Its status.
    pub status: String,
    /// Its proposal.
    pub proposal: Option<String>,
    /// Its note.
    pub note: Option<String>,
    /// Its display word.
    pub display: String,
    /// `createdAt`.
    pub created_at: Option<String>,
    /// Whether archived.
    pub archived: bool,
    /// The last activity, if any event was activity.
    pub last_activity: Option<String>,
    /// The index version of this row's last change.
    pub version: i64,
}

impl Row {
    /// The row as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "state": {
                "status": self.status,
                "proposal": self.proposal,
                "note": self.note,
                "display": self.display,
            },
            "createdAt": self.created_at,
            "archived": self.archived,
            "lastActivity": self.last_activity,
            "version": self.version,
        })
    }
}

/// How a listing is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// Last activity first (sessions without activity by their creation time).
    Activity,
    /// Newest created first.
    Created,
}

/// What a listing shows.
#[derive(Clone, Debug)]
pub struct Filter {
    /// The order.
    pub sort: Sort,
    /// Only this status (stored name or display word).
    pub status: Option<String>,
    /// Include archived sessions.
    pub all: bool,
}

/// One search hit.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The session.
    pub session: String,
    /// `said` (a message to the session) or `note` (a declaration of the session).
    pub kind: String,
    /// When.
    pub ts: String,
    /// The message id, for a message.
    pub mid: Option<String>,
    /// A snippet with the matched terms between `[` and `]`.
    pub snippet: String,
    /// bm25 rank (lower is better).
    pub rank: f64,
}

impl Hit {
    /// The hit as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "session": self.session,
            "kind": self.kind,
            "ts": self.ts,
            "mid": self.mid,
            "snippet": self.snippet,
            "rank": self.rank,
        })
    }
}

/// Search filters.
#[derive(Clone, Debug, Default)]
pub struct SearchFilter {
    /// Only this session.
    pub session: Option<String>,
    /// Only sessions in this status (stored name or display word).
    pub status: Option<String>,
    /// Only events at or after this timestamp (ISO-8601, compared as text).
    pub since: Option<String>,
    /// At most this many hits.
    pub limit: usize,
}

/// What a refresh did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// Sessions looked at.
    pub sessions: u64,
    /// Sessions whose row changed.
    pub updated: u64,
    /// Sessions removed (closed).
    pub removed: u64,
    /// Events folded.
    pub events: u64,
}

/// The index of one store.
#[derive(Debug)]
pub struct Index {
    path: PathBuf,
    connection: Connection,
}

/// Whether a session is exactly as its row recorded (see `Store::unchanged_since`).
fn unchanged<F: Fs>(store: &Store<F>, id: &SessionId, seen: &Seen) -> Result<bool> {
    if seen.content_version != CONTENT_VERSION {
        return Ok(false);
    }
    Ok(store.unchanged_since(id, &seen.signature())?)
}

/// What a row recorded about the store when it was last updated.
struct Seen {
    cursor: Cursor,
    log_mtime_ns: i64,
    record: (i64, i64),
    content_version: i64,
}

impl Seen {
    fn signature(&self) -> Signature {
        Signature {
            record: Some((self.record.0 as u64, self.record.1 as u64)),
            cursor: self.cursor,
            log_modified_ns: self.log_mtime_ns as u64,
        }
    }
}

/// How far a reader folded a session's log: the cursor, a pin of the bytes before it (see
/// `Store::pin`), and the last activity among the events before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watermark {
    /// Where the fold stopped.
    pub cursor: Cursor,
    /// The hash of the log bytes just before `cursor` when the fold stopped.
    pub pin: String,
    /// The last activity among the events folded.
    pub last_activity: Option<String>,
}

/// What [`fold`] read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// The events past the watermark (every event when `reset`).
    pub events: Vec<Event>,
    /// Whether the watermark was not trusted and the log was folded from its start.
    pub reset: bool,
    /// The new watermark.
    pub watermark: Watermark,
}

/// Test-only switch for the verification: trust a watermark without checking its pin (the
/// broken index the crash sweep's activity rule must catch).
#[cfg(feature = "mutants")]
pub static TRUST_WATERMARK_MUTANT: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

fn trust_without_pin() -> bool {
    #[cfg(feature = "mutants")]
    {
        TRUST_WATERMARK_MUTANT.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "mutants"))]
    {
        false
    }
}

/// Folds session `id`'s log past `from`: the one algorithm by which the index stays fresh.
///
/// The watermark is trusted only if the log still holds the bytes it was pinned to: a power loss
/// can drop unsynced lines a reader already saw, and later appends can regrow the log past the
/// old cursor with different bytes. An untrusted watermark (or a cursor the log no longer
/// reaches) folds the whole log again (`reset`). The new last activity is the in-log
/// projection (`last_activity`) of the events folded, or the watermark's when none is activity.
pub fn fold<F: Fs>(
    store: &Store<F>,
    id: &SessionId,
    from: Option<&Watermark>,
) -> spex_engine::Result<Folded> {
    let trusted = match from {
        Some(mark) if trust_without_pin() => Some(mark),
        Some(mark) if store.pin(id, mark.cursor)?.as_deref() == Some(mark.pin.as_str()) => {
            Some(mark)
        }
        _ => None,
    };
    let (events, cursor, reset) = match trusted {
        Some(mark) => match store.follow(id, mark.cursor) {
            Ok((events, next)) => (events, next, false),
            Err(spex_engine::Error::InvalidCursor { .. }) => {
                let (events, next) = store.follow(id, Cursor::START)?;
                (events, next, true)
            }
            Err(error) => return Err(error),
        },
        None => {
            let (events, next) = store.follow(id, Cursor::START)?;
            (events, next, true)
        }
    };
    let before = if reset { None } else { trusted.and_then(|mark| mark.last_activity.clone()) };
    let last_activity = last_activity(&events).map(str::to_owned).or(before);
    let pin = store.pin(id, cursor)?.unwrap_or_default();
    Ok(Folded { events, reset, watermark: Watermark { cursor, pin, last_activity } })
}

/// The values of one session row.
struct Upsert<'a> {
    id: &'a str,
    status: &'a str,
    proposal: Option<&'a str>,
    note: Option<&'a str>,
    display: &'a str,
    created_at: Option<String>,
    archived: bool,
    last_activity: Option<String>,
    cursor: Cursor,
    pin: &'a str,
    log_mtime_ns: i64,
    record: (i64, i64),
}

/// Writes one session row under the next change version (inside the caller's transaction).
fn upsert(transaction: &rusqlite::Transaction<'_>, row: &Upsert<'_>) -> rusqlite::Result<()> {
    let version: i64 = transaction.query_row(
        "UPDATE meta SET value = value + 1 WHERE key = 'version' RETURNING value",
        [],
        |row| row.get(0),
    )?;
    transaction.execute(
        "INSERT INTO sessions(id, status, proposal, note, display, created_at, archived,
             last_activity, cursor_segment, cursor_offset, cursor_index, cursor_pin,
             log_mtime_ns, record_len, record_mtime_ns, content_version, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
         ON CONFLICT(id) DO UPDATE SET status = excluded.status,
             proposal = excluded.proposal, note = excluded.note,
             display = excluded.display, created_at = excluded.created_at,
             archived = excluded.archived, last_activity = excluded.last_activity,
             cursor_segment = excluded.cursor_segment,
             cursor_offset = excluded.cursor_offset, cursor_index = excluded.cursor_index,
             cursor_pin = excluded.cursor_pin, log_mtime_ns = excluded.log_mtime_ns,
             record_len = excluded.record_len, record_mtime_ns = excluded.record_mtime_ns,
             content_version = excluded.content_version, version = excluded.version,
             removed = 0",
        params![
            row.id,
            row.status,
            row.proposal,
            row.note,
            row.display,
            row.created_at,
            row.archived,
            row.last_activity,
            row.cursor.segment as i64,
            row.cursor.offset as i64,
            row.cursor.index as i64,
            row.pin,
            row.log_mtime_ns,
            row.record.0,
            row.record.1,
            CONTENT_VERSION,
            version,
        ],
    )?;
    Ok(())
}

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
        let index = Index { path: path.clone(), connection };
        index.ensure_schema()?;
        Ok(index)
    }

    fn sqlite(&self, source: rusqlite::Error) -> Error {
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
                     removed INTEGER NOT NULL DEFAULT 0);
                 CREATE INDEX sessions_version ON sessions(version);
                 CREATE INDEX sessions_activity
                     ON sessions(COALESCE(last_activity, created_at));
                 CREATE VIRTUAL TABLE content USING fts5(
                     said, notes, session UNINDEXED, kind UNINDEXED, ts UNINDEXED,
                     mid UNINDEXED, tokenize = 'unicode61');
                 CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
                 INSERT INTO meta VALUES ('version', 0);
                 INSERT INTO meta VALUES ('generation', 0);
                 PRAGMA user_version = {SCHEMA_VERSION};
                 COMMIT;"
            ))
            .map_err(|e| self.sqlite(e))
    }

    /// Brings the index up to date with the store: see the module header.
    pub fn refresh<F: Fs>(&mut self, store: &Store<F>) -> Result<Refreshed> {
        let mut refreshed = Refreshed::default();
        let mut present = std::collections::BTreeSet::new();
        let ids = store.session_ids()?;
        let rows = self.all_seen()?;
        for id in ids {
            refreshed.sessions += 1;
            present.insert(id.to_string());
            let seen = rows.get(id.as_str());
            let result = match seen {
                Some(seen) if unchanged(store, &id, seen)? => continue,
                _ => self.refresh_session(store, &id, seen),
            };
            match result {
                Ok(Some(events)) => {
                    refreshed.updated += 1;
                    refreshed.events += events;
                }
                Ok(None) => {}
                // One damaged session is a row of its own; the others are still listed.
                Err(Error::Store(error @ spex_engine::Error::Corrupt { .. })) => {
                    if self.mark_corrupt(store, &id, &error)? {
                        refreshed.updated += 1;
                    }
                }
                Err(error) => return Err(error),
            }
        }
        let indexed: Vec<String> = {
            let mut statement = self
                .connection
                .prepare("SELECT id FROM sessions WHERE removed = 0")
                .map_err(|e| self.sqlite(e))?;
            let rows = statement.query_map([], |row| row.get(0)).map_err(|e| self.sqlite(e))?;
            rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))?
        };
        for id in indexed.iter().filter(|id| !present.contains(*id)) {
            self.remove(id)?;
            refreshed.removed += 1;
        }
        Ok(refreshed)
    }

    /// What every listed row recorded, in one query.
    fn all_seen(&self) -> Result<std::collections::HashMap<String, Seen>> {
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT id, cursor_segment, cursor_offset, cursor_index, record_len,
                        record_mtime_ns, content_version, log_mtime_ns
                 FROM sessions WHERE removed = 0",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    Seen {
                        cursor: Cursor {
                            segment: row.get::<_, i64>(1)? as u64,
                            offset: row.get::<_, i64>(2)? as u64,
                            index: row.get::<_, i64>(3)? as u64,
                        },
                        record: (row.get(4)?, row.get(5)?),
                        content_version: row.get(6)?,
                        log_mtime_ns: row.get(7)?,
                    },
                ))
            })
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }

    /// Updates one session's row if the store moved past `seen` (its row as preloaded by the
    /// refresh); returns the events folded, or `None` when the row was already fresh. The
    /// freshness check here is the full one (a listing): it covers what [`unchanged`] declines,
    /// such as an empty log, a legacy segment or a torn tail.
    fn refresh_session<F: Fs>(
        &mut self,
        store: &Store<F>,
        id: &SessionId,
        seen: Option<&Seen>,
    ) -> Result<Option<u64>> {
        let Some(record) = store.record_signature(id)? else {
            // Being created (no record yet) or closed: nothing to list.
            return Ok(None);
        };
        let record = (
            i64::try_from(record.0).unwrap_or(i64::MAX),
            i64::try_from(record.1).unwrap_or(i64::MAX),
        );
        let stamp = match store.stamp(id) {
            Ok(stamp) => stamp,
            Err(spex_engine::Error::NoSuchSession { .. }) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let fresh = |seen: &Seen| {
            seen.content_version == CONTENT_VERSION
                && seen.record == record
                && seen.cursor.segment == stamp.newest
                && seen.cursor.offset == stamp.newest_len
                && seen.log_mtime_ns == stamp.newest_modified_ns as i64
        };
        if seen.is_some_and(fresh) {
            return Ok(None);
        }
        let path = self.path.clone();
        let sqlite = |source| Error::Sqlite { path: path.clone(), source };
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        // Inside the write lock: another refresher may have folded this session meanwhile.
        let seen = transaction
            .query_row(
                "SELECT cursor_segment, cursor_offset, cursor_index, cursor_pin, last_activity,
                        content_version FROM sessions WHERE id = ?1 AND removed = 0",
                params![id.as_str()],
                |row| {
                    Ok((
                        Watermark {
                            cursor: Cursor {
                                segment: row.get::<_, i64>(0)? as u64,
                                offset: row.get::<_, i64>(1)? as u64,
                                index: row.get::<_, i64>(2)? as u64,
                            },
                            pin: row.get(3)?,
                            last_activity: row.get(4)?,
                        },
                        row.get::<_, i64>(5)?,
                    ))
                },
            )
            .optional()
            .map_err(sqlite)?;
        let from = seen.as_ref().filter(|(_, version)| *version == CONTENT_VERSION);
        let folded = match fold(store, id, from.map(|(mark, _)| mark)) {
            Ok(folded) => folded,
            Err(spex_engine::Error::NoSuchSession { .. }) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        // A session with no row has no content to drop (this keeps a rebuild linear: the
        // session column is not indexed, so each delete scans the content table).
        if folded.reset && seen.is_some() {
            transaction
                .execute("DELETE FROM content WHERE session = ?1", params![id.as_str()])
                .map_err(sqlite)?;
        }
        let events = &folded.events;
        let Watermark { cursor, pin, last_activity } = folded.watermark.clone();
        {
            let mut insert = transaction
                .prepare_cached(
                    "INSERT INTO content(said, notes, session, kind, ts, mid)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(sqlite)?;
            for event in events {
                match event {
                    Event::Sent(sent) => {
                        insert
                            .execute(params![
                                sent.text,
                                None::<String>,
                                id.as_str(),
                                "said",
                                sent.ts,
                                sent.mid
                            ])
                            .map_err(sqlite)?;
                    }
                    Event::Status(status) => {
                        if let Some(note) = &status.triple.note {
                            insert
                                .execute(params![
                                    None::<String>,
                                    note,
                                    id.as_str(),
                                    "note",
                                    status.ts,
                                    None::<String>
                                ])
                                .map_err(sqlite)?;
                        }
                    }
                }
            }
        }
        let record_now = match store.record(id) {
            Ok(record) => record,
            Err(spex_engine::Error::NoSuchSession { .. }) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let triple = record_now.public_triple();
        upsert(
            &transaction,
            &Upsert {
                id: id.as_str(),
                status: triple.status.name(),
                proposal: triple.proposal.map(|p| p.name()),
                note: triple.note.as_deref(),
                display: triple.display_word(),
                created_at: record_now.created_at(),
                archived: record_now.archived(),
                last_activity,
                cursor,
                pin: &pin,
                log_mtime_ns: stamp.newest_modified_ns as i64,
                record,
            },
        )
        .map_err(sqlite)?;
        transaction.commit().map_err(sqlite)?;
        Ok(Some(folded.events.len() as u64))
    }

    /// Lists a damaged session as a row with status `corrupt` and the reason as its note (as
    /// the existing board shows it), dropping its content; returns whether the row changed.
    /// The row keeps no watermark, so every refresh reads the session again until it is
    /// repaired.
    fn mark_corrupt<F: Fs>(
        &mut self,
        store: &Store<F>,
        id: &SessionId,
        error: &spex_engine::Error,
    ) -> Result<bool> {
        let reason = error.to_string();
        let record = store.record_signature(id)?.unwrap_or_default();
        let path = self.path.clone();
        let sqlite = |source| Error::Sqlite { path: path.clone(), source };
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let note: Option<Option<String>> = transaction
            .query_row(
                "SELECT note FROM sessions WHERE id = ?1 AND removed = 0 AND status = 'corrupt'",
                params![id.as_str()],
                |row| row.get(0),
            )
            .optional()
            .map_err(sqlite)?;
        if note.flatten().as_deref() == Some(reason.as_str()) {
            return Ok(false);
        }
        transaction
            .execute("DELETE FROM content WHERE session = ?1", params![id.as_str()])
            .map_err(sqlite)?;
        let record = (
            i64::try_from(record.0).unwrap_or(i64::MAX),
            i64::try_from(record.1).unwrap_or(i64::MAX),
        );
        upsert(
            &transaction,
            &Upsert {
                id: id.as_str(),
                status: "corrupt",
                proposal: None,
                note: Some(&reason),
                display: "corrupt",
                created_at: None,
                archived: false,
                last_activity: None,
                cursor: Cursor::START,
                pin: "",
                log_mtime_ns: 0,
                record,
            },
        )
        .map_err(sqlite)?;
        transaction.commit().map_err(sqlite)?;
        Ok(true)
    }

    fn remove(&mut self, id: &str) -> Result<()> {
        let path = self.path.clone();
        let sqlite = |source| Error::Sqlite { path: path.clone(), source };
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        transaction
            .execute("DELETE FROM content WHERE session = ?1", params![id])
            .map_err(sqlite)?;
        // A tombstone, so a watcher learns of the removal with its own version.
        transaction
            .execute(
                "UPDATE sessions SET removed = 1, version =
                     (SELECT value + 1 FROM meta WHERE key = 'version') WHERE id = ?1",
                params![id],
            )
            .map_err(sqlite)?;
        transaction
            .execute("UPDATE meta SET value = value + 1 WHERE key = 'version'", [])
            .map_err(sqlite)?;
        transaction.commit().map_err(sqlite)
    }

    /// Empties the index and folds every log again.
    pub fn rebuild<F: Fs>(&mut self, store: &Store<F>) -> Result<Refreshed> {
        self.connection
            .execute_batch("BEGIN IMMEDIATE; DELETE FROM content; DELETE FROM sessions; COMMIT;")
            .map_err(|e| self.sqlite(e))?;
        self.refresh(store)
    }

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
                        version, removed
                 FROM sessions WHERE version > ?1 ORDER BY version",
            )
            .map_err(|e| self.sqlite(e))?;
        let changes = statement
            .query_map(params![version], |row| {
                let removed: bool = row.get(9)?;
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

    /// The listed sessions.
    pub fn sessions(&self, filter: &Filter) -> Result<Vec<Row>> {
        let order = match filter.sort {
            Sort::Activity => "COALESCE(last_activity, created_at) DESC, id",
            Sort::Created => "created_at DESC, id",
        };
        let sql = format!(
            "SELECT id, status, proposal, note, display, created_at, archived, last_activity,
                    version
             FROM sessions
             WHERE removed = 0 AND (?1 OR archived = 0)
               AND (?2 IS NULL OR status = ?2 OR display = ?2)
             ORDER BY {order}"
        );
        let mut statement = self.connection.prepare_cached(&sql).map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map(params![filter.all, filter.status], row_of)
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }

    /// Full-text search, ranked by bm25 with what was said to a session weighted above the
    /// notes it declared. The query is taken literally: every whitespace-separated word is
    /// quoted, so FTS syntax in it is data.
    pub fn search(&self, query: &str, filter: &SearchFilter) -> Result<Vec<Hit>> {
        let literal = literal_query(query).ok_or(Error::EmptyQuery)?;
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT c.session, c.kind, c.ts, c.mid,
                        snippet(content, -1, '[', ']', '…', 16),
                        bm25(content, 2.0, 1.0) AS rank
                 FROM content c JOIN sessions s ON s.id = c.session
                 WHERE content MATCH ?1 AND s.removed = 0
                   AND (?2 IS NULL OR c.session = ?2)
                   AND (?3 IS NULL OR s.status = ?3 OR s.display = ?3)
                   AND (?4 IS NULL OR c.ts >= ?4)
                 ORDER BY rank LIMIT ?5",
            )
            .map_err(|e| self.sqlite(e))?;
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let hits = statement
            .query_map(
                params![literal, filter.session, filter.status, filter.since, limit],
                |row| {
                    Ok(Hit {
                        session: row.get(0)?,
                        kind: row.get(1)?,
                        ts: row.get(2)?,
                        mid: row.get(3)?,
                        snippet: row.get(4)?,
                        rank: row.get(5)?,
                    })
                },
            )
            .map_err(|e| self.sqlite(e))?;
        hits.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }

    /// Every row and every content entry, in a canonical order (to compare two indexes).
    pub fn dump(&self) -> Result<String> {
        let mut out = String::new();
        for row in self.sessions(&Filter { sort: Sort::Created, status: None, all: true })? {
            let mut row = row;
            row.version = 0;
            out.push_str(&format!("{row:?}\n"));
        }
        let mut statement = self
            .connection
            .prepare("SELECT session, kind, ts, mid, said, notes FROM content ORDER BY session, ts, kind, mid, said, notes")
            .map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map([], |row| {
                Ok(format!(
                    "{:?}\n",
                    (
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, Option<String>>(3)?,
                        row.get::<_, Option<String>>(4)?,
                        row.get::<_, Option<String>>(5)?,
                    )
                ))
            })
            .map_err(|e| self.sqlite(e))?;
        for row in rows {
            out.push_str(&row.map_err(|e| self.sqlite(e))?);
        }
        Ok(out)
    }
}

/// A listed row from the first nine columns of a `sessions` query.
fn row_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: row.get(0)?,
        status: row.get(1)?,
        proposal: row.get(2)?,
        note: row.get(3)?,
        display: row.get(4)?,
        created_at: row.get(5)?,
        archived: row.get(6)?,
        last_activity: row.get(7)?,
        version: row.get(8)?,
    })
}

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

/// `query` as an FTS5 query matching its words literally (each one a quoted string, all
/// required), or `None` when it has no words.
pub fn literal_query(query: &str) -> Option<String> {
    // Control characters (NUL above all, which FTS5 cannot take inside a string) separate words
    // like blanks: nothing stored is searched for by them.
    let words: Vec<String> = query
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|word| !word.is_empty())
        .map(|word| format!("\"{}\"", word.replace('"', "\"\"")))
        .collect();
    if words.is_empty() { None } else { Some(words.join(" ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_literal() {
        assert_eq!(literal_query("  "), None);
        assert_eq!(literal_query("\0"), None);
        assert_eq!(literal_query("a\0b").unwrap(), r#""a" "b""#);
        assert_eq!(literal_query("a OR b").unwrap(), r#""a" "OR" "b""#);
        assert_eq!(literal_query(r#"say "hi" NEAR(x*"#).unwrap(), r#""say" """hi""" "NEAR(x*""#);
    }
}
