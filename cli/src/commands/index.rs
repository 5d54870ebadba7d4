//! `spex index`: the derived session index (see the `spex-index` crate for its crash and
//! concurrency story), `spex search` and `spex watch` read it.

use serde_json::json;

use crate::args::Global;
use crate::exit::Code;
use crate::render::{out, outln, print_json};

/// Arguments of `spex index`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Fold what the logs gained since the last refresh (every listing does this first), and
    /// what the harness transcripts gained.
    #[command(after_help = "Examples:
  spex index refresh
  spex --json index refresh | jq .updated")]
    Refresh,
    /// Empty the index and fold every log again (the index is derived: nothing is lost).
    #[command(after_help = "Examples:
  spex index rebuild")]
    Rebuild,
    /// Print every row and content entry in a canonical order (to compare two indexes).
    #[command(hide = true)]
    Dump,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    // A refresh or a rebuild writes the index, so it may create the store it lives in (the
    // harness transcripts can be indexed before any spex session exists); a dump only reads.
    let store = match args.command {
        Command::Refresh | Command::Rebuild => global.open_store()?,
        Command::Dump => global.existing_store()?.ok_or_else(|| {
            anyhow::anyhow!(
                "there is no store at {} yet, so there is no index to dump (`spex where` says how it was chosen)",
                global.root().map(|root| root.path.display().to_string()).unwrap_or_default()
            )
        })?,
    };
    let (mut index, refreshed) = match args.command {
        Command::Refresh | Command::Rebuild => {
            fold_sessions(&store, matches!(args.command, Command::Rebuild))?
        }
        Command::Dump => {
            let mut index = crate::args::open_index(&store)?;
            index.scan_history(&spex_history::discover(&crate::args::history_roots(
                global,
                &[],
            )?)?)?;
            out!("{}", index.dump()?)?;
            return Ok(Code::Ok);
        }
    };
    // The harness transcripts (Claude Code, Codex): each folded past its own watermark.
    let scanned =
        index.scan_history(&spex_history::discover(&crate::args::history_roots(global, &[])?)?)?;
    if global.json {
        print_json(json!({
            "sessions": refreshed.sessions,
            "updated": refreshed.updated,
            "removed": refreshed.removed,
            "events": refreshed.events,
            "version": index.version()?,
            "transcripts": {
                "found": scanned.transcripts,
                "read": scanned.read,
                "readFromStart": scanned.reset,
                "lines": scanned.lines,
                "removed": scanned.removed,
            },
        }))?;
    } else {
        outln!(
            "{} sessions: {} updated ({} events folded), {} removed",
            refreshed.sessions,
            refreshed.updated,
            refreshed.events,
            refreshed.removed
        )?;
        outln!(
            "{} transcripts: {} read ({} from their start, {} lines folded), {} removed",
            scanned.transcripts,
            scanned.read,
            scanned.reset,
            scanned.lines,
            scanned.removed
        )?;
    }
    Ok(Code::Ok)
}

/// Refreshes (or, with `rebuild`, rebuilds) the index of `store`'s sessions, with a progress
/// bar. A damaged index is moved aside and built again: a rebuild always works.
fn fold_sessions(
    store: &spex_engine::Store<faultfs::RealFs>,
    rebuild: bool,
) -> anyhow::Result<(spex_index::Index, spex_index::Refreshed)> {
    let bar = crate::render::progress_bar("sessions folded");
    let mut progress = |done: u64, total: u64| {
        if let Some(bar) = &bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    };
    let root = store.layout().root();
    let mut attempt = || -> Result<_, spex_index::Error> {
        let mut index = spex_index::Index::open(root)?;
        let refreshed = if rebuild {
            index.rebuild_with(store, &mut progress)?
        } else {
            index.refresh_with(store, &mut progress)?
        };
        Ok((index, refreshed))
    };
    let done = match attempt() {
        Err(error) if error.is_damage() => {
            let aside = spex_index::Index::set_aside(root)?;
            eprintln!(
                "spex: warning: the session index was damaged ({}); moved aside to {} and rebuilt from the logs",
                error.reason(),
                aside.display()
            );
            attempt()
        }
        other => other,
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    Ok(done?)
}
