//! `spex history export ID`: one file holding a harness session's conversation, with its
//! provenance, for a move to another machine or for sharing.
//!
//! The file is a tar archive compressed with zstd: `manifest.json` (schema version, the stable
//! ids, where it came from, and the length and SHA-256 of every other file), the transcript's
//! bytes under `transcript/`, and, when a spex session names the harness session, that
//! session's record and timeline segments under `spex/<id>/`. Every text is redacted as every
//! render is (credential-shaped values and local identity) unless `--raw`, which keeps the bytes
//! for a move between one's own machines and says so on stderr.
//!
//! Nothing in the store or the harness's directories is written. The archive is written beside
//! its final name and renamed into place when whole, so an interrupted export leaves no file
//! that looks complete; an existing file is never replaced.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::json;
use spex_history::Found;

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::render::{self, print_json};

/// Writes the export of `transcript` (linked to spex session `spex`, if any) to `out` (default:
/// `<harness>-<id>.tar.zst` in the current directory).
pub(crate) fn export(
    global: &Global,
    transcript: &Found,
    spex: Option<&str>,
    out: Option<&Path>,
    raw: bool,
) -> anyhow::Result<Code> {
    let store = global.existing_store()?;
    let (manifest, bytes) = crate::ops::export::archive(store.as_ref(), transcript, spex, raw)?;
    let out = out.map_or_else(
        || PathBuf::from(format!("{}-{}.tar.zst", transcript.harness.name(), transcript.id)),
        Path::to_path_buf,
    );
    write_new(&out, &bytes)?;
    if raw && !global.quiet {
        eprintln!(
            "spex: --raw: {} holds the conversation unredacted (credentials and local paths as written); keep it to your own machines",
            out.display()
        );
    }
    if global.json {
        print_json(json!({ "out": out, "manifest": manifest }))?;
    } else {
        render::outln!("{}", out.display())?;
    }
    Ok(Code::Ok)
}

/// Writes `bytes` beside `out` and renames them into place once whole and synced; an existing
/// `out` is refused.
fn write_new(out: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(
            BadInput(format!("{} exists; name another file with --out", out.display())).into()
        );
    }
    let staging = out.with_extension("zst.partial");
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&staging)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(error) = written {
        let _ignored = std::fs::remove_file(&staging);
        return Err(anyhow::Error::new(error).context(format!("cannot write {}", out.display())));
    }
    std::fs::rename(&staging, out).with_context(|| format!("cannot name {}", out.display()))?;
    Ok(())
}
