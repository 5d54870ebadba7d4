//! The on-disk format and the read surfaces: checked-in fixtures of the existing store (legacy
//! plus numbered segments, a queue, a record) read back event for event; rollover under a tiny
//! bound; torn tails and damage; UTF-8 across read blocks; tail, follow and stamp. An existing
//! store must open without migration, and nothing we write may break its readers.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(
    clippy::disallowed_methods,
    reason = "the test prepares real files directly, outside the engine"
)]

use crate::common;

use std::path::{Path, PathBuf};

use common::corpus::copy_tree;
use common::{config, id, queued, real_store};
use spex_engine::faultfs::Fs;
use spex_engine::{
    Config, Cursor, Error, Event, Lifecycle, SegmentNo, SendRequest, Status, Triple,
};

/// A store opened on a copy of the fixture `name`.
fn fixture(
    name: &str,
) -> (tempfile::TempDir, spex_engine::Store<spex_engine::faultfs::RealFs>, PathBuf) {
    let (dir, _) = real_store(config());
    let root = dir.path().join(name);
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name), &root);
    let store = spex_engine::Store::open(
        spex_engine::faultfs::RealFs::new(),
        &root,
        std::sync::Arc::new(spex_engine::env::ManualClock::new(1_784_200_000_000)),
        std::sync::Arc::new(spex_engine::env::SeededIds::new(1)),
        config(),
    )
    .unwrap();
    (dir, store, root)
}

fn sent(text: &str) -> SendRequest {
    SendRequest { text: text.to_owned(), ..SendRequest::default() }
}

fn summary(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|event| match event {
            Event::Status(status) => format!("status:{}", status.triple.display_word()),
            Event::Sent(sent) => format!("sent:{}", sent.text),
        })
        .collect()
}

#[test]
fn existing_store_opens_and_reads_back_event_for_event() {
    let (_dir, store, _root) = fixture("store");
    let s = id("legacy1");
    let events = store.events(&s).unwrap();
    assert_eq!(
        summary(&events),
        vec![
            "status:working",
            "sent:please add tests",
            "sent:héllo — ünïcode ✓",
            "sent:merge when green",
            "status:review",
            "sent:one more thing",
        ],
        "legacy segment first, then numbered ones; the settlement is private"
    );
    let json: Vec<String> = events.iter().map(|event| event.to_public_json().to_string()).collect();
    assert!(json.iter().all(|line| !line.contains("dispatchReceipt")));
    assert_eq!(summary(&store.tail(&s, 2).unwrap()), vec!["status:review", "sent:one more thing"]);
    let record = store.record(&s).unwrap();
    assert_eq!(record.triple().display_word(), "review");
    assert_eq!(record.fields().get("harness").and_then(|v| v.as_str()), Some("claude"));
    let queue = store.queue(&s).unwrap();
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0].from.as_deref(), Some("worker-2"));
    assert_eq!(store.list().unwrap().len(), 1);
}

#[test]
fn writes_to_an_existing_store_touch_only_the_newest_segment() {
    let (_dir, store, _root) = fixture("store");
    let s = id("legacy1");
    let sealed = [store.layout().legacy_segment(&s), store.layout().segment(&s, SegmentNo(1))];
    let before: Vec<Vec<u8>> = sealed.iter().map(|path| store.fs().read(path).unwrap()).collect();
    let record_before =
        String::from_utf8(store.fs().read(&store.layout().record(&s)).unwrap()).unwrap();
    store.send(&s, &sent("new message")).unwrap();
    store.append(&s, &Lifecycle::Set(Triple::new(Status::Active, None, None))).unwrap();
    let after: Vec<Vec<u8>> = sealed.iter().map(|path| store.fs().read(path).unwrap()).collect();
    assert_eq!(before, after, "the legacy and sealed segments are never written");
    let newest =
        String::from_utf8(store.fs().read(&store.layout().segment(&s, SegmentNo(2))).unwrap())
            .unwrap();
    assert_eq!(newest.lines().count(), 3);
    // A record of this engine's earlier format is rewritten in the existing implementation's
    // projection, keeping what it knew (the adapter spec after the projection).
    let record = String::from_utf8(store.fs().read(&store.layout().record(&s)).unwrap()).unwrap();
    assert!(record_before.contains("\"id\": \"legacy1\""));
    assert!(
        record.starts_with("{\n  \"session_id\": \"legacy1\",\n  \"governed\": true,"),
        "{record}"
    );
    assert!(record.contains("\"status\": \"active\",\n  \"proposal\": \"\""), "{record}");
    assert!(record.contains("\"branch\": \"spex/legacy1\""));
    assert!(record.contains("\"createdAt\": 1784109600000"), "{record}");
    assert!(
        record.ends_with("\"launch_readiness_pending\": \"\",\n  \"adapter\": \"tmux:%3\"\n}\n"),
        "{record}"
    );
    assert_eq!(store.queue(&s).unwrap().len(), 2);
}

#[test]
fn damage_in_a_sealed_segment_is_an_error_naming_file_and_offset() {
    let (_dir, store, _root) = fixture("damaged-middle");
    let s = id("legacy1");
    let error = store.events(&s).unwrap_err();
    let Error::Corrupt { path, offset, .. } = &error else { panic!("corruption, got {error:?}") };
    assert!(path.ends_with("timeline/000000000001.ndjson"), "{path:?}");
    let first_line =
        std::fs::read(path).unwrap().iter().position(|&b| b == b'\n').unwrap() as u64 + 1;
    assert_eq!(*offset, first_line, "the offset of the damaged line");
    assert!(error.to_string().contains("000000000001.ndjson at byte"), "{error}");
    // A keyed send must fold the whole log for its receipt: it refuses rather than skip.
    let keyed = SendRequest {
        key: Some(spex_engine::Key { operation: "op".into(), key: "k".into() }),
        ..sent("x")
    };
    assert!(matches!(store.send(&s, &keyed), Err(Error::Corrupt { .. })));
}

#[test]
fn torn_tail_is_ignored_by_readers_and_truncated_by_the_next_writer() {
    let (_dir, store, _root) = fixture("torn-tail");
    let s = id("legacy1");
    let newest = store.layout().segment(&s, SegmentNo(2));
    let torn_len = std::fs::metadata(&newest).unwrap().len();
    assert_eq!(store.events(&s).unwrap().len(), 6, "the unterminated line is not an event");
    assert_eq!(store.tail(&s, 1).unwrap().len(), 1);
    let stamp = store.stamp(&s).unwrap();
    store.send(&s, &sent("after the tear")).unwrap();
    let bytes = std::fs::read(&newest).unwrap();
    assert!((bytes.len() as u64) < torn_len + 300);
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.lines().count(), 2, "the torn bytes were truncated, not glued to: {text}");
    assert!(text.lines().all(|line| line.ends_with('}')));
    assert_ne!(store.stamp(&s).unwrap(), stamp);
    assert_eq!(summary(&store.tail(&s, 1).unwrap()), vec!["sent:after the tear"]);
}

#[test]
fn power_loss_damaged_final_line_is_a_torn_tail() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &sent("kept")).unwrap();
    // A later 512-byte chunk of the final line survived, an earlier one did not: NUL bytes.
    let path = store.layout().segment(&s, SegmentNo(1));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0u8; 40]);
    bytes.extend_from_slice(b"\",\"from\":null}\n");
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(summary(&store.events(&s).unwrap()), vec!["sent:kept"]);
    assert_eq!(summary(&store.tail(&s, 5).unwrap()), vec!["sent:kept"]);
    store.send(&s, &sent("next")).unwrap();
    assert_eq!(summary(&store.events(&s).unwrap()), vec!["sent:kept", "sent:next"]);
    assert!(!std::fs::read(&path).unwrap().contains(&0));
}

// A file that grew without its data may show stale blocks (ext4 data=writeback, xfs): several
// lines of garbage at the end. They are a torn tail too; damage with a sound line after it is
// still corruption. (Found by the sweep's stale-tails mode: reads and sends failed for good.)
#[test]
fn stale_garbage_lines_at_the_end_are_a_torn_tail() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &sent("kept")).unwrap();
    let path = store.layout().segment(&s, SegmentNo(1));
    let sound = std::fs::read(&path).unwrap();
    let mut bytes = sound.clone();
    bytes.extend_from_slice(b"\xA5stale{\"kind\":\n\xA5stale{\"kind\":\n\xA5sta");
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(summary(&store.events(&s).unwrap()), vec!["sent:kept"]);
    assert_eq!(summary(&store.tail(&s, 5).unwrap()), vec!["sent:kept"]);
    store.send(&s, &sent("next")).unwrap();
    assert_eq!(summary(&store.events(&s).unwrap()), vec!["sent:kept", "sent:next"]);
    assert!(std::fs::read(&path).unwrap().starts_with(&sound));
    // Garbage with a sound line after it is not a tail: it is reported, naming file and offset.
    let mut bytes = b"{\"kind\":\n".to_vec();
    bytes.extend_from_slice(&std::fs::read(&path).unwrap());
    std::fs::write(&path, &bytes).unwrap();
    match store.events(&s) {
        Err(Error::Corrupt { offset: 0, .. }) => {}
        other => panic!("damage before sound lines is corruption: {other:?}"),
    }
}

#[test]
fn rollover_under_a_tiny_bound_seals_segments() {
    let tiny = Config { segment_bytes_max: 1024, ..config() };
    let (_dir, store) = real_store(tiny);
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    for i in 0..40 {
        store.send(&s, &sent(&format!("message {i} {}", "x".repeat(i * 13)))).unwrap();
    }
    let dir = store.layout().timeline_dir(&s);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names.len() > 10, "{names:?}");
    for (i, name) in names.iter().enumerate() {
        assert_eq!(*name, SegmentNo(i as u64 + 1).file_name());
        let len = std::fs::metadata(dir.join(name)).unwrap().len();
        let lines = std::fs::read(dir.join(name)).unwrap().iter().filter(|&&b| b == b'\n').count();
        assert!(len <= 1024 || lines == 1, "a segment exceeds the bound only with one line");
    }
    // A line larger than the bound goes alone into a segment.
    store.send(&s, &sent(&"y".repeat(3000))).unwrap();
    let events = store.events(&s).unwrap();
    assert_eq!(events.len(), 41);
    assert_eq!(summary(&store.tail(&s, 3).unwrap())[..2], summary(&events[38..40]));
}

#[test]
fn tail_is_exact_across_block_boundaries_with_multibyte_text() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    // Lines of 3-byte and 4-byte characters, long enough to straddle 64 KiB read blocks at
    // every alignment the lengths produce.
    let mut expected = Vec::new();
    for i in 0..60 {
        let text = format!("{i}:{}{}", "✓".repeat(1000 + i * 7), "🦀".repeat(i));
        store.send(&s, &sent(&text)).unwrap();
        expected.push(text);
    }
    for limit in [1, 7, 33, 60, 500] {
        let got: Vec<String> = store
            .tail(&s, limit)
            .unwrap()
            .into_iter()
            .map(|event| match event {
                Event::Sent(sent) => sent.text,
                Event::Status(_) => panic!("only sends"),
            })
            .collect();
        let want = &expected[expected.len().saturating_sub(limit)..];
        assert_eq!(got, want, "tail({limit})");
    }
}

#[test]
fn private_lines_count_toward_neither_limit_nor_cursor() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let keyed = |text: &str, key: &str| SendRequest {
        key: Some(spex_engine::Key { operation: "op".into(), key: key.into() }),
        ..sent(text)
    };
    store.send(&s, &keyed("a", "1")).unwrap();
    store.send(&s, &keyed("b", "2")).unwrap();
    store.drain(&s, &mut common::Recorder::default()).unwrap(); // two settlements at the end
    assert_eq!(store.lines(&s).unwrap().len(), 4);
    assert_eq!(summary(&store.tail(&s, 2).unwrap()), vec!["sent:a", "sent:b"]);
    let (events, cursor) = store.follow(&s, Cursor::START).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(cursor.index, 2, "the cursor counts public events only");
}

#[test]
fn follow_reads_only_what_grew_and_stamp_detects_change() {
    let (_dir, store) = real_store(Config { segment_bytes_max: 1024, ..config() });
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &sent("one")).unwrap();
    let (first, cursor) = store.follow(&s, Cursor::START).unwrap();
    assert_eq!(summary(&first), vec!["sent:one"]);
    let stamp = store.stamp(&s).unwrap();
    let (none, same) = store.follow(&s, cursor).unwrap();
    assert!(none.is_empty());
    assert_eq!(same, cursor);
    assert_eq!(store.stamp(&s).unwrap(), stamp);
    for i in 0..30 {
        store.send(&s, &sent(&format!("grow {i} {}", "z".repeat(100)))).unwrap();
    }
    assert_ne!(store.stamp(&s).unwrap(), stamp);
    let (grown, next) = store.follow(&s, cursor).unwrap();
    assert_eq!(grown.len(), 30, "across several new segments");
    assert_eq!(next.index, 31);
    let parsed: Cursor = next.to_string().parse().unwrap();
    assert_eq!(parsed, next);
    let bogus = Cursor { segment: 99, offset: 0, index: 0 };
    assert!(matches!(store.follow(&s, bogus), Err(Error::InvalidCursor { .. })));
}

/// Every page of `s` from the end back to the start, with `limit` events each, joined oldest
/// first; and how many pages it took.
fn paged_back(
    store: &spex_engine::Store<spex_engine::faultfs::RealFs>,
    s: &spex_engine::SessionId,
    limit: usize,
) -> (Vec<Event>, usize) {
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = store.page(s, before, limit).unwrap();
        eprintln!(
            "before {before:?} -> {:?} older {:?} end {:?}",
            summary(&page.events),
            page.older,
            page.end
        );
        assert!(page.events.len() <= limit, "a page holds at most its limit");
        pages.push(page.events);
        match page.older {
            Some(older) => {
                assert!(before.is_none_or(|before| older < before), "pages move back");
                before = Some(older);
            }
            None => break,
        }
    }
    let count = pages.len();
    (pages.into_iter().rev().flatten().collect(), count)
}

#[test]
fn pages_read_backward_give_the_whole_log_once() {
    // Legacy and numbered segments (the existing store), then tiny segments of our own with
    // private settlement lines between the public ones.
    let (_dir, store, _root) = fixture("store");
    let s = id("legacy1");
    let whole = store.events(&s).unwrap();
    for limit in [1, 2, 3, 1000] {
        let (paged, _) = paged_back(&store, &s, limit);
        assert_eq!(summary(&paged), summary(&whole), "limit {limit}");
    }

    let (_dir, store) = real_store(Config { segment_bytes_max: 1024, ..config() });
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    for i in 0..40 {
        let request = SendRequest {
            key: Some(spex_engine::Key { operation: "op".into(), key: format!("k{i}") }),
            ..sent(&format!("message {i} {}", "x".repeat(i * 11)))
        };
        store.send(&s, &request).unwrap();
        if i % 3 == 0 {
            store.drain(&s, &mut common::Recorder::default()).unwrap();
        }
    }
    let whole = store.events(&s).unwrap();
    assert_eq!(whole.len(), 40);
    for limit in [1, 4, 7, 39, 40, 41] {
        let (paged, pages) = paged_back(&store, &s, limit);
        assert_eq!(summary(&paged), summary(&whole), "limit {limit}");
        assert_eq!(pages, 40usize.div_ceil(limit), "limit {limit}: one page per {limit} events");
    }
    // The first page is the tail.
    let page = store.page(&s, None, 5).unwrap();
    assert_eq!(summary(&page.events), summary(&store.tail(&s, 5).unwrap()));

    // What is appended after a page's end is what following from it reads.
    store.send(&s, &sent("after the page")).unwrap();
    let (grown, next) = store.follow_from(&s, page.end).unwrap();
    assert_eq!(summary(&grown), vec!["sent:after the page"]);
    assert_eq!(store.follow_from(&s, next).unwrap().0, Vec::<Event>::new());
    assert_eq!(next.to_string().parse::<spex_engine::Position>().unwrap(), next);

    // A position inside a line, past a segment's end or in no segment is refused.
    let older = page.older.unwrap();
    for bad in [
        spex_engine::Position { offset: older.offset + 1, ..older },
        spex_engine::Position { offset: u64::MAX, ..older },
        spex_engine::Position { segment: 999, offset: 0 },
    ] {
        assert!(matches!(store.page(&s, Some(bad), 5), Err(Error::InvalidCursor { .. })), "{bad}");
    }
    assert!("1".parse::<spex_engine::Position>().is_err());
}
