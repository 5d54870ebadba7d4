//! Refresh: bring every row up to date with the store (see the crate header for the freshness
//! rule and the crash story).

use crate::{CONTENT_VERSION, Error, Folded, Index, Result, Watermark, fold};
use faultfs::Fs;
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use spex_engine::{Cursor, Event, SessionId, Signature, Store};

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

/// Whether a session is exactly as its row recorded (see `Store::unchanged_since`).
fn unchanged<F: Fs>(store: &Store<F>, id: &SessionId, seen: &RowMark) -> Result<bool> {
    if seen.content_version != CONTENT_VERSION {
        return Ok(false);
    }
    Ok(store.unchanged_since(id, &seen.signature())?)
}

/// Sessions per thread below which the freshness pass stays on the calling thread.
const FRESHNESS_CHUNK: usize = 1024;

/// For each of `ids`, whether its row is exactly as the store is now: a few stats per session
/// and no log read, spread over the machine's cores for a large store (the checks only read).
fn freshness<F: Fs>(
    store: &Store<F>,
    ids: &[SessionId],
    rows: &std::collections::HashMap<String, RowMark>,
) -> Result<Vec<bool>> {
    let check = |ids: &[SessionId]| -> Result<Vec<bool>> {
        ids.iter()
            .map(|id| match rows.get(id.as_str()) {
                Some(seen) => unchanged(store, id, seen),
                None => Ok(false),
            })
            .collect()
    };
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if threads < 2 || ids.len() < 2 * FRESHNESS_CHUNK {
        return check(ids);
    }
    let chunk = ids.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> =
            ids.chunks(chunk).map(|part| scope.spawn(move || check(part))).collect();
        let mut fresh = Vec::with_capacity(ids.len());
        for worker in workers {
            fresh.extend(worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))?);
        }
        Ok(fresh)
    })
}

/// What a row recorded about the store when it was last updated.
struct RowMark {
    cursor: Cursor,
    log_mtime_ns: i64,
    record: (i64, i64),
    /// The queue's size and mtime, `(-1, -1)` without a queue file.
    queue: (i64, i64),
    content_version: i64,
}

/// What a session's files look like now: the record's and the queue's size and mtime (the
/// queue's `(-1, -1)` without one) and the log's stamp.
struct Current {
    record: (i64, i64),
    stamp: spex_engine::Stamp,
    queue: (i64, i64),
}

/// Session `id`'s files now, or `None` while it has no record (being created, or closed).
fn current<F: Fs>(store: &Store<F>, id: &SessionId) -> Result<Option<Current>> {
    let Some(record) = store.record_signature(id)? else { return Ok(None) };
    let Some(stamp) = present(store.stamp(id))? else { return Ok(None) };
    // Taken before the queue is read: a change after it is seen by the next refresh.
    let queue = signature_columns(store.queue_signature(id)?);
    Ok(Some(Current { record: signature_columns(Some(record)), stamp, queue }))
}

impl RowMark {
    /// Whether the row was folded from exactly these files, by this content version.
    fn fresh(&self, record: (i64, i64), stamp: &spex_engine::Stamp, queue: (i64, i64)) -> bool {
        self.content_version == CONTENT_VERSION
            && self.record == record
            && self.queue == queue
            && self.cursor.segment == stamp.newest
            && self.cursor.offset == stamp.newest_len
            && self.log_mtime_ns == stamp.newest_modified_ns as i64
    }

    fn signature(&self) -> Signature {
        Signature {
            record: Some((self.record.0 as u64, self.record.1 as u64)),
            cursor: self.cursor,
            log_modified_ns: self.log_mtime_ns as u64,
            queue: (self.queue.0 >= 0).then_some((self.queue.0 as u64, self.queue.1 as u64)),
        }
    }
}

/// A file signature as two columns: `(-1, -1)` for no file.
fn signature_columns(signature: Option<(u64, u64)>) -> (i64, i64) {
    signature.map_or((-1, -1), |(len, mtime)| {
        (i64::try_from(len).unwrap_or(i64::MAX), i64::try_from(mtime).unwrap_or(i64::MAX))
    })
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
    preview: Option<&'a str>,
    /// The record's title, if it has one.
    record_title: Option<&'a str>,
    /// The preview of the first message said to the session.
    first_said: Option<&'a str>,
    cursor: Cursor,
    pin: &'a str,
    log_mtime_ns: i64,
    record: (i64, i64),
    /// How many messages the session is owed (`None`: its queue cannot be read), and the
    /// queue's signature when that was read.
    owed: Option<i64>,
    queue: (i64, i64),
    /// The harness session the record names: its harness (as `spex_history` names it) and id.
    thread: Option<(&'static str, &'a str)>,
}

/// The longest preview kept: the first line of a text, cut at a character boundary.
const PREVIEW_BYTES_MAX: usize = 240;

/// The preview of a text: its first non-blank line, at most [`PREVIEW_BYTES_MAX`] bytes, cut
/// from the text redacted whole (credentials: a cut inside a key would keep its rest).
fn preview_of(text: &str) -> String {
    let text = spex_history::redact(text, &spex_history::Identity::default());
    let text = text.as_str();
    let line = text.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    let mut end = line.len().min(PREVIEW_BYTES_MAX);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let more = end < line.len() || text.trim().lines().nth(1).is_some();
    if more { format!("{} …", &line[..end]) } else { line.to_owned() }
}

/// One text to index: which column it goes in, and where it came from.
pub(crate) struct Text<'a> {
    /// `said`: what was said to a session (or a person's prompt in a transcript); `notes`: what a
    /// session declared; `answers`: what an agent answered (or the tools it ran).
    pub(crate) column: &'static str,
    pub(crate) text: &'a str,
    pub(crate) session: &'a str,
    /// `said`, `note` (spex), `prompt`, `answer`, `tool` (a transcript).
    pub(crate) kind: &'a str,
    pub(crate) ts: Option<&'a str>,
    pub(crate) mid: Option<&'a str>,
    /// `spex`, or the harness that wrote the transcript.
    pub(crate) source: &'a str,
    /// The transcript line (none for spex events).
    pub(crate) line: Option<u64>,
}

/// Indexes one text for search: by word (`content`) and by trigram (`grams`, the same rowid), so
/// a substring of text without word breaks (CJK, identifiers) is found too. The index never holds
/// a credential in the clear: the text is stored redacted (credentials only; local identity is
/// redacted when a hit is shown), so no snippet window can start inside a key.
pub(crate) fn insert_content(
    transaction: &rusqlite::Transaction<'_>,
    text: &Text<'_>,
) -> rusqlite::Result<()> {
    let stored = spex_history::redact(text.text, &spex_history::Identity::default());
    let stored = crate::query::unmarkable(&stored).into_owned();
    let column = |name: &str| (text.column == name).then_some(stored.as_str());
    let (said, notes, answers) = (column("said"), column("notes"), column("answers"));
    transaction
        .prepare_cached(
            "INSERT INTO content(said, notes, answers, session, kind, ts, mid, source, line)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            said,
            notes,
            answers,
            text.session,
            text.kind,
            text.ts,
            text.mid,
            text.source,
            text.line.map(|line| line as i64)
        ])?;
    let rowid = transaction.last_insert_rowid();
    transaction
        .prepare_cached("INSERT INTO grams(rowid, said, notes, answers) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![rowid, said, notes, answers])?;
    Ok(())
}

/// Drops every indexed text of one source's session (both tables).
pub(crate) fn delete_content(
    transaction: &rusqlite::Transaction<'_>,
    source: &str,
    session: &str,
) -> rusqlite::Result<()> {
    transaction.execute(
        "DELETE FROM grams WHERE rowid IN
             (SELECT rowid FROM content WHERE session = ?1 AND source = ?2)",
        params![session, source],
    )?;
    transaction.execute(
        "DELETE FROM content WHERE session = ?1 AND source = ?2",
        params![session, source],
    )?;
    Ok(())
}

/// Takes the next change version (inside the caller's transaction). Two statements, not an
/// `UPDATE ... RETURNING`: a statement with RETURNING opens a statement journal, and with it a
/// savepoint at which FTS5 writes out every term it holds in memory, so a fold of many texts
/// would write one small segment per row update instead of one per transaction.
pub(crate) fn next_version(transaction: &rusqlite::Transaction<'_>) -> rusqlite::Result<i64> {
    transaction
        .prepare_cached("UPDATE meta SET value = value + 1 WHERE key = 'version'")?
        .execute([])?;
    transaction
        .prepare_cached("SELECT value FROM meta WHERE key = 'version'")?
        .query_row([], |row| row.get(0))
}

/// Writes one session row under the next change version (inside the caller's transaction).
fn upsert(transaction: &rusqlite::Transaction<'_>, row: &Upsert<'_>) -> rusqlite::Result<()> {
    let version = next_version(transaction)?;
    transaction.execute(
        "INSERT INTO sessions(id, status, proposal, note, display, created_at, archived,
             last_activity, cursor_segment, cursor_offset, cursor_index, cursor_pin,
             log_mtime_ns, record_len, record_mtime_ns, content_version, version, preview,
             harness, thread, owed, queue_len, queue_mtime_ns, record_title, first_said)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                 ?19, ?20, ?21, ?22, ?23, ?24, ?25)
         ON CONFLICT(id) DO UPDATE SET status = excluded.status,
             proposal = excluded.proposal, note = excluded.note,
             display = excluded.display, created_at = excluded.created_at,
             archived = excluded.archived, last_activity = excluded.last_activity,
             cursor_segment = excluded.cursor_segment,
             cursor_offset = excluded.cursor_offset, cursor_index = excluded.cursor_index,
             cursor_pin = excluded.cursor_pin, log_mtime_ns = excluded.log_mtime_ns,
             record_len = excluded.record_len, record_mtime_ns = excluded.record_mtime_ns,
             content_version = excluded.content_version, version = excluded.version,
             preview = excluded.preview, removed = 0, harness = excluded.harness,
             thread = excluded.thread, owed = excluded.owed, queue_len = excluded.queue_len,
             queue_mtime_ns = excluded.queue_mtime_ns, record_title = excluded.record_title,
             first_said = excluded.first_said",
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
            row.preview,
            row.thread.map(|(harness, _)| harness),
            row.thread.map(|(_, thread)| thread),
            row.owed,
            row.queue.0,
            row.queue.1,
            row.record_title,
            row.first_said,
        ],
    )?;
    Ok(())
}

impl Index {
    /// Brings the index up to date with the store: see the module header.
    pub fn refresh<F: Fs>(&mut self, store: &Store<F>) -> Result<Refreshed> {
        self.refresh_with(store, &mut |_, _| {})
    }

    /// [`Index::refresh`], reporting (sessions read, sessions to read) after each session it
    /// reads (a fresh one costs nothing and is not counted).
    pub fn refresh_with<F: Fs>(
        &mut self,
        store: &Store<F>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed> {
        let mut refreshed = Refreshed::default();
        let mut present = std::collections::BTreeSet::new();
        let ids = store.session_ids()?;
        let rows = self.all_seen()?;
        let fresh = freshness(store, &ids, &rows)?;
        let to_read = fresh.iter().filter(|fresh| !**fresh).count() as u64;
        let mut read = 0;
        for (id, fresh) in ids.into_iter().zip(fresh) {
            refreshed.sessions += 1;
            present.insert(id.to_string());
            if fresh {
                continue;
            }
            read += 1;
            progress(read, to_read);
            let seen = rows.get(id.as_str());
            let result = self.refresh_session(store, &id, seen);
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
    fn all_seen(&self) -> Result<std::collections::HashMap<String, RowMark>> {
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT id, cursor_segment, cursor_offset, cursor_index, record_len,
                        record_mtime_ns, content_version, log_mtime_ns, queue_len, queue_mtime_ns
                 FROM sessions WHERE removed = 0",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    RowMark {
                        cursor: Cursor {
                            segment: row.get::<_, i64>(1)? as u64,
                            offset: row.get::<_, i64>(2)? as u64,
                            index: row.get::<_, i64>(3)? as u64,
                        },
                        record: (row.get(4)?, row.get(5)?),
                        content_version: row.get(6)?,
                        log_mtime_ns: row.get(7)?,
                        queue: (row.get(8)?, row.get(9)?),
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
        seen: Option<&RowMark>,
    ) -> Result<Option<u64>> {
        let Some(Current { record, stamp, queue }) = current(store, id)? else {
            return Ok(None);
        };
        if seen.is_some_and(|seen| seen.fresh(record, &stamp, queue)) {
            return Ok(None);
        }
        let path = self.path.clone();
        let sqlite = |source| Error::Sqlite { path: path.clone(), source };
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        // Inside the write lock: another refresher may have folded this session meanwhile.
        let seen = seen_row(&transaction, id).map_err(sqlite)?;
        let from = seen.as_ref().filter(|seen| seen.content_version == CONTENT_VERSION);
        let Some(folded) = present(fold(store, id, from.map(|seen| &seen.watermark)))? else {
            return Ok(None);
        };
        // A session with no row has no content to drop (this keeps a rebuild linear: the
        // session column is not indexed, so each delete scans the content table).
        if folded.reset && seen.is_some() {
            delete_content(&transaction, "spex", id.as_str()).map_err(sqlite)?;
        }
        let (preview, first_said) = texts_of(&folded, seen.as_ref());
        let Watermark { cursor, pin, last_activity } = folded.watermark.clone();
        insert_events(&transaction, id, &folded.events).map_err(sqlite)?;
        let Some(record_now) = present(store.record(id))? else { return Ok(None) };
        let Some(owed) = owed_of(store, id)? else { return Ok(None) };
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
                preview: preview.as_deref(),
                record_title: record_now.title(),
                first_said: first_said.as_deref(),
                cursor,
                pin: &pin,
                log_mtime_ns: stamp.newest_modified_ns as i64,
                record,
                owed,
                queue,
                thread: spex_history::Harness::parse(record_now.harness())
                    .map(spex_history::Harness::name)
                    .zip(record_now.harness_session_id().filter(|thread| !thread.is_empty())),
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
        delete_content(&transaction, "spex", id.as_str()).map_err(sqlite)?;
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
                preview: None,
                record_title: None,
                first_said: None,
                cursor: Cursor::START,
                pin: "",
                log_mtime_ns: 0,
                record,
                owed: None,
                queue: (-1, -1),
                thread: None,
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
        delete_content(&transaction, "spex", id).map_err(sqlite)?;
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
        self.rebuild_with(store, &mut |_, _| {})
    }

    /// [`Index::rebuild`], reporting progress as [`Index::refresh_with`] does.
    pub fn rebuild_with<F: Fs>(
        &mut self,
        store: &Store<F>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed> {
        self.connection
            .execute_batch(
                "BEGIN IMMEDIATE; INSERT INTO grams(grams) VALUES ('delete-all'); DELETE FROM content; DELETE FROM sessions;
                 DELETE FROM transcripts; COMMIT;",
            )
            .map_err(|e| self.sqlite(e))?;
        self.refresh_with(store, progress)
    }
}

/// How many messages session `id` owes: `Some(None)` when unknown (a damaged queue does not
/// hide the session: readers see only its valid entries, and `session repair` rebuilds it),
/// `None` when the session is gone.
fn owed_of<F: Fs>(store: &Store<F>, id: &SessionId) -> Result<Option<Option<i64>>> {
    match store.queue_file(id) {
        Ok(file) => Ok(Some(Some(file.entries.len() as i64).filter(|_| file.damage.is_none()))),
        Err(spex_engine::Error::Corrupt { .. }) => Ok(Some(None)),
        Err(spex_engine::Error::NoSuchSession { .. }) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// `result`, or `None` when the session is gone (closed meanwhile): nothing to list.
fn present<T>(result: spex_engine::Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(spex_engine::Error::NoSuchSession { .. }) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// A session's row as the index holds it: where its fold stopped, the content version it was
/// folded with, and its preview and first message.
struct SeenRow {
    watermark: Watermark,
    content_version: i64,
    preview: Option<String>,
    first_said: Option<String>,
}

/// Session `id`'s row, if it is listed.
fn seen_row(
    transaction: &rusqlite::Transaction<'_>,
    id: &SessionId,
) -> rusqlite::Result<Option<SeenRow>> {
    transaction
        .query_row(
            "SELECT cursor_segment, cursor_offset, cursor_index, cursor_pin, last_activity,
                    content_version, preview, first_said
             FROM sessions WHERE id = ?1 AND removed = 0",
            params![id.as_str()],
            |row| {
                Ok(SeenRow {
                    watermark: Watermark {
                        cursor: Cursor {
                            segment: row.get::<_, i64>(0)? as u64,
                            offset: row.get::<_, i64>(1)? as u64,
                            index: row.get::<_, i64>(2)? as u64,
                        },
                        pin: row.get(3)?,
                        last_activity: row.get(4)?,
                    },
                    content_version: row.get(5)?,
                    preview: row.get(6)?,
                    first_said: row.get(7)?,
                })
            },
        )
        .optional()
}

/// The preview (the last text among the events folded: a message, or a declared note, else the
/// one the row had when the fold continued from it) and the first message said (kept from the
/// row when the fold continued from it).
fn texts_of(folded: &Folded, seen: Option<&SeenRow>) -> (Option<String>, Option<String>) {
    let kept = |text: fn(&SeenRow) -> &Option<String>| {
        if folded.reset { None } else { seen.and_then(|seen| text(seen).clone()) }
    };
    let preview = folded
        .events
        .iter()
        .rev()
        .find_map(|event| match event {
            Event::Sent(sent) => Some(sent.text.as_str()),
            Event::Status(status) => status.triple.note.as_deref(),
        })
        .map(preview_of)
        .or_else(|| kept(|seen| &seen.preview));
    let first_said = kept(|seen| &seen.first_said).or_else(|| {
        folded.events.iter().find_map(|event| match event {
            Event::Sent(sent) => Some(preview_of(&sent.text)),
            Event::Status(_) => None,
        })
    });
    (preview, first_said)
}

/// The searchable texts of session `id`'s events: what was said, and declared notes.
fn insert_events(
    transaction: &rusqlite::Transaction<'_>,
    id: &SessionId,
    events: &[Event],
) -> rusqlite::Result<()> {
    for event in events {
        let (column, text, kind, ts, mid) = match event {
            Event::Sent(sent) => ("said", &sent.text, "said", &sent.ts, sent.mid.as_deref()),
            Event::Status(status) => match &status.triple.note {
                Some(note) => ("notes", note, "note", &status.ts, None),
                None => continue,
            },
        };
        let text = Text {
            column,
            text,
            session: id.as_str(),
            kind,
            ts: Some(ts),
            mid,
            source: "spex",
            line: None,
        };
        insert_content(transaction, &text)?;
    }
    Ok(())
}
