//! `spex history import FILE`: places an exported harness session where its harness finds it,
//! with its ids kept and where it came from recorded.
//!
//! Everything is checked before anything is written: the archive reads whole, its manifest is
//! one this version writes, every file it lists is there with its length and SHA-256, nothing
//! else is there, and the place is a plain relative path under the harness's home. Then the
//! transcript is written beside its place, synced, and renamed into place (the directory
//! synced), and the provenance (the manifest's origin, when, onto which device) is written the
//! same way under the store's `imports/`. Importing the same file again changes nothing; a
//! transcript of that id with other bytes is refused, naming both. The session index is never
//! copied: its next scan reads what was placed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Value, json};
use sha2::Digest as _;
use spex_history::Harness;

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::render::{self, print_json};

/// The largest archive read (a transcript of this size is far beyond any seen).
const ARCHIVE_BYTES_MAX: u64 = 1 << 30;

/// What an import did.
#[derive(Debug)]
pub(crate) struct Imported {
    pub(crate) harness: Harness,
    pub(crate) id: String,
    /// Where the transcript is.
    pub(crate) target: PathBuf,
    /// Where it came from is recorded here.
    pub(crate) provenance: PathBuf,
    /// Whether anything was written (`false`: it was here already, with the same bytes).
    pub(crate) changed: bool,
    /// The linked spex session's files the archive holds (not imported).
    pub(crate) kept: usize,
}

pub(crate) fn import(global: &Global, file: &Path) -> anyhow::Result<Code> {
    let imported = import_archive(global, file)?;
    let Imported { harness, id, target, provenance, changed, kept } = &imported;
    if *kept > 0 && !global.quiet {
        eprintln!(
            "spex: the linked spex session's files ({kept}) stay in the archive: importing a spex session is not built"
        );
    }
    if global.json {
        print_json(json!({
            "harness": harness.name(),
            "sessionId": id,
            "placed": target,
            "provenance": provenance,
            "changed": changed,
        }))?;
    } else if !changed {
        render::outln!(
            "{} {id}: already here ({}); nothing changed",
            harness.name(),
            target.display()
        )?;
    } else {
        render::outln!("{} {id}: placed at {}", harness.name(), target.display())?;
    }
    Ok(Code::Ok)
}

/// Imports the archive `file` (see the module's header): every check before anything is
/// written, then the transcript and its provenance, each whole.
pub(crate) fn import_archive(global: &Global, file: &Path) -> anyhow::Result<Imported> {
    let refuse = |reason: String| -> anyhow::Error {
        BadInput(format!("{}: {reason}; nothing was written", file.display())).into()
    };
    let files = read_archive(file).map_err(|error| refuse(format!("{error:#}")))?;
    let manifest: Value = files
        .get("manifest.json")
        .ok_or_else(|| refuse("no manifest.json: not a spex history export".to_owned()))
        .and_then(|bytes| {
            serde_json::from_slice(bytes).map_err(|error| refuse(format!("manifest.json: {error}")))
        })?;
    if manifest["kind"] != "spex-history-export"
        || manifest["schema"] != crate::ops::export::EXPORT_SCHEMA
    {
        return Err(refuse(format!(
            "not an export this version reads (kind {}, schema {})",
            manifest["kind"], manifest["schema"]
        )));
    }
    let expected = checked_files(&manifest, &files).map_err(refuse)?;
    let harness = manifest["harness"]
        .as_str()
        .and_then(Harness::parse)
        .ok_or_else(|| refuse(format!("unknown harness {}", manifest["harness"])))?;
    let id = manifest["sessionId"].as_str().unwrap_or("");
    let place =
        manifest["place"].as_str().ok_or_else(|| refuse("no place in the manifest".to_owned()))?;
    let place = safe_place(harness, place).map_err(refuse)?;
    let name = place.file_name().and_then(|name| name.to_str()).unwrap_or("");
    let transcript = files
        .get(&format!("transcript/{name}"))
        .ok_or_else(|| refuse(format!("no transcript/{name}")))?;
    if !name.contains(id) || id.is_empty() {
        return Err(refuse(format!("the transcript {name} does not carry the session id {id:?}")));
    }
    // Where its harness finds it on this machine.
    let target = harness_home(harness).map_err(refuse)?.join(&place);
    let unchanged = match std::fs::read(&target) {
        Ok(existing) if existing == *transcript => true,
        Ok(_) => {
            return Err(refuse(format!(
                "{} holds session {id} with other bytes than the archive's transcript/{name}",
                target.display()
            )));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(error) => {
            return Err(error).with_context(|| format!("cannot read {}", target.display()));
        }
    };
    let store = global.root()?.path;
    let provenance = store.join("imports").join(format!("{}-{id}.json", harness.name()));
    if !unchanged {
        crate::files::place(&target, transcript)?;
    }
    // Written after the transcript, and whenever it is missing: an import cut short between the
    // two (or a transcript that was here already) gets its provenance from the next one.
    let recorded = std::fs::symlink_metadata(&provenance).is_ok();
    if !recorded {
        record_provenance(&provenance, &manifest, harness, id, &target)?;
    }
    let kept = expected.iter().filter(|path| path.starts_with("spex/")).count();
    let changed = !unchanged || !recorded;
    Ok(Imported { harness, id: id.to_owned(), target, provenance, changed, kept })
}

/// The archive's files against its manifest: every listed file there, whole (its size and
/// SHA-256), and nothing unlisted; the paths listed, the manifest's own first.
fn checked_files<'a>(
    manifest: &'a Value,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<&'a str>, String> {
    let listed = manifest["files"].as_array().ok_or_else(|| "no file list".to_owned())?;
    let mut expected: Vec<&str> = vec!["manifest.json"];
    for entry in listed {
        let path = entry["path"].as_str().ok_or_else(|| "a file without a path".to_owned())?;
        let bytes = files.get(path).ok_or_else(|| format!("{path} is listed but missing"))?;
        if entry["bytes"].as_u64() != Some(bytes.len() as u64) {
            return Err(format!(
                "{path}: {} bytes, the manifest says {}",
                bytes.len(),
                entry["bytes"]
            ));
        }
        let digest = hex::encode(sha2::Sha256::digest(bytes));
        if entry["sha256"].as_str() != Some(digest.as_str()) {
            return Err(format!(
                "{path}: its SHA-256 is {digest}, the manifest says {}",
                entry["sha256"]
            ));
        }
        expected.push(path);
    }
    if let Some(extra) = files.keys().find(|path| !expected.contains(&path.as_str())) {
        return Err(format!("{extra} is not in the manifest"));
    }
    Ok(expected)
}

/// Where `harness` keeps its transcripts on this machine (its home, as the environment says).
fn harness_home(harness: Harness) -> Result<std::path::PathBuf, String> {
    let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    spex_history::Root::defaults(&env)
        .into_iter()
        .find(|root| root.harness == harness)
        .map(|root| root.dir)
        .ok_or_else(|| "no home for the harness (set HOME)".to_owned())
}

/// Writes where an imported transcript came from (the archive's origin and manifest) and where
/// it was placed, on this device.
fn record_provenance(
    provenance: &Path,
    manifest: &Value,
    harness: Harness,
    id: &str,
    target: &Path,
) -> anyhow::Result<()> {
    let device = spex_history::Device::this_machine();
    let record = json!({
        "schema": crate::ops::export::EXPORT_SCHEMA,
        "harness": harness.name(),
        "sessionId": id,
        "placedAt": target,
        "importedAt": crate::when::stored_ts(jiff::Timestamp::now()),
        "from": manifest["origin"],
        "onto": { "device": device.id, "host": device.host },
        "redacted": manifest["redacted"],
        "manifest": manifest,
    });
    crate::files::place(provenance, &serde_json::to_vec_pretty(&record)?)
}

/// The archive's files by path, read whole (a damaged or truncated archive fails here).
fn read_archive(file: &Path) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let handle = spex_history::open_regular(file)
        .with_context(|| format!("cannot open {}", file.display()))?;
    let decoder = zstd::Decoder::new(handle.take(ARCHIVE_BYTES_MAX))?;
    let mut archive = tar::Archive::new(decoder);
    let mut files = BTreeMap::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            anyhow::bail!("{} is not a plain file", entry.path()?.display());
        }
        let path = entry.path()?.to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        if files.insert(path.clone(), bytes).is_some() {
            anyhow::bail!("{path} is in it twice");
        }
    }
    Ok(files)
}

/// `place` as a relative path under the harness's home: plain names only, under `projects/`
/// (Claude Code) or `sessions/` (Codex), ending in a `.jsonl` file.
fn safe_place(harness: Harness, place: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(place);
    let plain = path.components().all(|part| matches!(part, Component::Normal(_)));
    let top = match harness {
        Harness::ClaudeCode => "projects",
        Harness::Codex => "sessions",
        Harness::OpenCode => {
            return Err("an OpenCode session is rows of OpenCode's database, never a file an \
                        archive places"
                .to_owned());
        }
    };
    if !plain || !path.starts_with(top) || path.extension().is_none_or(|ext| ext != "jsonl") {
        return Err(format!("the place {place:?} is not a transcript path under {top}/"));
    }
    Ok(path)
}
