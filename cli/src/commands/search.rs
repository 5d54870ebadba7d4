//! `spex search`: full-text search over what was said to sessions and the notes they declared,
//! through the session index (refreshed first).

use serde_json::json;
use spex_engine::SessionId;

use super::{Global, print_json, session_id};
use crate::exit::{BadInput, Code};

/// Arguments of `spex search`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The words to find (taken literally: FTS syntax is searched for, not obeyed).
    query: String,
    /// Only this session.
    #[arg(long, value_parser = session_id)]
    session: Option<SessionId>,
    /// Only sessions in this status (stored name or display word).
    #[arg(long)]
    status: Option<String>,
    /// Only events since this time: an ISO-8601 timestamp (or its prefix, e.g. 2026-11-30), or
    /// a duration back from now (e.g. 2h, 7days).
    #[arg(long)]
    since: Option<String>,
    /// At most this many hits.
    #[arg(long, default_value_t = 20)]
    limit: usize,
}

/// A `--since` value as a timestamp prefix to compare with event times.
pub(crate) fn since(text: &str, now_ms: u64) -> Result<String, BadInput> {
    if let Ok(duration) = humantime::parse_duration(text) {
        let back = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        return Ok(spex_engine::env::format_ts(now_ms.saturating_sub(back)));
    }
    let digits = text.chars().take(4).all(|c| c.is_ascii_digit());
    if text.len() >= 4 && digits && text.is_ascii() {
        return Ok(text.to_owned());
    }
    Err(BadInput(format!(
        "--since {text:?} is neither a timestamp (2026-11-30T12:00:00Z) nor a duration (2h)"
    )))
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    if args.query.trim().is_empty() {
        return Err(BadInput("the search query is empty".to_owned()).into());
    }
    let store = global.open_store()?;
    let mut index = spex_index::Index::open(store.layout().root())?;
    index.refresh(&store)?;
    let now_ms = spex_engine::env::Clock::now_ms(&spex_engine::env::SystemClock);
    let filter = spex_index::SearchFilter {
        session: args.session.as_ref().map(ToString::to_string),
        status: args.status.clone(),
        since: args.since.as_deref().map(|text| since(text, now_ms)).transpose()?,
        limit: args.limit,
    };
    let hits = index.search(&args.query, &filter)?;
    if global.json {
        let hits: Vec<_> = hits.iter().map(spex_index::Hit::to_json).collect();
        print_json(json!({ "query": args.query, "hits": hits }))?;
    } else {
        for hit in &hits {
            println!(
                "{}  {}  {:<4}  {}",
                super::literal(&hit.ts),
                hit.session,
                hit.kind,
                super::literal(&hit.snippet).replace('\n', " ")
            );
        }
        if hits.is_empty() {
            eprintln!("spex: no matches for {:?}", args.query);
        }
    }
    Ok(Code::Ok)
}
