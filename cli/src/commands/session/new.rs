//! `spex session new`: a session's directory and record, its worktree, and for a harness
//! session its agent (headless, or its terminal UI in a tmux pane) with its first message.

use anyhow::Context as _;
use faultfs::RealFs;
use serde_json::json;
use spex_engine::{Error, SendRequest, SessionId, Status, Store, Triple};

use super::drain::print_drain;
use crate::args::{Global, session_id};
use crate::commands::adapter::Spec;
use crate::exit::{BadInput, Code};
use crate::ops::agent::Harness;
use crate::render::{outln, print_json};

#[derive(Debug, clap::Args)]
pub(super) struct NewArgs {
    /// The session id (default: a fresh UUID).
    #[arg(long, value_parser = session_id)]
    pub(super) id: Option<SessionId>,
    /// Where drained messages go: exec:CMD, tmux:PANE (tmux:PANE@/SOCKET for another server),
    /// stdout, claude or codex.
    #[arg(long, value_name = "SPEC")]
    pub(super) adapter: Option<String>,
    /// The session's worktree; when it is gone, lifecycle writes are refused. A harness session
    /// runs there (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(super) worktree: Option<std::path::PathBuf>,
    /// Put an agent behind the session: Claude Code or Codex, one headless run per message
    /// (the command is `SPEX_CLAUDE_CMD` / `SPEX_CODEX_CMD`, else `claude` / `codex`).
    #[arg(long, value_enum, conflicts_with = "adapter")]
    pub(super) harness: Option<Harness>,
    /// The model the harness uses (its `--model`).
    #[arg(long, requires = "harness")]
    pub(super) model: Option<String>,
    /// Run the harness's terminal UI in a new window of this tmux target (`tmux:SESSION` or
    /// `tmux:SESSION:WINDOW`) and deliver by paste, instead of one headless run per message.
    #[arg(long, value_name = "tmux:TARGET", requires = "harness")]
    pub(super) pane: Option<String>,
    /// The first message, delivered at once as the agent's first turn.
    #[arg(requires = "harness")]
    pub(super) prompt: Option<String>,
}

/// The worktree as the record keeps it: an absolute path to a directory that exists, in UTF-8
/// (the record is JSON); anything else is bad input and nothing is created.
pub(super) fn worktree_text(path: &std::path::Path) -> anyhow::Result<String> {
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

pub(super) fn new(store: &Store<RealFs>, args: &NewArgs, global: &Global) -> anyhow::Result<Code> {
    check_args(args)?;
    let id = match &args.id {
        Some(id) => id.clone(),
        None => SessionId::new(&spex_engine::env::IdSource::mid(&spex_engine::env::RandomIds))?,
    };
    let worktree = worktree_of(args)?;
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
    let launched = launch(store, &id, harness, args, worktree.as_deref())?;
    let Launched { adapter, pane, binding } = &launched;
    if let Err(error) = store.create_session(&id, &triple, Some(adapter), worktree.as_deref()) {
        if let Some(pane) = pane {
            crate::commands::harness::close_pane(pane);
        }
        return Err(error.into());
    }
    let binding: Vec<(&str, &str)> =
        binding.iter().map(|(key, value)| (*key, value.as_str())).collect();
    store.bind_harness(&id, &binding)?;
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
    send_first(store, &id, harness, &launched, prompt, global)
}

/// Refuses what would create a session that cannot work: a tmux adapter whose pane is not
/// there (it would take every message and fail each delivery), an empty first message.
fn check_args(args: &NewArgs) -> anyhow::Result<()> {
    if let Some(spec) = &args.adapter
        && let Spec::Tmux(pane) = Spec::parse(spec)?
    {
        pane.check().map_err(|error| {
            BadInput(format!("adapter {spec}: tmux cannot find pane {pane}: {error}"))
        })?;
    }
    if args.prompt.as_ref().is_some_and(String::is_empty) {
        return Err(BadInput("the first message is empty; nothing was created".to_owned()).into());
    }
    Ok(())
}

/// The session's worktree as its record holds it: the one given, else (for a harness session,
/// which runs somewhere) the current directory.
fn worktree_of(args: &NewArgs) -> anyhow::Result<Option<String>> {
    let worktree = match (&args.worktree, args.harness) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(_)) => {
            Some(std::env::current_dir().context("cannot read the current directory")?)
        }
        (None, None) => None,
    };
    worktree.map(|path| worktree_text(&path)).transpose()
}

/// How a harness session was launched: its adapter spec, its pane (when it runs in one) and
/// the harness binding its record takes.
struct Launched {
    adapter: String,
    pane: Option<String>,
    binding: Vec<(&'static str, String)>,
}

/// Launches `harness` for session `id`: headless (one process per turn, nothing to start now)
/// or in a tmux pane (refused before anything is launched when the id is taken).
fn launch(
    store: &Store<RealFs>,
    id: &SessionId,
    harness: Harness,
    args: &NewArgs,
    worktree: Option<&str>,
) -> anyhow::Result<Launched> {
    let mut command = harness.default_command();
    if let Some(model) = &args.model {
        command.push_str(" --model ");
        command.push_str(&crate::commands::harness::sh_quote(model));
    }
    let mut binding = vec![("harness", harness.name().to_owned()), ("launch_cmd", command.clone())];
    let Some(target) = &args.pane else {
        binding.push(("launcher", "headless".to_owned()));
        return Ok(Launched { adapter: harness.name().to_owned(), pane: None, binding });
    };
    let target = target.strip_prefix("tmux:").filter(|t| !t.is_empty()).ok_or_else(|| {
        BadInput(format!("--pane {target:?}: expected tmux:TARGET (a tmux session or window)"))
    })?;
    if store.record(id).is_ok() {
        return Err(Error::SessionExists { id: id.clone() }.into());
    }
    let dir = worktree.unwrap_or(".");
    let (pane, native) =
        crate::commands::harness::launch_pane(store, id, harness, &command, dir, target)?;
    binding.push(("launcher", "pane".to_owned()));
    if let Some(native) = native {
        binding.push(("harness_session_id", native));
    }
    Ok(Launched { adapter: format!("{}:tmux:{pane}", harness.name()), pane: Some(pane), binding })
}

/// Sends the first message to the new harness session `id` and drains it to the harness.
fn send_first(
    store: &Store<RealFs>,
    id: &SessionId,
    harness: Harness,
    launched: &Launched,
    prompt: &str,
    global: &Global,
) -> anyhow::Result<Code> {
    let Launched { adapter, pane, .. } = launched;
    let spec = Spec::parse(adapter)?;
    let request = SendRequest {
        text: prompt.to_owned(),
        from: None,
        reply_via: None,
        key: None,
        attributes: None,
    };
    let accepted = store.send(id, &request)?;
    if !global.json {
        outln!("{id}")?;
        outln!("{} sent", accepted.mid)?;
    }
    let mut delivery = spec.adapter(store, id)?;
    let report = store.drain(id, delivery.as_mut())?;
    if global.json {
        print_json(json!({
            "session": id.as_str(), "status": "active", "adapter": adapter, "pane": pane,
            "harness": harness.name(), "mid": accepted.mid,
            "delivered": report.delivered, "stopped": report.stopped.as_ref().map(ToString::to_string),
            "remaining": report.remaining,
        }))?;
    } else {
        print_drain(id, &report, global, false)?;
    }
    if let Some(stop) = &report.stopped
        && global.json
    {
        eprintln!("spex: drain of {id} stopped: {stop}");
    }
    Ok(if report.stopped.is_some() { Code::Failed } else { Code::Ok })
}
