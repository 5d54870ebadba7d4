//! Drain: hand queued messages to an adapter, one drainer per session, in batches.
//!
//! The drainer holds the delivery lock for the whole drain (one drainer per session, and the
//! existing implementation's drainers are excluded too). It works in rounds:
//!
//! 1. Under the record lock, one read of the queue: heads from a revoked sender are dropped and
//!    keyed heads already settled are consumed (no adapter call; one queue rewrite for all of
//!    them). Then a batch of the heads that follow, in order, up to [`batch_max`] of them: a
//!    keyed head is matched to its receipt in the log by operation, request digest, mid and
//!    the exact frozen transport bytes (text, from, attributes). A receipt absent or different
//!    ends the batch before that head; if it is the first, the drain stops, fail-closed, the
//!    entry stays owed, and the report says why. An unkeyed head must have its `sent` line in
//!    the log (read backward until the batch's mids are found), under the same rule; a mid
//!    queued twice is delivered once. A dropped or consumed head after the batch's
//!    first waits for the next round, so the queue only ever loses a prefix.
//! 2. Without the record lock: the adapter gets each (mid, text, from) of the batch in order,
//!    retried up to the policy's attempts; a refusal ends the batch there (the drain stops
//!    after settling what was delivered). A send never waits on an adapter call in progress.
//! 3. Under the record lock, one commit for the batch's delivered heads: the queue without them
//!    is staged, their settlements (keyed heads) are appended in order (each line its own write
//!    and sync, so a power loss keeps a prefix of them), then the queue is published. A full
//!    disk changes nothing.
//!
//! Each round reads and writes the queue a constant number of times, and a batch is at least a
//! quarter of what is owed, so a backlog of N drains with O(N) work.
//!
//! A crash after the adapter accepted and before the commit causes the batch's delivered heads
//! to be delivered again (at-least-once in that window, at most one batch; the adapter gets the
//! mid to deduplicate). A crash after the settlements and before the queue is published leaves
//! those heads owed and settled: the next drain consumes them without an adapter call (a
//! prefix of the settlements may survive a power loss). A crash after the commit never causes a
//! redelivery.

use faultfs::Fs;
use serde_json::{Map, Value};

use crate::boundaries::DRAIN;
use crate::error::Result;
use crate::layout::SessionId;
use std::collections::HashSet;

use crate::mutant::{Mutant, active, selected};
use crate::queue::{self, Entry};
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

    /// Attempts per message before the drain stops, when the adapter knows better than the
    /// store's default (a harness turn that failed is not retried at once: each attempt is a
    /// whole agent run).
    fn attempts_max(&self) -> Option<u32> {
        None
    }
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
    /// An unkeyed entry whose `sent` line is not in the log: nothing proves it was said.
    SentMissing {
        /// The entry.
        mid: String,
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
            DrainStop::SentMissing { mid } => {
                write!(f, "entry {mid} has no sent line in the log; left owed (fail-closed)")
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

/// The fewest heads a batch may hold; otherwise it holds a quarter of what is owed.
const BATCH_MIN: usize = 64;

/// The most heads one round hands to the adapter before committing, for `owed` entries.
fn batch_max(owed: usize) -> usize {
    let most = BATCH_MIN.max(owed.div_ceil(4));
    debug_assert!(most >= 1, "every round hands the adapter at least one head");
    most
}

/// What step 1 found.
struct Batch {
    /// Heads to deliver, in queue order.
    deliver: Vec<Entry>,
    /// Why the drain stops after this batch (the head after it failed its fence).
    stop: Option<DrainStop>,
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
                debug_assert!(
                    selected().is_some()
                        || report.delivered.iter().collect::<HashSet<_>>().len()
                            == report.delivered.len(),
                    "one mid, one delivery"
                );
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
            let batch = self.transition_checked(
                id,
                &DRAIN,
                Checks { queue: true, ..Checks::default() },
                |recovered| self.next_batch(id, recovered.queue.unwrap_or_default(), report),
            )?;
            if batch.deliver.is_empty() {
                report.stopped = batch.stop;
                return Ok(());
            }
            debug_assert!(
                batch.deliver.iter().all(|entry| !report.delivered.contains(&entry.mid)),
                "a drain delivers a message once"
            );
            let mut delivered = 0;
            let mut refused = None;
            for entry in &batch.deliver {
                match deliver(adapter, entry, self) {
                    Ok(()) => delivered += 1,
                    Err(stop) => {
                        refused = Some(stop);
                        break;
                    }
                }
            }
            assert!(
                refused.is_some() || delivered == batch.deliver.len(),
                "a batch is delivered whole unless the adapter refused"
            );
            let delivered = if refused.is_some() && active(Mutant::DrainCommitsRefused) {
                &batch.deliver[..]
            } else {
                batch.deliver.get(..delivered).expect("no more delivered than the batch holds")
            };
            if !delivered.is_empty() {
                self.transition_checked(
                    id,
                    &DRAIN,
                    Checks { queue: true, ..Checks::default() },
                    |recovered| self.settle(id, recovered.queue.unwrap_or_default(), delivered),
                )?;
                report.delivered.extend(delivered.iter().map(|entry| entry.mid.clone()));
            }
            if let Some(stop) = refused.or(batch.stop) {
                report.stopped = Some(stop);
                return Ok(());
            }
        }
    }

    /// Step 1: drops and consumes the heads that need no adapter call, then gathers the batch
    /// that follows (see the module header).
    fn next_batch(
        &self,
        id: &SessionId,
        mut entries: Vec<Entry>,
        report: &mut DrainReport,
    ) -> Result<Batch> {
        let limit = batch_max(entries.len());
        let mut gone = 0;
        let mut batch = Batch { deliver: Vec::new(), stop: None };
        for head in &entries {
            // A second entry of a mid (a queue written by hand or by another tool): the copy
            // of one delivered in this drain is consumed; one of a head in this batch waits.
            if report.delivered.contains(&head.mid) && batch.deliver.is_empty() {
                report.consumed.push(head.mid.clone());
                gone += 1;
                continue;
            }
            if batch.deliver.iter().any(|taken| taken.mid == head.mid) {
                break;
            }
            match self.judge(id, head)? {
                Judged::Drop | Judged::Consume if !batch.deliver.is_empty() => break,
                Judged::Drop => {
                    report.dropped.push(head.mid.clone());
                    gone += 1;
                }
                Judged::Consume => {
                    report.consumed.push(head.mid.clone());
                    gone += 1;
                }
                Judged::Stop(stop) => {
                    batch.stop = Some(stop);
                    break;
                }
                Judged::Deliver => {
                    batch.deliver.push(head.clone());
                    if batch.deliver.len() == limit {
                        break;
                    }
                }
            }
        }
        assert!(batch.deliver.len() <= limit, "a batch holds at most its bound");
        if gone > 0 {
            entries.drain(..gone);
            queue::write(self.files(id), &entries, &DRAIN)?;
        }
        self.fence_unkeyed(id, &mut batch)?;
        debug_assert_eq!(
            batch.deliver.iter().map(|entry| &entry.mid).collect::<HashSet<_>>().len(),
            batch.deliver.len(),
            "a mid queued twice is delivered once"
        );
        Ok(batch)
    }

    /// The fence of unkeyed heads: each must have its `sent` line in the log (a keyed head's
    /// receipt is on its `sent` line, so the keyed fence proves it). The log is read backward
    /// until every unkeyed mid of the batch is found, which for owed messages is near its end.
    /// The batch ends before the first head not found, and the drain stops there, fail-closed.
    fn fence_unkeyed(&self, id: &SessionId, batch: &mut Batch) -> Result<()> {
        if active(Mutant::SkipReceiptFence) {
            return Ok(());
        }
        let unkeyed: Vec<&str> = batch
            .deliver
            .iter()
            .filter(|entry| entry.dispatch.is_none())
            .map(|entry| entry.mid.as_str())
            .collect();
        if unkeyed.is_empty() {
            return Ok(());
        }
        debug_assert!(unkeyed.len() <= batch.deliver.len(), "the unkeyed heads are the batch's");

        let sent_mid = |line: &Line| match line {
            Line::Sent(event, _) => event.mid.clone(),
            _ => None,
        };
        let found =
            crate::timeline::tail_lines(&self.fs, &self.layout, id, unkeyed.len(), |line| {
                sent_mid(line).is_some_and(|mid| unkeyed.contains(&mid.as_str()))
            })?;
        let found: Vec<String> = found.iter().filter_map(sent_mid).collect();
        let missing = batch
            .deliver
            .iter()
            .position(|entry| entry.dispatch.is_none() && !found.contains(&entry.mid));
        if let Some(at) = missing
            && let Some(entry) = batch.deliver.get(at)
        {
            let mid = entry.mid.clone();
            batch.deliver.truncate(at);
            batch.stop = Some(DrainStop::SentMissing { mid });
        }
        assert!(
            batch
                .deliver
                .iter()
                .all(|entry| entry.dispatch.is_some() || found.contains(&entry.mid)),
            "every unkeyed message delivered has its sent line in the log"
        );
        Ok(())
    }

    /// What step 1 does with one head.
    fn judge(&self, id: &SessionId, head: &Entry) -> Result<Judged> {
        if let Some(sender) = head.from.as_deref()
            && self.is_revoked(sender)?
        {
            return Ok(Judged::Drop);
        }
        let Some(dispatch) = &head.dispatch else { return Ok(Judged::Deliver) };
        if active(Mutant::SkipReceiptFence) {
            return Ok(Judged::Deliver);
        }

        let known = self.receipts.lookup(
            &self.fs,
            &self.layout,
            id,
            &dispatch.operation,
            &dispatch.request_digest,
            Some(&DRAIN.index),
        )?;
        assert!(
            known
                .as_ref()
                .is_none_or(|known| known.receipt.request_digest == dispatch.request_digest),
            "a head is fenced by the receipt of its own key"
        );
        Ok(match fence(head, known.as_ref()) {
            Err(stop) => Judged::Stop(stop),
            Ok(true) => Judged::Consume,
            Ok(false) => Judged::Deliver,
        })
    }

    /// The settlement line of a delivered keyed entry (`None` for an unkeyed one).
    fn settlement(&self, delivered: &Entry) -> Option<Line> {
        let dispatch = delivered.dispatch.as_ref()?;
        let line = Line::Settled(Settlement {
            ts: crate::env::format_ts(self.clock.now_ms()),
            operation: dispatch.operation.clone(),
            request_digest: dispatch.request_digest.clone(),
            mid: delivered.mid.clone(),
        });
        debug_assert!(!line.is_public(), "a settlement is a private line");
        Some(line)
    }

    /// Step 3: settle the delivered keyed heads and remove every delivered head, in one commit.
    fn settle(&self, id: &SessionId, mut entries: Vec<Entry>, delivered: &[Entry]) -> Result<()> {
        let still_heads = entries.len() >= delivered.len()
            && entries.iter().zip(delivered).all(|(entry, delivered)| entry.mid == delivered.mid);
        if !still_heads {
            // Only a drainer removes entries and this one holds the delivery lock, so the heads
            // can only be gone with their session (closed meanwhile): nothing is left to settle.
            return Ok(());
        }
        entries.drain(..delivered.len());
        // Later copies of a delivered mid (a hand-written queue) go with it: one mid, one
        // delivery.
        entries.retain(|entry| !delivered.iter().any(|done| done.mid == entry.mid));
        assert!(
            entries.iter().all(|entry| delivered.iter().all(|done| done.mid != entry.mid)),
            "no delivered message stays owed"
        );
        let lines: Vec<Line> =
            delivered.iter().filter_map(|entry| self.settlement(entry)).collect();
        debug_assert!(
            lines.len() <= delivered.len(),
            "at most one settlement per delivered message (none for an unkeyed one)"
        );
        if active(Mutant::SettleAfterRemoval) {
            queue::write(self.files(id), &entries, &DRAIN)?;
            for line in &lines {
                self.append_line(id, line, &DRAIN)?;
            }
            return Ok(());
        }
        queue::write_around(self.files(id), &entries, &DRAIN, || {
            self.append_lines(id, &lines, &DRAIN)
        })
    }
}

/// What step 1 does with one head.
enum Judged {
    /// From a closed sender: removed without an adapter call.
    Drop,
    /// Keyed and already settled: removed without an adapter call.
    Consume,
    /// Keyed, and its receipt is missing or differs: the drain stops before it.
    Stop(DrainStop),
    /// Hand it to the adapter.
    Deliver,
}

/// Step 2 for one head: the adapter, retried up to the policy's attempts.
fn deliver<F: Fs>(
    adapter: &mut dyn Adapter,
    entry: &Entry,
    store: &Store<F>,
) -> std::result::Result<(), DrainStop> {
    let message = Message {
        mid: &entry.mid,
        text: &entry.text,
        from: entry.from.as_deref(),
        attributes: entry.attributes.as_ref(),
    };
    let attempts_max = adapter.attempts_max().unwrap_or(store.config.drain_attempts_max).max(1);
    assert!(attempts_max >= 1, "a head is offered to the adapter at least once");
    let mut last_error = String::new();
    for attempt in 1..=attempts_max {
        match adapter.deliver(&message) {
            Ok(()) => return Ok(()),

            Err(error) => {
                last_error = error;
                if attempt < attempts_max {
                    store.clock.sleep_ms(store.config.drain_retry_delay_ms);
                }
            }
        }
    }
    Err(DrainStop::AdapterFailed {
        mid: entry.mid.clone(),
        attempts: attempts_max,
        error: last_error,
    })
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
    debug_assert!(
        known.mid == entry.mid && delivery.text == entry.text,
        "the fence passes an entry only as its receipt froze it"
    );
    Ok(known.settled)
}
