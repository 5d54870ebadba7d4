//! loom model of the in-process concurrency: a send, a drain and a lifecycle write racing on one
//! session through the engine's `sync` module (and `SimFs`, whose state is a loom mutex under
//! `--cfg loom`). Every interleaving loom explores must end with the message logged once and
//! either delivered or still owed, the move logged once, and no lock left behind.
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p spex-engine --test loom_session --release`.
#![cfg(loom)]
#![allow(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::sync::Arc;

use spex_engine::env::{ManualClock, SeededIds};
use spex_engine::faultfs::{FaultPlan, Fs, SimFs};
use spex_engine::timeline::Line;
use spex_engine::{
    Adapter, Config, Event, Lifecycle, Message, SendRequest, SessionId, Status, Store, Triple,
};

struct Recorder(Vec<String>);

impl Adapter for Recorder {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        self.0.push(message.mid.to_owned());
        Ok(())
    }
}

/// Interleavings explored (a model that explores one proves little).
static EXPLORED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Opens a store with one session holding one owed message.
fn setup() -> (Arc<Store<SimFs>>, SessionId) {
    let config = Config { lock_wait_ms: 1_000_000, drain_retry_delay_ms: 0, ..Config::default() };
    let store = Arc::new(
        Store::open(
            SimFs::new(FaultPlan::none(1)),
            "/store",
            Arc::new(ManualClock::new(1_784_160_000_000)),
            Arc::new(SeededIds::new(1)),
            config,
        )
        .unwrap(),
    );
    let s = SessionId::new("s").unwrap();
    store.create_session(&s, &Triple::new(Status::Queued, None, None), None, None).unwrap();
    (store, s)
}

/// A send racing a drain over a queue that already holds a message: every message must end
/// up delivered or owed, never both (a lost queue update would owe a delivered message again).
fn send_races_drain() {
    let (store, s) = setup();
    let first = store
        .send(&s, &SendRequest { text: "first".into(), ..SendRequest::default() })
        .unwrap()
        .mid;
    let sender = {
        let (store, s) = (Arc::clone(&store), s.clone());
        loom::thread::spawn(move || {
            store
                .send(&s, &SendRequest { text: "second".into(), ..SendRequest::default() })
                .unwrap()
                .mid
        })
    };
    let mut adapter = Recorder(Vec::new());
    store.drain(&s, &mut adapter).unwrap();
    let second = sender.join().unwrap();
    let owed: Vec<String> = store.queue(&s).unwrap().into_iter().map(|entry| entry.mid).collect();
    for mid in [&first, &second] {
        let delivered = adapter.0.iter().filter(|d| *d == mid).count();
        assert!(delivered <= 1);
        assert!(
            owed.contains(mid) != (delivered == 1),
            "{mid}: delivered {delivered} time(s), owed {}",
            owed.contains(mid)
        );
    }
}

#[test]
fn a_send_never_loses_a_concurrent_drains_removal() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.max_branches = 100_000;
    builder.check(send_races_drain);
}

/// The model can fail: with the queue read outside the lock, loom finds the lost update.
#[cfg(feature = "mutants")]
#[test]
fn loom_catches_a_queue_read_outside_the_lock() {
    let caught = std::panic::catch_unwind(|| {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(1);
        builder.max_branches = 100_000;
        builder.check(|| {
            spex_engine::mutant::select(Some(spex_engine::mutant::Mutant::QueueReadOutsideLock));
            send_races_drain();
        });
    });
    spex_engine::mutant::select(None);
    assert!(caught.is_err(), "loom must find the interleaving that loses the drain's removal");
}

#[test]
fn send_drain_and_lifecycle_race_on_one_session() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    // Lock waits spin (with a yield) until the holder releases: allow the branches they take.
    builder.max_branches = 100_000;
    builder.check(|| {
        EXPLORED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (store, s) = setup();

        let sender = {
            let (store, s) = (Arc::clone(&store), s.clone());
            loom::thread::spawn(move || {
                store
                    .send(&s, &SendRequest { text: "hello".into(), ..SendRequest::default() })
                    .unwrap()
                    .mid
            })
        };
        let drainer = {
            let (store, s) = (Arc::clone(&store), s.clone());
            loom::thread::spawn(move || {
                let mut adapter = Recorder(Vec::new());
                store.drain(&s, &mut adapter).unwrap();
                adapter.0
            })
        };
        store.append(&s, &Lifecycle::Set(Triple::new(Status::Active, None, None))).unwrap();
        let mid = sender.join().unwrap();
        let delivered = drainer.join().unwrap();

        let lines = store.lines(&s).unwrap();
        let sent = lines
            .iter()
            .filter(|line| matches!(line, Line::Sent(event, _) if event.mid.as_deref() == Some(mid.as_str())))
            .count();
        assert_eq!(sent, 1, "the message is logged exactly once");
        let moves = store
            .events(&s)
            .unwrap()
            .iter()
            .filter(|event| matches!(event, Event::Status(_)))
            .count();
        assert_eq!(moves, 1, "the move is logged exactly once");
        assert_eq!(store.record(&s).unwrap().triple().status, Status::Active);
        let owed = store.queue(&s).unwrap().iter().any(|entry| entry.mid == mid);
        assert!(delivered.len() <= 1);
        assert!(owed != delivered.contains(&mid), "delivered or owed, exactly one of them");
        let locks = store.fs().read_dir(&store.layout().session_locks_dir()).unwrap();
        assert!(locks.is_empty(), "no lock left behind: {locks:?}");
    });
    let explored = EXPLORED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("loom explored {explored} interleavings");
    assert!(explored > 100, "loom explored only {explored} interleavings");
}
