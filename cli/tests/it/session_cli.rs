//! The session verbs, run as a user would run them: the real binary against a real directory,
//! stdout, stderr and the exit code checked apart.

#![expect(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

use crate::common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::sync::mpsc;
use std::time::Duration;

use common::{Store, exists};

/// What a streaming command printed, line by line, with a generous safety timeout.
fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

const STREAM_WAIT: Duration = Duration::from_secs(30);

// The quick start of the README: create, send (keyed and not), declare, read, drain.
// It matters because it is the first thing a new user runs.
#[test]
fn quick_start_round_trip() {
    let store = Store::new();
    let delivered = store.path("delivered.txt");
    let adapter = format!("exec:cat >> {}", delivered.display());
    assert_eq!(
        store.run(&["session", "new", "--id", "demo", "--adapter", &adapter]).ok(),
        "demo\n"
    );

    let sent = store.run(&["session", "send", "demo", "hello"]).ok();
    let (mid, word) = sent.trim().split_once(' ').unwrap();
    assert_eq!(word, "sent");
    let first = store.run(&["session", "send", "demo", "deploy?", "--key", "k1"]).ok();
    let again = store.run(&["session", "send", "demo", "deploy?", "--key", "k1"]).ok();
    assert_eq!(
        first.replace(" sent", ""),
        again.replace(" replayed", ""),
        "a replay returns the mid"
    );
    assert!(again.ends_with(" replayed\n"));

    let declared = store
        .command(&["session", "ask", "--note", "Which region?"])
        .env("SPEX_SESSION_ID", "demo")
        .output()
        .unwrap();
    assert!(declared.status.success());
    assert_eq!(String::from_utf8(declared.stdout).unwrap(), "demo working -> asking\n");

    let events = store.events("demo");
    assert_eq!(events.len(), 3, "two sends (the replay adds nothing) and one declaration");
    assert_eq!(events[0]["mid"], mid);
    assert_eq!(events[0]["text"], "hello");
    assert_eq!(events[0]["replyVia"], "note", "an exec adapter is headless: note is the default");
    assert_eq!(events[2]["kind"], "status");
    assert_eq!(events[2]["display"], "asking");
    assert!(events.iter().all(|event| event.get("dispatchReceipt").is_none()));

    let show = store.json(&["session", "show", "demo"]);
    assert_eq!(show["owed"], 2);
    assert_eq!(show["state"]["note"], "Which region?");

    let drained = store.json(&["session", "drain", "demo"]);
    assert_eq!(drained["delivered"].as_array().unwrap().len(), 2);
    assert_eq!(drained["remaining"], 0);
    let text = std::fs::read_to_string(&delivered).unwrap();
    assert!(text.starts_with("hello"), "the adapter got the message on stdin: {text:?}");
    assert!(text.contains("spex session ask --note"), "with the note-reply hint");
    assert_eq!(store.json(&["session", "show", "demo"])["owed"], 0);
    // A second drain finds nothing owed and calls nothing.
    assert_eq!(store.run(&["session", "drain", "demo"]).ok(), "0 owed to demo\n");
    assert_eq!(std::fs::read_to_string(&delivered).unwrap(), text);
}

// Bad input is refused with one clear line, the documented exit code, and nothing written.
// It matters because a tool that half-writes on bad input cannot be trusted with good input.
#[test]
fn bad_input_is_refused_and_writes_nothing() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s1"]).ok();

    // Traversal and invalid ids: usage error from the parser, no path built.
    for id in ["../escape", "a/b", ".hidden", ""] {
        let run = store.run(&["session", "send", id, "hi"]);
        assert_eq!(run.code(), 2, "{id:?}: {}", run.stderr());
        assert_eq!(run.stdout(), "");
        assert!(run.stderr().contains("invalid session id"), "{}", run.stderr());
    }
    assert!(!exists(&store.dir.path().join("escape")));
    // Unknown session.
    store.run(&["session", "send", "nosuch", "hi"]).fails(1, "no such session nosuch");
    store.run(&["session", "timeline", "nosuch"]).fails(1, "no such session nosuch");
    assert!(!exists(&store.root().join("sessions/nosuch")));
    // Invalid UTF-8 on stdin, named with its offset.
    store
        .run_with_stdin(&["session", "send", "s1", "-"], b"ok\xffno")
        .fails(2, "not valid UTF-8 (first invalid byte at offset 2)");
    // Oversized message.
    let big = vec![b'x'; spex_engine::layout::TEXT_BYTES_MAX + 1];
    store.run_with_stdin(&["session", "send", "s1", "-"], &big).fails(2, "the limit is");
    // Empty message.
    store.run(&["session", "send", "s1", ""]).fails(2, "empty");
    // Unknown adapter.
    store.run(&["session", "new", "--adapter", "pigeon:1"]).fails(2, "unknown adapter");
    // A key reused with a different payload.
    store.run(&["session", "send", "s1", "one", "--key", "k"]).ok();
    store.run(&["session", "send", "s1", "two", "--key", "k"]).fails(2, "key conflict");
    // An existing id.
    store.run(&["session", "new", "--id", "s1"]).fails(2, "already exists");
    // --propose outside awaiting.
    store
        .run(&["internal", "session-state", "idle", "--propose", "merge", "--session", "s1"])
        .fails(2, "--propose applies only to awaiting");

    let events = store.events("s1");
    assert_eq!(events.len(), 1, "only the one good keyed send was recorded: {events:?}");
    assert_eq!(events[0]["text"], "one");
}

// Stdin is a message source: one trailing newline is dropped, everything else kept.
#[test]
fn stdin_message_keeps_its_lines() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    store.run_with_stdin(&["session", "send", "s", "-"], "line one\nline two ✓\n".as_bytes()).ok();
    assert_eq!(store.events("s")[0]["text"], "line one\nline two ✓");
}

// A session whose lock another live process holds: busy, exit 3, after the bounded wait.
// It matters because hooks and CI need to tell "try again" apart from "broken".
#[test]
fn locked_session_exits_busy() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    // A lock held by this (live) test process, as the existing implementation writes it.
    let lock = store.root().join(".session-locks/s.lock");
    std::fs::write(&lock, std::process::id().to_string()).unwrap();
    let run = store
        .command(&["session", "send", "s", "hi"])
        .env("SPEX_LOCK_WAIT_MS", "200")
        .output()
        .unwrap();
    let run = common::Run(run);
    run.fails(3, "is locked by pid");
    // The error says what holds it: this test's own command line.
    let me = std::env::args().next().unwrap();
    assert!(run.stderr().contains(&format!("held by `{me}")), "{}", run.stderr());
    std::fs::remove_file(&lock).unwrap();
    assert!(store.events("s").is_empty(), "nothing was written while locked");
    store.run(&["session", "send", "s", "hi"]).ok();
}

// The hooks' guarded writes apply only from the statuses the table allows.
#[test]
fn internal_guarded_writes() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    let idle = store.json(&["internal", "session-idle", "--session", "s"]);
    assert_eq!(
        (idle["written"].as_bool(), idle["after"]["status"].as_str()),
        (Some(true), Some("idle"))
    );
    // Idle again: not from active, nothing written.
    let again = store.json(&["internal", "session-idle", "--session", "s"]);
    assert_eq!(again["written"], false);
    // Fail only while active.
    assert_eq!(store.json(&["internal", "session-fail", "--session", "s"])["written"], false);
    store.run(&["internal", "session-state", "active", "--session", "s"]).ok();
    let failed =
        store.json(&["internal", "session-turn-fail", "--note", "rate limited", "--session", "s"]);
    assert_eq!(failed["after"]["status"], "error");
    assert_eq!(failed["after"]["note"], "turn failed: rate limited");
    // Worker declarations.
    let done =
        store.json(&["session", "done", "--propose", "merge", "--note", "ok", "--session", "s"]);
    assert_eq!(done["after"]["display"], "review");
    store.run(&["session", "park", "--note", "waiting on CI", "--session", "s"]).ok();
    let statuses: Vec<String> = store
        .events("s")
        .iter()
        .map(|event| event["display"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses, ["idle", "working", "error", "review", "parked"]);
    // Without a session: a usage error naming the variable.
    let run = store.run(&["session", "park", "--note", "x"]);
    assert_eq!(run.code(), 2);
    assert!(run.stderr().contains("--session"), "{}", run.stderr());
}

// A refusing adapter leaves the message owed and the drain exits 1 with the reason.
#[test]
fn refused_delivery_stays_owed() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s", "--adapter", "exec:exit 3"]).ok();
    store.run(&["session", "send", "s", "hi"]).ok();
    let run = store.command(&["session", "drain", "s"]).env("SPEX_LOCK_WAIT_MS", "1000").output();
    let run = common::Run(run.unwrap());
    assert_eq!(run.code(), 1);
    assert_eq!(run.stdout(), "1 owed to s\n");
    assert!(run.stderr().contains("exited with exit status: 3; left owed"), "{}", run.stderr());
    // The stdout adapter then takes it.
    // Its stdout is only the messages; the report is on stderr.
    let run = store.run(&["session", "drain", "s", "--adapter", "stdout"]);
    let out = run.ok();
    assert_eq!(out.lines().count(), 1, "{out}");
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert!(first["text"].as_str().unwrap().starts_with("hi\n\n[spex reply channel"), "{first}");
    assert!(run.stderr().ends_with("0 owed to s\n"), "{}", run.stderr());
}

// Archive keeps the timeline; close removes the session and revokes it as a sender.
#[test]
fn archive_then_close() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "a"]).ok();
    store.run(&["session", "new", "--id", "b"]).ok();
    store.run(&["session", "send", "a", "hi", "--from", "b"]).ok();
    assert_eq!(store.run(&["session", "archive", "a"]).ok(), "archived a\n");
    let listed = store.run(&["session", "ls"]).ok();
    assert_eq!(listed.lines().count(), 2, "a header and b; archived is hidden: {listed}");
    let all = store.json(&["session", "ls", "--all"]);
    assert_eq!(all["sessions"].as_array().unwrap().len(), 2);
    assert_eq!(store.events("a").len(), 1, "archive keeps the timeline");
    assert_eq!(store.run(&["session", "close", "b"]).ok(), "closed b\n");
    assert!(!exists(&store.root().join("sessions/b")));
    store.run(&["session", "send", "a", "again", "--from", "b"]).fails(2, "sender b is closed");
    let ledger = std::fs::read_to_string(store.root().join("session-close-ledger.ndjson")).unwrap();
    assert!(ledger.contains("\"b\""), "{ledger}");
}

// `timeline --follow --json` streams NDJSON: the existing tail, then each new event.
#[test]
fn timeline_follow_streams_new_events() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    store.run(&["session", "send", "s", "before"]).ok();
    let mut child = store.spawn(&["--json", "session", "timeline", "s", "--follow"]);
    let lines = lines_of(&mut child);
    let first: serde_json::Value =
        serde_json::from_str(&lines.recv_timeout(STREAM_WAIT).unwrap()).unwrap();
    assert_eq!(first["text"], "before");
    store.run(&["session", "send", "s", "after"]).ok();
    let next: serde_json::Value =
        serde_json::from_str(&lines.recv_timeout(STREAM_WAIT).unwrap()).unwrap();
    assert_eq!(next["text"], "after");
    child.kill().unwrap();
    child.wait().unwrap();
}

// `drain --watch` delivers messages sent after it started.
#[test]
fn drain_watch_delivers_later_sends() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s", "--adapter", "stdout"]).ok();
    let mut child = store.spawn(&["session", "drain", "s", "--watch"]);
    let lines = lines_of(&mut child);
    store.run(&["session", "send", "s", "first"]).ok();
    let message: serde_json::Value =
        serde_json::from_str(&lines.recv_timeout(STREAM_WAIT).unwrap()).unwrap();
    assert!(message["text"].as_str().unwrap().starts_with("first"));
    // The report goes to stderr (stdout carries only the messages): the settlement shows in
    // the queue.
    let deadline = std::time::Instant::now() + STREAM_WAIT;
    while store.json(&["session", "show", "s"])["owed"] != 0 {
        assert!(std::time::Instant::now() < deadline, "the message is still owed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn terminal_escapes_in_messages_and_notes_are_printed_as_literal_characters() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "esc"]).ok();
    let hostile = "title\u{1b}]0;pwned\u{7} red\u{1b}[31m\u{9b}2J\r";
    store.run(&["session", "send", "esc", hostile]).ok();
    store
        .command(&["session", "ask", "--note", hostile])
        .env("SPEX_SESSION_ID", "esc")
        .output()
        .unwrap();
    for args in [
        vec!["session", "timeline", "esc"],
        vec!["session", "show", "esc"],
        vec!["search", "title"],
    ] {
        let out = store.run(&args).ok();
        assert!(out.contains("title"), "{args:?}: {out:?}");
        assert!(
            !out.chars().any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{args:?} printed a control character: {out:?}"
        );
    }
    // The machine-readable output keeps the exact text.
    assert_eq!(store.events("esc")[0]["text"], hostile);
}

/// A FIFO (or a directory) where a session's record, queue or lock belongs blocks no command:
/// it is refused at once as damage of that one session, the others answer as usual, and a lock
/// wait ends within `SPEX_LOCK_WAIT_MS`.
#[test]
fn special_files_in_a_sessions_place_block_nothing() {
    let limit = Duration::from_secs(20);
    for place in ["session.json", "pending.json", "lock"] {
        let store = Store::new();
        for id in ["good", "odd"] {
            store.run(&["session", "new", "--id", id]).ok();
            store.run(&["session", "send", id, "hello"]).ok();
        }
        let path = match place {
            "lock" => store.root().join(".session-locks/odd.lock"),
            name => store.root().join(format!("sessions/odd/{name}")),
        };
        let _ = std::fs::remove_file(&path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        common::mkfifo(&path);
        let run = |args: &[&str]| {
            let mut command = store.command(args);
            command.env("SPEX_LOCK_WAIT_MS", "500");
            common::run_within(command, limit, &format!("{place}: spex {}", args.join(" ")))
        };
        // The listing answers, the good session in it.
        let listed: serde_json::Value =
            serde_json::from_str(&run(&["--json", "session", "ls", "--all"]).ok()).unwrap();
        let good = listed["sessions"].as_array().unwrap().iter().any(|row| row["id"] == "good");
        assert!(good, "{place}: {listed}");
        // doctor names the odd one.
        let doctor = run(&["doctor"]);
        assert_eq!(doctor.code(), 4, "{place}: {}", doctor.stdout());
        assert!(doctor.stdout().contains("odd"), "{place}: {}", doctor.stdout());
        // The good session takes sends and drains; the odd one refuses at once.
        run(&["session", "send", "good", "still here"]).ok();
        run(&["session", "drain", "good", "--adapter", "exec:cat >/dev/null"]).ok();
        let refused = run(&["session", "send", "odd", "hello?"]);
        assert_ne!(refused.code(), 0, "{place}");
        let repaired = run(&["session", "repair", "odd"]);
        assert_ne!(repaired.code(), 0, "{place}: {}", repaired.stdout());
        run(&["search", "hello"]).ok();
    }
}

/// Names in `sessions/` that are no session id (not UTF-8, 255 bytes long, characters an id
/// never has) are damage rows `doctor` names by their bytes, never a failure of the listing,
/// search, a send or a repair.
#[test]
fn names_that_are_not_ids_fail_nothing() {
    use std::os::unix::ffi::OsStrExt as _;
    let store = Store::new();
    store.run(&["session", "new", "--id", "good"]).ok();
    store.run(&["session", "send", "good", "hello there"]).ok();
    let sessions = store.root().join("sessions");
    let odd: [&[u8]; 3] = [b"caf\xe9-latin1", &[b'x'; 255], b"bad name!"];
    for name in odd {
        std::fs::create_dir(sessions.join(std::ffi::OsStr::from_bytes(name))).unwrap();
    }
    let doctor = store.run(&["doctor"]);
    assert_eq!(doctor.code(), 4, "{}", doctor.stdout());
    let text = doctor.stdout();
    assert!(text.contains("caf\\xe9-latin1: not a session"), "{text}");
    assert!(
        text.contains(&format!("{}: not a session: longer than 128 bytes", "x".repeat(255))),
        "{text}"
    );
    assert!(text.contains("bad name!: not a session"), "{text}");
    let listed = store.json(&["session", "ls", "--all"]);
    assert_eq!(ids_of(&listed), ["good"]);
    store.run(&["session", "send", "good", "again"]).ok();
    store.run(&["session", "repair", "good"]).ok();
    let hits = store.json(&["search", "hello"]);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1, "{hits}");
    store.run(&["doctor", "good"]).ok();
}

fn ids_of(document: &serde_json::Value) -> Vec<String> {
    document["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Small refusals and one small kindness: an empty note, a worktree that is missing, not a
/// directory or not UTF-8, and a bad replay token are bad input (exit 2) and write nothing; a
/// relative root that does not exist yet is created.
#[test]
fn empty_notes_bad_worktrees_and_bad_tokens_are_bad_input() {
    use std::os::unix::ffi::OsStrExt as _;
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    for args in [
        &["session", "ask", "--note", "", "--session", "w"][..],
        &["session", "park", "--note", "  ", "--session", "w"][..],
        &["session", "done", "--propose", "merge", "--note", "", "--session", "w"][..],
    ] {
        store.run(args).fails(2, "it is empty");
    }
    assert_eq!(store.json(&["session", "show", "w"])["state"]["status"], "active");
    let file = store.path("a-file");
    std::fs::write(&file, "").unwrap();
    let odd = store.dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir(&odd).unwrap();
    let missing = store.path("missing").display().to_string();
    let cases =
        [(missing.as_str(), "No such file"), (file.to_str().unwrap(), "is not a directory")];
    for (worktree, needle) in cases {
        store.run(&["session", "new", "--id", "x", "--worktree", worktree]).fails(2, needle);
    }
    let output =
        store.command(&["session", "new", "--id", "x", "--worktree"]).arg(&odd).output().unwrap();
    common::Run(output).fails(2, "is not UTF-8");
    assert_eq!(store.json(&["session", "ls", "--all"])["sessions"].as_array().unwrap().len(), 1);
    store.run(&["verify", "replay", "not-a-token"]).fails(2, "replay token");
    // A relative root, two directories deep, created where the command runs.
    let created = store
        .command(&["--root", "rel/deep", "session", "new", "--id", "r"])
        .env_remove("SPEX_ROOT")
        .output()
        .unwrap();
    common::Run(created).ok();
    assert!(store.dir.path().join("rel/deep/sessions/r").is_dir());
}

/// A close racing senders and a drainer (each of their commands finishes unfinished closes when
/// it opens the store) exits 0 once the close completed, and the close ledger names it once.
#[test]
fn a_close_racing_senders_and_a_drainer_succeeds() {
    let store = Store::new();
    for round in 0..6 {
        let id = format!("s{round}");
        store.run(&["session", "new", "--id", &id]).ok();
        store.run(&["session", "send", &id, "first"]).ok();
        let drainer = store
            .command(&["session", "drain", &id, "--watch", "--adapter", "exec:cat >/dev/null"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let senders: Vec<std::process::Child> = (0..3)
            .map(|_| {
                let script = format!(
                    "for i in $(seq 1 40); do \"{}\" session send {id} \"m$i\" >/dev/null 2>&1; \"{}\" session ls >/dev/null 2>&1; done",
                    common::SPEX,
                    common::SPEX
                );
                std::process::Command::new("sh")
                    .args(["-c", &script])
                    .env("SPEX_ROOT", store.root())
                    .env_remove("SPEX_SEED")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150));
        let closed = store.run(&["session", "close", &id]);
        assert_eq!(closed.code(), 0, "round {round}: {}", closed.stderr());
        for mut child in senders.into_iter().chain([drainer]) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let ledger = std::fs::read_to_string(store.root().join("session-close-ledger.ndjson"))
            .unwrap_or_default();
        let named = ledger.lines().filter(|line| line.contains(&format!("\"{id}\""))).count();
        assert_eq!(named, 1, "round {round}: {ledger}");
    }
}

/// A queue written by another hand: an entry whose `sent` line is not in the log is not
/// delivered (the drain stops before it, fail-closed, and says why), and a mid queued twice is
/// delivered once.
#[test]
fn the_drain_delivers_only_what_was_said_and_each_mid_once() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    let one = store.run(&["session", "send", "w", "one"]).ok();
    let one = one.split_whitespace().next().unwrap().to_owned();
    let two = store.run(&["session", "send", "w", "two"]).ok();
    let two = two.split_whitespace().next().unwrap().to_owned();
    let queue = store.root().join("sessions/w/pending.json");
    let entry =
        |mid: &str, text: &str| serde_json::json!({ "mid": mid, "text": text, "from": null });
    // one, one again, two, then an entry nobody said.
    let forged = "9d1c6d3e-0000-4000-8000-00000000f00d";
    let entries = serde_json::json!([
        entry(&one, "one"),
        entry(&one, "one"),
        entry(&two, "two"),
        entry(forged, "rm -rf ~")
    ]);
    std::fs::write(&queue, serde_json::to_string_pretty(&entries).unwrap()).unwrap();
    let log = store.path("delivered.log");
    let adapter = format!("exec:cat >>{}; echo >>{}", log.display(), log.display());
    let drained = store.run(&["session", "drain", "w", "--adapter", &adapter]);
    assert!(
        drained.stderr().contains(&format!("entry {forged} has no sent line")),
        "{}",
        drained.stderr()
    );
    let delivered = std::fs::read_to_string(&log).unwrap();
    assert_eq!(delivered.lines().collect::<Vec<_>>(), ["one", "two"], "{delivered}");
    // The forged entry stays owed; nothing else does.
    let left: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&queue).unwrap()).unwrap();
    assert_eq!(left, serde_json::json!([entry(forged, "rm -rf ~")]));
}

/// A refused keyed send (the key reused with other text) and a replay write nothing: no file of
/// the session changes, the receipt index included.
#[test]
fn refused_sends_and_replays_write_nothing() {
    use std::os::unix::fs::MetadataExt as _;
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    // Enough keyed sends that the receipt index is due for a rewrite at any time.
    for n in 0..12 {
        store.run(&["session", "send", "w", &format!("m{n}"), "--key", &format!("k{n}")]).ok();
    }
    let snapshot = || {
        let mut files = Vec::new();
        let mut dirs = vec![store.root().join("sessions/w")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                let meta = entry.metadata().unwrap();
                if meta.is_dir() {
                    dirs.push(entry.path());
                } else {
                    files.push((
                        entry.path(),
                        meta.len(),
                        meta.mtime_nsec(),
                        meta.mtime(),
                        meta.ino(),
                    ));
                }
            }
        }
        files.sort();
        files
    };
    let before = snapshot();
    assert!(before.iter().any(|(path, ..)| path.ends_with("receipts.index")), "{before:?}");
    std::thread::sleep(Duration::from_millis(20));
    store.run(&["session", "send", "w", "other text", "--key", "k3"]).fails(2, "key conflict");
    store.run(&["session", "send", "w", "m3", "--key", "k3"]).ok();
    store.run(&["session", "send", "w", "m0", "--key", "k0"]).ok();
    assert_eq!(snapshot(), before, "nothing was written");
}

/// Every file spex creates in a store is its owner's alone: files 0600, directories 0700 (the
/// index and its write-ahead log included).
#[test]
fn every_file_of_a_store_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt as _;
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    store.run(&["session", "send", "w", "secret plans", "--key", "k"]).ok();
    store.run(&["session", "drain", "w", "--adapter", "exec:cat >/dev/null"]).ok();
    store.run(&["session", "ls"]).ok();
    store.run(&["search", "plans"]).ok();
    store.run(&["session", "close", "w"]).ok();
    let mut checked = 0;
    let mut dirs = vec![store.root()];
    while let Some(dir) = dirs.pop() {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                dirs.push(path);
            } else {
                assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{}", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked >= 3, "files were checked: {checked}");
}

/// Every repair `doctor` advises works when followed as written: a torn tail, a damaged queue
/// (garbage; a FIFO, which only a close removes), a stale staging file, a corrupt record, a record that is a FIFO, a name
/// that is no session and a damaged session index; afterwards `doctor` finds nothing.
#[test]
fn every_doctor_advice_works_when_followed() {
    let store = Store::new();
    let names = ["torn", "queue", "fifoq", "stage", "corrupt", "fiforec"];
    for name in names {
        store.run(&["session", "new", "--id", name]).ok();
        store.run(&["session", "send", name, &format!("hello {name}")]).ok();
    }
    let sessions = store.root().join("sessions");
    let segment = sessions.join("torn/timeline/000000000001.ndjson");
    std::fs::OpenOptions::new().append(true).open(&segment).unwrap().write_all(b"{\"half").unwrap();
    std::fs::write(sessions.join("queue/pending.json"), "junk").unwrap();
    std::fs::remove_file(sessions.join("fifoq/pending.json")).unwrap();
    common::mkfifo(&sessions.join("fifoq/pending.json"));
    std::fs::write(sessions.join("stage/session.json.tmp"), "{}").unwrap();
    std::fs::write(sessions.join("corrupt/session.json"), "not json").unwrap();
    std::fs::remove_file(sessions.join("fiforec/session.json")).unwrap();
    common::mkfifo(&sessions.join("fiforec/session.json"));
    std::fs::create_dir(sessions.join("not an id")).unwrap();
    std::fs::write(store.root().join("index.sqlite"), "garbage").unwrap();

    let mut command = store.command(&["--json", "doctor"]);
    command.env("SPEX_LOCK_WAIT_MS", "500");
    let doctor = common::run_within(command, Duration::from_secs(60), "doctor");
    assert_eq!(doctor.code(), 4, "{}", doctor.stdout());
    let found: serde_json::Value = serde_json::from_str(&doctor.stdout()).unwrap();
    let advice = |needle: &str| -> String {
        let rows = found["found"].as_array().unwrap();
        let row = rows.iter().find(|row| row["path"].as_str().unwrap().contains(needle));
        row.unwrap_or_else(|| panic!("no damage at {needle}: {found}"))["repair"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // Each advice names what to run; run exactly that.
    let follow = |needle: &str, command: &[&str]| {
        let text = advice(needle);
        let shown = format!("`spex {}", command[..2].join(" "));
        assert!(text.contains(&shown), "{needle}: advice {text:?} should say {shown}");
        assert!(text.contains(command[2]), "{needle}: advice {text:?} should name {}", command[2]);
        store.run(command).ok();
    };
    follow("torn/", &["session", "send", "torn", "after the tear"]);
    follow("queue/pending.json", &["session", "repair", "queue"]);
    follow("fifoq/", &["session", "close", "fifoq", "--yes"]);
    follow("corrupt/", &["session", "close", "corrupt", "--yes"]);
    follow("fiforec/", &["session", "close", "fiforec", "--yes"]);
    assert!(advice("stage/").contains("the next write to the session removes it"));
    store.run(&["session", "send", "stage", "a write"]).ok();
    assert!(advice("not an id").contains("move it out of the sessions directory"));
    std::fs::rename(sessions.join("not an id"), store.path("moved-out")).unwrap();
    assert!(advice("index.sqlite").contains("`spex index rebuild`"));
    store.run(&["index", "rebuild"]).ok();

    assert_eq!(store.run(&["doctor"]).ok(), "no damage found\n");
    let listed = store.json(&["session", "ls", "--all"]);
    let mut ids = ids_of(&listed);
    ids.sort();
    assert_eq!(ids, ["queue", "stage", "torn"]);
}

/// `SPEX_ROOT=` and `SPEX_SESSION_ID=` (set but empty, as `VAR= spex ...` sets them) count as
/// unset: the default root is chosen, and a declaration asks for a session.
#[test]
fn empty_environment_variables_count_as_unset() {
    let store = Store::new();
    let home = store.path("home");
    std::fs::create_dir(&home).unwrap();
    let mut command = store.command(&["--json", "where"]);
    command.env("SPEX_ROOT", "").env("HOME", &home).env_remove("SPEXCODE_HOME");
    let run = common::Run(command.output().unwrap());
    let place: serde_json::Value = serde_json::from_str(&run.ok()).unwrap();
    let root = place["root"].as_str().unwrap();
    assert!(root.starts_with(home.join(".spexcode/projects").to_str().unwrap()), "{place}");
    let mut command = store.command(&["session", "ask", "--note", "which region?"]);
    command.env("SPEX_SESSION_ID", "");
    common::Run(command.output().unwrap()).fails(2, "no declaring session");
}

/// `session ls` narrowed: by project (the worktree is DIR or under it; a directory, not a string
/// prefix), by the harness that runs it, by time, and to the first N.
#[test]
fn session_listings_narrow_by_project_harness_time_and_count() {
    let store = Store::new();
    for dir in ["shop", "shop/web", "shopping", "api"] {
        std::fs::create_dir_all(store.path(dir)).unwrap();
    }
    let new = |id: &str, dir: &str| {
        let dir = store.path(dir);
        store.run(&["session", "new", "--id", id, "--worktree", dir.to_str().unwrap()]).ok();
    };
    new("one", "shop");
    new("two", "shop/web");
    new("three", "shopping");
    new("four", "api");
    store.run(&["session", "new", "--id", "nowhere"]).ok();
    let ids = |args: &[&str]| -> Vec<String> {
        let mut full = vec!["session", "ls"];
        full.extend_from_slice(args);
        let mut ids = ids_of(&store.json(&full));
        ids.sort();
        ids
    };
    let shop = store.path("shop");
    let shop = shop.to_str().unwrap();
    assert_eq!(ids(&["--project", shop]), ["one", "two"]);
    assert_eq!(ids(&["--project", shop, "--limit", "1"]).len(), 1);
    assert_eq!(ids(&["--limit", "5"]).len(), 5);
    assert_eq!(ids(&["--since", "1h"]).len(), 5);
    assert!(ids(&["--since", "2100-01-01"]).is_empty());
    assert!(ids(&["--harness", "codex"]).is_empty(), "no harness runs these");
    // A session a harness runs (its adapter names it; nothing runs until a drain).
    store.run(&["session", "new", "--id", "agent", "--adapter", "claude"]).ok();
    assert_eq!(ids(&["--harness", "claude"]), ["agent"]);
    assert!(ids(&["--harness", "codex"]).is_empty());
    let none = store.run(&["session", "ls", "--harness", "codex"]);
    assert!(none.stderr().contains("no sessions match"), "{}", none.stderr());
    // A relative DIR is from the current directory (the test runs in the store's parent).
    assert_eq!(ids(&["--project", "api"]), ["four"]);
    store.run(&["session", "ls", "--harness", "vim"]).fails(2, "unknown harness");
}

/// `drain --adapter stdout | head -2`: the reader closing the pipe ends the drain quietly (exit
/// 0, one line on stderr); what was not written stays owed, and nothing is written twice.
#[test]
fn a_drain_to_a_closed_pipe_ends_quietly_with_the_rest_owed() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "piped"]).ok();
    let body = "x".repeat(400);
    let messages: String = (0..300).map(|n| format!("message {n} {body}\n")).collect();
    // One message per line, sent through one shell (a few hundred sends).
    let script = format!(
        "while IFS= read -r line; do '{}' session send piped \"$line\" >/dev/null || exit 1; done",
        common::SPEX
    );
    let sent = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("SPEX_ROOT", store.root())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(messages.as_bytes())?;
            child.wait()
        })
        .unwrap();
    assert!(sent.success());
    let drain = format!(
        "'{}' session drain piped --adapter stdout | head -2 > '{}'; echo \"${{PIPESTATUS[0]}}\"",
        common::SPEX,
        store.path("head.txt").display()
    );
    let run = std::process::Command::new("bash")
        .arg("-c")
        .arg(&drain)
        .env("SPEX_ROOT", store.root())
        .output()
        .unwrap();
    let stderr = String::from_utf8(run.stderr).unwrap();
    assert_eq!(String::from_utf8(run.stdout).unwrap(), "0\n", "exit 0: {stderr}");
    assert!(stderr.contains("the reader closed the pipe after"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line, no report: {stderr}");
    let head = std::fs::read_to_string(store.path("head.txt")).unwrap();
    assert_eq!(head.lines().count(), 2);
    let owed = store.json(&["session", "show", "piped"])["owed"].as_u64().unwrap();
    assert!(owed > 0 && owed < 300, "the rest is owed: {owed}");
    // The rest drains whole: each message delivered once in all.
    let rest = store.run(&["session", "drain", "piped", "--adapter", "stdout"]).ok();
    assert_eq!(rest.lines().count() as u64, owed);
    assert!(!rest.contains("message 0 "), "nothing written twice");
}
