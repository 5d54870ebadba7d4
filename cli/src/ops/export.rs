//! The export of a harness session (`spex history export`, and an owner's side of `spex history
//! migrate` over HTTP): a tar archive compressed with zstd holding `manifest.json` (schema
//! version, the stable ids, where it came from, and the length and SHA-256 of every other file),
//! the transcript's bytes under `transcript/`, and, when a spex session names the harness
//! session, that session's record and timeline segments under `spex/<id>/`. Every text is
//! redacted as every render is unless `raw`.
//!
//! Crash story: reads only; the caller writes the bytes (whole, beside their place).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::json;
use sha2::Digest as _;
use spex_history::{Found, Identity};

use crate::exit::BadInput;

/// The manifest's schema version.
pub(crate) const EXPORT_SCHEMA: u32 = 1;

/// The zstd level: the default's ratio at the default's speed.
const ZSTD_LEVEL: i32 = 3;

/// Why `transcript` cannot be exported, when it cannot: an OpenCode session is rows of
/// OpenCode's database, which an archive does not carry and an import would have to write.
pub(crate) fn refusal(transcript: &Found) -> Option<String> {
    (transcript.harness == spex_history::Harness::OpenCode).then(|| {
        format!(
            "{} is an OpenCode session, kept as rows of OpenCode's database: export and import \
             carry file transcripts (Claude Code, Codex), not OpenCode's database",
            transcript.id
        )
    })
}

/// One file of the archive: where it goes and its bytes.
struct Entry {
    path: String,
    bytes: Vec<u8>,
}

/// The export of `transcript` (linked to spex session `spex` of `store`, if any): its manifest,
/// and the archive's bytes (a tar compressed with zstd). Redacted unless `raw`.
pub(crate) fn archive(
    store: Option<&spex_engine::Store<faultfs::RealFs>>,
    transcript: &Found,
    spex: Option<&str>,
    raw: bool,
) -> anyhow::Result<(serde_json::Value, Vec<u8>)> {
    let identity = Identity::of_this_machine();
    let shown =
        |text: &str| if raw { text.to_owned() } else { spex_history::redact(text, &identity) };
    if let Some(why) = refusal(transcript) {
        anyhow::bail!(why);
    }
    let (summary, _) = spex_history::summarize(transcript)?;
    let mut entries = Vec::new();
    let name = transcript.path.file_name().map_or_else(
        || format!("{}.jsonl", transcript.id),
        |name| name.to_string_lossy().into_owned(),
    );
    let bytes = std::fs::read(&transcript.path)
        .with_context(|| format!("cannot read {}", transcript.path.display()))?;
    entries.push(Entry {
        path: format!("transcript/{name}"),
        bytes: text_bytes(&bytes, &transcript.path, raw, &shown)?,
    });
    if let Some(spex) = spex
        && let Some(store) = store
    {
        entries.extend(spex_entries(store, spex, raw, &shown)?);
    }
    let device = spex_history::Device::this_machine();
    let meta = &summary.meta;
    let manifest = json!({
        "schema": EXPORT_SCHEMA,
        "kind": "spex-history-export",
        "harness": transcript.harness.name(),
        "format": transcript.harness.format(),
        "sessionId": transcript.id,
        "spexSession": spex,
        "redacted": !raw,
        "origin": {
            "device": device.id,
            "host": device.host.as_deref().map(&shown),
            "path": shown(&transcript.path.display().to_string()),
        },
        // Where the harness keeps it, under its home (`projects/...` or `sessions/...`): where
        // an import places it.
        "place": place(transcript).map(|place| shown(&place)),
        "harnessVersion": meta.version,
        "project": meta.cwd.as_deref().map(&shown),
        "gitBranch": meta.git_branch,
        "model": meta.model,
        "firstTs": summary.digest.first,
        "lastTs": summary.digest.last,
        "exportedAt": crate::when::stored_ts(jiff::Timestamp::now()),
        "files": entries.iter().map(|entry| json!({
            "path": entry.path,
            "bytes": entry.bytes.len(),
            "sha256": hex::encode(sha2::Sha256::digest(&entry.bytes)),
        })).collect::<Vec<_>>(),
    });
    let bytes = archive_bytes(&manifest, &entries).context("cannot build the archive")?;
    Ok((manifest, bytes))
}

/// The files of spex session `spex` as archive entries (`spex/<id>/...`), redacted by `shown`
/// unless `raw`.
fn spex_entries(
    store: &spex_engine::Store<faultfs::RealFs>,
    spex: &str,
    raw: bool,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<Vec<Entry>> {
    let dir = store.layout().session_dir(&spex_engine::SessionId::new(spex)?);
    let mut entries = Vec::new();
    for path in session_files(&dir)? {
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let relative = path.strip_prefix(&dir).unwrap_or(&path).to_string_lossy().into_owned();
        entries.push(Entry {
            path: format!("spex/{spex}/{relative}"),
            bytes: text_bytes(&bytes, &path, raw, shown)?,
        });
    }
    Ok(entries)
}

/// The transcript's path under its harness's home: from the last `projects` (Claude Code) or
/// `sessions` (Codex) directory on.
pub(crate) fn place(transcript: &Found) -> Option<String> {
    let top = match transcript.harness {
        spex_history::Harness::ClaudeCode => "projects",
        spex_history::Harness::Codex => "sessions",
        spex_history::Harness::OpenCode => return None,
    };
    let parts: Vec<&str> =
        transcript.path.iter().map(|part| part.to_str()).collect::<Option<Vec<_>>>()?;
    let at = parts.iter().rposition(|part| *part == top)?;
    Some(parts[at..].join("/"))
}

/// `bytes` as exported: as they are with `raw`, else the text redacted (a file that is not
/// UTF-8 cannot be redacted, and is refused rather than exported as it is).
fn text_bytes(
    bytes: &[u8],
    path: &Path,
    raw: bool,
    shown: &dyn Fn(&str) -> String,
) -> anyhow::Result<Vec<u8>> {
    if raw {
        return Ok(bytes.to_vec());
    }
    let text = std::str::from_utf8(bytes).map_err(|error| {
        BadInput(format!(
            "{} at byte {}: not UTF-8, so it cannot be redacted (--raw exports it as it is)",
            path.display(),
            error.valid_up_to()
        ))
    })?;
    Ok(shown(text).into_bytes())
}

/// The record and timeline segments of a spex session's directory (regular files only, sorted).
fn session_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in [dir.join("session.json")] {
        if std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_file()) {
            files.push(path);
        }
    }
    let timeline = dir.join("timeline");
    if let Ok(entries) = std::fs::read_dir(&timeline) {
        let mut segments: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "ndjson"))
            .collect();
        segments.sort();
        files.extend(segments);
    }
    Ok(files)
}

/// The archive: `manifest.json`, then every entry, as a tar compressed with zstd.
fn archive_bytes(manifest: &serde_json::Value, entries: &[Entry]) -> anyhow::Result<Vec<u8>> {
    let encoder = zstd::Encoder::new(Vec::new(), ZSTD_LEVEL)?;
    let mut archive = tar::Builder::new(encoder);
    append(&mut archive, "manifest.json", &serde_json::to_vec_pretty(manifest)?)?;
    for entry in entries {
        append(&mut archive, &entry.path, &entry.bytes)?;
    }
    Ok(archive.into_inner()?.finish()?)
}

fn append<W: std::io::Write>(
    archive: &mut tar::Builder<W>,
    path: &str,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(0);
    header.set_cksum();
    archive.append_data(&mut header, path, bytes)
}
