//! Sending a message to a session (`spex session send`, `POST /api/sessions/:id/input`): the
//! request built and checked once.

use faultfs::RealFs;
use serde_json::{Value, json};
use spex_engine::reply::ReplyChannel;
use spex_engine::{Key, SendRequest, SessionId, Store};

use crate::exit::BadInput;

/// A message to send.
#[derive(Debug)]
pub(crate) struct Message {
    /// The session it is for.
    pub(crate) to: SessionId,
    /// What it says (never empty).
    pub(crate) text: String,
    /// The session it is from, if it is from one (a closed sender's messages are dropped).
    pub(crate) from: Option<SessionId>,
    /// How the receiver is asked to answer.
    pub(crate) reply_via: Option<ReplyChannel>,
    /// The idempotency key: a retry with the same key and text is acknowledged once.
    pub(crate) key: Option<Key>,
}

/// What the engine acknowledged (durably: it survives any crash from here on).
#[derive(Debug)]
pub(crate) struct Sent {
    /// The session it went to.
    pub(crate) to: SessionId,
    /// The message's id.
    pub(crate) mid: String,
    /// Whether a keyed retry found the message already sent.
    pub(crate) replayed: bool,
    /// Whether that replay put the message back in the queue.
    pub(crate) restored: bool,
    /// Whether the session is archived (hidden from listings; the message is owed all the same).
    pub(crate) archived: bool,
}

impl Sent {
    /// The acknowledgement as both surfaces give it.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "session": self.to.as_str(),
            "mid": self.mid,
            "replayed": self.replayed,
            "restored": self.restored,
            "archived": self.archived,
        })
    }
}

/// Sends `message`. An empty text is refused before anything is written.
pub(crate) fn send(store: &Store<RealFs>, message: Message) -> anyhow::Result<Sent> {
    if message.text.is_empty() {
        return Err(BadInput("the message is empty; nothing was sent".to_owned()).into());
    }
    let request = SendRequest {
        text: message.text,
        from: message.from,
        reply_via: message.reply_via,
        key: message.key,
        attributes: None,
    };
    let accepted = store.send(&message.to, &request)?;
    let archived = store.record(&message.to).is_ok_and(|record| record.archived());
    Ok(Sent {
        to: message.to,
        mid: accepted.mid,
        replayed: accepted.replayed,
        restored: accepted.restored,
        archived,
    })
}
