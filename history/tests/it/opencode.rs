//! OpenCode's sessions, read from the database the real CLI (`opencode-ai` 1.18.33) wrote
//! against the scripted model (`tests/fixtures/opencode/opencode.db`: two turns of one session,
//! the first running a shell command, the second carrying a GitHub token; copied with
//! `VACUUM INTO` and a smaller page size, rows unchanged): discovery, the parser's events,
//! reading in chunks, redaction, and that reading changes nothing.

use std::path::{Path, PathBuf};

use spex_history::{Harness, Identity, Kind, Lifecycle, Parser, Root, State, discover};

const SESSION: &str = "ses_dc13346b4ffeIP3PBkq5I2zlQM";

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/opencode")
}

/// The fixture copied into a directory of the test's own (the copy is what a test may change).
fn copy(dir: &Path) -> Root {
    std::fs::copy(data_dir().join("opencode.db"), dir.join("opencode.db"))
        .expect("the fixture copies");
    Root { harness: Harness::OpenCode, dir: dir.to_path_buf() }
}

fn text(kind: &Kind) -> String {
    match kind {
        Kind::User { text } => format!("user {text}"),
        Kind::Assistant { text } => format!("assistant {text}"),
        Kind::ToolCall { name, summary } => format!("tool-call {name} {summary}"),
        Kind::ToolResult { ok, bytes } => format!("tool-result {ok} {bytes}"),
        Kind::Usage { model, input, output, reply, .. } => format!(
            "usage {} {input}/{output} {}",
            model.as_deref().unwrap_or("-"),
            reply.as_deref().map_or("-", |reply| &reply[..4])
        ),
        Kind::Lifecycle(Lifecycle::Aborted { reason }) => format!("aborted {reason}"),
        Kind::Unknown { kind } => format!("unknown {kind}"),
        other => other.name().to_owned(),
    }
}

#[test]
fn a_session_the_real_cli_wrote_is_found_and_read_as_one_conversation() {
    let found = discover(&[Root { harness: Harness::OpenCode, dir: data_dir() }]).unwrap();
    assert_eq!(found.len(), 1);
    let session = &found[0];
    assert_eq!((session.harness, session.id.as_str()), (Harness::OpenCode, SESSION));
    assert_eq!(
        session.path,
        spex_history::opencode::locator(&data_dir().join("opencode.db"), SESSION)
    );
    assert_eq!(
        spex_history::opencode::split(&session.path),
        Some((data_dir().join("opencode.db"), SESSION.to_owned()))
    );
    assert!(session.size > 0);
    // The newest row's update, in nanoseconds.
    assert_eq!(session.modified_ns, 1_796_349_937_918_000_000);

    let (summary, events) = spex_history::summarize(session).unwrap();
    let shown: Vec<String> = events.iter().map(|event| text(&event.kind)).collect();
    assert_eq!(
        shown,
        [
            "start",
            "user \"Which region do we deploy to first?\"",
            "tool-call bash echo hello-from-tool",
            "tool-result true 16",
            "usage claude-sonnet-4-5 120/30 prt_",
            "assistant Deploy to eu-west-1 first.",
            "usage claude-sonnet-4-5 120/30 prt_",
            "turn-end",
            "user \"And after that? The deploy key is ghp_R7x9Qm2LpV4nT8wZ3kY6bH1cJ5dF0gA2sE4u\"",
            "assistant Then eu-central-1; rotate that key.",
            "usage claude-sonnet-4-5 120/30 prt_",
            "turn-end",
        ]
    );
    assert_eq!(events[0].ts.as_deref(), Some("2026-12-04T02:05:33.899Z"));
    assert_eq!(events[1].ts.as_deref(), Some("2026-12-04T02:05:34.095Z"));
    // Each step's tokens once, each named by its own part.
    let replies: std::collections::HashSet<_> = events
        .iter()
        .filter_map(|event| match &event.kind {
            Kind::Usage { reply, .. } => reply.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(replies.len(), 3);
    assert_eq!(summary.meta.session_id.as_deref(), Some(SESSION));
    assert_eq!(summary.meta.cwd.as_deref(), Some("/tmp/ocfix/work"));
    assert_eq!(summary.meta.version.as_deref(), Some("1.18.33"));
    assert_eq!(summary.meta.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(summary.digest.title.as_deref(), Some("\"Which region do we deploy to first?\""));
    assert_eq!(
        summary.digest.signals.state(session.modified_ns, i64::MAX, false),
        State::WaitingForInput
    );
    // The token the person typed is shown redacted, as every harness's text is.
    let said = spex_history::redact(shown[8].as_str(), &Identity::default());
    assert!(!said.contains("ghp_R7x9"), "{said}");
    assert!(said.contains("[redacted:github-pat]"), "{said}");
}

/// A byte budget never cuts a session: one read renders it from one snapshot and parses it to its
/// end (a second chunk would be rendered from another snapshot, whose offsets need not line up
/// with the first's once OpenCode changed a row in place).
#[test]
fn a_budget_never_splits_a_session_across_snapshots() {
    let found = discover(&[Root { harness: Harness::OpenCode, dir: data_dir() }]).unwrap();
    let whole = spex_history::read_from(&found[0].path, Harness::OpenCode, 0, 0).unwrap();
    assert!(!whole.more);
    for budget in [1, 200, 5_000] {
        let mut parser = Parser::new(Harness::OpenCode);
        let chunk = spex_history::read_chunk(&found[0].path, &mut parser, 0, 0, budget).unwrap();
        assert!(!chunk.more, "budget {budget}");
        assert_eq!(chunk.events, whole.events, "budget {budget}");
        assert_eq!((chunk.offset, chunk.lines), (whole.offset, whole.lines), "budget {budget}");
    }
    // Read on from where the whole read ended: nothing more.
    let mut parser = Parser::new(Harness::OpenCode);
    let after = spex_history::read_chunk(&found[0].path, &mut parser, whole.offset, whole.lines, 1)
        .unwrap();
    assert!(after.events.is_empty() && !after.more);
    assert_eq!((after.offset, after.lines), (whole.offset, whole.lines));
}

#[test]
fn reading_changes_nothing_and_refuses_what_is_not_a_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = copy(dir.path());
    let db = dir.path().join("opencode.db");
    let before = std::fs::read(&db).unwrap();
    let found = discover(std::slice::from_ref(&root)).unwrap();
    spex_history::summarize(&found[0]).unwrap();
    assert_eq!(std::fs::read(&db).unwrap(), before, "the database is read, never written");
    let mut beside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, ["opencode.db"], "no journal or lock file left beside it");

    // A session that is not in the database went away, as a deleted file transcript does.
    let missing = spex_history::opencode::locator(&db, "ses_gone");
    let error = spex_history::read_from(&missing, Harness::OpenCode, 0, 0).unwrap_err();
    assert!(
        matches!(&error, spex_history::Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound),
        "{error}"
    );
    // A FIFO where the database belongs is refused at once, not waited on.
    let fifo_dir = tempfile::tempdir().unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fifo_dir.path().join("opencode.db"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let error =
        discover(&[Root { harness: Harness::OpenCode, dir: fifo_dir.path().to_path_buf() }])
            .unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
    // A file that is not a database is named.
    let junk_dir = tempfile::tempdir().unwrap();
    std::fs::write(junk_dir.path().join("opencode.db"), b"not a database at all, padded out")
        .unwrap();
    let error =
        discover(&[Root { harness: Harness::OpenCode, dir: junk_dir.path().to_path_buf() }])
            .unwrap_err();
    assert!(error.to_string().contains("OpenCode database"), "{error}");
    // No data directory, no sessions.
    let none = Root { harness: Harness::OpenCode, dir: dir.path().join("nowhere") };
    assert!(discover(&[none]).unwrap().is_empty());
}

/// What OpenCode writes while a turn runs: a tool part pending, then completed; an aborted
/// message; a compaction; parts and roles the parser does not know. Rows are added to a copy of
/// the real database with its own schema.
#[test]
fn rows_changed_in_place_and_unknown_rows_read_as_the_event_model_says() {
    let dir = tempfile::tempdir().unwrap();
    let root = copy(dir.path());
    let db = rusqlite::Connection::open(dir.path().join("opencode.db")).unwrap();
    let message = |id: &str, time: i64, data: &str| {
        db.execute(
            "INSERT INTO message(id, session_id, time_created, time_updated, data)
             VALUES (?1, ?2, ?3, ?3, ?4)",
            rusqlite::params![id, SESSION, time, data],
        )
        .unwrap();
    };
    let part = |id: &str, message: &str, data: &str| {
        db.execute(
            "INSERT INTO part(id, message_id, session_id, time_created, time_updated, data)
             VALUES (?1, ?2, ?3, 1796349940000, 1796349940000, ?4)",
            rusqlite::params![id, message, SESSION, data],
        )
        .unwrap();
    };
    message("msg_x1", 1_796_349_940_000, r#"{"role":"user"}"#);
    part("prt_x1a", "msg_x1", r#"{"type":"text","text":"run the tests"}"#);
    part("prt_x1b", "msg_x1", r#"{"type":"text","text":"file body","synthetic":true}"#);
    message("msg_x2", 1_796_349_940_001, r#"{"role":"assistant","modelID":"m2"}"#);
    part(
        "prt_x2a",
        "msg_x2",
        r#"{"type":"tool","tool":"bash","state":{"status":"running","input":{"command":"cargo test"}}}"#,
    );
    let read = |root: &Root| {
        let found = discover(std::slice::from_ref(root)).unwrap();
        let (_, events) = spex_history::summarize(&found[0]).unwrap();
        (
            found[0].clone(),
            events.iter().skip(12).map(|event| text(&event.kind)).collect::<Vec<_>>(),
        )
    };
    let (running, events) = read(&root);
    assert_eq!(events, ["user run the tests", "tool-call bash cargo test"]);
    // The tool finishes: its part changes in place, and the session's mark moves.
    db.execute(
        "UPDATE part SET time_updated = 1796349941000, data = ?1 WHERE id = 'prt_x2a'",
        [r#"{"type":"tool","tool":"bash","state":{"status":"error","input":{"command":"cargo test"},"error":"exit 101"}}"#],
    )
    .unwrap();
    part("prt_x2b", "msg_x2", r#"{"type":"reasoning","text":"hidden"}"#);
    part("prt_x2c", "msg_x2", r#"{"type":"agent","name":"x"}"#);
    db.execute(
        "UPDATE message SET data = ?1 WHERE id = 'msg_x2'",
        [r#"{"role":"assistant","modelID":"m2","error":{"name":"MessageAbortedError","data":{"message":"aborted"}}}"#],
    )
    .unwrap();
    message("msg_x3", 1_796_349_940_002, r#"{"role":"assistant","summary":true}"#);
    part("prt_x3a", "msg_x3", r#"{"type":"text","text":"so far: regions"}"#);
    message("msg_x4", 1_796_349_940_003, r#"{"role":"system"}"#);
    message("msg_x5", 1_796_349_940_004, "not json");
    let (finished, events) = read(&root);
    assert_ne!((finished.size, finished.modified_ns), (running.size, running.modified_ns));
    assert_eq!(
        events,
        [
            "user run the tests",
            "tool-call bash cargo test",
            "tool-result false 8",
            "unknown part/agent",
            "aborted interrupted",
            "summary",
            "unknown message/system",
            "unknown message/?",
        ]
    );
}
