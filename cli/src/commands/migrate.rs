//! `spex history migrate DEVICE:ID`: moves a conversation from another device of the fleet to
//! this one (a pull). Its owner exports it (unredacted: a move between one's own devices), this
//! device imports it (every digest checked first, ids kept, where it came from recorded), then the
//! owner records that it moved here, so the fleet lists one owner and the old device's
//! `history ls` says where it went.
//!
//! Crash story: each step is whole or not done (the fetched archive is written whole under the
//! store's `migrations/`, the import writes each file whole, the owner writes its record whole),
//! and each is idempotent: a second import of the same bytes changes nothing, the same move
//! recorded twice changes nothing. A migration killed after any step leaves either one owner
//! (the old one, before the import; the new one, once the move is recorded) or both holding the
//! conversation with the old one not yet told, which the next `migrate` of the same reference
//! finishes. The test kills the command after each step (`SPEX_MIGRATE_STOP_AFTER`).

use serde_json::json;

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::ops::fleet::{self, Member};
use crate::render::{outln, print_json};

/// The test hook that kills a migration after a step (`fetched`, `imported`, `recorded`).
pub(crate) const STOP_AFTER_ENV: &str = "SPEX_MIGRATE_STOP_AFTER";

/// How long the owner may take to export a conversation.
const EXPORT_WITHIN: std::time::Duration = std::time::Duration::from_secs(120);

/// Kills this process after `step` when the test hook asks for it (a kill, not an exit: nothing
/// after it runs, as after a crash).
fn stop_after(step: &str) {
    if std::env::var(STOP_AFTER_ENV).is_ok_and(|asked| asked == step) {
        let _ignored =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

pub(crate) fn migrate(global: &Global, member: &Member, reference: &str) -> anyhow::Result<Code> {
    let unreachable = |why: String| BadInput(format!("{} is unreachable: {why}", member.name));
    let row = fleet::resolve(member, reference)?;
    let harness = row["harness"].as_str().unwrap_or("");
    let id = row["id"].as_str().unwrap_or("");
    let device = spex_history::Device::this_machine();
    let Some(here) = device.id.clone() else {
        return Err(BadInput(
            "this machine has no device id (no /etc/machine-id; set SPEX_DEVICE_ID)".to_owned(),
        )
        .into());
    };
    let root = global.open_store()?.layout().root().to_path_buf();
    let stem = fleet::file_stem(harness, id)
        .ok_or_else(|| BadInput(format!("{harness} session {id:?} cannot be migrated")))?;
    let staged = root.join("migrations").join(format!("{stem}.tar.zst"));
    let moved_to = row["movedTo"]["device"].as_str();
    match moved_to {
        Some(to) if to != here => {
            return Err(BadInput(format!(
                "{harness} {id} moved from {} to device {to} already",
                member.name
            ))
            .into());
        }
        // Moved here by an earlier migration that stopped before its cleanup.
        Some(_) => {}
        None => {
            let path = fleet::history_path(harness, id, "/export");
            let bytes = fleet::fetch(member, &path, EXPORT_WITHIN).map_err(unreachable)?;
            crate::files::place(&staged, &bytes)?;
            stop_after("fetched");
            super::import::import_archive(global, &staged)?;
            stop_after("imported");
            let to = json!({ "device": here, "host": device.host });
            let moved = fleet::history_path(harness, id, "/moved");
            fleet::post(member, &moved, &json!({ "to": to }), fleet::ANSWER_WITHIN).map_err(
                |why| BadInput(format!("{} did not record the move: {why}", member.name)),
            )?;
            stop_after("recorded");
        }
    }
    // The conversation is here (an earlier run imported it, or this one did).
    let imported = root.join("imports").join(format!("{stem}.json"));
    if std::fs::symlink_metadata(&imported).is_err() {
        return Err(BadInput(format!(
            "{} says {harness} {id} moved here, but this store has no import of it ({})",
            member.name,
            imported.display()
        ))
        .into());
    }
    match std::fs::remove_file(&staged) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => eprintln!("spex: cannot remove {}: {error}", staged.display()),
    }
    if global.json {
        print_json(
            json!({ "harness": harness, "sessionId": id, "from": member.name, "to": here }),
        )?;
    } else {
        outln!("{harness} {id}: moved from {} to this device ({here})", member.name)?;
    }
    Ok(Code::Ok)
}
