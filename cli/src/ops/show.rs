//! One session's state (`spex session show`, `GET /api/sessions/:id` and the session event
//! stream): what its record says, what it is owed, how far its agent got, its last event.

use faultfs::RealFs;
use serde_json::{Value, json};
use spex_engine::{Event, Record, SessionId, Store, Triple};

use super::agent::{Harness, agent_progress};

/// A session as its files say it is now.
#[derive(Debug)]
pub(crate) struct SessionView {
    /// The session.
    pub(crate) id: SessionId,
    /// Its record.
    pub(crate) record: Record,
    /// Its state as readers see it (a launch in flight shows what it started from).
    pub(crate) triple: Triple,
    /// Its adapter spec, if it names one.
    pub(crate) adapter: Option<String>,
    /// The messages it is owed, head first: (mid, sender).
    pub(crate) owed: Vec<(String, Option<String>)>,
    /// The progress of the agent a harness runs for it.
    pub(crate) agent: Option<String>,
    /// Its last public event.
    pub(crate) last: Option<Event>,
}

impl SessionView {
    /// The view as `spex session show --json` gives it (with `transcript`, which only the
    /// command knows how to find, added by it).
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "session": self.id.as_str(),
            "state": crate::render::triple_json(&self.triple),
            "agent": self.agent,
            "adapter": self.adapter,
            "createdAt": self.record.created_at(),
            "archived": self.record.archived(),
            "owed": self.owed.len(),
            "lastEvent": self.last.as_ref().map(Event::to_public_json),
            "record": self.record.public_fields(),
        })
    }

    /// The view as the page reads it (`GET /api/sessions/:id`, the session stream's `session`
    /// values): the owed messages themselves, so that it marks each message owed or delivered.
    pub(crate) fn to_page_json(&self) -> Value {
        json!({
            "id": self.id.as_str(),
            "agent": self.agent,
            "state": crate::render::triple_json(&self.triple),
            "createdAt": self.record.created_at(),
            "archived": self.record.archived(),
            "owed": self
                .owed
                .iter()
                .map(|(mid, from)| json!({ "mid": mid, "from": from }))
                .collect::<Vec<_>>(),
        })
    }
}

/// Reads session `id`'s view (an unreadable adapter file is an error naming it).
pub(crate) fn show(store: &Store<RealFs>, id: &SessionId) -> anyhow::Result<SessionView> {
    let record = store.record(id)?;
    let adapter = store.adapter(id, &record)?;
    let last = store.tail(id, 1)?.into_iter().next();
    gather(store, id, record, adapter, last)
}

/// Reads what the page shows of session `id`, as its stream polls it: no last event (the page
/// has the events), and an unreadable adapter file reads as none, so the stream goes on (`spex
/// doctor` names the file).
pub(crate) fn for_page(store: &Store<RealFs>, id: &SessionId) -> anyhow::Result<SessionView> {
    let record = store.record(id)?;
    let adapter = store.adapter(id, &record).ok().flatten();
    gather(store, id, record, adapter, None)
}

fn gather(
    store: &Store<RealFs>,
    id: &SessionId,
    record: Record,
    adapter: Option<String>,
    last: Option<Event>,
) -> anyhow::Result<SessionView> {
    let owed = store.queue(id)?.into_iter().map(|entry| (entry.mid, entry.from)).collect();
    let triple = record.public_triple();
    let harness = adapter.as_deref().is_some_and(|spec| Harness::from_spec(spec).is_some());
    let agent = agent_progress(store, id, &triple, harness)?.map(|progress| progress.to_string());
    Ok(SessionView { id: id.clone(), record, triple, adapter, owed, agent, last })
}
