//! The parsers against fixtures written from the formats' public descriptions (never a private
//! transcript), covering every record type each parser handles; reading as a transcript grows;
//! and redaction against a corpus of secret shapes and near-misses that must survive.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use spex_history::{
    Event, Harness, Identity, Kind, Lifecycle, Parser, Root, discover, read_chunk, read_from,
    redact,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn roots() -> Vec<Root> {
    vec![
        Root { harness: Harness::ClaudeCode, dir: fixtures().join("claude") },
        Root { harness: Harness::Codex, dir: fixtures().join("codex") },
    ]
}

fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|event| match &event.kind {
            Kind::Unknown { kind } => format!("unknown:{kind}"),
            other => other.name().to_owned(),
        })
        .collect()
}

#[test]
fn discovery_finds_both_harnesses_and_names_their_sessions() {
    let found = discover(&roots()).unwrap();
    let named: Vec<(&str, &str)> =
        found.iter().map(|f| (f.harness.name(), f.id.as_str())).collect();
    assert_eq!(
        named,
        [
            ("claude", "7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90"),
            ("codex", "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5")
        ]
    );
    assert!(found.iter().all(|f| f.size > 0 && f.modified_ns > 0));
    // A root that does not exist has no transcripts; it is not an error.
    let missing = Root { harness: Harness::Codex, dir: fixtures().join("nowhere") };
    assert!(discover(&[missing]).unwrap().is_empty());
    // The environment decides the default roots.
    let env = |name: &str| match name {
        "CLAUDE_CONFIG_DIR" => Some("/c".to_owned()),
        "HOME" => Some("/h".to_owned()),
        _ => None,
    };
    let defaults = Root::defaults(&env);
    assert_eq!(defaults[0].dir, PathBuf::from("/c"));
    assert_eq!(defaults[1].dir, PathBuf::from("/h/.codex"));
    assert_eq!(defaults[2].dir, PathBuf::from("/h/.local/share/opencode"));
    let xdg = |name: &str| (name == "XDG_DATA_HOME").then(|| "/x".to_owned());
    assert_eq!(Root::defaults(&xdg)[0].dir, PathBuf::from("/x/opencode"));
}

#[test]
fn claude_code_records_become_events() {
    let found = discover(&roots()).unwrap();
    let read = read_from(&found[0].path, Harness::ClaudeCode, 0, 0).unwrap();
    assert_eq!(
        kinds(&read.events),
        [
            "summary",
            // the injected /clear line (isMeta) is not a person typing: no event
            "user",
            "usage", // the thinking block is not an answer; its reply's usage is counted once
            "tool-call",
            "tool-result",
            "tool-call",
            "usage",
            "tool-result",
            "assistant",
            "usage",
            "turn-end",
            "unknown:system/stop_hook_summary",
            "unknown:file-history-snapshot",
            "summary",
            "summary",
            "user",
        ]
    );
    let events = &read.events;
    assert_eq!(
        events[3].kind,
        Kind::ToolCall {
            name: "Bash".to_owned(),
            summary: "grep -rn round src/checkout.ts".to_owned()
        }
    );
    assert_eq!(events[4].kind, Kind::ToolResult { ok: true, bytes: 58 });
    assert_eq!(
        events[5].kind,
        Kind::ToolCall {
            name: "Edit".to_owned(),
            summary: "/home/dev/shop/src/checkout.ts".to_owned()
        }
    );
    assert!(matches!(events[7].kind, Kind::ToolResult { ok: false, .. }));
    assert_eq!(
        events[2].kind,
        Kind::Usage {
            model: Some("claude-sonnet-4-5".to_owned()),
            input: 1200,
            output: 40,
            cache_read: 9000,
            cache_write: 300,
            reply: Some("msg_01".to_owned()),
        }
    );
    assert_eq!(events[1].ts.as_deref(), Some("2026-11-30T09:00:05.000Z"));
    assert_eq!(events[1].line, 3, "lines are 1-based, counted over every line");
    assert_eq!(read.meta.cwd.as_deref(), Some("/home/dev/shop"));
    assert_eq!(read.meta.version.as_deref(), Some("2.0.14"));
    assert_eq!(read.meta.git_branch.as_deref(), Some("main"));
    assert_eq!(read.meta.session_id.as_deref(), Some("7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90"));
}

#[test]
fn codex_records_become_events() {
    let found = discover(&roots()).unwrap();
    let read = read_from(&found[1].path, Harness::Codex, 0, 0).unwrap();
    assert_eq!(
        kinds(&read.events),
        [
            "start",
            // the environment context is the harness's, not the person's: no event
            "user",
            // user_message mirrors the item above; turn_context, task_started and the hidden
            // reasoning are not events
            "tool-call",
            "tool-result",
            "tool-call",
            "tool-result",
            "tool-call",
            "usage",
            "assistant",
            "turn-end",
            "summary",
            "user",
            "aborted",
            "unknown:ghost_snapshot",
        ]
    );
    let events = &read.events;
    assert_eq!(
        events[2].kind,
        Kind::ToolCall {
            name: "shell".to_owned(),
            summary: "bash -lc rg -n pool_size config/".to_owned()
        }
    );
    assert_eq!(events[3].kind, Kind::ToolResult { ok: true, bytes: 31 });
    assert!(
        matches!(&events[4].kind, Kind::ToolCall { name, summary } if name == "apply_patch" && summary.starts_with("*** Begin Patch *** Update File"))
    );
    assert!(matches!(events[5].kind, Kind::ToolResult { ok: false, .. }), "exit code 1");
    assert_eq!(
        events[6].kind,
        Kind::ToolCall { name: "shell".to_owned(), summary: "cargo test pool".to_owned() }
    );
    assert_eq!(
        events[7].kind,
        Kind::Usage {
            model: Some("gpt-5-codex".to_owned()),
            input: 1000,
            output: 400,
            cache_read: 4000,
            cache_write: 0,
            reply: Some("total:9000/6000/700/300".to_owned()),
        }
    );
    assert_eq!(
        events[12].kind,
        Kind::Lifecycle(Lifecycle::Aborted { reason: "interrupted".to_owned() })
    );
    assert_eq!(read.meta.version.as_deref(), Some("0.58.0"));
    assert_eq!(read.meta.git_branch.as_deref(), Some("fix-timeouts"));
    assert_eq!(read.meta.cwd.as_deref(), Some("/home/dev/api"));
}

#[test]
fn a_growing_transcript_is_read_from_its_offset_one_complete_line_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollout-x.jsonl");
    let source = std::fs::read_to_string(discover(&roots()).unwrap()[1].path.clone()).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
    let first = read_from(&path, Harness::Codex, 0, 0).unwrap();
    assert_eq!(kinds(&first.events), ["start", "user"]);
    assert_eq!((first.lines, first.offset), (2, (lines[0].len() + lines[2].len() + 2) as u64));
    // Half a line, still being written: not read, and the offset stays before it.
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    let (head, tail) = lines[13].split_at(40);
    file.write_all(head.as_bytes()).unwrap();
    let partial = read_from(&path, Harness::Codex, first.offset, first.lines).unwrap();
    assert!(partial.events.is_empty());
    assert_eq!(partial.offset, first.offset);
    // Completed: exactly that line is read, with its line number.
    file.write_all(format!("{tail}\n").as_bytes()).unwrap();
    let next = read_from(&path, Harness::Codex, first.offset, first.lines).unwrap();
    assert_eq!(kinds(&next.events), ["assistant"]);
    assert_eq!(next.events[0].line, 3);
    assert_eq!(next.offset, std::fs::metadata(&path).unwrap().len());
}

#[test]
fn reading_in_chunks_gives_what_one_read_gives() {
    for found in discover(&roots()).unwrap() {
        let whole = read_from(&found.path, found.harness, 0, 0).unwrap();
        assert!(!whole.more);
        for budget in [1, 300, 4096] {
            let (mut offset, mut lines, mut events) = (0, 0, Vec::new());
            let mut parser = Parser::new(found.harness);
            loop {
                let chunk = read_chunk(&found.path, &mut parser, offset, lines, budget).unwrap();
                assert!(chunk.offset > offset || !chunk.more, "every chunk moves on");
                events.extend(
                    chunk.events.iter().map(|event| (event.line, format!("{:?}", event.kind))),
                );
                (offset, lines) = (chunk.offset, chunk.lines);
                if !chunk.more {
                    break;
                }
            }
            let expected: Vec<(u64, String)> = whole
                .events
                .iter()
                .map(|event| (event.line, format!("{:?}", event.kind)))
                .collect();
            assert_eq!(events, expected, "{} in chunks of {budget} bytes", found.path.display());
            assert_eq!((offset, lines), (whole.offset, whole.lines));
        }
    }
}

#[test]
fn broken_and_oversized_lines_are_counted_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let huge =
        format!("{{\"type\":\"user\",\"message\":{{\"content\":\"{}\"}}}}", "x".repeat(17 << 20));
    let text = format!(
        "not json at all\n{huge}\n[1,2]\n{{\"type\":\"user\",\"message\":{{\"content\":42}}}}\n\n{{\"type\":\"user\",\"message\":{{\"content\":\"ok\"}}}}\n"
    );
    std::fs::write(&path, text).unwrap();
    let read = read_from(&path, Harness::ClaudeCode, 0, 0).unwrap();
    assert_eq!(
        kinds(&read.events),
        ["unknown:not-json", "unknown:oversized-line", "unknown:not-json", "user"]
    );
    assert_eq!(read.events[3].line, 6);
}

#[test]
fn redaction_replaces_secrets_and_identity_and_leaves_near_misses() {
    let me = Identity::new(Some("/home/ada"), Some("ada"), Some("lovelace-laptop"));
    let secrets = [
        ("key sk-ant-api03-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LzXcVbNm end", "anthropic-key"),
        ("OPENAI=sk-proj-4f9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LzXcVbNmQwEr", "openai-key"),
        ("token ghp_0123456789abcdefABCDEF0123456789abcd", "github-token"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", "github-token"),
        ("AKIAIOSFODNN7EXAMPLE", "aws-access-key"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-secret-key"),
        ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "google-api-key"),
        ("xoxb-12345678901-123456789012-Zx9Qw8Er7Ty6Ui5Op4As3Df2", "slack-token"),
        ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe-key"),
        (
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "jwt",
        ),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", "bearer-token"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "private-key"),
        ("password: correct-horse-battery", "secret-assignment"),
    ];
    for (text, label) in secrets {
        let out = redact(text, &me);
        assert!(out.contains("[redacted:"), "{label}: {text:?} -> {out:?}");
    }
    let out = redact("https://deploy:hunter2hunter2@ci.example.com/hook", &me);
    assert_eq!(out, "https://deploy:[redacted:password]@ci.example.com/hook");
    let out = redact("ada edited /home/ada/shop on lovelace-laptop; mail ada@example.com", &me);
    assert_eq!(out, "[user] edited ~/shop on [host]; mail [email]");
    // Fail closed: a key block without its end, and a text too long to scan.
    let out = redact("here:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", &me);
    assert_eq!(out, "here:\n[withheld: a private-key block without its end]");
    let out = redact(&"a".repeat(spex_history::redact::SCAN_BYTES_MAX + 1), &me);
    assert!(out.starts_with("[withheld: "), "{out}");
    // Near-misses survive untouched.
    let near = [
        "task-ant-coordination and sk-short",
        "commit 3f1c2e9a7b6d5c4e3f2a1b0c9d8e7f6a5b4c3d2e",
        "id 019a2d7a-41c4-78b1-b7cc-a45d62a89cd5",
        "the bearer of bad news",
        "AKIA is a prefix; AKIA123 is too short",
        "eyJ alone, and a.b.c",
        "user@localhost and @mentions",
        "adamant adapters (the name only inside longer words)",
        "password reset flow",
        "ghp_short",
    ];
    for text in near {
        assert_eq!(redact(text, &me), text, "a near-miss must survive");
    }
}

#[test]
fn a_digest_folded_in_parts_equals_one_folded_whole() {
    for found in discover(&roots()).unwrap() {
        let (summary, events) = spex_history::summarize(&found).unwrap();
        for split in 0..=events.len() {
            let mut digest = spex_history::Digest::default();
            digest.fold(&events[..split]);
            digest.fold(&events[split..]);
            assert_eq!(digest, summary.digest, "{} split at {split}", found.path.display());
        }
    }
    // The title is the first non-blank line of the first prompt.
    let mut digest = spex_history::Digest::default();
    let event = Event {
        ts: None,
        line: 1,
        kind: Kind::User { text: "\n  fix the build \nthen the docs".to_owned() },
    };
    digest.fold(&[event]);
    assert_eq!(digest.title.as_deref(), Some("fix the build"));
}

#[test]
fn a_reply_is_counted_once_however_often_its_usage_is_written() {
    // The Codex CLI re-emits a count with the running total unchanged (a display refresh, no new
    // reply); a total that drops (a resumed session) is a new reply.
    let count = |total: u64, last: u64| {
        format!(
            r#"{{"timestamp":"2026-11-30T10:00:00.000Z","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{total},"cached_input_tokens":0,"output_tokens":1,"reasoning_output_tokens":0,"total_tokens":{total}}},"last_token_usage":{{"input_tokens":{last},"cached_input_tokens":0,"output_tokens":1,"reasoning_output_tokens":0,"total_tokens":{last}}}}}}}}}"#
        )
    };
    let mut parser = Parser::new(Harness::Codex);
    let mut events = Vec::new();
    for (line, (total, last)) in
        [(100, 100), (100, 100), (250, 150), (250, 150), (40, 40)].into_iter().enumerate()
    {
        parser.line(line as u64 + 1, &count(total, last), &mut events);
    }
    let inputs: Vec<u64> = events
        .iter()
        .filter_map(|event| match event.kind {
            Kind::Usage { input, .. } => Some(input),
            _ => None,
        })
        .collect();
    assert_eq!(inputs, [100, 150, 40]);
    // Claude Code writes a reply's usage on each of its content blocks' lines: once per id.
    let block = |id: &str, text: &str| {
        format!(
            r#"{{"type":"assistant","timestamp":"2026-11-30T10:00:00.000Z","message":{{"id":"{id}","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"{text}"}}],"usage":{{"input_tokens":7,"output_tokens":3}}}}}}"#
        )
    };
    let mut parser = Parser::new(Harness::ClaudeCode);
    let mut events = Vec::new();
    for (line, text) in [block("m1", "a"), block("m1", "b"), block("m2", "c")].iter().enumerate() {
        parser.line(line as u64 + 1, text, &mut events);
    }
    let replies: Vec<Option<String>> = events
        .iter()
        .filter_map(|event| match &event.kind {
            Kind::Usage { reply, .. } => Some(reply.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(replies, [Some("m1".to_owned()), Some("m2".to_owned())]);
}
