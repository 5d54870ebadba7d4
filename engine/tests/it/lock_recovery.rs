//! Lock files against real processes: a holder killed with SIGKILL is recovered without manual
//! cleanup, a live holder is waited for (boundedly), a reused pid does not pass for the holder,
//! an abandoned empty lock is taken over, and concurrent writers never lose a queue update.
//! Locks are what keeps two writers from interleaving, so each recovery path must be real.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the test prepares real lock files directly"
)]

use crate::common;

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{config, id, queued, real_store};
use spex_engine::env::{RandomIds, SystemClock};
use spex_engine::faultfs::{Fs, RealFs};
use spex_engine::{Config, Error, SendRequest, Store};

fn text(text: &str) -> SendRequest {
    SendRequest { text: text.to_owned(), ..SendRequest::default() }
}

fn sleeper() -> Child {
    Command::new("sleep").arg("30").spawn().unwrap()
}

#[test]
fn a_lock_left_by_a_killed_holder_is_taken_over() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let mut holder = sleeper();
    let lock = store.layout().session_lock(&s);
    std::fs::write(&lock, holder.id().to_string()).unwrap();
    holder.kill().unwrap(); // SIGKILL: the lock file stays behind
    holder.wait().unwrap();
    store.send(&s, &text("after the holder died")).unwrap();
    assert!(!lock.exists(), "released after use");
    assert_eq!(store.events(&s).unwrap().len(), 1);
}

#[test]
fn a_live_holder_is_waited_for_then_reported() {
    let (_dir, store) = real_store(Config { lock_wait_ms: 300, ..config() });
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let mut holder = sleeper();
    let lock = store.layout().session_lock(&s);
    std::fs::write(&lock, holder.id().to_string()).unwrap();
    let error = store.send(&s, &text("blocked")).unwrap_err();
    let Error::Locked { holder: Some(pid), waited_ms, .. } = error else {
        panic!("Locked, got {error:?}")
    };
    assert_eq!(pid, holder.id());
    assert!(waited_ms >= 300);
    assert!(store.events(&s).unwrap().is_empty(), "nothing written");
    holder.kill().unwrap();
    holder.wait().unwrap();
    store.send(&s, &text("unblocked")).unwrap();
}

#[test]
fn a_reused_pid_does_not_pass_for_the_holder() {
    let (_dir, store) = real_store(Config { lock_wait_ms: 300, ..config() });
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    // A live process whose pid is in a lock file written long before it started.
    let mut unrelated = sleeper();
    let lock = store.layout().session_lock(&s);
    std::fs::write(&lock, unrelated.id().to_string()).unwrap();
    let file = std::fs::File::options().write(true).open(&lock).unwrap();
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)).unwrap();
    drop(file);
    store.send(&s, &text("the pid was reused")).unwrap();
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

#[test]
fn an_abandoned_empty_lock_is_taken_over_after_the_grace_period() {
    // The manual clock lets the grace period pass; the wait bound must outlast it.
    let (_dir, store) = real_store(Config { lock_wait_ms: 5_000, ..config() });
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    std::fs::write(store.layout().session_lock(&s), b"").unwrap();
    store.send(&s, &text("after the grace period")).unwrap();
}

#[test]
fn concurrent_writers_in_one_process_lose_no_queue_update() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::open(
            RealFs::new(),
            dir.path(),
            Arc::new(SystemClock),
            Arc::new(RandomIds),
            Config { lock_wait_ms: 30_000, ..Config::default() },
        )
        .unwrap(),
    );
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    // Start from a stale lock so the takers race for the takeover too.
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    std::fs::write(store.layout().session_lock(&s), dead.id().to_string()).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::clone(&store);
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..15 {
                    store.send(&s, &text(&format!("t{t}-{i}"))).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(store.events(&s).unwrap().len(), 60);
    assert_eq!(store.queue(&s).unwrap().len(), 60, "no enqueue was lost");
    assert!(!store.fs().exists(&store.layout().session_lock(&s)).unwrap());
}

#[test]
fn a_symbolic_link_as_a_lock_is_refused_naming_it() {
    let config = Config { lock_wait_ms: 300, ..config() };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        RealFs::new(),
        dir.path().join("root"),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
        config,
    )
    .unwrap();
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let lock = store.layout().session_lock(&s);
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &lock).unwrap();
    let started = std::time::Instant::now();
    let error = store.send(&s, &text("blocked")).unwrap_err();
    assert!(matches!(&error, Error::Corrupt { path, .. } if *path == lock), "{error}");
    assert!(error.to_string().contains("symbolic link"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded: {:?}", started.elapsed());
}
