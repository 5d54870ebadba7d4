//! `spex session`: create sessions, send to them, declare their state, read and drain them.
//!
//! Every verb is one engine transition or one lock-free read; what is printed on success has
//! already been made durable by the engine (an acknowledgement is never ahead of the disk).
//!
//! One file per verb, each with its own arguments; this module holds the subcommand list and
//! dispatches.

mod close;
mod declare;
mod drain;
mod interrupt;
mod ls;
mod new;
mod repair;
mod send;
mod show;
mod timeline;

use std::io::IsTerminal as _;

use faultfs::RealFs;
use serde_json::json;
use spex_engine::{Lifecycle, SessionId, Status, Store, Triple};

use crate::args::{Global, resolve};
use crate::exit::Code;
use crate::render::{outln, print_json};

use self::close::{CloseArgs, confirm_close};
use self::declare::{DoneArgs, NoteArgs, declare};
use self::drain::{DrainArgs, drain};
use self::interrupt::interrupt;
use self::ls::{LsArgs, ls};
use self::new::{NewArgs, new};
use self::repair::repair;
use self::send::{SendArgs, send};
use self::show::show;
use self::timeline::{TimelineArgs, timeline};

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
struct IdArgs {
    /// The session (its id or a unique prefix).
    id: String,
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

fn done(global: &Global, verb: &str, id: &SessionId) -> anyhow::Result<Code> {
    if global.json {
        print_json(json!({ "session": id.as_str(), "result": verb }))?;
    } else {
        outln!("{verb} {id}")?;
    }
    Ok(Code::Ok)
}
