//! `spex session`: create sessions, send to them, declare their state, read and drain them.
//!
//! Every verb is one engine transition or one lock-free read; what is printed on success has
//! already been made durable by the engine (an acknowledgement is never ahead of the disk).

use std::io::{IsTerminal as _, Read as _};
use std::time::Duration;

use anyhow::Context as _;
use faultfs::RealFs;
use serde_json::json;
use spex_engine::{
    Cursor, DrainReport, Error, Event, Key, Lifecycle, SendRequest, SessionId, Status, Store,
    Triple,
};

use super::adapter::Spec;
use crate::args::{
    Declarer, Global, ProposalArg, ReplyArg, SortArg, resolve, session_id, status_parser,
};
use crate::exit::{BadInput, Code};
use crate::ops::agent::Harness;
use crate::ops::timeline::{PageRequest, event_json, owed_mids};
use crate::render::{self, Conversation, Paint, outln, print_json};

/// How often `--follow` and `--watch` look for new work.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The first and the longest wait of `drain --watch` before it tries a stopped drain again.
const RETRY_BACKOFF_MIN: Duration = Duration::from_secs(1);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(60);

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
    #[command(after_help = "Examples:
  spex session new                                  a fresh UUID id
  spex session new --id fix-login --adapter tmux:work.0
  spex session new --adapter 'exec:./agent.sh' --worktree ../fix-login
  spex session new --harness claude \"Why does the login test fail?\"
  spex session new --harness codex --model gpt-5 --worktree ../api")]
    New(NewArgs),
    /// Send a message to a session: record it in the timeline, then owe it to the session.
    #[command(after_help = "Examples:
  spex session send fix 'run the tests again'       fix: a unique id prefix
  git diff | spex session send fix -                the message from stdin
  spex session send fix 'ship it' --key deploy-42   a retry with the same key sends nothing new
  spex session send fix 'what changed?' --from lead --reply-via note")]
    Send(SendArgs),
    /// Declare the work done, with a proposal (worker declaration).
    #[command(after_help = "Examples:
  spex session done --propose merge --note 'Fixed the login race; tests pass.'
  SPEX_SESSION_ID=fix-login spex session done --propose nothing")]
    Done(DoneArgs),
    /// Declare the work parked (worker declaration).
    #[command(after_help = "Examples:
  spex session park --note 'Blocked on the staging database.'")]
    Park(NoteArgs),
    /// Ask the human something, or answer them (worker declaration).
    #[command(after_help = "Examples:
  spex session ask --note 'Which branch should I rebase on?'")]
    Ask(NoteArgs),
    /// Show a session's record and how many messages it is owed.
    #[command(after_help = "Examples:
  spex session show fix
  spex --json session show fix | jq .owed")]
    Show(IdArgs),
    /// Print a session's conversation (oldest first), optionally following it.
    #[command(after_help = "Examples:
  spex session timeline fix                         local times, delivered or owed marks
  spex session timeline fix --utc --limit 20
  spex session timeline fix --follow                new events as they arrive
  spex --json session timeline fix | jq -c '.events[]'")]
    Timeline(TimelineArgs),
    /// Hand a session's owed messages to its adapter.
    #[command(after_help = "Examples:
  spex session drain fix                            into the session's own adapter
  spex session drain fix --adapter stdout | jq .text
  spex session drain fix --watch                    keep delivering as messages arrive")]
    Drain(DrainArgs),
    /// Stop the turn a harness session is running (SIGINT to its run); the message counts as
    /// delivered.
    #[command(after_help = "Examples:
  spex session interrupt fix")]
    Interrupt(IdArgs),
    /// Archive a session (its timeline is kept).
    #[command(after_help = "Examples:
  spex session archive fix
  spex session ls --all                             archived sessions are listed again")]
    Archive(IdArgs),
    /// Close a session: record the close, revoke it as a sender, delete its directory (record,
    /// timeline, queue). On a terminal it says what it deletes and asks; `archive` keeps them.
    #[command(after_help = "Examples:
  spex session close fix                            asks first on a terminal
  spex session close fix --yes                      for scripts: no question
  spex session archive fix                          keeps the conversation instead")]
    Close(CloseArgs),
    /// List sessions, most recently worked in first (through the session index).
    #[command(after_help = "Examples:
  spex session ls
  spex session ls --status review                   stored names or display words
  spex session ls --all --sort created
  spex --json session ls | jq -r '.sessions[].id'")]
    Ls(LsArgs),
    /// Repair a damaged delivery queue: keep the damaged file beside, rebuild the queue from its
    /// valid entries and the keyed messages the log proves owed, and say what cannot be
    /// recovered.
    #[command(after_help = "Examples:
  spex doctor fix                                   what is damaged, and what a repair does
  spex session repair fix")]
    Repair(IdArgs),
}

#[derive(Debug, clap::Args)]
struct NewArgs {
    /// The session id (default: a fresh UUID).
    #[arg(long, value_parser = session_id)]
    id: Option<SessionId>,
    /// Where drained messages go: exec:CMD, tmux:PANE (tmux:PANE@/SOCKET for another server),
    /// stdout, claude or codex.
    #[arg(long, value_name = "SPEC")]
    adapter: Option<String>,
    /// The session's worktree; when it is gone, lifecycle writes are refused. A harness session
    /// runs there (default: the current directory).
    #[arg(long, value_name = "DIR")]
    worktree: Option<std::path::PathBuf>,
    /// Put an agent behind the session: Claude Code or Codex, one headless run per message
    /// (the command is `SPEX_CLAUDE_CMD` / `SPEX_CODEX_CMD`, else `claude` / `codex`).
    #[arg(long, value_enum, conflicts_with = "adapter")]
    harness: Option<Harness>,
    /// The model the harness uses (its `--model`).
    #[arg(long, requires = "harness")]
    model: Option<String>,
    /// Run the harness's terminal UI in a new window of this tmux target (`tmux:SESSION` or
    /// `tmux:SESSION:WINDOW`) and deliver by paste, instead of one headless run per message.
    #[arg(long, value_name = "tmux:TARGET", requires = "harness")]
    pane: Option<String>,
    /// The first message, delivered at once as the agent's first turn.
    #[arg(requires = "harness")]
    prompt: Option<String>,
}

#[derive(Debug, clap::Args)]
struct SendArgs {
    /// The receiving session (its id or a unique prefix).
    id: String,
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

#[derive(Debug, clap::Args)]
struct DoneArgs {
    /// What to do with the work.
    #[arg(long, value_enum)]
    propose: ProposalArg,
    /// The complete reply or summary.
    #[arg(long, value_parser = crate::args::non_empty)]
    note: Option<String>,
    #[command(flatten)]
    declarer: Declarer,
}

#[derive(Debug, clap::Args)]
struct NoteArgs {
    /// The complete reply or question.
    #[arg(long, value_parser = crate::args::non_empty)]
    note: String,
    #[command(flatten)]
    declarer: Declarer,
}

#[derive(Debug, clap::Args)]
struct IdArgs {
    /// The session (its id or a unique prefix).
    id: String,
}

#[derive(Debug, clap::Args)]
struct CloseArgs {
    /// The session (its id or a unique prefix).
    id: String,
    /// Close without asking (a close asks only when stdin and stderr are a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
}

#[derive(Debug, clap::Args)]
struct TimelineArgs {
    /// The session (its id or a unique prefix).
    id: String,
    /// Print at most the last N events.
    #[arg(long, default_value_t = 500)]
    limit: usize,
    /// Keep printing new events as they arrive (NDJSON with --json).
    #[arg(long)]
    follow: bool,
    /// Times in UTC (default: local time).
    #[arg(long)]
    utc: bool,
    /// Interleave the messages of the session's harness transcript (what it was asked there
    /// and what it answered), by time, labelled by side; redacted.
    #[arg(long, conflicts_with = "follow")]
    with_transcript: bool,
}

#[derive(Debug, clap::Args)]
struct DrainArgs {
    /// The session (its id or a unique prefix).
    id: String,
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
    #[arg(long, value_name = "STATUS", value_parser = status_parser())]
    status: Option<String>,
    /// Only sessions active (else created) since this time: RFC 3339, a local date or time, or a
    /// duration back from now (90m, 2h, 7days).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// At most this many sessions (the first in the listing's order).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Only sessions whose worktree is DIR or under it.
    #[arg(long, value_name = "DIR")]
    project: Option<std::path::PathBuf>,
    /// Only sessions a harness runs: claude or codex.
    #[arg(long, value_parser = crate::args::parse_harness)]
    harness: Option<spex_history::Harness>,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    // Reads never create a store: a missing one has no sessions.
    let reading = |reference: &str| -> anyhow::Result<(Store<RealFs>, SessionId)> {
        let store = global.store_for_session(reference)?;
        let id = resolve(&store, reference)?;
        Ok((store, id))
    };
    let writing = |reference: &str| -> anyhow::Result<(Store<RealFs>, SessionId)> {
        let store = global.open_store()?;
        let id = resolve(&store, reference)?;
        Ok((store, id))
    };
    match &args.command {
        Command::New(args) => new(&global.open_store()?, args, global),
        Command::Send(args) => {
            let (store, id) = writing(&args.id)?;
            send(&store, &id, args, global)
        }
        Command::Done(args) => {
            let note = args.note.clone();
            let triple = Triple::new(Status::Awaiting, Some(args.propose.proposal()), note);
            declare(global, &args.declarer, &Lifecycle::Set(triple))
        }
        Command::Park(args) => {
            let triple = Triple::new(Status::Parked, None, Some(args.note.clone()));
            declare(global, &args.declarer, &Lifecycle::Set(triple))
        }
        Command::Ask(args) => {
            let triple = Triple::new(Status::Asking, None, Some(args.note.clone()));
            declare(global, &args.declarer, &Lifecycle::Set(triple))
        }
        Command::Show(args) => {
            let (store, id) = reading(&args.id)?;
            show(&store, &id, global)
        }
        Command::Timeline(args) => {
            let (store, id) = reading(&args.id)?;
            timeline(&store, &id, args, global)
        }
        Command::Drain(args) => {
            let (store, id) = writing(&args.id)?;
            drain(&store, &id, args, global)
        }
        Command::Interrupt(args) => {
            let (store, id) = writing(&args.id)?;
            interrupt(&store, &id, global)
        }
        Command::Archive(args) => {
            let (store, id) = writing(&args.id)?;
            store.archive(&id)?;
            done(global, "archived", &id)
        }
        Command::Close(args) => {
            let (store, id) = writing(&args.id)?;
            let asking =
                !args.yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
            if asking && !confirm_close(&store, &id)? {
                eprintln!("spex: kept {id}");
                return Ok(Code::Failed);
            }
            store.close(&id)?;
            done(global, "closed", &id)
        }
        Command::Ls(args) => ls(args, global),
        Command::Repair(args) => {
            let (store, id) = writing(&args.id)?;
            repair(&store, &id, global)
        }
    }
}

/// A worker's declaration: one lifecycle write by the declaring session.
fn declare(global: &Global, declarer: &Declarer, write: &Lifecycle) -> anyhow::Result<Code> {
    let id = declarer.id()?;
    let applied = global.open_store()?.append(&id, write)?;
    render::applied(&id, &applied, global.json)?;
    Ok(Code::Ok)
}

fn done(global: &Global, verb: &str, id: &SessionId) -> anyhow::Result<Code> {
    if global.json {
        print_json(json!({ "session": id.as_str(), "result": verb }))?;
    } else {
        outln!("{verb} {id}")?;
    }
    Ok(Code::Ok)
}

/// Says on stderr what closing `id` deletes and asks; true on `y`/`yes`. What cannot be read
/// (a damaged record or queue) is said so: a close does not need it.
fn confirm_close(store: &Store<RealFs>, id: &SessionId) -> anyhow::Result<bool> {
    let events = store.events(id).ok();
    let first_said = events.iter().flatten().find_map(|event| match event {
        spex_engine::Event::Sent(sent) => Some(sent.text.clone()),
        spex_engine::Event::Status(_) => None,
    });
    let what = match store.record(id) {
        Ok(record) => match record.title().map(str::to_owned).or(first_said) {
            Some(title) => {
                format!("session {id} \"{}\"", render::truncate(&render::first_line(&title), 60))
            }
            None => format!("session {id}"),
        },
        Err(_) => format!("session {id} (its record cannot be read)"),
    };
    let events = events.map_or_else(|| "?".to_owned(), |events| events.len().to_string());
    let owed = store.queue(id).map_or_else(|_| "?".to_owned(), |queue| queue.len().to_string());
    eprintln!(
        "spex: closing deletes {what}: its record, its timeline ({events} events) and its queue ({owed} owed)."
    );
    eprintln!("spex: `spex session archive {id}` keeps them instead.");
    eprint!("Close {id}? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

/// The worktree as the record keeps it: an absolute path to a directory that exists, in UTF-8
/// (the record is JSON); anything else is bad input and nothing is created.
fn worktree_text(path: &std::path::Path) -> anyhow::Result<String> {
    let absolute = std::path::absolute(path)
        .map_err(|error| BadInput(format!("worktree {}: {error}", path.display())))?;
    match std::fs::metadata(&absolute) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            let shown = absolute.display();
            return Err(BadInput(format!("worktree {shown} is not a directory")).into());
        }
        Err(error) => {
            let shown = absolute.display();
            return Err(BadInput(format!("worktree {shown}: {error}; nothing was created")).into());
        }
    }
    let Some(text) = absolute.to_str() else {
        let shown = absolute.display();
        return Err(BadInput(format!("worktree {shown} is not UTF-8 (a record is JSON)")).into());
    };
    Ok(text.to_owned())
}

fn new(store: &Store<RealFs>, args: &NewArgs, global: &Global) -> anyhow::Result<Code> {
    if let Some(spec) = &args.adapter
        && let Spec::Tmux(pane) = Spec::parse(spec)?
    {
        // A pane that is not there would take every message and fail each delivery.
        pane.check().map_err(|error| {
            BadInput(format!("adapter {spec}: tmux cannot find pane {pane}: {error}"))
        })?;
    }
    if let Some(prompt) = &args.prompt
        && prompt.is_empty()
    {
        return Err(BadInput("the first message is empty; nothing was created".to_owned()).into());
    }
    let id = match &args.id {
        Some(id) => id.clone(),
        None => SessionId::new(&spex_engine::env::IdSource::mid(&spex_engine::env::RandomIds))?,
    };
    // A harness session runs somewhere: the worktree given, else here.
    let worktree = match (&args.worktree, args.harness) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(_)) => {
            Some(std::env::current_dir().context("cannot read the current directory")?)
        }
        (None, None) => None,
    };
    let worktree = match worktree {
        Some(path) => Some(worktree_text(&path)?),
        None => None,
    };
    let triple = Triple::new(Status::Active, None, None);
    let Some(harness) = args.harness else {
        store.create_session(&id, &triple, args.adapter.as_deref(), worktree.as_deref())?;
        if global.json {
            print_json(
                json!({ "session": id.as_str(), "status": "active", "adapter": args.adapter }),
            )?;
        } else {
            outln!("{id}")?;
        }
        return Ok(Code::Ok);
    };
    let mut command = harness.default_command();
    if let Some(model) = &args.model {
        command.push_str(" --model ");
        command.push_str(&super::harness::sh_quote(model));
    }
    let mut binding = vec![("harness", harness.name().to_owned()), ("launch_cmd", command.clone())];
    let (adapter, pane) = match &args.pane {
        None => {
            binding.push(("launcher", "headless".to_owned()));
            (harness.name().to_owned(), None)
        }
        Some(target) => {
            let target =
                target.strip_prefix("tmux:").filter(|t| !t.is_empty()).ok_or_else(|| {
                    BadInput(format!(
                        "--pane {target:?}: expected tmux:TARGET (a tmux session or window)"
                    ))
                })?;
            // Refused before anything is launched: the id is taken.
            if store.record(&id).is_ok() {
                return Err(Error::SessionExists { id: id.to_string() }.into());
            }
            let dir = worktree.as_deref().unwrap_or(".");
            let (pane, native) =
                super::harness::launch_pane(store, &id, harness, &command, dir, target)?;
            binding.push(("launcher", "pane".to_owned()));
            if let Some(native) = native {
                binding.push(("harness_session_id", native));
            }
            (format!("{}:tmux:{pane}", harness.name()), Some(pane))
        }
    };
    if let Err(error) = store.create_session(&id, &triple, Some(&adapter), worktree.as_deref()) {
        if let Some(pane) = &pane {
            super::harness::close_pane(pane);
        }
        return Err(error.into());
    }
    let binding: Vec<(&str, &str)> =
        binding.iter().map(|(key, value)| (*key, value.as_str())).collect();
    store.bind_harness(&id, &binding)?;
    let spec = Spec::parse(&adapter)?;
    let Some(prompt) = &args.prompt else {
        if global.json {
            print_json(json!({
                "session": id.as_str(), "status": "active", "adapter": adapter,
                "harness": harness.name(), "pane": pane,
            }))?;
        } else {
            outln!("{id}")?;
        }
        return Ok(Code::Ok);
    };
    let request = SendRequest {
        text: prompt.clone(),
        from: None,
        reply_via: None,
        key: None,
        attributes: None,
    };
    let accepted = store.send(&id, &request)?;
    if !global.json {
        outln!("{id}")?;
        outln!("{} sent", accepted.mid)?;
    }
    let mut delivery = spec.adapter(store, &id)?;
    let report = store.drain(&id, delivery.as_mut())?;
    if global.json {
        print_json(json!({
            "session": id.as_str(), "status": "active", "adapter": adapter, "pane": pane,
            "harness": harness.name(), "mid": accepted.mid,
            "delivered": report.delivered, "stopped": report.stopped.as_ref().map(ToString::to_string),
            "remaining": report.remaining,
        }))?;
    } else {
        print_drain(&id, &report, global, false)?;
    }
    if let Some(stop) = &report.stopped
        && global.json
    {
        eprintln!("spex: drain of {id} stopped: {stop}");
    }
    Ok(if report.stopped.is_some() { Code::Failed } else { Code::Ok })
}

/// Stops the turn session `id`'s harness is running: marks its run as stopped by a person,
/// then sends SIGINT to the run's process group.
fn interrupt(store: &Store<RealFs>, id: &SessionId, global: &Global) -> anyhow::Result<Code> {
    let adapter = store.adapter(id, &store.record(id)?)?;
    if let Some((_, Some(pane))) = adapter.as_deref().and_then(Harness::from_spec) {
        super::harness::interrupt_pane(&pane).map_err(|error| anyhow::anyhow!(error))?;
        if global.json {
            print_json(json!({ "session": id.as_str(), "interrupted": pane }))?;
        } else {
            outln!("pressed Escape in pane {pane} of {id}")?;
        }
        return Ok(Code::Ok);
    }
    let Some(run) = super::harness::running(store, id)? else {
        if global.json {
            print_json(json!({ "session": id.as_str(), "interrupted": null }))?;
        } else if !global.quiet {
            eprintln!("spex: no turn of {id} is running; nothing to interrupt");
        }
        return Ok(Code::Ok);
    };
    let (ts, at_ms) = store.run_time();
    store.append_run(
        id,
        &spex_engine::runs::RunLine::Hook {
            ts,
            at_ms,
            run: Some(run.run.clone()),
            harness: run.harness.clone(),
            event: super::harness::INTERRUPT.to_owned(),
            native_id: None,
        },
    )?;
    let sent = run
        .pid
        .is_some_and(|(pid, _)| super::harness::signal_group(pid, rustix::process::Signal::INT));
    if !sent {
        return Err(anyhow::anyhow!("run {} of {id} has no process to interrupt", run.run));
    }
    if global.json {
        print_json(json!({ "session": id.as_str(), "interrupted": run.run }))?;
    } else {
        outln!("interrupted run {} of {id}", run.run)?;
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

fn send(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &SendArgs,
    global: &Global,
) -> anyhow::Result<Code> {
    let message = crate::ops::send::Message {
        to: id.clone(),
        text: message_text(&args.text)?,
        from: args.from.clone(),
        reply_via: args.reply_via.map(ReplyArg::channel),
        key: args
            .key
            .as_ref()
            .map(|key| Key { operation: args.operation.clone(), key: key.clone() }),
    };
    let sent = crate::ops::send::send(store, message)?;
    // An archived session is hidden from listings: say where the message went.
    if !global.quiet && sent.archived {
        eprintln!(
            "spex: note: {id} is archived (hidden from `session ls`); the message is owed all the same and waits for a drain"
        );
    }
    if global.json {
        print_json(sent.to_json())?;
    } else if sent.replayed {
        let restored = if sent.restored { " (restored to the queue)" } else { "" };
        outln!("{} replayed{restored}", sent.mid)?;
    } else {
        outln!("{} sent", sent.mid)?;
    }
    Ok(Code::Ok)
}

fn show(store: &Store<RealFs>, id: &SessionId, global: &Global) -> anyhow::Result<Code> {
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
struct Link {
    harness: String,
    id: String,
    found: Option<spex_history::Found>,
}

impl Link {
    /// The record's link (`None` when it names no harness session).
    fn of(record: &spex_engine::Record, global: &Global) -> anyhow::Result<Option<Link>> {
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

    fn to_json(&self) -> serde_json::Value {
        json!({
            "harness": self.harness,
            "id": self.id,
            "path": self.found.as_ref().map(|found| found.path.display().to_string()),
        })
    }
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
        outln!("{id}: the delivery queue is sound; nothing to repair")?;
        return Ok(Code::Ok);
    };
    outln!("{id}: the delivery queue was damaged ({})", repair.damage.as_deref().unwrap_or("?"))?;
    outln!("  kept the damaged file as {}", kept.display())?;
    outln!("  carried over {} valid entries", repair.carried)?;
    outln!("  restored {} keyed messages the log proves owed", repair.restored.len())?;
    outln!(
        "  not recoverable: unkeyed messages the damaged file held beyond its valid entries (read the kept file to resend them)"
    )?;
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
        outln!("session   {}", closure.id)?;
        outln!("status    closed")?;
        outln!("closed    {}", closure.closed_at)?;
    }
    Ok(Code::Ok)
}

/// A stored time as people read it: local, with how long ago.
fn local_time(ts: Option<&str>) -> String {
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
fn indent(text: &str, width: usize) -> String {
    render::literal(text).replace('\n', &format!("\n{}", " ".repeat(width)))
}

fn timeline(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &TimelineArgs,
    global: &Global,
) -> anyhow::Result<Code> {
    let mut owed = owed_mids(store, id);
    let mut conversation = Conversation::new(
        Paint::for_stdout(global.color),
        crate::when::zone(args.utc),
        id.as_str(),
        owed.clone(),
    );
    if args.with_transcript {
        return with_transcript(store, id, args, global, &mut conversation);
    }
    if !args.follow {
        let request = PageRequest { session: id.clone(), limit: args.limit, before: None };
        let marked = crate::ops::timeline::page(store, &request)?;
        let events = &marked.events;
        if global.json {
            print_json(marked.to_json())?;
        } else {
            global.page();
            for event in events {
                render::out!("{}", conversation.event(event))?;
            }
            if events.is_empty() && !global.quiet {
                eprintln!("spex: {id} has no events yet");
            }
        }
        return Ok(Code::Ok);
    }
    // Following starts from the whole log once (to know the cursor), then reads only growth.
    let (events, mut cursor) = store.follow(id, Cursor::START)?;
    let skip = events.len().saturating_sub(args.limit);
    print_events(&events[skip..], global.json.then_some(&owed), &mut conversation)?;
    loop {
        std::thread::sleep(POLL_INTERVAL);
        match store.follow(id, cursor) {
            Ok((events, next)) => {
                if !events.is_empty() {
                    owed = owed_mids(store, id);
                    conversation.set_owed(owed.clone());
                }
                print_events(&events, global.json.then_some(&owed), &mut conversation)?;
                cursor = next;
            }
            Err(Error::NoSuchSession { .. }) => {
                if !global.quiet {
                    eprintln!("spex: session {id} was closed");
                }
                return Ok(Code::Ok);
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// The timeline with the linked transcript's messages interleaved by time.
fn with_transcript(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &TimelineArgs,
    global: &Global,
    conversation: &mut Conversation,
) -> anyhow::Result<Code> {
    let record = store.record(id)?;
    let link = Link::of(&record, global)?;
    let events = store.tail(id, args.limit)?;
    let transcript = match link.as_ref().and_then(|link| link.found.as_ref()) {
        Some(found) => spex_history::summarize(found)?.1,
        None => {
            let why = match &link {
                Some(link) => {
                    format!("its {} transcript {} is not on this machine", link.harness, link.id)
                }
                None => "its record names no harness session (harness_session_id)".to_owned(),
            };
            if !global.quiet {
                eprintln!("spex: {id} has no transcript to interleave: {why}");
            }
            Vec::new()
        }
    };
    let transcript: Vec<&spex_history::Event> = transcript
        .iter()
        .filter(|event| {
            matches!(
                event.kind,
                spex_history::Kind::User { .. } | spex_history::Kind::Assistant { .. }
            )
        })
        .collect();
    let identity = spex_history::Identity::of_this_machine();
    let shown = |text: &str| spex_history::redact(text, &identity);
    // Merge by instant; an event without a readable time keeps its place after the ones before.
    let instant = |ts: Option<&str>| ts.and_then(crate::when::parse_ts);
    let mut merged: Vec<(Option<jiff::Timestamp>, Result<&Event, &spex_history::Event>)> = events
        .iter()
        .map(|event| (instant(Some(event.ts())), Ok(event)))
        .chain(transcript.iter().map(|event| (instant(event.ts.as_deref()), Err(*event))))
        .collect();
    merged.sort_by_key(|(at, _)| *at);
    if global.json {
        let events: Vec<serde_json::Value> = merged
            .iter()
            .map(|(_, event)| match event {
                Ok(event) => {
                    let mut value = event.to_public_json();
                    if let Some(map) = value.as_object_mut() {
                        map.insert("side".to_owned(), "spex".into());
                    }
                    value
                }
                Err(event) => {
                    let (kind, text) = match &event.kind {
                        spex_history::Kind::User { text } => ("prompt", text),
                        spex_history::Kind::Assistant { text } => ("answer", text),
                        _ => ("other", &String::new()),
                    };
                    json!({
                        "ts": event.ts, "kind": kind, "text": shown(text),
                        "side": link.as_ref().map(|link| link.harness.clone()),
                        "line": event.line,
                    })
                }
            })
            .collect();
        print_json(json!({ "session": id.as_str(), "events": events }))?;
        return Ok(Code::Ok);
    }
    let harness = link.as_ref().map_or("transcript", |link| link.harness.as_str());
    for (_, event) in &merged {
        match event {
            Ok(event) => render::out!("{}", conversation.event(event))?,
            Err(event) => {
                render::out!("{}", conversation.transcript_event(harness, event, &shown))?
            }
        }
    }
    Ok(Code::Ok)
}

/// Prints `events`: as JSON lines (with `json`, the owed mids), else as the conversation.
fn print_events(
    events: &[Event],
    json: Option<&std::collections::HashSet<String>>,
    conversation: &mut Conversation,
) -> anyhow::Result<()> {
    for event in events {
        if let Some(owed) = json {
            outln!("{}", event_json(event, owed))?;
        } else {
            render::out!("{}", conversation.event(event))?;
        }
    }
    Ok(())
}

fn drain(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &DrainArgs,
    global: &Global,
) -> anyhow::Result<Code> {
    let spec = match &args.adapter {
        Some(spec) => spec.clone(),
        None => store
            .adapter(id, &store.record(id)?)?
            .ok_or_else(|| BadInput(format!("session {id} has no adapter; pass --adapter SPEC")))?,
    };
    let spec = Spec::parse(&spec)?;
    // The stdout adapter's messages are the results on stdout; the report then goes to stderr.
    let report_to_stderr = spec == Spec::Stdout;
    let mut adapter = spec.adapter(store, id)?;
    if !args.watch {
        let report = store.drain(id, adapter.as_mut())?;
        // `drain --adapter stdout | head -2`: the reader had what it wanted; the rest is owed.
        if report_to_stderr
            && let Some(spex_engine::DrainStop::AdapterFailed { error, .. }) = &report.stopped
            && error == super::adapter::CLOSED_PIPE
        {
            if !global.quiet {
                eprintln!(
                    "spex: the reader closed the pipe after {} messages; {} left owed to {id}",
                    report.delivered.len(),
                    report.remaining
                );
            }
            return Ok(Code::Ok);
        }
        print_drain(id, &report, global, report_to_stderr)?;
        return Ok(if report.stopped.is_some() { Code::Failed } else { Code::Ok });
    }
    if std::io::stderr().is_terminal() && !global.quiet {
        eprintln!("spex: draining {id} as messages arrive (Ctrl-C stops)");
    }
    let mut last_stop = None;
    // After a drain that stopped, the next try waits longer each time (a refusing adapter, a
    // harness whose model keeps failing: every try of a harness is a whole agent run).
    let mut backoff = Duration::ZERO;
    loop {
        match store.queue(id) {
            Ok(queue) if queue.is_empty() => backoff = Duration::ZERO,
            Ok(_) => {
                std::thread::sleep(backoff);
                let report = store.drain(id, adapter.as_mut())?;
                backoff = match (&report.stopped, report.delivered.is_empty()) {
                    (Some(_), true) => (backoff * 2).clamp(RETRY_BACKOFF_MIN, RETRY_BACKOFF_MAX),
                    _ => Duration::ZERO,
                };
                if !report.delivered.is_empty()
                    || !report.consumed.is_empty()
                    || !report.dropped.is_empty()
                    || (report.stopped.is_some() && report.stopped != last_stop)
                {
                    print_drain(id, &report, global, report_to_stderr)?;
                }
                last_stop = report.stopped;
            }
            Err(Error::NoSuchSession { .. }) => {
                if !global.quiet {
                    eprintln!("spex: session {id} was closed");
                }
                return Ok(Code::Ok);
            }
            Err(error) => return Err(error.into()),
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn print_drain(
    id: &SessionId,
    report: &DrainReport,
    global: &Global,
    to_stderr: bool,
) -> anyhow::Result<()> {
    let mut lines = Vec::new();
    if global.json {
        let mut document = json!({
            "session": id.as_str(),
            "delivered": report.delivered,
            "consumed": report.consumed,
            "dropped": report.dropped,
            "stopped": report.stopped.as_ref().map(ToString::to_string),
            "remaining": report.remaining,
        });
        if !to_stderr {
            return print_json(document);
        }
        if let Some(map) = document.as_object_mut() {
            map.insert("schema".to_owned(), render::SCHEMA_VERSION.into());
        }
        lines.push(document.to_string());
    } else {
        lines.extend(report.delivered.iter().map(|mid| format!("delivered {mid}")));
        lines.extend(report.consumed.iter().map(|mid| format!("consumed {mid} (already settled)")));
        lines.extend(report.dropped.iter().map(|mid| format!("dropped {mid} (sender closed)")));
        lines.push(format!("{} owed to {id}", report.remaining));
    }
    if to_stderr {
        if !global.quiet {
            for line in &lines {
                eprintln!("{line}");
            }
        }
    } else {
        for line in &lines {
            outln!("{line}")?;
        }
    }
    if let Some(stop) = &report.stopped {
        eprintln!("spex: drain of {id} stopped: {stop}");
    }
    Ok(())
}

fn ls(args: &LsArgs, global: &Global) -> anyhow::Result<Code> {
    let Some(store) = global.existing_store()? else {
        if global.json {
            print_json(json!({ "sessions": [] }))?;
        } else if !global.quiet {
            eprintln!(
                "spex: no sessions: there is no store at {} yet (`spex where` says how it was chosen)",
                global.root()?.path.display()
            );
        }
        return Ok(Code::Ok);
    };
    let index = crate::args::open_index(&store)?;
    let narrowing = crate::ops::list::Narrowing {
        filter: spex_index::Filter {
            sort: match args.sort {
                SortArg::Activity => spex_index::Sort::Activity,
                SortArg::Created => spex_index::Sort::Created,
            },
            status: args.status.clone(),
            all: args.all,
        },
        since: args
            .since
            .as_deref()
            .map(|since| {
                crate::when::since(since, jiff::Timestamp::now(), &crate::when::zone(false))
            })
            .transpose()
            .map_err(BadInput::from)?,
        project: args
            .project
            .as_ref()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone())),
        harness: args.harness,
        limit: args.limit,
    };
    let rows = crate::ops::list::sessions(&store, &index, &narrowing)?;
    if global.json {
        print_json(crate::ops::list::to_json(&rows))?;
        return Ok(Code::Ok);
    }
    if rows.is_empty() {
        if !global.quiet {
            let narrowed = narrowing.narrowed();
            let which = match &args.status {
                Some(status) => format!(" in status {status}"),
                None if narrowed => {
                    " match (drop --since, --project or --harness to see more)".to_owned()
                }
                None if args.all => String::new(),
                None => " (archived ones are hidden: --all shows them)".to_owned(),
            };
            eprintln!("spex: no sessions{which} in {}", store.layout().root().display());
        }
        return Ok(Code::Ok);
    }
    global.page();
    let table: Vec<render::SessionRow> = rows
        .into_iter()
        .map(|crate::ops::list::Listed { row, agent }| render::SessionRow {
            agent,
            id: row.id.clone(),
            display: row.display.clone(),
            when: row.last_activity.clone().or_else(|| row.created_at.clone()),
            owed: row.owed.map(|owed| owed as usize),
            preview: if row.status == "corrupt" {
                // The reason names the damaged file (`spex doctor` says what a repair does).
                render::first_line(row.note.as_deref().unwrap_or("damaged"))
            } else {
                render::first_line(row.preview.as_deref().or(row.note.as_deref()).unwrap_or(""))
            },
            archived: row.archived,
            title: row.title.clone(),
        })
        .collect();
    // Prefixes are told apart from every session of the store, not only the rows shown.
    let every = store.session_ids()?;
    let every: Vec<&str> = every.iter().map(|id| id.as_str()).collect();
    render::out!(
        "{}",
        render::session_table(
            &table,
            &every,
            jiff::Timestamp::now(),
            &crate::when::zone(false),
            Paint::for_stdout(global.color),
            render::terminal_columns(),
        )
    )?;
    Ok(Code::Ok)
}
