//! Drain: hand queued messages to an adapter, one drainer per session.
//!
//! The drainer holds the delivery lock for the whole drain (one drainer per session, and the
//! existing implementation's drainers are excluded too). For each queue head:
//!
//! 1. Under the record lock: a head from a revoked sender is dropped (no adapter call). A keyed
//!    head is matched to its receipt in the log by operation, request digest, mid and the exact
//!    frozen transport bytes (text, from, attributes). Already settled: the entry is consumed
//!    without an adapter call. Receipt absent or different: the drain stops, fail-closed, the
//!    entry stays owed, and the report says why.
//! 2. Without the record lock: the adapter gets (mid, text, from), retried up to the policy's
//!    attempts. A send never waits on an adapter call in progress.
//! 3. Under the record lock: for a keyed entry, append `dispatch-settled` (synced), then remove
//!    the entry from the queue (staged before the settlement so a full disk changes nothing).
//!
//! A crash after the adapter accepted and before 3 causes one redelivery (at-least-once in that
//! window; the adapter gets the mid to deduplicate). A crash after the settlement never causes a
//! redelivery: the next drain finds the entry settled and consumes it.

use faultfs::Fs;
use serde_json::{Map, Value};

use crate::boundaries::DRAIN;
use crate::error::Result;
use crate::layout::SessionId;
use crate::mutant::{Mutant, active};
use crate::queue::Entry;
use crate::receipts::Known;
use crate::recover::Checks;
use crate::store::Store;
use crate::timeline::{Line, Settlement};

/// One message handed to an adapter.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    /// The message id (stable across redeliveries: deduplicate on it).
    pub mid: &'a str,
    /// The composed transport text.
    pub text: &'a str,
    /// The sender (`None`: a human).
    pub from: Option<&'a str>,
    /// Delivery attributes.
    pub attributes: Option<&'a Map<String, Value>>,
}

/// Where drained messages go.
pub trait Adapter {
    /// Delivers one message; `Ok` means the agent has it.
    fn deliver(&mut self, message: &Message<'_>) -> std::result::Result<(), String>;
}

/// Why a drain stopped before the queue emptied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainStop {
    /// A keyed entry has no receipt in the log.
    ReceiptMissing {
        /// The entry.
        mid: String,
    },
    /// A keyed entry's receipt differs from the entry.
    ReceiptDiffers {
        /// The entry.
        mid: String,
        /// What differs.
        field: &'static str,
    },
    /// The adapter refused every attempt.
    AdapterFailed {
        /// The entry.
        mid: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        error: String,
    },
}

impl std::fmt::Display for DrainStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainStop::ReceiptMissing { mid } => {
                write!(f, "keyed entry {mid} has no receipt in the log; left owed (fail-closed)")
            }
            DrainStop::ReceiptDiffers { mid, field } => {
                write!(
                    f,
                    "keyed entry {mid} differs from its receipt ({field}); left owed (fail-closed)"
                )
            }
            DrainStop::AdapterFailed { mid, attempts, error } => {
                write!(f, "adapter refused {mid} {attempts} times: {error}; left owed")
            }
        }
    }
}

/// What a drain did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Delivered by the adapter (and settled if keyed), in order.
    pub delivered: Vec<String>,
    /// Consumed without an adapter call (already settled).
    pub consumed: Vec<String>,
    /// Dropped without an adapter call (revoked sender).
    pub dropped: Vec<String>,
    /// Why it stopped early, if it did.
    pub stopped: Option<DrainStop>,
    /// Entries still owed afterwards.
    pub remaining: usize,
}

enum Next {
    Empty,
    Deliver(Entry),
    Stop(DrainStop),
}

impl<F: Fs> Store<F> {
    /// Drains session `id`'s queue into `adapter` (see the module header).
    pub fn drain(&self, id: &SessionId, adapter: &mut dyn Adapter) -> Result<DrainReport> {
        self.require_session(id)?;
        let delivery = self.lock_file(id, &self.layout.delivery_lock(id), &DRAIN.delivery_lock)?;
        let mut report = DrainReport::default();
        let result = self.drain_locked(id, adapter, &mut report);
        match result {
            Ok(()) => {
                delivery.release().inspect_err(|error| self.poison_on_io(id, error))?;
                report.remaining = self.queue(id)?.len();
                Ok(report)
            }
            Err(error) => {
                drop(delivery);
                Err(error)
            }
        }
    }

    fn drain_locked(
        &self,
        id: &SessionId,
        adapter: &mut dyn Adapter,
        report: &mut DrainReport,
    ) -> Result<()> {
        loop {
            let next = self.transition_checked(id, &DRAIN, Checks { queue: true }, || {
                self.next_head(id, report)
            })?;
            let entry = match next {
                Next::Empty => return Ok(()),
                Next::Stop(stop) => {
                    report.stopped = Some(stop);
                    return Ok(());
                }
                Next::Deliver(entry) => entry,
            };
            let message = Message {
                mid: &entry.mid,
                text: &entry.text,
                from: entry.from.as_deref(),
                attributes: entry.attributes.as_ref(),
            };
            let attempts_max = self.config.drain_attempts_max.max(1);
            let mut last_error = None;
            for attempt in 1..=attempts_max {
                match adapter.deliver(&message) {
                    Ok(()) => {
                        last_error = None;
                        break;
                    }
                    Err(error) => {
                        last_error = Some(error);
                        if attempt < attempts_max {
                            self.clock.sleep_ms(self.config.drain_retry_delay_ms);
                        }
                    }
                }
            }
            if let Some(error) = last_error {
                report.stopped = Some(DrainStop::AdapterFailed {
                    mid: entry.mid,
                    attempts: attempts_max,
                    error,
                });
                return Ok(());
            }
            self.transition(id, &DRAIN, || self.settle(id, &entry))?;
            report.delivered.push(entry.mid);
        }
    }

    /// Step 1: drops and consumes what needs no adapter call; returns the next entry to
    /// deliver, or why to stop.
    fn next_head(&self, id: &SessionId, report: &mut DrainReport) -> Result<Next> {
        loop {
            let mut entries = self.queue_for_write(id)?;
            let Some(head) = entries.first().cloned() else { return Ok(Next::Empty) };
            if let Some(sender) = head.from.as_deref()
                && self.is_revoked(sender)?
            {
                entries.remove(0);
                self.write_queue(id, &entries, &DRAIN)?;
                report.dropped.push(head.mid);
                continue;
            }
            let Some(dispatch) = &head.dispatch else { return Ok(Next::Deliver(head)) };
            if active(Mutant::SkipReceiptFence) {
                return Ok(Next::Deliver(head));
            }
            let known = self.receipts.lookup(
                &self.fs,
                &self.layout,
                id,
                &dispatch.operation,
                &dispatch.request_digest,
                &DRAIN.index,
            )?;
            match fence(&head, known.as_ref()) {
                Err(stop) => return Ok(Next::Stop(stop)),
                Ok(true) => {
                    entries.remove(0);
                    self.write_queue(id, &entries, &DRAIN)?;
                    report.consumed.push(head.mid);
                }
                Ok(false) => return Ok(Next::Deliver(head)),
            }
        }
    }

    /// The settlement line of a delivered keyed entry (`None` for an unkeyed one).
    fn settlement(&self, delivered: &Entry) -> Option<Line> {
        let dispatch = delivered.dispatch.as_ref()?;
        Some(Line::Settled(Settlement {
            ts: crate::env::format_ts(self.clock.now_ms()),
            operation: dispatch.operation.clone(),
            request_digest: dispatch.request_digest.clone(),
            mid: delivered.mid.clone(),
        }))
    }

    /// Step 3: settle (keyed) and remove the delivered entry.
    fn settle(&self, id: &SessionId, delivered: &Entry) -> Result<()> {
        let mut entries = self.queue_for_write(id)?;
        let position = entries.iter().position(|entry| entry.mid == delivered.mid);
        let Some(position) = position else {
            // Only a drainer removes entries and this one holds the delivery lock, so the entry
            // can only be gone with its session (closed meanwhile): nothing is left to settle.
            return Ok(());
        };
        entries.remove(position);
        if active(Mutant::SettleAfterRemoval) {
            self.write_queue(id, &entries, &DRAIN)?;
            if let Some(line) = self.settlement(delivered) {
                self.append_line(id, &line, &DRAIN)?;
            }
            return Ok(());
        }
        match self.settlement(delivered) {
            Some(line) => self.write_queue_around(id, &entries, &line, &DRAIN),
            None => self.write_queue(id, &entries, &DRAIN),
        }
    }
}

/// The keyed fence: `Ok(true)` if the entry's receipt is already settled (consume it),
/// `Ok(false)` if it matches and is owed (deliver it), `Err` to stop fail-closed.
fn fence(entry: &Entry, known: Option<&Known>) -> std::result::Result<bool, DrainStop> {
    let Some(known) = known else {
        return Err(DrainStop::ReceiptMissing { mid: entry.mid.clone() });
    };
    let differs = |field| Err(DrainStop::ReceiptDiffers { mid: entry.mid.clone(), field });
    if known.mid != entry.mid {
        return differs("mid");
    }
    // A receipt of the existing implementation's August 2026 writer froze no delivery bytes:
    // nothing proves what the entry must carry.
    let Some(delivery) = &known.receipt.delivery else { return differs("delivery") };
    if delivery.text != entry.text {
        return differs("text");
    }
    if delivery.from != entry.from {
        return differs("from");
    }
    if delivery.attributes != entry.attributes {
        return differs("attributes");
    }
    Ok(known.settled)
}
