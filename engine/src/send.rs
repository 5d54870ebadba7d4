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
//! A retry may find a receipt that a killed process appended and never synced (a kill is not a
//! sync): the retry took the lock over from that process, so it made the log and the queue
//! durable before looking (see `store`), and its answer never rests on bytes a later power loss
//! could take back.

use faultfs::Fs;
use serde_json::{Map, Value};

use crate::atomic;
use crate::boundaries::{self, SEND};
use crate::digest::{self, Payload};
use crate::error::{Error, Result};
use crate::layout::{QUEUE_ENTRIES_MAX, SessionId, TEXT_BYTES_MAX};
use crate::mutant::{Mutant, active};
use crate::queue::{self, Dispatch, Entry};
use crate::recover::{Checks, Recovered};
use crate::reply::{self, ReplyChannel};
use crate::store::Store;
use crate::timeline::{self, Delivery, Line, Receipt, SentEvent};

/// An idempotency key and the operation it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// The caller's operation (e.g. `merge`, `http-input`).
    pub operation: String,
    /// The raw key; never stored (only its digest is).
    pub key: String,
}

/// A message to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendRequest {
    /// The raw text.
    pub text: String,
    /// The sending session (`None`: a human).
    pub from: Option<SessionId>,
    /// An explicit reply channel.
    pub reply_via: Option<ReplyChannel>,
    /// For an idempotent send, its key.
    pub key: Option<Key>,
    /// Delivery attributes.
    pub attributes: Option<Map<String, Value>>,
}

/// A send's success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The message id (the original one for a replay).
    pub mid: String,
    /// Whether this was a replay of an earlier keyed send.
    pub replayed: bool,
    /// Whether a replay restored a queue entry lost after acceptance.
    pub restored: bool,
}

impl<F: Fs> Store<F> {
    /// Sends `request` to session `to`. See the module header for the crash windows.
    pub fn send(&self, to: &SessionId, request: &SendRequest) -> Result<Accepted> {
        if request.text.len() > TEXT_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "message text",
                bytes: request.text.len() as u64,
                bytes_max: TEXT_BYTES_MAX as u64,
            });
        }
        let from = request.from.as_ref().map(SessionId::as_str);
        if let Some(sender) = from
            && self.is_revoked(sender)?
        {
            return Err(Error::Revoked { sender: sender.to_owned() });
        }
        if let Some(key) = &request.key
            && (key.operation.is_empty() || key.key.is_empty())
        {
            return Err(Error::InvalidInput {
                what: "idempotency key",
                reason: "operation and key must be non-empty".to_owned(),
            });
        }
        let read_early =
            if active(Mutant::QueueReadOutsideLock) { Some(self.queue(to)?) } else { None };
        self.transition_checked(to, &SEND, Checks { queue: true }, |recovered| {
            let Recovered { record, queue, last_line } = recovered;
            let record = record.ok_or_else(|| Error::NoSuchSession { id: to.to_string() })?;
            if let Some(sender) = from
                && self.is_revoked(sender)?
            {
                return Err(Error::Revoked { sender: sender.to_owned() });
            }
            let keyed = request.key.as_ref().map(|key| {
                let request_digest = digest::request_digest(&key.operation, &key.key);
                let payload = Payload {
                    text: &request.text,
                    from,
                    reply_via: request.reply_via.map(ReplyChannel::name),
                    attributes: request.attributes.as_ref(),
                };
                let payload_hash = digest::payload_hash(&key.operation, &request_digest, &payload);
                (key.operation.clone(), request_digest, payload_hash)
            });
            if let Some((operation, request_digest, payload_hash)) = &keyed
                && let Some(known) = self.receipts.lookup(
                    &self.fs,
                    &self.layout,
                    to,
                    operation,
                    request_digest,
                    &SEND.index,
                )?
            {
                if known.receipt.payload_hash != *payload_hash {
                    return Err(Error::KeyConflict {
                        operation: operation.clone(),
                        request_digest: request_digest.clone(),
                    });
                }
                let restored = self.restore_debt(to, queue.unwrap_or_default(), &known)?;
                return Ok(Accepted { mid: known.mid, replayed: true, restored });
            }

            let human = from.is_none();
            let headless = reply::adapter_is_headless(self.adapter(to, &record)?.as_deref());
            let previous_note = human && self.previous_human_used_note(to, last_line.as_ref())?;
            let composed =
                reply::compose(&request.text, headless, request.reply_via, human, previous_note);
            let mid = self.ids.mid();
            let ts = crate::env::format_ts(self.clock.now_ms());
            let receipt = keyed.as_ref().map(|(operation, request_digest, payload_hash)| {
                Box::new(Receipt {
                    operation: operation.clone(),
                    request_digest: request_digest.clone(),
                    payload_hash: payload_hash.clone(),
                    delivery: Some(Delivery {
                        text: composed.text.clone(),
                        from: from.map(str::to_owned),
                        attributes: request.attributes.clone(),
                    }),
                })
            });
            let line = Line::Sent(
                SentEvent {
                    ts,
                    mid: Some(mid.clone()),
                    text: request.text.clone(),
                    from: from.map(str::to_owned),
                    reply_via: composed.note.then(|| "note".to_owned()),
                },
                receipt,
            );
            let entry = Entry {
                mid: mid.clone(),
                text: composed.text,
                from: from.map(str::to_owned),
                attributes: request.attributes.clone(),
                dispatch: keyed
                    .map(|(operation, request_digest, _)| Dispatch { operation, request_digest }),
            };
            let entries = read_early.clone().unwrap_or(queue.unwrap_or_default());
            self.accept_and_enqueue(to, &line, entry, entries)?;
            Ok(Accepted { mid, replayed: false, restored: false })
        })
    }

    /// Boundaries 1 to 3 of the module header.
    fn accept_and_enqueue(
        &self,
        to: &SessionId,
        line: &Line,
        entry: Entry,
        mut entries: Vec<Entry>,
    ) -> Result<()> {
        if entries.len() >= QUEUE_ENTRIES_MAX {
            return Err(Error::TooLarge {
                what: "delivery queue (entries)",
                bytes: entries.len() as u64,
                bytes_max: QUEUE_ENTRIES_MAX as u64,
            });
        }
        entries.push(entry);
        if active(Mutant::EnqueueBeforeAppend) {
            self.write_queue(to, &entries, &SEND)?;
            return self.append_line(to, line, &SEND);
        }
        self.write_queue_around(to, &entries, std::slice::from_ref(line), &SEND)
    }

    /// A replayed keyed send whose message is neither owed nor settled gets its queue entry
    /// back, from the receipt's frozen delivery bytes. Returns whether it did.
    fn restore_debt(
        &self,
        to: &SessionId,
        mut entries: Vec<Entry>,
        known: &crate::receipts::Known,
    ) -> Result<bool> {
        if known.settled || active(Mutant::ReplayWithoutRestore) {
            return Ok(false);
        }
        if entries.iter().any(|entry| entry.mid == known.mid) {
            return Ok(false);
        }
        // Without frozen delivery bytes (the existing implementation's August 2026 receipts)
        // there is nothing to restore from.
        let Some(delivery) = &known.receipt.delivery else { return Ok(false) };
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
        if active(Mutant::RestoreWithoutDirSync) {
            let tmp = self.layout.queue_tmp(to);
            atomic::stage(&self.fs, &tmp, &queue::encode(&entries), &SEND.queue)?;
            self.fs.rename(&tmp, &self.layout.queue(to), SEND.queue.rename)?;
            return Ok(true);
        }
        self.write_queue(to, &entries, &boundaries::SEND)?;
        Ok(true)
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
        Ok(
            matches!(lines.last(), Some(Line::Sent(event, _)) if event.from.is_none() && event.reply_via.as_deref() == Some("note")),
        )
    }
}
