//! `spex internal`: the single writer path for lifecycle hooks.
//!
//! Hooks never write the record themselves; they call these, which go through the same engine
//! transition as the worker declarations. The guarded writes check the current status and write
//! under one record lock, so a declaration that lands concurrently is never overwritten:
//!
//! | command             | writes                         | applies only from        |
//! |---------------------|--------------------------------|--------------------------|
//! | `session-state S`   | status S (+ proposal, note)    | any status               |
//! | `session-idle`      | idle                           | active                   |
//! | `session-fail`      | error (+ note)                 | active                   |
//! | `session-turn-fail` | error, note "turn failed: .."  | active                   |
//!
//! A guarded write that does not apply writes nothing and exits 0 (a hook must not fail a turn
//! because the agent already declared something else).
//!
//! `hook claude|codex` is the harnesses' live signal: Claude Code's hooks (SessionStart,
//! UserPromptSubmit, Stop) call it with the hook's JSON on stdin, Codex's `notify` with its JSON
//! as the last argument. It appends one `hook` line (the event, the native session id) to the
//! session's run log, for the run named by `SPEX_RUN_ID`. It never fails the harness: whatever
//! goes wrong is said on stderr and the exit is 0.

use spex_engine::{Lifecycle, Status, Triple};

use crate::args::{Declarer, Global, ProposalArg};
use crate::exit::{BadInput, Code};

/// Arguments of `spex internal`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Set the session's status (the hooks' authored state write).
    SessionState(StateArgs),
    /// The turn ended with nothing declared: idle, only from active.
    SessionIdle(Declarer),
    /// The runtime failed: error, only while active.
    SessionFail(FailArgs),
    /// A turn failed: error with the turn's failure as the note, only while active.
    SessionTurnFail(FailArgs),
    /// A harness hook's signal, into the session's run log.
    Hook(HookArgs),
}

#[derive(Debug, clap::Args)]
struct HookArgs {
    /// The harness calling: claude or codex.
    #[arg(value_enum)]
    harness: crate::ops::agent::Harness,
    /// Codex's notification JSON (Claude Code's hooks write theirs on stdin).
    payload: Option<String>,
    #[command(flatten)]
    declarer: Declarer,
}

/// The most hook input read from stdin.
const HOOK_INPUT_BYTES_MAX: u64 = 1 << 20;

/// `internal hook`: see the module header.
fn hook(args: &HookArgs, global: &Global) -> Code {
    if let Err(error) = hook_line(args, global) {
        eprintln!("spex: hook {} not recorded: {error:#}", args.harness.name());
    }
    Code::Ok
}

fn hook_line(args: &HookArgs, global: &Global) -> anyhow::Result<()> {
    use std::io::Read as _;
    let payload = match &args.payload {
        Some(payload) => payload.clone(),
        None => {
            let mut text = String::new();
            std::io::stdin().take(HOOK_INPUT_BYTES_MAX).read_to_string(&mut text)?;
            text
        }
    };
    let value: serde_json::Value = serde_json::from_str(&payload).unwrap_or_default();
    let field =
        |keys: &[&str]| keys.iter().find_map(|key| value.get(*key)?.as_str().map(str::to_owned));
    let event = field(&["hook_event_name", "type"]).unwrap_or_else(|| "unknown".to_owned());
    let native = field(&["session_id", "thread-id", "thread_id"]);
    let id = args.declarer.id()?;
    let store = global.open_store()?;
    let (ts, at_ms) = store.run_time();
    let run = std::env::var("SPEX_RUN_ID").ok().filter(|run| !run.is_empty());
    store.append_run(
        &id,
        &spex_engine::runs::RunLine::Hook {
            ts,
            at_ms,
            run,
            harness: args.harness.name().to_owned(),
            event,
            native_id: native,
        },
    )?;
    Ok(())
}

#[derive(Debug, clap::Args)]
struct StateArgs {
    /// active, idle, awaiting, parked, error, asking or queued.
    #[arg(value_parser = parse_status)]
    status: Status,
    /// The proposal (only with awaiting).
    #[arg(long, value_enum)]
    propose: Option<ProposalArg>,
    /// The note.
    #[arg(long)]
    note: Option<String>,
    #[command(flatten)]
    declarer: Declarer,
}

#[derive(Debug, clap::Args)]
struct FailArgs {
    /// What failed.
    #[arg(long)]
    note: Option<String>,
    #[command(flatten)]
    declarer: Declarer,
}

fn parse_status(name: &str) -> Result<Status, String> {
    Status::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Status::ALL.iter().map(|status| status.name()).collect();
        format!("unknown status {name:?} (expected one of: {})", names.join(", "))
    })
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    if let Command::Hook(args) = &args.command {
        return Ok(hook(args, global));
    }
    let store = global.open_store()?;
    let (session, write) = match &args.command {
        Command::SessionState(args) => {
            if args.propose.is_some() && args.status != Status::Awaiting {
                return Err(BadInput(format!(
                    "--propose applies only to awaiting, not {}",
                    args.status.name()
                ))
                .into());
            }
            let proposal = args.propose.map(ProposalArg::proposal);
            let triple = Triple::new(args.status, proposal, args.note.clone());
            (&args.declarer, Lifecycle::Set(triple))
        }
        Command::SessionIdle(declarer) => (
            declarer,
            Lifecycle::SetFrom {
                from: vec![Status::Active],
                triple: Triple::new(Status::Idle, None, None),
            },
        ),
        Command::SessionFail(args) => (
            &args.declarer,
            Lifecycle::SetFrom {
                from: vec![Status::Active],
                triple: Triple::new(Status::Error, None, args.note.clone()),
            },
        ),
        Command::SessionTurnFail(args) => {
            let note =
                format!("turn failed: {}", args.note.as_deref().unwrap_or("no reason given"));
            (
                &args.declarer,
                Lifecycle::SetFrom {
                    from: vec![Status::Active],
                    triple: Triple::new(Status::Error, None, Some(note)),
                },
            )
        }
        Command::Hook(_) => return Ok(Code::Ok),
    };
    let id = session.id()?;
    let applied = store.append(&id, &write)?;
    crate::render::applied(&id, &applied, global.json)?;
    Ok(Code::Ok)
}
