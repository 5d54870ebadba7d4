//! loom model of the in-process concurrency: a send, a drain and a lifecycle write racing on one
//! session through the engine's `sync` module (and `SimFs`, whose state is a loom mutex under
//! `--cfg loom`). Every interleaving loom explores must end with the message logged once and
//! either delivered or still owed, the move logged once, and no lock left behind.
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p spex-engine --test loom_session --release`.
#![cfg(loom)]
#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::sync::Arc;

use spex_engine::env::{ManualClock, SeededIds};
use spex_engine::faultfs::{FaultPlan, Fs, SimFs};
use spex_engine::timeline::Line;
use spex_engine::{
    Adapter, Config, Event, Lifecycle, Message, SendRequest, SessionId, Status, Store, Triple,
};

const B: spex_engine::faultfs::Boundary = spex_engine::faultfs::Boundary::new("test");

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

/// Two sends to one session through one handle, committed together or one after the other:
/// each sender gets its own message's id, and each message is logged once and owed once.
fn two_sends_share_a_commit() {
    let (store, s) = setup();
    let sender = {
        let (store, s) = (Arc::clone(&store), s.clone());
        loom::thread::spawn(move || {
            store
                .send(&s, &SendRequest { text: "from a".into(), ..SendRequest::default() })
                .unwrap()
        })
    };
    let b =
        store.send(&s, &SendRequest { text: "from b".into(), ..SendRequest::default() }).unwrap();
    let a = sender.join().unwrap();
    assert_ne!(a.mid, b.mid);
    let owed: Vec<(String, String)> =
        store.queue(&s).unwrap().into_iter().map(|entry| (entry.mid, entry.text)).collect();
    for (accepted, text) in [(&a, "from a"), (&b, "from b")] {
        assert_eq!(owed.iter().filter(|(mid, t)| *mid == accepted.mid && t == text).count(), 1);
        let logged = store
            .lines(&s)
            .unwrap()
            .into_iter()
            .filter(|line| matches!(line, Line::Sent(sent, _) if sent.mid.as_deref() == Some(accepted.mid.as_str()) && sent.text == text))
            .count();
        assert_eq!(logged, 1, "{text} logged once under its own id");
    }
    assert_eq!(owed.len(), 2);
}

#[test]
fn two_sends_through_one_handle_share_a_commit() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.max_branches = 100_000;
    builder.check(two_sends_share_a_commit);
}

/// The model can fail: a leader that answers without waking its members leaves one asleep.
#[cfg(feature = "mutants")]
#[test]
fn loom_catches_a_group_without_wakeup() {
    let caught = std::panic::catch_unwind(|| {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.max_branches = 100_000;
        builder.check(|| {
            spex_engine::mutant::select(Some(spex_engine::mutant::Mutant::GroupWithoutWakeup));
            two_sends_share_a_commit();
        });
    });
    spex_engine::mutant::select(None);
    assert!(caught.is_err(), "loom must find the member that is never woken");
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

/// Two processes race to take over the lock a dead one left: the takeover is exclusive (each
/// process's send lands once, the queue holds both, no lock is left), in every interleaving.
#[test]
fn two_processes_take_over_a_dead_holders_lock_one_at_a_time() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.max_branches = 100_000;
    builder.check(|| {
        EXPLORED_TAKEOVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        takeover_race();
    });
    let explored = EXPLORED_TAKEOVERS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("loom explored {explored} takeover interleavings");
    assert!(explored > 1000, "loom explored only {explored} takeover interleavings");
}

/// Interleavings of the takeover model explored.
static EXPLORED_TAKEOVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The model can fail: a taker that does not re-read the lock under the takeover flock removes
/// the other taker's fresh lock, and loom finds the two holders.
#[cfg(feature = "mutants")]
#[test]
fn loom_catches_a_takeover_without_recheck() {
    let caught = std::panic::catch_unwind(|| {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.max_branches = 100_000;
        builder.check(|| {
            spex_engine::mutant::select(Some(spex_engine::mutant::Mutant::TakeoverWithoutRecheck));
            takeover_race();
        });
    });
    spex_engine::mutant::select(None);
    assert!(caught.is_err(), "loom must find the takeover that makes two holders");
}

fn takeover_race() {
    {
        let (store, s) = setup();
        let fs = store.fs().clone();
        // A holder that died holding the record lock (its pid is not running). Processes start
        // at the simulated filesystem's epoch, before any lock is written (a start after a
        // lock's modification would mark its pid reused).
        fs.spawn_process(2000, 0);
        fs.kill_process(2000);
        let lock = store.layout().session_lock(&s);
        let file = fs.open(&lock, spex_engine::faultfs::OpenOptions::create_new(), B).unwrap();
        spex_engine::faultfs::File::write_at(&file, 0, b"2000", B).unwrap();
        drop(file);
        let senders: Vec<_> = [3000u32, 4000]
            .into_iter()
            .map(|pid| {
                fs.spawn_process(pid, 0);
                let process = Store::open(
                    fs.as_process(pid),
                    "/store",
                    Arc::new(ManualClock::new(1_784_160_000_000)),
                    Arc::new(SeededIds::new(u64::from(pid))),
                    Config {
                        lock_wait_ms: 1_000_000,
                        drain_retry_delay_ms: 0,
                        ..Config::default()
                    },
                )
                .unwrap();
                let s = s.clone();
                loom::thread::spawn(move || {
                    let text = format!("from {pid}");
                    process.send(&s, &SendRequest { text, ..SendRequest::default() }).unwrap().mid
                })
            })
            .collect();
        let mids: Vec<String> = senders.into_iter().map(|sender| sender.join().unwrap()).collect();
        let lines = store.lines(&s).unwrap();
        for mid in &mids {
            let logged = lines
                .iter()
                .filter(|line| matches!(line, Line::Sent(event, _) if event.mid.as_deref() == Some(mid.as_str())))
                .count();
            assert_eq!(logged, 1, "each send is logged exactly once");
        }
        let owed: Vec<String> =
            store.queue(&s).unwrap().into_iter().map(|entry| entry.mid).collect();
        assert_eq!(owed.len(), 2, "neither queue update was lost: {owed:?}");
        let locks = store.fs().read_dir(&store.layout().session_locks_dir()).unwrap();
        assert!(
            locks.iter().all(|entry| !entry.name.ends_with(".lock")),
            "no lock left behind: {locks:?}"
        );
    }
}
