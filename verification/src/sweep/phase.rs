//! One phase of a crash sequence: the process that comes after a crash opens the store,
//! recovers, is judged, goes on working (a plain send to every session from another sender, the
//! retry of a crashed keyed send, then a drain of every session) and is judged again.
//!
//! Nothing a phase does is exempt from crashing: the driver (`sweep`) crashes every one of its
//! ops, in both modes, and judges those images against the run as it stood at that op (what the
//! continued work had acknowledged, the step it had in flight). And because a kill is not a
//! sync, the phase after a kill runs on the killed process's pending writes; a power loss after
//! the phase may still drop them, and whatever the phase acknowledged must survive it.
//!
//! After a kill the next process may also run a transition first, as the CLI does, with no
//! recovery before it ([`first_command`]): that transition takes the dead holder's lock over
//! itself and must vouch for what it left; the driver judges a power loss right after it.
//!
//! This module drives; `check` judges.

use std::ops::ControlFlow;

use faultfs::{Fs, SimFs};
use spex_engine::Store;
use spex_model::Model;

use super::check::{check_activity_index, check_drained, check_recovered, check_retry};
use super::run::{Answer, Execution, candidates, open, perform, sid, snapshot_store};
use super::scenario::{Scenario, Step};

/// What another sender says after every recovery.
const AFTER_RECOVERY: &str = "sent after recovery";

/// A phase that ran to its end.
#[derive(Debug)]
pub(crate) struct Checked {
    /// What broke.
    pub(crate) violations: Vec<String>,
    /// The run as the phase left it: what a power loss after the phase is judged against.
    pub(crate) run: Execution,
}

/// A phase halted by a planned crash.
#[derive(Debug)]
pub(crate) struct Halted {
    /// The halted filesystem, to take the crash's images from (or to restart).
    pub(crate) fs: SimFs,
    /// The run as it stood at the crash.
    pub(crate) run: Box<Execution>,
}

/// Runs recovery on every session that has a record (every writer would run it first).
pub(crate) fn recover_all<F: Fs>(store: &Store<F>, run: &Execution) -> Result<(), String> {
    for id in run.created.keys() {
        let session = sid(id);
        if store.fs().exists(&store.layout().record(&session)).map_err(|e| e.to_string())? {
            store
                .recover_session(&session)
                .map_err(|error| format!("recovery of {id} failed: {error}"))?;
        }
    }
    Ok(())
}

/// Opens `fs` after a crash during `run`, recovers, judges, continues and judges again. A
/// planned crash anywhere in the phase hands the filesystem back, with the run at that moment.
pub(crate) fn check_image(
    fs: SimFs,
    scenario: &Scenario,
    run: &Execution,
    seed: u64,
) -> Result<Checked, Halted> {
    let store = match open(fs.clone(), scenario, seed) {
        Ok(store) => store,
        Err(error) if error.is_crash() => {
            return Err(Halted { fs, run: Box::new(run.continued(scenario)) });
        }
        Err(error) => {
            return Ok(Checked {
                violations: vec![format!("the recovered store does not open: {error}")],
                run: run.continued(scenario),
            });
        }
    };
    let (violations, next) = check_store(&store, scenario, run);
    if fs.halted().is_some() {
        return Err(Halted { fs, run: Box::new(next) });
    }
    Ok(Checked { violations, run: next })
}

/// A store the next process opened and recovered after a crash: what is left of the phase is
/// judging it and the continued work ([`Recovered::judge_rest`]).
pub(crate) struct Recovered {
    store: Store<SimFs>,
    /// The machine as recovery left it.
    pub(crate) fs: SimFs,
}

/// Opens `fs` after a crash during `run` (with no planned fault) and recovers: the store, or
/// the violations that end the phase there (as [`check_image`] reports them).
pub(crate) fn recover_only(
    fs: SimFs,
    scenario: &Scenario,
    run: &Execution,
    seed: u64,
) -> Result<Recovered, Vec<String>> {
    assert!(fs.plan().trigger.is_none(), "a phase judged to its end runs no planned fault");
    let store = match open(fs.clone(), scenario, seed) {
        Ok(store) => store,
        Err(error) if error.is_crash() => {
            return Err(vec!["recovery crashed without a planned fault".to_owned()]);
        }
        Err(error) => return Err(vec![format!("the recovered store does not open: {error}")]),
    };
    match recover_all(&store, run) {
        Ok(()) => Ok(Recovered { store, fs }),
        Err(error) => Err(vec![error]),
    }
}

impl Recovered {
    /// The rest of [`check_image`]'s judgement: the recovered store judged, then the continued
    /// work and its judgement. What it can depend on is the machine as every process sees it
    /// (`SimFs::visible_digest`), the run, and the store handle's memory, which holds nothing
    /// the machine does not give: no poisoned session (nothing failed), no batch in progress,
    /// no id drawn (only a send draws one), and no receipt index yet (recovery reads none).
    pub(crate) fn judge_rest(
        self,
        scenario: &Scenario,
        run: &Execution,
        allowed: &[Model],
    ) -> Vec<String> {
        let mut next = run.continued_from(allowed.to_vec());
        next.last_phase = true;
        let violations = judge_recovered(&self.store, scenario, run, allowed, &mut next);
        assert!(self.fs.halted().is_none(), "no planned crash halts a phase judged to its end");
        violations
    }
}

/// The phase on an open store (simulated or real): recover, judge, continue, judge.
pub(crate) fn check_store<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    run: &Execution,
) -> (Vec<String>, Execution) {
    let allowed = candidates(scenario, run);
    let mut next = run.continued_from(allowed.clone());
    if let Err(error) = recover_all(store, run) {
        return (vec![error], next);
    }
    let violations = judge_recovered(store, scenario, run, &allowed, &mut next);
    (violations, next)
}

/// After recovery: the recovered store judged, then (if sound) the continued work, which
/// advances `next`, and its judgement.
fn judge_recovered<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    run: &Execution,
    allowed: &[Model],
    next: &mut Execution,
) -> Vec<String> {
    let (mut violations, observed) = check_recovered(store, run, allowed);
    if let Some(before) = observed.filter(|_| violations.is_empty()) {
        violations.extend(continue_workload(store, scenario, run, &before, next));
    }
    violations
}

/// What the next process may run first after a kill, as the CLI runs it (no recovery of its
/// own first: the transition takes the dead holder's lock over itself and must vouch for what it
/// left): the retry of each keyed send in flight, a drain of the session in flight, a plain
/// send to it, after a lifecycle write another one, an archive and a close of it. Empty when no
/// lock can be left behind (nothing was in flight).
pub(crate) fn first_commands(scenario: &Scenario, run: &Execution) -> Vec<Step> {
    let Some(in_flight) = run.in_flight.and_then(|i| scenario.steps.get(i)) else {
        return Vec::new();
    };
    let session = match in_flight {
        Step::Create { .. } | Step::Retire { .. } => None,
        step => Some(step.session()),
    };
    let mut commands: Vec<Step> = retries(scenario, run).into_iter().cloned().collect();
    if let Some(id) = session.filter(|id| run.created.contains_key(*id)) {
        commands.push(Step::Drain { id });
        commands.push(Step::Send { to: id, text: AFTER_RECOVERY, from: None, key: None });
        // After a killed lifecycle write, another one (its roll-forward happens in its own
        // transition).
        if matches!(
            in_flight,
            Step::Set { .. } | Step::BeginLaunch { .. } | Step::FailLaunch { .. }
        ) {
            commands.push(Step::Set {
                id,
                status: spex_engine::Status::Active,
                proposal: None,
                note: Some("the first command after a kill"),
            });
        }
        // Archive and close take the lock over too, and close ends what the dead holder owed.
        commands.push(Step::Archive { id });
        commands.push(Step::Close { id });
    }
    commands
}

/// The next process's first command `step` on `fs` after a kill, with no recovery before it:
/// its violations (an error, an answer no allowed state expects, a call the adapter refused),
/// and the run with its answer, which a power loss right after it is judged against. A planned
/// crash inside it hands the filesystem back, with the command in flight.
pub(crate) fn first_command(
    fs: SimFs,
    scenario: &Scenario,
    run: &Execution,
    step: &Step,
    seed: u64,
) -> Result<(Vec<String>, Execution), Halted> {
    let mut next = run.continued(scenario);
    let store = match open(fs.clone(), scenario, seed) {
        Ok(store) => store,
        Err(error) if error.is_crash() => return Err(Halted { fs, run: Box::new(next) }),
        Err(error) => {
            return Ok((vec![format!("the store does not open after the kill: {error}")], next));
        }
    };
    next.continuing = Some(step.clone());
    let mut delivered = Vec::new();
    let mut violations = Vec::new();
    let answer = perform(&store, step, &mut delivered, &mut violations, None);
    next.delivered.extend(delivered);
    if fs.halted().is_some() {
        return Err(Halted { fs, run: Box::new(next) });
    }
    match answer {
        Err(error) => violations.push(format!(
            "{} as the first command after the kill failed: {error}",
            step.transition()
        )),
        Ok(Answer::Drained(Some(stop))) => {
            violations.push(format!("a drain as the first command after the kill stopped: {stop}"));
        }
        Ok(answer) => violations.extend(next.advance_continued(step, &answer)),
    }
    next.continuing = None;
    snapshot_store(&store, &mut next);
    Ok((violations, next))
}

/// Whether an op at `boundary` belongs to a transition's takeover of a dead holder's lock
/// rather than to the transition's own work: the takeover itself, the vouch for what the
/// holder left, and the recovery of its session (staging files removed, the record rolled
/// forward). After a kill the sweep crashes a first command at each of these ops; the rest of
/// the command is the transition's own work, which the scenarios crash op by op.
pub(crate) fn is_takeover(boundary: &str) -> bool {
    boundary.ends_with(".lock.takeover")
        || boundary.contains(".log.vouch")
        || boundary.split('.').nth(1) == Some("recover")
}

/// The retry of every keyed send in flight in `run` (the first send of each key of sends
/// committed together).
fn retries<'s>(scenario: &'s Scenario, run: &Execution) -> Vec<&'s Step> {
    match run.in_flight.and_then(|i| scenario.steps.get(i)) {
        Some(step @ Step::Send { key: Some(_), .. }) => vec![step],
        Some(Step::SendTogether { sends, .. }) => {
            let mut keys = std::collections::BTreeSet::new();
            sends
                .iter()
                .filter(
                    |send| matches!(send, Step::Send { key: Some(key), .. } if keys.insert(*key)),
                )
                .collect()
        }
        _ => Vec::new(),
    }
}

/// The continued work on the recovered store, which holds `before`: a plain send to every
/// session, the retry of the crashed keyed send, then a drain of every session; each answer
/// advances `next`. Stops quietly at a crash (the driver takes over).
fn continue_workload<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    run: &Execution,
    before: &Model,
    next: &mut Execution,
) -> Vec<String> {
    let mut violations = Vec::new();
    // A planned crash stops the phase wherever it falls.
    if send_after_recovery(store, scenario, before, next, &mut violations).is_break()
        || retry_in_flight(store, scenario, run, before, next, &mut violations).is_break()
        || drain_after_recovery(store, scenario, before, next, &mut violations).is_break()
    {
        return violations;
    }
    check_activity_index(store, run, &mut violations);
    check_drained(store, next, &mut violations);
    violations
}

/// Another sender writes first: a plain append to each session onto whatever the crashed
/// process left (an unsynced line, a segment whose name is not yet durable, a segment about to
/// be sealed). Breaks when a planned crash stops the phase.
fn send_after_recovery<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    before: &Model,
    next: &mut Execution,
    violations: &mut Vec<String>,
) -> ControlFlow<()> {
    for id in before.sessions.keys() {
        let Some(to) = scenario.session_id(id) else { continue };
        let step = Step::Send { to, text: AFTER_RECOVERY, from: None, key: None };
        continued(store, next, &step, violations, |answer, violations| match answer {
            Err(error) => {
                violations.push(format!("a send to {id} after recovery failed: {error}"));
                false
            }
            Ok(_) => true,
        })?;
    }
    ControlFlow::Continue(())
}

/// The retry of every keyed send in flight, each answer checked against `before`. Breaks when
/// a planned crash stops the phase.
fn retry_in_flight<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    run: &Execution,
    before: &Model,
    next: &mut Execution,
    violations: &mut Vec<String>,
) -> ControlFlow<()> {
    for step in retries(scenario, run) {
        continued(store, next, step, violations, |answer, violations| {
            check_retry(store, before, step, answer, violations);
            true
        })?;
    }
    ControlFlow::Continue(())
}

/// A drain of every session, each delivery checked by the adapter. Breaks when a planned crash
/// stops the phase.
fn drain_after_recovery<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    before: &Model,
    next: &mut Execution,
    violations: &mut Vec<String>,
) -> ControlFlow<()> {
    for id in before.sessions.keys() {
        let Some(id) = scenario.session_id(id) else { continue };
        let step = Step::Drain { id };
        continued(store, next, &step, violations, |answer, violations| match answer {
            Err(error) => {
                violations.push(format!("drain of {id} after recovery failed: {error}"));
                false
            }
            Ok(Answer::Drained(Some(stop))) => {
                violations.push(format!("drain of {id} after recovery stopped: {stop}"));
                false
            }
            Ok(_) => true,
        })?;
    }
    ControlFlow::Continue(())
}

/// Performs `step` as part of the phase after recovery: in flight (`next.continuing`) while it
/// runs, what its adapter delivered and found wrong kept, its answer judged by `judge` (which
/// says whether the model takes it) and the model advanced by it, the store recorded after it.
/// Breaks when a planned crash stops the phase.
fn continued<F: Fs>(
    store: &Store<F>,
    next: &mut Execution,
    step: &Step,
    violations: &mut Vec<String>,
    judge: impl FnOnce(&Result<Answer, spex_engine::Error>, &mut Vec<String>) -> bool,
) -> ControlFlow<()> {
    next.continuing = Some(step.clone());
    let (mut delivered, mut adapter_violations) = (Vec::new(), Vec::new());
    let answer = perform(store, step, &mut delivered, &mut adapter_violations, None);
    violations.extend(adapter_violations);
    next.delivered.extend(delivered);
    if answer.as_ref().is_err_and(spex_engine::Error::is_crash) {
        return ControlFlow::Break(());
    }
    if judge(&answer, violations)
        && let Ok(answer) = &answer
        && let Some(violation) = next.advance_continued(step, answer)
    {
        violations.push(violation);
    }
    next.continuing = None;
    if !next.last_phase {
        snapshot_store(store, next);
    }
    ControlFlow::Continue(())
}
