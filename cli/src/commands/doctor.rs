//! `spex doctor`: a read-only scan of the whole store (or one session) that lists every damage
//! with its file, offset and what a repair would do. Exits 4 when anything is damaged (warnings
//! alone, such as a recovered glued line or a stale staging file, exit 0).

use serde_json::json;
use spex_engine::SessionId;

use crate::args::{Global, session_id};
use crate::exit::Code;
use crate::render::{outln, print_json};

/// Arguments of `spex doctor`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Only this session (default: every session and the close ledger).
    #[arg(value_parser = session_id)]
    id: Option<SessionId>,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let store = global.open_store()?;
    let found = store.doctor(args.id.as_ref())?;
    let damaged = found.iter().any(|damage| !damage.is_warning());
    if global.json {
        let items: Vec<serde_json::Value> = found
            .iter()
            .map(|damage| {
                json!({
                    "path": damage.path,
                    "offset": damage.offset,
                    "severity": if damage.is_warning() { "warning" } else { "damage" },
                    "what": damage.to_string(),
                    "repair": damage.repair(),
                })
            })
            .collect();
        print_json(json!({ "damaged": damaged, "found": items }))?;
    } else if found.is_empty() {
        outln!("no damage found")?;
    } else {
        for damage in &found {
            let severity = if damage.is_warning() { "warning" } else { "damage" };
            outln!("{severity}: {damage}")?;
            outln!("  repair: {}", damage.repair())?;
        }
        let count = found.iter().filter(|damage| !damage.is_warning()).count();
        outln!("{count} damaged, {} warnings", found.len() - count)?;
    }
    Ok(if damaged { Code::Corrupt } else { Code::Ok })
}
