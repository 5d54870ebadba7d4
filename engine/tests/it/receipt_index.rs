//! The persisted receipt index: a new process finds a keyed send's receipt without re-reading
//! the whole log, and an index that is lost, torn or pinned to bytes the log no longer holds is
//! rebuilt from the log, never trusted. A keyed send must stay cheap on a long log and correct
//! when its derived index is wrong.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the test damages real files directly"
)]

use crate::common;

use common::{Recorder, config, id, queued};
use spex_engine::{Config, Error, Key, SegmentNo, SendRequest, Store};

fn keyed(text: &str, key: &str) -> SendRequest {
    SendRequest {
        text: text.into(),
        key: Some(Key { operation: "op".into(), key: key.into() }),
        ..SendRequest::default()
    }
}

fn reopen(root: &std::path::Path, config: Config) -> Store<spex_engine::faultfs::RealFs> {
    Store::open(
        spex_engine::faultfs::RealFs::new(),
        root,
        std::sync::Arc::new(spex_engine::env::ManualClock::new(1_784_200_000_000)),
        std::sync::Arc::new(spex_engine::env::SeededIds::new(99)),
        config,
    )
    .unwrap()
}

#[test]
fn a_new_process_reads_only_what_the_index_has_not_folded() {
    let dir = tempfile::tempdir().unwrap();
    let small = Config { segment_bytes_max: 1024, ..config() };
    let store = reopen(dir.path(), small);
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let first = store.send(&s, &keyed("first", "k1")).unwrap();
    for i in 0..20 {
        store
            .send(&s, &keyed(&format!("message {i} {}", "x".repeat(100)), &format!("n{i}")))
            .unwrap();
    }
    drop(store);
    assert!(dir.path().join("sessions/s/receipts.index").exists());
    // Damage the first (sealed) segment after its first line: a full read would now fail.
    let sealed = dir.path().join("sessions/s/timeline").join(SegmentNo(1).file_name());
    let mut bytes = std::fs::read(&sealed).unwrap();
    let second_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    assert!(second_line < bytes.len(), "segment 1 holds more than the first line");
    bytes[second_line] = b'#';
    std::fs::write(&sealed, &bytes).unwrap();
    // A new process replays the first key from the persisted index: it reads the run and the
    // one line the record points at, never the rest of segment 1.
    let store = reopen(dir.path(), small);
    let replay = store.send(&s, &keyed("first", "k1")).unwrap();
    assert_eq!((replay.mid, replay.replayed), (first.mid, true));
    // Without the index, the same lookup must read the whole log, and reports the damage.
    std::fs::remove_file(dir.path().join("sessions/s/receipts.index")).unwrap();
    let store = reopen(dir.path(), small);
    assert!(matches!(store.send(&s, &keyed("first", "k1")), Err(Error::Corrupt { .. })));
}

#[test]
fn a_stale_or_torn_index_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = reopen(dir.path(), config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &SendRequest { text: "plain".into(), ..SendRequest::default() }).unwrap();
    let segment = dir.path().join("sessions/s/timeline").join(SegmentNo(1).file_name());
    let before_key = std::fs::metadata(&segment).unwrap().len();
    let lost = store.send(&s, &keyed("lost in a power loss", "k")).unwrap();
    store.send(&s, &keyed("other", "k2")).unwrap(); // the index is folded past the keyed line
    drop(store);
    // A power loss took the keyed lines back; later writes regrew the log past the old cursor.
    let file = std::fs::File::options().write(true).open(&segment).unwrap();
    file.set_len(before_key).unwrap();
    drop(file);
    let store = reopen(dir.path(), config());
    for i in 0..5 {
        store
            .send(
                &s,
                &SendRequest {
                    text: format!("regrown {i} {}", "y".repeat(80)),
                    ..SendRequest::default()
                },
            )
            .unwrap();
    }
    drop(store);
    // The index still claims key "k"; its pin no longer matches, so it is rebuilt.
    let store = reopen(dir.path(), config());
    let fresh = store.send(&s, &keyed("lost in a power loss", "k")).unwrap();
    assert!(!fresh.replayed, "the receipt is gone from the log, so this is a new send");
    assert_ne!(fresh.mid, lost.mid);
    // A torn index file is ignored too.
    std::fs::write(dir.path().join("sessions/s/receipts.index"), b"SPEXRCP4 torn").unwrap();
    let store = reopen(dir.path(), config());
    let replay = store.send(&s, &keyed("lost in a power loss", "k")).unwrap();
    assert_eq!((replay.mid, replay.replayed), (fresh.mid, true));
}

// A huge index file is derived data: rebuilt, never an error, and never read whole. (Found by
// the benchmarks of the earlier JSON index: a 1 GiB log with a receipt every ten lines made a
// 177 MB index, and a keyed send in a new process failed with TooLarge.)
#[test]
fn an_oversized_index_is_rebuilt_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = reopen(dir.path(), config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let first = store.send(&s, &keyed("first", "k1")).unwrap();
    drop(store);
    let index = dir.path().join("sessions/s/receipts.index");
    let file = std::fs::File::create(&index).unwrap();
    file.set_len(spex_engine::layout::STATE_FILE_BYTES_MAX + 1).unwrap();
    drop(file);
    let store = reopen(dir.path(), config());
    let replay = store.send(&s, &keyed("first", "k1")).unwrap();
    assert_eq!((replay.mid, replay.replayed), (first.mid, true));
    // A replay writes nothing: the answer came from the log, the file is as it was.
    let oversized = spex_engine::layout::STATE_FILE_BYTES_MAX + 1;
    assert_eq!(std::fs::metadata(&index).unwrap().len(), oversized);
    // The next send that writes a line rewrites the index too.
    store.send(&s, &keyed("second", "k2")).unwrap();
    assert_eq!(
        std::fs::metadata(&index).unwrap().len(),
        2 * 4096,
        "the rebuilt run (a header and one block) replaced the oversized file"
    );
}

// The pin covers the whole last line, not only its final bytes: a keyed line that a power loss
// dropped and a replay re-appended ends with the same receipt bytes but carries another mid.
// (Found by the crash sweep's activity rule, which uses the same pin.)
#[test]
fn lines_that_end_alike_do_not_fool_the_pin() {
    let dir = tempfile::tempdir().unwrap();
    let store = reopen(dir.path(), config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let long = "a long message whose receipt repeats it ".repeat(12);
    let first = store.send(&s, &keyed(&long, "k1")).unwrap();
    // The next keyed send folds the first line and persists the index pinned just after it.
    store.send(&s, &keyed("second", "k2")).unwrap();
    drop(store);
    assert!(dir.path().join("sessions/s/receipts.index").exists());
    // The same line with another mid of the same length: its last 256 bytes are unchanged.
    let segment = dir.path().join("sessions/s/timeline").join(SegmentNo(1).file_name());
    let other = "00000000-0000-4000-8000-000000000000";
    let bytes = std::fs::read_to_string(&segment).unwrap().replace(&first.mid, other);
    std::fs::write(&segment, bytes).unwrap();
    let queue = dir.path().join("sessions/s/pending.json");
    let entries = std::fs::read_to_string(&queue).unwrap().replace(&first.mid, other);
    std::fs::write(&queue, entries).unwrap();
    let store = reopen(dir.path(), config());
    let replay = store.send(&s, &keyed(&long, "k1")).unwrap();
    assert_eq!(
        (replay.mid.as_str(), replay.replayed),
        (other, true),
        "the log's mid, not the index's"
    );
}

// A run whose block was changed after it was written (a power loss can keep some blocks of the
// unsynced file and lose or mix others) is rebuilt, not trusted: every block read is checked.
// (The JSON index before it was found spliced by the crash sweep after a kill and a power loss
// inside the next process's work.)
#[test]
fn a_damaged_block_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = reopen(dir.path(), config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let first = store.send(&s, &keyed("deploy to eu-west", "k1")).unwrap();
    store.send(&s, &keyed("second", "k2")).unwrap();
    drop(store);
    let index = dir.path().join("sessions/s/receipts.index");
    let mut bytes = std::fs::read(&index).unwrap();
    assert_eq!(&bytes[..8], b"SPEXRCP4");
    bytes[4096 + 8] ^= 0x55; // the first record's key
    std::fs::write(&index, &bytes).unwrap();
    let store = reopen(dir.path(), config());
    let replay = store.send(&s, &keyed("deploy to eu-west", "k1")).unwrap();
    assert_eq!((replay.mid, replay.replayed), (first.mid, true), "the log's answer");
    let report = store.drain(&s, &mut Recorder::default()).unwrap();
    assert!(report.stopped.is_none(), "the drain trusts the log, not the damaged run");
    assert_eq!(report.delivered.len(), 2);
}

/// The lock-free lookup answers from the log without writing anything: with the index gone it
/// finds every receipt and leaves no index or staging file behind; the next keyed send, under
/// the lock, writes the index again.
#[test]
fn the_lock_free_lookup_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = reopen(dir.path(), config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let sent: Vec<String> = (0..5)
        .map(|i| store.send(&s, &keyed(&format!("m{i}"), &format!("k{i}"))).unwrap().mid)
        .collect();
    drop(store);
    let index = dir.path().join("sessions/s/receipts.index");
    std::fs::remove_file(&index).unwrap();
    let store = reopen(dir.path(), config());
    for (i, mid) in sent.iter().enumerate() {
        let digest = spex_engine::digest::request_digest("op", &format!("k{i}"));
        let known = store.receipt(&s, "op", &digest).unwrap().expect("the receipt is found");
        assert_eq!(&known.mid, mid);
    }
    assert!(!index.exists(), "a lock-free lookup wrote the index");
    assert!(!dir.path().join("sessions/s/receipts.index.tmp").exists());
    store.send(&s, &keyed("m5", "k5")).unwrap();
    assert!(index.exists(), "a keyed send persists the index again");
}
