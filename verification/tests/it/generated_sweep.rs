//! Generated workloads (seeded random sequences over three sessions) are swept like the
//! embedded scenarios: no violation on the engine, a broken engine is caught, and the token of a
//! violation names the workload whole, so it replays bit for bit.

use spex_engine::mutant::Mutant;
use spex_verification::sweep::{self, Options, generate};

fn options(seed: u64, count: u64) -> Options {
    Options {
        scenarios: (0..count).map(|index| generate::nth(seed, index)).collect(),
        depth2: false,
        faults: vec![faultfs::Fault::Eio],
        ..Options::full(seed)
    }
}

#[test]
fn generated_workloads_hold_on_the_engine() {
    let seed = 20_261_201;
    let report = sweep::sweep(&options(seed, 3), &mut |_| {});
    let first = report
        .violations
        .first()
        .map(|v| format!("{}\n  {}", v.replay_command(), v.messages.join("\n  ")));
    assert!(report.violations.is_empty(), "first:\n{}", first.unwrap_or_default());
    assert!(report.crash_points > 100, "{} crash points", report.crash_points);
}

#[test]
fn a_generated_workload_is_named_by_its_seed() {
    let workload = generate::nth(3, 1);
    let named = sweep::scenario::named(&workload.name).expect("the name resolves");
    assert_eq!(named, workload);
    assert_ne!(generate::nth(3, 0).steps, workload.steps, "workloads differ");
}

#[test]
fn a_generated_workload_catches_a_broken_engine_and_replays() {
    spex_engine::mutant::select(Some(Mutant::NoLogSync));
    let report = sweep::sweep(&Options { stop_at_first: true, ..options(5, 2) }, &mut |_| {});
    let violation = report.violations.first().expect("the mutant is caught").clone();
    let replayed = sweep::replay(&violation.token).expect("the token replays");
    spex_engine::mutant::select(None);
    assert!(violation.token.scenario.starts_with(generate::PREFIX));
    assert_eq!(replayed.messages, violation.messages);
}

// A key reused by another sender is a conflict (the sender is part of the payload), and the
// retry of such a crashed send is refused: the oracle must not call that a lost replay. (Found
// by a generated workload: `spex verify sweep --random 10 --seed 11 --depth 1`.)
#[test]
fn a_key_reused_by_another_sender_is_refused_not_a_violation() {
    let scenario = sweep::scenario::named("gen-1476324957876442837").expect("a generated workload");
    let options = Options {
        scenarios: vec![scenario],
        depth2: false,
        faults: Vec::new(),
        ..Options::full(11)
    };
    let report = sweep::sweep(&options, &mut |_| {});
    assert!(report.violations.is_empty(), "{:?}", report.violations.first());
}

// A closed session is revoked as a sender: its keyed send is refused before the key is looked
// at, and so is the retry of such a send in flight at a crash. The oracle must take that refusal
// as the model does (`Model::expect` refuses the revoked sender first), not as a lost replay.
// (Found by a generated workload, `v2:gen-6639454191006904978:5389601374964139701:power:109:2`,
// whose shrunk reproducer these steps are.)
#[test]
fn a_keyed_retry_from_a_closed_sender_is_refused_not_a_violation() {
    use spex_verification::sweep::scenario::{Scenario, Step};
    let scenario = Scenario {
        name: std::borrow::Cow::Borrowed("closed-sender-retry"),
        segment_bytes_max: spex_engine::layout::SEGMENT_BYTES_DEFAULT,
        steps: vec![
            Step::Create { id: "a", adapter: None },
            Step::Create { id: "b", adapter: Some("exec:cat") },
            Step::Close { id: "b" },
            Step::Send { to: "b", text: "deploy", from: None, key: None },
            Step::Send { to: "a", text: "deploy", from: Some("b"), key: Some("k") },
        ],
    };
    let options = Options {
        scenarios: vec![scenario],
        depth2: false,
        faults: Vec::new(),
        ..Options::full(7)
    };
    let report = sweep::sweep(&options, &mut |_| {});
    assert!(report.violations.is_empty(), "{:?}", report.violations.first());
    assert!(report.crash_points > 40, "{} crash points", report.crash_points);
}
