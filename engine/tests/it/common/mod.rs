//! Shared setup of the engine's integration tests.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

#[expect(
    clippy::disallowed_methods,
    reason = "tests prepare real files directly, outside the engine (the CLI's tests, which share the module, have no such ban)"
)]
pub(crate) mod corpus;

use std::sync::Arc;

use spex_engine::env::{ManualClock, SeededIds};
use spex_engine::faultfs::{FaultPlan, Fs, RealFs, SimFs};
use spex_engine::{Adapter, Config, Error, Message, SendRequest, SessionId, Status, Store, Triple};

pub(crate) fn id(text: &str) -> SessionId {
    SessionId::new(text).unwrap()
}

pub(crate) fn config() -> Config {
    Config { lock_wait_ms: 2_000, drain_retry_delay_ms: 1, ..Config::default() }
}

/// A store on a real temporary directory, with a manual clock and seeded ids.
pub(crate) fn real_store(config: Config) -> (tempfile::TempDir, Store<RealFs>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        RealFs::new(),
        dir.path().join("root"),
        Arc::new(ManualClock::new(1_784_160_000_000)),
        Arc::new(SeededIds::new(7)),
        config,
    )
    .unwrap();
    (dir, store)
}

/// A store on a simulated filesystem.
pub(crate) fn sim_store(seed: u64, config: Config) -> Store<SimFs> {
    sim_store_on(SimFs::new(FaultPlan::none(seed)), seed, config)
}

pub(crate) fn sim_store_on(fs: SimFs, seed: u64, config: Config) -> Store<SimFs> {
    Store::open(
        fs,
        "/root",
        Arc::new(ManualClock::new(1_784_160_000_000)),
        Arc::new(SeededIds::new(seed)),
        config,
    )
    .unwrap()
}

pub(crate) fn queued() -> Triple {
    Triple::new(Status::Queued, None, None)
}

/// An adapter that records what it was given, and fails while `fail` is positive.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub(crate) delivered: Vec<(String, String, Option<String>)>,
    pub(crate) fail: u32,
}

impl Adapter for Recorder {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        if self.fail > 0 {
            self.fail -= 1;
            return Err("adapter unavailable".to_owned());
        }
        self.delivered.push((
            message.mid.to_owned(),
            message.text.to_owned(),
            message.from.map(str::to_owned),
        ));
        Ok(())
    }
}

/// The bytes of a file through the store's filesystem.
pub(crate) fn read<F: Fs>(store: &Store<F>, path: &std::path::Path) -> Vec<u8> {
    store.fs().read(path).unwrap()
}

/// An unkeyed send of `text` from a human.
pub(crate) fn text(text: &str) -> SendRequest {
    SendRequest { text: text.to_owned(), ..SendRequest::default() }
}

/// Asserts that `result` is a corruption refusal naming exactly `path`.
pub(crate) fn refused_naming(result: Result<impl std::fmt::Debug, Error>, path: &std::path::Path) {
    match result {
        Err(Error::Corrupt { path: named, .. }) if named == path => {}
        other => panic!("expected a refusal naming {}, got {other:?}", path.display()),
    }
}
