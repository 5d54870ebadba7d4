//! Recovery of one session: idempotent, run by every writer under the record lock (after
//! vouching for what a dead lock holder wrote, see `store`), and safe to crash inside.
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
use crate::boundaries::Boundaries;
use crate::error::Result;
use crate::layout::SessionId;
use crate::mutant::{Mutant, active};
use crate::queue::Entry;
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
        self.record.ok_or_else(|| crate::error::Error::NoSuchSession { id: id.to_string() })
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
        timeline::list_segments(&self.fs, &self.layout, id)?;
        let queue = if checks.queue { Some(self.queue_for_write(id)?) } else { None };
        if active(Mutant::AckBeforeSync) {
            // The broken variant syncs what the previous write acknowledged only now.
            timeline::vouch(&self.fs, &self.layout, id, &steps.log)?;
        }
        if !active(Mutant::NoTornTailRepair) {
            timeline::repair_torn_tail(&self.fs, &self.layout, id, &steps.log)?;
        }
        let dir = self.layout.session_dir(id);
        for tmp in
            [self.layout.record_tmp(id), self.layout.queue_tmp(id), self.layout.adapter_tmp(id)]
        {
            atomic::remove(&self.fs, &dir, &tmp, steps.recover_remove, steps.recover_dir_sync)?;
        }
        let Some(mut record) = record else {
            return Ok(Recovered { queue, ..Recovered::default() });
        };
        let last_line = timeline::tail_lines(&self.fs, &self.layout, id, 1, |_| true)?.pop();
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
        Ok(Recovered { record: Some(record), queue, last_line })
    }
}
