pub(crate) mod adapter;
pub(crate) mod demo;
pub(crate) mod doctor;
pub(crate) mod guard;
pub(crate) mod index;
pub(crate) mod internal;
pub(crate) mod search;
pub(crate) mod serve;
pub(crate) mod session;
pub(crate) mod verify;
pub(crate) mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use faultfs::{CrashMode, RealFs};
use spex_engine::layout::{self, SEGMENT_BYTES_ENV};
use spex_engine::{Config, SessionId, Store};

use crate::exit::BadInput;

/// JSON schema version of every `--json` document and stream line `spex` prints.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Overrides how long a command waits for a session's lock before exiting busy (default 10 s).
pub(crate) const LOCK_WAIT_ENV: &str = "SPEX_LOCK_WAIT_MS";

/// Options every command takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Global {
    /// The store root (default: $SPEXCODE_HOME, else ~/.spexcode, + /projects/<project>).
    #[arg(long, global = true, env = "SPEX_ROOT", value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    /// Print JSON on stdout (one document; NDJSON for streams), with a schema version.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

impl Global {
    /// The store root: `--root`/`SPEX_ROOT`, else the default of the current project.
    pub(crate) fn root(&self) -> anyhow::Result<PathBuf> {
        if let Some(root) = &self.root {
            return Ok(root.clone());
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .context("HOME is not set; pass --root DIR or set SPEX_ROOT")?;
        let spexcode_home = std::env::var_os("SPEXCODE_HOME").map(PathBuf::from);
        Ok(layout::default_root(spexcode_home.as_deref(), &home, &project_dir()?))
    }

    /// Opens the store at the root on real files, with the system clock and random ids.
    pub(crate) fn open_store(&self) -> anyhow::Result<Store<RealFs>> {
        let root = self.root()?;
        let segment_bytes = std::env::var(SEGMENT_BYTES_ENV).ok();
        let mut config = Config {
            segment_bytes_max: layout::segment_bytes_from_env(segment_bytes.as_deref()),
            ..Config::default()
        };
        if let Ok(text) = std::env::var(LOCK_WAIT_ENV) {
            config.lock_wait_ms = text.trim().parse().map_err(|_| {
                BadInput(format!("{LOCK_WAIT_ENV}={text:?} is not a number of milliseconds"))
            })?;
        }
        Store::open(
            RealFs,
            &root,
            Arc::new(spex_engine::env::SystemClock),
            Arc::new(spex_engine::env::RandomIds),
            config,
        )
        .with_context(|| format!("cannot open the store at {}", root.display()))
    }
}

/// The project a default root belongs to: the parent of the absolute git common directory (so
/// every worktree of a repository shares one store), or the current directory outside git.
fn project_dir() -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .stderr(std::process::Stdio::null())
        .output();
    if let Ok(output) = output
        && output.status.success()
        && let Ok(text) = String::from_utf8(output.stdout)
        && let Some(parent) = Path::new(text.trim_end()).parent()
    {
        return Ok(parent.to_path_buf());
    }
    Ok(cwd)
}

/// Parses a session id given on the command line (validated before any path is built).
pub(crate) fn session_id(text: &str) -> Result<SessionId, String> {
    SessionId::new(text).map_err(|error| error.to_string())
}

/// Which crash modes a command sweeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    Kill,
    Power,
    All,
}

impl ModeArg {
    /// The crash modes selected.
    pub(crate) fn modes(self) -> &'static [CrashMode] {
        match self {
            ModeArg::Kill => &[CrashMode::ProcessKill],
            ModeArg::Power => &[CrashMode::PowerLoss],
            ModeArg::All => &[CrashMode::ProcessKill, CrashMode::PowerLoss],
        }
    }
}

/// Prints `document` as one JSON line, with the schema version first.
pub(crate) fn print_json(mut document: serde_json::Value) -> anyhow::Result<()> {
    if let Some(map) = document.as_object_mut() {
        let mut versioned = serde_json::Map::new();
        versioned.insert("schema".to_owned(), SCHEMA_VERSION.into());
        versioned.extend(std::mem::take(map));
        document = serde_json::Value::Object(versioned);
    }
    println!("{}", serde_json::to_string(&document)?);
    Ok(())
}

/// `text` with only literal characters: what a tmux pane receives and what human-readable output
/// prints. Every control character but newline
/// and tab (C0, DEL, C1; ESC above all, which could end the bracketed paste and type the rest as
/// keys) is shown as its Unicode control picture (ESC as `␛`, DEL as `␡`) or, for C1, as
/// `\u{..}`; a carriage return is a newline.
pub(crate) fn literal(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            '\r' => "\n".to_owned(),
            '\u{0}'..='\u{1f}' => {
                char::from_u32(0x2400 + c as u32).map_or_else(String::new, String::from)
            }
            '\u{7f}' => "\u{2421}".to_owned(),
            '\u{80}'..='\u{9f}' => format!("\\u{{{:x}}}", c as u32),
            _ => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_literal_characters_reach_a_pane() {
        assert_eq!(literal("a\u{1b}[201~rm -rf ~\r\n"), "a\u{241b}[201~rm -rf ~\n");
        assert_eq!(literal("tab\tnew\nline"), "tab\tnew\nline");
        assert_eq!(literal("\u{3}\u{7f}\u{9b}x"), "\u{2403}\u{2421}\\u{9b}x");
        assert!(literal("\u{1b}\u{9b}\u{7}").chars().all(|c| !c.is_control()));
    }
}
