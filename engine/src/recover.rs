//! Every transition's frame, and the recovery inside it.
//!
//! # The frame
//!
//! [`Store::transition`] takes the session's record lock, and when it took the lock over from
//! a dead holder, vouches for what that holder wrote (syncs the newest segment and the
//! directories, so nothing the next step rests on can still be lost); then it recovers, runs
//! the transition's work, and releases. An I/O failure poisons the session in this handle and
//! leaves the lock in place, so that its next taker vouches for the failed step's bytes.
//!
//! # Recovery of one session
//!
//! Idempotent, run by every writer under the record lock, and safe to crash inside.
//!
//! # Checks first
//!
//! Everything that can refuse runs before anything is written: the record parses, the log's
//! segments are whole (numbered from 1 without gaps, regular files), and for a writer of the
//! queue, the queue is sound. So a command that refuses (corrupt, exit 4) has written nothing;
//! it has not truncated a torn tail or rolled a record forward first.
//!
//! # Repairs
//!
//! 1. Repair the newest segment's torn tail (truncate, sync).
//! 2. Remove stale staging files (`session.json.tmp`, `pending.json.tmp`, `adapter.tmp`) and
//!    sync the directory.
//! 3. Roll the record forward: if the log's final line is a `status` event whose triple differs
//!    from the record's public triple, a lifecycle write logged its move and crashed before
//!    replacing the record; replace it now. (The log is the record's write-ahead log for the
//!    triple, so the record never shows a move the log lacks, and after recovery the log never
//!    shows a move the record does not reach.)

use faultfs::Fs;

use crate::atomic;
use crate::boundaries::{self, Boundaries};
use crate::error::{Error, Result};
use crate::layout::SessionId;
use crate::mutant::{Mutant, active};
use crate::queue::{self, Entry};
use crate::record::Record;
use crate::store::Store;
use crate::timeline::{self, Line};

/// What recovery read, handed to the transition's work so that it is not read twice under one
/// lock hold (nothing else can change it until the lock is released).
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// The record as recovery left it (rolled forward if it was), if the session has one.
    pub(crate) record: Option<Record>,
    /// The queue, for a transition that checks it (`Checks::queue`): sound, its entries.
    pub(crate) queue: Option<Vec<Entry>>,
    /// The log's final line, when the session has a record.
    pub(crate) last_line: Option<Line>,
}

impl Recovered {
    /// The record; a missing one is `NoSuchSession`.
    pub(crate) fn into_record(self, id: &SessionId) -> Result<Record> {
        debug_assert!(
            self.record.is_some() || self.last_line.is_none(),
            "a session without a record had no log line read"
        );
        self.record.ok_or_else(|| crate::error::Error::NoSuchSession { id: id.clone() })
    }
}

/// What a transition's recovery checks before it writes anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Checks {
    /// The transition writes the queue: a damaged queue refuses it.
    pub(crate) queue: bool,
    /// The transition deletes the session (close): nothing is read or repaired first, so a
    /// damaged record, queue or segment never blocks the one way out of it.
    pub(crate) deleting: bool,
}

impl<F: Fs> Store<F> {
    /// Runs `work` on session `id` under its record lock, after recovery; poisons the session
    /// on an I/O error.
    pub(crate) fn transition<T>(
        &self,
        id: &SessionId,
        steps: &Boundaries,
        work: impl FnOnce(Recovered) -> Result<T>,
    ) -> Result<T> {
        self.transition_checked(id, steps, Checks::default(), work)
    }

    /// [`Store::transition`], with the recovery checks `checks` run before anything is written.
    pub(crate) fn transition_checked<T>(
        &self,
        id: &SessionId,
        steps: &Boundaries,
        checks: Checks,
        work: impl FnOnce(Recovered) -> Result<T>,
    ) -> Result<T> {
        self.check_poison(id)?;
        let guard = self.lock_file(id, &self.layout.session_lock(id), &steps.lock)?;
        debug_assert_eq!(
            steps.lock.link.name().split('.').next(),
            steps.log.append.name().split('.').next(),
            "a transition's lock and log steps are named for the same transition"
        );
        // One transition's broken variant: only it skips the vouch, so only that transition as
        // the next process's first command can show it. (A close that skips it is not a
        // mutant: it commits by renaming the session away, so what the dead holder left
        // unsynced is discarded either way, and no image can tell.)
        let skips = |mutant: Mutant, prefix: &str| {
            active(mutant) && steps.lock.link.name().starts_with(prefix)
        };
        let transition_skips = skips(Mutant::DrainTakeoverWithoutVouch, "drain.")
            || skips(Mutant::ArchiveTakeoverWithoutVouch, "archive.");
        let vouching =
            guard.took_over() && !active(Mutant::NoVouchAfterTakeover) && !transition_skips;
        let result = if vouching
            && active(Mutant::RollForwardBeforeVouch)
            && !steps.lock.link.name().starts_with("recover.")
        {
            self.recover(id, steps, checks).and_then(|recovered| {
                timeline::vouch(&self.fs, &self.layout, id, &steps.log).map(|()| recovered)
            })
        } else if vouching {
            timeline::vouch(&self.fs, &self.layout, id, &steps.log)
                .and_then(|()| self.recover(id, steps, checks))
        } else {
            self.recover(id, steps, checks)
        }
        .and_then(work);
        match result {
            Ok(value) => {
                guard.release().inspect_err(|_| self.poison(id))?;
                debug_assert!(
                    self.check_poison(id).is_ok(),
                    "a transition that succeeds leaves its session sound"
                );
                Ok(value)
            }
            Err(error) => {
                let failed_io = matches!(error, Error::Io(_));
                if failed_io {
                    self.poison(id);
                }
                debug_assert!(
                    !failed_io
                        || active(Mutant::NoPoisonAfterFailedWrite)
                        || self.check_poison(id).is_err(),
                    "a failed write leaves its session poisoned in this handle"
                );
                if failed_io && !active(Mutant::ReleaseAfterFailedWrite) {
                    // Bytes the failed step wrote may be visible and not durable: the lock
                    // stays, so that its next taker vouches for them.
                    guard.abandon();
                } else {
                    drop(guard);
                }
                Err(error)
            }
        }
    }

    /// Runs recovery on session `id` under its record lock (every writer does this first; this
    /// entry point lets a maintainer or a harness recover without writing anything else).
    pub fn recover_session(&self, id: &SessionId) -> Result<()> {
        self.transition(id, &boundaries::RECOVER, |_| Ok(()))?;
        debug_assert!(self.check_poison(id).is_ok(), "a recovered session is not poisoned");
        Ok(())
    }

    /// Recovery of one session (see the module header). A missing session is left alone.
    pub(crate) fn recover(
        &self,
        id: &SessionId,
        steps: &Boundaries,
        checks: Checks,
    ) -> Result<Recovered> {
        if checks.deleting || !self.session_dir_exists(id)? {
            return Ok(Recovered::default());
        }
        let record = self.read_record(id)?;
        let segments = timeline::list_segments(&self.fs, &self.layout, id)?;
        let queue = if checks.queue { Some(queue::read_for_write(self.files(id))?) } else { None };
        if active(Mutant::AckBeforeSync) {
            // The broken variant syncs what the previous write acknowledged only now.
            timeline::vouch(&self.fs, &self.layout, id, &steps.log)?;
        }
        if !active(Mutant::NoTornTailRepair) {
            timeline::repair_torn_tail(&self.fs, &segments, &steps.log)?;
        }
        let dir = self.layout.session_dir(id);
        for tmp in
            [self.layout.record_tmp(id), self.layout.queue_tmp(id), self.layout.adapter_tmp(id)]
        {
            atomic::remove(&self.fs, &dir, &tmp, steps.recover_remove, steps.recover_dir_sync)?;
            debug_assert!(!self.fs.exists(&tmp)?, "no staging file survives recovery: {tmp:?}");
        }
        let Some(mut record) = record else {
            return Ok(Recovered { queue, ..Recovered::default() });
        };
        // The listing taken above still holds: the lock keeps other writers out, and a repair
        // only shortens the newest segment, which the read opens to its current end.
        let last_line = timeline::tail_lines_in(&self.fs, &segments, 1)?.pop();
        let current = if active(Mutant::RollForwardIgnoresLaunch) {
            record.triple()
        } else {
            record.public_triple()
        };
        if let Some(Line::Status(event)) = &last_line
            && event.triple != current
            && !active(Mutant::NoRollForward)
        {
            record.set_triple(&event.triple);
            record.end_launch(false);
            self.write_record(id, &record, &steps.recover_record)?;
        }
        debug_assert!(
            active(Mutant::NoRollForward)
                || active(Mutant::RollForwardIgnoresLaunch)
                || !matches!(&last_line,
                    Some(Line::Status(event)) if event.triple != record.public_triple()),
            "after recovery the record states what the log last declared"
        );
        Ok(Recovered { record: Some(record), queue, last_line })
    }
}
