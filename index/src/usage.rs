//! What the agents spent: a projection of the transcripts' usage records and turns, folded with
//! the rest of a transcript and never written back to it.
//!
//! Each reply's tokens are one row (`turn = 0`), each message a person typed one row
//! (`turn = 1`). A reply is counted once: the parser drops the repeats it meets within one read
//! (Claude Code's per-block copies of a reply's usage, the Codex CLI's re-emitted counts), and a
//! reply it names (`reply`) is unique per transcript, so a read that starts at a watermark
//! inside a reply's lines adds nothing already counted.
//!
//! Crash story: rows are written in the transaction that folds their chunk and advances the
//! transcript's watermark, and dropped in the one that starts the transcript over or drops its
//! row: the projection is always exactly the folded part of each transcript.

use rusqlite::params;
use spex_history::{Event, Kind};

use crate::{Index, Result};

/// One reply's tokens, or one turn, of an indexed transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spent {
    /// The harness's name (`claude`, `codex`).
    pub harness: String,
    /// The harness's session id.
    pub id: String,
    /// The transcript's path.
    pub path: String,
    /// The session's working directory.
    pub project: Option<String>,
    /// The first message a person typed.
    pub title: Option<String>,
    /// When, as the transcript says it.
    pub ts: Option<String>,
    /// The model the reply came from (for a turn: the model of the reply before it, if any).
    pub model: Option<String>,
    /// A message a person typed (no tokens), not a reply.
    pub turn: bool,
    /// Input tokens not read from a cache.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens read from a cache.
    pub cache_read: u64,
    /// Input tokens written to a cache.
    pub cache_write: u64,
}

/// Drops the usage rows of the transcript at `path` (inside the caller's transaction).
pub(crate) fn forget(transaction: &rusqlite::Transaction<'_>, path: &str) -> rusqlite::Result<()> {
    transaction.prepare_cached("DELETE FROM usage WHERE path = ?1")?.execute(params![path])?;
    Ok(())
}

/// Records the replies and turns among `events` of the transcript at `path` (inside the
/// caller's transaction); a turn is put under the model of the reply before it (`model`: the
/// transcript's model before these events). Returns how many rows were added (a reply already
/// recorded adds none).
pub(crate) fn record(
    transaction: &rusqlite::Transaction<'_>,
    path: &str,
    events: &[Event],
    mut model: Option<String>,
) -> rusqlite::Result<u64> {
    let mut statement = transaction.prepare_cached(
        "INSERT OR IGNORE INTO usage(path, line, ts, model, reply, turn, input, output,
             cache_read, cache_write)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    let mut added = 0;
    for event in events {
        let inserted = match &event.kind {
            Kind::User { .. } => statement.execute(params![
                path,
                event.line as i64,
                event.ts,
                model,
                None::<String>,
                1,
                0,
                0,
                0,
                0
            ])?,
            Kind::Usage { model: replied, input, output, cache_read, cache_write, reply } => {
                if replied.is_some() {
                    model.clone_from(replied);
                }
                statement.execute(params![
                    path,
                    event.line as i64,
                    event.ts,
                    replied,
                    reply,
                    0,
                    tokens(*input),
                    tokens(*output),
                    tokens(*cache_read),
                    tokens(*cache_write)
                ])?
            }
            _ => 0,
        };
        added += inserted as u64;
    }
    Ok(added)
}

/// A token count as SQLite stores it (a count past `i64::MAX` is not one a transcript holds).
fn tokens(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

impl Index {
    /// Every reply and turn of the indexed transcripts, at or after `since` (a stored
    /// timestamp; rows without a time are left out then), in transcript and line order.
    pub fn spent(&self, since: Option<&str>) -> Result<Vec<Spent>> {
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT t.harness, t.id, t.path, t.cwd, t.title, u.ts, u.model, u.turn,
                     u.input, u.output, u.cache_read, u.cache_write
                 FROM usage u JOIN transcripts t ON t.path = u.path AND t.removed = 0
                 WHERE ?1 IS NULL OR u.ts >= ?1
                 ORDER BY u.path, u.line",
            )
            .map_err(|e| self.sqlite(e))?;
        let count = |row: &rusqlite::Row<'_>, at: usize| -> rusqlite::Result<u64> {
            Ok(row.get::<_, i64>(at)?.max(0) as u64)
        };
        let rows = statement
            .query_map(params![since], |row| {
                Ok(Spent {
                    harness: row.get(0)?,
                    id: row.get(1)?,
                    path: row.get(2)?,
                    project: row.get(3)?,
                    title: row.get(4)?,
                    ts: row.get(5)?,
                    model: row.get(6)?,
                    turn: row.get::<_, i64>(7)? != 0,
                    input: count(row, 8)?,
                    output: count(row, 9)?,
                    cache_read: count(row, 10)?,
                    cache_write: count(row, 11)?,
                })
            })
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }
}
