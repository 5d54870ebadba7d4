//! The delivery queue: `pending.json`, the ordered messages still owed to a session.
//!
//! # Format
//!
//! A JSON array of entries `{"mid","text","from","attributes"?,"dispatch"?:{"operation",
//! "requestDigest"}}`, where `text` is the composed transport text. The file is absent when the
//! queue is empty, so "is anything owed?" is one existence check. The log is never read to
//! decide what is owed.
//!
//! # Durability and concurrency
//!
//! Written whole by atomic replace (see `atomic`); removed durably when it empties. Every
//! mutation (a send's enqueue, a drain's removal) happens under the session's record lock, so
//! two processes can never lose each other's change (the existing implementation enqueued under
//! the record lock and removed under the delivery lock, and lost entries that way).

use serde::{Deserialize, Serialize};

use crate::error::{CorruptReason, Error, Result};

/// The receipt a keyed entry must match before any adapter call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dispatch {
    /// The operation.
    pub operation: String,
    /// The request digest.
    pub request_digest: String,
}

/// One owed message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The message id.
    pub mid: String,
    /// The composed transport text.
    pub text: String,
    /// The sender (`None`: a human).
    pub from: Option<String>,
    /// Optional delivery attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<serde_json::Map<String, serde_json::Value>>,
    /// For a keyed send, the receipt to match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<Dispatch>,
}

/// Parses a queue file.
pub(crate) fn parse(bytes: &[u8], path: &std::path::Path) -> Result<Vec<Entry>> {
    serde_json::from_slice(bytes).map_err(|error| Error::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        reason: CorruptReason::BadFile(error.to_string()),
    })
}

/// The bytes of a non-empty queue: pretty JSON, trailing newline.
pub(crate) fn encode(entries: &[Entry]) -> Vec<u8> {
    assert!(!entries.is_empty(), "an empty queue is represented by no file");
    let mut bytes = serde_json::to_vec_pretty(entries).expect("queue entries always serialize");
    bytes.push(b'\n');
    bytes
}
