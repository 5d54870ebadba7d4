//! Property-based conformance: random sequences over several sessions (keyed and unkeyed sends
//! with key reuse under the same and a different payload, drains that accept or refuse,
//! lifecycle writes, rollovers under a tiny segment bound, archive, close, retired sessions, sends
//! from closed sessions) run against the engine on `SimFs` and on real files, compared with the model after
//! every step. A disagreement shrinks to a minimal sequence; regressions live in
//! `tests/conformance.proptest-regressions`.

use std::sync::Arc;

use faultfs::{FaultPlan, RealFs, SimFs};
use proptest::prelude::*;
use spex_engine::env::{ManualClock, SeededIds};
use spex_engine::{Config, Proposal, Status, Store};
use spex_verification::conformance::conform;
use spex_verification::sweep::Step;

const IDS: [&str; 3] = ["a", "b", "c"];
const TEXTS: [&str; 4] = [
    "hi",
    "merge when green",
    "ünïcode ✓ — straddles",
    "a longer message that makes lines grow past a tiny segment bound quickly, again and again",
];
const KEYS: [&str; 3] = ["k1", "k2", "k3"];

fn id() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(&IDS[..])
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (id(), proptest::option::of(Just("exec:cat"))).prop_map(|(id, adapter)| Step::Create { id, adapter }),
        5 => (id(), proptest::sample::select(&TEXTS[..]), proptest::option::of(id()), proptest::option::weighted(0.5, proptest::sample::select(&KEYS[..])))
            .prop_map(|(to, text, from, key)| Step::Send { to, text, from, key }),
        2 => id().prop_map(|id| Step::Drain { id }),
        1 => id().prop_map(|id| Step::DrainRefusing { id }),
        2 => (id(), proptest::sample::select(&Status::ALL[..]), proptest::option::of(proptest::sample::select(&[Proposal::Merge, Proposal::Nothing, Proposal::Close][..])), proptest::option::of(proptest::sample::select(&["", "ready", "which branch?"][..])))
            .prop_map(|(id, status, proposal, note)| Step::Set { id, status, proposal, note }),
        1 => id().prop_map(|id| Step::Archive { id }),
        1 => id().prop_map(|id| Step::Close { id }),
        1 => id().prop_map(|id| Step::Retire { id }),
    ]
}

fn config(tiny: bool) -> Config {
    Config {
        segment_bytes_max: if tiny { 1024 } else { spex_engine::layout::SEGMENT_BYTES_DEFAULT },
        lock_wait_ms: 5_000,
        drain_attempts_max: 2,
        drain_retry_delay_ms: 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn engine_on_simfs_conforms_to_the_model(steps in proptest::collection::vec(step(), 1..40), tiny in any::<bool>(), seed in any::<u64>()) {
        let store = Store::open(
            SimFs::new(FaultPlan::none(seed)),
            "/store",
            Arc::new(ManualClock::new(1_784_160_000_000)),
            Arc::new(SeededIds::new(seed)),
            config(tiny),
        ).expect("the store opens");
        prop_assert_eq!(conform(&store, &steps), Ok(()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn engine_on_real_files_conforms_to_the_model(steps in proptest::collection::vec(step(), 1..30), tiny in any::<bool>(), seed in any::<u64>()) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::open(
            RealFs::new(),
            dir.path(),
            Arc::new(ManualClock::new(1_784_160_000_000)),
            Arc::new(SeededIds::new(seed)),
            config(tiny),
        ).expect("the store opens");
        prop_assert_eq!(conform(&store, &steps), Ok(()));
    }
}

/// The conformance check can fail: a broken engine (a rollover that writes into the segment it
/// seals) is caught on a plain sequence, with the step named.
#[test]
fn conformance_catches_a_broken_engine() {
    let steps: Vec<Step> = std::iter::once(Step::Create { id: "a", adapter: None })
        .chain((0..12).map(|_| Step::Send { to: "a", text: TEXTS[3], from: None, key: None }))
        .collect();
    let open = || {
        Store::open(
            SimFs::new(FaultPlan::none(1)),
            "/store",
            Arc::new(ManualClock::new(1_784_160_000_000)),
            Arc::new(SeededIds::new(1)),
            config(true),
        )
        .expect("the store opens")
    };
    assert_eq!(conform(&open(), &steps), Ok(()));
    spex_engine::mutant::select(Some(spex_engine::mutant::Mutant::RolloverTouchesSealed));
    let result = conform(&open(), &steps);
    spex_engine::mutant::select(None);
    let error = result.expect_err("the broken rollover is caught");
    assert!(error.starts_with("step "), "{error}");
}
