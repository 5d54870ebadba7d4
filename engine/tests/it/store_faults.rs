//! Error injection at every boundary of a send, a drain and a lifecycle write on the simulated
//! filesystem: a failed write or sync is never acknowledged, it poisons the session in that
//! handle, a reopened store recovers with nothing acknowledged lost, and ENOSPC before the
//! commit point leaves the store byte for byte as it was.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use crate::common;

use common::{Recorder, config, id, queued, sim_store_on};
use spex_engine::faultfs::{CrashMode, Fault, FaultPlan, OpKind, SimFs};
use spex_engine::{Error, Event, Lifecycle, SendRequest, Status, Store, Triple};

fn text(text: &str) -> SendRequest {
    SendRequest { text: text.to_owned(), ..SendRequest::default() }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Send,
    Drain,
    Lifecycle,
}

/// Opens a store, creates a session with one delivered-free message, then runs `step`.
fn setup(fs: SimFs) -> Store<SimFs> {
    let store = sim_store_on(fs, 3, config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &text("acknowledged before")).unwrap();
    store
}

fn run(store: &Store<SimFs>, step: Step) -> Result<(), Error> {
    let s = id("s");
    match step {
        Step::Send => store.send(&s, &text("under test")).map(drop),
        Step::Drain => store.drain(&s, &mut Recorder::default()).map(drop),
        Step::Lifecycle => {
            store.append(&s, &Lifecycle::Set(Triple::new(Status::Active, None, None))).map(drop)
        }
    }
}

#[test]
fn every_fault_at_every_boundary_is_reported_poisons_and_recovers() {
    for step in [Step::Send, Step::Drain, Step::Lifecycle] {
        // Pass 1: where the step's ops are.
        let fs = SimFs::new(FaultPlan::none(3));
        let store = setup(fs.clone());
        let first = fs.op_count();
        run(&store, step).unwrap();
        let last = fs.op_count();
        let trace = fs.trace();
        assert!(last > first, "{step:?} issues ops");
        for k in first..last {
            let entry = &trace.entries()[k as usize];
            for fault in [Fault::Eio, Fault::Enospc, Fault::ShortWrite] {
                let label =
                    format!("{step:?}: {fault} at op {k} ({} {})", entry.boundary, entry.op);
                let fs = SimFs::new(FaultPlan::fault_at(3, k, fault));
                let store = setup(fs.clone());
                let before = fs.crash(CrashMode::ProcessKill).images.remove(0);
                let result = run(&store, step);
                assert!(result.is_err(), "{label}: a failed op must not be acknowledged");
                let after = fs.crash(CrashMode::ProcessKill).images.remove(0);
                // Lock files are outside the contract ("as it was" is about the session's data).
                let data = |image: &spex_engine::faultfs::Image| -> Vec<(String, Option<Vec<u8>>)> {
                    image
                        .nodes()
                        .iter()
                        .filter(|(path, _)| !path.contains("-locks"))
                        .map(|(path, _)| (path.clone(), image.file(path).map(<[u8]>::to_vec)))
                        .collect()
                };
                let before_commit = matches!(step, Step::Send | Step::Lifecycle)
                    && trace.entries()[first as usize..=k as usize].iter().all(|e| {
                        !(e.boundary.name().contains(".log.") && e.op == OpKind::SyncData)
                    });
                if fault == Fault::Enospc && !entry.op.is_sync() && before_commit {
                    assert_eq!(
                        data(&before),
                        data(&after),
                        "{label}: ENOSPC must leave the store as it was"
                    );
                }
                // The handle is poisoned for writes.
                assert!(
                    matches!(run(&store, Step::Send), Err(Error::Poisoned { .. })),
                    "{label}: the session must be poisoned"
                );
                // Reopen: recovery, then everything acknowledged is there and writes work again.
                let reopened = sim_store_on(fs.clone(), 4, config());
                reopened.send(&id("s"), &text("after reopen")).unwrap();
                let texts: Vec<String> = reopened
                    .events(&id("s"))
                    .unwrap()
                    .into_iter()
                    .filter_map(|event| match event {
                        Event::Sent(sent) => Some(sent.text),
                        Event::Status(_) => None,
                    })
                    .collect();
                assert_eq!(
                    texts.first().map(String::as_str),
                    Some("acknowledged before"),
                    "{label}"
                );
                assert_eq!(texts.last().map(String::as_str), Some("after reopen"), "{label}");
            }
        }
    }
}
