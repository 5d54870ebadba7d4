//! Running a scenario against the engine on `SimFs`, in step with the model.
//!
//! The run records what was acknowledged (the model state after every acknowledged step, the
//! acknowledged sends, the segments as they stood, the adapter's deliveries) and, when the
//! simulated process crashes, which step was in flight. The checker judges recovered images
//! against exactly that.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use faultfs::{CrashMode, FaultPlan, Media, SimFs};
use spex_engine::env::{ManualClock, SeededIds};
use spex_engine::{
    Adapter, Config, Error, Key, Lifecycle, Message, SendRequest, SessionId, Store, Triple,
};
use spex_model::{self as model, Expect, Mid, Model, Op};

use super::decode;
use super::scenario::{OPERATION, Scenario, Step};

/// The root of the simulated store.
pub const ROOT: &str = "/store";

/// A new simulated machine running `plan` on `media`, told the format of the engine's checked
/// files (see [`spex_engine::INDEX_BLOCKS`]).
pub fn machine(plan: FaultPlan, media: Media) -> SimFs {
    let fs = SimFs::new(plan);
    fs.set_media(media);
    fs.set_checked_blocks(Some(spex_engine::INDEX_BLOCKS));
    fs
}

/// The store configuration a scenario runs with.
pub(crate) fn config(scenario: &Scenario) -> Config {
    Config {
        segment_bytes_max: scenario.segment_bytes_max,
        lock_wait_ms: 5_000,
        drain_attempts_max: 1,
        drain_retry_delay_ms: 0,
    }
}

/// Opens the store of a scenario on `fs`.
/// The seed of the id source of process `boot` of a run seeded with `seed`.
pub(crate) fn ids_seed(seed: u64, boot: u64) -> u64 {
    seed.wrapping_add(boot.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Each boot of the machine is a new process with ids of its own: a process after a crash must
/// never draw the ids the crashed one drew (real v4 ids do not collide).
pub fn open(fs: SimFs, scenario: &Scenario, seed: u64) -> Result<Store<SimFs>, Error> {
    let ids = ids_seed(seed, fs.boot());
    // Lock files need no durability (after a power loss their holder is dead): they stay out
    // of the power-loss images, which keeps the images to what the oracle can judge.
    let root = std::path::Path::new(ROOT);
    fs.set_ephemeral(&[&root.join(".session-locks"), &root.join(".delivery-locks")]);
    Store::open(
        fs,
        ROOT,
        Arc::new(ManualClock::new(1_784_160_000_000)),
        Arc::new(SeededIds::new(ids)),
        config(scenario),
    )
}

pub(crate) fn sid(id: &str) -> SessionId {
    SessionId::new(id).expect("scenario ids are valid")
}

/// The adapter of a sweep: accepts everything, and checks every call against the log at the
/// moment of the call (oracle rule 3: no call for an absent, different or settled receipt).
pub(crate) struct CheckingAdapter<'a, F: faultfs::Fs> {
    pub(crate) store: &'a Store<F>,
    pub(crate) session: SessionId,
    pub(crate) delivered: &'a mut Vec<String>,
    pub(crate) violations: &'a mut Vec<String>,
    /// Where a real-process run journals each delivery the moment it happens.
    pub(crate) journal: Option<&'a mut dyn FnMut(&str)>,
    /// Refuse every message (after checking it).
    pub(crate) refuse: bool,
}

impl<F: faultfs::Fs> Adapter for CheckingAdapter<'_, F> {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        let fs = self.store.fs();
        match decode::lines(fs, self.store.layout().root(), self.session.as_str()) {
            Err(error) => self
                .violations
                .push(format!("adapter call for {} on an unreadable log: {error}", message.mid)),
            Ok(lines) => {
                let sent = lines.iter().find_map(|line| match line {
                    decode::Line::Sent { mid, receipt, .. } if mid == message.mid => {
                        Some(receipt.clone())
                    }
                    _ => None,
                });
                let settled = lines.iter().any(
                    |line| matches!(line, decode::Line::Settled { mid, .. } if mid == message.mid),
                );
                match sent {
                    None => self.violations.push(format!(
                        "rule 3 (fail-closed drain): adapter called for {} which has no sent line",
                        message.mid
                    )),
                    Some(Some(receipt)) if receipt.text != message.text => self.violations.push(format!(
                        "rule 3 (fail-closed drain): adapter called for {} with bytes that differ from its receipt",
                        message.mid
                    )),
                    Some(_) if settled => self.violations.push(format!(
                        "rule 3 (fail-closed drain): adapter called for {} after its settlement",
                        message.mid
                    )),
                    Some(_) => {}
                }
            }
        }
        if self.refuse {
            return Err("this adapter refuses everything".to_owned());
        }
        self.delivered.push(message.mid.to_owned());
        if let Some(journal) = self.journal.as_mut() {
            journal(message.mid);
        }
        Ok(())
    }
}

/// A segment as it stood after an acknowledged step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// Its length.
    pub len: u64,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// Whether it was its session's newest segment (only the newest may grow).
    pub newest: bool,
}

/// What a run did up to its end or its crash.
#[derive(Clone, Debug, Default)]
pub struct Execution {
    /// The model state after the last acknowledged step.
    pub model: Model,
    /// The step in flight when the process crashed, and its model op(s).
    pub in_flight: Option<usize>,
    /// Acknowledged sends: (target, mid, sender).
    pub acked: Vec<(String, String, Option<String>)>,
    /// Every mid the adapter was handed.
    pub delivered: Vec<String>,
    /// Violations seen while running (adapter checks, unexpected answers).
    pub violations: Vec<String>,
    /// Segments after the last acknowledged step, by path relative to the store root.
    pub segments: BTreeMap<String, SegmentSnapshot>,
    /// The session whose close is in flight, if any.
    pub closing_in_flight: Option<String>,
    /// The I/O error that ended the run, if one did (injected faults).
    pub failed: Option<String>,
    /// Mutating ops issued by each step: [start, end) of the filesystem's op count.
    pub step_ops: Vec<(u64, u64)>,
    /// Boundaries the engine refused (a conflict, a revoked sender, ...): nothing was acknowledged.
    pub refused: Vec<usize>,
    /// Sessions created so far (acknowledged or in flight) with their creation triple.
    pub created: BTreeMap<String, model::Triple>,
    /// (session, key) pairs used by keyed sends so far.
    pub keys: BTreeSet<(String, String)>,
    /// What a lock-free reader (the session index) had folded of each session's log at the
    /// moment of the crash: its watermark and the events before it. It may include lines that
    /// were complete but not yet synced.
    pub watermarks: BTreeMap<String, (spex_index::Watermark, Vec<spex_engine::Event>)>,
    /// After a crash, the work that went on (recovery, the keyed retry, the drains) is judged
    /// against a *set* of states: which of the crashed step's outcomes survives is only settled
    /// by what the next process makes durable. `None`: exactly `model` (no crash yet).
    pub base: Option<Vec<Model>>,
    /// The step of the continued work in flight when it crashed (its scenario index is not
    /// meaningful: a retry or a drain of the continuation).
    pub continuing: Option<Step>,
    /// Whether this is the run of a sequence's last phase, which nothing is judged against
    /// afterwards: its steps leave no snapshot of the segments (only a later crash's append-only
    /// check reads them).
    pub last_phase: bool,
}

impl Execution {
    /// The run that goes on after a crash of `self`: everything acknowledged stays owed to the
    /// checker, and the allowed states are every state the crash allowed.
    pub(crate) fn continued(&self, scenario: &Scenario) -> Execution {
        self.continued_from(candidates(scenario, self))
    }

    /// [`Execution::continued`], given the states this run allows after its crash
    /// (`candidates` of it).
    pub(crate) fn continued_from(&self, allowed: Vec<Model>) -> Execution {
        debug_assert!(!allowed.is_empty(), "a run allows some state after its crash");
        self.continued_with(Some(allowed))
    }

    /// [`Execution::continued`] into a last phase, whose states are stepped apart
    /// ([`Execution::advance_last`]).
    pub(crate) fn continued_last(&self) -> Execution {
        Execution { last_phase: true, ..self.continued_with(None) }
    }

    fn continued_with(&self, base: Option<Vec<Model>>) -> Execution {
        Execution {
            model: self.model.clone(),
            in_flight: None,
            acked: self.acked.clone(),
            delivered: self.delivered.clone(),
            violations: Vec::new(),
            segments: self.segments.clone(),
            closing_in_flight: self.closing_in_flight.clone(),
            failed: None,
            step_ops: Vec::new(),
            refused: Vec::new(),
            created: self.created.clone(),
            keys: self.keys.clone(),
            watermarks: BTreeMap::new(),
            base,
            continuing: None,
            last_phase: false,
        }
    }

    /// The part of this run that the last phase after its crash is judged against, beside the
    /// states it allows (`candidates`, which also read `base` and `continuing`): what it
    /// acknowledged and delivered, its sessions, keys and segments, what a reader had folded,
    /// its model and the step in flight (whose keyed sends are retried). Its own violations,
    /// step ranges, refusals and failure are left out: the verdict of the crash carries them
    /// beside the last phase's, which never reads them. Runs of neighbouring crash points
    /// differ mostly there, so their last phases on a like machine are one judgement.
    /// Every field is named here, so a field added to a run is left out only on purpose.
    pub(crate) fn judged_after_crash(&self) -> Execution {
        let Execution {
            model,
            in_flight,
            acked,
            delivered,
            violations: _,
            segments,
            closing_in_flight,
            failed: _,
            step_ops: _,
            refused: _,
            created,
            keys,
            watermarks,
            base: _,
            continuing: _,
            last_phase: _,
        } = self;
        Execution {
            model: model.clone(),
            in_flight: *in_flight,
            acked: acked.clone(),
            delivered: delivered.clone(),
            segments: segments.clone(),
            closing_in_flight: closing_in_flight.clone(),
            created: created.clone(),
            keys: keys.clone(),
            watermarks: watermarks.clone(),
            ..Execution::default()
        }
    }

    /// Advances every allowed state by an acknowledged continuation step; the states the
    /// answer rules out are dropped. Returns a violation if none is left.
    pub(crate) fn advance_continued(&mut self, step: &Step, answer: &Answer) -> Option<String> {
        let base = self.base.take().unwrap_or_else(|| vec![self.model.clone()]);
        let mut next = Vec::new();
        let mut last_error = None;
        for model in base {
            let mut one = Execution { model, ..Execution::default() };
            advance(&mut one, step, answer);
            if one.violations.is_empty() {
                next.push(one.model);
                self.note_acked(one.acked.pop());
            } else {
                last_error = one.violations.pop();
            }
        }
        next.dedup();
        let verdict = next.is_empty().then(|| no_state_expects(step, answer, last_error));
        self.base = Some(next);
        verdict
    }

    /// [`Execution::advance_continued`] over the acknowledged steps of a last phase (`steps`,
    /// each with its answer, in order) from the states `allowed`: the verdict of each step and
    /// the same acknowledgements, without the states left (nothing follows a last phase to read
    /// them). Each state is followed through the steps until it is ruled out rather than every
    /// state through each step, so the first state that survives every step ends the work: it
    /// is left after each step, and what a step acknowledges depends on the step and its
    /// answer alone. A step none survives reports what the last state ruled out by it (in
    /// the states' order) was told, as stepping them all would.
    pub(crate) fn advance_last(
        &mut self,
        allowed: &[Model],
        steps: &[(&Step, &Answer)],
    ) -> Vec<Option<String>> {
        debug_assert!(self.last_phase, "only a last phase leaves its states unread");
        // The step each state is ruled out by (`steps.len()` if none) and what it was told, and
        // what each step acknowledged, by a state that survived it.
        let mut ruled_out: Vec<(usize, Option<String>)> = Vec::new();
        let mut acked: Vec<Option<Acked>> = vec![None; steps.len()];
        for model in allowed {
            let mut one = Execution { model: model.clone(), ..Execution::default() };
            let mut fate = (steps.len(), None);
            for (k, (step, answer)) in steps.iter().enumerate() {
                advance(&mut one, step, answer);
                if !one.violations.is_empty() {
                    fate = (k, one.violations.pop());
                    break;
                }
                if let Some(slot) = acked.get_mut(k) {
                    *slot = one.acked.pop();
                }
            }
            let survived = fate.0 == steps.len();
            ruled_out.push(fate);
            if survived {
                break;
            }
        }
        let verdicts = (steps.iter().enumerate())
            .map(|(k, (step, answer))| {
                let left = ruled_out.iter().any(|(at, _)| *at > k);
                let last_error = ruled_out.iter().rev().find(|(at, _)| *at == k);
                (!left).then(|| {
                    no_state_expects(step, answer, last_error.and_then(|(_, e)| e.clone()))
                })
            })
            .collect();
        for entry in acked {
            self.note_acked(entry);
        }
        self.base = None;
        verdicts
    }

    /// Keeps what a continuation step acknowledged (once).
    fn note_acked(&mut self, acked: Option<Acked>) {
        if let Some(acked) = acked
            && !self.acked.contains(&acked)
        {
            self.acked.push(acked);
        }
    }
}

/// An acknowledged send: (to, mid, from).
pub(crate) type Acked = (String, String, Option<String>);

/// The violation of a continuation step (`step`, answered `answer`) that no allowed state
/// expects; `last_error` is what the last state ruled out by it was told.
fn no_state_expects(step: &Step, answer: &Answer, last_error: Option<String>) -> String {
    format!(
        "after recovery, {} answered {answer:?}, which no allowed state expects: {}",
        step.transition(),
        last_error.unwrap_or_default()
    )
}

/// What a reader folding every session from scratch sees at the moment of the crash: the
/// process-kill image holds exactly what the kernel had accepted, synced or not.
fn reader_view(
    fs: &SimFs,
    scenario: &Scenario,
    seed: u64,
) -> BTreeMap<String, (spex_index::Watermark, Vec<spex_engine::Event>)> {
    let mut view = BTreeMap::new();
    let Some(image) = fs.crash(faultfs::CrashMode::ProcessKill).images.into_iter().next() else {
        return view;
    };
    let seen = SimFs::from_image(&image, faultfs::FaultPlan::none(seed));
    let Ok(store) = open(seen.clone(), scenario, seed) else { return view };
    let Ok(entries) = faultfs::Fs::read_dir(&seen, &store.layout().sessions_dir()) else {
        return view;
    };
    for entry in entries {
        let Ok(id) = spex_engine::SessionId::new(&entry.name) else { continue };
        if let Ok(folded) = spex_index::fold(&store, &id, None) {
            view.insert(entry.name.clone(), (folded.watermark, folded.events));
        }
    }
    view
}

/// Where the harness keeps a session's worktree (inside the store root, so a real-process run
/// and a simulated one both have it).
pub(crate) fn worktree<F: faultfs::Fs>(store: &Store<F>, id: &str) -> std::path::PathBuf {
    store.layout().root().join("worktrees").join(id)
}

fn ensure_dir<F: faultfs::Fs>(store: &Store<F>, dir: &std::path::Path) -> Result<(), Error> {
    let boundary = faultfs::Boundary::new("harness.worktree.create");
    for path in [dir.parent().unwrap_or(dir), dir] {
        match store.fs().create_dir(path, boundary) {
            Err(error) if error.io_kind() != Some(std::io::ErrorKind::AlreadyExists) => {
                return Err(error.into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// The model op of a step, given the engine's answer where there is one.
pub(crate) fn model_op(step: &Step, mid: Mid) -> Op {
    match step {
        Step::Create { id, .. } => {
            Op::Create { id: (*id).to_owned(), triple: model::Triple::new("queued", None, None) }
        }
        Step::Set { id, status, proposal, note } => Op::Lifecycle {
            id: (*id).to_owned(),
            triple: model::Triple::new(
                status.name(),
                proposal.map(spex_engine::Proposal::name),
                *note,
            ),
        },
        Step::BeginLaunch { id, status, note } => Op::BeginLaunch {
            id: (*id).to_owned(),
            triple: model::Triple::new(status.name(), None, *note),
        },
        Step::FailLaunch { id } => Op::FailLaunch { id: (*id).to_owned() },
        Step::Send { to, text, from, key } => Op::Send {
            to: (*to).to_owned(),
            text: (*text).to_owned(),
            from: from.map(str::to_owned),
            key: key.map(|key| (OPERATION.to_owned(), key.to_owned())),
            mid,
        },
        Step::SendTogether { .. } => {
            unreachable!("sends committed together are one op per send: see `together_ops`")
        }
        Step::Drain { id } | Step::DrainRefusing { id } => Op::DrainHead { id: (*id).to_owned() },
        Step::Archive { id } => Op::Archive { id: (*id).to_owned() },
        Step::Close { id } => Op::Close { id: (*id).to_owned() },
        Step::Retire { id } => Op::Retire { id: (*id).to_owned() },
    }
}

/// The model ops of sends committed together, none of them answered.
pub(crate) fn together_ops(sends: &[Step]) -> Vec<Op> {
    sends.iter().map(|send| model_op(send, Mid::Any)).collect()
}

/// The engine's answer to one step: what the model needs to advance.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Answer {
    /// The step succeeded (create, lifecycle write, archive, close).
    Done,
    /// A send was accepted.
    Accepted {
        /// The mid.
        mid: String,
        /// Whether it was a replay.
        replayed: bool,
    },
    /// The step was refused with this error (as the engine printed it).
    Refused(String),
    /// A drain ran to its end, or stopped early for this reason.
    Drained(Option<String>),
    /// Sends committed together: one answer per send.
    Together(Vec<Answer>),
}

/// Marks a step as started: sessions and keys it may create become known to the checker.
pub(crate) fn begin(run: &mut Execution, step: &Step) {
    match step {
        Step::Create { id, .. } => {
            run.created
                .entry((*id).to_owned())
                .or_insert_with(|| model::Triple::new("queued", None, None));
        }
        Step::Send { to, key: Some(key), .. } => {
            run.keys.insert(((*to).to_owned(), (*key).to_owned()));
        }
        Step::SendTogether { sends, .. } => sends.iter().for_each(|send| begin(run, send)),
        _ => {}
    }
}

/// Marks a step as interrupted by a crash.
pub(crate) fn interrupt(run: &mut Execution, index: usize, step: &Step) {
    run.in_flight = Some(index);
    if let Step::Close { id } = step {
        run.closing_in_flight = Some((*id).to_owned());
    }
}

/// Runs `scenario` on `fs` until it ends or the simulated process crashes.
pub fn execute(fs: &SimFs, scenario: &Scenario, seed: u64) -> Execution {
    execute_with(fs, scenario, seed).0
}

/// As [`execute`], also returning the open store handle (if it opened) so an injected-fault
/// sweep can check that the handle was poisoned. An I/O error ends the run like a crash: the
/// failed step is in flight (never acknowledged), and `failed` records the error.
pub fn execute_with(
    fs: &SimFs,
    scenario: &Scenario,
    seed: u64,
) -> (Execution, Option<Store<SimFs>>) {
    let mut run = Execution::default();
    let store = match open(fs.clone(), scenario, seed) {
        Ok(store) => store,
        Err(error) if error.is_crash() => return (run, None),
        Err(error @ Error::Io(_)) => {
            run.failed = Some(error.to_string());
            return (run, None);
        }
        Err(error) => {
            run.violations.push(format!("the store does not open: {error}"));
            return (run, None);
        }
    };
    for (index, step) in scenario.steps.iter().enumerate() {
        begin(&mut run, step);
        let mut delivered = Vec::new();
        let mut violations = Vec::new();
        let ops_before = fs.op_count();
        let answer = perform(&store, step, &mut delivered, &mut violations, None);
        run.delivered.extend(delivered);
        run.violations.extend(violations);
        run.step_ops.push((ops_before, fs.op_count()));
        match answer {
            Ok(answer) => {
                if matches!(answer, Answer::Refused(_)) {
                    run.refused.push(index);
                }
                advance(&mut run, step, &answer);
                snapshot_segments(fs, &mut run);
            }
            Err(error) if error.is_crash() => {
                interrupt(&mut run, index, step);
                run.watermarks = reader_view(fs, scenario, seed);
                return (run, Some(store));
            }
            Err(error @ (Error::Io(_) | Error::Poisoned { .. })) => {
                interrupt(&mut run, index, step);
                run.watermarks = reader_view(fs, scenario, seed);
                run.failed = Some(error.to_string());
                return (run, Some(store));
            }
            Err(error) => {
                run.violations
                    .push(format!("step {index} ({}) failed: {error}", step.transition()));
                return (run, Some(store));
            }
        }
    }
    (run, Some(store))
}

/// Runs one step against the engine. Refusals are answers; I/O failures and crashes are errors.
pub(crate) fn perform<'a, F: faultfs::Fs>(
    store: &'a Store<F>,
    step: &Step,
    delivered: &'a mut Vec<String>,
    violations: &'a mut Vec<String>,
    journal: Option<&'a mut dyn FnMut(&str)>,
) -> Result<Answer, Error> {
    match step {
        Step::Create { id, adapter } => create(store, id, *adapter),
        Step::Retire { id } => retire(store, id),
        Step::Set { id, status, proposal, note } => {
            let triple = Triple::new(*status, *proposal, note.map(str::to_owned));
            store.append(&sid(id), &Lifecycle::Set(triple)).map(|_| Answer::Done).or_else(refused)
        }
        Step::BeginLaunch { id, status, note } => {
            let triple = Triple::new(*status, None, note.map(str::to_owned));
            store
                .append(&sid(id), &Lifecycle::BeginLaunch(triple))
                .map(|_| Answer::Done)
                .or_else(launch_refused)
        }
        Step::FailLaunch { id } => store
            .append(&sid(id), &Lifecycle::FailLaunch)
            .map(|_| Answer::Done)
            .or_else(launch_refused),
        Step::Send { to, .. } => store
            .send(&sid(to), &request_of(step))
            .map(|accepted| Answer::Accepted { mid: accepted.mid, replayed: accepted.replayed })
            .or_else(refused),
        Step::SendTogether { to, sends } => send_together(store, to, sends),
        Step::Drain { id } | Step::DrainRefusing { id } => {
            let refuse = matches!(step, Step::DrainRefusing { .. });
            let mut adapter =
                CheckingAdapter { store, session: sid(id), delivered, violations, journal, refuse };
            match store.drain(&sid(id), &mut adapter) {
                Ok(report) => Ok(Answer::Drained(report.stopped.map(|stop| stop.to_string()))),
                Err(error @ Error::NoSuchSession { .. }) => Ok(Answer::Refused(error.to_string())),
                Err(error) => Err(error),
            }
        }
        Step::Archive { id } => store.archive(&sid(id)).map(|()| Answer::Done).or_else(refused),
        Step::Close { id } => store.close(&sid(id)).map(|()| Answer::Done).or_else(refused),
    }
}

/// A refusal the model expects (the step's answer), or a failure of the step.
fn refused(error: Error) -> Result<Answer, Error> {
    match error {
        Error::SessionExists { .. }
        | Error::KeyConflict { .. }
        | Error::Revoked { .. }
        | Error::NoSuchSession { .. }
        | Error::Retired { .. } => Ok(Answer::Refused(error.to_string())),
        error => Err(error),
    }
}

/// [`refused`], and a launch write that does not apply (one already pending, none to fail).
fn launch_refused(error: Error) -> Result<Answer, Error> {
    match error {
        Error::Refused { .. } => Ok(Answer::Refused(error.to_string())),
        error => refused(error),
    }
}

/// A `Create` step: the session in `queued`, its worktree made first (unless the session
/// exists: a second create is refused and must not bring a retired session's worktree back).
fn create<F: faultfs::Fs>(
    store: &Store<F>,
    id: &str,
    adapter: Option<&str>,
) -> Result<Answer, Error> {
    let worktree = worktree(store, id);
    if !store.fs().exists(&store.layout().record(&sid(id)))? {
        ensure_dir(store, &worktree)?;
    }
    let triple = Triple::new(spex_engine::Status::Queued, None, None);
    let worktree = worktree.to_string_lossy().into_owned();
    store
        .create_session(&sid(id), &triple, adapter, Some(&worktree))
        .map(|_| Answer::Done)
        .or_else(refused)
}

/// A `Retire` step: the session's worktree removed (refused without a session).
fn retire<F: faultfs::Fs>(store: &Store<F>, id: &str) -> Result<Answer, Error> {
    if !store.fs().exists(&store.layout().record(&sid(id)))? {
        return Ok(Answer::Refused(format!("no such session {id}")));
    }
    match store
        .fs()
        .remove_dir(&worktree(store, id), faultfs::Boundary::new("harness.worktree.remove"))
    {
        Err(error) if error.io_kind() != Some(std::io::ErrorKind::NotFound) => Err(error.into()),
        _ => Ok(Answer::Done),
    }
}

/// A `SendTogether` step: one answer per send, or a refusal of all of them (no such session).
fn send_together<F: faultfs::Fs>(
    store: &Store<F>,
    to: &str,
    sends: &[Step],
) -> Result<Answer, Error> {
    let requests: Vec<SendRequest> = sends.iter().map(request_of).collect();
    match store.send_together(&sid(to), &requests) {
        Err(error) => refused(error),
        Ok(answers) => answers
            .into_iter()
            .map(|answer| {
                answer
                    .map(|accepted| Answer::Accepted {
                        mid: accepted.mid,
                        replayed: accepted.replayed,
                    })
                    .or_else(refused)
            })
            .collect::<Result<Vec<Answer>, Error>>()
            .map(Answer::Together),
    }
}

/// The engine request of a `Send` step.
fn request_of(step: &Step) -> SendRequest {
    let Step::Send { text, from, key, .. } = step else {
        unreachable!("sends committed together hold `Send` steps only")
    };
    SendRequest {
        text: (*text).to_owned(),
        from: from.map(sid),
        key: key.map(|key| Key { operation: OPERATION.to_owned(), key: key.to_owned() }),
        ..SendRequest::default()
    }
}

/// Advances the model by an acknowledged step, checking the answer against what the model
/// expected.
pub(crate) fn advance(run: &mut Execution, step: &Step, answer: &Answer) {
    if let Step::SendTogether { sends, .. } = step {
        match answer {
            Answer::Together(answers) if answers.len() == sends.len() => {
                for (send, answer) in sends.iter().zip(answers) {
                    advance(run, send, answer);
                }
            }
            Answer::Refused(_) => sends.iter().for_each(|send| advance(run, send, answer)),
            answer => run.violations.push(format!("send-together answered {answer:?}")),
        }
        return;
    }
    let expect = run.model.expect(&model_op(step, Mid::Any));
    match (step, answer, &expect) {
        (Step::Send { to, from, .. }, Answer::Accepted { mid, replayed: false }, Expect::Ok) => {
            run.model.apply_mut(&model_op(step, Mid::Known(mid.clone())));
            run.acked.push(((*to).to_owned(), mid.clone(), from.map(str::to_owned)));
        }
        (
            Step::Send { to, from, .. },
            Answer::Accepted { mid, replayed: true },
            Expect::Replay(original),
        ) if *original == Mid::Known(mid.clone()) || *original == Mid::Any => {
            run.model.apply_mut(&model_op(step, Mid::Known(mid.clone())));
            run.acked.push(((*to).to_owned(), mid.clone(), from.map(str::to_owned)));
        }
        (Step::Drain { id }, Answer::Drained(stopped), Expect::Ok) => {
            if let Some(stop) = stopped {
                run.violations.push(format!("drain of {id} stopped: {stop}"));
            }
            let owed = run.model.sessions.get(*id).map_or(0, |session| session.owed.len());
            for _ in 0..owed {
                run.model.apply_mut(&model_op(step, Mid::Any));
            }
        }
        (Step::DrainRefusing { id }, Answer::Drained(stopped), Expect::Ok) => {
            advance_refused_drain(run, step, id, stopped.as_deref());
        }
        (
            Step::Create { .. }
            | Step::Set { .. }
            | Step::BeginLaunch { .. }
            | Step::FailLaunch { .. }
            | Step::Archive { .. }
            | Step::Close { .. }
            | Step::Retire { .. },
            Answer::Done,
            Expect::Ok,
        ) => {
            run.model.apply_mut(&model_op(step, Mid::Any));
        }
        (
            _,
            Answer::Refused(_),
            Expect::Exists
            | Expect::KeyConflict
            | Expect::Revoked
            | Expect::NoSuchSession
            | Expect::Retired
            | Expect::LaunchState,
        ) => {}
        (step, answer, expect) => run.violations.push(format!(
            "{} answered {answer:?} where the model expected {expect:?}",
            step.transition()
        )),
    }
}

/// Advances the model by a drain of `id` whose adapter refused everything: nothing is
/// delivered, the drain drops heads from closed senders, then stops at the first message the
/// adapter refuses; everything else stays owed.
fn advance_refused_drain(run: &mut Execution, step: &Step, id: &str, stopped: Option<&str>) {
    let session = run.model.sessions.get(id);
    let owed = session.map_or(0, |session| session.owed.len());
    let revoked_heads = session.map_or(0, |session| {
        session
            .owed
            .iter()
            .take_while(|owed| {
                owed.from.as_ref().is_some_and(|from| run.model.closed.contains(from))
            })
            .count()
    });
    for _ in 0..revoked_heads {
        run.model.apply_mut(&model_op(step, Mid::Any));
    }
    if stopped.is_some() != (owed > revoked_heads) {
        run.violations.push(format!("refused drain of {id}: stopped {stopped:?} with {owed} owed"));
    }
}

/// Records every segment of `store` as it stands now (after an acknowledged step).
pub(crate) fn snapshot_store<F: faultfs::Fs>(store: &Store<F>, run: &mut Execution) {
    run.segments = snapshot_of(super::check::timeline_files(store.fs(), store.layout()));
}

/// Records every segment as it stands after an acknowledged step.
fn snapshot_segments(fs: &SimFs, run: &mut Execution) {
    let image = fs.crash(CrashMode::ProcessKill).images.remove(0);
    let files: Vec<(String, Vec<u8>)> = image
        .nodes()
        .keys()
        .filter_map(|path| {
            let relative = path.strip_prefix(&format!("{ROOT}/"))?;
            Some((relative.to_owned(), image.file(path)?.to_vec()))
        })
        .collect();
    run.segments = snapshot_of(files);
}

/// Snapshots of the numbered segments among `files` (path relative to the root, bytes).
pub(crate) fn snapshot_of(files: Vec<(String, Vec<u8>)>) -> BTreeMap<String, SegmentSnapshot> {
    let segments: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .filter(|(path, _)| path.contains("/timeline/") && path.ends_with(".ndjson"))
        .collect();
    let mut newest: BTreeMap<String, String> = BTreeMap::new();
    for (path, _) in &segments {
        let dir = path.rsplit_once("/timeline/").map(|(dir, _)| dir.to_owned()).unwrap_or_default();
        let entry = newest.entry(dir).or_default();
        if path.as_str() > entry.as_str() {
            *entry = path.clone();
        }
    }
    segments
        .into_iter()
        .map(|(path, bytes)| {
            let dir =
                path.rsplit_once("/timeline/").map(|(dir, _)| dir.to_owned()).unwrap_or_default();
            let snapshot = SegmentSnapshot {
                len: bytes.len() as u64,
                sha256: hash(&bytes),
                newest: newest.get(&dir) == Some(&path),
            };
            (path, snapshot)
        })
        .collect()
}

/// SHA-256 of `bytes`, lowercase hex.
pub(crate) fn hash(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Which model states are allowed after recovery from a crash during `run`.
pub(crate) fn candidates(scenario: &Scenario, run: &Execution) -> Vec<Model> {
    let base = run.base.clone().unwrap_or_else(|| vec![run.model.clone()]);
    let step = run.continuing.clone().or_else(|| run.in_flight.map(|i| scenario.steps[i].clone()));
    let Some(step) = step else { return base };
    let mut states: Vec<Model> =
        base.iter().flat_map(|model| step_candidates(model, &step)).collect();
    states.dedup();
    states
}

/// The states allowed after `step`, starting from `model`, was interrupted by a crash.
fn step_candidates(model: &Model, step: &Step) -> Vec<Model> {
    match step {
        Step::Drain { id } => model.interrupted_drain(id),
        Step::SendTogether { sends, .. } => model.interrupted_sends(&together_ops(sends)),
        _ => model.crash_candidates(&model_op(step, Mid::Any)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model holding the sessions `ids`, created in order.
    fn holding(ids: &[&'static str]) -> Model {
        let mut model = Model::default();
        for id in ids {
            model.apply_mut(&model_op(&Step::Create { id, adapter: None }, Mid::Any));
        }
        model
    }

    /// The verdicts and acknowledgements of stepping every state through each step in turn.
    fn stepped_in_turn(
        allowed: &[Model],
        steps: &[(&Step, &Answer)],
    ) -> (Vec<Option<String>>, Vec<Acked>) {
        let mut next = Execution::default().continued_from(allowed.to_vec());
        let verdicts = steps.iter().map(|(step, answer)| next.advance_continued(step, answer));
        (verdicts.collect(), next.acked)
    }

    /// Following each state through the steps until it is ruled out (and stopping at the first
    /// that survives them all) gives the verdicts and acknowledgements of stepping every state
    /// through each step: when one state survives, when all are ruled out at once, and when
    /// they are ruled out at different steps (what the last one ruled out was told is kept).
    #[test]
    fn a_last_phase_steps_its_states_apart_to_the_same_verdicts() {
        let to_a = Step::Send { to: "a", text: "x", from: None, key: None };
        let to_b = Step::Send { to: "b", text: "y", from: None, key: None };
        let keyed = Step::Send { to: "a", text: "z", from: None, key: Some("k") };
        let drain = Step::Drain { id: "a" };
        let accepted = |mid: &str| Answer::Accepted { mid: mid.to_owned(), replayed: false };
        let (one, two, three) = (accepted("m1"), accepted("m2"), accepted("m3"));
        let drained = Answer::Drained(None);
        let steps: Vec<(&Step, &Answer)> =
            vec![(&to_a, &one), (&to_b, &two), (&drain, &drained), (&keyed, &three)];
        let both = holding(&["a", "b"]);
        let only_a = holding(&["a"]);
        let only_b = holding(&["b"]);
        for allowed in [
            vec![only_a.clone(), both.clone()],
            vec![both.clone(), only_a.clone()],
            vec![only_a.clone(), only_b.clone()],
            vec![only_b.clone(), only_a.clone(), only_a.clone()],
            vec![Model::default()],
        ] {
            let mut next = Execution::default().continued_last();
            let verdicts = next.advance_last(&allowed, &steps);
            let expected = stepped_in_turn(&allowed, &steps);
            assert_eq!((verdicts, next.acked), expected, "{allowed:?}");
        }
        let (verdicts, acked) = stepped_in_turn(&[only_b.clone(), only_a], &steps);
        assert!(verdicts[0].is_none() && verdicts[1].as_deref().is_some_and(|v| !v.is_empty()));
        assert_eq!(acked.len(), 1, "only the first send is acknowledged by a state left");
        // Two states ruled out by one step, told different things (the key holds another text;
        // there is no session): the verdict quotes the last.
        let mut conflicting = holding(&["a", "b"]);
        let earlier = Step::Send { to: "a", text: "other", from: None, key: Some("k") };
        conflicting.apply_mut(&model_op(&earlier, Mid::Known("m0".to_owned())));
        let keyed_first: Vec<(&Step, &Answer)> = vec![(&keyed, &three), (&to_a, &one)];
        let mut told = Vec::new();
        for allowed in [vec![conflicting.clone(), only_b.clone()], vec![only_b, conflicting]] {
            let mut next = Execution::default().continued_last();
            let verdicts = next.advance_last(&allowed, &keyed_first);
            let expected = stepped_in_turn(&allowed, &keyed_first);
            assert_eq!((&verdicts, next.acked), (&expected.0, expected.1), "{allowed:?}");
            told.push(verdicts);
        }
        assert_ne!(told[0], told[1], "the order of the states shows in the verdict");
    }
}
