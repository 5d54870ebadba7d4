//! Send: accept a message (append its `sent` line) and enqueue it, under the record lock.
//!
//! # Order and crash windows
//!
//! 1. Stage the new queue (`pending.json.tmp`, synced): the space-consuming step, before the
//!    commit point, so running out of space leaves the store as it was.
//! 2. Append the `sent` line and sync it: the commit point. The message is *accepted*.
//! 3. Publish the queue (rename, directory sync): the message is *owed*.
//! 4. Report `Accepted`.
//!
//! A crash before 2: nothing happened (the staged file is removed by recovery). A crash between
//! 2 and 3: the message is recorded but not owed, and the sender saw no success. For an unkeyed
//! send that is final (documented window: retrying sends a second message). For a keyed send,
//! retrying with the same key finds the receipt on the line and restores the queue entry from
//! its frozen delivery bytes. A crash after 3: accepted and owed; a keyed retry returns the
//! original mid.
//!
//! A batch (concurrent sends through one handle, see `group`, or [`Store::send_together`]) runs
//! these steps once for all its messages: the queue holding every new entry is staged, each
//! `sent` line is appended and synced on its own (never two lines under one sync: a power loss
//! could keep the later and lose the earlier), the queue is published, and only then is any
//! member answered. A crash inside leaves a prefix of the batch's lines logged, none owed and
//! none acknowledged.
//!
//! A retry may find a receipt that a killed process appended and never synced (a kill is not a
//! sync): the retry took the lock over from that process, so it made the log and the queue
//! durable before looking (see `store`), and its answer never rests on bytes a later power loss
//! could take back.

use std::collections::HashMap;

use faultfs::Fs;

use crate::atomic;
use crate::boundaries::SEND;
use crate::digest::{self, Payload};
use crate::error::{Error, Result};
use crate::group::Answer;
use crate::layout::{QUEUE_ENTRIES_MAX, SessionId, TEXT_BYTES_MAX};
use crate::mutant::{Mutant, active};
use crate::queue::{self, Dispatch, Entry};
use crate::recover::{Checks, Recovered};
use crate::reply::{self, ReplyChannel};
use crate::request::{Accepted, SendRequest};
use crate::store::Store;
use crate::timeline::{self, Delivery, Line, Receipt, SentEvent};

/// A keyed request's digests: operation, request digest, payload hash.
#[derive(Clone, Debug)]
struct Keyed {
    /// The caller's operation.
    operation: String,
    /// The digest of the operation and the raw key.
    request_digest: String,
    /// The digest of what is sent under the key (a retry must send the same).
    payload_hash: String,
}

/// A key as a batch remembers it: its operation and request digest.
type KeyId = (String, String);

/// A key accepted earlier in a batch, whose line is not in the log yet.
#[derive(Clone, Debug)]
struct KeptKey {
    /// What was sent under it.
    payload_hash: String,
    /// The message it was accepted as.
    mid: String,
}

/// How one request of a batch is answered once the batch commits.
#[derive(Debug)]
enum Prepared {
    /// Accepted: a new message, or a replay of a keyed one.
    Accepted(Accepted),
    /// Refused on its own (a revoked sender, a key conflict, a full queue); the rest of the
    /// batch goes on.
    Refused(Error),
}

impl Prepared {
    fn into_answer(self) -> Result<Accepted> {
        match self {
            Prepared::Accepted(accepted) => Ok(accepted),
            Prepared::Refused(error) => Err(error),
        }
    }
}

/// What a batch accumulates while it prepares its requests, before anything is written.
struct Batch {
    /// The queue as it will be published.
    entries: Vec<Entry>,
    /// The `sent` lines to append, in order.
    lines: Vec<Line>,
    /// Whether an entry was restored for a replay.
    restored: bool,
    /// Whether the most recent human send used the note channel (`None`: not read yet).
    previous_note: Option<bool>,
    /// Keys accepted earlier in this batch: (operation, request digest) -> (payload hash, mid).
    keys: HashMap<KeyId, KeptKey>,
}

impl<F: Fs> Store<F> {
    /// Sends `request` to session `to`. See the module header for the crash windows.
    ///
    /// Concurrent sends to one session through this handle are committed together (see
    /// `group`): each is answered only once its message is logged and owed.
    pub fn send(&self, to: &SessionId, request: &SendRequest) -> Result<Accepted> {
        self.check_request(request)?;
        match self.groups.send(to, request.clone(), |batch| self.send_batch(to, batch)) {
            Answer::Done(result) => result,
            Answer::Alone => {
                let mut results = self.send_batch(to, std::slice::from_ref(request))?;
                assert_eq!(results.len(), 1, "one answer per request");
                results.pop().expect("one answer per request")
            }
        }
    }

    /// Sends `requests` to session `to` in one commit, as concurrent [`Store::send`]s through
    /// one handle are committed: one lock hold, the queue replaced once, each `sent` line
    /// appended and synced in order, and no answer before the queue is published. Returns one
    /// result per request (a refusal is that request's answer), or an error for all of them.
    pub fn send_together(
        &self,
        to: &SessionId,
        requests: &[SendRequest],
    ) -> Result<Vec<Result<Accepted>>> {
        let mut answers: Vec<Option<Result<Accepted>>> =
            requests.iter().map(|request| self.check_request(request).err().map(Err)).collect();
        let valid: Vec<SendRequest> = requests
            .iter()
            .zip(&answers)
            .filter(|(_, answer)| answer.is_none())
            .map(|(request, _)| request.clone())
            .collect();
        let committed = if valid.is_empty() { Vec::new() } else { self.send_batch(to, &valid)? };
        assert_eq!(committed.len(), valid.len(), "one answer per request the batch committed");
        let mut committed = committed.into_iter();
        let answers: Vec<Result<Accepted>> = answers
            .iter_mut()
            .map(|answer| {
                answer.take().or_else(|| committed.next()).expect("one answer per request")
            })
            .collect();
        assert!(committed.next().is_none(), "every committed answer is handed out");
        Ok(answers)
    }

    /// The checks of a request that need no lock: its size, its key, its sender's revocation.
    fn check_request(&self, request: &SendRequest) -> Result<()> {
        if request.text.len() > TEXT_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "message text",
                bytes: request.text.len() as u64,
                bytes_max: TEXT_BYTES_MAX as u64,
            });
        }
        if let Some(sender) = &request.from
            && self.is_revoked(sender.as_str())?
        {
            return Err(Error::Revoked { sender: sender.to_string() });
        }
        // A queue entry's attributes are texts (what every reader keeps): anything else would
        // be written into a queue its readers take for damaged.
        if let Some(attributes) = &request.attributes
            && let Some((name, _)) = attributes.iter().find(|(_, value)| !value.is_string())
        {
            return Err(Error::InvalidInput {
                what: "delivery attributes",
                reason: format!("{name:?} is not a text (attributes are texts)"),
            });
        }
        if let Some(key) = &request.key
            && (key.operation.is_empty() || key.key.is_empty())
        {
            return Err(Error::InvalidInput {
                what: "idempotency key",
                reason: "operation and key must be non-empty".to_owned(),
            });
        }
        debug_assert!(request.text.len() <= TEXT_BYTES_MAX, "a request that passes fits a line");
        Ok(())
    }

    /// Commits `requests` to `to` as one transition: each is prepared in order (refused, a
    /// replay, or a new message), then the queue is staged, the new `sent` lines are appended
    /// and synced one by one, and the queue is published; only then is anyone answered. Returns
    /// one answer per request, or an error for the whole batch. A failure after the first line
    /// was written poisons the session in this handle (see `group`).
    pub(crate) fn send_batch(
        &self,
        to: &SessionId,
        requests: &[SendRequest],
    ) -> Result<Vec<Result<Accepted>>> {
        let read_early =
            if active(Mutant::QueueReadOutsideLock) { Some(self.queue(to)?) } else { None };
        self.transition_checked(
            to,
            &SEND,
            Checks { queue: true, ..Checks::default() },
            |recovered| {
                let Recovered { record, queue, last_line } = recovered;
                let record = record.ok_or_else(|| Error::NoSuchSession { id: to.clone() })?;
                let headless = reply::adapter_is_headless(self.adapter(to, &record)?.as_deref());
                let mut batch = Batch {
                    entries: read_early.unwrap_or(queue.unwrap_or_default()),
                    lines: Vec::new(),
                    restored: false,
                    previous_note: None,
                    keys: HashMap::new(),
                };
                let mut answers = Vec::with_capacity(requests.len());
                for request in requests {
                    let answer =
                        self.prepare(to, request, headless, last_line.as_ref(), &mut batch);
                    answers.push(answer?.into_answer());
                }
                assert_eq!(answers.len(), requests.len(), "one answer per request");
                debug_assert!(
                    batch.lines.len() <= requests.len(),
                    "at most one line per request: a replay or a refusal writes none"
                );
                if batch.lines.is_empty() && !batch.restored {
                    return Ok(answers);
                }
                self.commit_batch(to, &batch).inspect_err(|_| self.poison(to))?;
                // The receipt index's upkeep, once the lines are written (a refused or replayed
                // send, which wrote nothing, leaves it as it was).
                if !batch.keys.is_empty() {
                    self.receipts.maintain(&self.fs, &self.layout, to, &SEND.index)?;
                }
                Ok(answers)
            },
        )
    }

    /// Prepares one request of a batch: how it is answered once the batch commits (a refusal
    /// included), or an error of the whole batch.
    fn prepare(
        &self,
        to: &SessionId,
        request: &SendRequest,
        headless: bool,
        last_line: Option<&Line>,
        batch: &mut Batch,
    ) -> Result<Prepared> {
        let from = request.from.as_ref().map(SessionId::as_str);
        if let Some(sender) = from
            && self.is_revoked(sender)?
        {
            return Ok(Prepared::Refused(Error::Revoked { sender: sender.to_owned() }));
        }
        let keyed = keyed_of(request);
        debug_assert_eq!(keyed.is_some(), request.key.is_some(), "a key has its digests");
        if let Some(keyed) = &keyed
            && let Some(replayed) = self.replay(to, keyed, batch)?
        {
            return Ok(replayed);
        }
        let lines = batch.lines.len();
        let prepared = self.accept_new(to, request, keyed, headless, last_line, batch)?;
        debug_assert!(
            batch.lines.len() == lines + usize::from(matches!(prepared, Prepared::Accepted(_))),
            "a new message accepted adds its one line; a refusal adds none"
        );
        Ok(prepared)
    }

    /// The answer to a keyed request whose key was accepted before (earlier in this batch, or
    /// in the log): the same message replayed (its queue entry restored when neither owed nor
    /// settled), or a conflict when the payload differs. `None` for a key not seen yet.
    fn replay(&self, to: &SessionId, keyed: &Keyed, batch: &mut Batch) -> Result<Option<Prepared>> {
        let Keyed { operation, request_digest, payload_hash } = keyed;
        let conflict = |mid: &str| Error::KeyConflict {
            operation: operation.clone(),
            request_digest: request_digest.clone(),
            mid: mid.to_owned(),
        };
        // Accepted earlier in this batch: its line is not in the log yet.
        if let Some(kept) = batch.keys.get(&(operation.clone(), request_digest.clone())) {
            if kept.payload_hash != *payload_hash {
                return Ok(Some(Prepared::Refused(conflict(&kept.mid))));
            }
            let mid = kept.mid.clone();
            assert!(batch.entries.iter().any(|entry| entry.mid == mid), "a kept key is owed");
            return Ok(Some(Prepared::Accepted(Accepted { mid, replayed: true, restored: false })));
        }
        let Some(known) =
            self.receipts.lookup(&self.fs, &self.layout, to, operation, request_digest, None)?
        else {
            return Ok(None);
        };
        if known.receipt.payload_hash != *payload_hash {
            return Ok(Some(Prepared::Refused(conflict(&known.mid))));
        }
        let restored = restore_debt(&mut batch.entries, &known);
        batch.restored |= restored;
        Ok(Some(Prepared::Accepted(Accepted { mid: known.mid, replayed: true, restored })))
    }

    /// A new message for `request`: its `sent` line (with its receipt when keyed) and its queue
    /// entry added to the batch, or a refusal when the queue is full.
    fn accept_new(
        &self,
        to: &SessionId,
        request: &SendRequest,
        keyed: Option<Keyed>,
        headless: bool,
        last_line: Option<&Line>,
        batch: &mut Batch,
    ) -> Result<Prepared> {
        let from = request.from.as_ref().map(SessionId::as_str);
        let (lines_before, entries_before) = (batch.lines.len(), batch.entries.len());
        if batch.entries.len() >= QUEUE_ENTRIES_MAX {
            return Ok(Prepared::Refused(Error::TooLarge {
                what: "delivery queue (entries)",
                bytes: batch.entries.len() as u64,
                bytes_max: QUEUE_ENTRIES_MAX as u64,
            }));
        }
        let human = from.is_none();
        let previous_note = if human {
            match batch.previous_note {
                Some(note) => note,
                None => self.previous_human_used_note(to, last_line)?,
            }
        } else {
            false
        };
        let composed =
            reply::compose(&request.text, headless, request.reply_via, human, previous_note);
        if human {
            batch.previous_note = Some(composed.note);
        }
        let mid = self.ids.mid();
        let ts = crate::env::format_ts(self.clock.now_ms());
        batch.lines.push(sent_line(ts, &mid, request, &composed, keyed.as_ref()));
        if let Some(keyed) = &keyed {
            batch.keys.insert(
                (keyed.operation.clone(), keyed.request_digest.clone()),
                KeptKey { payload_hash: keyed.payload_hash.clone(), mid: mid.clone() },
            );
        }
        batch.entries.push(Entry {
            mid: mid.clone(),
            text: composed.text,
            from: from.map(str::to_owned),
            attributes: request.attributes.clone(),
            dispatch: keyed.map(|Keyed { operation, request_digest, .. }| Dispatch {
                operation,
                request_digest,
            }),
        });
        assert_eq!(batch.lines.len(), lines_before + 1, "a new message is one line");
        assert_eq!(batch.entries.len(), entries_before + 1, "a new message is one entry");
        Ok(Prepared::Accepted(Accepted { mid, replayed: false, restored: false }))
    }

    /// Boundaries 1 to 3 of the module header, for the whole batch.
    fn commit_batch(&self, to: &SessionId, batch: &Batch) -> Result<()> {
        assert!(!batch.lines.is_empty() || batch.restored, "a batch commits only what it changed");
        if active(Mutant::EnqueueBeforeAppend) {
            queue::write(self.files(to), &batch.entries, &SEND)?;
            return self.append_lines(to, &batch.lines, &SEND);
        }
        if batch.restored && active(Mutant::RestoreWithoutDirSync) {
            let tmp = self.layout.queue_tmp(to);
            atomic::stage(&self.fs, &tmp, &queue::encode(&batch.entries), &SEND.queue)?;
            self.append_lines(to, &batch.lines, &SEND)?;
            self.fs.rename(&tmp, &self.layout.queue(to), SEND.queue.rename)?;
            return Ok(());
        }
        queue::write_around(self.files(to), &batch.entries, &SEND, || {
            self.append_lines(to, &batch.lines, &SEND)
        })
    }

    /// Whether the most recent human send to `to` used the note channel: the log's final line
    /// when it is one (recovery read it), else read backward from the end of the log until the
    /// first human `sent` line.
    fn previous_human_used_note(&self, to: &SessionId, last_line: Option<&Line>) -> Result<bool> {
        let is_human_send =
            |line: &Line| matches!(line, Line::Sent(event, _) if event.from.is_none());
        let lines = match last_line {
            Some(line) if is_human_send(line) => vec![line.clone()],
            _ => timeline::tail_lines(&self.fs, &self.layout, to, 1, is_human_send)?,
        };
        assert!(
            lines.iter().filter(|line| is_human_send(line)).count() <= 1,
            "the read stops at the first human send"
        );
        Ok(
            matches!(lines.last(), Some(Line::Sent(event, _)) if event.from.is_none() && event.reply_via.as_deref() == Some("note")),
        )
    }
}

/// A replayed keyed send whose message is neither owed nor settled gets its queue entry back,
/// from the receipt's frozen delivery bytes. Returns whether it did.
fn restore_debt(entries: &mut Vec<Entry>, known: &crate::receipts::Known) -> bool {
    if known.settled || active(Mutant::ReplayWithoutRestore) {
        return false;
    }
    if entries.iter().any(|entry| entry.mid == known.mid) {
        return false;
    }
    // Without frozen delivery bytes (the existing implementation's August 2026 receipts) there
    // is nothing to restore from.
    let Some(delivery) = &known.receipt.delivery else { return false };
    let owed = entries.len();
    entries.push(Entry {
        mid: known.mid.clone(),
        text: delivery.text.clone(),
        from: delivery.from.clone(),
        attributes: delivery.attributes.clone(),
        dispatch: Some(Dispatch {
            operation: known.receipt.operation.clone(),
            request_digest: known.receipt.request_digest.clone(),
        }),
    });
    debug_assert!(
        entries.len() == owed + 1
            && entries.iter().filter(|entry| entry.mid == known.mid).count() == 1,
        "a restored debt is owed once, from its receipt"
    );
    true
}

/// The `sent` line of a new message `mid`, with its receipt (and the frozen delivery bytes a
/// lost queue entry is restored from) when keyed.
fn sent_line(
    ts: String,
    mid: &str,
    request: &SendRequest,
    composed: &reply::Composed,
    keyed: Option<&Keyed>,
) -> Line {
    let from = request.from.as_ref().map(|from| from.as_str().to_owned());
    let receipt = keyed.map(|keyed| {
        Box::new(Receipt {
            operation: keyed.operation.clone(),
            request_digest: keyed.request_digest.clone(),
            payload_hash: keyed.payload_hash.clone(),
            delivery: Some(Delivery {
                text: composed.text.clone(),
                from: from.clone(),
                attributes: request.attributes.clone(),
            }),
        })
    });
    let event = SentEvent {
        ts,
        mid: Some(mid.to_owned()),
        text: request.text.clone(),
        from,
        reply_via: composed.note.then(|| "note".to_owned()),
    };
    debug_assert!(
        receipt.as_ref().is_none_or(|receipt| {
            receipt.delivery.as_ref().is_some_and(|delivery| delivery.from == event.from)
        }),
        "a receipt freezes the delivery of the line it is on"
    );
    Line::Sent(event, receipt)
}

/// A keyed request's digests, or `None` for an unkeyed one.
fn keyed_of(request: &SendRequest) -> Option<Keyed> {
    let key = request.key.as_ref()?;
    let from = request.from.as_ref().map(SessionId::as_str);
    let request_digest = digest::request_digest(&key.operation, &key.key);
    let payload = Payload {
        text: &request.text,
        from,
        reply_via: request.reply_via.map(ReplyChannel::name),
        attributes: request.attributes.as_ref(),
    };
    let payload_hash = digest::payload_hash(&key.operation, &request_digest, &payload);
    debug_assert_ne!(request_digest, payload_hash, "the two digests are framed apart");
    Some(Keyed { operation: key.operation.clone(), request_digest, payload_hash })
}
