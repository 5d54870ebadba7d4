//! `spex runs ls`: the execution records of harness runs (launches and turns), newest last.
//!
//! Read from each session's run log (`<root>/runs/<id>.ndjson`, see `spex_engine::runs`),
//! lock-free: a run whose end is missing reads `running` while its process lives and
//! `interrupted` once it is gone. A closed session's runs are still listed (the log outlives the
//! session), and so is a run that failed before the harness created a conversation.

use faultfs::{FileKind, Fs as _, RealFs};
use serde_json::json;
use spex_engine::SessionId;
use spex_engine::runs::{Run, runs_dir};

use crate::args::Global;
use crate::exit::Code;
use crate::render::{self, outln, print_json};

/// Arguments of `spex runs`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// List runs: when, which session and harness, how it ended, tokens, the native id.
    #[command(after_help = "Examples:
  spex runs ls
  spex runs ls --session fix --failed
  spex --json runs ls | jq '.runs[] | select(.outcome == \"failed\") | .error'")]
    Ls(LsArgs),
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    /// Only this session's runs (its whole id: a closed session's runs are listed too).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Only runs that did not do what they were for: failed, timed out, or cut off (interrupted).
    #[arg(long)]
    failed: bool,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let Command::Ls(args) = &args.command;
    let Some(store) = global.existing_store()? else {
        return print(&[], global);
    };
    let fs = RealFs::new();
    let mut ids: Vec<SessionId> = Vec::new();
    match &args.session {
        Some(session) => ids.push(SessionId::new(session)?),
        None => {
            let dir = runs_dir(store.layout());
            if fs.exists(&dir)? {
                for entry in fs.read_dir(&dir)? {
                    // A log that is not a regular file is named below, never opened.
                    if entry.kind == FileKind::Dir {
                        continue;
                    }
                    let name = entry.name.as_str();
                    if let Some(id) = name.strip_suffix(".ndjson")
                        && let Ok(id) = SessionId::new(id)
                    {
                        ids.push(id);
                    }
                }
            }
        }
    }
    let mut all = Vec::new();
    for id in &ids {
        // One damaged log never hides the others' runs.
        let (runs, unreadable) = match store.runs(id) {
            Ok(read) => read,
            Err(error) => {
                eprintln!("spex: the run log of {id} cannot be read: {error}");
                continue;
            }
        };
        if unreadable > 0 && !global.quiet {
            eprintln!("spex: {unreadable} unreadable line(s) in the run log of {id} were skipped");
        }
        all.extend(runs);
    }
    all.retain(|run| !args.failed || run.outcome.unsuccessful());
    all.sort_by_key(|run| run.started.as_ref().map_or(0, |(_, ms)| *ms));
    print(&all, global)
}

fn print(runs: &[Run], global: &Global) -> anyhow::Result<Code> {
    if global.json {
        let runs: Vec<_> = runs.iter().map(run_json).collect();
        print_json(json!({ "runs": runs }))?;
        return Ok(Code::Ok);
    }
    if runs.is_empty() {
        if !global.quiet {
            eprintln!("spex: no runs recorded");
        }
        return Ok(Code::Ok);
    }
    let header: Vec<String> =
        ["RUN", "SESSION", "HARNESS", "STARTED", "TOOK", "OUTCOME", "TOKENS", "NATIVE ID"]
            .map(str::to_owned)
            .to_vec();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            vec![
                render::prefix(&run.run, 8).to_owned(),
                run.session.clone(),
                format!("{} {}", run.harness, run.purpose),
                run.started.as_ref().map_or_else(|| "-".to_owned(), |(ts, _)| ts.clone()),
                run.duration_ms().map_or_else(|| "-".to_owned(), seconds),
                outcome_word(run),
                run.usage.map_or_else(
                    || "-".to_owned(),
                    |usage| format!("{}/{}", usage.input_tokens, usage.output_tokens),
                ),
                run.native_id.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    render::out!("{}", render::table(&header, &rows, render::terminal_columns()))?;
    for run in runs.iter().filter(|run| run.error.is_some()) {
        outln!(
            "{}: {}",
            render::prefix(&run.run, 8),
            render::literal(run.error.as_deref().unwrap_or(""))
        )?;
    }
    Ok(Code::Ok)
}

/// The outcome as listed, with a non-zero exit code.
fn outcome_word(run: &Run) -> String {
    let word = run.outcome.name();
    match run.exit_code {
        Some(code) if code != 0 => format!("{word} (exit {code})"),
        _ => word.to_owned(),
    }
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

fn run_json(run: &Run) -> serde_json::Value {
    json!({
        "run": run.run,
        "session": run.session,
        "harness": run.harness,
        "purpose": run.purpose,
        "mid": run.mid,
        "started": run.started.as_ref().map(|(ts, _)| ts),
        "ended": run.ended.as_ref().map(|(ts, _)| ts),
        "duration_ms": run.duration_ms(),
        "outcome": run.outcome,
        "exit_code": run.exit_code,
        "signal": run.signal,
        "pid": run.pid.map(|(pid, _)| pid),
        "native_id": run.native_id,
        "usage": run.usage.map(|usage| json!({
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        })),
        "command": run.command,
        "error": run.error,
        "stderr_tail": run.stderr_tail,
        "signals": run.signals.iter().map(|signal| &signal.event).collect::<Vec<_>>(),
    })
}
