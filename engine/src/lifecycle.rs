//! Lifecycle writes (status declarations) and archive.
//!
//! # Order and crash windows (crash-complete)
//!
//! Under the record lock, after recovery: read the prior record; build the new one; stage it
//! (`session.json.tmp`, synced: the space-consuming step first); if the public triple moved,
//! append one `status` event and sync it (the commit point); publish the record (rename,
//! directory sync).
//!
//! The log is the record's write-ahead log for the triple: a crash after the event and before
//! the rename leaves the log ahead, and the next writer's recovery rolls the record forward to
//! the logged triple. So after any crash and recovery, every move visible in the record is in the
//! log exactly once, and the log never shows a move the record does not reach. (The existing
//! implementation writes the record first and the event after, which loses the event in that
//! window; this order is the documented deviation.)
//!
//! # Launch readiness
//!
//! While a resume validates a launched runtime, the record carries `launch_readiness_pending`:
//! the frozen pre-resume public state (see `record`). Writes are compared through it: beginning a launch and failing it
//! append nothing (failing restores the frozen triple); the write that ends it successfully
//! clears the pending state and appends the one real move, if the triple moved relative to the
//! frozen one.
//!
//! # Retired sessions
//!
//! A session whose worktree is gone refuses lifecycle writes (`Retired`); sends to it are still
//! recorded.

use std::path::Path;

use faultfs::Fs;

use crate::atomic;
use crate::boundaries::{APPEND, ARCHIVE};
use crate::error::{Error, Result};
use crate::layout::{NOTE_BYTES_MAX, SessionId};
use crate::mutant::{Mutant, active};
use crate::record::Record;
use crate::store::Store;
use crate::timeline::{Line, Status, StatusEvent, Triple};

/// A lifecycle write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Declare a triple. While a launch is pending, this is the write that ends it successfully.
    Set(Triple),
    /// Begin validating a launch: freeze the current public triple, set `triple`, log nothing.
    BeginLaunch(Triple),
    /// The launch failed: restore the frozen triple, log nothing.
    FailLaunch,
    /// Declare `triple` only if the current status is one of `from`; otherwise write nothing.
    /// The check and the write happen under one record lock, so a concurrent writer cannot slip
    /// between them (the hooks' guarded writes: idle only from active, fail only while active).
    SetFrom {
        /// The statuses the write applies from.
        from: Vec<Status>,
        /// The triple to declare.
        triple: Triple,
    },
}

/// What a lifecycle write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The triple before.
    pub before: Triple,
    /// The triple after.
    pub after: Triple,
    /// Whether a `status` event was appended.
    pub logged: bool,
    /// Whether the record was written (false only for a `SetFrom` whose condition failed).
    pub written: bool,
}

impl<F: Fs> Store<F> {
    /// Binds session `id` to its harness: sets the given [`crate::record::HARNESS_KEYS`] in the
    /// record, under the record lock, after recovery. No triple moves, so no event is appended;
    /// an unchanged binding writes nothing. Allowed on a retired session (it is not a lifecycle
    /// move). Returns the record as written.
    pub fn bind_harness(&self, id: &SessionId, fields: &[(&str, &str)]) -> Result<Record> {
        self.transition(id, &APPEND, |recovered| {
            let mut record = recovered.into_record(id)?;
            let mut changed = false;
            for (key, value) in fields {
                changed |= record.set_harness_field(key, value)?;
            }
            debug_assert!(
                fields.iter().enumerate().all(|(at, (key, value))| {
                    fields.iter().skip(at + 1).any(|(later, _)| later == key)
                        || record.fields().get(*key).and_then(serde_json::Value::as_str)
                            == Some(*value)
                }),
                "a binding holds what was bound (the last value of a key given twice)"
            );
            if changed {
                self.write_record(id, &record, &APPEND.record)?;
            }
            Ok(record)
        })
    }

    /// Applies a lifecycle write to session `id` (see the module header).
    pub fn append(&self, id: &SessionId, write: &Lifecycle) -> Result<Applied> {
        if let Lifecycle::Set(triple)
        | Lifecycle::BeginLaunch(triple)
        | Lifecycle::SetFrom { triple, .. } = write
            && let Some(note) = &triple.note
            && note.len() > NOTE_BYTES_MAX
        {
            return Err(Error::TooLarge {
                what: "note",
                bytes: note.len() as u64,
                bytes_max: NOTE_BYTES_MAX as u64,
            });
        }
        self.transition(id, &APPEND, |recovered| {
            let mut record = recovered.into_record(id)?;
            if let Some(worktree) = record.worktree()
                && !self.fs.exists(Path::new(worktree))?
            {
                return Err(Error::Retired { id: id.clone(), worktree: worktree.to_owned() });
            }
            let before = record.public_triple();
            let Some((after, log)) = self.apply(&mut record, write, &before)? else {
                return Ok(Applied {
                    after: before.clone(),
                    before,
                    logged: false,
                    written: false,
                });
            };
            self.commit_lifecycle(id, &record, &after, log)?;
            debug_assert!(!log || after != before, "only a move is logged");
            Ok(Applied { before, after, logged: log, written: true })
        })
    }

    /// Applies `write` to `record` (whose public triple is `before`): the public triple after
    /// and whether it is a move to log, or `None` for a `SetFrom` whose condition failed.
    fn apply(
        &self,
        record: &mut Record,
        write: &Lifecycle,
        before: &Triple,
    ) -> Result<Option<(Triple, bool)>> {
        let pending = record.launch_pending();
        let (after, log) = match (write, pending) {
            (Lifecycle::SetFrom { from, .. }, _) if !from.contains(&record.triple().status) => {
                return Ok(None);
            }
            (Lifecycle::Set(triple) | Lifecycle::SetFrom { triple, .. }, _) => {
                record.set_triple(triple);
                record.end_launch(false);
                (triple.clone(), triple != before)
            }
            (Lifecycle::BeginLaunch(_), Some(_)) => {
                return Err(Error::Refused { reason: "a launch is already pending".to_owned() });
            }
            (Lifecycle::BeginLaunch(triple), None) => {
                record.begin_launch(self.clock.now_ms());
                record.set_triple(triple);
                (before.clone(), false)
            }
            (Lifecycle::FailLaunch, None) => {
                return Err(Error::Refused { reason: "no launch is pending".to_owned() });
            }
            (Lifecycle::FailLaunch, Some(frozen)) => {
                record.end_launch(true);
                (frozen, false)
            }
        };
        assert_eq!(
            record.public_triple(),
            Triple::new(after.status, after.proposal, after.note.clone()),
            "readers see the triple the write reports"
        );
        Ok(Some((after, log)))
    }

    /// Writes a lifecycle write's record, after its `status` event when `log` (the commit point;
    /// see the module header for the order).
    fn commit_lifecycle(
        &self,
        id: &SessionId,
        record: &Record,
        after: &Triple,
        log: bool,
    ) -> Result<()> {
        let now_ms = self.clock.now_ms();
        let tmp = self.layout.record_tmp(id);
        debug_assert!(
            !log || record.public_triple() == *after,
            "the logged move is what readers see"
        );
        if let Err(error) = atomic::stage(&self.fs, &tmp, &record.encode(), &APPEND.record) {
            atomic::discard(&self.fs, &tmp, &APPEND.record);
            return Err(error);
        }
        if active(Mutant::RecordBeforeEvent) {
            let dir = self.layout.session_dir(id);
            atomic::publish(&self.fs, &dir, &tmp, &self.layout.record(id), &APPEND.record)?;
            if log {
                let ts = crate::env::format_ts(now_ms);
                let line = Line::Status(StatusEvent { ts, triple: after.clone() });
                self.append_line(id, &line, &APPEND)?;
            }
            return Ok(());
        }
        if log {
            let line = Line::Status(StatusEvent {
                ts: crate::env::format_ts(now_ms),
                triple: after.clone(),
            });
            if let Err(error) = self.append_line(id, &line, &APPEND) {
                atomic::discard(&self.fs, &tmp, &APPEND.record);
                return Err(error);
            }
        }
        atomic::publish(
            &self.fs,
            &self.layout.session_dir(id),
            &tmp,
            &self.layout.record(id),
            &APPEND.record,
        )?;
        debug_assert!(
            self.fs.exists(&tmp).is_ok_and(|there| !there),
            "a published record leaves no staging file"
        );
        Ok(())
    }

    /// Archives session `id`: a record-only write (no event) that sets `stopped`, `archived`
    /// and the cold proof the existing implementation's board requires. Every segment is
    /// preserved.
    pub fn archive(&self, id: &SessionId) -> Result<()> {
        self.transition(id, &ARCHIVE, |recovered| {
            let mut record = recovered.into_record(id)?;
            if record.archived() {
                return Ok(());
            }
            record.set_archived();
            debug_assert!(record.archived() || record.launch_pending().is_some(), "archived");
            self.write_record(id, &record, &ARCHIVE.record)
        })
    }
}
