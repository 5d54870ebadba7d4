//! Containment on the simulated filesystem, which models symbolic links as the kernel resolves
//! them (followed in a directory position, refused by every `O_NOFOLLOW` open in the last one):
//! the same refusals as on real files, and the links planted here lead to `/outside`, whose
//! every byte must stay as it was.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use crate::common;

use std::path::{Path, PathBuf};

use common::{Recorder, config, id, queued, refused_naming, sim_store, text};
use spex_engine::Store;
use spex_engine::faultfs::{Boundary, File as _, FileKind, Fs, OpenOptions, SimFs};

const B: Boundary = Boundary::new("test");

/// Every file under `dir` with its bytes, and every directory, sorted.
fn tree(fs: &SimFs, dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs.read_dir(&dir).unwrap() {
            let path = dir.join(&entry.name);
            match entry.kind {
                FileKind::Dir => {
                    out.push((path.clone(), None));
                    stack.push(path);
                }
                _ => out.push((path.clone(), Some(read(fs, &path)))),
            }
        }
    }
    out.sort();
    out
}

fn read(fs: &SimFs, path: &Path) -> Vec<u8> {
    fs.open(path, OpenOptions::read(), B).unwrap().read_to_end().unwrap()
}

fn write(fs: &SimFs, path: &Path, bytes: &[u8]) {
    let file = fs.open(path, OpenOptions::create_truncate(), B).unwrap();
    file.write_at(0, bytes, B).unwrap();
}

/// Moves `path` to `/outside/<name>` (with a canary beside it) and plants a link to it.
fn move_outside(store: &Store<SimFs>, path: &Path, name: &str) -> PathBuf {
    let fs = store.fs();
    if fs.metadata(Path::new("/outside")).is_err() {
        fs.create_dir(Path::new("/outside"), B).unwrap();
        write(fs, Path::new("/outside/canary"), b"must survive");
    }
    let outside = Path::new("/outside").join(name);
    fs.rename(path, &outside, B).unwrap();
    fs.symlink(&outside, path).unwrap();
    outside
}

#[test]
fn the_simulated_filesystem_resolves_links_as_the_kernel_does() {
    let store = sim_store(1, config());
    let fs = store.fs();
    fs.create_dir(Path::new("/d"), B).unwrap();
    write(fs, Path::new("/d/f"), b"bytes");
    fs.symlink(Path::new("/d"), Path::new("/dir-link")).unwrap();
    fs.symlink(Path::new("/d/f"), Path::new("/file-link")).unwrap();
    // Followed in a directory position, even by an O_NOFOLLOW open.
    assert_eq!(read(fs, Path::new("/dir-link/f")), b"bytes");
    // Refused in the last one, whatever the open asks; shown as itself.
    for options in [OpenOptions::read(), OpenOptions::create(), OpenOptions::create_truncate()] {
        let error = fs.open(Path::new("/file-link"), options, B).err().unwrap();
        assert!(error.to_string().contains("os error 40"), "ELOOP: {error}");
    }
    assert_eq!(fs.metadata(Path::new("/file-link")).unwrap().kind, FileKind::Symlink);
    assert_eq!(fs.metadata(Path::new("/dir-link")).unwrap().kind, FileKind::Symlink);
    let kinds: Vec<_> =
        fs.read_dir(Path::new("/")).unwrap().into_iter().map(|e| (e.name, e.kind)).collect();
    assert!(kinds.contains(&("file-link".to_owned(), FileKind::Symlink)), "{kinds:?}");
    // Removing a link removes the link.
    fs.remove_file(Path::new("/dir-link"), B).unwrap();
    fs.remove_file(Path::new("/file-link"), B).unwrap();
    assert_eq!(read(fs, Path::new("/d/f")), b"bytes");
    // A loop ends.
    fs.symlink(Path::new("/b/x"), Path::new("/a")).unwrap();
    fs.symlink(Path::new("/a/x"), Path::new("/b")).unwrap();
    assert!(fs.open(Path::new("/a/x/f"), OpenOptions::read(), B).is_err());
}

#[test]
fn a_session_directory_that_is_a_link_is_refused_and_nothing_outside_is_touched() {
    let store = sim_store(2, config());
    let evil = id("evil");
    store.create_session(&evil, &queued(), None, None).unwrap();
    store.send(&evil, &text("hello")).unwrap();
    let link = store.layout().session_dir(&evil);
    move_outside(&store, &link, "evil");
    let before = tree(store.fs(), Path::new("/outside"));
    refused_naming(store.close(&evil), &link);
    refused_naming(store.send(&evil, &text("through the link")), &link);
    refused_naming(store.events(&evil), &link);
    refused_naming(store.tail(&evil, 5), &link);
    refused_naming(store.drain(&evil, &mut Recorder::default()), &link);
    refused_naming(store.record(&evil), &link);
    refused_naming(store.archive(&evil), &link);
    assert_eq!(tree(store.fs(), Path::new("/outside")), before, "nothing outside changed");
    // The listing shows it as damaged; the others are listed.
    let good = id("good");
    store.create_session(&good, &queued(), None, None).unwrap();
    let rows = store.list().unwrap();
    assert!(rows.iter().any(|row| row.id.as_str() == "evil" && row.corrupt.is_some()), "{rows:?}");
    assert!(rows.iter().any(|row| row.id.as_str() == "good" && row.corrupt.is_none()), "{rows:?}");
}

#[test]
fn files_that_are_links_are_refused_and_their_targets_untouched() {
    let store = sim_store(3, config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &text("one")).unwrap();

    let segment = store.layout().segment(&s, spex_engine::SegmentNo(1));
    let outside = move_outside(&store, &segment, "segment");
    let before = tree(store.fs(), Path::new("/outside"));
    refused_naming(store.send(&s, &text("two")), &segment);
    refused_naming(store.events(&s), &segment);
    store.fs().remove_file(&segment, B).unwrap();
    store.fs().rename(&outside, &segment, B).unwrap();

    let queue = store.layout().queue(&s);
    let outside = move_outside(&store, &queue, "queue");
    refused_naming(store.send(&s, &text("three")), &queue);
    refused_naming(store.queue(&s), &queue);
    refused_naming(store.drain(&s, &mut Recorder::default()), &queue);
    store.fs().remove_file(&queue, B).unwrap();
    store.fs().rename(&outside, &queue, B).unwrap();

    let record = store.layout().record(&s);
    let outside = move_outside(&store, &record, "record");
    refused_naming(store.record(&s), &record);
    store.fs().remove_file(&record, B).unwrap();
    store.fs().rename(&outside, &record, B).unwrap();

    // A lock: a link in the lock's place is refused within the wait, naming it.
    let lock = store.layout().session_lock(&s);
    store.fs().symlink(Path::new("/outside/canary"), &lock).unwrap();
    refused_naming(store.send(&s, &text("four")), &lock);
    store.fs().remove_file(&lock, B).unwrap();

    let mut after = tree(store.fs(), Path::new("/outside"));
    after.retain(|(path, _)| path == Path::new("/outside/canary"));
    let mut canary = before;
    canary.retain(|(path, _)| path == Path::new("/outside/canary"));
    assert_eq!(after, canary, "the canary is untouched");
    // Everything restored: the session works again, its history intact.
    store.send(&s, &text("five")).unwrap();
    assert_eq!(store.events(&s).unwrap().len(), 2);

    // Close reads nothing it deletes: a session whose record is a link closes, the link goes
    // with it, and what it points to stays.
    let linked = id("linked");
    store.create_session(&linked, &queued(), None, None).unwrap();
    let record = store.layout().record(&linked);
    let outside = move_outside(&store, &record, "linked-record");
    let kept = tree(store.fs(), Path::new("/outside"));
    store.close(&linked).unwrap();
    assert!(matches!(store.record(&linked), Err(spex_engine::Error::NoSuchSession { .. })));
    assert_eq!(tree(store.fs(), Path::new("/outside")), kept, "the target is untouched");
    assert!(store.fs().exists(&outside).unwrap());
}

/// A special file (a FIFO) where a record, a queue, a segment or a lock belongs: the simulated
/// filesystem refuses every open of it at once, as the real one's non-blocking open does; each
/// command refuses naming it, doctor reports it as that session's damage, and the other
/// sessions work as before.
#[test]
fn special_files_are_refused_at_once_and_stay_local_to_their_session() {
    let store = sim_store(4, config());
    let (s, good) = (id("s"), id("good"));
    for session in [&s, &good] {
        store.create_session(session, &queued(), None, None).unwrap();
        store.send(session, &text("one")).unwrap();
    }
    let fs = store.fs();
    let places = [
        store.layout().record(&s),
        store.layout().queue(&s),
        store.layout().segment(&s, spex_engine::SegmentNo(1)),
        store.layout().session_lock(&s),
    ];
    for place in places {
        let kept = place.with_extension("kept");
        let existed = fs.metadata(&place).is_ok();
        if existed {
            fs.rename(&place, &kept, B).unwrap();
        }
        fs.mkfifo(&place).unwrap();
        assert_eq!(fs.metadata(&place).unwrap().kind, FileKind::Other);
        let opened = fs.open(&place, OpenOptions::read(), B).map(|_| ());
        assert!(opened.is_err(), "{}: an open is refused", place.display());
        refused_naming(store.send(&s, &text("two")), &place);
        let damage = store.doctor(None).unwrap();
        assert!(
            damage.iter().any(|found| found.path == place),
            "{}: doctor names it: {damage:?}",
            place.display()
        );
        store.send(&good, &text("still here")).unwrap();
        store.drain(&good, &mut Recorder::default()).unwrap();
        fs.remove_file(&place, B).unwrap();
        if existed {
            fs.rename(&kept, &place, B).unwrap();
        }
    }
    store.send(&s, &text("three")).unwrap();
    assert_eq!(store.events(&s).unwrap().len(), 2);
}
