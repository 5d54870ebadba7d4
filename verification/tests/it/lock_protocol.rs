//! The lock protocol's model, checked exhaustively: every property holds on the engine's
//! protocol, every example is reachable (so the check is not vacuous), and each broken variant
//! breaks the properties it should, with a shortest counterexample that replays.

use spex_verification::lock_protocol::{LockModel, Variant, check, narrate};
use stateright::Model as _;

#[test]
fn the_engines_protocol_holds_in_every_reachable_state() {
    let model = LockModel::new(Variant::Faithful);
    let verdict = check(model, 2);
    for (property, broken) in &verdict.safety {
        if let Some(broken) = broken {
            panic!("{property} fails:\n{}", narrate(&model, broken).join("\n"));
        }
    }
    for (example, reached) in &verdict.examples {
        assert!(reached, "the example {example:?} was never reached: the model is too small");
    }
    assert_eq!(verdict.safety.len(), 3);
    assert!(verdict.unique_states > 100_000, "{} states", verdict.unique_states);
    println!(
        "{} unique states ({} visited), depth {}",
        verdict.unique_states, verdict.states, verdict.max_depth
    );
}

fn broken(variant: Variant) -> Vec<&'static str> {
    let model = LockModel::new(variant);
    let verdict = check(model, 2);
    let mut failed = Vec::new();
    for (property, broken) in verdict.safety {
        let Some(broken) = broken else { continue };
        // The counterexample replays: each action is enabled where it is taken and the last
        // state breaks the property.
        let mut state = model.init_states().remove(0);
        for action in &broken.actions {
            let mut enabled = Vec::new();
            model.actions(&state, &mut enabled);
            assert!(enabled.contains(action), "{action:?} is not enabled in {state:?}");
            state = model.next_state(&state, *action).expect("an enabled action has a next state");
        }
        assert_eq!(state, broken.last);
        println!("{property}:\n  {}", narrate(&model, &broken).join("\n  "));
        failed.push(property);
    }
    failed
}

#[test]
fn a_takeover_without_recheck_breaks_every_property() {
    assert_eq!(
        broken(Variant::TakeoverWithoutRecheck),
        [
            "mutual exclusion",
            "no acknowledged send lost",
            "a lock not taken over shows only durable data"
        ]
    );
}

#[test]
fn a_takeover_without_vouching_loses_an_acknowledged_send() {
    assert_eq!(
        broken(Variant::NoVouchAfterTakeover),
        ["no acknowledged send lost", "a lock not taken over shows only durable data"]
    );
}

#[test]
fn a_takeover_that_removes_then_creates_lets_a_fresh_process_skip_the_vouch() {
    assert_eq!(
        broken(Variant::RemoveThenCreate),
        ["no acknowledged send lost", "a lock not taken over shows only durable data"]
    );
}
