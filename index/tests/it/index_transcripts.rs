//! Harness transcripts in the index: a rescan of an unchanged transcript reads nothing, an
//! appended line is folded alone, a rewritten transcript is read again from its start (its old
//! texts gone), a content-version row is re-extracted, and search finds what only an agent
//! answered, ranked below what a person said.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::io::Write as _;
use std::path::{Path, PathBuf};

use spex_history::{Found, Harness, Root, discover};
use spex_index::{HitKind, Index, SearchFilter};

fn fixture(harness: &str) -> PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures");
    let root = match harness {
        "claude" => Root { harness: Harness::ClaudeCode, dir: base.join("claude") },
        _ => Root { harness: Harness::Codex, dir: base.join("codex") },
    };
    discover(&[root]).unwrap().remove(0).path
}

/// A Codex home in `dir` with the fixture's first `lines` lines as its one transcript.
fn codex_home(dir: &Path, lines: usize) -> (Root, PathBuf) {
    let sessions = dir.join("codex/sessions/2026/11/30");
    std::fs::create_dir_all(&sessions).unwrap();
    let path =
        sessions.join("rollout-2026-11-30T10-00-00-019a2d7a-41c4-78b1-b7cc-a45d62a89cd5.jsonl");
    let text = std::fs::read_to_string(fixture("codex")).unwrap();
    let head: String = text.split_inclusive('\n').take(lines).collect();
    std::fs::write(&path, head).unwrap();
    (Root { harness: Harness::Codex, dir: dir.join("codex") }, path)
}

fn search(index: &Index, query: &str) -> Vec<(String, String, Option<u64>)> {
    let filter = SearchFilter { limit: 20, ..SearchFilter::default() };
    index
        .search(query, &filter)
        .unwrap()
        .into_iter()
        .map(|hit| (hit.source.name().to_owned(), hit.kind.name().to_owned(), hit.line))
        .collect()
}

fn found(root: &Root) -> Vec<Found> {
    discover(std::slice::from_ref(root)).unwrap()
}

#[test]
fn transcripts_fold_past_their_watermarks() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let (root, path) = codex_home(dir.path(), 13);
    let first = index.scan_history(&found(&root)).unwrap();
    assert_eq!((first.read, first.reset, first.lines), (1, 1, 13));
    // Unchanged: nothing read.
    let again = index.scan_history(&found(&root)).unwrap();
    assert_eq!((again.transcripts, again.read, again.lines), (1, 0, 0));
    assert!(search(&index, "connections").is_empty(), "the answer is not written yet");
    // One line appended: that line alone is folded, and the answer is found, with its line.
    let text = std::fs::read_to_string(fixture("codex")).unwrap();
    let line14 = text.lines().nth(13).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    writeln!(file, "{line14}").unwrap();
    drop(file);
    let grown = index.scan_history(&found(&root)).unwrap();
    assert_eq!((grown.read, grown.reset, grown.lines), (1, 0, 1));
    assert_eq!(
        search(&index, "connections"),
        [("codex".to_owned(), "answer".to_owned(), Some(14))]
    );
    let rows = index.transcripts().unwrap();
    assert_eq!(rows[0].lines, 14);
    assert_eq!(rows[0].version.as_deref(), Some("0.58.0"), "what the first fold learned stays");
    assert_eq!(rows[0].last_activity.as_deref(), Some("2026-11-30T10:00:01.000Z"));
    // Rewritten under the watermark to the same length (so only the pin can tell: the size and
    // the offset still agree): read again from the start, the old texts replaced, not
    // duplicated.
    let before = std::fs::read_to_string(&path).unwrap();
    let rewritten = before.replace("find out why", "seek out why");
    assert_eq!(rewritten.len(), before.len());
    std::fs::write(&path, rewritten).unwrap();
    let reset = index.scan_history(&found(&root)).unwrap();
    assert_eq!((reset.read, reset.reset, reset.lines), (1, 1, 14));
    assert!(search(&index, "find").is_empty());
    assert_eq!(search(&index, "seek").len(), 1);
    assert_eq!(search(&index, "connections").len(), 1, "no duplicate after the reset");
    // Grown and rewritten (a new line after the old watermark, other bytes before it): the pin
    // still sends it back to the start.
    let before = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{}{}\n", before.replace("seek out why", "sort out why"), line14),
    )
    .unwrap();
    let regrown = index.scan_history(&found(&root)).unwrap();
    assert_eq!((regrown.reset, regrown.lines), (1, 15));
    assert!(search(&index, "seek").is_empty());
    assert_eq!(search(&index, "sort").len(), 1);
    assert_eq!(search(&index, "connections").len(), 2, "the answer is in the file twice now");
    // Gone: its row and texts go.
    std::fs::remove_file(&path).unwrap();
    let gone = index.scan_history(&found(&root)).unwrap();
    assert_eq!(gone.removed, 1);
    assert!(search(&index, "connections").is_empty());
    assert!(index.transcripts().unwrap().is_empty());
}

/// A transcript longer than one read's chunk (8 MiB) is folded in several, each continuing the
/// last: every line once, and the row ends at the end of the file (unchanged to the next scan).
#[test]
fn a_long_transcript_folds_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let (root, path) = codex_home(dir.path(), 13);
    let text = std::fs::read_to_string(fixture("codex")).unwrap();
    let answer = text.lines().nth(13).unwrap();
    let mut file =
        std::io::BufWriter::new(std::fs::OpenOptions::new().append(true).open(&path).unwrap());
    let mut lines = 13;
    while file.get_ref().metadata().unwrap().len() < 9 << 20 {
        for _ in 0..1000 {
            writeln!(file, "{answer}").unwrap();
            lines += 1;
        }
        file.flush().unwrap();
    }
    writeln!(file, "{}", answer.replace("connections", "zymurgically")).unwrap();
    lines += 1;
    drop(file);
    let scanned = index.scan_history(&found(&root)).unwrap();
    assert_eq!((scanned.read, scanned.reset, scanned.lines), (1, 1, lines));
    assert_eq!(index.transcripts().unwrap()[0].lines, lines as i64);
    assert_eq!(
        search(&index, "zymurgically"),
        [("codex".to_owned(), "answer".to_owned(), Some(lines))]
    );
    let again = index.scan_history(&found(&root)).unwrap();
    assert_eq!((again.read, again.lines), (0, 0), "folded to its end");
}

#[test]
fn a_person_ranks_above_an_agent_and_tools_are_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let (root, _) = codex_home(dir.path(), 20);
    index.scan_history(&found(&root)).unwrap();
    // "30" is in the person's prompt and in the agent's answer.
    let hits = search(&index, "30");
    let kinds: Vec<&str> = hits.iter().map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["prompt", "answer"], "the person's words rank first");
    assert_eq!(search(&index, "apply_patch")[0].1, "tool");
    let filter =
        SearchFilter { limit: 20, source: Some("claude".to_owned()), ..SearchFilter::default() };
    assert!(index.search("30", &filter).unwrap().is_empty(), "filtered by harness");
    let project = |dir: &str| SearchFilter {
        limit: 20,
        project: Some(dir.to_owned()),
        ..SearchFilter::default()
    };
    assert_eq!(index.search("30", &project("/home/dev/api")).unwrap().len(), 2);
    assert_eq!(index.search("30", &project("/home/dev")).unwrap().len(), 2, "a parent project");
    assert!(
        index.search("30", &project("/home/dev/ap")).unwrap().is_empty(),
        "not a prefix of a name"
    );
    assert!(index.search("30", &project("/home/dev/api/src")).unwrap().is_empty());
}

#[test]
fn an_unreadable_transcript_is_named_and_the_scan_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let (root, _) = codex_home(dir.path(), 13);
    let bad = dir.path().join("a-directory.jsonl");
    std::fs::create_dir(&bad).unwrap();
    let mut transcripts = vec![Found {
        harness: Harness::Codex,
        path: bad.clone(),
        id: "unreadable".to_owned(),
        size: 10,
        modified_ns: 1,
    }];
    transcripts.extend(found(&root));
    let scanned = index.scan_history(&transcripts).unwrap();
    assert_eq!(scanned.read, 1, "the readable one is folded");
    assert_eq!(scanned.unreadable.len(), 1);
    assert_eq!(scanned.unreadable[0].0, bad);
    assert_eq!(index.transcripts().unwrap().len(), 1);
}

#[test]
fn history_sessions_reach_the_change_feed() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let (root, path) = codex_home(dir.path(), 13);
    index.scan_history(&found(&root)).unwrap();
    let history = |changes: &[spex_index::Change]| -> Vec<(String, i64)> {
        changes
            .iter()
            .filter_map(|change| match change {
                spex_index::Change::History(h) => {
                    Some((format!("update {}", h.transcript.lines), h.version))
                }
                spex_index::Change::HistoryRemoved { id, version, .. } => {
                    Some((format!("remove {id}"), *version))
                }
                _ => None,
            })
            .collect()
    };
    let first = history(&index.changes_since(0).unwrap());
    assert_eq!(first.iter().map(|(what, _)| what.as_str()).collect::<Vec<_>>(), ["update 13"]);
    let version = index.version().unwrap();
    assert!(index.changes_since(version).unwrap().is_empty(), "an unchanged scan changes nothing");
    let text = std::fs::read_to_string(fixture("codex")).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    writeln!(file, "{}", text.lines().nth(13).unwrap()).unwrap();
    drop(file);
    index.scan_history(&found(&root)).unwrap();
    let grown = history(&index.changes_since(version).unwrap());
    assert_eq!(grown.len(), 1);
    assert_eq!(grown[0].0, "update 14");
    assert!(grown[0].1 > version);
    assert_eq!(index.history().unwrap()[0].transcript.lines, 14);
    std::fs::remove_file(&path).unwrap();
    index.scan_history(&found(&root)).unwrap();
    let removed = history(&index.changes_since(grown[0].1).unwrap());
    assert_eq!(
        removed,
        [("remove 019a2d7a-41c4-78b1-b7cc-a45d62a89cd5".to_owned(), grown[0].1 + 1)]
    );
    assert!(index.history().unwrap().is_empty());
    // Back again: a new row, read from its start.
    std::fs::write(&path, text.split_inclusive('\n').take(13).collect::<String>()).unwrap();
    let again = index.scan_history(&found(&root)).unwrap();
    assert_eq!((again.read, again.lines), (1, 13));
    assert_eq!(search(&index, "connections").len(), 0);
    assert_eq!(index.history().unwrap().len(), 1);
}

#[test]
fn the_listing_is_searched_with_the_texts() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let (root, _) = codex_home(dir.path(), 20);
    index.scan_history(&found(&root)).unwrap();
    // Part of the session's id: in no text, in its listing.
    let filter = SearchFilter { limit: 20, ..SearchFilter::default() };
    let hits = index.search("A45D62A8", &filter).unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!((hits[0].kind.name(), hits[0].matched.name()), ("session", "listing"));
    assert_eq!((hits[0].source.name(), hits[0].line), ("codex", None));
    assert!(hits[0].marked("[", "]").contains("[a45d62a8]"), "{}", hits[0].snippet);
    // Its project, under the listing's filters.
    assert_eq!(index.search("dev/api", &filter).unwrap()[0].kind, HitKind::Session);
    let elsewhere =
        SearchFilter { limit: 20, project: Some("/home/dev/web".to_owned()), ..filter.clone() };
    assert!(index.search("A45D62A8", &elsewhere).unwrap().is_empty());
    let spex = SearchFilter { limit: 20, source: Some("spex".to_owned()), ..filter.clone() };
    assert!(index.search("A45D62A8", &spex).unwrap().is_empty());
    // A session with a text that matches is not listed again.
    assert!(index.search("30", &filter).unwrap().iter().all(|hit| hit.kind != HitKind::Session));
}

/// What a transcript's replies spent, as the index keeps it: (line, model, turn, input, output).
fn spent(index: &Index) -> Vec<(String, Option<String>, bool, u64, u64)> {
    let rows = index.spent(None).unwrap();
    rows.into_iter()
        .map(|row| (row.ts.unwrap_or_default(), row.model, row.turn, row.input, row.output))
        .collect()
}

/// The usage projection is the same whether a transcript is folded at once or a line per scan
/// (each scan a new read from the watermark, which may fall between the lines of one reply): a
/// reply is counted once, a re-emitted count adds nothing, a rewrite replaces, a removal drops.
#[test]
fn usage_is_counted_once_per_reply_however_the_transcript_is_folded() {
    let whole_dir = tempfile::tempdir().unwrap();
    let mut whole = Index::open(whole_dir.path()).unwrap();
    let fixture_path = fixture("claude");
    let text = std::fs::read_to_string(&fixture_path).unwrap();
    let claude = |dir: &Path| {
        let project = dir.join("claude/projects/-home-dev-shop");
        std::fs::create_dir_all(&project).unwrap();
        let path = project.join(fixture_path.file_name().unwrap());
        (Root { harness: Harness::ClaudeCode, dir: dir.join("claude") }, path)
    };
    let (root, path) = claude(whole_dir.path());
    std::fs::write(&path, &text).unwrap();
    whole.scan_history(&found(&root)).unwrap();
    let expected = spent(&whole);
    let replies = expected.iter().filter(|row| !row.2).count();
    assert_eq!(replies, 3, "the fixture's three replies (one written on two lines)");
    assert_eq!(expected.iter().filter(|row| row.2).count(), 2, "two turns");

    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let (root, path) = claude(dir.path());
    std::fs::write(&path, "").unwrap();
    for line in text.split_inclusive('\n') {
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(line.as_bytes()).unwrap();
        drop(file);
        index.scan_history(&found(&root)).unwrap();
    }
    assert_eq!(spent(&index), expected, "folded a line at a time");

    // A Codex count re-emitted after the watermark is no new reply.
    let (codex, codex_path) = codex_home(dir.path(), 20);
    index.scan_history(&found(&codex)).unwrap();
    let codex_rows =
        |index: &Index| index.spent(None).unwrap().into_iter().filter(|r| r.harness == "codex");
    let before = codex_rows(&index).count();
    assert_eq!(before, 3, "two turns and one reply");
    let count = std::fs::read_to_string(&codex_path)
        .unwrap()
        .lines()
        .find(|line| line.contains("token_count"))
        .unwrap()
        .to_owned();
    let mut file = std::fs::OpenOptions::new().append(true).open(&codex_path).unwrap();
    writeln!(file, "{count}").unwrap();
    drop(file);
    assert_eq!(index.scan_history(&found(&codex)).unwrap().lines, 1);
    assert_eq!(codex_rows(&index).count(), before);

    // Rewritten: read again from the start, the same rows once.
    let rewritten = text.replace("off by a cent", "off by a dime");
    std::fs::write(&path, &rewritten).unwrap();
    assert_eq!(index.scan_history(&found(&root)).unwrap().reset, 1);
    let claude_rows: Vec<_> =
        spent(&index).into_iter().filter(|row| row.0.as_str() < "2026-11-30T10").collect();
    assert_eq!(claude_rows, expected, "the Claude transcript's are before the Codex one's");
    // Gone: its rows go.
    std::fs::remove_file(&path).unwrap();
    index.scan_history(&found(&root)).unwrap();
    assert!(index.spent(None).unwrap().iter().all(|row| row.harness == "codex"));
    assert!(
        index
            .spent(Some("2026-11-30T10:00:05.000Z"))
            .unwrap()
            .iter()
            .all(|row| row.ts.as_deref().is_some_and(|ts| ts >= "2026-11-30T10:00:05.000Z")),
        "since narrows by time"
    );
}

/// What an older extractor left (another content version: no usage rows, a stale title) is
/// extracted again by the next scan, transcript by transcript, without a reset of the index:
/// every texts once, the usage back, and the spex sessions' rows untouched.
#[test]
fn a_new_extractor_version_re_extracts_every_transcript_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(dir.path()).unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures");
    let roots = [
        Root { harness: Harness::ClaudeCode, dir: base.join("claude") },
        Root { harness: Harness::Codex, dir: base.join("codex") },
    ];
    let found = discover(&roots).unwrap();
    index.scan_history(&found).unwrap();
    let rows = index.transcripts().unwrap();
    let spent = index.spent(None).unwrap();
    let hits = search(&index, "connections");
    assert_eq!(hits.len(), 1);
    let connection = rusqlite::Connection::open(dir.path().join(spex_index::INDEX_FILE)).unwrap();
    let older = spex_index::HISTORY_CONTENT_VERSION - 1;
    connection
        .execute("UPDATE transcripts SET content_version = ?1, title = 'stale'", [older])
        .unwrap();
    connection.execute("DELETE FROM usage", []).unwrap();
    drop(connection);
    assert!(index.spent(None).unwrap().is_empty(), "the older extractor kept no usage");
    let scanned = index.scan_history(&found).unwrap();
    assert_eq!((scanned.read, scanned.reset), (2, 2), "both read again from their start");
    assert_eq!(index.transcripts().unwrap(), rows, "the same rows as a first fold");
    assert_eq!(index.spent(None).unwrap(), spent, "the usage extracted");
    assert_eq!(search(&index, "connections"), hits, "every text once");
    let again = index.scan_history(&found).unwrap();
    assert_eq!(again.read, 0, "then unchanged");
}

/// OpenCode's sessions (rows of its database, changed in place) in the index: an unchanged
/// session reads nothing; a changed one is read again from its start, its texts and usage
/// replaced, never doubled; a scan of other roots keeps it; a session deleted from the database
/// goes with its texts and usage, and so does a database that goes.
#[test]
fn opencode_sessions_are_read_again_when_their_rows_change() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("opencode");
    std::fs::create_dir_all(&data).unwrap();
    let db_path = data.join("opencode.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../history/tests/fixtures/opencode/opencode.db"),
        &db_path,
    )
    .unwrap();
    let root = Root { harness: Harness::OpenCode, dir: data.clone() };
    let mut index = Index::open(dir.path()).unwrap();
    let first = index.scan_history(&found(&root)).unwrap();
    assert_eq!((first.transcripts, first.read, first.reset), (1, 1, 1));
    let opencode = |index: &Index| {
        index.spent(None).unwrap().into_iter().filter(|row| row.harness == "opencode").count()
    };
    assert_eq!(opencode(&index), 5, "two turns and three replies");
    assert_eq!(search(&index, "central"), [("opencode".to_owned(), "answer".to_owned(), Some(6))]);
    let again = index.scan_history(&found(&root)).unwrap();
    assert_eq!((again.read, again.lines), (0, 0), "unchanged: nothing read");

    // OpenCode writes a new answer into the last message's text part, in place.
    let db = rusqlite::Connection::open(&db_path).unwrap();
    let changed = db
        .execute(
            "UPDATE part SET data = replace(data, 'eu-central-1', 'ap-south-1'),
                 time_updated = time_updated + 1
             WHERE data LIKE '%eu-central-1%'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let reread = index.scan_history(&found(&root)).unwrap();
    assert_eq!((reread.read, reread.reset), (1, 1), "read again from its start");
    assert!(search(&index, "central").is_empty(), "the old text is gone");
    assert_eq!(search(&index, "south").len(), 1);
    assert_eq!(search(&index, "region").len(), 1, "the rest once, not doubled");
    assert_eq!(opencode(&index), 5, "the usage once, not doubled");

    // A scan of other roots (another command's --source) keeps it.
    let (codex, _) = codex_home(dir.path(), 13);
    let other = index.scan_history(&found(&codex)).unwrap();
    assert_eq!(other.removed, 0);
    assert_eq!(search(&index, "south").len(), 1);

    // Deleted from the database: gone from the index.
    db.execute("DELETE FROM part", []).unwrap();
    db.execute("DELETE FROM message", []).unwrap();
    db.execute("DELETE FROM session", []).unwrap();
    drop(db);
    let dropped = index.scan_history(&found(&root)).unwrap();
    assert_eq!((dropped.transcripts, dropped.removed), (0, 1));
    assert!(search(&index, "south").is_empty());
    assert_eq!(opencode(&index), 0);
    assert!(index.transcripts().unwrap().iter().all(|row| row.harness != "opencode"));

    // A database that goes takes its sessions with it, whichever roots the scan had.
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../history/tests/fixtures/opencode/opencode.db"),
        &db_path,
    )
    .unwrap();
    assert_eq!(index.scan_history(&found(&root)).unwrap().read, 1);
    std::fs::remove_file(&db_path).unwrap();
    assert_eq!(index.scan_history(&found(&codex)).unwrap().removed, 1);
    assert!(index.transcripts().unwrap().iter().all(|row| row.harness != "opencode"));
}
