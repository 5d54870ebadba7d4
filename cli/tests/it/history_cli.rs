//! `spex history` through the real binary, with `CLAUDE_CONFIG_DIR` and `CODEX_HOME` pointing at
//! fixture trees written from the formats' public descriptions.

#![expect(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

use crate::common;

use std::path::PathBuf;

use common::Store;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures")
}

/// `spex args` with the fixture trees as the harnesses' homes (and no real home to find).
fn history(store: &Store, args: &[&str]) -> common::Run {
    let output = store
        .command(args)
        .env("CLAUDE_CONFIG_DIR", fixtures().join("claude"))
        .env("CODEX_HOME", fixtures().join("codex"))
        .env("HOME", store.dir.path())
        .env("TZ", "UTC")
        .output()
        .unwrap();
    common::Run(output)
}

/// `spex args` (exit 0 asserted, stdout returned) with the transcript trees under `homes` as the
/// harnesses' homes.
fn in_homes(store: &Store, homes: &std::path::Path, args: &[&str]) -> String {
    let output = store
        .command(args)
        .env("CLAUDE_CONFIG_DIR", homes.join("claude"))
        .env("CODEX_HOME", homes.join("codex"))
        .env("HOME", store.dir.path())
        .output()
        .unwrap();
    common::Run(output).ok()
}

#[test]
fn history_lists_every_harness_session_by_last_activity() {
    let store = Store::new();
    let text = history(&store, &["history", "ls"]).ok();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("ID") && lines[0].contains("HARNESS"), "{text}");
    // The Codex session's last person message (10:06) is later than Claude Code's (09:31).
    assert!(lines[1].starts_with("019a") && lines[1].contains("codex"), "{text}");
    assert!(lines[2].starts_with("7c1e") && lines[2].contains("claude"), "{text}");
    let document: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "history", "ls"]).ok()).unwrap();
    let sessions = document["sessions"].as_array().unwrap();
    assert_eq!(sessions[0]["lastActivity"], "2026-11-30T10:06:00.000Z");
    assert_eq!(sessions[0]["harnessVersion"], "0.58.0");
    assert_eq!(sessions[0]["format"], "codex-rollout-jsonl");
    assert_eq!(sessions[1]["format"], "claude-code-jsonl");
    assert_eq!(sessions[1]["project"], "/home/dev/shop");
    assert_eq!(sessions[1]["unknown"]["file-history-snapshot"], 1, "unknown kinds are counted");
    // Where each stands: the Codex turn was interrupted by the person (their move is next); the
    // Claude Code session ends on a person's message nobody answered, long ago.
    assert_eq!(sessions[0]["state"], "waiting for input");
    assert_eq!(sessions[1]["state"], "unfinished");
    assert!(sessions[0]["device"]["id"].as_str().is_none_or(|id| id.len() == 16));
    let only: serde_json::Value = serde_json::from_str(
        &history(&store, &["--json", "history", "ls", "--harness", "claude"]).ok(),
    )
    .unwrap();
    assert_eq!(only["sessions"].as_array().unwrap().len(), 1);
}

#[test]
fn history_show_renders_the_conversation_redacted_by_default() {
    let store = Store::new();
    let text = history(&store, &["history", "show", "7c1e"]).ok();
    // Each message: its UTC time (the test's TZ), who, then the text indented under the heading.
    assert!(
        text.contains("09:00:05Z  you\n           The checkout total is off by a cent."),
        "{text}"
    );
    assert!(text.contains("09:01:00Z  agent\n           The total used Math.round"), "{text}");
    assert!(text.contains("[redacted:anthropic-api-key]"), "{text}");
    assert!(!text.contains("sk-ant-api03"), "the planted key never shows: {text}");
    assert!(text.contains("Mail the diff to [email]"), "{text}");
    // Explicitly unredacted.
    let raw = history(&store, &["history", "show", "7c1e", "--no-redact"]).ok();
    assert!(raw.contains("sk-ant-api03-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LzXcVbNm"), "{raw}");
    // Tools only when asked; JSON names each event's kind and transcript line.
    let tools = history(&store, &["history", "show", "019a", "--tools"]).ok();
    assert!(tools.contains("· shell cargo test pool"), "{tools}");
    assert!(!history(&store, &["history", "show", "019a"]).ok().contains("cargo test"));
    let document: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "history", "show", "019a"]).ok())
            .unwrap();
    let answer = document["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["kind"] == "assistant")
        .unwrap();
    assert_eq!(answer["line"], 14);
    assert!(answer["text"].as_str().unwrap().starts_with("The database pool holds 4"));
    let user =
        document["events"].as_array().unwrap().iter().rfind(|e| e["kind"] == "user").unwrap();
    assert_eq!(
        user["text"],
        "Deploy it with https://deploy:[redacted:password]@ci.example.com/hook"
    );
}

#[test]
fn history_names_what_it_cannot_find() {
    let store = Store::new();
    history(&store, &["history", "show", "ffff"]).fails(1, "`spex history ls` lists them");
    let run = history(&store, &["history", "ls", "--source", "codex"]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    // An extra root is searched too; with no harness homes at all, the listing says where it looked.
    let empty = store
        .command(&["history", "ls"])
        .env("HOME", store.dir.path())
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("CODEX_HOME")
        .output()
        .unwrap();
    let empty = common::Run(empty);
    assert_eq!(empty.ok(), "");
    assert!(empty.stderr().contains("no harness sessions found"), "{}", empty.stderr());
    let extra = format!("codex={}", fixtures().join("codex").display());
    let found = store
        .command(&["history", "ls", "--source", &extra])
        .env("HOME", store.dir.path())
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("CODEX_HOME")
        .output()
        .unwrap();
    assert!(String::from_utf8(found.stdout).unwrap().contains("019a"));
}

#[test]
fn a_spex_session_links_to_its_transcript_and_interleaves_it() {
    let store = Store::new();
    history(&store, &["session", "new", "--id", "w"]).ok();
    // The existing spex records the harness and its thread id in the record at launch.
    let record = store.root().join("sessions/w/session.json");
    let text = std::fs::read_to_string(&record).unwrap();
    let text = text.replace("\"harness\": \"\"", "\"harness\": \"codex\"").replace(
        "\"harness_session_id\": \"\"",
        "\"harness_session_id\": \"019a2d7a-41c4-78b1-b7cc-a45d62a89cd5\"",
    );
    std::fs::write(&record, text).unwrap();
    history(&store, &["session", "send", "w", "check the pool too"]).ok();
    let show = history(&store, &["session", "show", "w"]).ok();
    assert!(show.contains("transcript codex 019a2d7a-41c4-78b1-b7cc-a45d62a89cd5 ("), "{show}");
    let document: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "session", "show", "w"]).ok()).unwrap();
    assert!(document["transcript"]["path"].as_str().unwrap().ends_with(".jsonl"));
    let text = history(&store, &["session", "timeline", "w", "--with-transcript", "--utc"]).ok();
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle:?} in {text}"));
    // By time: the transcript's prompt, the agent's answer there, then the later spex message.
    assert!(at("you · in codex") < at("w · in codex"), "{text}");
    assert!(at("The database pool holds 4") < at("check the pool too"), "{text}");
    assert!(text.contains("[redacted:password]"), "{text}");
    // The history listing names the link; once the spex session declares its work done, the
    // harness session reads as finished (never as idle).
    let listed: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "history", "ls"]).ok()).unwrap();
    assert_eq!(listed["sessions"][0]["spexSession"], "w");
    assert_eq!(listed["sessions"][0]["state"], "waiting for input");
    let done = store
        .command(&["session", "done", "--propose", "merge", "--note", "raised the pool"])
        .env("SPEX_SESSION_ID", "w")
        .output()
        .unwrap();
    assert!(done.status.success());
    let listed: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "history", "ls"]).ok()).unwrap();
    assert_eq!(listed["sessions"][0]["state"], "finished");
    // Without a link, the timeline says why and shows the session alone.
    history(&store, &["session", "new", "--id", "plain"]).ok();
    let run = history(&store, &["session", "timeline", "plain", "--with-transcript"]);
    run.ok();
    assert!(run.stderr().contains("names no harness session"), "{}", run.stderr());
}

#[test]
fn search_finds_what_only_an_agent_answered() {
    let store = Store::new();
    // No store yet, but transcripts: the search builds the index and finds what they say.
    let run = history(&store, &["search", "banker's"]);
    let text = run.ok();
    let line = text.lines().find(|line| line.contains("banker's rounding")).unwrap();
    let carets = text.lines().skip_while(|l| *l != line).nth(1).unwrap();
    // The carets stand under the match (columns: every character here is one wide).
    let at = line[..line.find("banker's").unwrap()].chars().count();
    assert_eq!(carets.find('^'), Some(at), "{text}");
    assert!(carets.trim_end().ends_with(" ^^^^^^^^"), "{text}");
    assert!(store.root().join("index.sqlite").exists(), "the index was built");
    let refreshed = history(&store, &["index", "refresh"]).ok();
    assert!(refreshed.contains("2 transcripts: 0 read"), "{refreshed}");
    let hits: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "search", "banker's rounding"]).ok())
            .unwrap();
    let hit = &hits["hits"][0];
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1, "{hits}");
    assert_eq!((hit["source"].as_str(), hit["side"].as_str()), (Some("claude"), Some("agent")));
    assert_eq!((hit["kind"].as_str(), hit["line"].as_u64()), (Some("answer"), Some(9)));
    // A person's prompt is found too, its planted key redacted in the snippet.
    let hits: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "search", "pricing API"]).ok()).unwrap();
    let snippet = hits["hits"][0]["snippet"].as_str().unwrap();
    assert_eq!(hits["hits"][0]["side"], "person");
    assert!(!snippet.contains("sk-ant-api03"), "{snippet}");
    // Filters: another harness, another project.
    let none: serde_json::Value = serde_json::from_str(
        &history(&store, &["--json", "search", "banker's", "--harness", "codex"]).ok(),
    )
    .unwrap();
    assert_eq!(none["hits"], serde_json::json!([]));
    let none: serde_json::Value = serde_json::from_str(
        &history(&store, &["--json", "search", "banker's", "--project", "/home/dev/api"]).ok(),
    )
    .unwrap();
    assert_eq!(none["hits"], serde_json::json!([]));
    // An unchanged transcript is not read again.
    let again = history(&store, &["index", "refresh"]).ok();
    assert!(again.contains("2 transcripts: 0 read"), "{again}");
}

/// Copies the fixture trees into `dir` (so a test can append to them).
fn copy_fixtures(dir: &std::path::Path) {
    for entry in walk(&fixtures()) {
        let target = dir.join(entry.strip_prefix(fixtures()).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &target).unwrap();
    }
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { files.extend(walk(&path)) } else { files.push(path) }
    }
    files
}

/// `spex --json history ls` with the harness homes under `homes`, as JSON sessions.
fn listed(store: &Store, homes: &std::path::Path) -> Vec<serde_json::Value> {
    let output = store
        .command(&["--json", "history", "ls"])
        .env("CLAUDE_CONFIG_DIR", homes.join("claude"))
        .env("CODEX_HOME", homes.join("codex"))
        .env("HOME", store.dir.path())
        .output()
        .unwrap();
    let text = common::Run(output).ok();
    let document: serde_json::Value = serde_json::from_str(&text).unwrap();
    document["sessions"].as_array().unwrap().clone()
}

#[test]
fn history_ls_reads_through_the_index_once_a_store_exists() {
    let store = Store::new();
    let homes = store.dir.path().join("homes");
    copy_fixtures(&homes);
    // Without a store: each transcript read whole (nothing created).
    let whole = listed(&store, &homes);
    assert!(!store.root().exists(), "a listing creates no store");
    // With one: through the index, to the same listing.
    store.run(&["session", "new", "--id", "x"]).ok();
    let indexed = listed(&store, &homes);
    assert!(store.root().join("index.sqlite").exists());
    assert_eq!(indexed, whole, "the index lists what a whole read lists");
    // One line appended: folded from the watermark, and the listing follows.
    let codex = walk(&homes.join("codex")).remove(0);
    let mut file = std::fs::OpenOptions::new().append(true).open(&codex).unwrap();
    use std::io::Write as _;
    writeln!(
        file,
        r#"{{"timestamp":"2026-11-30T10:08:00.000Z","type":"response_item","payload":{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"Deployed."}}]}}}}"#
    )
    .unwrap();
    drop(file);
    let grown = listed(&store, &homes);
    let codex_row = grown.iter().find(|s| s["harness"] == "codex").unwrap();
    let before = whole.iter().find(|s| s["harness"] == "codex").unwrap();
    assert_eq!(
        codex_row["counts"]["assistant"],
        before["counts"]["assistant"].as_u64().unwrap() + 1
    );
    assert_eq!(codex_row["last"], "2026-11-30T10:08:00.000Z");
    assert_eq!(codex_row["state"], "waiting for input");
    // A spex session naming a harness session with no transcript: listed, degraded, not
    // guessed.
    let record = store.root().join("sessions/x/session.json");
    let text = std::fs::read_to_string(&record).unwrap();
    let text = text.replace("\"harness\": \"\"", "\"harness\": \"claude\"").replace(
        "\"harness_session_id\": \"\"",
        "\"harness_session_id\": \"0000dead-0000-4000-8000-000000000000\"",
    );
    std::fs::write(&record, text).unwrap();
    let with_missing = listed(&store, &homes);
    let missing = with_missing.iter().find(|s| s["id"] == "0000dead-0000-4000-8000-000000000000");
    let missing = missing.unwrap_or_else(|| panic!("{with_missing:?}"));
    assert_eq!(missing["state"], "degraded (no transcript found)");
    assert_eq!(missing["spexSession"], "x");
}

#[test]
fn the_store_names_more_transcript_roots() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "x"]).ok();
    let homes = store.dir.path().join("homes");
    copy_fixtures(&homes);
    let elsewhere = store.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(homes.join("codex"), elsewhere.join("codex")).unwrap();
    assert_eq!(listed(&store, &homes).len(), 1, "only Claude Code under the homes");
    let sources = store.root().join("history-sources");
    std::fs::write(
        &sources,
        format!(
            "# more transcripts\ncodex={}  # a second machine's copy\n",
            elsewhere.join("codex").display()
        ),
    )
    .unwrap();
    let both = listed(&store, &homes);
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(both[0]["harness"], "codex");
    std::fs::write(&sources, "codex /tmp/x\n").unwrap();
    let run = store
        .command(&["history", "ls"])
        .env("CLAUDE_CONFIG_DIR", homes.join("claude"))
        .env("CODEX_HOME", homes.join("codex"))
        .output()
        .unwrap();
    let run = common::Run(run);
    assert_eq!(run.code(), 2);
    assert!(run.stderr().contains("history-sources:1: expected HARNESS=DIR"), "{}", run.stderr());
}

#[test]
fn the_watch_stream_carries_history_sessions() {
    use std::io::{BufRead as _, Write as _};
    let store = Store::new();
    store.run(&["session", "new", "--id", "x"]).ok();
    let homes = store.dir.path().join("homes");
    copy_fixtures(&homes);
    // The spex session names the Codex session and declares its work done: that history
    // session reads as finished, linked.
    let record = store.root().join("sessions/x/session.json");
    let text = std::fs::read_to_string(&record).unwrap();
    let text = text.replace("\"harness\": \"\"", "\"harness\": \"codex\"").replace(
        "\"harness_session_id\": \"\"",
        "\"harness_session_id\": \"019a2d7a-41c4-78b1-b7cc-a45d62a89cd5\"",
    );
    std::fs::write(&record, text).unwrap();
    let done = store
        .command(&["session", "done", "--propose", "merge", "--note", "deployed"])
        .env("SPEX_SESSION_ID", "x")
        .output()
        .unwrap();
    assert!(done.status.success());
    let mut child = store
        .command(&["--json", "watch", "--interval-ms", "100"])
        .env("CLAUDE_CONFIG_DIR", homes.join("claude"))
        .env("CODEX_HOME", homes.join("codex"))
        .env("HOME", store.dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(serde_json::from_str::<serde_json::Value>(&line).unwrap()).is_err() {
                return;
            }
        }
    });
    let wait = std::time::Duration::from_secs(30);
    let reset = received.recv_timeout(wait).unwrap();
    assert_eq!(reset["type"], "reset");
    let history = reset["history"].as_array().unwrap();
    assert_eq!(history.len(), 2, "{reset}");
    assert_eq!(history[0]["harness"], "codex");
    assert_eq!(history[0]["state"], "finished");
    assert_eq!(history[0]["spexSession"], "x");
    // A turn in progress in a transcript copied a moment ago: running.
    assert_eq!(history[1]["state"], "running");
    assert_eq!(history[1]["spexSession"], serde_json::Value::Null);
    // Redacted as every surface: the Claude Code session's title names an API key.
    assert!(reset.to_string().contains("[redacted:"), "{reset}");
    assert!(!reset.to_string().contains("sk-ant-api03"), "{reset}");
    // A line appended to a transcript: an update of its history session.
    let codex = walk(&homes.join("codex")).remove(0);
    let mut file = std::fs::OpenOptions::new().append(true).open(&codex).unwrap();
    writeln!(
        file,
        r#"{{"timestamp":"2026-11-30T10:09:00.000Z","type":"response_item","payload":{{"type":"message","role":"user","content":[{{"type":"input_text","text":"and now the docs"}}]}}}}"#
    )
    .unwrap();
    drop(file);
    let mut version = reset["version"].as_i64().unwrap();
    let update = loop {
        let value = received.recv_timeout(wait).unwrap();
        assert!(value["version"].as_i64().unwrap() > version, "versions increase: {value}");
        version = value["version"].as_i64().unwrap();
        if value["type"] == "update" && value.get("history").is_some() {
            break value;
        }
    };
    assert_eq!(update["history"]["harness"], "codex");
    assert_eq!(update["history"]["lastActivity"], "2026-11-30T10:09:00.000Z");
    // The transcript removed: a removal of its history session.
    std::fs::remove_file(&codex).unwrap();
    let removal = loop {
        let value = received.recv_timeout(wait).unwrap();
        if value["type"] == "remove" && value.get("history").is_some() {
            break value;
        }
    };
    assert_eq!(removal["history"]["id"], update["history"]["id"]);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn search_lists_sessions_whose_id_matches() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "payments-migration"]).ok();
    store.run(&["session", "send", "payments-migration", "start with the ledger"]).ok();
    let document: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "search", "PAYMENTS"]).ok()).unwrap();
    let hits = document["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{document}");
    assert_eq!(hits[0]["kind"], "session");
    assert_eq!(hits[0]["match"], "listing");
    assert_eq!(hits[0]["source"], "spex");
    assert_eq!(common::marked(&hits[0]), "[payments]-migration");
    // A text hit names the session already: no listing hit beside it.
    let document: serde_json::Value =
        serde_json::from_str(&history(&store, &["--json", "search", "ledger"]).ok()).unwrap();
    assert_eq!(document["hits"].as_array().unwrap().len(), 1);
    assert_eq!(document["hits"][0]["kind"], "said");
}

/// Every shape of the secret corpus, planted in both harnesses' transcripts, never appears on a
/// CLI surface: search hits (whatever the query pulls into the window, text and JSON), the
/// listing (titles, states with an abort reason), the conversations.
#[test]
fn planted_secrets_never_appear_on_any_cli_surface() {
    let store = Store::new();
    let homes = tempfile::tempdir().unwrap();
    let planted = common::plant_secrets(homes.path());
    let run = |args: &[&str]| in_homes(&store, homes.path(), args);
    store.run(&["session", "new", "--id", "w"]).ok();
    let mut shown = vec![
        run(&["--json", "history", "ls"]),
        run(&["history", "ls"]),
        run(&["history", "show", "5ec0"]),
        run(&["--json", "history", "show", "019b"]),
        run(&["history", "show", "019b"]),
    ];
    assert!(shown[0].contains("aborted") || shown[0].contains("waiting"), "{}", shown[0]);
    let queries = common::secret_queries(&planted);
    for (n, query) in queries.iter().enumerate() {
        // JSON for every query; the text form for a share of them.
        // The query echoed back is the caller's own text, not what the store shows.
        let mut hits: serde_json::Value =
            serde_json::from_str(&run(&["--json", "search", "--limit", "100", "--", query]))
                .unwrap();
        hits.as_object_mut().unwrap().remove("query");
        shown.push(hits.to_string());
        if n % 5 == 0 {
            shown.push(run(&["search", "--limit", "100", "--", query]));
        }
    }
    let hits = run(&["--json", "search", "step", "--limit", "200"]);
    assert!(hits.matches("\"snippet\"").count() >= 40, "the planted texts are found: {hits}");
    for text in &shown {
        for planted in &planted {
            if let Some(window) = common::leak(text, &planted.secret) {
                panic!("{}: {window:?} is shown: {text}", planted.label);
            }
        }
    }
    // The index itself holds none of it, and is private to its owner.
    let index = std::fs::read(store.root().join("index.sqlite")).unwrap();
    let index = String::from_utf8_lossy(&index);
    for planted in &planted {
        assert!(
            common::leak(&index, &planted.secret).is_none(),
            "{} is in the index",
            planted.label
        );
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(store.root().join("index.sqlite")).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "index.sqlite is 0600: {mode:o}");
}

/// A FIFO, or a link to an endless device, as the history-sources file or as a transcript
/// blocks nothing: each is ignored with a warning, and the other roots still answer.
#[test]
fn special_files_among_the_history_sources_block_nothing() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    let sources = store.root().join("history-sources");
    let limit = std::time::Duration::from_secs(20);
    let projects = tempfile::tempdir().unwrap();
    let fifo_transcript =
        projects.path().join("projects/-x/5ec0e7a1-0000-4000-8000-00000000f1f0.jsonl");
    std::fs::create_dir_all(fifo_transcript.parent().unwrap()).unwrap();
    common::mkfifo(&fifo_transcript);
    for (name, make) in [
        (
            "fifo",
            Box::new(|path: &std::path::Path| common::mkfifo(path))
                as Box<dyn Fn(&std::path::Path)>,
        ),
        (
            "endless",
            Box::new(|path: &std::path::Path| {
                std::os::unix::fs::symlink("/dev/zero", path).unwrap()
            }),
        ),
        (
            "fifo transcript",
            Box::new(|path: &std::path::Path| {
                std::fs::write(path, format!("claude={}\n", projects.path().display())).unwrap();
            }),
        ),
    ] {
        let _ = std::fs::remove_file(&sources);
        make(&sources);
        for args in [
            &["--json", "history", "ls"][..],
            &["index", "refresh"][..],
            &["--json", "search", "anything"][..],
        ] {
            let mut command = store.command(args);
            command
                .env("CLAUDE_CONFIG_DIR", fixtures().join("claude"))
                .env("CODEX_HOME", fixtures().join("codex"))
                .env("HOME", store.dir.path());
            let run =
                common::run_within(command, limit, &format!("{name}: spex {}", args.join(" ")));
            run.ok();
            if name != "fifo transcript" {
                assert!(
                    run.stderr().contains("history-sources is ignored"),
                    "{name}: {}",
                    run.stderr()
                );
            }
        }
        // The fixtures' sessions are still listed.
        let mut command = store.command(&["--json", "history", "ls"]);
        command
            .env("CLAUDE_CONFIG_DIR", fixtures().join("claude"))
            .env("CODEX_HOME", fixtures().join("codex"));
        let listed: serde_json::Value =
            serde_json::from_str(&common::run_within(command, limit, name).ok()).unwrap();
        assert!(listed["sessions"].as_array().unwrap().len() >= 2, "{name}: {listed}");
    }
}

/// `history ls --harness X` prints prefixes told apart from every harness session, not only the
/// rows shown: each one typed back to `history show` opens its own row's conversation.
#[test]
fn history_prefixes_name_their_own_row_under_a_harness_filter() {
    let store = Store::new();
    let homes = tempfile::tempdir().unwrap();
    let claude_id = "abcd1111-0000-4000-8000-000000000001";
    let codex_id = "abcd2222-0000-7000-8000-000000000002";
    let project = homes.path().join("claude/projects/-work");
    std::fs::create_dir_all(&project).unwrap();
    let claude = serde_json::json!({
        "type": "user", "sessionId": claude_id, "cwd": "/work", "uuid": "u1",
        "timestamp": "2026-11-30T09:00:00.000Z", "message": { "role": "user", "content": "from claude" },
    });
    std::fs::write(project.join(format!("{claude_id}.jsonl")), format!("{claude}\n")).unwrap();
    let sessions = homes.path().join("codex/sessions/2026/11/30");
    std::fs::create_dir_all(&sessions).unwrap();
    let meta = serde_json::json!({
        "timestamp": "2026-11-30T10:00:00.000Z", "type": "session_meta",
        "payload": { "id": codex_id, "timestamp": "2026-11-30T10:00:00.000Z", "cwd": "/work" },
    });
    let said = serde_json::json!({
        "timestamp": "2026-11-30T10:00:01.000Z", "type": "response_item",
        "payload": { "type": "message", "role": "user", "content": [{ "type": "input_text", "text": "from codex" }] },
    });
    std::fs::write(
        sessions.join(format!("rollout-2026-11-30T10-00-00-{codex_id}.jsonl")),
        format!("{meta}\n{said}\n"),
    )
    .unwrap();
    let run = |args: &[&str]| in_homes(&store, homes.path(), args);
    for (harness, id, said) in
        [("codex", codex_id, "from codex"), ("claude", claude_id, "from claude")]
    {
        let text = run(&["history", "ls", "--harness", harness]);
        let printed = text.lines().nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
        assert!(id.starts_with(&printed) && printed.len() >= 5, "{harness}: {text}");
        let shown = run(&["history", "show", &printed]);
        assert!(shown.contains(said), "{harness}: {printed} opens {shown}");
    }
}

/// `history ls` narrowed: by project (the working directory or under it), by last activity, and
/// to the first N.
#[test]
fn history_listings_narrow_by_project_time_and_count() {
    let store = Store::new();
    let ids = |args: &[&str]| -> Vec<String> {
        let mut full = vec!["--json", "history", "ls"];
        full.extend_from_slice(args);
        let document: serde_json::Value =
            serde_json::from_str(&history(&store, &full).ok()).unwrap();
        document["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap()[..4].to_owned())
            .collect()
    };
    assert_eq!(ids(&[]), ["019a", "7c1e"]);
    assert_eq!(ids(&["--project", "/home/dev/shop"]), ["7c1e"]);
    assert_eq!(ids(&["--project", "/home/dev"]), ["019a", "7c1e"]);
    assert!(ids(&["--project", "/home/dev/sh"]).is_empty(), "a directory, not a string prefix");
    assert_eq!(ids(&["--since", "2026-11-30T10:00:00Z"]), ["019a"]);
    assert_eq!(ids(&["--since", "2026-11-30T09:00:00Z", "--limit", "1"]), ["019a"]);
    assert!(ids(&["--since", "1h"]).is_empty(), "the fixtures are older than an hour");
    history(&store, &["history", "ls", "--since", "yesterday-ish"]).fails(2, "is not a time");
    assert_eq!(ids(&["--status", "waiting"]), ["019a"]);
    assert_eq!(ids(&["--status", "unfinished"]), ["7c1e"]);
    let none = history(&store, &["history", "ls", "--status", "finished"]);
    assert_eq!(none.ok(), "");
    assert!(
        none.stderr().contains("no harness sessions match (2 found in all"),
        "{}",
        none.stderr()
    );
    history(&store, &["history", "ls", "--status", "sleeping"]).fails(2, "unknown state");
}

/// `history show` opens with a header (title; harness, model, project, counts, tokens), and
/// `--markdown` writes the conversation for sharing: redacted, each turn under who said it.
#[test]
fn history_show_has_a_header_and_a_markdown_form() {
    let store = Store::new();
    let text = history(&store, &["history", "show", "7c1e"]).ok();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("The checkout total is off by a cent."), "{text}");
    assert_eq!(
        lines[1],
        "claude · claude-sonnet-4-5 · in /home/dev/shop · 2 asked, 1 answered · 34700 tokens in, 180 out"
    );
    let markdown = history(&store, &["history", "show", "7c1e", "--markdown", "--tools"]).ok();
    assert!(markdown.starts_with("# The checkout total is off by a cent."), "{markdown}");
    assert!(markdown.contains("\n## Person · 2026-11-30T09:00:05.000Z\n"), "{markdown}");
    assert!(markdown.contains("\n## Agent · "), "{markdown}");
    assert!(markdown.contains("- tool `Bash`: `grep -rn round src/checkout.ts`"), "{markdown}");
    assert!(markdown.contains("[redacted:anthropic-api-key]"), "{markdown}");
    assert!(!markdown.contains("sk-ant-"), "redacted: {markdown}");
    assert!(!markdown.contains('\u{1b}'), "no colour in Markdown: {markdown}");
    let plain = history(&store, &["history", "show", "7c1e", "--markdown"]).ok();
    assert!(!plain.contains("- tool "), "tool calls only with --tools: {plain}");
}

/// `history show --last N` shows the last N entries under their day line, and every
/// conversation ends with how to resume it in its harness.
#[test]
fn history_show_takes_the_last_entries_and_says_how_to_resume() {
    let store = Store::new();
    let text = history(&store, &["history", "show", "7c1e", "--last", "2"]).ok();
    // After the header and a blank line.
    let lines: Vec<&str> = text.lines().skip(3).collect();
    assert!(lines[0].starts_with("── "), "a day line heads them: {text}");
    assert!(lines[1].contains("· summary") && lines[3].ends_with("you"), "{text}");
    assert_eq!(
        lines.last().unwrap(),
        &"resume: claude --resume 7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90 (in /home/dev/shop)"
    );
    let codex = history(&store, &["history", "show", "019a"]).ok();
    assert!(
        codex.trim_end().ends_with(
            "resume: codex resume 019a2d7a-41c4-78b1-b7cc-a45d62a89cd5 (in /home/dev/api)"
        ),
        "{codex}"
    );
    let document: serde_json::Value = serde_json::from_str(
        &history(&store, &["--json", "history", "show", "019a", "--last", "2"]).ok(),
    )
    .unwrap();
    assert_eq!(document["events"].as_array().unwrap().len(), 2);
}

/// The files of an export (`tar` inside `zstd`), by path.
fn unpack(path: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    use std::io::Read as _;
    let decoder = zstd::Decoder::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut archive = tar::Archive::new(decoder);
    let mut files = std::collections::BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        files.insert(name, bytes);
    }
    files
}

/// `history export`: one file with a manifest (ids, provenance, each file's length and SHA-256),
/// the transcript redacted by default (still JSON lines), the linked spex session's record and
/// timeline; `--raw` keeps the bytes and says so; an existing file is never replaced.
#[test]
fn history_export_writes_one_file_with_its_provenance() {
    use sha2::Digest as _;
    let store = Store::new();
    // A spex session linked to the Codex fixture.
    store.run(&["session", "new", "--id", "linked", "--adapter", "codex"]).ok();
    let record = store.root().join("sessions/linked/session.json");
    let text = std::fs::read_to_string(&record).unwrap().replace(
        "\"harness_session_id\": \"\"",
        "\"harness_session_id\": \"019a2d7a-41c4-78b1-b7cc-a45d62a89cd5\"",
    );
    std::fs::write(&record, text.replace("\"harness\": \"\"", "\"harness\": \"codex\"")).unwrap();
    store
        .run(&[
            "session",
            "send",
            "linked",
            "token sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA here",
        ])
        .ok();

    let out = store.path("claude.tar.zst");
    let printed =
        history(&store, &["history", "export", "7c1e", "--out", out.to_str().unwrap()]).ok();
    assert_eq!(printed.trim(), out.to_str().unwrap());
    let files = unpack(&out);
    let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
    assert_eq!(manifest["schema"], 1);
    assert_eq!(manifest["harness"], "claude");
    assert_eq!(manifest["sessionId"], "7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90");
    assert_eq!(manifest["redacted"], true);
    assert_eq!(manifest["project"], "/home/dev/shop");
    assert_eq!(manifest["firstTs"], "2026-11-30T09:00:05.000Z");
    // Every file is listed with its length and digest, and nothing else is in the archive.
    let listed = manifest["files"].as_array().unwrap();
    assert_eq!(listed.len() + 1, files.len());
    for file in listed {
        let bytes = &files[file["path"].as_str().unwrap()];
        assert_eq!(file["bytes"], bytes.len());
        assert_eq!(file["sha256"], hex::encode(sha2::Sha256::digest(bytes)));
    }
    let transcript =
        String::from_utf8(files["transcript/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl"].clone())
            .unwrap();
    assert!(
        !transcript.contains("sk-ant-api03") && transcript.contains("[redacted:"),
        "{transcript}"
    );
    for line in transcript.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("still JSON lines");
    }
    // An existing file is refused, unchanged.
    let before = std::fs::read(&out).unwrap();
    history(&store, &["history", "export", "7c1e", "--out", out.to_str().unwrap()])
        .fails(2, "exists");
    assert_eq!(std::fs::read(&out).unwrap(), before);

    // The Codex session carries its linked spex session, redacted too.
    let out = store.path("codex.tar.zst");
    let run =
        history(&store, &["--json", "history", "export", "019a", "--out", out.to_str().unwrap()]);
    let document: serde_json::Value = serde_json::from_str(&run.ok()).unwrap();
    assert_eq!(document["manifest"]["spexSession"], "linked");
    let files = unpack(&out);
    assert!(files.contains_key("spex/linked/session.json"), "{:?}", files.keys());
    let segment = &files["spex/linked/timeline/000000000001.ndjson"];
    let segment = String::from_utf8(segment.clone()).unwrap();
    assert!(segment.contains("token [redacted:") && !segment.contains("AAAAAAAA"), "{segment}");

    // --raw: the bytes as written, and a word on stderr.
    let out = store.path("raw.tar.zst");
    let run =
        history(&store, &["history", "export", "7c1e", "--raw", "--out", out.to_str().unwrap()]);
    run.ok();
    assert!(run.stderr().contains("unredacted"), "{}", run.stderr());
    let original = std::fs::read(
        fixtures()
            .join("claude/projects/-home-dev-shop/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl"),
    )
    .unwrap();
    assert_eq!(unpack(&out)["transcript/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl"], original);
    assert!(!store.path("raw.zst.partial").exists(), "no staging file is left");
}

/// Writes an export-shaped archive of `files` (a manifest built from them, with `place`).
fn forge(path: &std::path::Path, place: &str, files: &[(&str, &[u8])]) {
    use sha2::Digest as _;
    let listed: Vec<serde_json::Value> = files
        .iter()
        .map(|(name, bytes)| {
            serde_json::json!({"path": name, "bytes": bytes.len(), "sha256": hex::encode(sha2::Sha256::digest(bytes))})
        })
        .collect();
    let manifest = serde_json::json!({
        "schema": 1, "kind": "spex-history-export", "harness": "claude",
        "sessionId": "7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90", "place": place, "files": listed,
    });
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let mut all: Vec<(&str, &[u8])> = vec![("manifest.json", &manifest)];
    all.extend_from_slice(files);
    pack(path, &all);
}

/// Writes `files` as a tar archive inside zstd, as an export is written.
fn pack(path: &std::path::Path, files: &[(&str, &[u8])]) {
    let encoder = zstd::Encoder::new(std::fs::File::create(path).unwrap(), 3).unwrap();
    let mut archive = tar::Builder::new(encoder);
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        header.set_cksum();
        archive.append_data(&mut header, name, *bytes).unwrap();
    }
    archive.into_inner().unwrap().finish().unwrap();
}

/// `spex args` on another machine: its store, harness homes and HOME all under `machine`.
fn on_machine(store: &Store, machine: &std::path::Path, args: &[&str]) -> common::Run {
    let output = store
        .command(args)
        .env("SPEX_ROOT", machine.join("store"))
        .env("CLAUDE_CONFIG_DIR", machine.join("claude"))
        .env("CODEX_HOME", machine.join("codex"))
        .env("HOME", machine)
        .output()
        .unwrap();
    common::Run(output)
}

/// `history import`: the transcript placed where its harness finds it (listed there at once),
/// where it came from recorded; the same file again changes nothing; other bytes under the same
/// id, a truncated or tampered archive, and a place outside the harness's home are refused with
/// nothing written.
#[test]
fn history_import_places_checks_and_refuses() {
    let store = Store::new();
    let out = store.path("raw.tar.zst");
    history(&store, &["history", "export", "7c1e", "--raw", "--out", out.to_str().unwrap()]).ok();
    // Another machine: empty harness homes, another store.
    let other = store.path("other");
    let import = |file: &std::path::Path| {
        on_machine(&store, &other, &["history", "import", file.to_str().unwrap()])
    };
    let placed =
        other.join("claude/projects/-home-dev-shop/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl");
    let said = import(&out).ok();
    assert!(said.contains("placed at"), "{said}");
    let original = std::fs::read(
        fixtures()
            .join("claude/projects/-home-dev-shop/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl"),
    )
    .unwrap();
    assert_eq!(std::fs::read(&placed).unwrap(), original, "the bytes, the file name: the id kept");
    let provenance: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            other.join("store/imports/claude-7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(provenance["sessionId"], "7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90");
    assert!(provenance["from"]["device"].is_string() || provenance["from"]["device"].is_null());
    assert!(provenance["importedAt"].is_string());
    // Listed on the new machine, from the placed file.
    let listed = on_machine(&store, &other, &["--json", "history", "ls"]).ok();
    assert!(listed.contains("7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90"), "{listed}");
    // Again: nothing changes.
    let modified = std::fs::metadata(&placed).unwrap().modified().unwrap();
    assert!(import(&out).ok().contains("nothing changed"));
    assert_eq!(std::fs::metadata(&placed).unwrap().modified().unwrap(), modified);
    // An import cut short after the transcript and before its provenance: the next one writes
    // the provenance, and leaves the transcript as it is.
    let record = other.join("store/imports/claude-7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.json");
    std::fs::remove_file(&record).unwrap();
    assert!(import(&out).ok().contains("placed at"));
    assert!(record.exists(), "the provenance is recorded");
    assert_eq!(std::fs::metadata(&placed).unwrap().modified().unwrap(), modified);
    // The same id with other bytes: refused, naming both.
    let redacted = store.path("redacted.tar.zst");
    history(&store, &["history", "export", "7c1e", "--out", redacted.to_str().unwrap()]).ok();
    let refused = import(&redacted);
    refused.fails(2, "with other bytes");
    assert!(refused.stderr().contains(placed.to_str().unwrap()), "{}", refused.stderr());
    assert_eq!(std::fs::read(&placed).unwrap(), original);
    // Truncated, or tampered: refused, nothing written.
    let fresh = store.path("fresh");
    let import_fresh = |file: &std::path::Path| {
        on_machine(&store, &fresh, &["history", "import", file.to_str().unwrap()])
    };
    let bytes = std::fs::read(&out).unwrap();
    let truncated = store.path("truncated.tar.zst");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    import_fresh(&truncated).fails(2, "nothing was written");
    let name = "transcript/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl";
    let place = "projects/-home-dev-shop/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl";
    let tampered = store.path("tampered.tar.zst");
    forge(&tampered, place, &[(name, b"{}\n")]);
    // (A forged archive with its own right digests is well formed; a tampered one is not.)
    let mut raw = unpack(&tampered);
    raw.insert(name.to_owned(), b"[]\n".to_vec());
    let rewritten = store.path("rewritten.tar.zst");
    let files: Vec<(&str, &[u8])> =
        raw.iter().map(|(path, bytes)| (path.as_str(), bytes.as_slice())).collect();
    pack(&rewritten, &files);
    import_fresh(&rewritten).fails(2, "SHA-256");
    // A place that climbs out of the harness's home.
    let climbing = store.path("climbing.tar.zst");
    forge(&climbing, "projects/../../escaped.jsonl", &[(name, b"{}\n")]);
    import_fresh(&climbing).fails(2, "is not a transcript path");
    assert!(!fresh.exists() || walk(&fresh).is_empty(), "nothing written");
    assert!(!store.path("escaped.jsonl").exists());
}

#[test]
fn usage_sums_replies_and_turns_and_prices_them() {
    let store = Store::new();
    let json = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&history(&store, args).ok()).unwrap()
    };
    let by_harness = json(&["--json", "usage", "--by", "harness"]);
    let rows = by_harness["rows"].as_array().unwrap();
    // Claude Code: three replies (one written on two lines, counted once), two turns; Codex: one
    // reply, two turns.
    assert_eq!(rows[0]["key"], "claude");
    assert_eq!((rows[0]["replies"].as_u64(), rows[0]["turns"].as_u64()), (Some(3), Some(2)));
    assert_eq!(rows[0]["input"], 4500);
    assert_eq!(rows[0]["cacheRead"], 30200);
    assert_eq!(rows[1]["key"], "codex");
    assert_eq!((rows[1]["replies"].as_u64(), rows[1]["turns"].as_u64()), (Some(1), Some(2)));
    // 4,500 input, 180 output, 30,200 cache read, 300 cache write at 3, 15, 0.3, 3.75 per million.
    assert_eq!(rows[0]["cost"], 0.026385);
    assert_eq!(by_harness["prices"]["asOf"], "2025-11-24");
    // The table: days, the total last, the prices' date on stderr.
    let run = history(&store, &["usage"]);
    let text = run.ok();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("DAY") && lines[0].ends_with("COST"), "{text}");
    assert!(lines[1].starts_with("2026-11-30") && lines[1].contains("34,200"), "{text}");
    assert!(lines[2].starts_with("total") && lines[2].ends_with("$0.03"), "{text}");
    assert!(run.stderr().contains("as of 2025-11-24"), "{}", run.stderr());
    // Sessions carry their titles, redacted.
    let sessions = json(&["--json", "usage", "--by", "session"]);
    assert!(!sessions.to_string().contains("sk-ant-api03"), "{sessions}");
    // Another price table: a model it does not price is named, its tokens left out of the cost.
    let table = store.dir.path().join("prices.json");
    std::fs::write(
        &table,
        r#"{"asOf":"2026-12-01","currency":"USD","unit":"per million tokens","sources":["test"],
            "note":"","models":{"gpt-5-codex":{"input":1000000,"output":0,"cacheRead":0,"cacheWrite":0}}}"#,
    )
    .unwrap();
    let priced = json(&["--json", "usage", "--by", "model", "--prices", table.to_str().unwrap()]);
    let codex = priced["rows"].as_array().unwrap().iter().find(|r| r["key"] == "gpt-5-codex");
    assert_eq!(codex.unwrap()["cost"], 1000.0, "1,000 input tokens at 1,000,000 per million");
    assert_eq!(priced["total"]["unpriced"], serde_json::json!(["claude-sonnet-4-5"]));
    assert_eq!(priced["total"]["cost"], 1000.0);
    // Since: only what happened after it.
    let late = json(&["--json", "usage", "--since", "2026-11-30T09:30:00Z"]);
    assert_eq!(late["total"]["turns"], 3, "{late}");
    assert_eq!(late["total"]["replies"], 1, "{late}");
    // Bad input names what is wrong.
    history(&store, &["usage", "--by", "week"]).fails(2, "not a grouping");
    std::fs::write(&table, "{\"asOf\":1}").unwrap();
    history(&store, &["usage", "--prices", table.to_str().unwrap()]).fails(2, "prices.json");
}
