//! Timeline lines: the three kinds, their exact key order, and the public view.
//!
//! ```text
//! {"ts":"…","kind":"status","status":"awaiting","proposal":"merge","note":"ready"}
//! {"ts":"…","kind":"sent","mid":"<uuid>","text":"hi","from":null,"replyVia":"note"}
//! {"ts":"…","kind":"sent","mid":"…","text":"…","from":"<id>","dispatchReceipt":{"operation":"…",
//!     "requestDigest":"<64 hex>","payloadHash":"<64 hex>","delivery":{"text":"…","from":"<id>"}}}
//! {"ts":"…","kind":"dispatch-settled","operation":"…","requestDigest":"<64 hex>","mid":"<uuid>"}
//! ```
//!
//! `dispatch-settled` lines and the `dispatchReceipt` field are private: they never appear in a
//! public read and never count toward a tail limit or a cursor position.

use serde::{Deserialize, Serialize};

use crate::error::{CorruptReason, Error, Result};
use crate::layout::LINE_BYTES_MAX;

/// A session's authored status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Working.
    Active,
    /// Idle.
    Idle,
    /// Awaiting a decision on its proposal.
    Awaiting,
    /// Parked.
    Parked,
    /// Failed.
    Error,
    /// Asking the human something.
    Asking,
    /// Queued, not started.
    Queued,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 7] = [
        Status::Active,
        Status::Idle,
        Status::Awaiting,
        Status::Parked,
        Status::Error,
        Status::Asking,
        Status::Queued,
    ];

    /// The stored name.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Idle => "idle",
            Status::Awaiting => "awaiting",
            Status::Parked => "parked",
            Status::Error => "error",
            Status::Asking => "asking",
            Status::Queued => "queued",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Status> {
        let status = Status::ALL.into_iter().find(|status| status.name() == name);
        debug_assert!(status.is_none_or(|status| status.name() == name), "a name parses to itself");
        status
    }
}

/// What an awaiting session proposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proposal {
    /// Merge the work.
    Merge,
    /// Nothing to merge.
    Nothing,
    /// Close the session.
    Close,
}

impl Proposal {
    /// The stored name.
    pub const fn name(self) -> &'static str {
        match self {
            Proposal::Merge => "merge",
            Proposal::Nothing => "nothing",
            Proposal::Close => "close",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Proposal> {
        let all = [Proposal::Merge, Proposal::Nothing, Proposal::Close];
        let proposal = all.into_iter().find(|proposal| proposal.name() == name);
        debug_assert!(proposal.is_none_or(|p| p.name() == name), "a name parses to itself");
        proposal
    }
}

/// The public lifecycle triple: what a `status` event records.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Triple {
    /// The status.
    pub status: Status,
    /// The proposal; `None` unless the status is `awaiting`.
    pub proposal: Option<Proposal>,
    /// The note; `None` when empty.
    pub note: Option<String>,
}

impl Triple {
    /// A normalized triple: the proposal is dropped unless awaiting, an empty note is none.
    pub fn new(status: Status, proposal: Option<Proposal>, note: Option<String>) -> Triple {
        let triple = Triple {
            status,
            proposal: if status == Status::Awaiting { proposal } else { None },
            note: note.filter(|note| !note.is_empty()),
        };
        debug_assert!(
            triple.proposal.is_none() || triple.status == Status::Awaiting,
            "only an awaiting triple proposes"
        );
        debug_assert!(triple.note.as_deref() != Some(""), "an empty note is none");
        triple
    }

    /// The display word of this triple.
    pub fn display_word(&self) -> &'static str {
        display_word(self.status, self.proposal)
    }
}

/// The display word of a status (read time only, never stored): active -> `working`; awaiting ->
/// merge `review`, nothing or none `done`, close `close-pending`; others unchanged.
pub fn display_word(status: Status, proposal: Option<Proposal>) -> &'static str {
    let word = match (status, proposal) {
        (Status::Active, _) => "working",
        (Status::Awaiting, Some(Proposal::Merge)) => "review",
        (Status::Awaiting, Some(Proposal::Nothing) | None) => "done",
        (Status::Awaiting, Some(Proposal::Close)) => "close-pending",
        (status, _) => status.name(),
    };
    debug_assert!(
        status == Status::Active || status == Status::Awaiting || word == status.name(),
        "only active and awaiting read otherwise than they are stored"
    );
    word
}

/// The exact transport bytes a keyed send froze, from which a lost queue entry is restored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The composed transport text.
    pub text: String,
    /// The sender (`None`: a human).
    pub from: Option<String>,
    /// Optional delivery attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The private receipt of a keyed send, stored on its `sent` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// The caller's operation.
    pub operation: String,
    /// SHA-256 of (operation, key), lowercase hex.
    pub request_digest: String,
    /// SHA-256 of (operation, request digest, request payload), lowercase hex.
    pub payload_hash: String,
    /// The frozen transport bytes (`None` on receipts of the existing implementation's August
    /// 2026 writer, which did not store them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
}

/// A public `status` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusEvent {
    /// When.
    pub ts: String,
    /// The triple.
    pub triple: Triple,
}

/// A public `sent` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentEvent {
    /// When.
    pub ts: String,
    /// The message id (`None` on lines of the existing implementation's July 2026 writer).
    pub mid: Option<String>,
    /// The raw text (without transport hints).
    pub text: String,
    /// The sender (`None`: a human).
    pub from: Option<String>,
    /// `Some("note")` when the effective reply channel was the note.
    pub reply_via: Option<String>,
}

/// A public timeline event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A lifecycle transition.
    Status(StatusEvent),
    /// A message addressed to the session.
    Sent(SentEvent),
}

impl Event {
    /// When the event happened.
    pub fn ts(&self) -> &str {
        match self {
            Event::Status(event) => &event.ts,
            Event::Sent(event) => &event.ts,
        }
    }

    /// The event as public JSON: the stored keys in order, plus `display` on status events,
    /// never any private metadata.
    pub fn to_public_json(&self) -> serde_json::Value {
        let json = match self {
            Event::Status(event) => serde_json::json!({
                "ts": event.ts,
                "kind": "status",
                "status": event.triple.status,
                "proposal": event.triple.proposal,
                "note": event.triple.note,
                "display": event.triple.display_word(),
            }),
            Event::Sent(event) => {
                let mut map = serde_json::Map::new();
                map.insert("ts".to_owned(), event.ts.clone().into());
                map.insert("kind".to_owned(), "sent".into());
                if let Some(mid) = &event.mid {
                    map.insert("mid".to_owned(), mid.clone().into());
                }
                map.insert("text".to_owned(), event.text.clone().into());
                map.insert("from".to_owned(), event.from.clone().into());
                if let Some(via) = &event.reply_via {
                    map.insert("replyVia".to_owned(), via.clone().into());
                }
                serde_json::Value::Object(map)
            }
        };
        debug_assert!(
            json.get("dispatchReceipt").is_none() && json.get("ts").is_some(),
            "a public event carries its time and never a receipt"
        );
        json
    }
}

/// A private settlement: the adapter accepted this keyed message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// When.
    pub ts: String,
    /// The operation of the receipt.
    pub operation: String,
    /// The request digest of the receipt.
    pub request_digest: String,
    /// The settled message.
    pub mid: String,
}

/// One stored line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// `status`.
    Status(StatusEvent),
    /// `sent`, with its private receipt if keyed.
    Sent(SentEvent, Option<Box<Receipt>>),
    /// `dispatch-settled`.
    Settled(Settlement),
}

#[derive(Serialize)]
struct StatusOut<'a> {
    ts: &'a str,
    kind: &'static str,
    status: Status,
    proposal: Option<Proposal>,
    note: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SentOut<'a> {
    ts: &'a str,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    mid: Option<&'a str>,
    text: &'a str,
    from: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_via: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dispatch_receipt: Option<&'a Receipt>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SettledOut<'a> {
    ts: &'a str,
    kind: &'static str,
    operation: &'a str,
    request_digest: &'a str,
    mid: &'a str,
}

#[derive(Deserialize)]
#[serde(tag = "kind")]
enum LineIn {
    #[serde(rename = "status")]
    Status {
        ts: String,
        status: Status,
        #[serde(default)]
        proposal: Option<Proposal>,
        #[serde(default)]
        note: Option<String>,
    },
    #[serde(rename = "sent")]
    Sent {
        ts: String,
        #[serde(default)]
        mid: Option<String>,
        text: String,
        #[serde(default)]
        from: Option<String>,
        #[serde(default, rename = "replyVia")]
        reply_via: Option<String>,
        #[serde(default, rename = "dispatchReceipt")]
        dispatch_receipt: Option<Box<Receipt>>,
    },
    #[serde(rename = "dispatch-settled")]
    Settled {
        ts: String,
        operation: String,
        #[serde(rename = "requestDigest")]
        request_digest: String,
        mid: String,
    },
}

impl Line {
    /// The public event of this line, if it has one (receipts stripped).
    pub fn public(&self) -> Option<Event> {
        let event = match self {
            Line::Status(event) => Some(Event::Status(event.clone())),
            Line::Sent(event, _) => Some(Event::Sent(event.clone())),
            Line::Settled(_) => None,
        };
        debug_assert_eq!(event.is_some(), self.is_public(), "a public line is an event");
        event
    }

    /// Whether this line is a public event.
    pub fn is_public(&self) -> bool {
        !matches!(self, Line::Settled(_))
    }

    /// The line's bytes, `\n`-terminated, with keys in the stored order. Asserts that the line
    /// reads back to itself and fits the line limit: writing anything else would be a bug.
    pub fn encode(&self) -> Vec<u8> {
        let json = match self {
            Line::Status(event) => serde_json::to_vec(&StatusOut {
                ts: &event.ts,
                kind: "status",
                status: event.triple.status,
                proposal: event.triple.proposal,
                note: event.triple.note.as_deref(),
            }),
            Line::Sent(event, receipt) => serde_json::to_vec(&SentOut {
                ts: &event.ts,
                kind: "sent",
                mid: event.mid.as_deref(),
                text: &event.text,
                from: event.from.as_deref(),
                reply_via: event.reply_via.as_deref(),
                dispatch_receipt: receipt.as_deref(),
            }),
            Line::Settled(settlement) => serde_json::to_vec(&SettledOut {
                ts: &settlement.ts,
                kind: "dispatch-settled",
                operation: &settlement.operation,
                request_digest: &settlement.request_digest,
                mid: &settlement.mid,
            }),
        };
        let mut bytes = json.expect("serializing plain strings and enums cannot fail");
        assert!(!bytes.contains(&b'\n'), "JSON escapes newlines, so a line is one line");
        assert!(bytes.len() < LINE_BYTES_MAX, "inputs are bounded so that every line fits");
        debug_assert_eq!(
            Line::decode(&bytes).ok().as_ref(),
            Some(self),
            "a line reads back to itself"
        );
        bytes.push(b'\n');
        bytes
    }

    /// Parses one line (without its `\n`).
    pub fn decode(bytes: &[u8]) -> std::result::Result<Line, String> {
        let parsed: LineIn = serde_json::from_slice(bytes).map_err(|error| error.to_string())?;
        Ok(match parsed {
            LineIn::Status { ts, status, proposal, note } => {
                Line::Status(StatusEvent { ts, triple: Triple { status, proposal, note } })
            }
            LineIn::Sent { ts, mid, text, from, reply_via, dispatch_receipt } => {
                Line::Sent(SentEvent { ts, mid, text, from, reply_via }, dispatch_receipt)
            }
            LineIn::Settled { ts, operation, request_digest, mid } => {
                Line::Settled(Settlement { ts, operation, request_digest, mid })
            }
        })
    }

    /// Parses one line, or the complete line glued onto a torn fragment (see [`glued`]).
    pub(crate) fn decode_lenient(bytes: &[u8]) -> Option<Line> {
        Line::decode(bytes).ok().or_else(|| glued(bytes).map(|(_, line)| line))
    }

    /// Parses one line of `path` at `offset`, as a corruption error if it does not parse. A
    /// complete line glued onto a torn fragment is returned, and the fragment noted as damage.
    pub(crate) fn decode_at(bytes: &[u8], path: &std::path::Path, offset: u64) -> Result<Line> {
        if bytes.len() > LINE_BYTES_MAX {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                offset,
                reason: CorruptReason::LineTooLong,
            });
        }
        if bytes.contains(&0) {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                offset,
                reason: CorruptReason::DamagedLine,
            });
        }
        match Line::decode(bytes) {
            Ok(line) => Ok(line),
            Err(why) => match glued(bytes) {
                Some((start, line)) => {
                    assert!(start > 0 && start < bytes.len(), "a glued line starts inside");
                    crate::damage::note(crate::damage::Damage {
                        path: path.to_path_buf(),
                        offset,
                        kind: crate::damage::DamageKind::GluedFragment {
                            fragment_bytes: start as u64,
                        },
                    });
                    Ok(line)
                }
                None => Err(Error::Corrupt {
                    path: path.to_path_buf(),
                    offset,
                    reason: CorruptReason::BadLine(why),
                }),
            },
        }
    }
}

/// A torn line of the existing implementation (it appends without fsync, and a crash can leave
/// an unterminated fragment that the next append glues a complete line onto): the complete line
/// that starts inside `bytes`, and where it starts. A line starts with `{"ts":`, which JSON text
/// can never hold inside a string (its quotes are escaped), so the first such start after the
/// beginning whose rest parses is the glued line.
pub(crate) fn glued(bytes: &[u8]) -> Option<(usize, Line)> {
    const START: &[u8] = b"{\"ts\":";
    let found = (1..bytes.len().saturating_sub(START.len()))
        .filter_map(|at| Some((at, bytes.get(at..)?)))
        .filter(|(_, rest)| rest.starts_with(START))
        .find_map(|(at, rest)| Line::decode(rest).ok().map(|line| (at, line)));
    debug_assert!(
        found.as_ref().is_none_or(|(at, _)| {
            *at >= 1 && bytes.get(*at..).is_some_and(|rest| rest.starts_with(START))
        }),
        "a glued line starts inside the fragment, where a line starts"
    );
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        let line = Line::decode(text.as_bytes()).unwrap();
        String::from_utf8(line.encode()).unwrap()
    }

    #[test]
    fn lines_keep_the_stored_key_order() {
        for text in [
            r#"{"ts":"2026-07-16T00:00:00.000Z","kind":"status","status":"awaiting","proposal":"merge","note":"ready"}"#,
            r#"{"ts":"2026-07-16T00:00:00.000Z","kind":"status","status":"active","proposal":null,"note":null}"#,
            r#"{"ts":"2026-07-16T00:00:00.000Z","kind":"sent","mid":"m1","text":"hello","from":null}"#,
            r#"{"ts":"2026-07-16T00:00:00.000Z","kind":"sent","mid":"m2","text":"hi","from":null,"replyVia":"note"}"#,
            r#"{"ts":"2026-07-16T00:00:00.000Z","kind":"sent","mid":"m3","text":"x","from":"s2","dispatchReceipt":{"operation":"merge","requestDigest":"aa","payloadHash":"bb","delivery":{"text":"x!","from":"s2"}}}"#,
            r#"{"ts":"2026-07-16T00:00:00.000Z","kind":"dispatch-settled","operation":"merge","requestDigest":"aa","mid":"m3"}"#,
        ] {
            assert_eq!(round_trip(text), format!("{text}\n"));
        }
    }

    #[test]
    fn private_metadata_is_not_public() {
        let sent = Line::decode(br#"{"ts":"t","kind":"sent","mid":"m","text":"x","from":"s","dispatchReceipt":{"operation":"o","requestDigest":"d","payloadHash":"p","delivery":{"text":"x","from":"s"}}}"#).unwrap();
        let public = sent.public().unwrap().to_public_json().to_string();
        assert!(!public.contains("dispatchReceipt") && !public.contains("payloadHash"), "{public}");
        let settled = Line::decode(br#"{"ts":"t","kind":"dispatch-settled","operation":"o","requestDigest":"d","mid":"m"}"#).unwrap();
        assert!(settled.public().is_none());
    }

    #[test]
    fn display_words() {
        assert_eq!(display_word(Status::Active, None), "working");
        assert_eq!(display_word(Status::Awaiting, Some(Proposal::Merge)), "review");
        assert_eq!(display_word(Status::Awaiting, Some(Proposal::Nothing)), "done");
        assert_eq!(display_word(Status::Awaiting, None), "done");
        assert_eq!(display_word(Status::Awaiting, Some(Proposal::Close)), "close-pending");
        assert_eq!(display_word(Status::Parked, None), "parked");
        assert_eq!(
            Triple::new(Status::Idle, Some(Proposal::Merge), Some(String::new())),
            Triple::new(Status::Idle, None, None)
        );
    }
}
