//! spex in front of the real Claude Code and Codex CLIs, each talking to the scripted model
//! server on loopback (`spex-modelserver`): a person's message goes in through `spex session`,
//! the scripted model makes the agent run `spex session ask --note ...`, and the reply comes back
//! as the session's declaration. OpenCode is not driven by spex: its sessions, as the real CLI
//! writes them into its database, are read by `spex history`, `search` and `usage`.
//!
//! The CLIs are found in `SPEX_AGENT_BIN_DIR` (`.ci/run` installs the pinned versions there
//! with npm). Without them a test says so and passes, unless `SPEX_REQUIRE_AGENTS=1` (set by
//! `.ci/run`), where a missing CLI fails it.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Run, Store, agent_bin};
use serde_json::Value;
use spex_modelserver::{Api, ModelServer, Reply};

/// A store, a scripted model, a worktree and a private home for the harness.
struct World {
    store: Store,
    model: ModelServer,
    claude: Option<PathBuf>,
    codex: Option<PathBuf>,
    opencode: Option<PathBuf>,
}

impl World {
    fn new(harness: &str) -> Option<World> {
        let bin = agent_bin(harness)?;
        let store = Store::new();
        let model = ModelServer::start().expect("the model server starts");
        for dir in ["work", "home", "claude-config", "codex-home", "tmux", "xdg"] {
            std::fs::create_dir_all(store.path(dir)).expect("a directory");
        }
        // A terminal UI's first start asks about onboarding, the API key and trusting the
        // folder; a user has answered those once. The tests answer them in the config.
        let work = store.path("work").to_string_lossy().into_owned();
        let claude_json = serde_json::json!({
            "hasCompletedOnboarding": true, "theme": "dark",
            "customApiKeyResponses": {"approved": ["scripted"], "rejected": []},
            "projects": {work: {"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}},
        });
        std::fs::write(store.path("claude-config/.claude.json"), claude_json.to_string())
            .expect("claude config");
        let config = format!(
            "model = \"scripted-model\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\n\
             name = \"mock\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
             env_key = \"SPEX_TEST_MODEL_KEY\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
            model.url()
        );
        std::fs::write(store.path("codex-home/config.toml"), config).expect("codex config");
        // OpenCode's Anthropic provider, pointed at the scripted model.
        let opencode_json = serde_json::json!({
            "model": "anthropic/claude-sonnet-4-5",
            "provider": {"anthropic": {"options": {
                "baseURL": format!("{}/v1", model.url()), "apiKey": "scripted"}}},
            "autoupdate": false, "share": "disabled",
        });
        std::fs::write(store.path("work/opencode.json"), opencode_json.to_string())
            .expect("opencode config");
        let (claude, codex, opencode) = match harness {
            "claude" => (Some(bin), None, None),
            "opencode" => (None, None, Some(bin)),
            _ => (None, Some(bin), None),
        };
        Some(World { store, model, claude, codex, opencode })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = self.store.command(args);
        command
            .current_dir(self.store.path("work"))
            .env("HOME", self.store.path("home"))
            .env("ANTHROPIC_BASE_URL", self.model.url())
            .env("ANTHROPIC_API_KEY", "scripted")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("CLAUDE_CONFIG_DIR", self.store.path("claude-config"))
            .env("CODEX_HOME", self.store.path("codex-home"))
            .env("SPEX_TEST_MODEL_KEY", "scripted")
            // A tmux server of the test's own.
            .env("TMUX_TMPDIR", self.store.path("tmux"))
            .env_remove("TMUX")
            // OpenCode's data, configuration, cache and state of the test's own.
            .env("XDG_DATA_HOME", self.store.path("xdg/data"))
            .env("XDG_CONFIG_HOME", self.store.path("xdg/config"))
            .env("XDG_CACHE_HOME", self.store.path("xdg/cache"))
            .env("XDG_STATE_HOME", self.store.path("xdg/state"))
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
        if let Some(claude) = &self.claude {
            command.env("SPEX_CLAUDE_CMD", claude);
        }
        if let Some(codex) = &self.codex {
            command.env("SPEX_CODEX_CMD", codex);
        }
        command
    }

    fn run(&self, args: &[&str]) -> Run {
        Run(self.command(args).output().expect("spex runs"))
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let run = self.run(&full);
        run.ok();
        serde_json::from_str(run.stdout().trim()).expect("one JSON document")
    }

    /// The session's declarations (status events), as (status, note).
    fn declarations(&self, id: &str) -> Vec<(String, String)> {
        let timeline = self.json(&["session", "timeline", id]);
        timeline["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|event| event["kind"] == "status")
            .map(|event| {
                (
                    event["status"].as_str().unwrap_or("").to_owned(),
                    event["note"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    fn sent(&self, id: &str) -> Vec<String> {
        let timeline = self.json(&["session", "timeline", id]);
        timeline["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|event| event["kind"] == "sent")
            .map(|event| event["text"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    fn runs(&self, id: &str) -> Vec<Value> {
        self.json(&["runs", "ls", "--session", id])["runs"].as_array().expect("runs").clone()
    }

    fn native_id(&self, id: &str) -> Option<String> {
        let show = self.json(&["session", "show", id]);
        show["record"]["harness_session_id"].as_str().filter(|id| !id.is_empty()).map(str::to_owned)
    }

    /// `spex session drain agent` in the background (its output piped), once the harness it runs
    /// has asked the model.
    fn drain_until_asked(&self) -> std::process::Child {
        let drainer = self
            .command(&["session", "drain", "agent"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spex drain starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.model.main_requests().is_empty() {
            assert!(Instant::now() < deadline, "the harness never asked the model");
            std::thread::sleep(Duration::from_millis(20));
        }
        drainer
    }

    /// The files in the run logs' directory other than the logs (a run's prompt, output or a
    /// pane's environment left behind).
    fn beside_run_logs(&self) -> Vec<String> {
        std::fs::read_dir(self.store.root().join("runs"))
            .expect("the run logs' directory")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.ends_with(".ndjson"))
            .collect()
    }

    /// The `spex usage --by session` row of harness session `key` (`HARNESS:ID`), and the
    /// whole report (for messages).
    fn usage_row(&self, key: &str) -> (Value, Value) {
        let usage = self.json(&["usage", "--by", "session"]);
        let row = usage["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|row| row["key"] == key)
            .unwrap_or_else(|| panic!("{key} in {usage}"))
            .clone();
        (row, usage)
    }

    /// Main-loop requests whose input holds `text`.
    fn requests_with(&self, text: &str) -> usize {
        self.model
            .main_requests()
            .iter()
            .filter(|request| request.texts().iter().any(|t| t.contains(text)))
            .count()
    }
}

/// The agent answers through spex, then ends its turn.
fn answer(note: &str) -> [Reply; 2] {
    [
        Reply::Shell(format!("spex session ask --note {}", shell_quote(note))),
        Reply::Text("I answered through spex.".to_owned()),
    ]
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A person's question reaches the harness, the agent's reply comes back as the session's
/// declaration; a second message resumes the same native session (one transcript, two turns).
fn converses(harness: &str, api: Api) {
    let Some(world) = World::new(harness) else { return };
    world.model.script(api, answer("Deploy to eu-west-1 first."));
    let created =
        world.run(&["session", "new", "--id", "agent", "--harness", harness, "Which region?"]);
    let out = created.ok();
    assert!(out.contains("delivered"), "{out}");
    assert_eq!(
        world.declarations("agent"),
        vec![("asking".to_owned(), "Deploy to eu-west-1 first.".to_owned())]
    );
    // What the harness sent the model: the person's text and the note-reply hint.
    assert!(world.requests_with("Which region?") >= 1);
    assert!(world.requests_with("spex reply channel") >= 1);
    let native = world.native_id("agent").expect("the record names the native session");
    let runs = world.runs("agent");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["outcome"], "ok");
    assert_eq!(runs[0]["purpose"], "launch");
    assert_eq!(runs[0]["native_id"], native.as_str());
    assert!(runs[0]["usage"]["output_tokens"].as_u64().expect("usage recorded") > 0);
    assert!(runs[0]["duration_ms"].as_u64().is_some());
    // The prompt went on the harness's standard input, not on its command line.
    let command = runs[0]["command"].to_string();
    assert!(!command.contains("Which region?"), "{command}");
    let show = world.json(&["session", "show", "agent"]);
    assert_eq!(show["agent"], "waiting for input", "{show}");
    let listed = world.run(&["session", "ls"]);
    assert!(listed.ok().contains("asking · waiting for input"), "{}", listed.stdout());
    assert_eq!(world.json(&["session", "ls"])["sessions"][0]["agent"], "waiting for input");
    // `history ls` links the transcript to the session and names spex's view of the agent.
    let listed = world.json(&["history", "ls"]);
    let row = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|row| row["id"] == native.as_str())
        .unwrap_or_else(|| panic!("{native} is listed: {listed}"));
    assert_eq!(row["spexSession"], "agent", "{listed}");
    assert_eq!(row["agent"], "waiting for input", "{listed}");
    // The harness's own transcript holds the turn.
    let history = world.run(&["history", "show", &native]);
    assert!(history.ok().contains("Which region?"), "{}", history.stdout());

    world.model.script(api, answer("Then eu-central-1."));
    world.run(&["session", "send", "agent", "And after that?"]).ok();
    world.run(&["session", "drain", "agent"]).ok();
    assert_eq!(world.declarations("agent").last().expect("a declaration").1, "Then eu-central-1.");
    assert_eq!(world.native_id("agent").as_deref(), Some(native.as_str()), "the same session");
    let runs = world.runs("agent");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["purpose"], "turn");
    assert_eq!(runs[1]["native_id"], native.as_str());
    let history = world.json(&["history", "show", &native]);
    let said: Vec<&str> = history["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|event| event["kind"] == "user")
        .filter_map(|event| event["text"].as_str())
        .collect();
    assert!(said.iter().any(|text| text.starts_with("Which region?")), "{said:?}");
    assert!(said.iter().any(|text| text.starts_with("And after that?")), "{said:?}");
    // Both turns went to one conversation: the second request carried the first turn.
    let last = world.model.main_requests().last().expect("a request").texts().join("\n");
    assert!(last.contains("Which region?") && last.contains("And after that?"));
    assert_eq!(world.json(&["session", "show", "agent"])["owed"], 0);
    // What it spent, from the transcript the harness wrote: two turns, and each main-loop
    // request's reply counted once, whatever the harness wrote it as.
    let (row, usage) = world.usage_row(&format!("{harness}:{native}"));
    assert_eq!(row["turns"], 2, "{usage}");
    let replies = world.model.main_requests().len() as u64;
    assert_eq!(row["replies"].as_u64(), Some(replies), "{usage}");
    assert!(row["output"].as_u64().expect("output") >= replies, "{usage}");
    assert!(row["input"].as_u64().expect("input") + row["cacheRead"].as_u64().expect("cache") > 0);
    // The model the harness asked for is not in the price table: named, and no cost guessed.
    assert_eq!(row["unpriced"].as_array().map(Vec::len), Some(1), "{usage}");
    assert!(row["cost"].is_null(), "{usage}");
}

#[test]
fn claude_code_answers_through_spex_and_resumes() {
    converses("claude", Api::Anthropic);
}

#[test]
fn codex_answers_through_spex_and_resumes() {
    converses("codex", Api::Responses);
}

/// The model server answers 500: the run fails, the message stays owed and the drain exits 1
/// naming the run; a later drain delivers it once.
fn a_failed_run_leaves_the_message_owed(harness: &str, api: Api) {
    let Some(world) = World::new(harness) else { return };
    world.model.script(api, [Reply::Status(500)]);
    let created = world.run(&["session", "new", "--id", "agent", "--harness", harness, "Status?"]);
    assert_eq!(created.code(), 1, "{}", created.stderr());
    assert!(created.stderr().contains("run "), "{}", created.stderr());
    assert_eq!(world.json(&["session", "show", "agent"])["owed"], 1);
    let failed = world.json(&["runs", "ls", "--failed"])["runs"].as_array().expect("runs").clone();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["outcome"], "failed");
    assert!(failed[0]["error"].as_str().is_some());
    assert_eq!(world.json(&["session", "show", "agent"])["agent"], "failed");

    world.model.script(api, answer("All green."));
    world.run(&["session", "drain", "agent"]).ok();
    assert_eq!(world.json(&["session", "show", "agent"])["owed"], 0);
    assert_eq!(world.declarations("agent"), vec![("asking".to_owned(), "All green.".to_owned())]);
    assert_eq!(world.sent("agent"), vec!["Status?".to_owned()], "sent once");
    // Nothing is owed, so another drain runs nothing.
    world.run(&["session", "drain", "agent"]).ok();
    let runs = world.runs("agent");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["outcome"], "ok");
}

#[test]
fn claude_code_failed_run_leaves_the_message_owed() {
    a_failed_run_leaves_the_message_owed("claude", Api::Anthropic);
}

#[test]
fn codex_failed_run_leaves_the_message_owed() {
    a_failed_run_leaves_the_message_owed("codex", Api::Responses);
}

/// spex is killed with SIGKILL while a keyed message's run is in flight. The harness finishes
/// the turn on its own; the next drain waits for it, sees the turn completed (its hooks), and
/// settles the message without running it again. A retry of the key replays, and nothing is
/// delivered twice.
fn survives_a_killed_drainer(harness: &str, api: Api) {
    let Some(world) = World::new(harness) else { return };
    world.run(&["session", "new", "--id", "agent", "--harness", harness]).ok();
    world.run(&["session", "send", "agent", "Ship it?", "--key", "k1"]).ok();
    let [shell, text] = answer("Shipped.");
    // Long enough for the checks below to see the turn still running on a loaded machine.
    world.model.script(api, [Reply::Delay { ms: 4_000, then: Box::new(shell) }, text]);
    let mut drainer = world.drain_until_asked();
    drainer.kill().expect("SIGKILL");
    drainer.wait().expect("reaped");
    let runs = world.runs("agent");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["outcome"], "running", "the harness outlives its drainer: {runs:?}");
    assert_eq!(world.json(&["session", "show", "agent"])["agent"], "running");

    let drained = world.run(&["session", "drain", "agent"]);
    drained.ok();
    assert_eq!(world.declarations("agent"), vec![("asking".to_owned(), "Shipped.".to_owned())]);
    assert_eq!(world.requests_with("Ship it?"), 2, "one turn: a tool call and its answer");
    assert_eq!(world.json(&["session", "show", "agent"])["owed"], 0);
    let runs = world.runs("agent");
    assert_eq!(runs.len(), 1, "no second run: {runs:?}");
    assert_eq!(runs[0]["outcome"], "ok");
    // Nothing of the cut-off run is left beside the run log.
    assert_eq!(world.beside_run_logs(), Vec::<String>::new());
    let replay = world.run(&["session", "send", "agent", "Ship it?", "--key", "k1"]);
    assert!(replay.ok().contains("replayed"));
    world.run(&["session", "drain", "agent"]).ok();
    assert_eq!(world.runs("agent").len(), 1);
    assert_eq!(world.sent("agent"), vec!["Ship it?".to_owned()]);
}

#[test]
fn claude_code_survives_a_killed_drainer() {
    survives_a_killed_drainer("claude", Api::Anthropic);
}

#[test]
fn codex_survives_a_killed_drainer() {
    survives_a_killed_drainer("codex", Api::Responses);
}

/// `spex session interrupt` stops a running turn: the run ends `stopped`, the drain settles
/// the message (a person stopped it on purpose) and nothing is run again.
fn interrupts_a_running_turn(harness: &str, api: Api) {
    let Some(world) = World::new(harness) else { return };
    world.run(&["session", "new", "--id", "agent", "--harness", harness]).ok();
    world.run(&["session", "send", "agent", "Take your time."]).ok();
    let [shell, text] = answer("Too late.");
    world.model.script(api, [Reply::Delay { ms: 20_000, then: Box::new(shell) }, text]);
    let drainer = world.drain_until_asked();
    let started = Instant::now();
    let interrupted = world.run(&["session", "interrupt", "agent"]);
    assert!(interrupted.ok().contains("interrupted run"), "{}", interrupted.stdout());
    let drained = Run(drainer.wait_with_output().expect("the drain ends"));
    assert!(started.elapsed() < Duration::from_secs(15), "the turn stopped at once");
    assert!(drained.ok().contains("delivered"), "{}", drained.stdout());
    let runs = world.runs("agent");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["outcome"], "stopped", "{runs:?}");
    // Stopped by a person is not a failure: nothing final was declared, so idle unfinished.
    assert_eq!(world.json(&["session", "show", "agent"])["agent"], "idle unfinished");
    assert!(world.json(&["runs", "ls", "--failed"])["runs"].as_array().expect("runs").is_empty());
    assert_eq!(world.json(&["session", "show", "agent"])["owed"], 0);
    assert!(world.declarations("agent").is_empty(), "the agent never answered");
    // Nothing runs now: a second interrupt says so and changes nothing.
    world.run(&["session", "interrupt", "agent"]).ok();
    assert_eq!(world.runs("agent").len(), 1);
}

#[test]
fn claude_code_turn_is_interrupted() {
    interrupts_a_running_turn("claude", Api::Anthropic);
}

#[test]
fn codex_turn_is_interrupted() {
    interrupts_a_running_turn("codex", Api::Responses);
}

/// The tmux server of a world, killed when dropped.
struct TmuxServer<'w>(&'w World);

impl TmuxServer<'_> {
    /// A detached tmux session `agents` in the world's own tmux server, with its environment.
    fn start(world: &World) -> TmuxServer<'_> {
        let command = world.command(&[]);
        let mut tmux = Command::new("tmux");
        tmux.args(["new-session", "-d", "-s", "agents", "-x", "160", "-y", "45"]);
        for (name, value) in command.get_envs() {
            match value {
                Some(value) => tmux.env(name, value),
                None => tmux.env_remove(name),
            };
        }
        let started = tmux.current_dir(world.store.path("work")).status().expect("tmux runs");
        assert!(started.success(), "tmux new-session");
        TmuxServer(world)
    }

    /// What pane `pane` shows.
    fn screen(&self, pane: &str) -> String {
        let output = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", pane])
            .env("TMUX_TMPDIR", self.0.store.path("tmux"))
            .env_remove("TMUX")
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until `pane` shows `text`.
    fn shows(&self, pane: &str, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen(pane);
            if screen.contains(text) {
                return;
            }
            assert!(Instant::now() < deadline, "pane {pane} never showed {text:?}:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TmuxServer<'_> {
    fn drop(&mut self) {
        let _killed = Command::new("tmux")
            .arg("kill-server")
            .env("TMUX_TMPDIR", self.0.store.path("tmux"))
            .env_remove("TMUX")
            .status();
    }
}

/// Waits until `spex session show ID` names the agent's progress `word`.
fn progress_becomes(world: &World, id: &str, word: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let show = world.json(&["session", "show", id]);
        if show["agent"] == word {
            return;
        }
        assert!(Instant::now() < deadline, "the agent never read {word:?}: {show}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The harness's terminal UI in a tmux pane of a private tmux server: spex launches it, pastes
/// each message once the UI shows its input prompt, accepts it when it reached the transcript,
/// and the model's answer shows in the pane. Both messages go to one native conversation.
fn talks_to_a_pane(harness: &str, api: Api) {
    let Some(world) = World::new(harness) else { return };
    let tmux = TmuxServer::start(&world);
    world.model.script(
        api,
        [Reply::Text("Pane answer one.".into()), Reply::Text("Pane answer two.".into())],
    );
    let created = world.run(&[
        "session",
        "new",
        "--id",
        "pane",
        "--harness",
        harness,
        "--pane",
        "tmux:agents",
        "First from the pane test",
    ]);
    assert!(created.ok().contains("delivered"), "{}", created.stdout());
    let show = world.json(&["session", "show", "pane"]);
    let adapter = show["adapter"].as_str().expect("an adapter").to_owned();
    let pane = adapter.strip_prefix(&format!("{harness}:tmux:")).expect("a pane spec").to_owned();
    assert_eq!(show["record"]["launcher"], "pane");
    tmux.shows(&pane, "Pane answer one.");
    // The environment reached the UI (it found the scripted model) through a private file its
    // shell removed, not through tmux's command line.
    assert_eq!(world.beside_run_logs(), Vec::<String>::new());
    progress_becomes(&world, "pane", "waiting for input");
    let native = world.native_id("pane").expect("the record names the native session");
    let history = world.run(&["history", "show", &native]);
    assert!(history.ok().contains("First from the pane test"), "{}", history.stdout());

    world.run(&["session", "send", "pane", "Second from the pane test"]).ok();
    world.run(&["session", "drain", "pane"]).ok();
    tmux.shows(&pane, "Pane answer two.");
    assert_eq!(world.native_id("pane").as_deref(), Some(native.as_str()), "one conversation");
    let history = world.run(&["history", "show", &native]);
    assert!(history.ok().contains("Second from the pane test"), "{}", history.stdout());
    let runs = world.runs("pane");
    assert_eq!(runs.len(), 1, "one launch: {runs:?}");
    assert_eq!(runs[0]["purpose"], "launch");
    assert_eq!(runs[0]["outcome"], "running", "the terminal UI lives on");
    assert_eq!(runs[0]["native_id"], native.as_str());
    assert_eq!(world.json(&["session", "show", "pane"])["owed"], 0);
    let interrupted = world.run(&["session", "interrupt", "pane"]);
    assert!(interrupted.ok().contains("Escape"), "{}", interrupted.stdout());
}

#[test]
fn claude_code_in_a_pane() {
    talks_to_a_pane("claude", Api::Anthropic);
}

#[test]
fn codex_in_a_pane() {
    talks_to_a_pane("codex", Api::Responses);
}

/// `drain --watch` on a harness whose model keeps failing waits longer between tries (each try
/// is a whole agent run) instead of running the agent again every poll.
#[test]
fn a_watching_drain_backs_off_a_failing_harness() {
    let Some(world) = World::new("codex") else { return };
    world.model.script(Api::Responses, std::iter::repeat_n(Reply::Status(500), 50));
    world.run(&["session", "new", "--id", "agent", "--harness", "codex"]).ok();
    world.run(&["session", "send", "agent", "Keep failing"]).ok();
    let mut drainer = world
        .command(&["session", "drain", "agent", "--watch"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spex drain --watch starts");
    std::thread::sleep(Duration::from_secs(6));
    drainer.kill().expect("stopped");
    drainer.wait().expect("reaped");
    let runs = world.runs("agent");
    // Tries at about 0 s, 1 s and 3 s after each failure: three or four runs in six seconds, not
    // one every poll.
    assert!((1..=4).contains(&runs.len()), "{} runs: {runs:?}", runs.len());
    assert!(runs.iter().all(|run| run["outcome"] != "ok"));
    assert_eq!(world.json(&["session", "show", "agent"])["owed"], 1);
}

/// A run that fails before the harness created a conversation (here: no such command) is still
/// listed, the message stays owed, and the reason names what the shell said.
#[test]
fn a_run_that_never_started_a_conversation_is_listed() {
    let store = Store::new();
    let run = Run(store
        .command(&["session", "new", "--id", "agent", "--harness", "claude", "Hello?"])
        .env("SPEX_CLAUDE_CMD", store.path("no-such-claude"))
        .output()
        .expect("spex runs"));
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(run.stderr().contains("not found"), "{}", run.stderr());
    let runs = store.json(&["runs", "ls", "--failed"])["runs"].as_array().expect("runs").clone();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["purpose"], "launch");
    assert_eq!(runs[0]["exit_code"], 127);
    assert_eq!(store.json(&["session", "show", "agent"])["owed"], 1);
    assert_eq!(store.json(&["session", "show", "agent"])["agent"], "failed");

    // A run whose process could not even be spawned (its worktree is gone) is listed from the
    // line written before the spawn.
    let worktree = store.path("gone");
    std::fs::create_dir_all(&worktree).expect("a worktree");
    let worktree_arg = worktree.to_string_lossy().into_owned();
    store
        .run(&[
            "session",
            "new",
            "--id",
            "nowhere",
            "--harness",
            "codex",
            "--worktree",
            &worktree_arg,
        ])
        .ok();
    std::fs::remove_dir(&worktree).expect("the worktree removed");
    store.run(&["session", "send", "nowhere", "Anyone?"]).ok();
    let drained = store.run(&["session", "drain", "nowhere"]);
    assert_eq!(drained.code(), 1, "{}", drained.stderr());
    assert!(drained.stderr().contains("cannot run"), "{}", drained.stderr());
    let runs = store.json(&["runs", "ls", "--session", "nowhere"])["runs"].clone();
    assert_eq!(runs[0]["purpose"], "launch", "{runs}");
    assert_eq!(runs[0]["outcome"], "failed", "{runs}");
    assert!(runs[0]["pid"].is_null(), "{runs}");
}

/// A conversation the real harness had on one device, migrated to another (`spex fleet`,
/// `spex history migrate` through the first device's server), continues there in the same
/// harness: the model is sent the earlier turn, and the new turn lands in the moved transcript.
fn migrated_conversation_resumes(harness: &str, api: Api) {
    use std::io::{BufRead as _, Write as _};
    let Some(world) = World::new(harness) else { return };
    world.model.script(api, answer("Deploy to eu-west-1 first."));
    world.run(&["session", "new", "--id", "agent", "--harness", harness, "Which region?"]).ok();
    let native = world.native_id("agent").expect("the record names the native session");
    let mut serve = world
        .command(&["serve", "--addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spex serve starts");
    let mut line = String::new();
    std::io::BufReader::new(serve.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the URL line");
    let (url, _) = line.trim().split_once("/?token=").expect("the URL");

    // The other device: its own store, home and harness homes (the project at the same path).
    let other = |dir: &str| world.store.path(&format!("other/{dir}"));
    for dir in ["store", "home", "claude-config", "codex-home"] {
        std::fs::create_dir_all(other(dir)).expect("a directory");
    }
    std::fs::copy(
        world.store.path("claude-config/.claude.json"),
        other("claude-config/.claude.json"),
    )
    .expect("claude config");
    std::fs::copy(world.store.path("codex-home/config.toml"), other("codex-home/config.toml"))
        .expect("codex config");
    let on_other = |program: &std::path::Path, args: &[&str]| {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(world.store.path("work"))
            .env("SPEX_ROOT", other("store"))
            .env("SPEX_DEVICE_ID", "0ther000000000002")
            .env("HOME", other("home"))
            .env("CLAUDE_CONFIG_DIR", other("claude-config"))
            .env("CODEX_HOME", other("codex-home"))
            .env("ANTHROPIC_BASE_URL", world.model.url())
            .env("ANTHROPIC_API_KEY", "scripted")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("SPEX_TEST_MODEL_KEY", "scripted")
            .env_remove("SPEX_SESSION_ID");
        command
    };
    let spex = std::path::Path::new(common::SPEX);
    let token = world.store.root().join("serve.token");
    let added = on_other(spex, &["fleet", "add", "first", url, "--token-file"])
        .arg(&token)
        .output()
        .expect("spex runs");
    Run(added).ok();
    let reference = format!("first:{native}");
    let moved =
        Run(on_other(spex, &["history", "migrate", &reference]).output().expect("spex runs")).ok();
    assert!(moved.contains("moved from first"), "{moved}");

    // The harness itself, on the other device, resumes the moved conversation.
    world.model.script(api, [Reply::Text("Then eu-central-1.".to_owned())]);
    let bin = world.claude.as_ref().or(world.codex.as_ref()).expect("the harness");
    let args: Vec<&str> = match harness {
        "claude" => vec!["-p", "--resume", &native],
        _ => vec!["exec", "resume", &native, "--json", "--skip-git-repo-check", "-"],
    };
    let mut child = on_other(bin, &args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the harness starts");
    child.stdin.take().expect("stdin").write_all(b"And after that?").expect("the prompt");
    let output = child.wait_with_output().expect("the harness ran");
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(output.status.success(), "{output:?}");
    let last = world.model.main_requests().last().expect("a request").texts().join("\n");
    assert!(
        last.contains("Which region?") && last.contains("And after that?"),
        "the resumed request carries the moved turn: {last}"
    );
    let shown =
        Run(on_other(spex, &["history", "show", &native]).output().expect("spex runs")).ok();
    assert!(shown.contains("Which region?") && shown.contains("And after that?"), "{shown}");
}

#[test]
fn claude_code_resumes_a_migrated_conversation() {
    migrated_conversation_resumes("claude", Api::Anthropic);
}

#[test]
fn codex_resumes_a_migrated_conversation() {
    migrated_conversation_resumes("codex", Api::Responses);
}

/// `opencode run MESSAGE...` in the world's worktree, against the scripted model; its output.
fn opencode_run(world: &World, args: &[&str]) -> String {
    let bin = world.opencode.as_ref().expect("the OpenCode CLI");
    // The environment spex runs in (the private home, data directories and model server).
    let mut command = Command::new(bin);
    for (key, value) in world.command(&[]).get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    // OpenCode takes its directory from `PWD`, not from the working directory it runs in.
    let work = world.store.path("work");
    command.current_dir(&work).env("PWD", &work).arg("run").args(args);
    command.stdin(std::process::Stdio::null());
    let output = command.output().expect("opencode runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "opencode {args:?}: {}\n{text}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

/// Two turns of one OpenCode session, the first running a shell command, the second carrying a
/// token, written by the real CLI into its database while spex reads it: listed with its state
/// and project, shown as one conversation with the token redacted, searched, and its usage
/// counted once per model call.
#[test]
fn opencode_sessions_are_read_as_the_real_cli_writes_them() {
    let Some(world) = World::new("opencode") else { return };
    world.model.script(
        Api::Anthropic,
        [
            Reply::Shell("echo hello-from-tool".to_owned()),
            Reply::Text("Deploy to eu-west-1 first.".to_owned()),
        ],
    );
    let out = opencode_run(&world, &["Which region do we deploy to first?"]);
    assert!(out.contains("Deploy to eu-west-1 first."), "{out}");
    let listed = world.json(&["history", "ls", "--harness", "opencode"]);
    let rows = listed["sessions"].as_array().expect("sessions");
    assert_eq!(rows.len(), 1, "{listed}");
    let id = rows[0]["id"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("ses_"), "{listed}");
    assert_eq!(rows[0]["harness"], "opencode");
    assert_eq!(rows[0]["format"], "opencode-sqlite");
    assert_eq!(rows[0]["state"], "waiting for input", "{listed}");
    let work = world.store.path("work");
    assert_eq!(rows[0]["project"], work.to_string_lossy().as_ref(), "{listed}");

    // The second turn continues the session while the first was read (its database open in
    // write-ahead-log mode).
    const TOKEN: &str = "ghp_R7x9Qm2LpV4nT8wZ3kY6bH1cJ5dF0gA2sE4u";
    world.model.script(Api::Anthropic, [Reply::Text("Then eu-central-1.".to_owned())]);
    let second = format!("And after that? The deploy key is {TOKEN}");
    opencode_run(&world, &["--session", &id, &second]);
    let shown = world.run(&["history", "show", &id, "--tools"]);
    let text = shown.ok();
    for said in [
        "Which region do we deploy to first?",
        "echo hello-from-tool",
        "Deploy to eu-west-1 first.",
        "And after that? The deploy key is [redacted:github-pat]",
        "Then eu-central-1.",
        &format!("resume: opencode --session {id}"),
    ] {
        assert!(text.contains(said), "{said:?} in {text}");
    }
    assert!(!text.contains(TOKEN), "{text}");
    let events = world.json(&["history", "show", &id]);
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|event| event["kind"].as_str())
        .filter(|kind| ["user", "assistant", "tool-call", "tool-result"].contains(kind))
        .collect();
    assert_eq!(
        kinds,
        ["user", "tool-call", "tool-result", "assistant", "user", "assistant"],
        "{events}"
    );
    let hits = world.json(&["search", "eu-central"]);
    let hit = &hits["hits"][0];
    assert_eq!(hit["source"], "opencode", "{hits}");
    assert_eq!(hit["kind"], "answer", "{hits}");
    assert!(world.json(&["search", TOKEN])["hits"].as_array().is_none_or(Vec::is_empty));

    // Each model call of the main loop counted once; two turns; the model priced.
    let (row, usage) = world.usage_row(&format!("opencode:{id}"));
    assert_eq!(row["turns"], 2, "{usage}");
    let replies = world.model.main_requests().len() as u64;
    assert_eq!(replies, 3);
    assert_eq!(row["replies"].as_u64(), Some(replies), "{usage}");
    assert!(row["output"].as_u64().expect("output") >= replies, "{usage}");
    assert!(row["cost"].as_f64().is_some_and(|cost| cost > 0.0), "{usage}");
}
