//! OpenCode's sessions. OpenCode keeps them in a SQLite database, `opencode.db` in its data
//! directory (`$XDG_DATA_HOME/opencode`, else `~/.local/share/opencode`): a `session` row per
//! session, a `message` row per message and a `part` row per piece of one (text, a tool call with
//! its state, a step's end with its tokens), each row's `data` a JSON object.
//!
//! A session is named by a **locator**, `<dir>/opencode.db#<session id>`, which stands where a
//! file transcript's path does (the index keys rows by it); nothing on disk has that name.
//! Reading a session renders it as lines, one per row in the harness's own order: the session
//! first, then each message (by creation time, then id) with its parts inside it (by id, which
//! OpenCode makes increasing), so a message's role is known before its parts and its error after
//! them. The rendition is what the OpenCode parser (`parse`) reads and what a read's offset counts
//! bytes of; a session's rows change in place (a tool's state goes from running to completed), so
//! the index reads a changed session again from its start instead of continuing it.
//!
//! Crash story: none to tell of its own. The database belongs to OpenCode, which may be writing
//! it: it is opened read-only (`SQLITE_OPEN_READ_ONLY`, so nothing here can change it), each read
//! one read transaction (a consistent snapshot under OpenCode's write-ahead log), waiting at most
//! [`BUSY_WAIT`] for a writer's lock. A database that is not a regular file is refused unread.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{OpenFlags, OptionalExtension as _, params};
use serde_json::{Value, json};

use crate::Error;
use crate::parse::{Parser, Reading};

/// The database's file name in OpenCode's data directory.
pub const DB_FILE: &str = "opencode.db";

/// What separates the database's path from the session id in a locator.
const LOCATOR_MARK: char = '#';

/// How long a read waits for OpenCode's write lock before it fails.
pub const BUSY_WAIT: Duration = Duration::from_secs(5);

/// The locator of session `id` in the database `db`.
pub fn locator(db: &Path, id: &str) -> PathBuf {
    let mut text = db.as_os_str().to_owned();
    text.push(LOCATOR_MARK.to_string());
    text.push(id);
    PathBuf::from(text)
}

/// The database and session id a locator names; `None` for any other path.
pub fn split(path: &Path) -> Option<(PathBuf, String)> {
    let name = path.file_name()?.to_str()?;
    let id = name.strip_prefix(DB_FILE)?.strip_prefix(LOCATOR_MARK)?;
    if id.is_empty() {
        return None;
    }
    Some((path.with_file_name(DB_FILE), id.to_owned()))
}

/// Opens `db` read-only, refusing anything but a regular file.
fn open(db: &Path) -> Result<rusqlite::Connection, Error> {
    let io = |source| Error::Io { path: db.to_path_buf(), source };
    let metadata = std::fs::metadata(db).map_err(io)?;
    if !metadata.file_type().is_file() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, a device, a socket or a directory): refused, not read",
        )));
    }
    let database = |source| Error::Database { path: db.to_path_buf(), source };
    let connection = rusqlite::Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(database)?;
    connection.busy_timeout(BUSY_WAIT).map_err(database)?;
    Ok(connection)
}

/// One session as discovery lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its locator.
    pub path: PathBuf,
    /// Its id.
    pub id: String,
    /// The bytes of its rows' data and their count.
    pub size: u64,
    /// Its newest row's update, in nanoseconds since the epoch.
    pub modified_ns: i64,
}

/// Every session in `<dir>/opencode.db` (none when it does not exist). A session's size and
/// modification time (see [`Listed`]) move whenever OpenCode writes to the session. Discovery
/// runs before every command that reads history, so it reads no row's content: `octet_length`
/// is answered from a row's header, where `length` counts a text's characters by reading it.
pub fn list(dir: &Path) -> Result<Vec<Listed>, Error> {
    let mut found = Vec::new();
    let db = dir.join(DB_FILE);
    if matches!(std::fs::symlink_metadata(&db), Err(error)
        if error.kind() == std::io::ErrorKind::NotFound)
    {
        return Ok(found);
    }
    let connection = open(&db)?;
    let database = |source| Error::Database { path: db.clone(), source };
    let mut statement = connection
        .prepare(
            "SELECT s.id,
                 max(s.time_updated, coalesce(m.updated, 0), coalesce(p.updated, 0)),
                 octet_length(s.title) + coalesce(m.bytes, 0) + coalesce(p.bytes, 0)
                     + coalesce(m.rows, 0) + coalesce(p.rows, 0)
             FROM session s
             LEFT JOIN (SELECT session_id, max(time_updated) AS updated,
                            sum(octet_length(data)) AS bytes, count(*) AS rows
                        FROM message GROUP BY session_id) m ON m.session_id = s.id
             LEFT JOIN (SELECT session_id, max(time_updated) AS updated,
                            sum(octet_length(data)) AS bytes, count(*) AS rows
                        FROM part GROUP BY session_id) p ON p.session_id = s.id
             ORDER BY s.id",
        )
        .map_err(database)?;
    let rows = statement
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
        })
        .map_err(database)?;
    for row in rows {
        let (id, updated_ms, size) = row.map_err(database)?;
        found.push(Listed {
            path: locator(&db, &id),
            id,
            size: u64::try_from(size).unwrap_or(0),
            modified_ns: updated_ms.saturating_mul(1_000_000),
        });
    }
    Ok(found)
}

/// Whether the session a locator names may still be there: its database holds its row, or
/// cannot be read to tell (a database that is not found holds nothing).
pub fn holds(path: &Path) -> bool {
    let Some((db, id)) = split(path) else { return false };
    match open(&db) {
        Ok(connection) => connection
            .query_row("SELECT 1 FROM session WHERE id = ?1", params![id], |_| Ok(()))
            .optional()
            .map_or(true, |row| row.is_some()),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}

/// The rendition of the session a locator names: its lines, without newlines. A session that
/// is not in the database is `NotFound`, as a file transcript that went away is.
pub fn render(path: &Path) -> Result<Vec<String>, Error> {
    let Some((db, id)) = split(path) else {
        return Err(Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not an OpenCode session (<dir>/opencode.db#<session id>)",
            ),
        });
    };
    let mut connection = open(&db)?;
    let database = |source| Error::Database { path: db.clone(), source };
    // One snapshot: a session read while OpenCode writes is the session at one moment.
    let snapshot = connection.transaction().map_err(database)?;
    let session = session_of(&snapshot, &id).map_err(database)?;
    let Some(session) = session else {
        return Err(Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no session {id} in {}", db.display()),
            ),
        });
    };
    let mut lines = vec![session.to_string()];
    let mut by_message = parts_by_message(&snapshot, &id).map_err(database)?;
    let mut messages = snapshot
        .prepare(
            "SELECT id, time_created, data FROM message WHERE session_id = ?1
             ORDER BY time_created, id",
        )
        .map_err(database)?;
    let rows = messages
        .query_map(params![id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, Option<String>>(2)?,
            ))
        })
        .map_err(database)?;
    for row in rows {
        let (message, created, data) = row.map_err(database)?;
        let parts = by_message.remove(&message).unwrap_or_default();
        lines.push(
            json!({
                "type": "message",
                "id": message,
                "time_created": created,
                "data": data_of(data.as_deref()),
                "parts": parts,
            })
            .to_string(),
        );
    }
    Ok(lines)
}

/// Session `id`'s row as the rendition's first line, if the database holds it.
fn session_of(snapshot: &rusqlite::Transaction<'_>, id: &str) -> rusqlite::Result<Option<Value>> {
    snapshot
        .query_row(
            "SELECT directory, title, version, parent_id, time_created, time_updated
             FROM session WHERE id = ?1",
            params![id],
            |row| {
                Ok(json!({
                    "type": "session",
                    "id": id,
                    "directory": row.get::<_, Option<String>>(0)?,
                    "title": row.get::<_, Option<String>>(1)?,
                    "version": row.get::<_, Option<String>>(2)?,
                    "parent_id": row.get::<_, Option<String>>(3)?,
                    "time_created": row.get::<_, Option<i64>>(4)?,
                    "time_updated": row.get::<_, Option<i64>>(5)?,
                }))
            },
        )
        .optional()
}

/// Session `id`'s parts, each as the rendition shows it, by the message they belong to (in
/// order within each message).
fn parts_by_message(
    snapshot: &rusqlite::Transaction<'_>,
    id: &str,
) -> rusqlite::Result<std::collections::HashMap<String, Vec<Value>>> {
    let mut parts = snapshot.prepare(
        "SELECT message_id, id, time_created, data FROM part WHERE session_id = ?1
         ORDER BY message_id, id",
    )?;
    let rows = parts.query_map(params![id], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, Option<i64>>(2)?,
            row.get::<_, Option<String>>(3)?,
        ))
    })?;
    let mut by_message: std::collections::HashMap<String, Vec<Value>> =
        std::collections::HashMap::new();
    for row in rows {
        let (message, part, created, data) = row?;
        by_message.entry(message).or_default().push(json!({
            "id": part,
            "time_created": created,
            "data": data_of(data.as_deref()),
        }));
    }
    Ok(by_message)
}

/// A row's `data` as JSON: the object it holds, or the text itself when it holds no object
/// (the parser then counts it as unknown). Only an object is taken apart: a row holding the
/// JSON string `"x"` must not render as the row holding the text `x`.
fn data_of(data: Option<&str>) -> Value {
    match data {
        None => Value::Null,
        Some(text) => match serde_json::from_str(text) {
            Ok(object @ Value::Object(_)) => object,
            _ => Value::String(text.to_owned()),
        },
    }
}

/// As the file reader's `read_chunk`, for the session `path` locates: its rendition's lines from
/// byte `offset` (lines continue from `lines_before`) to its end, whatever the byte budget. The
/// rendition is in memory whole anyway, and the rows change in place: a read cut into chunks
/// would render each chunk from another snapshot, whose offsets need not line up.
pub(crate) fn read(
    path: &Path,
    parser: &mut Parser,
    offset: u64,
    lines_before: u64,
) -> Result<Reading, Error> {
    let lines = render(path)?;
    Ok(read_lines(&lines, parser, offset, lines_before))
}

/// Parses the rendition `lines` from byte `offset` (each line counted with its newline), as
/// [`read`] does. An offset inside a line starts at the next one.
fn read_lines(lines: &[String], parser: &mut Parser, offset: u64, lines_before: u64) -> Reading {
    let bytes = |line: &String| line.len() as u64 + 1;
    let mut at = 0u64;
    let mut rest = lines.iter();
    while at < offset
        && let Some(line) = rest.next()
    {
        at += bytes(line);
    }
    let mut read = Reading { offset: at, lines: lines_before, ..Reading::default() };
    for line in rest {
        read.offset += bytes(line);
        read.lines += 1;
        parser.line(read.lines, line, &mut read.events);
    }
    read.meta = parser.meta.clone();
    read
}
