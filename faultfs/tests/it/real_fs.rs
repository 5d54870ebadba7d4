//! `RealFs` against a real directory: the seam's operations do what the contract says on a real
//! filesystem (errors carry their path and kind; locks exclude; dead processes are not running).
//! The simulated filesystem is only trustworthy if the real one behaves as the trait claims.

#![expect(
    clippy::disallowed_methods,
    reason = "the test reads real files and waits on real children"
)]

use std::io::ErrorKind;
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

use faultfs::{Boundary, File, FileKind, Fs, OpenOptions, RealFs};

const B: Boundary = Boundary::new("real");

#[test]
fn file_ops_round_trip_through_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let fs = RealFs::new();
    let sub = dir.path().join("sessions");
    fs.create_dir(&sub, B).unwrap();
    fs.sync_dir(dir.path(), B).unwrap();
    let path = sub.join("log.ndjson");
    let file = fs.open(&path, OpenOptions::create(), B).unwrap();
    file.append(b"one\n", B).unwrap();
    file.append(b"two\n", B).unwrap();
    file.sync_data(B).unwrap();
    file.write_at(0, b"ONE", B).unwrap();
    file.sync_all(B).unwrap();
    assert_eq!(file.read_to_end().unwrap(), b"ONE\ntwo\n");
    let mut buf = [0u8; 3];
    assert_eq!(file.read_at(4, &mut buf).unwrap(), 3);
    assert_eq!(&buf, b"two");
    assert_eq!(file.read_at(100, &mut buf).unwrap(), 0);
    file.set_len(4, B).unwrap();
    assert_eq!(file.len().unwrap(), 4);
    assert_eq!(fs.read(&path).unwrap(), b"ONE\n");

    let renamed = sub.join("renamed.ndjson");
    fs.rename(&path, &renamed, B).unwrap();
    fs.sync_dir(&sub, B).unwrap();
    fs.create_dir(&sub.join("a-dir"), B).unwrap();
    let listing: Vec<(String, FileKind)> =
        fs.read_dir(&sub).unwrap().into_iter().map(|entry| (entry.name, entry.kind)).collect();
    assert_eq!(
        listing,
        vec![("a-dir".to_owned(), FileKind::Dir), ("renamed.ndjson".to_owned(), FileKind::File)]
    );
    assert_eq!(fs.metadata(&renamed).unwrap().len, 4);
    assert!(!fs.exists(&path).unwrap());
    fs.remove_file(&renamed, B).unwrap();
    fs.remove_dir(&sub.join("a-dir"), B).unwrap();
    assert!(fs.read_dir(&sub).unwrap().is_empty());
}

#[test]
fn errors_name_the_operation_path_and_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let fs = RealFs::new();
    let missing = dir.path().join("missing.json");
    let error =
        fs.open(&missing, OpenOptions::read(), Boundary::new("show.record.open")).unwrap_err();
    assert_eq!(error.io_kind(), Some(ErrorKind::NotFound));
    let message = error.to_string();
    assert!(message.contains("missing.json"), "{message}");
    assert!(message.contains("show.record.open"), "{message}");
    assert!(message.starts_with("open "), "{message}");

    let lock = dir.path().join("x.lock");
    fs.open(&lock, OpenOptions::create_new(), B).unwrap();
    let error = fs.open(&lock, OpenOptions::create_new(), B).unwrap_err();
    assert_eq!(error.io_kind(), Some(ErrorKind::AlreadyExists), "O_EXCL refuses an existing file");
}

#[test]
fn flock_excludes_a_second_open_file_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let fs = RealFs::new();
    let path = dir.path().join("queue.lock");
    let first = fs.open(&path, OpenOptions::create(), B).unwrap();
    let second = fs.open(&path, OpenOptions::read_write(), B).unwrap();
    assert!(first.try_lock().unwrap());
    assert!(!second.try_lock().unwrap(), "flock is per open file, even within one process");
    first.unlock().unwrap();
    assert!(second.try_lock().unwrap());
    drop(second);
    assert!(first.try_lock().unwrap(), "closing the holder releases the lock");
}

#[test]
fn process_start_time_tells_running_from_dead() {
    let fs = RealFs::new();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("now");
    fs.open(&marker, OpenOptions::create(), B).unwrap();
    let now_ms =
        fs.metadata(&marker).unwrap().modified.duration_since(UNIX_EPOCH).unwrap().as_millis()
            as u64;
    let own = fs.process_start_ms(fs.process_id()).unwrap().expect("this process is running");
    // Boot time has one-second resolution, so allow a second of slack.
    assert!(own <= now_ms + 1000, "started {own} after {now_ms}");

    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let started = fs.process_start_ms(child.id()).unwrap().expect("the child is running");
    assert!(started + 1000 >= own, "the child started after this process");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(fs.process_start_ms(child.id()).unwrap(), None, "a reaped child is gone");

    // A child that exited but was not reaped is a zombie: it holds nothing any more.
    let mut zombie = Command::new("true").spawn().unwrap();
    let mut state = fs.process_start_ms(zombie.id()).unwrap();
    for _ in 0..500 {
        if state.is_none() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        state = fs.process_start_ms(zombie.id()).unwrap();
    }
    assert_eq!(state, None, "an exited, unreaped child counts as not running");
    zombie.wait().unwrap();
}

/// A holder that exits while its `/proc` entry is being read answers ESRCH on the read (the
/// open succeeded): that is a dead process, never an error. Children are spawned and reaped in
/// a loop while other threads check them, so some checks land between the open and the read.
#[test]
fn a_process_that_exits_while_it_is_checked_is_dead() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let fs = RealFs::new();
    let pid = AtomicU32::new(fs.process_id());
    let done = AtomicBool::new(false);
    let checks = std::thread::scope(|scope| {
        let checkers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut checks = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        let pid = pid.load(Ordering::Relaxed);
                        if let Err(error) = fs.process_start_ms(pid) {
                            done.store(true, Ordering::Relaxed);
                            panic!("checking pid {pid} as it exited: {error}");
                        }
                        checks += 1;
                    }
                    checks
                })
            })
            .collect();
        for _ in 0..1000 {
            if done.load(Ordering::Relaxed) {
                break;
            }
            let mut child = Command::new("true").spawn().unwrap();
            pid.store(child.id(), Ordering::Relaxed);
            child.wait().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        checkers.into_iter().map(|checker| checker.join().unwrap()).sum::<u64>()
    });
    assert!(checks > 1000, "the checks ran: {checks}");
}
