//! Reading a session's conversation (`spex session timeline`, `GET /api/sessions/:id/timeline`
//! and the event streams): its public events, each message marked owed or delivered.

use std::collections::HashSet;

use faultfs::RealFs;
use serde_json::{Value, json};
use spex_engine::{Event, Position, SessionId, Store};

/// A page of a session's events, read backward from `before` (the end when `None`).
#[derive(Debug)]
pub(crate) struct PageRequest {
    /// The session.
    pub(crate) session: SessionId,
    /// At most this many events.
    pub(crate) limit: usize,
    /// Where the page ends (a position an earlier page handed out as `older`).
    pub(crate) before: Option<Position>,
}

/// A page of events, oldest first.
#[derive(Debug)]
pub(crate) struct Marked {
    /// The session.
    pub(crate) session: SessionId,
    /// The events.
    pub(crate) events: Vec<Event>,
    /// The mids still owed to the session when the page was read.
    pub(crate) owed: HashSet<String>,
    /// The position the next older page ends at (`None`: this page starts the log).
    pub(crate) older: Option<Position>,
    /// Where this page ends: a follower continues from here.
    pub(crate) end: Position,
}

impl Marked {
    /// The page as both surfaces give it.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "session": self.session.as_str(),
            "events": self.events.iter().map(|event| event_json(event, &self.owed)).collect::<Vec<_>>(),
            "older": self.older.map(|position| position.to_string()),
            "end": self.end.to_string(),
        })
    }
}

/// Reads the page `request` asks for (its cost depends on the limit, not on the log's size).
pub(crate) fn page(store: &Store<RealFs>, request: &PageRequest) -> anyhow::Result<Marked> {
    let page = store.page(&request.session, request.before, request.limit)?;
    Ok(Marked {
        session: request.session.clone(),
        owed: owed_mids(store, &request.session),
        events: page.events,
        older: page.older,
        end: page.end,
    })
}

/// The message ids owed to a session (empty when its queue cannot be read: the marks are then
/// missing, never wrong).
pub(crate) fn owed_mids(store: &Store<RealFs>, id: &SessionId) -> HashSet<String> {
    store
        .queue(id)
        .map(|queue| queue.into_iter().map(|entry| entry.mid).collect())
        .unwrap_or_default()
}

/// An event as JSON shows it: the public form, and for a message with an id whether it is still
/// `owed` (else delivered), as the conversation view marks it.
pub(crate) fn event_json(event: &Event, owed: &HashSet<String>) -> Value {
    let mut value = event.to_public_json();
    let mid = match event {
        Event::Sent(sent) => sent.mid.as_deref(),
        Event::Status(_) => None,
    };
    if let (Some(map), Some(mid)) = (value.as_object_mut(), mid) {
        map.insert("owed".to_owned(), owed.contains(mid).into());
    }
    value
}
