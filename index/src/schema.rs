//! Opening the index: the database, its pragmas and its tables (derived data: tables of
//! another schema version are recreated, never migrated).
//!
//! Derived data heals itself: [`Index::open_refreshed`] moves a damaged index aside (a file that
//! is not a database, a malformed one, anything but a regular file in its place) and rebuilds it
//! from the logs; when the index cannot be written at all (a read-only store, a full disk) it
//! answers from an index in memory, folded from the logs, slower. The file is private to its
//! owner (0600): it holds what was said, redacted of credentials but not of everything else.

use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use faultfs::Fs;
use spex_engine::Store;

use crate::{Error, INDEX_FILE, Index, Result, SCHEMA_VERSION};
use rusqlite::Connection;

/// How many bytes of new terms each full-text table gathers in memory before it writes them as a
/// segment (SQLite's default is 1 MiB): a large fold writes fewer, larger segments, which are
/// merged less often.
const HASH_BYTES: u64 = 16 << 20;

/// How long opening the index waits for other processes to let go of it.
const BUSY_WAIT_MS: u64 = 30_000;

/// What opening the index had to do besides opening it, for the caller to tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Healed {
    /// The index was damaged: it was moved to `aside` and rebuilt from the logs.
    Rebuilt {
        /// Where the damaged file now is.
        aside: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The index cannot be written: the answer comes from an index in memory, folded from the
    /// logs (slower; nothing is kept).
    InMemory {
        /// Why the file could not be used.
        reason: String,
    },
}

impl std::fmt::Display for Healed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Healed::Rebuilt { aside, reason } => write!(
                f,
                "the session index was damaged ({reason}); moved aside to {} and rebuilt from the logs",
                aside.display()
            ),
            Healed::InMemory { reason } => write!(
                f,
                "the session index cannot be written ({reason}); answering from the logs (slower)"
            ),
        }
    }
}

impl Index {
    /// Opens the index of `store` and brings it up to date, healing it on the way: a damaged
    /// index is moved aside and rebuilt (once), an unwritable one is replaced by one in memory.
    /// `configure` is applied to every index opened; what was healed is returned beside it.
    pub fn open_refreshed<F: Fs>(
        store: &Store<F>,
        configure: &dyn Fn(&mut Index),
    ) -> Result<(Index, Option<Healed>)> {
        let root = store.layout().root();
        let attempt = |index: Result<Index>| {
            index.and_then(|mut index| {
                configure(&mut index);
                index.refresh(store)?;
                Ok(index)
            })
        };
        let mut healed = None;
        for _ in 0..2 {
            match attempt(Index::open(root)) {
                Ok(index) => return Ok((index, healed)),
                Err(error) if error.is_damage() && healed.is_none() => match Index::set_aside(root)
                {
                    Ok(aside) => healed = Some(Healed::Rebuilt { aside, reason: error.reason() }),
                    Err(cannot) => {
                        let index = attempt(Index::in_memory(root))?;
                        let reason = format!(
                            "{}, and it cannot be moved aside: {}",
                            error.reason(),
                            cannot.reason()
                        );
                        return Ok((index, Some(Healed::InMemory { reason })));
                    }
                },
                Err(error) if error.is_unwritable() || error.is_damage() => {
                    let index = attempt(Index::in_memory(root))?;
                    return Ok((index, Some(Healed::InMemory { reason: error.reason() })));
                }
                Err(error) => return Err(error),
            }
        }
        Err(Error::Damaged {
            path: root.join(INDEX_FILE),
            reason: "damaged again after a rebuild".to_owned(),
        })
    }

    /// Moves the index of the store at `root` (and its write-ahead log) aside, to
    /// `index.sqlite.damaged-<unix seconds>`; returns where it went.
    pub fn set_aside(root: &Path) -> Result<PathBuf> {
        let path = root.join(INDEX_FILE);
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let aside = root.join(format!("{INDEX_FILE}.damaged-{seconds}"));
        let io = |source| Error::Io { path: path.clone(), source };
        {
            std::fs::rename(&path, &aside).map_err(io)?;
            for suffix in ["-wal", "-shm"] {
                let side = root.join(format!("{INDEX_FILE}{suffix}"));
                let _ = std::fs::rename(
                    &side,
                    root.join(format!("{INDEX_FILE}.damaged-{seconds}{suffix}")),
                );
            }
        }
        Ok(aside)
    }

    /// What is wrong with the index file of the store at `root`, read-only (for `doctor`): `None`
    /// when there is none or it is sound, else the reason (something else in its place, not a
    /// database, a page that fails SQLite's `quick_check`).
    pub fn inspect(root: &Path) -> Option<String> {
        let path = root.join(INDEX_FILE);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.file_type().is_file() {
            return Some(format!("{} in place of the database file", kind_of(&meta.file_type())));
        }
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let checked = Connection::open_with_flags(&path, flags).and_then(|connection| {
            connection.pragma_query_value(None, "quick_check", |row| row.get::<_, String>(0))
        });
        match checked {
            Ok(verdict) if verdict == "ok" => None,
            Ok(verdict) => Some(verdict),
            Err(error) => Some(error.to_string()),
        }
    }

    /// An index in memory (nothing kept), for a store whose index file cannot be written.
    pub fn in_memory(root: &Path) -> Result<Index> {
        let path = root.join(INDEX_FILE);
        let connection = Connection::open_in_memory()
            .map_err(|source| Error::Sqlite { path: path.clone(), source })?;
        let index = Index { path, connection, transcript_chunk: crate::TRANSCRIPT_CHUNK_BYTES };
        index.ensure_schema()?;
        Ok(index)
    }

    /// Opens (creating, private to its owner) the index of the store at `root`. Anything but a
    /// regular file in its place is damage, refused without opening it (a FIFO would block).
    pub fn open(root: &Path) -> Result<Index> {
        let path = root.join(INDEX_FILE);
        prepare_file(&path)?;
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

    /// Checks the database file: `PRAGMA quick_check` (every page read once). `None` when it is
    /// sound, else SQLite's first complaint.
    pub fn check(&self) -> Result<Option<String>> {
        let verdict: String = self
            .connection
            .pragma_query_value(None, "quick_check", |row| row.get(0))
            .map_err(|e| self.sqlite(e))?;
        Ok((verdict != "ok").then_some(verdict))
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
                 DROP TABLE IF EXISTS usage;
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
                     queue_mtime_ns INTEGER NOT NULL DEFAULT -1,
                     record_title TEXT, first_said TEXT);
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
                 CREATE TABLE usage(
                     path TEXT NOT NULL, line INTEGER NOT NULL, ts TEXT, model TEXT, reply TEXT,
                     turn INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
                     cache_read INTEGER NOT NULL, cache_write INTEGER NOT NULL,
                     UNIQUE(path, reply));
                 CREATE INDEX usage_line ON usage(path, line);
                 CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
                 INSERT INTO meta VALUES ('version', 0);
                 INSERT INTO meta VALUES ('generation', 0);
                 PRAGMA user_version = {SCHEMA_VERSION};
                 COMMIT;"
            ))
            .map_err(|e| self.sqlite(e))
    }
}

/// Makes sure the index file at `path` is a regular file private to its owner: created 0600 when
/// missing (without following a link), tightened when an older one was readable by others.
/// Anything else in its place is [`Error::Damaged`].
fn prepare_file(path: &Path) -> Result<()> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => {
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(io)?;
            }
            Ok(())
        }
        Ok(meta) => Err(Error::Damaged {
            path: path.to_owned(),
            reason: format!("{} in place of the database file", kind_of(&meta.file_type())),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(path)
            {
                Ok(_) => Ok(()),
                // Another process created it first.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(error) => Err(io(error)),
            }
        }
        Err(error) => Err(io(error)),
    }
}

/// What a file type is, in words.
fn kind_of(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "a special file"
    }
}
