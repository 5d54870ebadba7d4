//! The store: sessions under one root, their transitions and their reads.
//!
//! Every transition runs the same frame (see [`Store::transition`]): refuse a poisoned session,
//! take the record lock, run recovery, do the work, release. An I/O error inside the frame
//! poisons the session in this handle; the way back is a new `Store` (reopen) whose next writer
//! recovers.
//!
//! # Recovery (idempotent; run by every writer under the record lock, and safe to crash inside)
//!
//! 1. Repair the newest segment's torn tail (truncate, sync).
//! 2. Remove stale staging files (`session.json.tmp`, `pending.json.tmp`) and sync the directory.
//! 3. Roll the record forward: if the log's final line is a `status` event whose triple differs
//!    from the record's public triple, a lifecycle write logged its move and crashed before
//!    replacing the record; replace it now.
//!
//! Before all of that, a writer that took the record lock over from a dead holder *vouches*:
//! a kill is not a sync, so what the dead holder wrote (a `sent` line a keyed retry would
//! answer from, a `status` line a roll-forward would rest on, a renamed record or queue, a new
//! segment) may be visible without being durable. Vouching syncs the newest segment and the
//! timeline, session and sessions directories (record and queue are renamed from synced
//! staging files, so their names are all they need), so nothing acknowledged afterwards rests
//! on bytes a power loss could still take back. A lock released normally needs none of it: its
//! transition synced everything, or failed and cut back what it could not vouch for. (The log is the record's write-ahead log for the
//!    triple, so the record never shows a move the log lacks, and after recovery the log never
//!    shows a move the record does not reach.)
//!
//! `Store::open` also finishes closes interrupted after their commit point (see `close`).

use std::collections::BTreeSet;
use std::path::Path;

use faultfs::Fs;

use crate::atomic;
use crate::boundaries::{self, Boundaries};
use crate::env::{Clock, IdSource};
use crate::error::{Error, Result};
use crate::layout::{LOCK_WAIT_MS_DEFAULT, Layout, SEGMENT_BYTES_DEFAULT, SessionId};
use crate::lock::{self, LockGuard};
use crate::mutant::{Mutant, active};
use crate::queue::{self, Entry};
use crate::receipts::ReceiptIndexes;
use crate::record::Record;
use crate::sync::{Mutex, lock as lock_mutex};
// Shared ownership of the injected clock and id source (not synchronization: std's Arc).
use crate::timeline::{self, Cursor, Event, Line, Stamp, Triple};
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
        Config {
            segment_bytes_max: SEGMENT_BYTES_DEFAULT,
            lock_wait_ms: LOCK_WAIT_MS_DEFAULT,
            drain_attempts_max: 3,
            drain_retry_delay_ms: 200,
        }
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
        Ok(store)
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
    pub(crate) fn ensure_dir_all(&self, path: &Path, steps: &Boundaries) -> Result<()> {
        if self.fs.exists(path)? {
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
            self.fs.sync_dir(parent, steps.mkdir_sync)?;
        }
        Ok(())
    }

    /// Runs `work` on session `id` under its record lock, after recovery; poisons the session
    /// on an I/O error.
    pub(crate) fn transition<T>(
        &self,
        id: &SessionId,
        steps: &Boundaries,
        work: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.check_poison(id)?;
        let guard = self.lock_file(id, &self.layout.session_lock(id), &steps.lock)?;
        let vouched = if guard.took_over() && !active(Mutant::NoVouchAfterTakeover) {
            timeline::vouch(&self.fs, &self.layout, id, &steps.log)
        } else {
            Ok(())
        };
        let result = vouched.and_then(|()| self.recover(id, steps)).and_then(|()| work());
        match result {
            Ok(value) => {
                guard.release().inspect_err(|_| self.poison(id))?;
                Ok(value)
            }
            Err(error) => {
                if matches!(error, Error::Io(_)) {
                    self.poison(id);
                }
                drop(guard);
                Err(error)
            }
        }
    }

    /// Takes the lock file `path` of session `id` with this handle's clock and wait bound; an
    /// I/O failure poisons the session.
    pub(crate) fn lock_file(
        &self,
        id: &SessionId,
        path: &Path,
        steps: &lock::LockBoundaries,
    ) -> Result<LockGuard<'_, F>> {
        lock::acquire(&self.fs, self.clock.as_ref(), path, self.config.lock_wait_ms, steps)
            .inspect_err(|error| self.poison_on_io(id, error))
    }

    fn check_poison(&self, id: &SessionId) -> Result<()> {
        if lock_mutex(&self.poisoned).contains(id) {
            return Err(Error::Poisoned { session: id.to_string() });
        }
        Ok(())
    }

    pub(crate) fn poison(&self, id: &SessionId) {
        if active(Mutant::NoPoisonAfterFailedWrite) {
            return;
        }
        lock_mutex(&self.poisoned).insert(id.clone());
        self.receipts.forget(id);
    }

    /// Poisons the session if `error` is an I/O failure.
    pub(crate) fn poison_on_io(&self, id: &SessionId, error: &Error) {
        if matches!(error, Error::Io(_)) {
            self.poison(id);
        }
    }

    /// Recovery of one session (see the module header). A missing session is left alone.
    pub(crate) fn recover(&self, id: &SessionId, steps: &Boundaries) -> Result<()> {
        if !self.fs.exists(&self.layout.session_dir(id))? {
            return Ok(());
        }
        if active(Mutant::AckBeforeSync) {
            // The broken variant syncs what the previous write acknowledged only now.
            timeline::vouch(&self.fs, &self.layout, id, &steps.log)?;
        }
        if !active(Mutant::NoTornTailRepair) {
            timeline::repair_torn_tail(&self.fs, &self.layout, id, &steps.log)?;
        }
        let dir = self.layout.session_dir(id);
        for tmp in [self.layout.record_tmp(id), self.layout.queue_tmp(id)] {
            atomic::remove(&self.fs, &dir, &tmp, steps.recover_remove, steps.recover_dir_sync)?;
        }
        let Some(mut record) = self.read_record(id)? else { return Ok(()) };
        let last = timeline::tail_lines(&self.fs, &self.layout, id, 1, |_| true)?;
        if let Some(Line::Status(event)) = last.first()
            && event.triple != record.public_triple()
            && !active(Mutant::NoRollForward)
        {
            record.set_triple(&event.triple);
            record.set_launch_pending(None);
            if let Some(ms) = crate::env::parse_ts(&event.ts) {
                record.touch(ms);
            }
            self.write_record(id, &record, &steps.recover_record)?;
        }
        Ok(())
    }

    /// Runs recovery on session `id` under its record lock (every writer does this first; this
    /// entry point lets a maintainer or a harness recover without writing anything else).
    pub fn recover_session(&self, id: &SessionId) -> Result<()> {
        self.transition(id, &boundaries::RECOVER, || Ok(()))
    }

    /// Reads a session's record, or `None` if it has none.
    pub(crate) fn read_record(&self, id: &SessionId) -> Result<Option<Record>> {
        let path = self.layout.record(id);
        match atomic::read(&self.fs, &path)? {
            Some(bytes) => Ok(Some(Record::parse(&bytes, &path)?)),
            None => Ok(None),
        }
    }

    /// Reads a session's record; a missing record is `NoSuchSession`.
    pub fn record(&self, id: &SessionId) -> Result<Record> {
        self.read_record(id)?.ok_or_else(|| Error::NoSuchSession { id: id.to_string() })
    }

    pub(crate) fn write_record(
        &self,
        id: &SessionId,
        record: &Record,
        steps: &atomic::ReplaceBoundaries,
    ) -> Result<()> {
        atomic::replace(
            &self.fs,
            &self.layout.session_dir(id),
            &self.layout.record(id),
            &self.layout.record_tmp(id),
            &record.encode(),
            steps,
        )
    }

    /// The delivery queue of a session (empty if nothing is owed).
    pub fn queue(&self, id: &SessionId) -> Result<Vec<Entry>> {
        let path = self.layout.queue(id);
        match atomic::read(&self.fs, &path)? {
            Some(bytes) => queue::parse(&bytes, &path),
            None => Ok(Vec::new()),
        }
    }

    /// Replaces the queue durably (removing the file when it empties).
    pub(crate) fn write_queue(
        &self,
        id: &SessionId,
        entries: &[Entry],
        steps: &Boundaries,
    ) -> Result<()> {
        let dir = self.layout.session_dir(id);
        if entries.is_empty() {
            return atomic::remove(
                &self.fs,
                &dir,
                &self.layout.queue(id),
                steps.queue.remove,
                steps.queue.dir_sync,
            );
        }
        atomic::replace(
            &self.fs,
            &dir,
            &self.layout.queue(id),
            &self.layout.queue_tmp(id),
            &queue::encode(entries),
            &steps.queue,
        )
    }

    /// Appends one line durably to a session's log.
    pub(crate) fn append_line(
        &self,
        id: &SessionId,
        line: &Line,
        steps: &Boundaries,
    ) -> Result<()> {
        timeline::append(
            &self.fs,
            &self.layout,
            id,
            &line.encode(),
            self.config.segment_bytes_max,
            &steps.log,
        )?;
        Ok(())
    }

    /// Whether `sender` was closed (revoked).
    pub(crate) fn is_revoked(&self, sender: &str) -> Result<bool> {
        let Ok(sender) = SessionId::new(sender) else { return Ok(false) };
        Ok(self.fs.exists(&self.layout.revoked(&sender))?)
    }

    /// Fails with `NoSuchSession` unless the session has a record.
    pub(crate) fn require_session(&self, id: &SessionId) -> Result<()> {
        if self.fs.exists(&self.layout.record(id))? {
            Ok(())
        } else {
            Err(Error::NoSuchSession { id: id.to_string() })
        }
    }

    /// Creates a session: its directory and record, in `triple`, with no event (the creation
    /// write is not a move). Retrying after a crash completes a half-created session.
    pub fn create_session(
        &self,
        id: &SessionId,
        triple: &Triple,
        adapter: Option<&str>,
        worktree: Option<&str>,
    ) -> Result<Record> {
        let steps = &boundaries::CREATE;
        self.transition(id, steps, || {
            if self.read_record(id)?.is_some() {
                return Err(Error::SessionExists { id: id.to_string() });
            }
            let dir = self.layout.session_dir(id);
            if !self.fs.exists(&dir)? {
                self.fs.create_dir(&dir, steps.mkdir)?;
                if !active(Mutant::NoSessionDirSync) {
                    self.fs.sync_dir(&self.layout.sessions_dir(), steps.mkdir_sync)?;
                }
            }
            let mut record = Record::new(id, triple, self.clock.now_ms());
            record.set_adapter(adapter);
            record.set_worktree(worktree);
            self.write_record(id, &record, &steps.record)?;
            Ok(record)
        })
    }

    /// Every session with a record, sorted by id.
    pub fn list(&self) -> Result<Vec<SessionSummary>> {
        let entries = self.fs.read_dir(&self.layout.sessions_dir())?;
        let mut sessions = Vec::new();
        for entry in entries {
            if entry.kind != faultfs::FileKind::Dir {
                continue;
            }
            let Ok(id) = SessionId::new(&entry.name) else { continue };
            match self.read_record(&id) {
                Ok(Some(record)) => sessions.push(SessionSummary {
                    triple: record.public_triple(),
                    created_at: record.created_at().map(str::to_owned),
                    archived: record.archived(),
                    id,
                }),
                Ok(None) => {}
                // Closed between the listing and the read.
                Err(Error::Io(error)) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(sessions)
    }

    /// The last `limit` public events, oldest first. Reads segments backward from the end; the
    /// cost depends on `limit`, not on the size of the log.
    pub fn tail(&self, id: &SessionId, limit: usize) -> Result<Vec<Event>> {
        self.require_session(id)?;
        let lines = timeline::tail_lines(&self.fs, &self.layout, id, limit, Line::is_public)?;
        let mut events: Vec<Event> = lines.iter().filter_map(Line::public).collect();
        events.reverse();
        Ok(events)
    }

    /// Every public event, in order.
    pub fn events(&self, id: &SessionId) -> Result<Vec<Event>> {
        Ok(self.follow(id, Cursor::START)?.0)
    }

    /// The public events after `cursor`, and the cursor after them. Reads only what grew.
    pub fn follow(&self, id: &SessionId, cursor: Cursor) -> Result<(Vec<Event>, Cursor)> {
        self.require_session(id)?;
        let (lines, next) = timeline::read_from(&self.fs, &self.layout, id, cursor)?;
        Ok((lines.iter().filter_map(Line::public).collect(), next))
    }

    /// Cheap change detection of a session's log.
    pub fn stamp(&self, id: &SessionId) -> Result<Stamp> {
        self.require_session(id)?;
        timeline::stamp(&self.fs, &self.layout, id)
    }

    /// A hash of the (up to 256) log bytes just before `cursor`: a reader that saved it with
    /// its cursor can tell later whether the log still holds the bytes it read (a power loss
    /// may drop unsynced lines a reader saw, and new lines may regrow the log past the cursor).
    /// `None` when the cursor's segment is gone or shorter than the cursor.
    pub fn pin(&self, id: &SessionId, cursor: Cursor) -> Result<Option<String>> {
        crate::receipts::tail_pin(&self.fs, &self.layout, id, cursor)
    }

    /// Every stored line of a session, private ones included (for verification and export).
    pub fn lines(&self, id: &SessionId) -> Result<Vec<Line>> {
        self.require_session(id)?;
        Ok(timeline::read_from(&self.fs, &self.layout, id, Cursor::START)?.0)
    }
}
