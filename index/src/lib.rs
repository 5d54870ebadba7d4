//! The session index: a derived SQLite database (`<root>/index.sqlite`, bundled SQLite with
//! FTS5) that answers "which sessions, in what order of last activity" without reading logs, and
//! searches what was said.
//!
//! # What it holds
//!
//! Per session: id, status, proposal, note, display word, created time, archived, last activity
//! (the timestamp of the last event [`is_activity`] accepts; null when there is none, and the
//! listing then falls back to the created time), a **watermark** (the cursor its log was folded
//! to), the record's size and mtime, how many messages it is owed and the queue's size and mtime,
//! the content version and a change version. The content index
//! holds every public event's text: what was said to the session, and the notes it declared.
//!
//! # Freshness without reading logs
//!
//! A refresh stats each session's record, its queue and its newest segment (one listing and one
//! stat, see `Store::stamp`); a session whose record, queue and newest segment match what the row
//! recorded is not read at all. Otherwise only the log bytes past the watermark are folded
//! (`Store::follow`), and the record and the queue are read (a delivery writes only the queue). A log that no longer reaches the watermark (a power
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
//! # Layout
//!
//! `schema` opens the database and its tables; `fold` is the one algorithm that folds a log
//! past a watermark; `refresh` brings the rows up to date; `transcripts` folds harness
//! transcripts (Claude Code, Codex) past their own watermarks, so search covers what the agents
//! answered, and `usage` keeps what their replies spent; `query` lists and searches; `feed` is the change feed watchers follow.
//!
//! [`is_activity`]: spex_engine::timeline::activity::is_activity

mod feed;
mod fold;
mod query;
mod refresh;
mod schema;
mod transcripts;
mod usage;

use std::path::PathBuf;

use rusqlite::Connection;

pub use feed::Change;
#[cfg(feature = "mutants")]
pub use fold::TRUST_WATERMARK_MUTANT;
pub use fold::{Folded, Watermark, fold};
pub use query::{
    Filter, Hit, HitKind, HitSource, Matched, Row, RowStatus, SearchFilter, Sort, literal_query,
};
pub use refresh::Refreshed;
pub use schema::Healed;
pub use transcripts::{
    HISTORY_CONTENT_VERSION, History, Scanned, TRANSCRIPT_CHUNK_BYTES, TRANSCRIPT_CHUNK_ENV,
    Transcript,
};
pub use usage::Spent;

/// Version of the tables; a different version on disk recreates them (they are derived).
pub const SCHEMA_VERSION: i64 = 10;
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
    /// A harness transcript could not be read.
    #[error("the session index could not read a transcript")]
    History(#[from] spex_history::Error),
    /// A search query with nothing to search for.
    #[error("the search query is empty")]
    EmptyQuery,
    /// The index file is damaged in a way SQLite does not see (something else in its place).
    #[error("session index {path}: {reason}", path = path.display())]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The index file could not be prepared or moved aside.
    #[error("session index {path}: {source}", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the index file is damaged (not a database, malformed, something else in its
    /// place): it is derived, so it is moved aside and rebuilt.
    pub fn is_damage(&self) -> bool {
        match self {
            Error::Damaged { .. } => true,
            Error::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
            ),
            _ => false,
        }
    }

    /// Whether the index file cannot be written or opened for writing (a read-only store, a full
    /// disk, no permission, an I/O error): the answer then comes from an index in memory.
    pub fn is_unwritable(&self) -> bool {
        match self {
            Error::Io { .. } => true,
            Error::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(
                    rusqlite::ErrorCode::ReadOnly
                        | rusqlite::ErrorCode::DiskFull
                        | rusqlite::ErrorCode::CannotOpen
                        | rusqlite::ErrorCode::PermissionDenied
                        | rusqlite::ErrorCode::SystemIoFailure
                )
            ),
            _ => false,
        }
    }

    /// The reason alone (without the file's path).
    pub fn reason(&self) -> String {
        match self {
            Error::Damaged { reason, .. } => reason.clone(),
            Error::Sqlite { source, .. } => source.to_string(),
            Error::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        }
    }

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

/// The index of one store.
#[derive(Debug)]
pub struct Index {
    path: PathBuf,
    connection: Connection,
    /// The most transcript bytes one read parses ([`Index::set_transcript_chunk`]).
    transcript_chunk: u64,
}
