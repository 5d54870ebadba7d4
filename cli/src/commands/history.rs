//! `spex history`: sessions across harnesses. The transcripts Claude Code and the Codex CLI write
//! are found (`CLAUDE_CONFIG_DIR` or `~/.claude`; `CODEX_HOME` or `~/.codex`; plus `--source`),
//! parsed into one event model and rendered, redacted by default. Read-only: transcripts belong to
//! their harness, and nothing here writes.

use serde_json::json;
use spex_history::{Found, Harness, Identity, Root, State, Summary};

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::ops::fleet::{self, Fleet, Member};
use crate::ops::list::Links;
use crate::render::{self, Paint, print_json};

/// Arguments of `spex history`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
    /// Also look for transcripts under this root: `claude=DIR` (a config directory holding
    /// `projects/`) or `codex=DIR` (a home holding `sessions/`). Repeatable.
    #[arg(long = "source", value_name = "HARNESS=DIR", value_parser = crate::args::parse_source, global = true)]
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
    /// Write one harness session to a file: its transcript, the linked spex session's record and
    /// timeline, and a manifest with the ids and where it came from (a tar archive, zstd);
    /// redacted unless --raw.
    #[command(after_help = "Examples:
  spex history export 7c1e                     writes ./claude-7c1e....tar.zst, redacted
  spex history export 7c1e --out move.tar.zst --raw   for one's own other machine
  spex --json history export 7c1e | jq .manifest.files")]
    Export(ExportArgs),
    /// Place an exported harness session where its harness finds it (ids kept, where it came
    /// from recorded under the store's imports/); every digest is checked before anything is
    /// written, and the same file imported twice changes nothing.
    #[command(after_help = "Examples:
  spex history import claude-7c1e....tar.zst   then: claude --resume 7c1e... in its project")]
    Import(ImportArgs),
    /// Move a conversation from another device of the fleet to this one: its owner exports it,
    /// this device imports it, then the owner records that it moved here (one owner). A
    /// migration cut short is finished by running it again.
    #[command(after_help = "Examples:
  spex history migrate laptop:7c1e             then: claude --resume 7c1e... here")]
    Migrate(MigrateArgs),
}

#[derive(Debug, clap::Args)]
struct MigrateArgs {
    /// The conversation, as DEVICE:ID (a device of `spex fleet`, then the harness's session id
    /// or a unique prefix of it).
    reference: String,
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// The file `spex history export` wrote.
    file: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// The harness's session id, or a unique prefix of it.
    id: String,
    /// The file to write (default: <harness>-<id>.tar.zst here); an existing one is refused.
    #[arg(long, value_name = "FILE")]
    out: Option<std::path::PathBuf>,
    /// Keep the bytes as written: no redaction (said on stderr). For a move between one's own
    /// machines.
    #[arg(long)]
    raw: bool,
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    /// Only this harness: claude or codex.
    #[arg(long, value_parser = crate::args::parse_harness)]
    harness: Option<Harness>,
    /// Only sessions active since this time: RFC 3339, a local date or time, or a duration back
    /// from now (90m, 2h, 7days).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Only sessions of this project: their working directory is DIR or under it.
    #[arg(long, value_name = "DIR")]
    project: Option<std::path::PathBuf>,
    /// At most this many sessions (the most recently active first).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Only sessions in this state: running, waiting, unfinished, crashed, finished, unknown or
    /// degraded.
    #[arg(long, value_name = "STATE", value_parser = parse_state_word)]
    status: Option<String>,
    /// Also every device of the fleet (`spex fleet`): each row names its device; a device that
    /// does not answer within --timeout is named unreachable and the rest still answer.
    #[arg(long)]
    fleet: bool,
    /// How long each device of the fleet may take to answer.
    #[arg(long, default_value = "5s", value_parser = crate::when::parse_duration, requires = "fleet")]
    timeout: std::time::Duration,
}

/// The first word of every state's name, as `--status` takes it.
const STATE_WORDS: [&str; 7] =
    ["running", "waiting", "unfinished", "crashed", "finished", "unknown", "degraded"];

fn parse_state_word(text: &str) -> Result<String, String> {
    STATE_WORDS.iter().find(|word| **word == text).map(|word| (*word).to_owned()).ok_or_else(|| {
        format!("unknown state {text:?} (expected one of {})", STATE_WORDS.join(", "))
    })
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
    /// Only the last N entries shown (events, with `--json`).
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// The conversation as Markdown, redacted, for sharing: a heading, then each message under
    /// who said it (tool calls as a list with `--tools`).
    #[arg(long, conflicts_with = "last")]
    markdown: bool,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    // An import reads its file, not the harnesses' homes.
    if let Command::Import(import) = &args.command {
        return super::import::import(global, &import.file);
    }
    let found = spex_history::discover(&crate::args::history_roots(global, &args.sources)?)?;
    tracing::info!(transcripts = found.len(), "history roots scanned");
    let identity = if args.no_redact { None } else { Some(Identity::of_this_machine()) };
    let shown = |text: &str| match &identity {
        Some(identity) => spex_history::redact(text, identity),
        None => text.to_owned(),
    };
    match &args.command {
        Command::Ls(ls) => ls_local(global, &found, ls, &shown),
        Command::Import(import) => super::import::import(global, &import.file),
        Command::Migrate(migrate) => {
            let fleet = Fleet::read(&global.root()?.path)?;
            let (member, id) =
                crate::ops::fleet::remote(&fleet, &migrate.reference).ok_or_else(|| {
                    BadInput(format!(
                        "{:?} is not DEVICE:ID with a device of the fleet (spex fleet ls)",
                        migrate.reference
                    ))
                })?;
            super::migrate::migrate(global, member, id)
        }
        Command::Export(export) => {
            let transcript = resolve(&found, &export.id)?;
            let links = spex_links(global)?;
            let spex = links
                .get(&(transcript.harness.name(), transcript.id.clone()))
                .map(|(spex, _)| spex.as_str());
            super::export::export(global, transcript, spex, export.out.as_deref(), export.raw)
        }
        Command::Show(show) => {
            let fleet = Fleet::read(&global.root()?.path)?;
            if let Some((member, id)) = crate::ops::fleet::remote(&fleet, &show.id) {
                return remote_show(global, member, id, show);
            }
            show_local(global, &found, show, &shown)
        }
    }
}

/// Every transcript found, as listed: through the session index when a store exists (a
/// transcript unchanged since the last scan costs a stat; a grown one is folded from its
/// watermark), else each read whole. A transcript that cannot be read is listed as degraded.
fn listed(
    global: &Global,
    found: &[Found],
    now_ns: i64,
    links: &Links,
) -> anyhow::Result<Vec<Listed>> {
    let finished = |harness: &'static str, id: &str| {
        links.get(&(harness, id.to_owned())).is_some_and(|(_, display)| {
            matches!(display.as_str(), "done" | "review" | "close-pending")
        })
    };
    let mut listed = Vec::new();
    let mut unreadable = Vec::new();
    match global.existing_store()? {
        Some(store) => {
            let mut index = crate::args::open_index(&store)?;
            let scanned = index.scan_history(found)?;
            unreadable = scanned.unreadable;
            let paths: std::collections::HashSet<String> =
                found.iter().map(|f| f.path.to_string_lossy().into_owned()).collect();
            for row in index.transcripts()? {
                // Rows of other roots (another command's `--source`) are not this listing's.
                if !paths.contains(&row.path)
                    || unreadable.iter().any(|(path, _)| path.to_string_lossy() == row.path)
                {
                    continue;
                }
                let Some(harness) = Harness::parse(&row.harness) else { continue };
                let state =
                    row.signals.state(row.modified_ns, now_ns, finished(harness.name(), &row.id));
                listed.push(Listed::of_row(row, harness, state));
            }
        }
        None => {
            for transcript in found {
                match spex_history::summarize(transcript) {
                    Ok((summary, events)) => {
                        let state = spex_history::state(
                            &events,
                            transcript.modified_ns,
                            now_ns,
                            finished(transcript.harness.name(), &transcript.id),
                        );
                        listed.push(Listed::of(&summary, state));
                    }
                    Err(error) => unreadable.push((transcript.path.clone(), error.to_string())),
                }
            }
        }
    }
    for (path, reason) in unreadable {
        if let Some(transcript) = found.iter().find(|f| f.path == path) {
            listed.push(Listed::unreadable(transcript, &reason));
        }
    }
    Ok(listed)
}

/// One listed history session: what its transcript says, where it stands, and the spex session
/// linked to it.
#[derive(Debug)]
struct Listed {
    id: String,
    harness: &'static str,
    path: Option<String>,
    size: Option<u64>,
    project: Option<String>,
    git_branch: Option<String>,
    harness_version: Option<String>,
    model: Option<String>,
    first: Option<String>,
    last: Option<String>,
    last_activity: Option<String>,
    title: Option<String>,
    counts: std::collections::BTreeMap<String, u64>,
    unknown: std::collections::BTreeMap<String, u64>,
    state: State,
    /// The linked spex session's id, set by [`list`].
    spex: Option<String>,
    /// Where the conversation moved (`spex history migrate` on another device): its new
    /// device (`{"device", "host"}`).
    moved_to: Option<serde_json::Value>,
}

impl Listed {
    /// A transcript read whole.
    fn of(summary: &Summary, state: State) -> Listed {
        Listed {
            id: summary.found.id.clone(),
            harness: summary.found.harness.name(),
            path: Some(summary.found.path.display().to_string()),
            size: Some(summary.found.size),
            project: summary.meta.cwd.clone(),
            git_branch: summary.meta.git_branch.clone(),
            harness_version: summary.meta.version.clone(),
            model: summary.meta.model.clone(),
            first: summary.digest.first.clone(),
            last: summary.digest.last.clone(),
            last_activity: summary.digest.last_activity.clone(),
            title: summary.digest.title.clone(),
            counts: summary.digest.counts.clone(),
            unknown: summary.digest.unknown.clone(),
            state,
            spex: None,
            moved_to: None,
        }
    }

    /// A transcript's row in the session index.
    fn of_row(row: spex_index::Transcript, harness: Harness, state: State) -> Listed {
        Listed {
            id: row.id,
            harness: harness.name(),
            path: Some(row.path),
            size: u64::try_from(row.size).ok(),
            project: row.cwd,
            git_branch: row.branch,
            harness_version: row.version,
            model: row.model,
            first: row.first_ts,
            last: row.last_ts,
            last_activity: row.last_activity,
            title: row.title,
            counts: row.counts,
            unknown: row.unknown,
            state,
            spex: None,
            moved_to: None,
        }
    }

    /// A transcript found but not readable.
    fn unreadable(found: &Found, reason: &str) -> Listed {
        let state = State::Degraded { reason: format!("transcript unreadable: {reason}") };
        Listed {
            path: Some(found.path.display().to_string()),
            size: Some(found.size),
            ..Listed::bare(&found.id, found.harness.name(), state)
        }
    }

    /// A harness session a spex session names, without a transcript.
    fn missing(harness: &'static str, thread: &str, spex: &str) -> Listed {
        let state = State::Degraded { reason: "no transcript found".to_owned() };
        Listed { spex: Some(spex.to_owned()), ..Listed::bare(thread, harness, state) }
    }

    fn bare(id: &str, harness: &'static str, state: State) -> Listed {
        Listed {
            id: id.to_owned(),
            harness,
            path: None,
            size: None,
            project: None,
            git_branch: None,
            harness_version: None,
            model: None,
            first: None,
            last: None,
            last_activity: None,
            title: None,
            counts: std::collections::BTreeMap::new(),
            unknown: std::collections::BTreeMap::new(),
            state,
            spex: None,
            moved_to: None,
        }
    }

    /// Last activity, else the last event's time: the listing order.
    fn activity(&self) -> Option<&str> {
        self.last_activity.as_deref().or(self.last.as_deref())
    }

    /// What the transcript says, as JSON (the listing adds the state and the links).
    fn to_json(&self, shown: &dyn Fn(&str) -> String) -> serde_json::Value {
        json!({
            "id": self.id,
            "harness": self.harness,
            "format": Harness::parse(self.harness).map(Harness::format),
            "path": self.path.as_deref().map(shown),
            "size": self.size,
            "project": self.project.as_deref().map(shown),
            "gitRoot": self
                .project
                .as_deref()
                .and_then(|cwd| spex_history::git_root(std::path::Path::new(cwd)))
                .map(|root| shown(&root.display().to_string())),
            "gitBranch": self.git_branch,
            "harnessVersion": self.harness_version,
            "model": self.model,
            "first": self.first,
            "last": self.last,
            "lastActivity": self.last_activity,
            "title": self.title.as_deref().map(shown),
            "counts": self.counts,
            "unknown": self.unknown,
            "movedTo": self.moved_to,
        })
    }
}

/// The spex sessions that name a harness session, by (harness, harness session id): their id
/// and display status. Empty without a store (nothing is created to find out).
fn spex_links(global: &Global) -> anyhow::Result<Links> {
    match global.existing_store()? {
        Some(store) => crate::ops::list::harness_links(&store),
        None => Ok(Links::new()),
    }
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
    every: &[&str],
    global: &Global,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<Code> {
    // The progress spex derives from its own runs, for a transcript a spex session drives.
    let store = global.existing_store()?;
    let agents: Vec<Option<String>> = listed
        .iter()
        .map(|entry| {
            let (store, spex) = (store.as_ref()?, entry.spex.as_deref()?);
            crate::ops::agent::agent_word(store, spex)
        })
        .collect();
    if global.json {
        print_json(json!({ "sessions": listed_json(listed, &agents, shown) }))?;
        return Ok(Code::Ok);
    }
    if listed.is_empty() {
        if !global.quiet {
            eprintln!(
                "spex: no harness sessions found (Claude Code: CLAUDE_CONFIG_DIR or ~/.claude; Codex: CODEX_HOME or ~/.codex; more with --source or the store's history-sources file)"
            );
        }
        return Ok(Code::Ok);
    }
    global.page();
    let paint = Paint::for_stdout(global.color);
    let zone = crate::when::zone(false);
    let now = jiff::Timestamp::now();
    let ids: Vec<&str> = listed.iter().map(|entry| entry.id.as_str()).collect();
    let lengths = render::unique_prefixes(&ids, every, 4);
    let header: Vec<String> =
        ["ID", "HARNESS", "STATE", "ACTIVE", "PROJECT", "SPEX", "FIRST MESSAGE"]
            .iter()
            .map(|h| paint.dim(h))
            .collect();
    let rows: Vec<Vec<String>> = listed
        .iter()
        .zip(lengths)
        .zip(&agents)
        .map(|((entry, length), agent)| {
            let when = entry
                .activity()
                .and_then(crate::when::parse_ts)
                .map_or_else(|| "-".to_owned(), |then| crate::when::relative(now, then, &zone));
            let state = state_cell(&paint, entry, agent.as_deref());
            vec![
                paint.bold(render::prefix(&entry.id, length)),
                entry.harness.to_owned(),
                state,
                when,
                shown(entry.project.as_deref().unwrap_or("-")),
                entry.spex.as_deref().map_or_else(|| "-".to_owned(), render::literal),
                render::first_line(&shown(entry.title.as_deref().unwrap_or(""))),
            ]
        })
        .collect();
    render::out!("{}", render::table(&header, &rows, render::terminal_columns()))?;
    Ok(Code::Ok)
}

/// The listing as JSON: each session with its state, its spex session, what spex's runs say
/// and this device.
fn listed_json(
    listed: &[Listed],
    agents: &[Option<String>],
    shown: &dyn Fn(&str) -> String,
) -> Vec<serde_json::Value> {
    let device = spex_history::Device::this_machine();
    listed
        .iter()
        .zip(agents)
        .map(|(entry, agent)| {
            let mut value = entry.to_json(shown);
            if let Some(map) = value.as_object_mut() {
                map.insert("state".to_owned(), entry.state.name().into());
                map.insert("spexSession".to_owned(), entry.spex.clone().into());
                map.insert("agent".to_owned(), agent.clone().into());
                map.insert(
                    "device".to_owned(),
                    json!({ "id": device.id, "host": device.host.as_deref().map(shown) }),
                );
            }
            value
        })
        .collect()
}

/// A session's state as the table shows it: colored by what it means, where it moved to, and
/// what spex's own runs say when a spex session drives it and they say more.
fn state_cell(paint: &Paint, entry: &Listed, agent: Option<&str>) -> String {
    let state = match &entry.state {
        State::Running => paint.color("running", anstyle::AnsiColor::Green),
        State::WaitingForInput => paint.color("waiting for input", anstyle::AnsiColor::Yellow),
        State::Crashed { .. } | State::Degraded { .. } => {
            paint.color(&entry.state.name(), anstyle::AnsiColor::Red)
        }
        State::Finished => paint.color("finished", anstyle::AnsiColor::Cyan),
        other => paint.dim(&other.name()),
    };
    let state = match &entry.moved_to {
        Some(to) => paint.dim(&format!(
            "moved to {}",
            to["host"].as_str().or(to["device"].as_str()).unwrap_or("another device")
        )),
        None => state,
    };
    match agent {
        Some(agent) if agent != entry.state.name() => {
            format!("{state}{}", paint.dim(&format!(" · spex: {agent}")))
        }
        _ => state,
    }
}

/// The head of a conversation: its title, then harness, model, project, message counts and
/// tokens on one line.
fn header(
    summary: &Summary,
    events: &[spex_history::Event],
    shown: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let title = summary
        .digest
        .title
        .as_deref()
        .map_or_else(|| "(no message)".to_owned(), |t| render::first_line(&shown(t)));
    let mut facts = vec![summary.found.harness.name().to_owned()];
    if let Some(model) = &summary.meta.model {
        facts.push(model.clone());
    }
    if let Some(cwd) = &summary.meta.cwd {
        facts.push(format!("in {}", shown(cwd)));
    }
    let count = |name: &str| summary.digest.counts.get(name).copied().unwrap_or(0);
    facts.push(format!("{} asked, {} answered", count("user"), count("assistant")));
    let (input, output) =
        events.iter().fold((0_u64, 0_u64), |(input, output), event| match &event.kind {
            spex_history::Kind::Usage { input: i, output: o, cache_read, .. } => {
                (input + i + cache_read, output + o)
            }
            _ => (input, output),
        });
    if input + output > 0 {
        facts.push(format!("{input} tokens in, {output} out"));
    }
    vec![title, facts.join(" · ")]
}

/// The conversation as Markdown: a heading and the facts line, then each message under who
/// said it; tool calls (with `tools`) as list items. Redacted through `shown`; a message's text
/// is kept as written (it is Markdown already, as harnesses write it).
fn markdown(
    summary: &Summary,
    events: &[spex_history::Event],
    tools: bool,
    shown: &dyn Fn(&str) -> String,
) -> String {
    use spex_history::{Kind, Lifecycle};
    let lines = header(summary, events, shown);
    let mut out = format!("# {}\n\n*{}*\n", lines[0], lines[1]);
    let mut last_speaker = "";
    for event in events {
        let (speaker, text) = match &event.kind {
            Kind::User { text } => ("Person", shown(text)),
            Kind::Assistant { text } => ("Agent", shown(text)),
            Kind::ToolCall { name, summary } if tools => {
                out.push_str(&format!(
                    "\n- tool `{}`: `{}`\n",
                    name,
                    shown(summary).replace('`', "'")
                ));
                continue;
            }
            Kind::Lifecycle(Lifecycle::Aborted { reason }) => {
                out.push_str(&format!("\n> aborted: {}\n", render::first_line(&shown(reason))));
                continue;
            }
            _ => continue,
        };
        if text.trim().is_empty() {
            continue;
        }
        if speaker != last_speaker {
            let when = event.ts.as_deref().map(|ts| format!(" · {ts}")).unwrap_or_default();
            out.push_str(&format!("\n## {speaker}{when}\n"));
            last_speaker = speaker;
        }
        out.push('\n');
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// A harness session as the picker lists it.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) harness: Harness,
    pub(crate) id: String,
    pub(crate) title: Option<String>,
    pub(crate) project: Option<String>,
    pub(crate) state: String,
    pub(crate) activity: Option<String>,
    /// Its transcript, when one was found.
    pub(crate) found: Option<Found>,
}

/// Every harness session found (as `history ls` lists them, redacted through `shown`), most
/// recently active first.
pub(crate) fn rows(global: &Global, shown: &dyn Fn(&str) -> String) -> anyhow::Result<Vec<Row>> {
    let found = spex_history::discover(&crate::args::history_roots(global, &[])?)?;
    let links = spex_links(global)?;
    let now_ns = i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX);
    let mut listed = listed(global, &found, now_ns, &links)?;
    listed.sort_by(|a, b| b.activity().cmp(&a.activity()).then(a.id.cmp(&b.id)));
    Ok(listed
        .into_iter()
        .filter_map(|entry| {
            let harness = Harness::parse(entry.harness)?;
            let transcript = found.iter().find(|f| f.harness == harness && f.id == entry.id);
            Some(Row {
                harness,
                title: entry.title.as_deref().map(shown),
                project: entry.project.as_deref().map(shown),
                state: entry.state.name(),
                activity: entry.activity().map(str::to_owned),
                found: transcript.cloned(),
                id: entry.id,
            })
        })
        .collect())
}

/// The last `count` entries of a transcript's conversation, plain (no colour), redacted.
pub(crate) fn preview(
    found: &Found,
    count: usize,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<String> {
    let (_, events) = spex_history::summarize(found)?;
    let mut view = render::HistoryView::new(
        Paint::for_stdout(crate::render::ColorArg::Never),
        crate::when::zone(false),
        false,
    );
    let entries: Vec<String> = events
        .iter()
        .map(|event| view.event(event, shown))
        .filter(|entry| !entry.is_empty())
        .collect();
    Ok(entries[entries.len().saturating_sub(count)..].concat())
}

/// The command that continues a harness session in its harness: `claude --resume ID`, `codex
/// resume ID`, `opencode --session ID` (the harness's command as `SPEX_CLAUDE_CMD` / `SPEX_CODEX_CMD` name it).
/// The id is quoted for `sh`: a Claude Code id is a transcript's file name, which anyone who can
/// write there chooses.
pub(crate) fn resume_command(harness: Harness, id: &str) -> String {
    let id = super::harness::sh_quote(id);
    match harness {
        Harness::ClaudeCode => {
            format!("{} --resume {id}", crate::ops::agent::Harness::Claude.default_command())
        }
        Harness::Codex => {
            format!("{} resume {id}", crate::ops::agent::Harness::Codex.default_command())
        }
        Harness::OpenCode => format!("opencode --session {id}"),
    }
}

/// `history ls`: every harness session found (and every spex session's harness session no
/// transcript was found for), with its linked spex session and where it moved, narrowed, most
/// recently active first; with `--fleet`, every device's too.
fn ls_local(
    global: &Global,
    found: &[Found],
    ls: &LsArgs,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<Code> {
    let links = spex_links(global)?;
    let now_ns = i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX);
    let mut listed = listed(global, found, now_ns, &links)?;
    // A spex session naming a harness session no transcript was found for.
    let seen: std::collections::HashSet<(&str, String)> =
        listed.iter().map(|entry| (entry.harness, entry.id.clone())).collect();
    for ((harness, thread), (spex, _)) in &links {
        if !seen.contains(&(*harness, thread.clone())) {
            listed.push(Listed::missing(harness, thread, spex));
        }
    }
    let moved = fleet::moved(&global.root()?.path);
    for entry in &mut listed {
        if let Some((spex, _)) = links.get(&(entry.harness, entry.id.clone())) {
            entry.spex = Some(spex.clone());
        }
        entry.moved_to = moved
            .get(&(entry.harness.to_owned(), entry.id.clone()))
            .map(|record| record["to"].clone());
    }
    listed.retain(|entry| ls.harness.is_none_or(|h| h.name() == entry.harness));
    if let Some(word) = &ls.status {
        listed.retain(|entry| entry.state.name().split([' ', '(']).next() == Some(word));
    }
    let since = crate::when::since_now(ls.since.as_deref(), &crate::when::zone(false))
        .map_err(BadInput::from)?;
    if let Some(since) = &since {
        listed.retain(|entry| entry.activity().is_some_and(|when| when >= since.as_str()));
    }
    if let Some(project) = &ls.project {
        let project = std::path::absolute(project).unwrap_or_else(|_| project.clone());
        listed.retain(|entry| {
            entry
                .project
                .as_deref()
                .is_some_and(|cwd| std::path::Path::new(cwd).starts_with(&project))
        });
    }
    listed.sort_by(|a, b| b.activity().cmp(&a.activity()).then(a.id.cmp(&b.id)));
    if ls.fleet {
        return fleet_list(global, &listed, ls, since.as_deref(), shown);
    }
    if let Some(limit) = ls.limit {
        listed.truncate(limit);
    }
    let every: Vec<&str> = found.iter().map(|f| f.id.as_str()).collect();
    if listed.is_empty() && !found.is_empty() && !global.json {
        if !global.quiet {
            eprintln!(
                "spex: no harness sessions match ({} found in all; drop --harness, --status, --since or --project to see them)",
                found.len()
            );
        }
        return Ok(Code::Ok);
    }
    list(&listed, &every, global, shown)
}

/// `history show ID`: a conversation of this machine, read from its transcript: as Markdown,
/// as JSON, or for people (a header, the conversation, how to resume it).
fn show_local(
    global: &Global,
    found: &[Found],
    show: &ShowArgs,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<Code> {
    let transcript = resolve(found, &show.id)?;
    let (summary, mut events) = spex_history::summarize(transcript)?;
    global.page();
    if show.markdown {
        render::out!("{}", markdown(&summary, &events, show.tools, &shown))?;
        return Ok(Code::Ok);
    }
    if global.json {
        if let Some(last) = show.last {
            events.drain(..events.len().saturating_sub(last));
        }
        let events: Vec<_> = events.iter().map(|event| render::event_json(event, &shown)).collect();
        let mut document =
            Listed::of(&summary, State::Unknown { missing: "listing" }).to_json(&shown);
        if let Some(map) = document.as_object_mut() {
            map.insert("events".to_owned(), events.into());
        }
        print_json(document)?;
        return Ok(Code::Ok);
    }
    let paint = Paint::for_stdout(global.color);
    // The entries the view shows (a hidden tool call renders as nothing), then the last
    // N of them; rendered again from the first kept so a day line heads them.
    let mut view = render::HistoryView::new(paint, crate::when::zone(show.utc), show.tools);
    let shown_at: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, event)| !view.event(event, &shown).is_empty())
        .map(|(at, _)| at)
        .collect();
    let from = match show.last {
        Some(last) => {
            shown_at.get(shown_at.len().saturating_sub(last)).copied().unwrap_or(events.len())
        }
        None => 0,
    };
    let mut view = render::HistoryView::new(paint, crate::when::zone(show.utc), show.tools);
    for line in header(&summary, &events, &shown) {
        render::out!("{}\n", paint.bold(&line))?;
    }
    render::out!("\n")?;
    for event in &events[from..] {
        render::out!("{}", view.event(event, &shown))?;
    }
    // How to continue it in its harness (in its project).
    let resume = resume_command(transcript.harness, &transcript.id);
    let place =
        summary.meta.cwd.as_deref().map(|cwd| format!(" (in {})", shown(cwd))).unwrap_or_default();
    render::out!("{}\n", paint.dim(&format!("resume: {resume}{place}")))?;
    Ok(Code::Ok)
}

/// `history ls --fleet`: this machine's rows (already narrowed) and every answering device's,
/// narrowed the same way, most recently active first, each naming its device. A remote row
/// carries no path: its transcript is a file of another machine.
fn fleet_list(
    global: &Global,
    listed: &[Listed],
    ls: &LsArgs,
    since: Option<&str>,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<Code> {
    let fleet = Fleet::read(&global.root()?.path)?;
    let answers = fleet::ask_all(&fleet, "/api/history", ls.timeout);
    let device = spex_history::Device::this_machine();
    // A conversation that moved is listed by its new owner alone.
    let mut rows: Vec<serde_json::Value> = listed
        .iter()
        .filter(|entry| entry.moved_to.is_none())
        .map(|entry| {
            let mut row = entry.to_json(shown);
            row["state"] = entry.state.name().into();
            row["device"] = json!({
                "name": null, "here": true, "id": device.id, "host": device.host.as_deref().map(shown),
            });
            row
        })
        .collect();
    let project =
        ls.project.as_ref().map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()));
    rows.extend(
        answers
            .iter()
            .flat_map(fleet::Answer::history)
            .filter(|row| kept_remote(row, ls, since, project.as_deref())),
    );
    let activity = |row: &serde_json::Value| {
        row["lastActivity"].as_str().or(row["last"].as_str()).unwrap_or("").to_owned()
    };
    rows.sort_by(|a, b| {
        activity(b).cmp(&activity(a)).then(a["id"].to_string().cmp(&b["id"].to_string()))
    });
    if let Some(limit) = ls.limit {
        rows.truncate(limit);
    }
    let devices: Vec<_> = answers.iter().map(fleet::Answer::to_json).collect();
    if global.json {
        print_json(json!({ "sessions": rows, "devices": devices }))?;
        return Ok(Code::Ok);
    }
    for answer in &answers {
        if let Err(why) = &answer.body {
            eprintln!("spex: {} is unreachable: {why}", answer.member.name);
        }
    }
    global.page();
    fleet_table(&rows)
}

/// Whether another device's row passes the listing's narrowing (harness, state, since, project
/// as `history ls` applies them to this machine's rows).
fn kept_remote(
    row: &serde_json::Value,
    ls: &LsArgs,
    since: Option<&str>,
    project: Option<&std::path::Path>,
) -> bool {
    let text = |name: &str| row[name].as_str().unwrap_or("");
    let activity = row["lastActivity"].as_str().or(row["last"].as_str());
    ls.harness.is_none_or(|harness| harness.name() == text("harness"))
        && ls
            .status
            .as_deref()
            .is_none_or(|word| text("state").split([' ', '(']).next() == Some(word))
        && since.is_none_or(|since| activity.is_some_and(|when| when >= since))
        && project.is_none_or(|dir| std::path::Path::new(text("project")).starts_with(dir))
}

/// The fleet's listing for people: each row's device (`(here)` for this one), id, harness,
/// state, how long ago and first message, every remote text shown literally.
fn fleet_table(rows: &[serde_json::Value]) -> anyhow::Result<Code> {
    let activity = |row: &serde_json::Value| {
        row["lastActivity"].as_str().or(row["last"].as_str()).unwrap_or("").to_owned()
    };
    let zone = crate::when::zone(false);
    let now = jiff::Timestamp::now();
    let header: Vec<String> = ["DEVICE", "ID", "HARNESS", "STATE", "ACTIVE", "FIRST MESSAGE"]
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let text = |name: &str| row[name].as_str().unwrap_or("-").to_owned();
            let when = crate::when::parse_ts(&activity(row))
                .map_or_else(|| "-".to_owned(), |then| crate::when::relative(now, then, &zone));
            let id = text("id");
            vec![
                row["device"]["name"].as_str().unwrap_or("(here)").to_owned(),
                render::literal(&id.chars().take(8).collect::<String>()),
                render::literal(&text("harness")),
                render::literal(&text("state")),
                when,
                render::first_line(&render::literal(row["title"].as_str().unwrap_or(""))),
            ]
        })
        .collect();
    render::out!("{}", render::table(&header, &cells, render::terminal_columns()))?;
    Ok(Code::Ok)
}

/// The most events `history show DEVICE:ID` reads at once (its server's bound).
const REMOTE_EVENTS_MAX: usize = 10_000;

/// `history show DEVICE:ID`: a conversation of another device, read through its server (which
/// redacts it): its listing resolves the id (or a unique prefix), then its events are shown as
/// a local conversation is.
fn remote_show(
    global: &Global,
    member: &Member,
    id: &str,
    show: &ShowArgs,
) -> anyhow::Result<Code> {
    let row = fleet::resolve(member, id)?;
    let row = &row;
    let (harness, full) = (row["harness"].as_str().unwrap_or(""), row["id"].as_str().unwrap_or(""));
    // The last N events (`--last`), else as many as its server gives at once.
    let limit = show.last.unwrap_or(REMOTE_EVENTS_MAX).min(REMOTE_EVENTS_MAX);
    let path = fleet::history_path(harness, full, &format!("?limit={limit}"));
    let unreachable = |why: String| BadInput(format!("{} is unreachable: {why}", member.name));
    let detail = fleet::ask(member, &path, fleet::ANSWER_WITHIN).map_err(unreachable)?;
    global.page();
    if global.json {
        let mut document = detail["history"].clone();
        if let Some(map) = document.as_object_mut() {
            map.remove("path");
            map.insert("device".to_owned(), json!({ "name": member.name, "here": false }));
            map.insert("events".to_owned(), detail["events"].clone());
            map.insert("more".to_owned(), detail["more"].clone());
        }
        print_json(document)?;
        return Ok(Code::Ok);
    }
    let events: Vec<spex_history::Event> = detail["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(render::event_from_json)
        .collect();
    if detail["more"] == true && show.last.is_none() && !global.quiet {
        eprintln!("spex: only the last {limit} events of {}:{full} are shown", member.name);
    }
    // Redacted by its device already: shown as it came.
    let shown = |text: &str| text.to_owned();
    let paint = Paint::for_stdout(global.color);
    let title = row["title"].as_str().unwrap_or("(untitled)");
    render::out!(
        "{}
",
        paint.bold(&render::literal(title))
    )?;
    render::out!(
        "{}

",
        paint.dim(&format!(
            "{harness} · on {} · {}",
            member.name,
            row["state"].as_str().unwrap_or("-")
        ))
    )?;
    let mut view = render::HistoryView::new(paint, crate::when::zone(show.utc), show.tools);
    for event in &events {
        render::out!("{}", view.event(event, &shown))?;
    }
    Ok(Code::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transcript's file name chooses a Claude Code id: the resume command quotes it, so a name
    /// holding shell syntax stays one argument.
    #[test]
    fn a_resume_command_quotes_the_id() {
        let command = resume_command(Harness::ClaudeCode, "x; touch pwned $(id)");
        assert!(command.ends_with(" --resume 'x; touch pwned $(id)'"), "{command}");
        let plain = resume_command(Harness::Codex, "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5");
        assert!(plain.ends_with(" resume 019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"), "{plain}");
    }
}
