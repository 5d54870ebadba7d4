//! Containment: the store never follows a symbolic link inside its root. A session directory,
//! segment, record, queue or lock that is a link is refused with its path (corrupt), and
//! nothing outside the root is read, written or removed through it: a canary outside the root
//! survives every command.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(
    clippy::disallowed_methods,
    reason = "the test plants real links and canaries directly, outside the engine"
)]

use crate::common;

use common::corpus::snapshot;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::{Recorder, config, id, queued, real_store, refused_naming, text};
use spex_engine::Store;
use spex_engine::faultfs::{Fs, RealFs};

/// A directory outside the root holding a copy of a real session and a canary.
fn outside_copy_of(
    store: &Store<RealFs>,
    outside: &Path,
    session: &str,
) -> Vec<(PathBuf, Vec<u8>)> {
    let s = id(session);
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &text("hello")).unwrap();
    std::fs::create_dir_all(outside).unwrap();
    let dir = store.layout().session_dir(&s);
    let mut stack = vec![(dir.clone(), outside.to_path_buf())];
    while let Some((from, to)) = stack.pop() {
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push((entry.path(), to.join(entry.file_name())));
            } else {
                std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
            }
        }
    }
    std::fs::write(outside.join("canary"), b"must survive").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    symlink(outside, &dir).unwrap();
    snapshot(outside)
}

#[test]
fn a_session_directory_that_is_a_link_is_refused_and_nothing_outside_is_touched() {
    let (dir, store) = real_store(config());
    let outside = dir.path().join("outside");
    let before = outside_copy_of(&store, &outside, "evil");
    let evil = id("evil");
    let link = store.layout().session_dir(&evil);
    refused_naming(store.close(&evil), &link);
    refused_naming(store.send(&evil, &text("through the link")), &link);
    refused_naming(store.events(&evil), &link);
    refused_naming(store.tail(&evil, 5), &link);
    refused_naming(store.drain(&evil, &mut Recorder::default()), &link);
    refused_naming(store.record(&evil), &link);
    assert_eq!(snapshot(&outside), before, "nothing outside the root changed");
    // The listing shows it as damaged, the store still opens, the others are listed.
    let good = id("good");
    store.create_session(&good, &queued(), None, None).unwrap();
    let rows = store.list().unwrap();
    let row = rows.iter().find(|row| row.id == evil).unwrap();
    assert!(row.corrupt.as_deref().is_some_and(|why| why.contains("symbolic link")), "{row:?}");
    assert!(rows.iter().any(|row| row.id == good && row.corrupt.is_none()));
    let found = store.doctor(None).unwrap();
    assert!(found.iter().any(|damage| damage.path == link), "{found:?}");
}

#[test]
fn files_that_are_links_are_refused_and_their_targets_untouched() {
    let (dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &text("one")).unwrap();
    let outside = dir.path().join("outside.ndjson");
    std::fs::write(&outside, b"outside the root\n").unwrap();

    // A segment.
    let segment = store.layout().segment(&s, spex_engine::SegmentNo(1));
    std::fs::remove_file(&segment).unwrap();
    symlink(&outside, &segment).unwrap();
    refused_naming(store.send(&s, &text("two")), &segment);
    refused_naming(store.events(&s), &segment);
    assert_eq!(std::fs::read(&outside).unwrap(), b"outside the root\n");
    std::fs::remove_file(&segment).unwrap();

    // The queue.
    let queue = store.layout().queue(&s);
    std::fs::remove_file(&queue).unwrap();
    symlink(&outside, &queue).unwrap();
    refused_naming(store.send(&s, &text("three")), &queue);
    refused_naming(store.queue(&s), &queue);
    assert_eq!(std::fs::read(&outside).unwrap(), b"outside the root\n");
    std::fs::remove_file(&queue).unwrap();

    // The record.
    let record = store.layout().record(&s);
    let bytes = std::fs::read(&record).unwrap();
    let outside_record = dir.path().join("outside.json");
    std::fs::write(&outside_record, &bytes).unwrap();
    std::fs::remove_file(&record).unwrap();
    symlink(&outside_record, &record).unwrap();
    refused_naming(store.record(&s), &record);
    // Close reads nothing it deletes: the link goes, what it points to stays.
    store.close(&s).unwrap();
    assert!(store.record(&s).is_err());
    assert_eq!(std::fs::read(&outside_record).unwrap(), bytes);
    assert!(store.fs().exists(&outside).unwrap());
}
