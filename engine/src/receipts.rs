//! Receipt lookup for keyed sends and the drain's fence.
//!
//! A per-handle, per-session index of receipts (operation + request digest -> message id,
//! payload hash, frozen delivery, settled?) folded from the log. The first lookup on a session
//! in a handle reads the whole log once: O(log bytes). Every later lookup reads only the bytes
//! appended since (O(new bytes)), from the index's cursor. The index is derived: if its cursor
//! no longer points into the log (a segment vanished, or the newest shrank), it is rebuilt from
//! the start, so a lost or stale index costs one full read and never a wrong answer. Lookups run
//! under the record lock, after recovery, so every line folded is complete and stays.

use std::collections::HashMap;

use faultfs::Fs;

use crate::error::{Error, Result};
use crate::layout::{Layout, SessionId};
use crate::sync::{Mutex, lock};
use crate::timeline::{self, Cursor, Line, Receipt};

/// What the log says about one receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Known {
    pub(crate) mid: String,
    pub(crate) receipt: Receipt,
    pub(crate) settled: bool,
}

#[derive(Debug, Default)]
struct Index {
    cursor: Cursor,
    receipts: HashMap<(String, String), Known>,
}

impl Index {
    fn fold(&mut self, lines: Vec<Line>) {
        for line in lines {
            match line {
                Line::Sent(event, Some(receipt)) => {
                    let key = (receipt.operation.clone(), receipt.request_digest.clone());
                    // The first receipt for a key is the one a replay must return.
                    self.receipts.entry(key).or_insert(Known {
                        mid: event.mid,
                        receipt: *receipt,
                        settled: false,
                    });
                }
                Line::Settled(settlement) => {
                    let key = (settlement.operation, settlement.request_digest);
                    if let Some(known) = self.receipts.get_mut(&key)
                        && known.mid == settlement.mid
                    {
                        known.settled = true;
                    }
                }
                Line::Sent(_, None) | Line::Status(_) => {}
            }
        }
    }
}

/// The receipt indexes of one store handle.
#[derive(Debug, Default)]
pub(crate) struct ReceiptIndexes {
    by_session: Mutex<HashMap<SessionId, Index>>,
}

impl ReceiptIndexes {
    /// The receipt for (operation, request digest), after folding what the log gained.
    pub(crate) fn lookup<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        operation: &str,
        request_digest: &str,
    ) -> Result<Option<Known>> {
        let mut indexes = lock(&self.by_session);
        let index = indexes.entry(id.clone()).or_default();
        match timeline::read_from(fs, layout, id, index.cursor) {
            Ok((lines, next)) => {
                index.fold(lines);
                index.cursor = next;
            }
            Err(Error::InvalidCursor { .. }) => {
                let (lines, next) = timeline::read_from(fs, layout, id, Cursor::START)?;
                *index = Index::default();
                index.fold(lines);
                index.cursor = next;
            }
            Err(error) => return Err(error),
        }
        Ok(index.receipts.get(&(operation.to_owned(), request_digest.to_owned())).cloned())
    }

    /// Drops a session's index (it is closed, or its handle was poisoned).
    pub(crate) fn forget(&self, id: &SessionId) {
        lock(&self.by_session).remove(id);
    }
}
