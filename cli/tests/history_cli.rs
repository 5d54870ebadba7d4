//! `spex history` through the real binary, with `CLAUDE_CONFIG_DIR` and `CODEX_HOME` pointing at
//! fixture trees written from the formats' public descriptions.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

mod common;

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
    assert!(text.contains("[redacted:anthropic-key]"), "{text}");
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
    // No store yet: search says how to get one, and finds nothing.
    let run = history(&store, &["search", "banker's"]);
    assert_eq!(run.ok(), "");
    assert!(run.stderr().contains("`spex index refresh` creates it"), "{}", run.stderr());
    let refreshed = history(&store, &["index", "refresh"]).ok();
    assert!(refreshed.contains("2 transcripts: 2 read"), "{refreshed}");
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
