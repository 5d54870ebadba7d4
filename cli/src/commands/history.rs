//! `spex history`: sessions across harnesses. The transcripts Claude Code and the Codex CLI write
//! are found (`CLAUDE_CONFIG_DIR` or `~/.claude`; `CODEX_HOME` or `~/.codex`; plus `--source`),
//! parsed into one event model and rendered, redacted by default. Read-only: transcripts belong to
//! their harness, and nothing here writes.

use std::path::PathBuf;

use serde_json::json;
use spex_history::{Found, Harness, Identity, Root, Summary};

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::render::{self, Paint, print_json};

/// Arguments of `spex history`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
    /// Also look for transcripts under this root: `claude=DIR` (a config directory holding
    /// `projects/`) or `codex=DIR` (a home holding `sessions/`). Repeatable.
    #[arg(long = "source", value_name = "HARNESS=DIR", value_parser = parse_source, global = true)]
    sources: Vec<Root>,
    /// Show credentials and local identity as they are (redaction is on by default).
    #[arg(long, global = true)]
    no_redact: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Every harness session found, most recently active first (a person's message is activity).
    #[command(after_help = "Examples:
  spex history ls
  spex history ls --harness codex
  CLAUDE_CONFIG_DIR=/tmp/claude spex --json history ls")]
    Ls(LsArgs),
    /// One harness session as a conversation: what was asked, what the agent answered, the
    /// tools it ran.
    #[command(after_help = "Examples:
  spex history show 7c1e                       a unique prefix of the harness's session id
  spex history show 7c1e --tools               with every tool call and result
  spex --json history show 7c1e | jq '.events[] | select(.kind == \"assistant\")'")]
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    /// Only this harness: claude or codex.
    #[arg(long, value_parser = parse_harness)]
    harness: Option<Harness>,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The harness's session id, or a unique prefix of it.
    id: String,
    /// Show tool calls and results (hidden by default: the conversation is the messages).
    #[arg(long)]
    tools: bool,
    /// Times in UTC (default: local time).
    #[arg(long)]
    utc: bool,
}

fn parse_harness(name: &str) -> Result<Harness, String> {
    Harness::parse(name)
        .ok_or_else(|| format!("unknown harness {name:?} (expected claude or codex)"))
}

fn parse_source(text: &str) -> Result<Root, String> {
    let (harness, dir) =
        text.split_once('=').ok_or("expected HARNESS=DIR, e.g. codex=/tmp/codex")?;
    Ok(Root { harness: parse_harness(harness)?, dir: PathBuf::from(dir) })
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let found = spex_history::discover(&crate::args::history_roots(&args.sources))?;
    tracing::info!(transcripts = found.len(), "history roots scanned");
    let identity = if args.no_redact { None } else { Some(Identity::of_this_machine()) };
    let shown = |text: &str| match &identity {
        Some(identity) => spex_history::redact(text, identity),
        None => text.to_owned(),
    };
    match &args.command {
        Command::Ls(ls) => {
            let links = spex_links(global)?;
            let now_ns = i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX);
            let mut listed = Vec::new();
            for transcript in found.iter().filter(|f| ls.harness.is_none_or(|h| h == f.harness)) {
                let (summary, events) = spex_history::summarize(transcript)?;
                let link = links.get(&(transcript.harness.name(), transcript.id.clone())).cloned();
                let finished = link.as_ref().is_some_and(|(_, display)| {
                    matches!(display.as_str(), "done" | "review" | "close-pending")
                });
                let state = spex_history::state(&events, transcript.modified_ns, now_ns, finished);
                listed.push(Listed { summary, state, link });
            }
            listed.sort_by(|a, b| {
                activity(&b.summary)
                    .cmp(&activity(&a.summary))
                    .then(a.summary.found.id.cmp(&b.summary.found.id))
            });
            list(&listed, global, &shown)
        }
        Command::Show(show) => {
            let transcript = resolve(&found, &show.id)?;
            let (summary, events) = spex_history::summarize(transcript)?;
            if global.json {
                let events: Vec<_> = events.iter().map(|event| event_json(event, &shown)).collect();
                let mut document = summary_json(&summary, &shown);
                if let Some(map) = document.as_object_mut() {
                    map.insert("events".to_owned(), events.into());
                }
                print_json(document)?;
                return Ok(Code::Ok);
            }
            let paint = Paint::for_stdout(global.color);
            let mut view = render::HistoryView::new(paint, render::zone(show.utc), show.tools);
            for event in &events {
                render::out!("{}", view.event(event, &shown))?;
            }
            Ok(Code::Ok)
        }
    }
}

/// One listed history session: its summary, where it stands, and the spex session linked to it
/// (its id and display status).
#[derive(Debug)]
struct Listed {
    summary: Summary,
    state: spex_history::State,
    link: Option<(String, String)>,
}

/// The spex sessions linked to harness sessions: (harness, harness session id) -> (spex session
/// id, display status).
type Links = std::collections::HashMap<(&'static str, String), (String, String)>;

/// The spex sessions that name a harness session, by (harness, harness session id): their id
/// and display status. Empty without a store (nothing is created to find out).
fn spex_links(global: &Global) -> anyhow::Result<Links> {
    let mut links = std::collections::HashMap::new();
    let Some(store) = global.existing_store()? else { return Ok(links) };
    for id in store.session_ids()? {
        // A damaged or vanished record links nothing; `spex doctor` reports it.
        let Ok(record) = store.record(&id) else { continue };
        let Some(thread) = record.harness_session_id().filter(|thread| !thread.is_empty()) else {
            continue;
        };
        if let Some(harness) = Harness::parse(record.harness()) {
            let display = record.public_triple().display_word().to_owned();
            links.insert((harness.name(), thread.to_owned()), (id.to_string(), display));
        }
    }
    Ok(links)
}

/// Last activity, else the last event's time: the listing order.
fn activity(summary: &Summary) -> Option<&str> {
    summary.last_activity.as_deref().or(summary.last.as_deref())
}

/// The transcript whose session id is `reference` or starts with it (an ambiguous prefix names
/// the candidates).
fn resolve<'a>(found: &'a [Found], reference: &str) -> anyhow::Result<&'a Found> {
    if let Some(exact) = found.iter().find(|f| f.id == reference) {
        return Ok(exact);
    }
    let matches: Vec<&Found> =
        found.iter().filter(|f| !reference.is_empty() && f.id.starts_with(reference)).collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => {
            Err(anyhow::anyhow!("no harness session {reference:?} (`spex history ls` lists them)"))
        }
        many => Err(BadInput(format!(
            "{reference:?} is the start of {} harness session ids: {}; type more of the id",
            many.len(),
            many.iter().map(|f| f.id.as_str()).collect::<Vec<_>>().join(", ")
        ))
        .into()),
    }
}

fn list(
    listed: &[Listed],
    global: &Global,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<Code> {
    if global.json {
        let device = spex_history::Device::this_machine();
        let sessions: Vec<_> = listed
            .iter()
            .map(|entry| {
                let mut value = summary_json(&entry.summary, shown);
                if let Some(map) = value.as_object_mut() {
                    map.insert("state".to_owned(), entry.state.name().into());
                    map.insert(
                        "spexSession".to_owned(),
                        entry.link.as_ref().map(|(id, _)| id.clone()).into(),
                    );
                    map.insert(
                        "device".to_owned(),
                        json!({ "id": device.id, "host": device.host.as_deref().map(shown) }),
                    );
                }
                value
            })
            .collect();
        print_json(json!({ "sessions": sessions }))?;
        return Ok(Code::Ok);
    }
    if listed.is_empty() {
        if !global.quiet {
            eprintln!(
                "spex: no harness sessions found (Claude Code: CLAUDE_CONFIG_DIR or ~/.claude; Codex: CODEX_HOME or ~/.codex; more with --source)"
            );
        }
        return Ok(Code::Ok);
    }
    let paint = Paint::for_stdout(global.color);
    let zone = render::zone(false);
    let now = jiff::Timestamp::now();
    let ids: Vec<&str> = listed.iter().map(|entry| entry.summary.found.id.as_str()).collect();
    let lengths = render::unique_prefixes(&ids, 4);
    let header: Vec<String> = ["ID", "HARNESS", "STATE", "ACTIVE", "PROJECT", "FIRST MESSAGE"]
        .iter()
        .map(|h| paint.dim(h))
        .collect();
    let rows: Vec<Vec<String>> = listed
        .iter()
        .zip(lengths)
        .map(|(entry, length)| {
            let summary = &entry.summary;
            let when = activity(summary)
                .and_then(render::parse_ts)
                .map_or_else(|| "-".to_owned(), |then| render::relative(now, then, &zone));
            let state = match &entry.state {
                spex_history::State::Running => paint.color("running", anstyle::AnsiColor::Green),
                spex_history::State::WaitingForInput => {
                    paint.color("waiting for input", anstyle::AnsiColor::Yellow)
                }
                spex_history::State::Crashed { .. } => {
                    paint.color(&entry.state.name(), anstyle::AnsiColor::Red)
                }
                spex_history::State::Finished => paint.color("finished", anstyle::AnsiColor::Cyan),
                other => paint.dim(&other.name()),
            };
            vec![
                paint.bold(render::prefix(&summary.found.id, length)),
                summary.found.harness.name().to_owned(),
                state,
                when,
                shown(summary.meta.cwd.as_deref().unwrap_or("-")),
                render::first_line(&shown(summary.title.as_deref().unwrap_or(""))),
            ]
        })
        .collect();
    render::out!("{}", render::table(&header, &rows, render::terminal_columns()))?;
    Ok(Code::Ok)
}

fn summary_json(summary: &Summary, shown: &dyn Fn(&str) -> String) -> serde_json::Value {
    json!({
        "id": summary.found.id,
        "harness": summary.found.harness.name(),
        "path": shown(&summary.found.path.display().to_string()),
        "size": summary.found.size,
        "project": summary.meta.cwd.as_deref().map(shown),
        "gitRoot": summary
            .meta
            .cwd
            .as_deref()
            .and_then(|cwd| spex_history::git_root(std::path::Path::new(cwd)))
            .map(|root| shown(&root.display().to_string())),
        "gitBranch": summary.meta.git_branch,
        "harnessVersion": summary.meta.version,
        "model": summary.meta.model,
        "first": summary.first,
        "last": summary.last,
        "lastActivity": summary.last_activity,
        "title": summary.title.as_deref().map(shown),
        "counts": summary.counts,
        "unknown": summary.unknown,
    })
}

fn event_json(event: &spex_history::Event, shown: &dyn Fn(&str) -> String) -> serde_json::Value {
    use spex_history::{Kind, Lifecycle};
    let mut value = json!({ "ts": event.ts, "line": event.line, "kind": event.kind.name() });
    let extra = match &event.kind {
        Kind::User { text } | Kind::Assistant { text } => json!({ "text": shown(text) }),
        Kind::ToolCall { name, summary } => json!({ "tool": name, "input": shown(summary) }),
        Kind::ToolResult { ok, bytes } => json!({ "ok": ok, "bytes": bytes }),
        Kind::Usage { model, input, output, cache_read, cache_write } => json!({
            "model": model, "input": input, "output": output,
            "cacheRead": cache_read, "cacheWrite": cache_write,
        }),
        Kind::Lifecycle(Lifecycle::Summary { text }) => json!({ "text": shown(text) }),
        Kind::Lifecycle(Lifecycle::Aborted { reason }) => json!({ "reason": reason }),
        Kind::Lifecycle(_) => json!({}),
        Kind::Unknown { kind } => json!({ "raw": kind }),
    };
    if let (Some(map), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        map.extend(extra.clone());
    }
    value
}
