//! Shared helpers of the CLI's integration tests.

#![allow(dead_code, reason = "each test binary uses a different part of the helpers")]

#[path = "../../../engine/tests/common/corpus.rs"]
pub(crate) mod corpus;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The path of the real `spex` binary.
pub(crate) const SPEX: &str = env!("CARGO_BIN_EXE_spex");

/// Runs the real `spex` binary with `args`, without an inherited seed.
pub(crate) fn spex(args: &[&str]) -> Output {
    Command::new(SPEX).args(args).env_remove("SPEX_SEED").output().expect("the spex binary runs")
}

/// A store root in a temporary directory, and the real binary run against it.
pub(crate) struct Store {
    pub(crate) dir: tempfile::TempDir,
}

impl Store {
    pub(crate) fn new() -> Store {
        Store { dir: tempfile::tempdir().expect("a temporary directory") }
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// A `spex` command against this store, with nothing inherited that would change it.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(SPEX);
        command
            .args(args)
            .env("SPEX_ROOT", self.root())
            .env_remove("SPEX_SESSION_ID")
            .env_remove("SPEX_SEED")
            .env_remove("SPEXCODE_TIMELINE_SEGMENT_BYTES")
            .current_dir(self.dir.path());
        command
    }

    /// Runs `spex args` to completion.
    pub(crate) fn run(&self, args: &[&str]) -> Run {
        Run(self.command(args).output().expect("the spex binary runs"))
    }

    /// Runs `spex args` with `stdin` on its standard input.
    pub(crate) fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Run {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the spex binary starts");
        child.stdin.take().expect("piped stdin").write_all(stdin).expect("stdin is written");
        Run(child.wait_with_output().expect("the spex binary runs"))
    }

    /// Starts `spex args` in the background with stdout piped.
    pub(crate) fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the spex binary starts")
    }

    /// Runs `spex --json args`, expects success, and parses the one JSON document it printed.
    pub(crate) fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let run = self.run(&full);
        run.ok();
        serde_json::from_str(run.stdout().trim()).expect("stdout is one JSON document")
    }

    /// The public events of `id`, as `spex session timeline --json` prints them.
    pub(crate) fn events(&self, id: &str) -> Vec<serde_json::Value> {
        let document = self.json(&["session", "timeline", id]);
        assert_eq!(document["schema"], 1);
        document["events"].as_array().expect("events is an array").clone()
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }
}

/// A finished run, with its three outputs kept apart.
pub(crate) struct Run(pub(crate) Output);

impl Run {
    pub(crate) fn code(&self) -> i32 {
        self.0.status.code().expect("spex exited (not killed)")
    }

    pub(crate) fn stdout(&self) -> String {
        String::from_utf8(self.0.stdout.clone()).expect("stdout is UTF-8")
    }

    pub(crate) fn stderr(&self) -> String {
        String::from_utf8(self.0.stderr.clone()).expect("stderr is UTF-8")
    }

    /// Asserts exit 0 and returns stdout.
    pub(crate) fn ok(&self) -> String {
        assert_eq!(self.code(), 0, "stdout: {}\nstderr: {}", self.stdout(), self.stderr());
        self.stdout()
    }

    /// Asserts exit `code`, an empty stdout and exactly one `spex: error:` line on stderr
    /// containing `needle`.
    pub(crate) fn fails(&self, code: i32, needle: &str) {
        assert_eq!(self.code(), code, "stdout: {}\nstderr: {}", self.stdout(), self.stderr());
        assert_eq!(self.stdout(), "", "nothing on stdout when failing");
        let stderr = self.stderr();
        assert!(stderr.contains(needle), "stderr {stderr:?} should mention {needle:?}");
    }
}

/// Whether `path` exists (tests read real files directly).
pub(crate) fn exists(path: &Path) -> bool {
    path.try_exists().expect("a path can be checked")
}

/// CPU time a process has used, in clock ticks (user + system; 100 a second on Linux).
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    let fields: Vec<&str> =
        stat.rsplit_once(')').expect("a stat line").1.split_whitespace().collect();
    let ticks = |field: usize| fields[field].parse::<u64>().expect("a tick count");
    ticks(11) + ticks(12)
}

/// The installed agent CLI `name` (`claude`, `codex`) from `SPEX_AGENT_BIN_DIR`, or `None` (and
/// why, on stderr) when this machine has none. With `SPEX_REQUIRE_AGENTS=1` (set by `.ci/run`)
/// a missing CLI fails the test instead.
pub(crate) fn agent_bin(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("SPEX_AGENT_BIN_DIR")
        .map(|dir| Path::new(&dir).join(name))
        .filter(|path| path.exists());
    if found.is_none() {
        let why = format!(
            "the {name} CLI is not in SPEX_AGENT_BIN_DIR (.ci/run installs the versions in \
             .ci/agents with npm and sets it to their node_modules/.bin)"
        );
        assert!(std::env::var("SPEX_REQUIRE_AGENTS").as_deref() != Ok("1"), "{why}");
        eprintln!("skipped: {why}");
    }
    found
}
