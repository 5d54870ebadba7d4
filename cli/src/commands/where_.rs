//! `spex where`: the store root a command here would use, how it was chosen, and whether a store
//! exists there yet. Reads nothing but the root's presence; creates nothing.

use serde_json::json;

use crate::args::Global;
use crate::exit::Code;
use crate::render::{outln, print_json};

/// Arguments of `spex where` (none besides the global ones).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_args: &Args, global: &Global) -> anyhow::Result<Code> {
    let root = global.root()?;
    let sessions = spex_engine::layout::Layout::new(&root.path).sessions_dir();
    let exists = std::fs::symlink_metadata(&sessions).is_ok();
    if global.json {
        print_json(json!({
            "root": root.path,
            "chosenBy": root.source.name(),
            "project": root.project,
            "exists": exists,
        }))?;
        return Ok(Code::Ok);
    }
    outln!("{}", root.path.display())?;
    if !global.quiet {
        let project =
            root.project.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default();
        eprintln!("chosen by {}{project}", root.source.describe());
        if !exists {
            eprintln!("no store there yet: the first session created makes it");
        }
    }
    Ok(Code::Ok)
}
