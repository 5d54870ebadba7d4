//! Doctor: a read-only scan of a store (or one session) that lists every damage with its file,
//! offset and what a repair would do, and the repair of a damaged delivery queue.
//!
//! # Queue repair (crash-safe)
//!
//! Under the record lock: the damaged file is renamed beside (`pending.json.damaged-<ms>`), and
//! the directory synced; then the queue is rebuilt by atomic replace from the valid entries the
//! damaged file still holds, plus every keyed message the log proves owed (a receipt with its
//! frozen delivery bytes and no settlement, from a sender not revoked) that is not among them.
//! A crash before the rename changes nothing; after it, the damaged bytes are kept and a rerun
//! rebuilds from the log alone (plus nothing: the kept file is no longer read), which is why the
//! report says what could not be recovered: unkeyed messages the damaged file held.

use faultfs::Fs;

use crate::boundaries::RECOVER;
use crate::damage::{Damage, DamageKind};
use crate::error::{Error, Result};
use crate::layout::SessionId;
use crate::queue::{self, Dispatch, Entry};
use crate::store::Store;
use crate::timeline::{self, Cursor, Line};

/// What a queue repair did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueRepair {
    /// Where the damaged file was kept (`None`: the queue was not damaged; nothing was done).
    pub kept: Option<std::path::PathBuf>,
    /// Valid entries carried over from the damaged file.
    pub carried: usize,
    /// Keyed messages the log proved owed and that were restored.
    pub restored: Vec<String>,
    /// Why the damaged file was damaged, and so what may be lost.
    pub damage: Option<String>,
}

impl<F: Fs> Store<F> {
    /// Every damage in session `id` (or, with `None`, in every session and the close ledger),
    /// in place order. Writes nothing.
    pub fn doctor(&self, id: Option<&SessionId>) -> Result<Vec<Damage>> {
        let mut found = Vec::new();
        let ids = match id {
            Some(id) => {
                self.require_session(id)?;
                vec![id.clone()]
            }
            None => {
                if let Err(Error::Corrupt { path, offset, reason }) = self.closures() {
                    let kind = DamageKind::Corrupt { reason: reason.to_string() };
                    found.push(Damage { path, offset, kind });
                }
                // Entries that are no session are named, never skipped in silence.
                for entry in self.fs.read_dir(&self.layout.sessions_dir())? {
                    if let Err(invalid) = SessionId::new(&entry.name) {
                        let reason = invalid.reason;
                        found.push(Damage {
                            path: self.layout.sessions_dir().join(&entry.name),
                            offset: 0,
                            kind: DamageKind::Foreign { reason },
                        });
                    }
                }
                self.session_ids()?
            }
        };
        for id in ids {
            found.extend(self.doctor_session(&id)?);
        }
        // What the scan's reads noted is in `found` already.
        crate::damage::take_noted();
        found.sort();
        debug_assert!(
            found.iter().all(|damage| damage.path.starts_with(self.layout.root())),
            "every damage found lies inside the store"
        );
        Ok(found)
    }

    fn doctor_session(&self, id: &SessionId) -> Result<Vec<Damage>> {
        let mut found = Vec::new();
        if let Err(Error::Corrupt { path, offset, reason }) = self.read_record(id) {
            found.push(Damage {
                path,
                offset,
                kind: DamageKind::Corrupt { reason: reason.to_string() },
            });
        }
        // A file that cannot be read at all (a special file in its place) is damage of this
        // session, reported, never a failure of the whole scan.
        let corrupt = |path, offset, reason: crate::error::CorruptReason| Damage {
            path,
            offset,
            kind: DamageKind::Corrupt { reason: reason.to_string() },
        };
        match timeline::scan(&self.fs, &self.layout, id) {
            Ok(damage) => found.extend(damage),
            Err(Error::Corrupt { path, offset, reason }) => {
                found.push(corrupt(path, offset, reason))
            }
            Err(error) => return Err(error),
        }
        match self.queue_file(id) {
            Ok(file) => {
                if let Some(reason) = file.damage {
                    found.push(Damage {
                        path: self.layout.queue(id),
                        offset: 0,
                        kind: DamageKind::DamagedQueue { reason },
                    });
                }
            }
            Err(Error::Corrupt { path, offset, reason }) => {
                found.push(corrupt(path, offset, reason))
            }
            Err(error) => return Err(error),
        }
        // A lock is an empty regular file; anything else in its place blocks every writer.
        for lock in [self.layout.session_lock(id), self.layout.delivery_lock(id)] {
            if let Err(Error::Corrupt { path, offset, reason }) =
                crate::layout::expect_kind(&self.fs, &lock, faultfs::FileKind::File)
            {
                found.push(corrupt(path, offset, reason));
            }
        }
        for tmp in
            [self.layout.record_tmp(id), self.layout.queue_tmp(id), self.layout.adapter_tmp(id)]
        {
            if self.fs.exists(&tmp)? {
                found.push(Damage { path: tmp, offset: 0, kind: DamageKind::StaleStaging });
            }
        }
        assert!(
            found.iter().all(|damage| damage.path.starts_with(self.layout.root())),
            "a session's damage lies inside the store"
        );
        Ok(found)
    }

    /// Repairs session `id`'s delivery queue if it is damaged (see the module header).
    pub fn repair_queue(&self, id: &SessionId) -> Result<QueueRepair> {
        self.require_session(id)?;
        self.transition(id, &RECOVER, |_| {
            let file = self.queue_file(id)?;
            let Some(damage) = file.damage else { return Ok(QueueRepair::default()) };
            let queue = self.layout.queue(id);
            let kept = self
                .layout
                .session_dir(id)
                .join(format!("pending.json.damaged-{}", self.clock.now_ms()));
            self.fs.rename(&queue, &kept, RECOVER.queue.rename)?;
            self.fs.sync_dir(&self.layout.session_dir(id), RECOVER.queue.dir_sync)?;
            let mut entries = file.entries;
            let carried = entries.len();
            let mut restored = Vec::new();
            for (mid, entry) in self.owed_by_log(id)? {
                if !entries.iter().any(|owed| owed.mid == mid) {
                    restored.push(mid);
                    entries.push(entry);
                }
            }
            queue::write(self.files(id), &entries, &RECOVER)?;
            assert_eq!(entries.len(), carried + restored.len(), "a repair loses no valid entry");
            debug_assert!(
                self.queue_file(id).is_ok_and(|repaired| repaired.damage.is_none()),
                "a repaired queue reads sound"
            );
            Ok(QueueRepair { kept: Some(kept), carried, restored, damage: Some(damage) })
        })
    }

    /// The keyed messages the log proves owed: a receipt with frozen delivery bytes, no
    /// settlement, from a sender not revoked; in log order.
    fn owed_by_log(&self, id: &SessionId) -> Result<Vec<(String, Entry)>> {
        let (lines, _) = timeline::read_from(&self.fs, &self.layout, id, Cursor::START)?;
        let mut owed: Vec<(String, Entry)> = Vec::new();
        for line in lines {
            match line {
                Line::Sent(event, Some(receipt)) => {
                    let (Some(mid), Some(delivery)) = (event.mid, receipt.delivery) else {
                        continue;
                    };
                    if owed.iter().any(|(known, _)| *known == mid) {
                        continue;
                    }
                    if let Some(sender) = &delivery.from
                        && self.is_revoked(sender)?
                    {
                        continue;
                    }
                    let dispatch = Dispatch {
                        operation: receipt.operation,
                        request_digest: receipt.request_digest,
                    };
                    owed.push((
                        mid.clone(),
                        Entry {
                            mid,
                            text: delivery.text,
                            from: delivery.from,
                            attributes: delivery.attributes,
                            dispatch: Some(dispatch),
                        },
                    ));
                }
                Line::Settled(settlement) => owed.retain(|(mid, _)| *mid != settlement.mid),
                Line::Sent(..) | Line::Status(_) => {}
            }
        }
        debug_assert!(
            owed.iter().all(|(mid, entry)| *mid == entry.mid && entry.dispatch.is_some()),
            "what the log proves owed is keyed, each under its own mid"
        );
        Ok(owed)
    }
}
