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
use std::sync::Arc;

use faultfs::{Digest, Fs, SimFs};
use spex_engine::Store;
use spex_model::Model;

use super::check::{
    Probe, Seen, check_activity_index, check_drained, check_recovered, check_retry, judge_seen,
    probe, project_all, see,
};
use super::point::digest_of;
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
    /// The run as it stood at the crash (shared by the crashes at ops that hand back the same).
    pub(crate) run: Arc<Execution>,
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
    check_image_along(fs, scenario, run, seed, None)
}

/// [`check_image`] on `fs` (on which nothing is planned), and what it hands back when crashed
/// at each of its ops in turn, from this one run: the machine each crash leaves is kept as the
/// phase reaches its op (`SimFs::keep_crashes`), and the run at that moment is worked out from
/// where the phase stood ([`Course`]), with its digest (`point::digest_of`, worked out once
/// for the ops that hand back the same run). The crashes are in op order, the first at op 0.
pub(crate) fn check_image_crashed_everywhere(
    fs: SimFs,
    scenario: &Scenario,
    run: &Execution,
    seed: u64,
) -> (Result<Checked, Halted>, Vec<(Halted, Digest)>) {
    fs.keep_crashes();
    let mut course = Course { fs: fs.clone(), marks: Vec::new(), delivered: Vec::new() };
    let checked = check_image_along(fs.clone(), scenario, run, seed, Some(&mut course));
    let mut last: Option<(PartAt, Arc<Execution>, Digest)> = None;
    let crashes = (fs.kept_crashes().into_iter())
        .map(|machine| {
            let (_, op) = machine.halted().expect("a kept crash is halted");
            let which = course.which_at(op);
            let (run, digest) = match &last {
                Some((seen, run, digest)) if *seen == which => (Arc::clone(run), *digest),
                _ => {
                    let run = Arc::new(course.run_at(op));
                    let digest = digest_of(&run);
                    (run, digest)
                }
            };
            last = Some((which, Arc::clone(&run), digest));
            (Halted { run, fs: machine }, digest)
        })
        .collect();
    (checked, crashes)
}

/// Where a phase's run stood as it ran, so that the run its crash at any op hands back can be
/// told without crashing it there: the run each part of the phase began with (from that op
/// count on, until the next part), and the deliveries made in each part, with the op count each
/// was made at.
pub(crate) struct Course {
    fs: SimFs,
    marks: Vec<(u64, Execution)>,
    delivered: Vec<(usize, u64, String)>,
}

/// Where an op falls in a phase's course: the part it falls in, and how many of that part's
/// deliveries were made before it (see [`Course::which_at`]).
type PartAt = (Option<usize>, usize);

impl Course {
    /// From the op about to be issued on, a crash hands back `run`.
    fn mark(&mut self, run: &Execution) {
        self.marks.push((self.fs.op_count(), run.clone()));
    }

    /// A delivery of `mid`, made now.
    fn deliver(&mut self, mid: &str) {
        let part = self.marks.len().checked_sub(1).expect("a delivery is in some part");
        self.delivered.push((part, self.fs.op_count(), mid.to_owned()));
    }

    /// The part a crash at op `op` falls in (the last part begun at or before it: parts that
    /// issued no op are passed over), and how many of that part's deliveries were made before
    /// it: ops alike in both hand back the same run ([`Course::run_at`]).
    fn which_at(&self, op: u64) -> PartAt {
        let part = self.marks.iter().rposition(|(from, _)| *from <= op);
        let delivered =
            self.delivered.iter().filter(|(of, at, _)| Some(*of) == part && *at <= op).count();
        (part, delivered)
    }

    /// The run a crash at op `op` hands back: the run of the part the op falls in, and what
    /// that part delivered before the op.
    fn run_at(&self, op: u64) -> Execution {
        let part = self.marks.iter().rposition(|(from, _)| *from <= op);
        let Some((_, run)) = part.and_then(|part| self.marks.get(part)) else {
            unreachable!("the first part begins before the phase's first op")
        };
        let mut run = run.clone();
        run.delivered.extend(
            (self.delivered.iter())
                .filter(|(of, at, _)| Some(*of) == part && *at <= op)
                .map(|(_, _, mid)| mid.clone()),
        );
        run
    }
}

/// [`check_image`], its course noted in `course` (when given).
fn check_image_along(
    fs: SimFs,
    scenario: &Scenario,
    run: &Execution,
    seed: u64,
    mut course: Option<&mut Course>,
) -> Result<Checked, Halted> {
    if let Some(course) = course.as_deref_mut() {
        course.mark(&run.continued(scenario));
    }
    let store = match open(fs.clone(), scenario, seed) {
        Ok(store) => store,
        Err(error) if error.is_crash() => {
            return Err(Halted { fs, run: Arc::new(run.continued(scenario)) });
        }
        Err(error) => {
            return Ok(Checked {
                violations: vec![format!("the recovered store does not open: {error}")],
                run: run.continued(scenario),
            });
        }
    };
    let (violations, next) = check_store_along(&store, scenario, run, course);
    if fs.halted().is_some() {
        return Err(Halted { fs, run: Arc::new(next) });
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
    /// (`SimFs::visible_digest`; of it, not the times: see `point::judge_to_end`), the run,
    /// and the store handle's memory, which holds nothing
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
        let violations = judge_recovered(&self.store, scenario, run, allowed, &mut next, None);
        assert!(self.fs.halted().is_none(), "no planned crash halts a phase judged to its end");
        violations
    }

    /// The reads and the continued work of [`Recovered::judge_rest`], without judging them:
    /// [`Worked::judge`] judges them against a run. They depend on the machine (as
    /// `judge_rest` does), and of the run on what [`Worked::inputs`] names alone, so one
    /// `Worked` serves every run those agree on. The continued work runs even when what
    /// recovery left breaks a rule (the judgement then never looks at it), since whether it
    /// does depends on the run.
    pub(crate) fn work(self, scenario: &Scenario, run: &Execution) -> Worked {
        let seen = see(&self.store, scenario);
        let mut steps = Vec::new();
        let mut activity = Vec::new();
        let mut after = Err("the recovered store is unreadable".to_owned());
        if let Ok(sighted) = &seen {
            for step in continued_steps(scenario, sighted.sessions(), run) {
                let performed = perform_continued(&self.store, &step, None);
                assert!(!performed.crashed, "no planned crash halts a phase judged to its end");
                steps.push(performed);
            }
            check_activity_index(&self.store, run, &mut activity);
            after = project_all(&self.store, scenario);
        }
        assert!(self.fs.halted().is_none(), "no planned crash halts a phase judged to its end");
        Worked { seen, steps, activity, after }
    }
}

/// A last phase's reads and continued work on one recovered machine, not yet judged (see
/// [`Recovered::work`]): what the oracle read after recovery, each step of the continued work
/// as it ran, the activity index's verdict, and the store after the drains as the oracle
/// projects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Worked {
    seen: Result<Seen, String>,
    steps: Vec<Performed>,
    activity: Vec<String>,
    after: Result<Model, String>,
}

impl Worked {
    /// What the continued work reads of `run`, written into `hasher`: the keyed sends in flight
    /// (it retries them) and the watermarks (the activity index folds on from them). The rest
    /// of the run only judges what it did.
    pub(crate) fn inputs(hasher: &mut faultfs::Hasher, scenario: &Scenario, run: &Execution) {
        use std::io::Write as _;
        write!(hasher, "{:?}\n{:?}", retries(scenario, run), run.watermarks)
            .expect("hashing does not fail");
    }

    /// The verdict of [`Recovered::judge_rest`] on the machine this work ran on, against `run`
    /// (`allowed`: the states it allows after its crash), which agrees with the run the work
    /// ran for on its [`Worked::inputs`].
    pub(crate) fn judge(&self, run: &Execution, allowed: &[Model]) -> Vec<String> {
        let mut next = run.continued_last();
        let (mut violations, observed) = judge_seen(&self.seen, run, allowed);
        let Some(before) = observed.filter(|_| violations.is_empty()) else {
            return violations;
        };
        let taken: Vec<(&Step, &Answer)> = (self.steps.iter())
            .filter(|performed| takes(&performed.step, &performed.answer))
            .filter_map(|performed| Some((&performed.step, performed.answer.as_ref().ok()?)))
            .collect();
        let mut verdicts = next.advance_last(allowed, &taken).into_iter();
        for performed in &self.steps {
            let flow =
                judge_continued(performed, &before, &mut next, &mut violations, |_, _, _| {
                    verdicts.next().expect("a verdict for each step taken")
                });
            debug_assert!(flow.is_continue(), "a step that crashed is never kept");
        }
        debug_assert!(verdicts.next().is_none(), "each verdict is of a step taken");
        violations.extend(self.activity.iter().cloned());
        check_drained(&self.after, &next, &mut violations);
        violations
    }
}

/// The phase on an open store (simulated or real): recover, judge, continue, judge.
pub(crate) fn check_store<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    run: &Execution,
) -> (Vec<String>, Execution) {
    check_store_along(store, scenario, run, None)
}

/// [`check_store`], its course noted in `course` (when given).
fn check_store_along<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    run: &Execution,
    mut course: Option<&mut Course>,
) -> (Vec<String>, Execution) {
    let allowed = candidates(scenario, run);
    let mut next = run.continued_from(allowed.clone());
    if let Some(course) = course.as_deref_mut() {
        course.mark(&next);
    }
    if let Err(error) = recover_all(store, run) {
        return (vec![error], next);
    }
    let violations = judge_recovered(store, scenario, run, &allowed, &mut next, course);
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
    course: Option<&mut Course>,
) -> Vec<String> {
    let (mut violations, observed) = check_recovered(store, scenario, run, allowed);
    if let Some(before) = observed.filter(|_| violations.is_empty()) {
        violations.extend(continue_workload(store, scenario, run, &before, next, course));
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
        Err(error) if error.is_crash() => return Err(Halted { fs, run: Arc::new(next) }),
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
        return Err(Halted { fs, run: Arc::new(next) });
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
    mut course: Option<&mut Course>,
) -> Vec<String> {
    let mut violations = Vec::new();
    for step in continued_steps(scenario, before.sessions.keys(), run) {
        let performed = match course.as_deref_mut() {
            Some(course) => {
                course.mark(&Execution { continuing: Some(step.clone()), ..next.clone() });
                perform_continued(store, &step, Some(&mut |mid: &str| course.deliver(mid)))
            }
            None => perform_continued(store, &step, None),
        };
        // A planned crash stops the phase wherever it falls.
        let advance = |next: &mut Execution, step: &Step, answer: &Answer| {
            next.advance_continued(step, answer)
        };
        if judge_continued(&performed, before, next, &mut violations, advance).is_break() {
            return violations;
        }
        if !next.last_phase {
            snapshot_store(store, next);
        }
    }
    if let Some(course) = course {
        course.mark(next);
    }
    check_activity_index(store, run, &mut violations);
    check_drained(&project_all(store, scenario), next, &mut violations);
    violations
}

/// The steps of the continued work on a store holding `sessions` after a crash of `run`:
/// another sender writes first, a plain append to each session onto whatever the crashed
/// process left (an unsynced line, a segment whose name is not yet durable, a segment about to
/// be sealed); then the retry of every keyed send in flight; then a drain of every session.
fn continued_steps<'a>(
    scenario: &Scenario,
    sessions: impl Iterator<Item = &'a String>,
    run: &Execution,
) -> Vec<Step> {
    let ids: Vec<&'static str> = sessions.filter_map(|id| scenario.session_id(id)).collect();
    let sends =
        ids.iter().map(|&to| Step::Send { to, text: AFTER_RECOVERY, from: None, key: None });
    let drains = ids.iter().map(|&id| Step::Drain { id });
    sends.chain(retries(scenario, run).into_iter().cloned()).chain(drains).collect()
}

/// One step of the continued work as it ran: the engine's answer (an error as it printed it,
/// and whether it was a crash), what the adapter was handed and found wrong, and for a keyed
/// retry what it left (`check::probe`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Performed {
    step: Step,
    answer: Result<Answer, String>,
    crashed: bool,
    delivered: Vec<String>,
    adapter: Vec<String>,
    probe: Option<Probe>,
}

/// Performs `step` of the continued work (see [`Performed`]), each delivery told to
/// `on_delivery` the moment it is made.
fn perform_continued<F: Fs>(
    store: &Store<F>,
    step: &Step,
    on_delivery: Option<&mut dyn FnMut(&str)>,
) -> Performed {
    let (mut delivered, mut adapter) = (Vec::new(), Vec::new());
    // The hook is reborrowed for the call (it outlives what `perform` ties its borrows to).
    let hook = on_delivery.map(|hook| &mut *hook as &mut dyn FnMut(&str));
    let answer = perform(store, step, &mut delivered, &mut adapter, hook);
    let crashed = answer.as_ref().is_err_and(spex_engine::Error::is_crash);
    let probe = if crashed { None } else { probe(store, step) };
    let answer = answer.map_err(|error| error.to_string());
    Performed { step: step.clone(), answer, crashed, delivered, adapter, probe }
}

/// Judges a step of the continued work on the store that held `before` when it began: in
/// flight (`next.continuing`) while it runs, what its adapter delivered and found wrong kept,
/// its answer judged (a plain send and a drain must succeed, a retry is checked by rule 2)
/// and, if the model takes it, the model advanced by it. Breaks when a planned crash stopped
/// the step (the phase ends there).
fn judge_continued(
    performed: &Performed,
    before: &Model,
    next: &mut Execution,
    violations: &mut Vec<String>,
    advance: impl FnOnce(&mut Execution, &Step, &Answer) -> Option<String>,
) -> ControlFlow<()> {
    let Performed { step, answer, crashed, delivered, adapter, probe } = performed;
    next.continuing = Some(step.clone());
    violations.extend(adapter.iter().cloned());
    next.delivered.extend(delivered.iter().cloned());
    if *crashed {
        return ControlFlow::Break(());
    }
    match (step, answer) {
        (Step::Send { key: Some(_), .. }, _) => {
            check_retry(before, step, answer, probe.as_ref(), violations);
        }
        (Step::Send { to, .. }, Err(error)) => {
            violations.push(format!("a send to {to} after recovery failed: {error}"));
        }
        (Step::Drain { id }, Err(error)) => {
            violations.push(format!("drain of {id} after recovery failed: {error}"));
        }
        (Step::Drain { id }, Ok(Answer::Drained(Some(stop)))) => {
            violations.push(format!("drain of {id} after recovery stopped: {stop}"));
        }
        _ => {}
    }
    if takes(step, answer)
        && let Ok(answer) = answer
        && let Some(violation) = advance(next, step, answer)
    {
        violations.push(violation);
    }
    next.continuing = None;
    ControlFlow::Continue(())
}

/// Whether the model takes a continuation step's answer: a retry's always (rule 2 judges it),
/// a plain send's or a drain's only when it succeeded.
fn takes(step: &Step, answer: &Result<Answer, String>) -> bool {
    match (step, answer) {
        (Step::Send { key: Some(_), .. }, _) => true,
        (Step::Send { .. } | Step::Drain { .. }, Err(_))
        | (Step::Drain { .. }, Ok(Answer::Drained(Some(_)))) => false,
        (Step::Send { .. } | Step::Drain { .. }, Ok(_)) => true,
        _ => unreachable!("the continued work sends, retries and drains"),
    }
}

#[cfg(test)]
mod tests {
    use faultfs::{FaultPlan, Media};

    use super::*;
    use crate::sweep::{run, scenario};

    /// The phase after a kill, crashed at each of its ops as it runs once, hands back at each
    /// op what the phase run again and crashed there does: the same halted machine and the same
    /// run (deliveries of the drain in flight included).
    #[test]
    fn a_phase_crashed_at_each_op_as_it_runs_is_the_phase_crashed_there() {
        let seed = 5;
        let scenario = scenario::named("drain").expect("a scenario");
        let mut delivered_in_flight = 0;
        for k in [9, 17, 26] {
            let fs = run::machine(FaultPlan::crash_at(seed, k), Media::ZeroTails);
            let crashed = run::execute(&fs, &scenario, seed);
            let whole = fs.restart(FaultPlan::none(seed));
            let (checked, crashes) =
                check_image_crashed_everywhere(whole.clone(), &scenario, &crashed, seed);
            assert!(checked.is_ok(), "nothing is planned");
            assert_eq!(crashes.len() as u64, whole.op_count());
            for (j, (kept, digest)) in (0..).zip(&crashes) {
                let again = check_image(
                    fs.restart(FaultPlan::crash_at(seed, j)),
                    &scenario,
                    &crashed,
                    seed,
                );
                let Err(again) = again else { panic!("k {k}: op {j} is in the phase") };
                let seen = |halted: &Halted| {
                    let fs = &halted.fs;
                    (
                        fs.halted(),
                        fs.trace().hash_hex(),
                        fs.visible_digest(),
                        fs.power_loss_digest(),
                    )
                };
                assert_eq!(seen(kept), seen(&again), "k {k}: the machine at op {j}");
                assert_eq!(*digest, digest_of(&kept.run), "k {k}: the digest at op {j}");
                assert_eq!(
                    digest_of(&kept.run),
                    digest_of(&again.run),
                    "k {k}: the run at op {j}: {:?} vs {:?}",
                    kept.run,
                    again.run
                );
                if kept.run.continuing.is_some()
                    && kept.run.delivered.len() > crashed.delivered.len()
                {
                    delivered_in_flight += 1;
                }
            }
        }
        assert!(delivered_in_flight > 0, "some crash falls after a delivery of its step");
    }
}
