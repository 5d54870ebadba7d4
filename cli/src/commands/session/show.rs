//! `spex session show`: a session's state, its agent and its transcript link (and what the
//! ledger says of a closed one).

use faultfs::RealFs;
use serde_json::json;
use spex_engine::{SessionId, Store};

use crate::args::Global;
use crate::exit::Code;
use crate::render::{self, Paint, outln, print_json};

pub(super) fn show(store: &Store<RealFs>, id: &SessionId, global: &Global) -> anyhow::Result<Code> {
    let view = match crate::ops::show::show(store, id) {
        Ok(view) => view,
        Err(error) => {
            return match error.downcast_ref::<spex_engine::Error>() {
                Some(spex_engine::Error::NoSuchSession { .. }) => show_closed(store, id, global),
                _ => Err(error),
            };
        }
    };
    let link = Link::of(&view.record, global)?;
    if global.json {
        let mut json = view.to_json();
        json["transcript"] = json!(link.as_ref().map(Link::to_json));
        print_json(json)?;
        return Ok(Code::Ok);
    }
    let crate::ops::show::SessionView { record, triple, adapter, owed, agent, last, .. } = view;
    let owed = owed.len();
    outln!("session   {id}")?;
    outln!("status    {}", Paint::for_stdout(global.color).status(triple.display_word()))?;
    if let Some(proposal) = triple.proposal {
        outln!("proposal  {}", proposal.name())?;
    }
    if let Some(note) = &triple.note {
        outln!("note      {}", indent(note, 10))?;
    }
    outln!("adapter   {}", adapter.as_deref().unwrap_or("-"))?;
    if let Some(agent) = &agent {
        outln!("agent     {agent}")?;
    }
    outln!("created   {}", local_time(record.created_at().as_deref()))?;
    outln!("archived  {}", if record.archived() { "yes" } else { "no" })?;
    outln!("owed      {owed}")?;
    if let Some(event) = &last {
        outln!("last      {}", local_time(Some(event.ts())))?;
    }
    if let Some(link) = &link {
        let place = match &link.found {
            Some(found) => spex_history::redact(
                &found.path.display().to_string(),
                &spex_history::Identity::of_this_machine(),
            ),
            None => "not found on this machine".to_owned(),
        };
        outln!("transcript {} {} ({place})", link.harness, render::literal(&link.id))?;
    }
    Ok(Code::Ok)
}

/// A spex session's link to its harness transcript: the record's `harness` and
/// `harness_session_id`, and the transcript found for them on this machine (if any).
#[derive(Debug)]
pub(super) struct Link {
    pub(super) harness: String,
    pub(super) id: String,
    pub(super) found: Option<spex_history::Found>,
}

impl Link {
    /// The record's link (`None` when it names no harness session).
    pub(super) fn of(
        record: &spex_engine::Record,
        global: &Global,
    ) -> anyhow::Result<Option<Link>> {
        let Some(id) = record.harness_session_id().filter(|id| !id.is_empty()) else {
            return Ok(None);
        };
        let harness = record.harness().to_owned();
        let wanted = spex_history::Harness::parse(&harness);
        let found = spex_history::discover(&crate::args::history_roots(global, &[])?)?
            .into_iter()
            .find(|found| Some(found.harness) == wanted && found.id == id);
        Ok(Some(Link { harness, id: id.to_owned(), found }))
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        json!({
            "harness": self.harness,
            "id": self.id,
            "path": self.found.as_ref().map(|found| found.path.display().to_string()),
        })
    }
}

/// `show` of a session without a record: closed (the ledger says when), or no such session.
pub(super) fn show_closed(
    store: &Store<RealFs>,
    id: &SessionId,
    global: &Global,
) -> anyhow::Result<Code> {
    let Some(closure) = store.closure(id.as_str())?.filter(|closure| closure.id == id.as_str())
    else {
        return Err(spex_engine::Error::NoSuchSession { id: id.clone() }.into());
    };
    if global.json {
        print_json(json!({
            "session": closure.id,
            "state": {"status": "closed", "display": "closed"},
            "closedAt": closure.closed_at,
        }))?;
    } else {
        outln!("session   {}", closure.id)?;
        outln!("status    closed")?;
        outln!("closed    {}", closure.closed_at)?;
    }
    Ok(Code::Ok)
}

/// A stored time as people read it: local, with how long ago.
pub(super) fn local_time(ts: Option<&str>) -> String {
    let Some(ts) = ts else { return "-".to_owned() };
    let zone = crate::when::zone(false);
    match crate::when::parse_ts(ts) {
        Some(instant) => format!(
            "{} ({})",
            instant.to_zoned_datetime(zone.clone()).strftime("%Y-%m-%d %H:%M:%S %Z"),
            crate::when::relative(jiff::Timestamp::now(), instant, &zone)
        ),
        None => render::literal(ts),
    }
}

/// `text` with every line after the first indented by `width` spaces.
pub(super) fn indent(text: &str, width: usize) -> String {
    render::literal(text).replace('\n', &format!("\n{}", " ".repeat(width)))
}
