//! `spex session`: create sessions, send to them, declare their state, read and drain them.
//!
//! Every verb is one engine transition or one lock-free read; what is printed on success has
//! already been made durable by the engine (an acknowledgement is never ahead of the disk).

use std::io::{IsTerminal as _, Read as _};
use std::time::Duration;

use anyhow::Context as _;
use faultfs::RealFs;
use serde_json::json;
use spex_engine::reply::ReplyChannel;
use spex_engine::{
    Cursor, DrainReport, Error, Event, Key, Lifecycle, Proposal, SendRequest, SessionId, Status,
    Store, Triple,
};

use super::adapter::Spec;
use super::{Global, print_json, session_id};
use crate::exit::{BadInput, Code};

/// How often `--follow` and `--watch` look for new work.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The operation of a keyed send from the command line (when `--operation` is not given).
pub(crate) const CLI_OPERATION: &str = "cli-send";

/// Arguments of `spex session`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Create a session (a governed record, status active; no event).
    New(NewArgs),
    /// Send a message to a session: record it in the timeline, then owe it to the session.
    Send(SendArgs),
    /// Declare the work done, with a proposal (worker declaration).
    Done(DoneArgs),
    /// Declare the work parked (worker declaration).
    Park(NoteArgs),
    /// Ask the human something, or answer them (worker declaration).
    Ask(NoteArgs),
    /// Show a session's record and how many messages it is owed.
    Show(IdArgs),
    /// Print a session's timeline (oldest first), optionally following it.
    Timeline(TimelineArgs),
    /// Hand a session's owed messages to its adapter.
    Drain(DrainArgs),
    /// Archive a session (its timeline is kept).
    Archive(IdArgs),
    /// Close a session: record the close, revoke it as a sender, remove its directory.
    Close(IdArgs),
    /// List sessions, most recently worked in first (through the session index).
    Ls(LsArgs),
    /// Repair a damaged delivery queue: keep the damaged file beside, rebuild the queue from its
    /// valid entries and the keyed messages the log proves owed, and say what cannot be
    /// recovered.
    Repair(IdArgs),
}

#[derive(Debug, clap::Args)]
struct NewArgs {
    /// The session id (default: a fresh UUID).
    #[arg(long, value_parser = session_id)]
    id: Option<SessionId>,
    /// Where drained messages go: exec:CMD, tmux:PANE or stdout.
    #[arg(long, value_name = "SPEC")]
    adapter: Option<String>,
    /// The session's worktree; when it is gone, lifecycle writes are refused.
    #[arg(long, value_name = "DIR")]
    worktree: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
struct SendArgs {
    /// The receiving session.
    #[arg(value_parser = session_id)]
    id: SessionId,
    /// The message; `-` reads it from stdin (UTF-8; one trailing newline is dropped).
    text: String,
    /// The sending session (default: a human).
    #[arg(long, value_parser = session_id)]
    from: Option<SessionId>,
    /// Where the agent should reply: note (a declaration) or terminal.
    #[arg(long, value_enum)]
    reply_via: Option<ReplyArg>,
    /// An idempotency key: resending with the same key returns the original mid.
    #[arg(long)]
    key: Option<String>,
    /// The operation the key belongs to.
    #[arg(long, requires = "key", default_value = CLI_OPERATION)]
    operation: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReplyArg {
    Note,
    Terminal,
}

impl ReplyArg {
    pub(crate) fn channel(self) -> ReplyChannel {
        match self {
            ReplyArg::Note => ReplyChannel::Note,
            ReplyArg::Terminal => ReplyChannel::Terminal,
        }
    }
}

/// The declaring session: `--session`, else `SPEX_SESSION_ID`.
#[derive(Debug, clap::Args)]
pub(crate) struct Declarer {
    /// The session declaring (default: SPEX_SESSION_ID).
    #[arg(long, env = "SPEX_SESSION_ID", value_parser = session_id)]
    pub(crate) session: SessionId,
}

#[derive(Debug, clap::Args)]
struct DoneArgs {
    /// What to do with the work.
    #[arg(long, value_enum)]
    propose: ProposalArg,
    /// The complete reply or summary.
    #[arg(long)]
    note: Option<String>,
    #[command(flatten)]
    declarer: Declarer,
}

#[derive(Debug, clap::Args)]
struct NoteArgs {
    /// The complete reply or question.
    #[arg(long)]
    note: String,
    #[command(flatten)]
    declarer: Declarer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProposalArg {
    Merge,
    Nothing,
    Close,
}

impl ProposalArg {
    pub(crate) fn proposal(self) -> Proposal {
        match self {
            ProposalArg::Merge => Proposal::Merge,
            ProposalArg::Nothing => Proposal::Nothing,
            ProposalArg::Close => Proposal::Close,
        }
    }
}

#[derive(Debug, clap::Args)]
struct IdArgs {
    /// The session.
    #[arg(value_parser = session_id)]
    id: SessionId,
}

#[derive(Debug, clap::Args)]
struct TimelineArgs {
    /// The session.
    #[arg(value_parser = session_id)]
    id: SessionId,
    /// Print at most the last N events.
    #[arg(long, default_value_t = 500)]
    limit: usize,
    /// Keep printing new events as they arrive (NDJSON with --json).
    #[arg(long)]
    follow: bool,
}

#[derive(Debug, clap::Args)]
struct DrainArgs {
    /// The session.
    #[arg(value_parser = session_id)]
    id: SessionId,
    /// The adapter (default: the session's own).
    #[arg(long, value_name = "SPEC")]
    adapter: Option<String>,
    /// Keep draining as messages arrive, until interrupted.
    #[arg(long)]
    watch: bool,
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    /// Include archived sessions.
    #[arg(long)]
    all: bool,
    /// Order: by last activity (human sends and declared moves; see the README), or created.
    #[arg(long, value_enum, default_value_t = SortArg::Activity)]
    sort: SortArg,
    /// Only sessions in this status (stored name, e.g. awaiting, or display word, e.g. review).
    #[arg(long)]
    status: Option<String>,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let store = global.open_store()?;
    match &args.command {
        Command::New(args) => new(&store, args, global),
        Command::Send(args) => send(&store, args, global),
        Command::Done(args) => {
            let note = args.note.clone();
            let triple = Triple::new(Status::Awaiting, Some(args.propose.proposal()), note);
            declare(&store, &args.declarer.session, &Lifecycle::Set(triple), global)
        }
        Command::Park(args) => {
            let triple = Triple::new(Status::Parked, None, Some(args.note.clone()));
            declare(&store, &args.declarer.session, &Lifecycle::Set(triple), global)
        }
        Command::Ask(args) => {
            let triple = Triple::new(Status::Asking, None, Some(args.note.clone()));
            declare(&store, &args.declarer.session, &Lifecycle::Set(triple), global)
        }
        Command::Show(args) => show(&store, &args.id, global),
        Command::Timeline(args) => timeline(&store, args, global),
        Command::Drain(args) => drain(&store, args, global),
        Command::Archive(args) => {
            store.archive(&args.id)?;
            done(global, "archived", &args.id)
        }
        Command::Close(args) => {
            store.close(&args.id)?;
            done(global, "closed", &args.id)
        }
        Command::Ls(args) => ls(&store, args, global),
        Command::Repair(args) => repair(&store, &args.id, global),
    }
}

fn done(global: &Global, verb: &str, id: &SessionId) -> anyhow::Result<Code> {
    if global.json {
        print_json(json!({ "session": id.as_str(), "result": verb }))?;
    } else {
        println!("{verb} {id}");
    }
    Ok(Code::Ok)
}

fn new(store: &Store<RealFs>, args: &NewArgs, global: &Global) -> anyhow::Result<Code> {
    if let Some(spec) = &args.adapter {
        Spec::parse(spec)?;
    }
    let id = match &args.id {
        Some(id) => id.clone(),
        None => SessionId::new(&spex_engine::env::IdSource::mid(&spex_engine::env::RandomIds))?,
    };
    let worktree = match &args.worktree {
        Some(path) => Some(
            std::path::absolute(path)
                .with_context(|| format!("cannot resolve worktree {}", path.display()))?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    let triple = Triple::new(Status::Active, None, None);
    store.create_session(&id, &triple, args.adapter.as_deref(), worktree.as_deref())?;
    if global.json {
        print_json(json!({ "session": id.as_str(), "status": "active", "adapter": args.adapter }))?;
    } else {
        println!("{id}");
    }
    Ok(Code::Ok)
}

/// Reads a message argument: the text itself, or stdin for `-`.
pub(crate) fn message_text(arg: &str) -> anyhow::Result<String> {
    if arg != "-" {
        return Ok(arg.to_owned());
    }
    // Bounded: a message longer than the limit (plus its one trailing newline) is refused
    // without reading the rest.
    let bound = spex_engine::layout::TEXT_BYTES_MAX + 1;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(bound as u64 + 1)
        .read_to_end(&mut bytes)
        .context("cannot read the message from stdin")?;
    if bytes.len() > bound || (bytes.len() == bound && !bytes.ends_with(b"\n")) {
        return Err(BadInput(format!(
            "the message on stdin is too long (the limit is {} bytes); the rest was not read and nothing was sent",
            spex_engine::layout::TEXT_BYTES_MAX
        ))
        .into());
    }
    let mut text = String::from_utf8(bytes).map_err(|error| {
        BadInput(format!(
            "the message on stdin is not valid UTF-8 (first invalid byte at offset {})",
            error.utf8_error().valid_up_to()
        ))
    })?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

fn send(store: &Store<RealFs>, args: &SendArgs, global: &Global) -> anyhow::Result<Code> {
    let text = message_text(&args.text)?;
    if text.is_empty() {
        return Err(BadInput("the message is empty; nothing was sent".to_owned()).into());
    }
    let request = SendRequest {
        text,
        from: args.from.clone(),
        reply_via: args.reply_via.map(ReplyArg::channel),
        key: args
            .key
            .as_ref()
            .map(|key| Key { operation: args.operation.clone(), key: key.clone() }),
        attributes: None,
    };
    let accepted = store.send(&args.id, &request)?;
    if global.json {
        print_json(json!({
            "session": args.id.as_str(),
            "mid": accepted.mid,
            "replayed": accepted.replayed,
            "restored": accepted.restored,
        }))?;
    } else if accepted.replayed {
        let restored = if accepted.restored { " (restored to the queue)" } else { "" };
        println!("{} replayed{restored}", accepted.mid);
    } else {
        println!("{} sent", accepted.mid);
    }
    Ok(Code::Ok)
}

/// Applies a lifecycle write and prints what moved.
pub(crate) fn declare(
    store: &Store<RealFs>,
    id: &SessionId,
    write: &Lifecycle,
    global: &Global,
) -> anyhow::Result<Code> {
    let applied = store.append(id, write)?;
    if global.json {
        print_json(json!({
            "session": id.as_str(),
            "before": triple_json(&applied.before),
            "after": triple_json(&applied.after),
            "logged": applied.logged,
            "written": applied.written,
        }))?;
    } else if !applied.written {
        println!(
            "{id} unchanged: {} (the write does not apply from it)",
            applied.before.status.name()
        );
    } else if applied.logged {
        println!("{id} {} -> {}", applied.before.display_word(), applied.after.display_word());
    } else {
        println!("{id} {} (no move)", applied.after.display_word());
    }
    Ok(Code::Ok)
}

pub(crate) fn triple_json(triple: &Triple) -> serde_json::Value {
    json!({
        "status": triple.status,
        "proposal": triple.proposal,
        "note": triple.note,
        "display": triple.display_word(),
    })
}

fn show(store: &Store<RealFs>, id: &SessionId, global: &Global) -> anyhow::Result<Code> {
    let record = match store.record(id) {
        Ok(record) => record,
        Err(spex_engine::Error::NoSuchSession { .. }) => return show_closed(store, id, global),
        Err(error) => return Err(error.into()),
    };
    let owed = store.queue(id)?.len();
    let last = store.tail(id, 1)?;
    let triple = record.public_triple();
    let adapter = store.adapter(id, &record)?;
    if global.json {
        print_json(json!({
            "session": id.as_str(),
            "state": triple_json(&triple),
            "adapter": adapter,
            "createdAt": record.created_at(),
            "archived": record.archived(),
            "owed": owed,
            "lastEvent": last.first().map(Event::to_public_json),
            "record": record.public_fields(),
        }))?;
        return Ok(Code::Ok);
    }
    println!("session   {id}");
    println!("status    {} ({})", triple.display_word(), triple.status.name());
    if let Some(proposal) = triple.proposal {
        println!("proposal  {}", proposal.name());
    }
    if let Some(note) = &triple.note {
        println!("note      {}", indent(note, 10));
    }
    println!("adapter   {}", adapter.as_deref().unwrap_or("-"));
    println!("created   {}", record.created_at().as_deref().unwrap_or("-"));
    println!("archived  {}", if record.archived() { "yes" } else { "no" });
    println!("owed      {owed}");
    if let Some(event) = last.first() {
        println!("last      {}", event.ts());
    }
    Ok(Code::Ok)
}

fn repair(store: &Store<RealFs>, id: &SessionId, global: &Global) -> anyhow::Result<Code> {
    let repair = store.repair_queue(id)?;
    if global.json {
        print_json(json!({
            "session": id.as_str(),
            "repaired": repair.kept.is_some(),
            "damage": repair.damage,
            "kept": repair.kept,
            "carried": repair.carried,
            "restored": repair.restored,
        }))?;
        return Ok(Code::Ok);
    }
    let Some(kept) = &repair.kept else {
        println!("{id}: the delivery queue is sound; nothing to repair");
        return Ok(Code::Ok);
    };
    println!("{id}: the delivery queue was damaged ({})", repair.damage.as_deref().unwrap_or("?"));
    println!("  kept the damaged file as {}", kept.display());
    println!("  carried over {} valid entries", repair.carried);
    println!("  restored {} keyed messages the log proves owed", repair.restored.len());
    println!(
        "  not recoverable: unkeyed messages the damaged file held beyond its valid entries (read the kept file to resend them)"
    );
    Ok(Code::Ok)
}

/// `show` of a session without a record: closed (the ledger says when), or no such session.
fn show_closed(store: &Store<RealFs>, id: &SessionId, global: &Global) -> anyhow::Result<Code> {
    let Some(closure) = store.closure(id.as_str())?.filter(|closure| closure.id == id.as_str())
    else {
        return Err(spex_engine::Error::NoSuchSession { id: id.to_string() }.into());
    };
    if global.json {
        print_json(json!({
            "session": closure.id,
            "state": {"status": "closed", "display": "closed"},
            "closedAt": closure.closed_at,
        }))?;
    } else {
        println!("session   {}", closure.id);
        println!("status    closed");
        println!("closed    {}", closure.closed_at);
    }
    Ok(Code::Ok)
}

/// `text` with every line after the first indented by `width` spaces.
fn indent(text: &str, width: usize) -> String {
    super::literal(text).replace('\n', &format!("\n{}", " ".repeat(width)))
}

/// One event as a human-readable line (continuation lines indented).
pub(crate) fn render_event(event: &Event) -> String {
    match event {
        Event::Status(status) => {
            let triple = &status.triple;
            let ts = super::literal(&status.ts);
            let mut line = format!("{ts}  {:<13}", triple.display_word());
            if let Some(note) = &triple.note {
                line.push_str(&indent(note, 40));
            }
            line.trim_end().to_owned()
        }
        Event::Sent(sent) => {
            let from = sent.from.as_deref().unwrap_or("human");
            let via = if sent.reply_via.is_some() { " (reply via note)" } else { "" };
            let ts = super::literal(&sent.ts);
            format!("{ts}  sent by {from}{via}: {}", indent(&sent.text, 26))
        }
    }
}

fn timeline(store: &Store<RealFs>, args: &TimelineArgs, global: &Global) -> anyhow::Result<Code> {
    if !args.follow {
        let events = store.tail(&args.id, args.limit)?;
        if global.json {
            let events: Vec<_> = events.iter().map(Event::to_public_json).collect();
            print_json(json!({ "session": args.id.as_str(), "events": events }))?;
        } else {
            for event in &events {
                println!("{}", render_event(event));
            }
        }
        return Ok(Code::Ok);
    }
    // Following starts from the whole log once (to know the cursor), then reads only growth.
    let (events, mut cursor) = store.follow(&args.id, Cursor::START)?;
    let skip = events.len().saturating_sub(args.limit);
    print_events(&events[skip..], global.json)?;
    loop {
        std::thread::sleep(POLL_INTERVAL);
        match store.follow(&args.id, cursor) {
            Ok((events, next)) => {
                print_events(&events, global.json)?;
                cursor = next;
            }
            Err(Error::NoSuchSession { .. }) => {
                eprintln!("spex: session {} was closed", args.id);
                return Ok(Code::Ok);
            }
            Err(error) => return Err(error.into()),
        }
    }
}

fn print_events(events: &[Event], json: bool) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    for event in events {
        if json {
            writeln!(out, "{}", event.to_public_json())?;
        } else {
            writeln!(out, "{}", render_event(event))?;
        }
    }
    out.flush()?;
    Ok(())
}

fn drain(store: &Store<RealFs>, args: &DrainArgs, global: &Global) -> anyhow::Result<Code> {
    let spec = match &args.adapter {
        Some(spec) => spec.clone(),
        None => store.adapter(&args.id, &store.record(&args.id)?)?.ok_or_else(|| {
            BadInput(format!("session {} has no adapter; pass --adapter SPEC", args.id))
        })?,
    };
    let mut adapter = Spec::parse(&spec)?.adapter(&args.id);
    if !args.watch {
        let report = store.drain(&args.id, adapter.as_mut())?;
        print_drain(&args.id, &report, global)?;
        return Ok(if report.stopped.is_some() { Code::Failed } else { Code::Ok });
    }
    if std::io::stderr().is_terminal() {
        eprintln!("spex: draining {} into {spec} as messages arrive (Ctrl-C stops)", args.id);
    }
    let mut last_stop = None;
    loop {
        match store.queue(&args.id) {
            Ok(queue) if queue.is_empty() => {}
            Ok(_) => {
                let report = store.drain(&args.id, adapter.as_mut())?;
                if !report.delivered.is_empty()
                    || !report.consumed.is_empty()
                    || !report.dropped.is_empty()
                    || (report.stopped.is_some() && report.stopped != last_stop)
                {
                    print_drain(&args.id, &report, global)?;
                }
                last_stop = report.stopped;
            }
            Err(Error::NoSuchSession { .. }) => {
                eprintln!("spex: session {} was closed", args.id);
                return Ok(Code::Ok);
            }
            Err(error) => return Err(error.into()),
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn print_drain(id: &SessionId, report: &DrainReport, global: &Global) -> anyhow::Result<()> {
    if global.json {
        print_json(json!({
            "session": id.as_str(),
            "delivered": report.delivered,
            "consumed": report.consumed,
            "dropped": report.dropped,
            "stopped": report.stopped.as_ref().map(ToString::to_string),
            "remaining": report.remaining,
        }))?;
    } else {
        for mid in &report.delivered {
            println!("delivered {mid}");
        }
        for mid in &report.consumed {
            println!("consumed {mid} (already settled)");
        }
        for mid in &report.dropped {
            println!("dropped {mid} (sender closed)");
        }
        println!("{} owed to {id}", report.remaining);
    }
    if let Some(stop) = &report.stopped {
        eprintln!("spex: drain of {id} stopped: {stop}");
    }
    Ok(())
}

/// The listing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SortArg {
    Activity,
    Created,
}

fn ls(store: &Store<RealFs>, args: &LsArgs, global: &Global) -> anyhow::Result<Code> {
    let mut index = spex_index::Index::open(store.layout().root())?;
    index.refresh(store)?;
    let filter = spex_index::Filter {
        sort: match args.sort {
            SortArg::Activity => spex_index::Sort::Activity,
            SortArg::Created => spex_index::Sort::Created,
        },
        status: args.status.clone(),
        all: args.all,
    };
    let rows = index.sessions(&filter)?;
    if global.json {
        let sessions: Vec<_> = rows.iter().map(spex_index::Row::to_json).collect();
        print_json(json!({ "sessions": sessions }))?;
        return Ok(Code::Ok);
    }
    for row in &rows {
        let archived = if row.archived { "  (archived)" } else { "" };
        let when = row.last_activity.as_deref().or(row.created_at.as_deref()).unwrap_or("-");
        if row.status == "corrupt" {
            // The reason names the damaged file (`spex doctor` says what a repair does).
            let reason = super::literal(row.note.as_deref().unwrap_or("damaged"));
            println!("{:<38} {:<14} {reason}", row.id, row.display);
            continue;
        }
        println!("{:<38} {:<14} {when}{archived}", row.id, row.display);
    }
    Ok(Code::Ok)
}
