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

#[test]
fn send_drain_and_lifecycle_race_on_one_session() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    // Lock waits spin (with a yield) until the holder releases: allow the branches they take.
    builder.max_branches = 100_000;
    builder.check(|| {
        let config =
            Config { lock_wait_ms: 1_000_000, drain_retry_delay_ms: 0, ..Config::default() };
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
            .filter(|line| matches!(line, Line::Sent(event, _) if event.mid == mid))
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
}
