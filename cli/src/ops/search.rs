//! Searching what was said (`spex search`, `GET /api/search`): the index's hits, with what a
//! harness transcript says redacted as every surface shows it.

use serde_json::{Value, json};

use crate::exit::BadInput;

/// A search.
#[derive(Debug)]
pub(crate) struct Query {
    /// The words to find (taken literally).
    pub(crate) text: String,
    /// Which hits: session, status, since, source (spex, claude or codex), project and limit.
    pub(crate) filter: spex_index::SearchFilter,
}

/// The hits of a search, best first.
#[derive(Debug)]
pub(crate) struct Found {
    /// The words searched for.
    pub(crate) query: String,
    /// The hits, transcript snippets redacted (spex's own texts are shown as stored, as the
    /// timeline shows them).
    pub(crate) hits: Vec<spex_index::Hit>,
}

impl Found {
    /// The hits as both surfaces give them.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "query": self.query,
            "hits": self.hits.iter().map(spex_index::Hit::to_json).collect::<Vec<_>>(),
        })
    }
}

/// Runs `query` on `index` (refreshed, and its transcripts scanned, by the caller); local
/// identity and credential-shaped values in a transcript's snippet are redacted with `identity`.
pub(crate) fn search(
    index: &spex_index::Index,
    query: Query,
    identity: &spex_history::Identity,
) -> anyhow::Result<Found> {
    if query.text.trim().is_empty() {
        return Err(BadInput("the search query is empty".to_owned()).into());
    }
    let hits = index.search(&query.text, &query.filter)?;
    Ok(Found { query: query.text, hits: hits.into_iter().map(|hit| hit.shown(identity)).collect() })
}

/// What `query` finds where there is nothing to search (no store, no transcripts).
pub(crate) fn nothing(query: Query) -> Found {
    Found { query: query.text, hits: Vec::new() }
}
