//! Generated workloads: seeded random sequences over three sessions, beside the embedded
//! scenarios. Keyed and unkeyed sends (keys reused with the same and with another payload, from
//! people and from other sessions), accepting and refusing drains, lifecycle writes, archive,
//! close, retired sessions, and rollovers under the smallest segment bound. A workload is named
//! by its own seed (`gen-<seed>`), so a replay token names it whole and the shrinker can cut it.
//! Boundaries that cannot apply (a send to a session not yet created, a close of a closed one) stay
//! in: their refusals are judged too.

use std::borrow::Cow;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spex_engine::{Proposal, Status};

use super::workload::{Scenario, Step};

/// The prefix of a generated workload's name.
pub const PREFIX: &str = "gen-";

/// Boundaries per generated workload: enough to roll segments over and to revisit keys, few enough
/// that every boundary of it can be crashed in seconds.
const STEPS: usize = 14;

const SESSIONS: [&str; 3] = ["a", "b", "c"];
const KEYS: [&str; 2] = ["k1", "k2"];
const TEXTS: [&str; 3] = [
    "hello",
    "deploy to eu-west",
    "a long message, so that a one-kilobyte segment fills after a few of them and the next \
     line rolls over into a new segment; it repeats itself to be long enough for that: a long \
     message, so that a one-kilobyte segment fills after a few of them and the next line rolls",
];
const NOTES: [&str; 2] = ["which region?", "ready for review"];

/// The `index`-th generated workload of a sweep seeded with `seed`.
pub fn nth(seed: u64, index: u64) -> Scenario {
    generated(splitmix(seed ^ splitmix(index.wrapping_add(1))))
}

/// The workload generated from `seed`.
pub fn generated(seed: u64) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut steps = vec![
        Step::Create { id: "a", adapter: None },
        Step::Create { id: "b", adapter: Some("exec:cat") },
    ];
    while steps.len() < STEPS {
        let id = SESSIONS[rng.random_range(0..SESSIONS.len())];
        let step = match rng.random_range(0..100) {
            0..=29 => Step::Send {
                to: id,
                text: pick(&mut rng, &TEXTS),
                from: sender(&mut rng, id),
                key: None,
            },
            30..=49 => Step::Send {
                to: id,
                text: pick(&mut rng, &TEXTS[..2]),
                from: sender(&mut rng, id),
                key: Some(pick(&mut rng, &KEYS)),
            },
            50..=64 => Step::Drain { id },
            65..=69 => Step::DrainRefusing { id },
            70..=84 => lifecycle(&mut rng, id),
            85..=88 => Step::Create { id, adapter: None },
            89..=92 => Step::Archive { id },
            93..=96 => Step::Close { id },
            _ => Step::Retire { id },
        };
        steps.push(step);
    }
    Scenario { name: Cow::Owned(format!("{PREFIX}{seed}")), segment_bytes_max: 1024, steps }
}

/// The generated workload a name (`gen-<seed>`) stands for.
pub fn named(name: &str) -> Option<Scenario> {
    Some(generated(name.strip_prefix(PREFIX)?.parse().ok()?))
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, from: &[T]) -> T {
    from[rng.random_range(0..from.len())]
}

/// A person (most of the time) or another session.
fn sender(rng: &mut ChaCha8Rng, to: &str) -> Option<&'static str> {
    let other = pick(rng, &SESSIONS);
    (rng.random_range(0..3) == 0 && other != to).then_some(other)
}

fn lifecycle(rng: &mut ChaCha8Rng, id: &'static str) -> Step {
    let (status, proposal, note) = match rng.random_range(0..5) {
        0 => (Status::Active, None, None),
        1 => (Status::Idle, None, None),
        2 => (Status::Awaiting, Some(Proposal::Merge), Some(NOTES[1])),
        3 => (Status::Parked, None, Some(NOTES[0])),
        _ => (Status::Asking, None, Some(NOTES[0])),
    };
    Step::Set { id, status, proposal, note }
}

/// SplitMix64: spreads a sweep seed and an index into independent workload seeds.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
