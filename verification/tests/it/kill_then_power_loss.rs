//! Kill, restart, more work, power loss: the three workloads in which a recovery or a retry
//! acted on bytes a killed (or failed) process left unsynced, and then acknowledged.
//!
//! Why it matters: a real kernel keeps a killed process's writes in the page cache for tens of
//! seconds; a power loss after the restart may still drop them. An acknowledgement given by the
//! next process must not rest on them. Every power-loss image of each workload is checked.

//!
//! Each workload also runs with the mutant that takes its fix back out (the engine as it was):
//! it must fail there, or the test proves nothing.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::sync::Arc;

use spex_engine::env::{ManualClock, SeededIds};
use spex_engine::faultfs::{CrashMode, Fault, FaultPlan, SimFs};
use spex_engine::mutant::{self, Mutant};
use spex_engine::{
    Adapter, Config, Event, Key, Lifecycle, Message, SendRequest, SessionId, Status, Store, Triple,
};

const SEED: u64 = 11;

fn id(text: &str) -> SessionId {
    SessionId::new(text).unwrap()
}

fn queued() -> Triple {
    Triple::new(Status::Queued, None, None)
}

fn sim_store_on(fs: SimFs, seed: u64) -> Store<SimFs> {
    let config = Config { lock_wait_ms: 2_000, drain_retry_delay_ms: 1, ..Config::default() };
    Store::open(
        fs,
        "/root",
        Arc::new(ManualClock::new(1_784_160_000_000)),
        Arc::new(SeededIds::new(seed)),
        config,
    )
    .unwrap()
}

struct Accept;

impl Adapter for Accept {
    fn deliver(&mut self, _: &Message<'_>) -> Result<(), String> {
        Ok(())
    }
}

/// Runs `workload` on the real engine (it must hold) and with `broken` selected (it must not).
fn holds_and_mutant_breaks(broken: Mutant, workload: fn() -> Result<(), String>) {
    if let Err(error) = workload() {
        panic!("the engine loses an acknowledgement: {error}");
    }
    mutant::select(Some(broken));
    let found = workload();
    mutant::select(None);
    assert!(found.is_err(), "the workload does not catch {}", broken.name());
}

fn keyed(text: &str, key: &str) -> SendRequest {
    SendRequest {
        text: text.to_owned(),
        key: Some(Key { operation: "test".to_owned(), key: key.to_owned() }),
        ..SendRequest::default()
    }
}

fn plain(text: &str) -> SendRequest {
    SendRequest { text: text.to_owned(), ..SendRequest::default() }
}

/// The index of the first op named `boundary` at or after op `from` when `work` runs on a
/// fault-free filesystem.
fn op_of(boundary: &str, from: u64, work: impl Fn(&SimFs)) -> u64 {
    let fs = SimFs::new(FaultPlan::none(SEED));
    work(&fs);
    let trace = fs.trace();
    let found = trace
        .entries()
        .iter()
        .position(|entry| entry.index >= from && entry.boundary.name() == boundary);
    found.unwrap_or_else(|| panic!("no {boundary} in\n{trace}")) as u64
}

/// Every power-loss image of `fs`, each rebooted, opened and recovered.
fn power_loss_stores(fs: &SimFs) -> Vec<Store<SimFs>> {
    let crash = fs.crash(CrashMode::PowerLoss);
    assert!(!crash.images.is_empty());
    crash
        .images
        .iter()
        .map(|image| {
            let rebooted = SimFs::from_image(image, FaultPlan::none(SEED));
            let store = sim_store_on(rebooted, SEED + 1);
            store.recover_session(&id("s")).unwrap();
            store
        })
        .collect()
}

fn logged(store: &Store<SimFs>, mid: &str) -> bool {
    store
        .events(&id("s"))
        .unwrap()
        .iter()
        .any(|event| matches!(event, Event::Sent(sent) if sent.mid.as_deref() == Some(mid)))
}

/// A keyed send killed between its append and its sync; the retry with the same key is
/// acknowledged as a replay; power loss. The message must still be logged and owed.
#[test]
fn keyed_replay_after_a_kill_survives_a_power_loss() {
    holds_and_mutant_breaks(Mutant::NoVouchAfterTakeover, keyed_replay_workload);
}

fn keyed_replay_workload() -> Result<(), String> {
    let s = id("s");
    let setup = |fs: &SimFs| {
        let store = sim_store_on(fs.clone(), SEED);
        store.create_session(&s, &queued(), None, None).unwrap();
        store.send(&s, &keyed("deploy", "k1")).map(drop)
    };
    let k = op_of("send.log.sync", 0, |fs| setup(fs).unwrap());
    let fs = SimFs::new(FaultPlan::crash_at(SEED, k));
    assert!(setup(&fs).unwrap_err().is_crash());

    let restarted = fs.restart(FaultPlan::none(SEED));
    let store = sim_store_on(restarted.clone(), SEED + 1);
    let accepted = store.send(&s, &keyed("deploy", "k1")).unwrap();
    assert!(accepted.replayed, "the retry finds the receipt the killed process appended");
    drop(store);

    for (index, store) in power_loss_stores(&restarted).iter().enumerate() {
        if !logged(store, &accepted.mid) {
            return Err(format!("image {index}: replayed {} is not logged", accepted.mid));
        }
        if !store.queue(&s).unwrap().iter().any(|entry| entry.mid == accepted.mid) {
            return Err(format!("image {index}: replayed {} is not owed", accepted.mid));
        }
        let report = store.drain(&s, &mut Accept).unwrap();
        if let Some(stop) = report.stopped {
            return Err(format!("image {index}: the drain stopped: {stop}"));
        }
    }
    Ok(())
}

/// A lifecycle write killed between its status append and its sync; the next writer's recovery
/// rolls the record forward; power loss. The record must never show a move the log lacks.
#[test]
fn roll_forward_after_a_kill_survives_a_power_loss() {
    holds_and_mutant_breaks(Mutant::NoVouchAfterTakeover, roll_forward_workload);
}

fn roll_forward_workload() -> Result<(), String> {
    let s = id("s");
    let active = Triple::new(Status::Active, None, None);
    let setup = |fs: &SimFs| {
        let store = sim_store_on(fs.clone(), SEED);
        store.create_session(&s, &queued(), None, None).unwrap();
        store.append(&s, &Lifecycle::Set(active.clone())).map(drop)
    };
    let k = op_of("append.log.sync", 0, |fs| setup(fs).unwrap());
    let fs = SimFs::new(FaultPlan::crash_at(SEED, k));
    assert!(setup(&fs).unwrap_err().is_crash());

    let restarted = fs.restart(FaultPlan::none(SEED));
    let store = sim_store_on(restarted.clone(), SEED + 1);
    store.recover_session(&s).unwrap();
    assert_eq!(store.record(&s).unwrap().public_triple(), active, "rolled forward");
    drop(store);

    for (index, store) in power_loss_stores(&restarted).iter().enumerate() {
        let last_move = store.events(&s).unwrap().iter().rev().find_map(|event| match event {
            Event::Status(status) => Some(status.triple.clone()),
            Event::Sent(_) => None,
        });
        let record = store.record(&s).unwrap().public_triple();
        let last_move = last_move.unwrap_or_else(queued);
        if record != last_move {
            return Err(format!(
                "image {index}: the record shows {record:?}, the log's last move is {last_move:?}"
            ));
        }
    }
    Ok(())
}

/// A send whose log sync fails with EIO (the dirty data is dropped, reads still show it); the
/// process reopens and sends again; power loss. The acknowledged send must survive.
#[test]
fn a_send_after_a_failed_sync_survives_a_power_loss() {
    holds_and_mutant_breaks(Mutant::AppendAfterFailedSync, failed_sync_workload);
}

fn failed_sync_workload() -> Result<(), String> {
    let s = id("s");
    let setup = |fs: &SimFs| {
        let store = sim_store_on(fs.clone(), SEED);
        store.create_session(&s, &queued(), None, None).unwrap();
        store.send(&s, &plain("first")).unwrap();
        store.send(&s, &plain("second")).map(drop)
    };
    let first_send = op_of("send.log.sync", 0, |fs| setup(fs).unwrap());
    let k = op_of("send.log.sync", first_send + 1, |fs| setup(fs).unwrap());
    let fs = SimFs::new(FaultPlan::fault_at(SEED, k, Fault::Eio));
    assert!(setup(&fs).is_err(), "the failed sync is not acknowledged");

    let store = sim_store_on(fs.clone(), SEED + 1);
    let third = store.send(&s, &plain("third")).unwrap();
    drop(store);

    for (index, store) in power_loss_stores(&fs).iter().enumerate() {
        if !logged(store, &third.mid) {
            return Err(format!("image {index}: acknowledged {} is lost", third.mid));
        }
    }
    Ok(())
}
