//! The store: sessions under one root, their transitions and their reads.
//!
//! Every transition runs the same frame (see [`Store::transition`]): refuse a poisoned session,
//! take the record lock, run recovery, do the work, release. An I/O error inside the frame
//! poisons the session in this handle; the way back is a new `Store` (reopen) whose next writer
//! recovers.
//!
//! Recovery (run by every writer under the record lock, after vouching for a dead holder's
//! writes) is in `recover`.
//!
//! `Store::open` also finishes closes interrupted after their commit point (see `close`).

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use faultfs::Fs;

use crate::atomic;
use crate::boundaries::{self, Boundaries};
use crate::env::{Clock, IdSource, UnixMs};
use crate::error::{Error, Result};
use crate::layout::{LOCK_WAIT_MS_DEFAULT, Layout, SEGMENT_BYTES_DEFAULT, SessionFiles, SessionId};
use crate::lock::{self, LockGuard};
use crate::mutant::{Mutant, active};
use crate::queue::{self, Entry, QueueFile};
use crate::receipts::{Known, ReceiptIndexes};
use crate::record::{self, Record};
use crate::runs::{self, Run, RunLine};
use crate::sync::{Mutex, lock as lock_mutex};
// Shared ownership of the injected clock and id source (not synchronization: std's Arc).
use crate::timeline::{self, Cursor, Event, Line, Position, Stamp, Triple};
use std::sync::Arc;

/// Tunables of a store handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Segment bound (see `layout::segment_bytes_from_env`).
    pub segment_bytes_max: u64,
    /// Bound on each lock wait.
    pub lock_wait_ms: u64,
    /// Adapter attempts per message before a drain stops.
    pub drain_attempts_max: u32,
    /// Pause between adapter attempts.
    pub drain_retry_delay_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        let config = Config {
            segment_bytes_max: SEGMENT_BYTES_DEFAULT,
            lock_wait_ms: LOCK_WAIT_MS_DEFAULT,
            drain_attempts_max: 3,
            drain_retry_delay_ms: 200,
        };
        assert!(
            config.segment_bytes_max > 0 && config.drain_attempts_max > 0,
            "a segment holds something and a drain tries at least once"
        );
        config
    }
}

/// A summary of one session for listings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    /// The id.
    pub id: SessionId,
    /// The public triple.
    pub triple: Triple,
    /// `createdAt`.
    pub created_at: Option<String>,
    /// Whether archived.
    pub archived: bool,
    /// Why the record cannot be read, for a damaged session (its other fields are then
    /// placeholders).
    pub corrupt: Option<String>,
    /// Whether a board session (`governed`; a damaged record counts as one, as the existing
    /// board shows it).
    pub governed: bool,
    /// The board position: `sortkey` when set, else `createdAt` (epoch milliseconds).
    pub board_key: i64,
}

/// A page of a session's log (see [`Store::page`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The events, oldest first.
    pub events: Vec<Event>,
    /// Where to read the next older page from; `None` when the page reached the start of the
    /// log. (When only private lines are older, the next page is empty.)
    pub older: Option<Position>,
    /// Where the page ends: [`Store::follow_from`] there reads what was appended after it.
    pub end: Position,
}

/// What a reader saw of a session, to ask later whether anything changed
/// ([`Store::unchanged_since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The record's size and mtime (see [`Store::record_signature`]).
    pub record: Option<(u64, u64)>,
    /// Where the reader's fold of the log stopped.
    pub cursor: Cursor,
    /// The mtime of the cursor's segment then.
    pub log_modified_ns: u64,
    /// The delivery queue's size and mtime (see [`Store::queue_signature`]).
    pub queue: Option<(u64, u64)>,
}

/// A handle on the store at one root.
#[derive(Debug)]
pub struct Store<F: Fs> {
    pub(crate) fs: F,
    pub(crate) layout: Layout,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdSource>,
    pub(crate) config: Config,
    poisoned: Mutex<BTreeSet<SessionId>>,
    pub(crate) receipts: ReceiptIndexes,
    pub(crate) groups: crate::group::Groups,
}

impl<F: Fs> Store<F> {
    /// Opens (creating if needed) the store at `root`, and finishes interrupted closes.
    pub fn open(
        fs: F,
        root: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
        config: Config,
    ) -> Result<Store<F>> {
        let layout = Layout::new(root.as_ref());
        let store = Store {
            fs,
            layout,
            clock,
            ids,
            config,
            poisoned: Mutex::new(BTreeSet::new()),
            receipts: ReceiptIndexes::default(),
            groups: crate::group::Groups::default(),
        };
        store.ensure_dir_all(store.layout.root(), &boundaries::OPEN)?;
        for dir in [
            store.layout.sessions_dir(),
            store.layout.session_locks_dir(),
            store.layout.delivery_locks_dir(),
        ] {
            store.ensure_dir_all(&dir, &boundaries::OPEN)?;
        }
        store.finish_closes()?;
        debug_assert!(
            lock_mutex(&store.poisoned).is_empty(),
            "a store opens with no session poisoned: a reopen is the way back from one"
        );
        Ok(store)
    }

    /// Session `id`'s files, for the file-format modules.
    pub(crate) fn files<'a>(&'a self, id: &'a SessionId) -> SessionFiles<'a, F> {
        debug_assert!(!id.as_str().is_empty(), "a session id names something");
        SessionFiles { fs: &self.fs, layout: &self.layout, id }
    }

    /// Session `id`'s queue file as a reader reads it: the valid entries and, when the file is
    /// damaged, why (an empty queue when there is no file).
    pub fn queue_file(&self, id: &SessionId) -> Result<QueueFile> {
        queue::read(self.files(id))
    }

    /// The messages owed to session `id`, as a reader sees them: the valid entries of the queue
    /// (empty if nothing is owed; see `queue` for a damaged queue).
    pub fn queue(&self, id: &SessionId) -> Result<Vec<Entry>> {
        Ok(self.queue_file(id)?.entries)
    }

    /// Whether session `id` has a queue file at all (the existing implementation's "owes
    /// delivery": true even when the file is empty or damaged).
    pub fn owes_delivery(&self, id: &SessionId) -> Result<bool> {
        queue::exists(self.files(id))
    }

    /// Reads a session's record, or `None` if it has none.
    pub(crate) fn read_record(&self, id: &SessionId) -> Result<Option<Record>> {
        let record = record::read(self.files(id))?;
        debug_assert!(
            record.as_ref().is_none_or(|record| record.session_id().is_some()),
            "a record read names a session"
        );
        Ok(record)
    }

    /// Reads a session's record; a missing record is `NoSuchSession`.
    pub fn record(&self, id: &SessionId) -> Result<Record> {
        self.read_record(id)?.ok_or_else(|| Error::NoSuchSession { id: id.clone() })
    }

    /// Replaces session `id`'s record durably.
    pub(crate) fn write_record(
        &self,
        id: &SessionId,
        record: &Record,
        steps: &atomic::ReplaceBoundaries,
    ) -> Result<()> {
        debug_assert!(record.session_id().is_some(), "a record written names a session");
        record::write(self.files(id), record, steps)
    }

    /// The drain adapter spec of session `id` (`exec:CMD`, `tmux:PANE`, `stdout`), if set: the
    /// file `adapter` in its directory, or the record of this engine's earlier format.
    pub fn adapter(&self, id: &SessionId, record: &Record) -> Result<Option<String>> {
        record::adapter(self.files(id), record)
    }

    /// Appends `line` to session `id`'s run log (see [`runs::append`]). The session need not exist any
    /// more: a run's end is written even if the session was closed during the run.
    pub fn append_run(&self, id: &SessionId, line: &RunLine) -> Result<()> {
        debug_assert!(
            !runs::runs_dir(&self.layout).starts_with(self.layout.sessions_dir()),
            "a run log outlives its session's directory"
        );
        runs::append(&self.fs, self.clock.as_ref(), &self.layout, id, line)
    }

    /// Session `id`'s runs (see [`runs::runs`]).
    pub fn runs(&self, id: &SessionId) -> Result<(Vec<Run>, usize)> {
        let (runs, skipped) = runs::runs(&self.fs, &self.layout, id)?;
        debug_assert!(
            runs.iter().map(|run| run.run.as_str()).collect::<HashSet<_>>().len() == runs.len(),
            "a run is listed once"
        );

        Ok((runs, skipped))
    }

    /// The current time, as the run log writes it: ISO-8601 UTC and epoch ms.
    pub fn run_time(&self) -> (String, UnixMs) {
        let now = self.clock.now_ms();
        let text = crate::env::format_ts(now);
        debug_assert!(crate::env::parse_ts(&text).is_some(), "a run time reads back");
        (text, now)
    }

    /// The receipt of the keyed send `(operation, request_digest)` to session `id`, if the log
    /// has one (the existing implementation's `sentDispatchReceipt`). Lock-free, and it writes
    /// nothing: the receipt index is persisted only by writers, under the record lock (a
    /// lock-free rewrite would share the staging file with a writer's).
    pub fn receipt(
        &self,
        id: &SessionId,
        operation: &str,
        request_digest: &str,
    ) -> Result<Option<Known>> {
        self.require_session(id)?;
        #[cfg(feature = "mutants")]
        if crate::mutant::active(crate::mutant::Mutant::LockFreeReceiptWithoutRefresh) {
            return self.receipts.lookup_without_refresh(
                &self.fs,
                &self.layout,
                id,
                operation,
                request_digest,
            );
        }
        let found =
            self.receipts.lookup(&self.fs, &self.layout, id, operation, request_digest, None)?;
        debug_assert!(
            found.as_ref().is_none_or(|known| known.receipt.request_digest == request_digest),
            "a receipt is the one of the key asked about"
        );
        Ok(found)
    }

    /// The store's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The filesystem this store runs on.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// Creates `path` and its missing parents, syncing each parent after a creation.
    /// A relative path's first component has the empty path as its parent: the current
    /// directory, which exists.
    pub(crate) fn ensure_dir_all(&self, path: &Path, steps: &Boundaries) -> Result<()> {
        if path.as_os_str().is_empty() || self.fs.exists(path)? {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            self.ensure_dir_all(parent, steps)?;
        }
        match self.fs.create_dir(path, steps.mkdir) {
            Ok(()) => {}
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::AlreadyExists) => {
                return Ok(());
            }
            Err(error) => return Err(error.into()),
        }
        if let Some(parent) = path.parent() {
            let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
            self.fs.sync_dir(parent, steps.mkdir_sync)?;
        }
        debug_assert!(self.fs.exists(path).is_ok_and(|there| there), "a directory made exists");
        Ok(())
    }

    /// Takes the lock file `path` of session `id` with this handle's clock and wait bound; an
    /// I/O failure poisons the session.
    pub(crate) fn lock_file(
        &self,
        id: &SessionId,
        path: &Path,
        steps: &lock::LockBoundaries,
    ) -> Result<LockGuard<'_, F>> {
        let guard =
            lock::acquire(&self.fs, self.clock.as_ref(), path, self.config.lock_wait_ms, steps)
                .inspect_err(|error| self.poison_on_io(id, error))?;
        debug_assert!(
            path.file_name().is_some_and(|name| {
                name.to_str().is_some_and(|name| name.strip_suffix(".lock") == Some(id.as_str()))
            }),
            "a session's lock is named for the session"
        );
        Ok(guard)
    }

    pub(crate) fn check_poison(&self, id: &SessionId) -> Result<()> {
        let poisoned = lock_mutex(&self.poisoned);
        if poisoned.contains(id) {
            return Err(Error::Poisoned { session: id.clone() });
        }
        debug_assert!(!poisoned.contains(id), "a session that passes is not poisoned");
        Ok(())
    }

    pub(crate) fn poison(&self, id: &SessionId) {
        if active(Mutant::NoPoisonAfterFailedWrite) {
            return;
        }
        lock_mutex(&self.poisoned).insert(id.clone());
        self.receipts.forget(id);
        debug_assert!(self.check_poison(id).is_err(), "a poisoned session refuses every write");
    }

    /// Poisons the session if `error` is an I/O failure.
    pub(crate) fn poison_on_io(&self, id: &SessionId, error: &Error) {
        if matches!(error, Error::Io(_)) {
            self.poison(id);
            debug_assert!(
                active(Mutant::NoPoisonAfterFailedWrite) || self.check_poison(id).is_err(),
                "an I/O failure poisons its session"
            );
        }
    }

    /// Appends one line durably to a session's log.
    pub(crate) fn append_line(
        &self,
        id: &SessionId,
        line: &Line,
        steps: &Boundaries,
    ) -> Result<()> {
        self.append_lines(id, std::slice::from_ref(line), steps)
    }

    /// Appends `lines` durably, in order, each with its own write and sync (see
    /// `timeline::append` for why never two in one): a power loss keeps a prefix of them.
    pub(crate) fn append_lines(
        &self,
        id: &SessionId,
        lines: &[Line],
        steps: &Boundaries,
    ) -> Result<()> {
        for (i, line) in lines.iter().enumerate() {
            let last = i + 1 == lines.len();
            let bytes = line.encode();
            debug_assert!(
                bytes.iter().position(|&b| b == b'\n') == Some(bytes.len() - 1),
                "a line is one line: its encoding's one newline ends it"
            );
            timeline::append(
                &self.fs,
                &self.layout,
                id,
                &bytes,
                self.config.segment_bytes_max,
                &steps.log,
                last || !active(Mutant::BatchSharesOneSync),
            )?;
        }
        Ok(())
    }

    /// Whether `sender` was closed (revoked).
    pub(crate) fn is_revoked(&self, sender: &str) -> Result<bool> {
        let Ok(sender) = SessionId::new(sender) else { return Ok(false) };
        let revoked = self.layout.revoked(&sender);
        debug_assert!(
            !revoked.starts_with(self.layout.sessions_dir()),
            "a revocation outlives its session's directory"
        );
        Ok(self.fs.exists(&revoked)?)
    }

    /// Whether session `id` has a directory: a real one, never a symbolic link (corrupt,
    /// naming it), so that nothing read, written or removed through it is outside the root.
    pub(crate) fn session_dir_exists(&self, id: &SessionId) -> Result<bool> {
        let dir = self.layout.session_dir(id);
        debug_assert!(
            crate::layout::lies_in(&dir, self.layout.root()),
            "a session's directory is ours"
        );
        crate::layout::expect_kind(&self.fs, &dir, faultfs::FileKind::Dir)
    }

    /// Fails with `NoSuchSession` unless the session has a record (in a real directory).
    pub(crate) fn require_session(&self, id: &SessionId) -> Result<()> {
        let record = self.layout.record(id);
        debug_assert!(
            crate::layout::ends_in(&record, "session.json"),
            "a record is a file of its session's directory"
        );
        if self.session_dir_exists(id)? && self.fs.exists(&record)? {
            Ok(())
        } else {
            Err(Error::NoSuchSession { id: id.clone() })
        }
    }

    /// Creates a session: its directory and record, in `triple`, with no event (the creation
    /// write is not a move). Retrying after a crash completes a half-created session. The id of
    /// a closed session is refused (`Revoked`).
    pub fn create_session(
        &self,
        id: &SessionId,
        triple: &Triple,
        adapter: Option<&str>,
        worktree: Option<&str>,
    ) -> Result<Record> {
        // The spec is one line of its own file: a line end in it would be read back as another
        // spec (and a NUL is no text).
        if let Some(spec) = adapter
            && (spec.is_empty() || spec.contains(['\n', '\r', '\0']))
        {
            return Err(Error::InvalidInput {
                what: "adapter",
                reason: format!("{spec:?} is empty or holds a line end or NUL"),
            });
        }
        let steps = &boundaries::CREATE;
        self.transition(id, steps, |recovered| {
            if recovered.record.is_some() {
                return Err(Error::SessionExists { id: id.clone() });
            }
            // A closed id stays closed: its close is in the ledger and it is revoked as a
            // sender, so a new session under it would be half closed from its first moment.
            if self.fs.exists(&self.layout.revoked(id))? {
                return Err(Error::Revoked { sender: id.to_string() });
            }
            let dir = self.layout.session_dir(id);
            if !self.fs.exists(&dir)? {
                self.fs.create_dir(&dir, steps.mkdir)?;
                if !active(Mutant::NoSessionDirSync) {
                    self.fs.sync_dir(&self.layout.sessions_dir(), steps.mkdir_sync)?;
                }
            }
            if let Some(spec) = adapter {
                let mut bytes = spec.as_bytes().to_vec();
                bytes.push(b'\n');
                assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1, "a spec is one line");
                atomic::replace(
                    &self.fs,
                    &dir,
                    &self.layout.adapter(id),
                    &self.layout.adapter_tmp(id),
                    &bytes,
                    &steps.adapter,
                )?;
            }
            let record = Record::new(id, triple, self.clock.now_ms(), worktree);
            self.write_record(id, &record, &steps.record)?;
            debug_assert_eq!(
                record.session_id(),
                Some(id.as_str()),
                "a new record is its session's"
            );
            Ok(record)
        })
    }

    /// Every session with a record, in directory order. A session whose record cannot be read
    /// is a row of its own with the reason (`corrupt`), so one damaged session never hides the
    /// others.
    pub fn list(&self) -> Result<Vec<SessionSummary>> {
        let mut sessions = Vec::new();
        for id in self.session_ids()? {
            match self.read_record(&id) {
                Ok(Some(record)) => sessions.push(SessionSummary {
                    triple: record.public_triple(),
                    created_at: record.created_at(),
                    archived: record.archived(),
                    corrupt: None,
                    governed: record.governed(),
                    board_key: record.board_key(),
                    id,
                }),
                Ok(None) => {}
                // Closed between the listing and the read.
                Err(Error::Io(error)) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {}
                Err(error @ Error::Corrupt { .. }) => sessions.push(SessionSummary {
                    triple: Triple::new(crate::timeline::Status::Active, None, None),
                    created_at: None,
                    archived: false,
                    corrupt: Some(error.to_string()),
                    governed: true,
                    board_key: 0,
                    id,
                }),
                Err(error) => return Err(error),
            }
        }
        debug_assert!(
            sessions.iter().all(|row| row.corrupt.is_none() || (row.governed && !row.archived)),
            "a damaged session is listed on the board, unarchived"
        );
        Ok(sessions)
    }

    /// The board: governed sessions (archived ones only with `archived`) in the existing
    /// implementation's order: `sortkey`, else `createdAt`, then id.
    pub fn board(&self, archived: bool) -> Result<Vec<SessionSummary>> {
        let mut rows: Vec<SessionSummary> = self
            .list()?
            .into_iter()
            .filter(|row| row.governed && (archived || !row.archived))
            .collect();
        rows.sort_by(|a, b| a.board_key.cmp(&b.board_key).then_with(|| a.id.cmp(&b.id)));
        debug_assert!(
            rows.iter().all(|row| row.governed && (archived || !row.archived)),
            "the board shows governed sessions, archived ones only when asked"
        );
        Ok(rows)
    }

    /// The ids of every session directory in the store (valid ids only), in directory order.
    pub fn session_ids(&self) -> Result<Vec<SessionId>> {
        let entries = self.fs.read_dir(&self.layout.sessions_dir())?;
        Ok(entries
            .into_iter()
            // A link in a session's place is listed, so that reading it reports it.
            .filter(|entry| {
                matches!(entry.kind, faultfs::FileKind::Dir | faultfs::FileKind::Symlink)
            })
            .filter_map(|entry| SessionId::new(&entry.name).ok())
            .collect::<Vec<SessionId>>())
        .inspect(|ids| {
            debug_assert!(
                ids.windows(2).all(|pair| matches!(pair, [a, b] if a < b)),
                "a listing names each session once, in name order"
            );
        })
    }

    /// The last `limit` public events, oldest first. Reads segments backward from the end; the
    /// cost depends on `limit`, not on the size of the log.
    pub fn tail(&self, id: &SessionId, limit: usize) -> Result<Vec<Event>> {
        self.require_session(id)?;
        let lines = timeline::tail_lines(&self.fs, &self.layout, id, limit, Line::is_public)?;
        let mut events: Vec<Event> = lines.iter().filter_map(Line::public).collect();
        events.reverse();
        assert!(events.len() <= limit, "a tail holds at most its limit");
        Ok(events)
    }

    /// A page of the log read backward: the last `limit` public events before `before` (a
    /// position an earlier page handed out; `None`: the end), oldest first. Like [`Store::tail`]
    /// the cost depends on `limit`, not on the size of the log; paging back through a whole log
    /// reads each line once.
    pub fn page(&self, id: &SessionId, before: Option<Position>, limit: usize) -> Result<Page> {
        self.require_session(id)?;
        let read =
            timeline::page_lines(&self.fs, &self.layout, id, before, limit, Line::is_public)?;
        let older = if read.full { read.lines.last().map(|(position, _)| *position) } else { None };
        let mut events: Vec<Event> =
            read.lines.iter().filter_map(|(_, line)| line.public()).collect();
        events.reverse();
        assert!(events.len() <= limit, "a page holds at most its limit");
        debug_assert!(
            older.is_none_or(|older| before.is_none_or(|before| older < before)),
            "the next page back starts before this one"
        );
        Ok(Page { events, older, end: read.end })
    }

    /// The public events after `position` (a page's `end`, or one this returned), and the
    /// position after them: [`Store::follow`] for a reader that started from a page rather than
    /// from the start of the log.
    pub fn follow_from(
        &self,
        id: &SessionId,
        position: Position,
    ) -> Result<(Vec<Event>, Position)> {
        let cursor = Cursor { segment: position.segment, offset: position.offset, index: 0 };
        let (events, next) = self.follow(id, cursor)?;
        let next = Position { segment: next.segment, offset: next.offset };
        assert!(events.is_empty() || next != position, "a read that returns events moves on");
        Ok((events, next))
    }

    /// Every public event, in order.
    pub fn events(&self, id: &SessionId) -> Result<Vec<Event>> {
        let (events, end) = self.follow(id, Cursor::START)?;
        assert_eq!(end.index, events.len() as u64, "a cursor counts the public events before it");
        Ok(events)
    }

    /// The public events after `cursor`, and the cursor after them. Reads only what grew.
    pub fn follow(&self, id: &SessionId, cursor: Cursor) -> Result<(Vec<Event>, Cursor)> {
        self.require_session(id)?;
        let (lines, next) = timeline::read_from(&self.fs, &self.layout, id, cursor)?;
        let events: Vec<Event> = lines.iter().filter_map(Line::public).collect();
        assert!(lines.is_empty() || next != cursor, "a read that returns lines moves on");
        Ok((events, next))
    }

    /// Cheap change detection of a session's log.
    pub fn stamp(&self, id: &SessionId) -> Result<Stamp> {
        self.require_session(id)?;
        let stamp = timeline::stamp(&self.fs, &self.layout, id)?;
        debug_assert!(stamp.segments > 0 || stamp.newest_len == 0, "no segment, no newest length");
        Ok(stamp)
    }

    /// The record's signature: its size and modification time (nanoseconds); `None` without a
    /// record.
    pub fn record_signature(&self, id: &SessionId) -> Result<Option<(u64, u64)>> {
        let path = self.layout.record(id);
        debug_assert!(crate::layout::lies_in(&path, self.layout.root()), "the store's own record");
        self.file_signature(&path)
    }

    /// The delivery queue's signature: its size and modification time (nanoseconds); `None` without a
    /// queue file (nothing owed).
    pub fn queue_signature(&self, id: &SessionId) -> Result<Option<(u64, u64)>> {
        let path = self.layout.queue(id);
        debug_assert!(crate::layout::lies_in(&path, self.layout.root()), "the store's own queue");
        self.file_signature(&path)
    }

    /// A file's size and mtime (nanoseconds); `None` when it does not exist.
    fn file_signature(&self, path: &Path) -> Result<Option<(u64, u64)>> {
        debug_assert!(
            crate::layout::lies_in(path, self.layout.root()),
            "a signature of a store file"
        );
        match self.fs.metadata(path) {
            Ok(metadata) => Ok(Some((metadata.len, metadata.modified_ns()))),
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Whether session `id` is exactly as `seen` recorded it, by four stats and no listing:
    /// the record and the queue (size, mtime), the segment the cursor is in (its length is the cursor's
    /// offset and its mtime unchanged), and the next segment number (absent: segments are only
    /// created in order). Any doubt (an empty log, a legacy segment, a torn tail) answers false;
    /// the caller then reads.
    pub fn unchanged_since(&self, id: &SessionId, seen: &Signature) -> Result<bool> {
        if seen.cursor.segment == 0
            || self.record_signature(id)? != seen.record
            || self.queue_signature(id)? != seen.queue
        {
            return Ok(false);
        }
        let (Some(current), Some(next)) = (
            self.layout.segment_of_key(id, seen.cursor.segment),
            self.layout.segment_of_key(id, seen.cursor.segment.saturating_add(1)),
        ) else {
            return Ok(false);
        };
        match self.fs.metadata(&current) {
            Ok(metadata) => {
                if metadata.len != seen.cursor.offset
                    || metadata.modified_ns() != seen.log_modified_ns
                {
                    return Ok(false);
                }
            }
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {
                return Ok(false);
            }
            Err(error) => return Err(error.into()),
        }
        assert_ne!(current, next, "the segment after the cursor's is another file");
        match self.fs.metadata(&next) {
            Ok(_) => Ok(false),
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(true),
            Err(error) => Err(error.into()),
        }
    }

    /// A hash of the (up to 256) log bytes just before `cursor`: a reader that saved it with
    /// its cursor can tell later whether the log still holds the bytes it read (a power loss
    /// may drop unsynced lines a reader saw, and new lines may regrow the log past the cursor).
    /// `None` when the cursor's segment is gone or shorter than the cursor.
    pub fn pin(&self, id: &SessionId, cursor: Cursor) -> Result<Option<String>> {
        let pin = crate::receipts::tail_pin(&self.fs, &self.layout, id, cursor)?;
        debug_assert!(
            pin.as_deref().is_none_or(|pin| pin.is_empty() || crate::digest::is_hex_digest(pin)),
            "a pin is a 64-digit hash, or empty at the log's start"
        );
        Ok(pin)
    }

    /// Every stored line of a session, private ones included (for verification and export).
    pub fn lines(&self, id: &SessionId) -> Result<Vec<Line>> {
        self.require_session(id)?;
        let (lines, end) = timeline::read_from(&self.fs, &self.layout, id, Cursor::START)?;
        assert_eq!(
            end.index,
            lines.iter().filter(|line| line.is_public()).count() as u64,
            "a read from the start counts every public event before its end"
        );
        Ok(lines)
    }
}
