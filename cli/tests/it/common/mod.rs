//! Shared helpers of the CLI's integration tests.

#![expect(dead_code, reason = "each test binary uses a different part of the helpers")]

#[path = "../../../../engine/tests/it/common/corpus.rs"]
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
            // OpenCode's data directory of the test's own (never the machine's sessions).
            .env("XDG_DATA_HOME", self.dir.path().join("xdg-data"))
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

/// One secret planted in a transcript: its shape's label and the part no surface may show.
#[derive(Clone, Debug)]
pub(crate) struct Planted {
    pub(crate) label: String,
    pub(crate) secret: String,
}

/// Writes a Claude Code and a Codex transcript under `dir` (`claude/`, `codex/`) in which every
/// shape of the shared secret corpus (`history/tests/data/secrets.tsv`) is said by the person and
/// repeated by the agent; the first prompt (the title) and a Codex abort reason hold secrets too.
/// Returns the planted secrets.
pub(crate) fn plant_secrets(dir: &Path) -> Vec<Planted> {
    let corpus = include_str!("../../../../history/tests/data/secrets.tsv");
    let rows: Vec<(String, String, String)> = corpus
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let unescape = |text: &str| text.replace("\\n", "\n");
            (fields[0].to_owned(), unescape(fields[1]), unescape(fields[2]))
        })
        .collect();
    let claude_id = "5ec0e7a1-0000-4000-8000-00000000c1a0";
    let codex_id = "019b5ec0-0000-7000-8000-00000000c0de";
    let projects = dir.join("claude/projects/-work-shop");
    std::fs::create_dir_all(&projects).expect("the Claude Code projects directory");
    let mut claude = String::new();
    let line = |kind: &str, n: usize, content: serde_json::Value| {
        serde_json::json!({
            "type": kind, "sessionId": claude_id, "cwd": "/work/shop", "version": "2.1.0",
            "uuid": format!("u{n}"), "timestamp": format!("2026-11-30T09:{:02}:{:02}.000Z", n / 60, n % 60),
            "message": { "role": kind, "content": content },
        })
        .to_string()
            + "\n"
    };
    for (n, (label, text, _)) in rows.iter().enumerate() {
        claude += &line("user", 2 * n, serde_json::json!(format!("{text}\nstep {label}: use it")));
        let answer =
            serde_json::json!([{ "type": "text", "text": format!("I used {text} for {label}.") }]);
        claude += &line("assistant", 2 * n + 1, answer);
    }
    std::fs::write(projects.join(format!("{claude_id}.jsonl")), claude)
        .expect("the Claude Code transcript");
    let sessions = dir.join("codex/sessions/2026/11/30");
    std::fs::create_dir_all(&sessions).expect("the Codex sessions directory");
    let ts = |n: usize| format!("2026-11-30T10:{:02}:{:02}.000Z", n / 60, n % 60);
    let mut codex = serde_json::json!({
        "timestamp": ts(0), "type": "session_meta",
        "payload": { "id": codex_id, "timestamp": ts(0), "cwd": "/work/api", "cli_version": "0.60.0" },
    })
    .to_string()
        + "\n";
    for (n, (label, text, _)) in rows.iter().enumerate() {
        let said = format!("{text}\nstep {label}: use it");
        let answered = format!("I used {text} for {label}.");
        for (role, kind, body) in
            [("user", "input_text", &said), ("assistant", "output_text", &answered)]
        {
            codex += &(serde_json::json!({
                "timestamp": ts(2 * n + 1), "type": "response_item",
                "payload": { "type": "message", "role": role, "content": [{ "type": kind, "text": body }] },
            })
            .to_string()
                + "\n");
        }
    }
    let (_, last_text, _) = rows.last().expect("a corpus");
    codex += &(serde_json::json!({
        "timestamp": ts(200), "type": "event_msg",
        "payload": { "type": "turn_aborted", "reason": format!("stopped: {last_text}") },
    })
    .to_string()
        + "\n");
    std::fs::write(sessions.join(format!("rollout-2026-11-30T10-00-00-{codex_id}.jsonl")), codex)
        .expect("the Codex transcript");
    rows.into_iter().map(|(label, _, secret)| Planted { label, secret }).collect()
}

/// The first run of 8 characters of `secret` that `shown` holds, if any (a secret shown even in
/// part is a leak).
pub(crate) fn leak<'a>(shown: &str, secret: &'a str) -> Option<&'a str> {
    let chars: Vec<(usize, char)> = secret.char_indices().collect();
    (0..chars.len().saturating_sub(7)).find_map(|at| {
        let end = chars.get(at + 8).map_or(secret.len(), |(end, _)| *end);
        let window = &secret[chars[at].0..end];
        shown.contains(window).then_some(window)
    })
}

/// Queries that would pull a secret into a snippet window: 8 characters of it at a few offsets,
/// and the provider prefixes people search for.
pub(crate) fn secret_queries(planted: &[Planted]) -> Vec<String> {
    let mut queries: Vec<String> =
        ["sk-ant", "api03", "ghp_", "github_pat", "AKIA", "xoxb", "BEGIN", "password", "token"]
            .iter()
            .map(|q| (*q).to_owned())
            .collect();
    for planted in planted {
        let chars: Vec<char> = planted.secret.chars().filter(|c| !c.is_whitespace()).collect();
        for at in [0, chars.len() / 3, chars.len().saturating_sub(8)] {
            queries.push(chars[at..(at + 8).min(chars.len())].iter().collect());
        }
    }
    queries
}

/// Runs `command` to completion, or kills it after `limit` and panics naming `what` (a command
/// that blocks is the failure under test).
pub(crate) fn run_within(mut command: Command, limit: std::time::Duration, what: &str) -> Run {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().expect("the command can be waited for").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Run(child.wait_with_output().expect("the command's output"))
}

/// Makes a FIFO at `path` (with `mkfifo`).
pub(crate) fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// A search hit's snippet (as `--json` and the server give it) with each of its `marks` between
/// `[` and `]`.
pub(crate) fn marked(hit: &serde_json::Value) -> String {
    let chars: Vec<char> = hit["snippet"].as_str().expect("a snippet").chars().collect();
    let mut out = String::new();
    let mut at = 0;
    for mark in hit["marks"].as_array().expect("marks") {
        let start = mark[0].as_u64().expect("a start") as usize;
        let end = mark[1].as_u64().expect("an end") as usize;
        out.extend(&chars[at..start]);
        out.push('[');
        out.extend(&chars[start..end]);
        out.push(']');
        at = end;
    }
    out.extend(&chars[at..]);
    out
}
