//! Finding transcripts: Claude Code's (`<config>/projects/<encoded cwd>/<session id>.jsonl`, the
//! config directory `CLAUDE_CONFIG_DIR`, else `~/.claude`), the Codex CLI's
//! (`<home>/sessions/YYYY/MM/DD/rollout-*.jsonl`, the home `CODEX_HOME`, else `~/.codex`) and
//! OpenCode's sessions (rows of `<data>/opencode.db`, the data directory `$XDG_DATA_HOME/opencode`,
//! else `~/.local/share/opencode`), plus extra roots. Discovery only lists and stats files (and
//! counts an OpenCode session's rows); it never reads a transcript whole.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::event::Harness;

/// A directory transcripts of one harness are found under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    /// The harness that writes there.
    pub harness: Harness,
    /// Claude Code: the config directory (holding `projects/`); Codex: its home (holding
    /// `sessions/`); OpenCode: its data directory (holding `opencode.db`).
    pub dir: PathBuf,
}

impl Root {
    /// The default roots from the environment: `CLAUDE_CONFIG_DIR` or `~/.claude`,
    /// `CODEX_HOME` or `~/.codex`, and `$XDG_DATA_HOME/opencode` or `~/.local/share/opencode`
    /// (each only when set or when `HOME` is).
    pub fn defaults(env: &dyn Fn(&str) -> Option<String>) -> Vec<Root> {
        let home = env("HOME").map(PathBuf::from);
        let mut roots = Vec::new();
        let claude = env("CLAUDE_CONFIG_DIR")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|home| home.join(".claude")));
        if let Some(dir) = claude {
            roots.push(Root { harness: Harness::ClaudeCode, dir });
        }
        let codex = env("CODEX_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|home| home.join(".codex")));
        if let Some(dir) = codex {
            roots.push(Root { harness: Harness::Codex, dir });
        }
        let opencode = env("XDG_DATA_HOME")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|home| home.join(".local/share")))
            .map(|data| data.join("opencode"));
        if let Some(dir) = opencode {
            roots.push(Root { harness: Harness::OpenCode, dir });
        }
        roots
    }
}

/// One transcript file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its harness.
    pub harness: Harness,
    /// Its path (an OpenCode session's locator, `<dir>/opencode.db#<id>`: see `opencode`).
    pub path: PathBuf,
    /// The session id its name gives (Claude Code: the file stem; Codex: the UUID at the end of
    /// `rollout-<time>-<uuid>`; OpenCode: the session row's id).
    pub id: String,
    /// Its size in bytes (an OpenCode session: its rows' data bytes and their count).
    pub size: u64,
    /// Its modification time, in nanoseconds since the epoch (an OpenCode session: its newest
    /// row's update).
    pub modified_ns: i64,
}

/// Every transcript under `roots`, sorted by path. A root that does not exist has none; a file
/// that vanishes while it is listed is left out.
pub fn discover(roots: &[Root]) -> Result<Vec<Found>, Error> {
    let mut found = Vec::new();
    for root in roots {
        match root.harness {
            Harness::ClaudeCode => {
                for project in dirs(&root.dir.join("projects"))? {
                    for path in files(&project, |name| name.ends_with(".jsonl"))? {
                        push(&mut found, Harness::ClaudeCode, path)?;
                    }
                }
            }
            Harness::Codex => {
                let mut pending = vec![root.dir.join("sessions")];
                while let Some(dir) = pending.pop() {
                    pending.extend(dirs(&dir)?);
                    for path in files(&dir, |name| {
                        name.starts_with("rollout-") && name.ends_with(".jsonl")
                    })? {
                        push(&mut found, Harness::Codex, path)?;
                    }
                }
            }
            Harness::OpenCode => {
                found.extend(crate::opencode::list(&root.dir)?.into_iter().map(|session| Found {
                    harness: Harness::OpenCode,
                    path: session.path,
                    id: session.id,
                    size: session.size,
                    modified_ns: session.modified_ns,
                }));
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn push(found: &mut Vec<Found>, harness: Harness, path: PathBuf) -> Result<(), Error> {
    let metadata = match std::fs::metadata(&path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(Error::Io { path, source }),
    };
    let modified_ns = metadata
        .modified()
        .ok()
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |since| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX));
    let stem = path.file_stem().and_then(|stem| stem.to_str()).unwrap_or("").to_owned();
    let id = match harness {
        Harness::ClaudeCode | Harness::OpenCode => stem,
        // rollout-2025-10-29T00-59-38-019a2d7a-41c4-78b1-b7cc-a45d62a89cd5: the last five
        // dash-separated groups are the UUID.
        Harness::Codex => {
            let parts: Vec<&str> = stem.split('-').collect();
            if parts.len() > 6 { parts[parts.len() - 5..].join("-") } else { stem }
        }
    };
    found.push(Found { harness, path, id, size: metadata.len(), modified_ns });
    Ok(())
}

/// The subdirectories of `dir` (none when it does not exist). Links are not followed.
fn dirs(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    entries(dir, |kind, _| kind.is_dir())
}

/// The regular files of `dir` whose name passes `keep` (none when `dir` does not exist).
fn files(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>, Error> {
    entries(dir, |kind, name| kind.is_file() && keep(name))
}

fn entries(
    dir: &Path,
    keep: impl Fn(std::fs::FileType, &str) -> bool,
) -> Result<Vec<PathBuf>, Error> {
    let io = |source| Error::Io { path: dir.to_path_buf(), source };
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(io(error)),
    };
    let mut out = Vec::new();
    for entry in listing {
        let entry = entry.map_err(io)?;
        let Ok(kind) = entry.file_type() else { continue };
        let name = entry.file_name();
        if let Some(name) = name.to_str()
            && keep(kind, name)
        {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The machine transcripts were found on: a stable id (a digest of `/etc/machine-id`, so the raw
/// id is never shown) and the host name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    /// 16 hex digits, stable for the machine (`None` without a machine id).
    pub id: Option<String>,
    /// The host name.
    pub host: Option<String>,
}

/// The environment variable that sets this machine's device id (tests run several "machines" on
/// one).
pub const DEVICE_ID_ENV: &str = "SPEX_DEVICE_ID";

impl Device {
    /// This machine: its id from [`DEVICE_ID_ENV`] when set, else a digest of the machine id.
    pub fn this_machine() -> Device {
        use sha2::Digest as _;
        let set = std::env::var(DEVICE_ID_ENV).ok().filter(|id| !id.trim().is_empty());
        let id = set.map(|id| id.trim().to_owned()).or_else(|| {
            ["/etc/machine-id", "/var/lib/dbus/machine-id"]
                .iter()
                .find_map(|path| std::fs::read_to_string(path).ok())
                .map(|text| text.trim().to_owned())
                .filter(|text| !text.is_empty())
                .map(|text| {
                    let digest = sha2::Sha256::digest(format!("spex-device:{text}").as_bytes());
                    hex::encode(&digest[..8])
                })
        });
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty());
        Device { id, host }
    }
}

/// The git root of a working directory: the nearest ancestor (itself included) holding `.git`,
/// when the directory exists on this machine.
pub fn git_root(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
        .map(Path::to_path_buf)
}
