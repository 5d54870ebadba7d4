//! Listing sessions (`spex session ls`, `GET /api/sessions`): the session index's rows,
//! narrowed, each with the progress of the agent a harness runs for it.

use std::path::PathBuf;

use faultfs::RealFs;
use serde_json::{Value, json};
use spex_engine::{SessionId, Store};

use super::agent::{Harness, agent_word};

/// Which sessions, in which order.
#[derive(Debug)]
pub(crate) struct Narrowing {
    /// The index's order and status filter (`all`: archived sessions too).
    pub(crate) filter: spex_index::Filter,
    /// Only sessions active (else created) at or after this stored timestamp.
    pub(crate) since: Option<String>,
    /// Only sessions whose worktree is this directory or under it (an absolute path).
    pub(crate) project: Option<PathBuf>,
    /// Only sessions this harness runs.
    pub(crate) harness: Option<spex_history::Harness>,
    /// At most this many (the first in the listing's order).
    pub(crate) limit: Option<usize>,
}

impl Narrowing {
    /// Every session, archived ones too, most recently active first.
    pub(crate) fn everything() -> Narrowing {
        Narrowing {
            filter: spex_index::Filter {
                sort: spex_index::Sort::Activity,
                status: None,
                all: true,
            },
            since: None,
            project: None,
            harness: None,
            limit: None,
        }
    }

    /// Whether anything beyond the index's own filter narrows the listing.
    pub(crate) fn narrowed(&self) -> bool {
        self.since.is_some() || self.project.is_some() || self.harness.is_some()
    }
}

/// One listed session.
#[derive(Debug)]
pub(crate) struct Listed {
    /// The index's row (the owed count is the index's: its refresh read every queue that
    /// changed; a damaged one reads as unknown).
    pub(crate) row: spex_index::Row,
    /// The agent's progress, for a session a harness ran for (from its run log).
    pub(crate) agent: Option<String>,
}

impl Listed {
    fn to_json(&self) -> Value {
        let mut json = self.row.to_json();
        if let (Some(map), Some(agent)) = (json.as_object_mut(), &self.agent) {
            map.insert("agent".to_owned(), json!(agent));
        }
        json
    }
}

/// The listing as both surfaces give it.
pub(crate) fn to_json(listed: &[Listed]) -> Value {
    json!({ "sessions": listed.iter().map(Listed::to_json).collect::<Vec<_>>() })
}

/// The sessions of `index` (refreshed by the caller) that `narrowing` keeps.
pub(crate) fn sessions(
    store: &Store<RealFs>,
    index: &spex_index::Index,
    narrowing: &Narrowing,
) -> anyhow::Result<Vec<Listed>> {
    let mut rows = index.sessions(&narrowing.filter)?;
    if let Some(since) = &narrowing.since {
        rows.retain(|row| {
            row.last_activity
                .as_deref()
                .or(row.created_at.as_deref())
                .is_some_and(|when| when >= since.as_str())
        });
    }
    if narrowing.project.is_some() || narrowing.harness.is_some() {
        rows.retain(|row| {
            let Ok(id) = SessionId::new(&row.id) else { return false };
            let Ok(record) = store.record(&id) else { return false };
            let in_project = narrowing.project.as_ref().is_none_or(|project| {
                record
                    .worktree()
                    .is_some_and(|worktree| std::path::Path::new(worktree).starts_with(project))
            });
            let by_harness = narrowing.harness.is_none_or(|harness| {
                store
                    .adapter(&id, &record)
                    .ok()
                    .flatten()
                    .and_then(|spec| Harness::from_spec(&spec))
                    .is_some_and(|(ran_by, _)| ran_by.name() == harness.name())
            });
            in_project && by_harness
        });
    }
    if let Some(limit) = narrowing.limit {
        rows.truncate(limit);
    }
    Ok(rows.into_iter().map(|row| Listed { agent: agent_word(store, &row.id), row }).collect())
}

/// The spex sessions linked to harness sessions: (harness, harness session id) -> (spex session
/// id, display word).
pub(crate) type Links = std::collections::HashMap<(&'static str, String), (String, String)>;

/// The spex sessions of `store` that name a harness session, by (harness, harness session id):
/// their id and display word. A damaged or vanished record links nothing (`spex doctor` reports
/// it).
pub(crate) fn harness_links(store: &Store<RealFs>) -> anyhow::Result<Links> {
    let mut links = std::collections::HashMap::new();
    for id in store.session_ids()? {
        let Ok(record) = store.record(&id) else { continue };
        let Some(thread) = record.harness_session_id().filter(|thread| !thread.is_empty()) else {
            continue;
        };
        if let Some(harness) = spex_history::Harness::parse(record.harness()) {
            let display = record.public_triple().display_word().to_owned();
            links.insert((harness.name(), thread.to_owned()), (id.to_string(), display));
        }
    }
    Ok(links)
}
