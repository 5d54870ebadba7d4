//! The argument types every command shares: the global options and the store they choose, session
//! references (a whole id or a unique prefix), the status vocabulary, `--since` times, and the
//! small value enums several commands take. Commands use these; they never import each other.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use faultfs::{CrashMode, RealFs};
use spex_engine::layout::{self, SEGMENT_BYTES_ENV};
use spex_engine::reply::ReplyChannel;
use spex_engine::{Config, Proposal, SessionId, Status, Store};

use crate::exit::BadInput;
use crate::render::ColorArg;

/// Overrides how long a command waits for a session's lock before exiting busy (default 10 s).
pub(crate) const LOCK_WAIT_ENV: &str = "SPEX_LOCK_WAIT_MS";

/// The environment variable naming the store root.
pub(crate) const ROOT_ENV: &str = "SPEX_ROOT";

/// The environment variable a harness sets to the session its agent runs in.
pub(crate) const SESSION_ENV: &str = "SPEX_SESSION_ID";

/// The environment `spex` reads, with what each does (for the man pages). A variable set but
/// empty counts as unset.
pub(crate) const ENVIRONMENT: [(&str, &str); 17] = [
    (ROOT_ENV, "The store root, as --root (which wins)."),
    (
        "SPEXCODE_HOME",
        "Where the default root lives: $SPEXCODE_HOME/projects/<project> (else ~/.spexcode).",
    ),
    (SESSION_ENV, "The declaring session of ask/done/working (a harness sets it for its agent)."),
    (
        LOCK_WAIT_ENV,
        "How long a command waits for a session's lock before exiting busy (3), in ms (default 10000).",
    ),
    (
        layout::SEGMENT_BYTES_ENV,
        "The size at which a timeline segment rolls over, in bytes (default 4 MiB).",
    ),
    ("CLAUDE_CONFIG_DIR", "Where Claude Code's transcripts are read (default ~/.claude)."),
    ("CODEX_HOME", "Where Codex's transcripts are read (default ~/.codex)."),
    (
        "SPEX_CLAUDE_CMD",
        "The command that runs Claude Code for a harness session (default claude).",
    ),
    ("SPEX_CODEX_CMD", "The command that runs Codex for a harness session (default codex)."),
    (
        "SPEX_TURN_TIMEOUT_MS",
        "How long one agent turn may run before it counts as failed, in ms (default 30 min).",
    ),
    (
        spex_index::TRANSCRIPT_CHUNK_ENV,
        "How many transcript bytes the index reads per step (tests).",
    ),
    (
        "SPEX_SEED",
        "The seed of verify and demo runs when --seed is not given (each run prints its seed).",
    ),
    (
        spex_history::DEVICE_ID_ENV,
        "This machine's device id in exports, imports and the fleet (default: a digest of the machine id).",
    ),
    ("NO_COLOR", "Any value turns colour off when --color is auto."),
    ("TZ", "The zone times are shown in (UTC with --utc)."),
    ("HOME", "Where the default root and the transcripts are looked for."),
    (
        "SPEX_PAGER",
        "The pager of long output on a terminal (then PAGER, then less; empty or cat: none).",
    ),
];

/// Options every command takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Global {
    /// The store root (default: $SPEX_ROOT, else $SPEXCODE_HOME, else ~/.spexcode, +
    /// /projects/<project>; `spex where` prints it). An empty SPEX_ROOT counts as unset.
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    /// Print JSON on stdout (one document; NDJSON for streams), with a schema version; an error
    /// is a JSON document too.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Colour: auto (on a terminal, unless NO_COLOR is set), always or never.
    #[arg(long, global = true, value_enum, default_value_t = ColorArg::Auto, value_name = "WHEN")]
    pub(crate) color: ColorArg,
    /// Print only results and errors (no reports on stderr).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
    /// Never send long output through a pager (by default it goes through `less -FRX`, or
    /// SPEX_PAGER / PAGER, when stdout is a terminal).
    #[arg(long, global = true)]
    pub(crate) no_pager: bool,
    /// Say more on stderr: the store chosen, what each step did (-vv: debug detail).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
}

/// How the store root was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RootSource {
    /// `--root DIR`.
    Flag,
    /// `SPEX_ROOT`.
    Env,
    /// `$SPEXCODE_HOME/projects/<project>`.
    SpexcodeHome,
    /// `~/.spexcode/projects/<project>`.
    Home,
}

impl RootSource {
    /// How to say it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            RootSource::Flag => "--root",
            RootSource::Env => "SPEX_ROOT",
            RootSource::SpexcodeHome => "SPEXCODE_HOME and the current project",
            RootSource::Home => "~/.spexcode and the current project",
        }
    }

    /// Its name under `--json`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RootSource::Flag => "flag",
            RootSource::Env => "env",
            RootSource::SpexcodeHome => "spexcode-home",
            RootSource::Home => "home",
        }
    }
}

/// The store root and how it was chosen.
#[derive(Clone, Debug)]
pub(crate) struct Root {
    pub(crate) path: PathBuf,
    pub(crate) source: RootSource,
    /// The project a default root belongs to.
    pub(crate) project: Option<PathBuf>,
}

impl Global {
    /// Sends the rest of this command's stdout through a pager (see [`crate::render::page`]).
    pub(crate) fn page(&self) {
        crate::render::page(self.json, self.no_pager);
    }

    /// The store root: `--root`/`SPEX_ROOT`, else the default of the current project.
    pub(crate) fn root(&self) -> anyhow::Result<Root> {
        if let Some(root) = &self.root {
            return Ok(Root { path: root.clone(), source: RootSource::Flag, project: None });
        }
        // Set but empty is unset, as a shell's `SPEX_ROOT= spex ...` means.
        if let Some(root) = std::env::var_os(ROOT_ENV).filter(|root| !root.is_empty()) {
            return Ok(Root { path: root.into(), source: RootSource::Env, project: None });
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .context("HOME is not set; pass --root DIR or set SPEX_ROOT")?;
        let spexcode_home = std::env::var_os("SPEXCODE_HOME").map(PathBuf::from);
        let project = project_dir()?;
        let source =
            if spexcode_home.is_some() { RootSource::SpexcodeHome } else { RootSource::Home };
        Ok(Root {
            path: layout::default_root(spexcode_home.as_deref(), &home, &project),
            source,
            project: Some(project),
        })
    }

    /// Opens the store at the root on real files (creating it), with the system clock and
    /// random ids: for the commands that write.
    pub(crate) fn open_store(&self) -> anyhow::Result<Store<RealFs>> {
        let root = self.root()?;
        tracing::info!(root = %root.path.display(), chosen_by = root.source.describe(), "store");
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
        tracing::debug!(
            segment_bytes_max = config.segment_bytes_max,
            lock_wait_ms = config.lock_wait_ms,
            "store settings"
        );
        Store::open(
            RealFs,
            &root.path,
            Arc::new(spex_engine::env::SystemClock),
            Arc::new(spex_engine::env::RandomIds),
            config,
        )
        .with_context(|| format!("cannot open the store at {}", root.path.display()))
    }

    /// The store, if one exists at the root (`None`: nothing was ever written there): for the
    /// commands that only read, which never create one.
    pub(crate) fn existing_store(&self) -> anyhow::Result<Option<Store<RealFs>>> {
        let root = self.root()?;
        let sessions = layout::Layout::new(&root.path).sessions_dir();
        match std::fs::symlink_metadata(&sessions) {
            Ok(_) => self.open_store().map(Some),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                tracing::info!(root = %root.path.display(), "no store there yet");
                Ok(None)
            }
            Err(error) => Err(error).with_context(|| format!("cannot read {}", sessions.display())),
        }
    }

    /// The store a read of one session needs: a missing store is a missing session.
    pub(crate) fn store_for_session(&self, reference: &str) -> anyhow::Result<Store<RealFs>> {
        match self.existing_store()? {
            Some(store) => Ok(store),
            None => {
                let id = SessionId::new(reference)?;
                Err(spex_engine::Error::NoSuchSession { id }.into())
            }
        }
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

/// A text that says something: not empty, not only white space (a note, a message).
pub(crate) fn non_empty(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("it is empty: say something".to_owned());
    }
    Ok(text.to_owned())
}

/// Parses a new session id given on the command line (validated before any path is built).
pub(crate) fn session_id(text: &str) -> Result<SessionId, String> {
    SessionId::new(text).map_err(|error| error.to_string())
}

/// Resolves a session reference: a whole id, or a prefix that only one session's id starts with.
/// An ambiguous prefix is bad input naming the candidates; no match at all is left to the engine
/// (a closed session, or no such session) when the text is a valid id.
pub(crate) fn resolve(store: &Store<RealFs>, reference: &str) -> anyhow::Result<SessionId> {
    // A prefix is held to the rules of a whole id (never empty, never a path).
    let whole = SessionId::new(reference)?;
    let ids = store.session_ids()?;
    if ids.contains(&whole) {
        return Ok(whole);
    }
    let mut matches: Vec<&SessionId> =
        ids.iter().filter(|id| id.as_str().starts_with(reference)).collect();
    matches.sort();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Ok(whole),
        many => {
            let shown: Vec<&str> = many.iter().take(8).map(|id| id.as_str()).collect();
            let more = if many.len() > shown.len() {
                format!(" and {} more", many.len() - shown.len())
            } else {
                String::new()
            };
            Err(BadInput(format!(
                "{reference:?} is the start of {} session ids: {}{more}; type more of the id",
                many.len(),
                shown.join(", ")
            ))
            .into())
        }
    }
}

/// Every status word a filter accepts: the stored names, the display words people read (from the
/// engine's own vocabulary), and `corrupt` (a session whose record cannot be read).
pub(crate) fn status_words() -> Vec<&'static str> {
    use spex_engine::timeline::display_word;
    let mut words: Vec<&'static str> = Status::ALL.iter().map(|status| status.name()).collect();
    let proposals = [None, Some(Proposal::Merge), Some(Proposal::Nothing), Some(Proposal::Close)];
    for status in Status::ALL {
        for proposal in proposals {
            let word = display_word(status, proposal);
            if !words.contains(&word) {
                words.push(word);
            }
        }
    }
    words.push("corrupt");
    words
}

/// The `--status` argument's parser: one of [`status_words`], else a usage error listing them.
pub(crate) fn status_parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(status_words())
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

/// The session index of `store`, refreshed and healed (a damaged index is moved aside and
/// rebuilt, an unwritable one answered from memory, each with a warning on stderr), with the
/// transcript chunk [`spex_index::TRANSCRIPT_CHUNK_ENV`] sets (if it does).
pub(crate) fn open_index(store: &Store<RealFs>) -> anyhow::Result<spex_index::Index> {
    let chunk = match std::env::var(spex_index::TRANSCRIPT_CHUNK_ENV) {
        Ok(text) => Some(text.parse::<u64>().map_err(|_| {
            BadInput(format!(
                "{}={text:?} is not a number of bytes",
                spex_index::TRANSCRIPT_CHUNK_ENV
            ))
        })?),
        Err(_) => None,
    };
    let configure = |index: &mut spex_index::Index| {
        if let Some(bytes) = chunk {
            index.set_transcript_chunk(bytes);
        }
    };
    let started = std::time::Instant::now();
    let (index, healed) = spex_index::Index::open_refreshed(store, &configure)?;
    tracing::debug!(
        ms = started.elapsed().as_millis() as u64,
        "session index opened and refreshed"
    );
    if let Some(healed) = healed {
        eprintln!("spex: warning: {healed}");
    }
    Ok(index)
}

/// The file in the store root that names more transcript roots, one `HARNESS=DIR` a line (as
/// `--source` takes them; `#` starts a comment; a relative DIR is under the store root).
pub(crate) const HISTORY_SOURCES_FILE: &str = "history-sources";

/// Where harness transcripts are looked for: `CLAUDE_CONFIG_DIR` or `~/.claude`, `CODEX_HOME` or
/// `~/.codex`, the roots the store's [`HISTORY_SOURCES_FILE`] names, then `extra`.
pub(crate) fn history_roots(
    global: &Global,
    extra: &[spex_history::Root],
) -> anyhow::Result<Vec<spex_history::Root>> {
    let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let mut roots = spex_history::Root::defaults(&env);
    let store = global.root()?.path;
    let file = store.join(HISTORY_SOURCES_FILE);
    match read_sources(&file) {
        Ok(text) => {
            for (number, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let mut root = parse_source(line).map_err(|reason| {
                    BadInput(format!("{}:{}: {reason}", file.display(), number + 1))
                })?;
                if root.dir.is_relative() {
                    root.dir = store.join(&root.dir);
                }
                roots.push(root);
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        // Not a file of roots at all (a FIFO, a device, something huge): the other roots still
        // answer.
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
            ) =>
        {
            eprintln!("spex: warning: {} is ignored: {error}", file.display());
        }
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", file.display())),
    }
    roots.extend(extra.iter().cloned());
    for root in &roots {
        tracing::debug!(harness = root.harness.name(), dir = %root.dir.display(), "transcript root");
    }
    Ok(roots)
}

/// The longest [`HISTORY_SOURCES_FILE`] read (a few roots a line each; more is not a list of
/// roots).
const HISTORY_SOURCES_BYTES_MAX: u64 = 64 << 10;

/// The text of the history-sources file: a regular file (never waited on when it is a FIFO),
/// at most [`HISTORY_SOURCES_BYTES_MAX`] bytes.
fn read_sources(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let file = spex_history::open_regular(path)?;
    let mut text = String::new();
    file.take(HISTORY_SOURCES_BYTES_MAX + 1).read_to_string(&mut text)?;
    if text.len() as u64 > HISTORY_SOURCES_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("longer than {HISTORY_SOURCES_BYTES_MAX} bytes: not a list of roots"),
        ));
    }
    Ok(text)
}

/// A harness by name (`claude`, `codex` or `opencode`).
pub(crate) fn parse_harness(name: &str) -> Result<spex_history::Harness, String> {
    spex_history::Harness::parse(name)
        .ok_or_else(|| format!("unknown harness {name:?} (expected claude, codex or opencode)"))
}

/// A transcript root: `HARNESS=DIR`.
pub(crate) fn parse_source(text: &str) -> Result<spex_history::Root, String> {
    let (harness, dir) =
        text.split_once('=').ok_or("expected HARNESS=DIR, e.g. codex=/tmp/codex")?;
    if dir.is_empty() {
        return Err("expected a directory after HARNESS=".to_owned());
    }
    Ok(spex_history::Root {
        harness: parse_harness(harness.trim())?,
        dir: PathBuf::from(dir.trim()),
    })
}

/// Where the agent should reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReplyArg {
    Note,
    Terminal,
}

impl ReplyArg {
    pub(crate) fn channel(self) -> ReplyChannel {
        match self {
            ReplyArg::Note => ReplyChannel::Note,
            ReplyArg::Terminal => ReplyChannel::Terminal,
        }
    }
}

/// What a worker proposes to do with its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProposalArg {
    Merge,
    Nothing,
    Close,
}

impl ProposalArg {
    pub(crate) fn proposal(self) -> Proposal {
        match self {
            ProposalArg::Merge => Proposal::Merge,
            ProposalArg::Nothing => Proposal::Nothing,
            ProposalArg::Close => Proposal::Close,
        }
    }
}

/// The declaring session: `--session`, else `SPEX_SESSION_ID`.
#[derive(Debug, clap::Args)]
pub(crate) struct Declarer {
    /// The session declaring (default: SPEX_SESSION_ID, which a harness sets for its agent; empty
    /// counts as unset).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
}

impl Declarer {
    /// The declaring session's id.
    pub(crate) fn id(&self) -> anyhow::Result<SessionId> {
        let from_env = std::env::var(SESSION_ENV).ok().filter(|id| !id.is_empty());
        let text = self.session.as_deref().or(from_env.as_deref()).ok_or_else(|| {
            BadInput(format!(
                "no declaring session: set {SESSION_ENV} (a harness sets it for its agent) or pass --session ID"
            ))
        })?;
        SessionId::new(text).map_err(|error| BadInput(error.to_string()).into())
    }
}

/// The listing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SortArg {
    Activity,
    Created,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_vocabulary_is_the_engines() {
        assert_eq!(
            status_words(),
            [
                "active",
                "idle",
                "awaiting",
                "parked",
                "error",
                "asking",
                "queued",
                "working",
                "done",
                "review",
                "close-pending",
                "corrupt"
            ]
        );
    }
}
