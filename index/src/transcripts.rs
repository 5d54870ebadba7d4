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
//! An OpenCode session (rows of OpenCode's database, changed in place) has no bytes to pin: a
//! changed one is read again from its start.
//!
//! Known limit: the pin reads 8 KiB, not the whole prefix, so a rewrite that keeps the length and
//! both pinned ends (a same-length edit in the middle of a long transcript) is not seen until the
//! transcript changes there or `spex index rebuild` runs. Harnesses append; a rewrite that starts
//! a transcript over changes its head.
//!
//! Crash and concurrency story: as for sessions, each transcript's update is one `IMMEDIATE`
//! transaction that re-reads the row inside it; a scan killed anywhere leaves whole updates, and
//! the transcripts are never written.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read as _, Seek as _, SeekFrom};

use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use spex_history::{Found, Kind, Signals};

use crate::refresh::{Text, delete_content, insert_content};
use crate::{Error, Index, Result};

/// Version of what is extracted from transcripts; a row of another version is read again.
pub const HISTORY_CONTENT_VERSION: i64 = 2;

/// How many bytes at the start of a transcript, and just before the watermark, pin it.
const PIN_BYTES: u64 = 4096;

/// The most transcript bytes one read parses: a longer transcript is folded in chunks, its
/// watermark advancing with each, so a scan's memory is bounded whatever a transcript's size.
pub const TRANSCRIPT_CHUNK_BYTES: u64 = 8 << 20;

/// The environment variable that overrides [`TRANSCRIPT_CHUNK_BYTES`] (read by the caller, not
/// here; tests set it small to stop scans between chunks).
pub const TRANSCRIPT_CHUNK_ENV: &str = "SPEX_HISTORY_CHUNK_BYTES";

/// How many chunks' bytes one transaction folds before it commits: small transcripts share a
/// transaction (fewer, larger full-text segments to merge later), and another writer waits for
/// at most one batch.
const CHUNKS_PER_BATCH: u64 = 4;

/// What a scan did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// Transcripts that could not be read, with why: skipped (their rows, if any, kept as they
    /// were), never a failure of the whole scan.
    pub unreadable: Vec<(std::path::PathBuf, String)>,
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
    /// The transcript's modification time when it was folded to its end (-1 part way).
    pub modified_ns: i64,
    /// Events by kind.
    pub counts: BTreeMap<String, u64>,
    /// Unknown record kinds, counted.
    pub unknown: BTreeMap<String, u64>,
    /// What the events say about where the session stands.
    pub signals: Signals,
}

/// The columns of a [`Transcript`], in [`transcript_of`]'s order.
pub(crate) const TRANSCRIPT_COLUMNS: &str = "path, harness, id, size, cwd, version, branch, model,
    first_ts, last_ts, last_activity, title, lines, modified_ns, counts, unknown, signals";

/// A history session as the watch stream carries it: its transcript's row, the spex session
/// linked to it (a record naming its harness and thread), and where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    pub transcript: Transcript,
    /// The index version of its last change.
    pub version: i64,
    /// The linked spex session.
    pub spex: Option<String>,
    /// Where it stands, when it was read (a linked spex session that declared its work done
    /// makes it finished).
    pub state: spex_history::State,
}

impl History {
    /// The history session with its title, project and path redacted (credentials and local
    /// identity), as every surface shows it.
    pub fn shown(mut self, identity: &spex_history::Identity) -> History {
        let redact = |text: &mut String| *text = spex_history::redact(text, identity);
        self.transcript.title.as_mut().map(redact);
        self.transcript.cwd.as_mut().map(redact);
        redact(&mut self.transcript.path);
        self
    }

    /// The history session as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let t = &self.transcript;
        serde_json::json!({
            "harness": t.harness,
            "id": t.id,
            "title": t.title,
            "project": t.cwd,
            "path": t.path,
            "first": t.first_ts,
            "last": t.last_ts,
            "lastActivity": t.last_activity,
            "lines": t.lines,
            "state": self.state.name(),
            "spexSession": self.spex,
            "version": self.version,
        })
    }
}

impl Index {
    /// Folds every transcript in `found` past its watermark, and drops the rows of transcripts
    /// no longer found. Transcripts are read and parsed on a second thread while this one
    /// writes what the first read.
    pub fn scan_history(&mut self, found: &[Found]) -> Result<Scanned> {
        let mut scanned = Scanned::default();
        // What every row recorded, in one query: an unchanged transcript is skipped without a
        // transaction (the stat discovery made is its whole cost).
        let seen: HashMap<String, ScanMark> = {
            let mut statement = self
                .connection
                .prepare_cached(&format!(
                    "SELECT {SEEN_COLUMNS}, path FROM transcripts WHERE removed = 0"
                ))
                .map_err(|e| self.sqlite(e))?;
            let rows = statement
                .query_map([], |row| Ok((row.get(6)?, ScanMark::of(row)?)))
                .map_err(|e| self.sqlite(e))?;
            rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))?
        };
        let mut work = Vec::new();
        for transcript in found {
            scanned.transcripts += 1;
            let seen = seen.get(transcript.path.to_string_lossy().as_ref());
            if seen.is_some_and(|seen| seen.unchanged(transcript)) {
                continue;
            }
            work.push((transcript, seen.cloned()));
        }
        let raced = self.fold_read_ahead(work, &mut scanned)?;
        // Transcripts another scan folded meanwhile: each again, alone, from its row as it is.
        for transcript in raced {
            self.fold_alone(transcript, &mut scanned)?;
        }
        self.drop_gone(found, &mut scanned)?;
        Ok(scanned)
    }

    /// Sets the most transcript bytes one read parses (at least 1; a transaction folds four
    /// chunks' bytes).
    pub fn set_transcript_chunk(&mut self, bytes: u64) {
        self.transcript_chunk = bytes.max(1);
    }

    /// Every transcript row, most recently active first.
    pub fn transcripts(&self) -> Result<Vec<Transcript>> {
        let mut statement = self
            .connection
            .prepare_cached(&format!(
                "SELECT {TRANSCRIPT_COLUMNS}
                 FROM transcripts WHERE removed = 0
                 ORDER BY COALESCE(last_activity, last_ts) DESC, id"
            ))
            .map_err(|e| self.sqlite(e))?;
        let rows = statement.query_map([], transcript_of).map_err(|e| self.sqlite(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }

    /// Reads the transcripts of `work` in chunks on a second thread, planned from the rows as
    /// `scan_history` saw them, and folds each chunk on this one; transactions commit every
    /// [`CHUNKS_PER_BATCH`] chunks' bytes. Returns the transcripts whose row moved meanwhile (another scan folded
    /// them): their chunks were dropped unfolded.
    fn fold_read_ahead<'a>(
        &mut self,
        work: Vec<(&'a Found, Option<ScanMark>)>,
        scanned: &mut Scanned,
    ) -> Result<Vec<&'a Found>> {
        let index_path = self.path.clone();
        let sqlite = |source| Error::Sqlite { path: index_path.clone(), source };
        let connection = &mut self.connection;
        let chunk_bytes = self.transcript_chunk;
        let batch_bytes = chunk_bytes.saturating_mul(CHUNKS_PER_BATCH);
        std::thread::scope(|scope| {
            let (send, receive) = std::sync::mpsc::sync_channel::<Chunk<'a>>(2);
            scope.spawn(move || read_ahead(work, chunk_bytes, &send));
            let mut raced: Vec<&'a Found> = Vec::new();
            let mut previous: Option<&std::path::Path> = None;
            let mut chunks = receive.into_iter().peekable();
            while chunks.peek().is_some() {
                let transaction = connection
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(sqlite)?;
                let mut pending = 0u64;
                while pending < batch_bytes
                    && let Some(chunk) = chunks.next()
                {
                    let first = previous != Some(chunk.found.path.as_path());
                    previous = Some(chunk.found.path.as_path());
                    if raced.last().is_some_and(|last| std::ptr::eq(*last, chunk.found)) {
                        continue;
                    }
                    let read = match chunk.read {
                        Ok(read) => read,
                        Err(error) if gone(&error) => continue,
                        Err(error) => {
                            scanned.unreadable.push((chunk.found.path.clone(), error.to_string()));
                            continue;
                        }
                    };
                    match fold(&transaction, chunk.found, chunk.from, chunk.lines_before, &read)
                        .map_err(sqlite)?
                    {
                        Some(folded) => {
                            scanned.read += u64::from(first);
                            scanned.reset += u64::from(first && folded.reset);
                            scanned.lines += folded.lines;
                        }
                        None => raced.push(chunk.found),
                    }
                    pending += read.offset - chunk.from;
                }
                transaction.commit().map_err(sqlite)?;
            }
            Ok(raced)
        })
    }

    /// Folds one transcript on this thread, a chunk per transaction, each planned from the row
    /// read inside it.
    fn fold_alone(&mut self, found: &Found, scanned: &mut Scanned) -> Result<()> {
        let index_path = self.path.clone();
        let sqlite = |source| Error::Sqlite { path: index_path.clone(), source };
        let mut first = true;
        loop {
            let transaction = self
                .connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sqlite)?;
            let seen = transaction
                .query_row(
                    &format!(
                        "SELECT {SEEN_COLUMNS} FROM transcripts WHERE path = ?1 AND removed = 0"
                    ),
                    params![found.path.to_string_lossy()],
                    ScanMark::of,
                )
                .optional()
                .map_err(sqlite)?;
            if seen.as_ref().is_some_and(|seen| seen.unchanged(found)) {
                return Ok(());
            }
            let (from, lines_before) = plan(found, seen.as_ref());
            let read = match spex_history::read_chunk(
                &found.path,
                &mut spex_history::Parser::new(found.harness),
                from,
                lines_before,
                self.transcript_chunk,
            ) {
                Ok(read) => read,
                Err(error) if gone(&error) => return Ok(()),
                Err(error) => {
                    scanned.unreadable.push((found.path.clone(), error.to_string()));
                    return Ok(());
                }
            };
            let folded = fold(&transaction, found, from, lines_before, &read).map_err(sqlite)?;
            transaction.commit().map_err(sqlite)?;
            if let Some(folded) = folded {
                scanned.read += u64::from(first);
                scanned.reset += u64::from(first && folded.reset);
                scanned.lines += folded.lines;
            }
            first = false;
            if !read.more {
                return Ok(());
            }
        }
    }

    /// Drops the rows (and texts) of transcripts no longer found.
    fn drop_gone(&mut self, found: &[Found], scanned: &mut Scanned) -> Result<()> {
        let known: Vec<(String, String, String)> = {
            let mut statement = self
                .connection
                .prepare("SELECT path, harness, id FROM transcripts WHERE removed = 0")
                .map_err(|e| self.sqlite(e))?;
            let rows = statement
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                .map_err(|e| self.sqlite(e))?;
            rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))?
        };
        let present: HashSet<String> =
            found.iter().map(|f| f.path.to_string_lossy().into_owned()).collect();
        for (path, harness, id) in known {
            // Not found by this scan (its roots may be others: a `--source` of another
            // command) and gone from the disk (an OpenCode session: from its database).
            let on_disk = match spex_history::opencode::split(std::path::Path::new(&path)) {
                Some(_) => spex_history::opencode::holds(std::path::Path::new(&path)),
                None => !matches!(std::fs::symlink_metadata(&path),
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound),
            };
            if present.contains(&path) || on_disk {
                continue;
            }
            let transaction = self
                .connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| Error::Sqlite { path: self.path.clone(), source: e })?;
            delete_content(&transaction, &harness, &id)
                .and_then(|()| crate::usage::forget(&transaction, &path))
                .and_then(|()| {
                    transaction
                        .execute(
                            "UPDATE transcripts SET removed = 1,
                                 change_version =
                                     (SELECT value + 1 FROM meta WHERE key = 'version')
                             WHERE path = ?1",
                            params![path],
                        )
                        .and_then(|_| {
                            transaction.execute(
                                "UPDATE meta SET value = value + 1 WHERE key = 'version'",
                                [],
                            )
                        })
                        .map(drop)
                })
                .and_then(|()| transaction.commit())
                .map_err(|e| Error::Sqlite { path: self.path.clone(), source: e })?;
            scanned.removed += 1;
        }
        Ok(())
    }
}

/// A row's watermark as a scan saw it.
#[derive(Clone, Debug)]
struct ScanMark {
    offset: u64,
    lines: u64,
    pin: String,
    size: i64,
    modified_ns: i64,
    version: i64,
}

/// The columns of a [`ScanMark`], in [`ScanMark::of`]'s order.
const SEEN_COLUMNS: &str = "offset, lines, pin, size, modified_ns, content_version";

impl ScanMark {
    /// A row's watermark from [`SEEN_COLUMNS`] (the first six columns).
    fn of(row: &rusqlite::Row<'_>) -> rusqlite::Result<ScanMark> {
        Ok(ScanMark {
            offset: row.get::<_, i64>(0)? as u64,
            lines: row.get::<_, i64>(1)? as u64,
            pin: row.get(2)?,
            size: row.get(3)?,
            modified_ns: row.get(4)?,
            version: row.get(5)?,
        })
    }

    /// The transcript has the size and modification time this row was folded at.
    fn unchanged(&self, found: &Found) -> bool {
        self.version == HISTORY_CONTENT_VERSION
            && self.size == i64::try_from(found.size).unwrap_or(i64::MAX)
            && self.modified_ns == found.modified_ns
    }
}

/// One chunk of a transcript, read on the reading thread.
struct Chunk<'a> {
    found: &'a Found,
    from: u64,
    lines_before: u64,
    read: std::result::Result<spex_history::Reading, spex_history::Error>,
}

/// What folding one chunk did.
struct FoldedTranscript {
    reset: bool,
    lines: u64,
}

/// Where a read of `found` starts: at its row's watermark while the bytes it was pinned to are
/// still there, else at its start.
fn plan(found: &Found, seen: Option<&ScanMark>) -> (u64, u64) {
    seen.filter(|seen| {
        found.harness != spex_history::Harness::OpenCode
            && seen.version == HISTORY_CONTENT_VERSION
            && found.size >= seen.offset
            && pin(&found.path, seen.offset).is_ok_and(|pin| pin == seen.pin)
    })
    .map_or((0, 0), |seen| (seen.offset, seen.lines))
}

/// The transcript went away between discovery and the read: the next scan drops its row.
fn gone(error: &spex_history::Error) -> bool {
    matches!(error, spex_history::Error::Io { source, .. }
        if source.kind() == std::io::ErrorKind::NotFound)
}

/// Folds the chunk `read` (from byte `from`, after `lines_before` lines) of `found` into its
/// row and texts, inside `transaction`. A chunk from byte 0 starts the transcript over (its
/// texts replaced); any other continues the row only if the row still ends where the chunk
/// starts: otherwise `None`, nothing written.
fn fold(
    transaction: &rusqlite::Transaction<'_>,
    found: &Found,
    from: u64,
    lines_before: u64,
    read: &spex_history::Reading,
) -> rusqlite::Result<Option<FoldedTranscript>> {
    let path_text = found.path.to_string_lossy().into_owned();
    let source = found.harness.name();
    let reset = from == 0;
    let Some((mut transcript, existed)) =
        starting_row(transaction, found, &path_text, from, lines_before)?
    else {
        return Ok(None);
    };
    if reset && existed {
        // A full scan of the texts (their session is not indexed): only for a row that had some.
        delete_content(transaction, source, &found.id)?;
    }
    if reset {
        crate::usage::forget(transaction, &path_text)?;
    }
    let model_before = enrich(&mut transcript, read);
    insert_texts(transaction, found, &read.events)?;
    crate::usage::record(transaction, &path_text, &read.events, model_before)?;
    write_row(transaction, found, read, &transcript)?;
    Ok(Some(FoldedTranscript { reset, lines: read.lines - lines_before }))
}

/// The row a fold from byte `from` (after `lines_before` lines) continues, and whether the
/// transcript had a row: a new one when the fold starts over, `None` when the row moved on
/// (another scan folded it meanwhile) or was folded by another content version.
fn starting_row(
    transaction: &rusqlite::Transaction<'_>,
    found: &Found,
    path_text: &str,
    from: u64,
    lines_before: u64,
) -> rusqlite::Result<Option<(Transcript, bool)>> {
    let row = transaction
        .query_row(
            &format!(
                "SELECT offset, content_version, {TRANSCRIPT_COLUMNS}
                 FROM transcripts WHERE path = ?1 AND removed = 0"
            ),
            params![path_text],
            |row| Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)?, transcript_at(row, 2)?)),
        )
        .optional()?;
    let reset = from == 0;
    let existed = row.is_some();
    let transcript = match row {
        Some((offset, version, transcript))
            if offset == from
                && transcript.lines as u64 == lines_before
                && version == HISTORY_CONTENT_VERSION =>
        {
            transcript
        }
        Some(_) | None if !reset => return Ok(None),
        _ => Transcript {
            path: path_text.to_owned(),
            harness: found.harness.name().to_owned(),
            id: found.id.clone(),
            size: i64::try_from(found.size).unwrap_or(i64::MAX),
            cwd: None,
            version: None,
            branch: None,
            model: None,
            first_ts: None,
            last_ts: None,
            last_activity: None,
            title: None,
            lines: 0,
            modified_ns: -1,
            counts: BTreeMap::new(),
            unknown: BTreeMap::new(),
            signals: Signals::default(),
        },
    };
    Ok(Some((transcript, existed)))
}

/// Folds what `read` brought into `transcript` (enrichment never erases what is known: a
/// field once set stays, the model is the newest one named); returns the model before.
fn enrich(transcript: &mut Transcript, read: &spex_history::Reading) -> Option<String> {
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
    let model_before = transcript.model.clone();
    if meta.model.is_some() {
        transcript.model.clone_from(&meta.model);
    }
    let mut digest = spex_history::Digest {
        first: transcript.first_ts.take(),
        last: transcript.last_ts.take(),
        last_activity: transcript.last_activity.take(),
        title: transcript.title.take(),
        counts: std::mem::take(&mut transcript.counts),
        unknown: std::mem::take(&mut transcript.unknown),
        signals: std::mem::take(&mut transcript.signals),
    };
    digest.fold(&read.events);
    transcript.first_ts = digest.first;
    transcript.last_ts = digest.last;
    transcript.last_activity = digest.last_activity;
    transcript.title = digest.title;
    transcript.counts = digest.counts;
    transcript.unknown = digest.unknown;
    transcript.signals = digest.signals;
    model_before
}

/// The searchable texts of a transcript's events: prompts, answers and tool calls.
fn insert_texts(
    transaction: &rusqlite::Transaction<'_>,
    found: &Found,
    events: &[spex_history::Event],
) -> rusqlite::Result<()> {
    for event in events {
        let (column, kind, text) = match &event.kind {
            Kind::User { text } => ("said", "prompt", text.as_str()),
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
            source: found.harness.name(),
            line: Some(event.line),
        };
        insert_content(transaction, &text)?;
    }
    Ok(())
}

/// Writes a transcript's row as folded to `read`'s end. Its size and modification time are the
/// transcript's only once it is read to its end: a row folded part way is not "unchanged" to
/// the next scan.
fn write_row(
    transaction: &rusqlite::Transaction<'_>,
    found: &Found,
    read: &spex_history::Reading,
    transcript: &Transcript,
) -> rusqlite::Result<()> {
    let size = i64::try_from(found.size).unwrap_or(i64::MAX);
    let (size, modified_ns) = if read.more { (-1, -1) } else { (size, found.modified_ns) };
    let pinned = pin(&found.path, read.offset).unwrap_or_default();
    let version = crate::refresh::next_version(transaction)?;
    transaction.execute(
        "INSERT INTO transcripts(path, harness, id, offset, lines, pin, size, modified_ns,
             cwd, version, branch, model, first_ts, last_ts, last_activity, title,
             content_version, counts, unknown, signals, change_version, removed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                 ?19, ?20, ?21, 0)
         ON CONFLICT(path) DO UPDATE SET harness = excluded.harness, id = excluded.id,
             offset = excluded.offset, lines = excluded.lines, pin = excluded.pin,
             size = excluded.size, modified_ns = excluded.modified_ns,
             cwd = excluded.cwd, version = excluded.version, branch = excluded.branch,
             model = excluded.model, first_ts = excluded.first_ts,
             last_ts = excluded.last_ts, last_activity = excluded.last_activity,
             title = excluded.title, content_version = excluded.content_version,
             counts = excluded.counts, unknown = excluded.unknown, signals = excluded.signals,
             change_version = excluded.change_version, removed = 0",
        params![
            transcript.path,
            found.harness.name(),
            found.id,
            read.offset as i64,
            read.lines as i64,
            pinned,
            size,
            modified_ns,
            transcript.cwd,
            transcript.version,
            transcript.branch,
            transcript.model,
            transcript.first_ts,
            transcript.last_ts,
            transcript.last_activity,
            transcript.title,
            HISTORY_CONTENT_VERSION,
            serde_json::to_string(&transcript.counts).unwrap_or_default(),
            serde_json::to_string(&transcript.unknown).unwrap_or_default(),
            transcript.signals.encode(),
            version,
        ],
    )?;
    Ok(())
}

/// Reads the transcripts of `work` in chunks of `chunk_bytes`, each from where its row left
/// off, and hands every chunk to `send` in order, until the folding side hangs up.
fn read_ahead<'a>(
    work: Vec<(&'a Found, Option<ScanMark>)>,
    chunk_bytes: u64,
    send: &std::sync::mpsc::SyncSender<Chunk<'a>>,
) {
    for (found, seen) in work {
        let (mut from, mut lines_before) = plan(found, seen.as_ref());
        let mut parser = spex_history::Parser::new(found.harness);
        loop {
            let read =
                spex_history::read_chunk(&found.path, &mut parser, from, lines_before, chunk_bytes);
            let next = read.as_ref().ok().filter(|read| read.more);
            let next = next.map(|read| (read.offset, read.lines));
            if send.send(Chunk { found, from, lines_before, read }).is_err() {
                return;
            }
            match next {
                Some(at) => (from, lines_before) = at,
                None => break,
            }
        }
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

fn transcript_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Transcript> {
    transcript_at(row, 0)
}

/// A [`History`] from [`TRANSCRIPT_COLUMNS`], the row's version and removal, and its link (the
/// linked session's id and display word); its state as of `now_ns`.
pub(crate) fn history_at(row: &rusqlite::Row<'_>, now_ns: i64) -> rusqlite::Result<History> {
    let transcript = transcript_at(row, 0)?;
    let display: Option<String> = row.get(20)?;
    let finished =
        display.is_some_and(|d| matches!(d.as_str(), "done" | "review" | "close-pending"));
    let state = transcript.signals.state(transcript.modified_ns, now_ns, finished);
    Ok(History { version: row.get(17)?, spex: row.get(19)?, state, transcript })
}

/// A [`Transcript`] from [`TRANSCRIPT_COLUMNS`], starting at column `at`. Counts or signals that
/// do not read back (written by nothing else) read as none.
fn transcript_at(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Transcript> {
    let counts = |text: Option<String>| {
        text.and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default()
    };
    Ok(Transcript {
        path: row.get(at)?,
        harness: row.get(at + 1)?,
        id: row.get(at + 2)?,
        size: row.get(at + 3)?,
        cwd: row.get(at + 4)?,
        version: row.get(at + 5)?,
        branch: row.get(at + 6)?,
        model: row.get(at + 7)?,
        first_ts: row.get(at + 8)?,
        last_ts: row.get(at + 9)?,
        last_activity: row.get(at + 10)?,
        title: row.get(at + 11)?,
        lines: row.get(at + 12)?,
        modified_ns: row.get(at + 13)?,
        counts: counts(row.get(at + 14)?),
        unknown: counts(row.get(at + 15)?),
        signals: row
            .get::<_, Option<String>>(at + 16)?
            .and_then(|text| Signals::decode(&text))
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {

    use std::io::Write as _;

    use spex_history::{Harness, Root, discover};

    use super::*;

    fn row(index: &Index) -> ScanMark {
        index
            .connection
            .query_row(
                &format!("SELECT {SEEN_COLUMNS} FROM transcripts WHERE removed = 0"),
                [],
                ScanMark::of,
            )
            .unwrap()
    }

    /// A scan stopped after its first transaction (killed) leaves a row part way through a
    /// transcript; the transcript does not change after, yet the next scan continues the row
    /// to the end (a row part way never reads as unchanged).
    #[test]
    fn a_row_part_way_is_continued_though_the_transcript_did_not_change() {
        let dir = tempfile::tempdir().unwrap();
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures");
        let root = Root { harness: Harness::Codex, dir: fixtures.join("codex") };
        let found = discover(std::slice::from_ref(&root)).unwrap();
        let mut index = Index::open(dir.path()).unwrap();
        let mut parser = spex_history::Parser::new(Harness::Codex);
        let first = spex_history::read_chunk(&found[0].path, &mut parser, 0, 0, 512).unwrap();
        assert!(first.more);
        let transaction = index.connection.transaction().unwrap();
        fold(&transaction, &found[0], 0, 0, &first).unwrap().unwrap();
        transaction.commit().unwrap();
        let scanned = index.scan_history(&found).unwrap();
        let whole = spex_history::read_from(&found[0].path, Harness::Codex, 0, 0).unwrap();
        assert_eq!(scanned.lines, whole.lines - first.lines, "continued from the row");
        assert_eq!(index.transcripts().unwrap()[0].lines as u64, whole.lines);
    }

    /// Two scans of one index: the second folds an appended line while the first still plans
    /// from the row it saw. The first's chunk no longer continues the row, so it is dropped and
    /// the transcript folded again from the row as it is: the line is indexed once.
    #[test]
    fn a_chunk_planned_from_a_row_another_scan_moved_is_not_folded_twice() {
        let dir = tempfile::tempdir().unwrap();
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures");
        let fixture = discover(&[Root { harness: Harness::Codex, dir: fixtures.join("codex") }])
            .unwrap()
            .remove(0);
        let text = std::fs::read_to_string(&fixture.path).unwrap();
        let day = dir.path().join("codex/sessions/2026/11/30");
        std::fs::create_dir_all(&day).unwrap();
        let path = day.join(fixture.path.file_name().unwrap());
        std::fs::write(&path, text.split_inclusive('\n').take(13).collect::<String>()).unwrap();
        let root = Root { harness: Harness::Codex, dir: dir.path().join("codex") };
        let mut first = Index::open(dir.path()).unwrap();
        first.scan_history(&discover(std::slice::from_ref(&root)).unwrap()).unwrap();
        let stale = row(&first);
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(file, "{}", text.lines().nth(13).unwrap()).unwrap();
        drop(file);
        let found = discover(std::slice::from_ref(&root)).unwrap();
        let mut second = Index::open(dir.path()).unwrap();
        assert_eq!(second.scan_history(&found).unwrap().lines, 1);
        let mut scanned = Scanned::default();
        let raced = first.fold_read_ahead(vec![(&found[0], Some(stale))], &mut scanned).unwrap();
        assert_eq!((raced.len(), scanned.lines), (1, 0), "the stale chunk is not folded");
        first.fold_alone(raced[0], &mut scanned).unwrap();
        assert_eq!(scanned.lines, 0, "the row is up to date");
        let filter = crate::SearchFilter { limit: 20, ..crate::SearchFilter::default() };
        assert_eq!(first.search("connections", &filter).unwrap().len(), 1, "folded once");
    }
}
