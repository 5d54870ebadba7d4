//! What a send asks and what it is answered: plain values, shared by the send transition, the
//! group of concurrent sends and every caller.

use serde_json::{Map, Value};

use crate::layout::SessionId;
use crate::reply::ReplyChannel;

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
