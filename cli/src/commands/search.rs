//! `spex search`: full-text search over what was said to sessions and the notes they declared,
//! through the session index (refreshed first).

use crate::args::{Global, resolve, status_parser};
use crate::exit::{BadInput, Code};
use crate::ops::fleet::{Answer, Fleet};
use crate::ops::{self, search::Query};
use crate::render::{self, Paint, outln, print_json};

/// Arguments of `spex search`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The words to find (taken literally: FTS syntax is searched for, not obeyed). Whole words
    /// match first; then texts holding each word of 3+ characters anywhere (for Chinese or
    /// Japanese text, or part of an identifier).
    query: String,
    /// Only this session (its id or a unique prefix).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Only sessions in this status (stored name or display word).
    #[arg(long, value_name = "STATUS", value_parser = status_parser())]
    status: Option<String>,
    /// Only events since this time: RFC 3339 (2026-12-01T07:00:00+01:00), a local date or time
    /// (2026-12-01, 2026-12-01T07:00), or a duration back from now (90m, 2h, 7days).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Only this side of the history: spex (the sessions' own timelines), claude, codex or
    /// opencode (the harness sessions: what a person asked and what the agent answered).
    #[arg(long, value_parser = ["spex", "claude", "codex", "opencode"])]
    harness: Option<String>,
    /// Only harness transcripts of this project: their working directory is DIR or under it.
    #[arg(long, value_name = "DIR")]
    project: Option<std::path::PathBuf>,
    /// At most this many hits (from each device, with --fleet).
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Also every device of the fleet (`spex fleet`): each hit names its device; a device that
    /// does not answer within --timeout is named unreachable and the rest still answer.
    #[arg(long, conflicts_with = "session")]
    fleet: bool,
    /// How long each device of the fleet may take to answer.
    #[arg(long, default_value = "5s", value_parser = crate::when::parse_duration, requires = "fleet")]
    timeout: std::time::Duration,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    if args.query.trim().is_empty() {
        return Err(BadInput("the search query is empty".to_owned()).into());
    }
    let zone = crate::when::zone(false);
    let since = crate::when::since_now(args.since.as_deref(), &zone).map_err(BadInput::from)?;
    let query = Query {
        text: args.query.clone(),
        filter: spex_index::SearchFilter {
            session: None,
            status: args.status.clone(),
            since,
            source: args.harness.clone(),
            project: args
                .project
                .as_ref()
                .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
                .map(|dir| dir.to_string_lossy().trim_end_matches('/').to_owned()),
            limit: args.limit,
        },
    };
    let fleet_since = query.filter.since.clone();
    let found = search_here(args, global, query)?;
    let fleet = if args.fleet {
        crate::ops::fleet::Fleet::read(&global.root()?.path)?
    } else {
        crate::ops::fleet::Fleet::default()
    };
    let remote = fleet_hits(&fleet, args, fleet_since.as_deref());
    if global.json {
        let mut document = found.to_json();
        if args.fleet {
            with_fleet(&mut document, &remote);
        }
        print_json(document)?;
        return Ok(Code::Ok);
    }
    let hits = found.hits;
    global.page();
    let paint = Paint::for_stdout(global.color);
    print_hits(&hits, paint, &zone)?;
    let remote_hits = render_remote(&remote, paint, &zone)?;
    if hits.is_empty() && remote_hits == 0 && !global.quiet {
        eprintln!("spex: no matches for {:?}", args.query);
    }
    Ok(Code::Ok)
}

/// The search on this machine. Without a store, a search of the harness transcripts builds
/// the index they are searched in (in a new store, as `spex index refresh` does); with no
/// transcripts either, there is nothing to search.
fn search_here(
    args: &Args,
    global: &Global,
    mut query: Query,
) -> anyhow::Result<ops::search::Found> {
    let mut store = global.existing_store()?;
    if store.is_none() && args.harness.as_deref() != Some("spex") {
        let found = spex_history::discover(&crate::args::history_roots(global, &[])?)?;
        if !found.is_empty() {
            store = Some(global.open_store()?);
        }
    }
    let Some(store) = store else {
        if !global.quiet {
            eprintln!(
                "spex: there is no store at {} yet and no Claude Code or Codex transcripts were found: nothing to search",
                global.root()?.path.display()
            );
        }
        return Ok(ops::search::nothing(query));
    };
    let session = args.session.as_deref().map(|text| resolve(&store, text)).transpose()?;
    query.filter.session = session.as_ref().map(ToString::to_string);
    let mut index = crate::args::open_index(&store)?;
    // The harness transcripts too, so an agent's answers are found (not for a search of spex's
    // own timelines only).
    if args.harness.as_deref() != Some("spex") {
        let found = spex_history::discover(&crate::args::history_roots(global, &[])?)?;
        index.scan_history(&found)?;
    }
    ops::search::search(&index, query, &spex_history::Identity::of_this_machine())
}

/// Each hit on a line (when, where, what kind, the snippet), with carets under what matched
/// when the terminal shows no color.
fn print_hits(
    hits: &[spex_index::Hit],
    paint: Paint,
    zone: &jiff::tz::TimeZone,
) -> anyhow::Result<()> {
    for hit in hits {
        let ts = hit.ts.as_deref().unwrap_or("-");
        let when = crate::when::parse_ts(ts).map_or_else(
            || render::literal(ts),
            |ts| ts.to_zoned_datetime(zone.clone()).strftime("%Y-%m-%d %H:%M").to_string(),
        );
        let place = match (hit.source, hit.line) {
            (spex_index::HitSource::Spex, _) | (_, None) => render::literal(&hit.session),
            (source, Some(line)) => {
                format!("{}:{}:{line}", source.name(), render::literal(&hit.session))
            }
        };
        let lead = format!("{when}  {place}  {:<6}  ", hit.kind);
        let (snippet, carets) = highlight(hit, paint);
        outln!("{}  {}  {:<6}  {snippet}", paint.dim(&when), paint.bold(&place), hit.kind)?;
        if let Some(carets) = carets {
            outln!("{}{carets}", " ".repeat(render::width(&lead)))?;
        }
    }
    Ok(())
}

/// Adds the fleet's hits (each naming its device) and which devices answered to `document`.
fn with_fleet(document: &mut serde_json::Value, remote: &[Answer<'_>]) {
    let mut hits: Vec<serde_json::Value> = document["hits"].as_array().cloned().unwrap_or_default();
    hits.extend(remote.iter().flat_map(|answer| answer.items("hits")));
    document["hits"] = hits.into();
    document["devices"] = remote.iter().map(Answer::to_json).collect::<Vec<_>>().into();
}

/// The fleet's hits for people, each place named by its device (`laptop:codex:ID:LINE`), and a
/// line on stderr for each device that did not answer; how many hits were shown.
fn render_remote(
    remote: &[Answer<'_>],
    paint: Paint,
    zone: &jiff::tz::TimeZone,
) -> anyhow::Result<usize> {
    let mut shown = 0;
    for answer in remote {
        let name = &answer.member.name;
        match &answer.body {
            Err(why) => eprintln!("spex: {name} is unreachable: {why}"),
            Ok(_) => {
                for hit in answer.items("hits") {
                    shown += 1;
                    let text = |field: &str| hit[field].as_str().unwrap_or("-").to_owned();
                    let ts = text("ts");
                    let when = crate::when::parse_ts(&ts).map_or_else(
                        || render::literal(&ts),
                        |ts| {
                            ts.to_zoned_datetime(zone.clone())
                                .strftime("%Y-%m-%d %H:%M")
                                .to_string()
                        },
                    );
                    let place = match hit["line"].as_u64() {
                        Some(line) => {
                            format!("{name}:{}:{}:{line}", text("source"), text("session"))
                        }
                        None => format!("{name}:{}", text("session")),
                    };
                    let snippet = render::literal(&text("snippet")).replace('\n', " ");
                    outln!(
                        "{}  {}  {:<6}  {snippet}",
                        paint.dim(&when),
                        paint.bold(&render::literal(&place)),
                        render::literal(&text("kind"))
                    )?;
                }
            }
        }
    }
    Ok(shown)
}

/// Every device of `fleet` asked the same search (in the fleet's order, each within the
/// timeout): its answer or why there is none.
fn fleet_hits<'a>(fleet: &'a Fleet, args: &Args, since: Option<&str>) -> Vec<Answer<'a>> {
    if fleet.devices.is_empty() {
        return Vec::new();
    }
    let mut query: Vec<(&str, String)> =
        vec![("q", args.query.clone()), ("limit", args.limit.to_string())];
    if let Some(since) = since {
        query.push(("since", since.to_owned()));
    }
    if let Some(harness) = &args.harness {
        query.push(("harness", harness.clone()));
    }
    if let Some(status) = &args.status {
        query.push(("status", status.clone()));
    }
    if let Some(project) = &args.project {
        query.push(("project", project.to_string_lossy().trim_end_matches('/').to_owned()));
    }
    let encoded: String =
        form_urlencoded::Serializer::new(String::new()).extend_pairs(query).finish();
    let path = format!("/api/search?{encoded}");
    crate::ops::fleet::ask_all(fleet, &path, args.timeout)
}

/// A hit's snippet for the terminal, literal and on one line: its matches in colour, or, without
/// colour, a line of `^` under them (a mark in the text itself could not be told from the text:
/// `arr[0]`).
fn highlight(hit: &spex_index::Hit, paint: Paint) -> (String, Option<String>) {
    let plain = paint.bold("x") == "x";
    let shown = |text: &str| render::literal(text).replace('\n', " ");
    let mut line = String::new();
    let mut carets = String::new();
    let mut at = 0;
    for range in &hit.marks {
        let before = shown(&hit.snippet[at..range.start]);
        let matched = shown(&hit.snippet[range.clone()]);
        carets.push_str(&" ".repeat(render::width(&before)));
        carets.push_str(&"^".repeat(render::width(&matched)));
        line.push_str(&before);
        if plain {
            line.push_str(&matched);
        } else {
            line.push_str(&paint.color(&matched, anstyle::AnsiColor::Yellow));
        }
        at = range.end;
    }
    line.push_str(&shown(&hit.snippet[at..]));
    let carets = (plain && !hit.marks.is_empty()).then_some(carets);
    (line, carets)
}
