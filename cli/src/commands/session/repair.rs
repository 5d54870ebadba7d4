//! `spex session repair`: a damaged delivery queue rebuilt from its valid entries and the log.

use faultfs::RealFs;
use serde_json::json;
use spex_engine::{SessionId, Store};

use crate::args::Global;
use crate::exit::Code;
use crate::render::{outln, print_json};

pub(super) fn repair(
    store: &Store<RealFs>,
    id: &SessionId,
    global: &Global,
) -> anyhow::Result<Code> {
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
