//! Scenarios: small workloads over one or two sessions that together exercise every transition
//! and every write path (new segments, rollover, settlement, close, replay, conflict).

use spex_engine::{Proposal, Status};

pub use super::workload::{Scenario, Step};

/// The operation every scenario's keyed sends use.
pub const OPERATION: &str = "sweep";

fn send(to: &'static str, text: &'static str, key: Option<&'static str>) -> Step {
    Step::Send { to, text, from: None, key }
}

/// Every scenario, in a stable order.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: std::borrow::Cow::Borrowed("send"),
            segment_bytes_max: spex_engine::layout::SEGMENT_BYTES_DEFAULT,
            steps: vec![
                Step::Create { id: "s", adapter: Some("exec:cat") },
                send("s", "hello", None),
                send("s", "merge when green", Some("k1")),
                send("s", "merge when green", Some("k1")),
                send("s", "a different payload", Some("k1")),
                send("s", "bye", None),
            ],
        },
        Scenario {
            name: std::borrow::Cow::Borrowed("drain"),
            segment_bytes_max: spex_engine::layout::SEGMENT_BYTES_DEFAULT,
            steps: vec![
                Step::Create { id: "s", adapter: None },
                send("s", "first", None),
                send("s", "second, keyed", Some("k")),
                Step::DrainRefusing { id: "s" },
                Step::Drain { id: "s" },
                send("s", "second, keyed", Some("k")),
                send("s", "third, keyed", Some("k3")),
                Step::Drain { id: "s" },
            ],
        },
        Scenario {
            name: std::borrow::Cow::Borrowed("lifecycle"),
            segment_bytes_max: spex_engine::layout::SEGMENT_BYTES_DEFAULT,
            steps: vec![
                Step::Create { id: "s", adapter: None },
                Step::Set { id: "s", status: Status::Active, proposal: None, note: None },
                send("s", "status?", None),
                Step::Set {
                    id: "s",
                    status: Status::Awaiting,
                    proposal: Some(Proposal::Merge),
                    note: Some("ready"),
                },
                Step::Set {
                    id: "s",
                    status: Status::Awaiting,
                    proposal: Some(Proposal::Merge),
                    note: Some("ready"),
                },
                Step::Set {
                    id: "s",
                    status: Status::Asking,
                    proposal: None,
                    note: Some("which branch?"),
                },
                Step::Archive { id: "s" },
            ],
        },
        Scenario {
            name: std::borrow::Cow::Borrowed("launch"),
            segment_bytes_max: spex_engine::layout::SEGMENT_BYTES_DEFAULT,
            steps: vec![
                Step::Create { id: "s", adapter: None },
                Step::Set { id: "s", status: Status::Active, proposal: None, note: None },
                Step::BeginLaunch { id: "s", status: Status::Awaiting, note: Some("resumed") },
                send("s", "while launching", None),
                Step::BeginLaunch { id: "s", status: Status::Active, note: Some("twice") },
                Step::FailLaunch { id: "s" },
                Step::FailLaunch { id: "s" },
                Step::BeginLaunch { id: "s", status: Status::Active, note: Some("second try") },
                Step::Archive { id: "s" },
                Step::Set { id: "s", status: Status::Asking, proposal: None, note: Some("ready?") },
            ],
        },
        Scenario {
            name: std::borrow::Cow::Borrowed("close"),
            segment_bytes_max: spex_engine::layout::SEGMENT_BYTES_DEFAULT,
            steps: vec![
                Step::Create { id: "a", adapter: None },
                Step::Create { id: "b", adapter: None },
                Step::Send { to: "a", text: "from b", from: Some("b"), key: None },
                send("a", "from a human", Some("h")),
                Step::Close { id: "b" },
                Step::Drain { id: "a" },
            ],
        },
        Scenario {
            name: std::borrow::Cow::Borrowed("rollover"),
            segment_bytes_max: 1024,
            steps: vec![
                Step::Create { id: "s", adapter: None },
                send(
                    "s",
                    "0: the quick brown fox jumps over the lazy dog, again and again and again and again and again and again and again and again and again and again and again",
                    None,
                ),
                send(
                    "s",
                    "1: pack my box with five dozen liquor jugs, pack my box with five dozen liquor jugs, pack my box with five dozen liquor jugs, pack my box",
                    Some("r1"),
                ),
                send(
                    "s",
                    "2: sphinx of black quartz, judge my vow; sphinx of black quartz, judge my vow; sphinx of black quartz, judge my vow; sphinx of black quartz",
                    None,
                ),
                send(
                    "s",
                    "3: how vexingly quick daft zebras jump; how vexingly quick daft zebras jump; how vexingly quick daft zebras jump; how vexingly quick",
                    Some("r3"),
                ),
                send(
                    "s",
                    "4: the five boxing wizards jump quickly; the five boxing wizards jump quickly; the five boxing wizards jump quickly; the five boxing",
                    None,
                ),
                Step::Drain { id: "s" },
            ],
        },
        Scenario {
            name: std::borrow::Cow::Borrowed("together"),
            segment_bytes_max: spex_engine::layout::SEGMENT_BYTES_DEFAULT,
            steps: vec![
                Step::Create { id: "s", adapter: Some("exec:cat") },
                send("s", "hello", Some("k0")),
                Step::SendTogether {
                    to: "s",
                    sends: &[
                        Step::Send { to: "s", text: "one", from: None, key: None },
                        Step::Send { to: "s", text: "two, keyed", from: None, key: Some("k1") },
                        Step::Send { to: "s", text: "two, keyed", from: None, key: Some("k1") },
                        Step::Send { to: "s", text: "hello", from: None, key: Some("k0") },
                        Step::Send { to: "s", text: "other bytes", from: None, key: Some("k1") },
                        Step::Send { to: "s", text: "three", from: None, key: None },
                    ],
                },
                Step::Drain { id: "s" },
            ],
        },
    ]
}

/// The scenario called `name`; `name[i,j,...]` keeps only those steps (a shrunk workload).
pub fn named(name: &str) -> Option<Scenario> {
    let (base, subset) = match name.split_once('[') {
        Some((base, rest)) => (base, Some(rest.strip_suffix(']')?)),
        None => (name, None),
    };
    let mut scenario = match super::generate::named(base) {
        Some(generated) => generated,
        None => all().into_iter().find(|scenario| scenario.name == base)?,
    };
    if let Some(subset) = subset {
        let mut steps = Vec::new();
        for index in subset.split(',').filter(|part| !part.is_empty()) {
            steps.push(scenario.steps.get(index.parse::<usize>().ok()?)?.clone());
        }
        scenario.steps = steps;
        scenario.name = std::borrow::Cow::Owned(name.to_owned());
    }
    Some(scenario)
}

/// The name of `scenario` restricted to `steps`.
pub fn subset_name(base: &str, steps: &[usize]) -> String {
    let list: Vec<String> = steps.iter().map(usize::to_string).collect();
    format!("{base}[{}]", list.join(","))
}
