//! `spex doctor`: a read-only scan of the whole store (or one session) that lists every damage
//! with its file, offset and what a repair would do. Exits 4 when anything is damaged (warnings
//! alone, such as a recovered glued line or a stale staging file, exit 0).

use serde_json::json;

use crate::args::{Global, resolve};
use crate::exit::Code;
use crate::render::{outln, print_json};

/// Arguments of `spex doctor`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Only this session, by its id or a unique prefix (default: every session and the close
    /// ledger).
    id: Option<String>,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    // A scan never creates a store: without one there is nothing to scan.
    let Some(store) = global.existing_store()? else {
        if global.json {
            print_json(json!({ "damaged": false, "found": [] }))?;
        } else {
            outln!("no damage found")?;
            if !global.quiet {
                eprintln!(
                    "spex: there is no store at {} yet (`spex where` says how it was chosen)",
                    global.root()?.path.display()
                );
            }
        }
        return Ok(Code::Ok);
    };
    let id = args.id.as_deref().map(|text| resolve(&store, text)).transpose()?;
    let found = store.doctor(id.as_ref())?;
    let damaged = found.iter().any(|damage| !damage.is_warning());
    // The session index is derived: its damage loses nothing, and the next command that reads it
    // moves it aside and rebuilds it. A warning, then.
    let index = if id.is_none() {
        spex_index::Index::inspect(store.layout().root()).map(|reason| {
            let path = store.layout().root().join(spex_index::INDEX_FILE);
            let what = format!("{}: the session index is damaged: {reason}", path.display());
            let repair = "none needed: the next command that reads the index moves it aside and rebuilds it from the logs (`spex index rebuild` does it now)";
            (path, what, repair)
        })
    } else {
        None
    };
    if global.json {
        let items: Vec<serde_json::Value> = found
            .iter()
            .map(|damage| {
                json!({
                    "path": damage.path,
                    "offset": damage.offset,
                    "severity": if damage.is_warning() { "warning" } else { "damage" },
                    "what": damage.to_string(),
                    "repair": damage.repair(Some(store.layout())),
                })
            })
            .chain(index.iter().map(|(path, what, repair)| {
                json!({ "path": path, "offset": null, "severity": "warning", "what": what, "repair": repair })
            }))
            .collect();
        print_json(json!({ "damaged": damaged, "found": items }))?;
    } else if found.is_empty() && index.is_none() {
        outln!("no damage found")?;
    } else {
        for damage in &found {
            let severity = if damage.is_warning() { "warning" } else { "damage" };
            outln!("{severity}: {damage}")?;
            outln!("  repair: {}", damage.repair(Some(store.layout())))?;
        }
        if let Some((_, what, repair)) = &index {
            outln!("warning: {what}")?;
            outln!("  repair: {repair}")?;
        }
        let count = found.iter().filter(|damage| !damage.is_warning()).count();
        let warnings = found.len() - count + usize::from(index.is_some());
        outln!("{count} damaged, {warnings} warning{}", if warnings == 1 { "" } else { "s" })?;
    }
    Ok(if damaged { Code::Corrupt } else { Code::Ok })
}
