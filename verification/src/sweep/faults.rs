//! Injected faults (EIO, ENOSPC, short writes) at a boundary, and what must follow them.

use faultfs::{CrashMode, FaultPlan};

use super::options::Options;
use super::point::{Sequence, Source, digest_of, judge_sequence, token_base};
use super::report::{Place, Report};
use super::run;
use super::scenario::Scenario;
use super::token::Token;

/// Injects `fault` at op `k`: the failing step must not be acknowledged and must poison its
/// session in that handle. Then the machine loses power right after the failure; and,
/// separately, a new process reopens the store, recovers, works, and the machine loses power
/// after that (a failed sync may have dropped data that reads still return).
pub(crate) fn fault_point(
    options: &Options,
    scenario: &Scenario,
    boundaries: &[String],
    k: u64,
    fault: faultfs::Fault,
    report: &mut Report,
) {
    let seed = options.seed;
    let fs = run::machine(FaultPlan::fault_at(seed, k, fault), options.media);
    let (run, store) = run::execute_with(&fs, scenario, seed);
    let boundary = boundaries.get(k as usize).cloned().unwrap_or_else(|| "end".to_owned());
    if let Some(name) = boundaries.get(k as usize) {
        report.note_crashed(name);
    }
    let faulted_step = run.step_ops.iter().position(|(start, end)| (*start..*end).contains(&k));
    let transition = match run.in_flight.or(faulted_step) {
        Some(index) => format!("{}+{fault}", scenario.steps[index].transition()),
        None => format!("open+{fault}"),
    };
    let common =
        failure_handled(scenario, &run, store.as_ref(), (k, fault), &boundary, faulted_step);
    drop(store);
    let mut run = run;
    run.violations = common;
    // Power loss right after the failure (fsyncgate: dropped data is visible but not durable).
    let power = faultfs::Sifted::from(fs.crash(CrashMode::PowerLoss));
    report.count_enumeration(scenario, &power);
    let power = power.crash;
    let key =
        (scenario.name.to_string(), transition.clone(), boundary.clone(), CrashMode::PowerLoss);
    report.cells.entry(key.clone()).or_default().points += 1;
    let run_digest = digest_of(&run);
    for (image_index, image) in power.images.iter().enumerate() {
        let place = Place {
            scenario,
            transition: transition.clone(),
            boundary: boundary.clone(),
            token: Token {
                fault: Some(fault),
                ..token_base(options, scenario, CrashMode::PowerLoss, k, image_index)
            },
        };
        let sequence = Sequence { run: &run, run_digest: &run_digest, deep: false };
        judge_sequence(options, sequence, Source::Reboot(image), &place, report);
    }
    // A new process reopens on what the failing one left, works, and the power goes.
    let key =
        (scenario.name.to_string(), transition.clone(), boundary.clone(), CrashMode::ProcessKill);
    report.cells.entry(key).or_default().points += 1;
    let place = Place {
        scenario,
        transition,
        boundary,
        token: Token {
            fault: Some(fault),
            ..token_base(options, scenario, CrashMode::ProcessKill, k, usize::MAX)
        },
    };
    let depth2 = Options { depth2: false, ..options.clone() };
    let sequence = Sequence { run: &run, run_digest: &run_digest, deep: true };
    judge_sequence(&depth2, sequence, Source::Restart(&fs), &place, report);
}

/// The run's violations, and those of how the engine handled the injected `fault` at op `k`
/// (at `boundary`) that failed step `faulted_step`: a failed step is never acknowledged, and it
/// leaves its handle poisoned. The harness's own ops (worktrees) are fault points too, but the
/// engine's rules about failed writes do not apply to them.
fn failure_handled<F: faultfs::Fs>(
    scenario: &Scenario,
    run: &run::Execution,
    store: Option<&spex_engine::Store<F>>,
    (k, fault): (u64, faultfs::Fault),
    boundary: &str,
    faulted_step: Option<usize>,
) -> Vec<String> {
    let engine_op = !boundary.starts_with("harness.");
    let mut common = run.violations.clone();
    // A refusal (e.g. a key conflict) acknowledges nothing; its lock release may fail quietly.
    if let Some(index) = faulted_step
        && engine_op
        && run.in_flight != Some(index)
        && !run.refused.contains(&index)
    {
        common.push(format!(
            "an injected {fault} at op {k} ({boundary}) failed step {index} ({}), which was acknowledged anyway",
            scenario.steps[index].transition()
        ));
    }
    if let (Some(store), Some(index)) = (store, run.in_flight)
        && run.failed.is_some()
        && engine_op
    {
        let id = scenario.steps[index].session();
        match store.recover_session(&run::sid(id)) {
            Err(spex_engine::Error::Poisoned { .. }) => {}
            other => common
                .push(format!("after a failed {fault} the handle was not poisoned: {other:?}")),
        }
    }
    common
}
