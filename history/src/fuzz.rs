//! The entry points of the `claude_transcript`, `codex_transcript` and `opencode_session` fuzz
//! targets (`fuzz/fuzz_targets/`): a transcript of one harness, parsed line by line, through the
//! file reader whole and in chunks, then redacted; an OpenCode session is the input's lines made
//! rows of a database with OpenCode's tables, read back through its reader.
//!
//! Properties, not only "no panic": the reader and the line parser agree on every event; a read
//! in chunks gives what one read gives; every event names a line that exists; a planted key, set
//! apart by spaces anywhere in the text, never survives redaction; an OpenCode session renders a
//! line per message after its own, each row's JSON data as it was stored.

use crate::event::{Harness, Kind};
use crate::parse::Parser;
use crate::redact::{Identity, redact};

/// A key no text may show after redaction.
const PLANTED: &str = "sk-ant-api03-PLANTEDplantedPLANTED0123456789";

/// One input as a Claude Code transcript.
pub fn claude_transcript(data: &[u8]) {
    transcript(Harness::ClaudeCode, data);
}

/// One input as a Codex transcript.
pub fn codex_transcript(data: &[u8]) {
    transcript(Harness::Codex, data);
}

/// One input as an OpenCode session: each line a row's `data`, a message's when it is a JSON
/// object with a `role` (or the first line), else a part of the message before it.
pub fn opencode_session(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (messages, rows) = plant_opencode_session(dir.path(), &text);
    let found = crate::discover::discover(&[crate::discover::Root {
        harness: Harness::OpenCode,
        dir: dir.path().to_path_buf(),
    }])
    .expect("the database is listed");
    assert_eq!(found.len(), 1, "one session");
    let path = &found[0].path;
    let lines = crate::opencode::render(path).expect("the session renders");
    assert_eq!(lines.len() as u64, 1 + messages, "a line per message after the session's");
    // Each row's data as stored: a JSON object back as that object.
    for line in &lines {
        let value: serde_json::Value = serde_json::from_str(line).expect("a rendered line is JSON");
        for data in std::iter::once(&value["data"])
            .chain(value["parts"].as_array().into_iter().flatten().map(|part| &part["data"]))
        {
            if let serde_json::Value::String(text) = data {
                assert!(rows.contains(&text.as_str()), "a row's text is kept as it was");
            }
        }
    }
    let mut parser = Parser::new(Harness::OpenCode);
    let mut events = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        parser.line(index as u64 + 1, line, &mut events);
    }
    for event in &events {
        assert!(event.line >= 1 && event.line <= lines.len() as u64, "line {}", event.line);
    }
    let read = crate::read::read_from(path, Harness::OpenCode, 0, 0).expect("the session reads");
    assert_eq!(read.events, events, "the reader and the parser disagree");
    assert_eq!(read.lines, lines.len() as u64);
    agree_in_chunks(path, Harness::OpenCode, data.len(), &read);
    redaction_holds(&events);
}

/// Writes `text` into an OpenCode database in `dir` as one session (see [`opencode_session`]);
/// returns how many messages it holds and each row's data.
fn plant_opencode_session<'a>(dir: &std::path::Path, text: &'a str) -> (u64, Vec<&'a str>) {
    let db = dir.join(crate::opencode::DB_FILE);
    let connection = rusqlite::Connection::open(&db).expect("a database");
    connection
        .execute_batch(
            "CREATE TABLE session (id TEXT PRIMARY KEY, directory TEXT NOT NULL, title TEXT NOT NULL,
                 version TEXT NOT NULL, parent_id TEXT, time_created INTEGER NOT NULL,
                 time_updated INTEGER NOT NULL);
             CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
                 time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
             CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL,
                 session_id TEXT NOT NULL, time_created INTEGER NOT NULL,
                 time_updated INTEGER NOT NULL, data TEXT NOT NULL);
             INSERT INTO session VALUES ('ses_fuzz', '/home/fuzz/work', 't', '1', NULL, 0, 0);",
        )
        .expect("the tables");
    let (mut messages, mut message, mut rows) = (0u64, String::new(), Vec::new());
    for (at, line) in text.lines().enumerate() {
        let is_message = message.is_empty()
            || serde_json::from_str::<serde_json::Value>(line)
                .is_ok_and(|value| value.get("role").is_some());
        let time = at as i64;
        if is_message {
            messages += 1;
            message = format!("msg_{at:06}");
            connection
                .execute(
                    "INSERT INTO message VALUES (?1, 'ses_fuzz', ?2, ?2, ?3)",
                    rusqlite::params![message, time, line],
                )
                .expect("a message row");
        } else {
            connection
                .execute(
                    "INSERT INTO part VALUES (?1, ?2, 'ses_fuzz', ?3, ?3, ?4)",
                    rusqlite::params![format!("prt_{at:06}"), message, time, line],
                )
                .expect("a part row");
        }
        rows.push(line);
    }
    (messages, rows)
}

fn transcript(harness: Harness, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    // The line parser over every complete line.
    let mut parser = Parser::new(harness);
    let mut events = Vec::new();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    let lines: Vec<&str> = complete.split_inclusive('\n').collect();
    for (index, line) in lines.iter().enumerate() {
        parser.line(index as u64 + 1, line.trim_end_matches(['\n', '\r']), &mut events);
    }
    for event in &events {
        assert!(event.line >= 1 && event.line <= lines.len() as u64, "line {}", event.line);
    }
    // The file reader over the same bytes: the same events, stopping before an unfinished line.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, text.as_bytes()).expect("the input is written");
    let read = crate::read::read_from(&path, harness, 0, 0).expect("the input reads");
    assert_eq!(read.events, events, "the reader and the parser disagree");
    assert_eq!(read.offset, complete.len() as u64);
    agree_in_chunks(&path, harness, data.len(), &read);
    redaction_holds(&events);
}

/// A read in chunks of a few lines' bytes (the budget from the input's length), with one
/// parser, gives what the one read `whole` gave.
fn agree_in_chunks(
    path: &std::path::Path,
    harness: Harness,
    length: usize,
    whole: &crate::parse::Reading,
) {
    let budget = 1 + (length as u64 % 257);
    let mut parser = Parser::new(harness);
    let (mut offset, mut lines, mut chunked) = (0, 0, Vec::new());
    loop {
        let chunk = crate::read::read_chunk(path, &mut parser, offset, lines, budget)
            .expect("the input reads");
        chunked.extend(chunk.events);
        (offset, lines) = (chunk.offset, chunk.lines);
        if !chunk.more {
            break;
        }
    }
    assert_eq!(chunked, whole.events, "a read in chunks and one read disagree");
    assert_eq!((offset, lines), (whole.offset, whole.lines));
}

/// Every text, with the planted key set apart in its middle, loses the key.
fn redaction_holds(events: &[crate::event::Event]) {
    let identity = Identity::new(Some("/home/fuzz"), Some("fuzz"), Some("fuzzhost"));
    for event in events {
        if let Kind::User { text } | Kind::Assistant { text } = &event.kind {
            let mut at = text.len() / 2;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let planted = format!("{} {PLANTED} {}", &text[..at], &text[at..]);
            let shown = redact(&planted, &identity);
            assert!(!shown.contains(PLANTED), "the planted key survived: {shown:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_committed_corpora_hold() {
        type Target = fn(&[u8]);
        let targets: [(&str, Target); 3] = [
            ("claude_transcript", super::claude_transcript),
            ("codex_transcript", super::codex_transcript),
            ("opencode_session", super::opencode_session),
        ];
        for (target, run) in targets {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../fuzz/corpus")
                .join(target);
            let mut inputs = 0;
            let entries =
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                let path = entry.expect("a corpus entry").path();
                let data = std::fs::read(&path).expect("a corpus file reads");
                let outcome = std::panic::catch_unwind(|| run(&data));
                assert!(outcome.is_ok(), "{} breaks its property", path.display());
                inputs += 1;
            }
            assert!(inputs >= 1, "a seed corpus for {target}");
        }
    }
}
