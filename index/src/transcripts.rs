//! Harness transcripts in the index: each transcript (found by `spex_history::discover`) has a
//! row with a **watermark** (the byte offset and line count it was folded to, and a pin: a digest
//! of the first and the last 4 KiB before the offset), what it says about its session, and its
//! texts in the content index
//! (a person's prompts in `said`, the agent's answers and the tools it ran in `answers`, weighted
//! lower).
//!
//! An unchanged transcript (same size and modification time) costs the stat discovery already
//! made. A grown one is folded from its watermark, but only while the bytes before the watermark
//! are still the ones pinned; a rewritten, truncated or shrunk transcript, or a row of another
//! content version, is read again from its start (its texts replaced in the same transaction).
//! What a transcript said about itself is never erased by a fold that does not say it again.
//!
//! Known limit: the pin reads 8 KiB, not the whole prefix, so a rewrite that keeps the length and
//! both pinned ends (a same-length edit in the middle of a long transcript) is not seen until the
//! transcript changes there or `spex index rebuild` runs. Harnesses append; a rewrite that starts
//! a transcript over changes its head.
//!
//! Crash and concurrency story: as for sessions, each transcript's update is one `IMMEDIATE`
//! transaction that re-reads the row inside it; a scan killed anywhere leaves whole updates, and
//! the transcripts are never written.

use std::io::{Read as _, Seek as _, SeekFrom};

use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use spex_history::{Found, Kind};

use crate::refresh::{Text, delete_content, insert_content};
use crate::{Error, Index, Result};

/// Version of what is extracted from transcripts; a row of another version is read again.
pub const HISTORY_CONTENT_VERSION: i64 = 1;

/// How many bytes at the start of a transcript, and just before the watermark, pin it.
const PIN_BYTES: u64 = 4096;

/// What a scan did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Transcripts found.
    pub transcripts: u64,
    /// Transcripts read (grown, new or rewritten).
    pub read: u64,
    /// Of those, read again from their start.
    pub reset: u64,
    /// Lines folded.
    pub lines: u64,
    /// Rows dropped (their transcript is gone).
    pub removed: u64,
}

/// A transcript's row: a history session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    pub path: String,
    pub harness: String,
    pub id: String,
    pub size: i64,
    pub cwd: Option<String>,
    pub version: Option<String>,
    pub branch: Option<String>,
    pub model: Option<String>,
    pub first_ts: Option<String>,
    pub last_ts: Option<String>,
    /// The last message a person typed.
    pub last_activity: Option<String>,
    /// The first message a person typed.
    pub title: Option<String>,
    /// Lines folded.
    pub lines: i64,
}

/// The watermark and the fields a fold continues from.
struct Row {
    offset: u64,
    lines: u64,
    pin: String,
    size: i64,
    modified_ns: i64,
    version: i64,
    transcript: Transcript,
}

impl Index {
    /// Folds every transcript in `found` past its watermark, and drops the rows of transcripts
    /// no longer found.
    pub fn scan_history(&mut self, found: &[Found]) -> Result<Scanned> {
        let mut scanned = Scanned::default();
        // What every row recorded, in one query: an unchanged transcript is skipped without a
        // transaction (the stat discovery made is its whole cost).
        let seen: std::collections::HashMap<String, (i64, i64, i64)> = {
            let mut statement = self
                .connection
                .prepare_cached("SELECT path, size, modified_ns, content_version FROM transcripts")
                .map_err(|e| self.sqlite(e))?;
            let rows = statement
                .query_map([], |row| Ok((row.get(0)?, (row.get(1)?, row.get(2)?, row.get(3)?))))
                .map_err(|e| self.sqlite(e))?;
            rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))?
        };
        for transcript in found {
            scanned.transcripts += 1;
            let size = i64::try_from(transcript.size).unwrap_or(i64::MAX);
            let path = transcript.path.to_string_lossy();
            if seen.get(path.as_ref())
                == Some(&(size, transcript.modified_ns, HISTORY_CONTENT_VERSION))
            {
                continue;
            }
            if let Some((reset, lines)) = self.scan_one(transcript)? {
                scanned.read += 1;
                scanned.reset += u64::from(reset);
                scanned.lines += lines;
            }
        }
        let known: Vec<(String, String, String)> = {
            let mut statement = self
                .connection
                .prepare("SELECT path, harness, id FROM transcripts")
                .map_err(|e| self.sqlite(e))?;
            let rows = statement
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                .map_err(|e| self.sqlite(e))?;
            rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))?
        };
        let present: std::collections::HashSet<String> =
            found.iter().map(|f| f.path.to_string_lossy().into_owned()).collect();
        for (path, harness, id) in known {
            if present.contains(&path) {
                continue;
            }
            let transaction = self
                .connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| Error::Sqlite { path: self.path.clone(), source: e })?;
            delete_content(&transaction, &harness, &id)
                .and_then(|()| {
                    transaction
                        .execute("DELETE FROM transcripts WHERE path = ?1", params![path])
                        .map(drop)
                })
                .and_then(|()| transaction.commit())
                .map_err(|e| Error::Sqlite { path: self.path.clone(), source: e })?;
            scanned.removed += 1;
        }
        Ok(scanned)
    }

    /// Every transcript row, most recently active first.
    pub fn transcripts(&self) -> Result<Vec<Transcript>> {
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT path, harness, id, size, cwd, version, branch, model, first_ts, last_ts,
                        last_activity, title, lines
                 FROM transcripts ORDER BY COALESCE(last_activity, last_ts) DESC, id",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows = statement.query_map([], transcript_of).map_err(|e| self.sqlite(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }

    /// Folds one transcript; `Some((reset, lines))` when it was read.
    fn scan_one(&mut self, found: &Found) -> Result<Option<(bool, u64)>> {
        let path_text = found.path.to_string_lossy().into_owned();
        let sqlite_path = self.path.clone();
        let sqlite = |source| Error::Sqlite { path: sqlite_path.clone(), source };
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let row = transaction
            .query_row(
                "SELECT offset, lines, pin, size, modified_ns, content_version, path, harness, id,
                        cwd, version, branch, model, first_ts, last_ts, last_activity, title
                 FROM transcripts WHERE path = ?1",
                params![path_text],
                |row| {
                    Ok(Row {
                        offset: row.get::<_, i64>(0)? as u64,
                        lines: row.get::<_, i64>(1)? as u64,
                        pin: row.get(2)?,
                        size: row.get(3)?,
                        modified_ns: row.get(4)?,
                        version: row.get(5)?,
                        transcript: Transcript {
                            path: row.get(6)?,
                            harness: row.get(7)?,
                            id: row.get(8)?,
                            size: row.get(3)?,
                            cwd: row.get(9)?,
                            version: row.get(10)?,
                            branch: row.get(11)?,
                            model: row.get(12)?,
                            first_ts: row.get(13)?,
                            last_ts: row.get(14)?,
                            last_activity: row.get(15)?,
                            title: row.get(16)?,
                            lines: row.get(1)?,
                        },
                    })
                },
            )
            .optional()
            .map_err(sqlite)?;
        let size = i64::try_from(found.size).unwrap_or(i64::MAX);
        if let Some(row) = &row
            && row.version == HISTORY_CONTENT_VERSION
            && row.size == size
            && row.modified_ns == found.modified_ns
        {
            return Ok(None);
        }
        // Continue from the watermark only while the bytes it was pinned to are still there.
        let trusted = row.as_ref().filter(|row| {
            row.version == HISTORY_CONTENT_VERSION
                && found.size >= row.offset
                && pin(&found.path, row.offset).is_ok_and(|pin| pin == row.pin)
        });
        let (from, lines_before) = trusted.map_or((0, 0), |row| (row.offset, row.lines));
        let reset = trusted.is_none();
        let read = match spex_history::read_from(&found.path, found.harness, from, lines_before) {
            Ok(read) => read,
            // Gone between discovery and the read: the next scan drops its row.
            Err(spex_history::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None);
            }
            Err(error) => return Err(Error::History(error)),
        };
        let source = found.harness.name();
        let mut transcript = match (trusted, &row) {
            (Some(row), _) => row.transcript.clone(),
            (None, _) => Transcript {
                path: path_text.clone(),
                harness: source.to_owned(),
                id: found.id.clone(),
                size,
                cwd: None,
                version: None,
                branch: None,
                model: None,
                first_ts: None,
                last_ts: None,
                last_activity: None,
                title: None,
                lines: 0,
            },
        };
        if reset && row.is_some() {
            delete_content(&transaction, source, &found.id).map_err(sqlite)?;
        }
        // Enrichment never erases what is known.
        let meta = &read.meta;
        for (slot, value) in [
            (&mut transcript.cwd, &meta.cwd),
            (&mut transcript.version, &meta.version),
            (&mut transcript.branch, &meta.git_branch),
        ] {
            if slot.is_none() {
                slot.clone_from(value);
            }
        }
        if meta.model.is_some() {
            transcript.model.clone_from(&meta.model);
        }
        for event in &read.events {
            if let Some(ts) = &event.ts {
                if transcript.first_ts.is_none() {
                    transcript.first_ts = Some(ts.clone());
                }
                transcript.last_ts = Some(ts.clone());
            }
            let (column, kind, text) = match &event.kind {
                Kind::User { text } => {
                    if transcript.title.is_none() {
                        transcript.title = Some(title_of(text));
                    }
                    if event.ts.is_some() {
                        transcript.last_activity.clone_from(&event.ts);
                    }
                    ("said", "prompt", text.as_str())
                }
                Kind::Assistant { text } => ("answers", "answer", text.as_str()),
                Kind::ToolCall { name, .. } => ("answers", "tool", name.as_str()),
                _ => continue,
            };
            let text = Text {
                column,
                text,
                session: &found.id,
                kind,
                ts: event.ts.as_deref(),
                mid: None,
                source,
                line: Some(event.line),
            };
            insert_content(&transaction, &text).map_err(sqlite)?;
        }
        transcript.size = size;
        transcript.lines = read.lines as i64;
        let pinned = pin(&found.path, read.offset).unwrap_or_default();
        transaction
            .execute(
                "INSERT INTO transcripts(path, harness, id, offset, lines, pin, size, modified_ns,
                     cwd, version, branch, model, first_ts, last_ts, last_activity, title,
                     content_version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
                 ON CONFLICT(path) DO UPDATE SET harness = excluded.harness, id = excluded.id,
                     offset = excluded.offset, lines = excluded.lines, pin = excluded.pin,
                     size = excluded.size, modified_ns = excluded.modified_ns,
                     cwd = excluded.cwd, version = excluded.version, branch = excluded.branch,
                     model = excluded.model, first_ts = excluded.first_ts,
                     last_ts = excluded.last_ts, last_activity = excluded.last_activity,
                     title = excluded.title, content_version = excluded.content_version",
                params![
                    path_text,
                    source,
                    found.id,
                    read.offset as i64,
                    read.lines as i64,
                    pinned,
                    size,
                    found.modified_ns,
                    transcript.cwd,
                    transcript.version,
                    transcript.branch,
                    transcript.model,
                    transcript.first_ts,
                    transcript.last_ts,
                    transcript.last_activity,
                    transcript.title,
                    HISTORY_CONTENT_VERSION,
                ],
            )
            .map_err(sqlite)?;
        transaction.commit().map_err(sqlite)?;
        Ok(Some((reset, read.lines - lines_before)))
    }
}

/// The pin of a watermark: a SHA-256 of the (up to) [`PIN_BYTES`] bytes at the start of the
/// transcript and the [`PIN_BYTES`] bytes just before `offset`, as hex.
fn pin(path: &std::path::Path, offset: u64) -> std::io::Result<String> {
    use sha2::Digest as _;
    let mut file = std::fs::File::open(path)?;
    let mut digest = sha2::Sha256::new();
    for start in [0, offset.saturating_sub(PIN_BYTES)] {
        let end = (start + PIN_BYTES).min(offset);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        (&mut file).take(end - start).read_to_end(&mut bytes)?;
        if (bytes.len() as u64) < end - start {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        digest.update(&bytes);
    }
    Ok(hex::encode(digest.finalize()))
}

/// A title: the first line of a prompt, at most 200 bytes.
fn title_of(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    let mut end = line.len().min(200);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}

fn transcript_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Transcript> {
    Ok(Transcript {
        path: row.get(0)?,
        harness: row.get(1)?,
        id: row.get(2)?,
        size: row.get(3)?,
        cwd: row.get(4)?,
        version: row.get(5)?,
        branch: row.get(6)?,
        model: row.get(7)?,
        first_ts: row.get(8)?,
        last_ts: row.get(9)?,
        last_activity: row.get(10)?,
        title: row.get(11)?,
        lines: row.get(12)?,
    })
}
