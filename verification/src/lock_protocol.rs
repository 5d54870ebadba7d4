//! The lock protocol across processes, as a model checked exhaustively (Stateright).
//!
//! loom checks the threads of one process against each other; what keeps two *processes* apart
//! is the lock file of `engine/src/lock.rs`: the pid written to a private file linked into the
//! lock's name (which fails while the lock exists), a dead holder's lock judged stale (its pid not
//! running, or running a process that started after the lock was written: the pid was reused),
//! taken over under the `<lock>.takeover` flock only if a re-read still shows the very file
//! judged, and, in the transition, everything a dead holder left visible made durable (vouched)
//! before the new holder acts on it.
//!
//! The model: a few process slots, each running one process at a time, each process taking the
//! record lock to send one keyed message (the same key for every process: each after the first
//! is a retry, answered from what is on disk). A process starts with any pid no running process
//! has, from a pool as small as the slots (so pids are reused), is killed at any step (its flock
//! goes with it, its lock file stays), and the machine loses power at most once (every process
//! dies, what was visible but not durable is lost, the lock file survives or not: it needs no
//! durability). Each step is one system call of the engine, in its order:
//!
//! | step      | the engine                                                        |
//! |-----------|-------------------------------------------------------------------|
//! | `Create`  | link of the pid file to the lock's name (`create_holding_pid`)    |
//! | `Read`    | read of the lock file (`read_seen`)                               |
//! | `Judge`   | the holder's liveness: running, started before the lock was written |
//! | `Flock`   | `try_lock` of `<lock>.takeover`                                   |
//! | `Recheck` | the re-read, compared with what was judged                        |
//! | `Replace` | rename of the taker's pid file over the stale lock                |
//! | `Unflock` | unlock of the takeover file                                       |
//! | `Vouch`   | `timeline::vouch`: sync what is visible (after a takeover only)   |
//! | `Lookup`  | the receipt lookup: a retry is answered, a first send appends     |
//! | `Sync`    | the append's sync                                                 |
//! | `Ack`     | the answer to the caller                                          |
//! | `Release` | unlink of the lock                                                |
//!
//! Time is logical: it advances when a process starts and when a lock is written, which is all
//! the stale judgement compares. Properties, each checked over every reachable state:
//! - **mutual exclusion**: at most one process is between `Create` and `Release`;
//! - **no acknowledged send lost**: once a send was acknowledged, it is durable (a power loss
//!   at any later moment keeps it);
//! - **a lock not taken over shows only durable data**: a holder that did not remove a stale lock
//!   finds nothing visible that is not durable (why a plain acquisition need not vouch).
//!
//! and, so that the model is not vacuous, examples that must be reachable: a takeover, a lock
//! judged stale because its pid was reused, a retry answered after a takeover, a power loss
//! after an acknowledgement. [`Variant`]s model the engine's broken variants: each must break
//! the properties (`verification/tests/it/lock_protocol.rs`). One of them is the protocol the
//! engine had before this model: a taker removed the stale lock and then created its own, and in
//! between a fresh process could take the lock and answer a retry from bytes the dead holder
//! never synced; the check finds that run in a few seconds.

use stateright::{Checker as _, Model, Property};

/// Which protocol is modelled: the engine's, or one of its deliberately broken variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The engine as it is.
    Faithful,
    /// The `takeover-without-recheck` mutant: a taker removes whatever lock is in place once it
    /// holds the flock, without re-reading it.
    TakeoverWithoutRecheck,
    /// The `no-vouch-after-takeover` mutant: a taker acts on what a dead holder left visible
    /// without making it durable first.
    NoVouchAfterTakeover,
    /// The earlier takeover: remove the stale lock, then create one's own (the lock is absent in
    /// between, and a process that creates it then does not know to vouch).
    RemoveThenCreate,
}

impl Variant {
    /// Every variant, the faithful one first.
    pub const ALL: [Variant; 4] = [
        Variant::Faithful,
        Variant::TakeoverWithoutRecheck,
        Variant::NoVouchAfterTakeover,
        Variant::RemoveThenCreate,
    ];

    /// The name the CLI and the engine's mutant catalogue use.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Faithful => "faithful",
            Variant::TakeoverWithoutRecheck => "takeover-without-recheck",
            Variant::NoVouchAfterTakeover => "no-vouch-after-takeover",
            Variant::RemoveThenCreate => "remove-then-create",
        }
    }

    /// The variant named `name`.
    pub fn from_name(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|variant| variant.name() == name)
    }
}

/// The model's bounds and variant.
#[derive(Clone, Copy, Debug)]
pub struct LockModel {
    pub variant: Variant,
    /// Processes that can run at the same time.
    pub slots: u8,
    /// Processes started in all (each slot restarts after its process exits or is killed).
    pub starts: u8,
}

impl LockModel {
    /// The bounds the tests use: up to 3 processes at once, 4 in all (a process follows a
    /// killed one in its slot, often under a reused pid), which reach every counterexample of
    /// the broken variants and every example (about a million states, seconds).
    pub fn new(variant: Variant) -> LockModel {
        LockModel { variant, slots: 3, starts: 4 }
    }
}

/// The lock file: the pid in it and its modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockFile {
    pub pid: u8,
    pub written_at: u8,
}

/// Where a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// No process in this slot (never started, exited, or killed).
    Idle,
    Create,
    Read,
    Judge(LockFile),
    Flock(LockFile),
    Recheck(LockFile),
    /// Taking over: the rename (the faithful protocol) or the unlink (`RemoveThenCreate`).
    Replace,
    /// Letting the flock go, holding the lock (after a rename) or not.
    Unflock {
        holding: bool,
    },
    Vouch,
    Lookup,
    Sync,
    Ack,
    Release,
}

impl Step {
    /// The lock file this step judged, if any.
    fn seen(self) -> Option<LockFile> {
        match self {
            Step::Judge(seen) | Step::Flock(seen) | Step::Recheck(seen) => Some(seen),
            _ => None,
        }
    }

    /// Whether a process here holds the lock (between a successful `Create` and `Release`).
    pub fn holds(self) -> bool {
        matches!(
            self,
            Step::Unflock { holding: true }
                | Step::Vouch
                | Step::Lookup
                | Step::Sync
                | Step::Ack
                | Step::Release
        )
    }
}

/// One process slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Process {
    pub pid: u8,
    pub started_at: u8,
    pub step: Step,
    /// Whether this process replaced (or removed) a stale lock on its way to the lock.
    pub took_over: bool,
    /// Whether its answer is a retry's (the message was already on disk).
    pub retry: bool,
}

impl Process {
    const IDLE: Process =
        Process { pid: 0, started_at: 0, step: Step::Idle, took_over: false, retry: false };
}

/// The machine: the lock, the takeover flock, the processes and the message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: u8,
    pub lock: Option<LockFile>,
    /// The slot holding the flock on `<lock>.takeover`.
    pub flock: Option<u8>,
    pub processes: Vec<Process>,
    pub started: u8,
    pub power_lost: bool,
    /// The keyed message: visible to the next reader, durable across a power loss.
    pub visible: bool,
    pub durable: bool,
    pub acknowledged: bool,
    /// Examples the check must reach.
    pub judged_stale_by_reuse: bool,
    pub retry_answered_after_takeover: bool,
    pub power_lost_after_ack: bool,
}

/// The judgement of a lock's holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    Alive,
    Dead,
    /// Its pid runs a process that started after the lock was written.
    Reused,
}

impl State {
    /// Judges the holder of the lock `seen` as the engine does: by its pid and that process's
    /// start time.
    fn judge(&self, seen: LockFile) -> Holder {
        let running = self.processes.iter().find(|p| p.step != Step::Idle && p.pid == seen.pid);
        match running {
            Some(process) if process.started_at <= seen.written_at => Holder::Alive,
            Some(_) => Holder::Reused,
            None => Holder::Dead,
        }
    }

    /// Whether anything in the state names `pid`: a running process, the lock, a lock judged.
    fn names_pid(&self, pid: u8) -> bool {
        self.lock.is_some_and(|lock| lock.pid == pid)
            || self.processes.iter().any(|p| {
                (p.step != Step::Idle && p.pid == pid)
                    || p.step.seen().is_some_and(|s| s.pid == pid)
            })
    }

    /// One state for each class the protocol cannot tell apart: an empty slot remembers
    /// nothing, and times are only compared with each other (and every new time is later than
    /// all of them), so they are renumbered 1, 2, ... in order.
    fn normalize(&mut self) {
        for process in &mut self.processes {
            if process.step == Step::Idle {
                *process = Process::IDLE;
            }
        }
        let mut times: Vec<u8> = Vec::new();
        times.extend(self.lock.map(|lock| lock.written_at));
        for process in &self.processes {
            if process.step != Step::Idle {
                times.push(process.started_at);
            }
            times.extend(process.step.seen().map(|seen| seen.written_at));
        }
        times.sort_unstable();
        times.dedup();
        let rank = |time: u8| (1u8..).zip(&times).find(|(_, t)| **t == time).map_or(0, |(r, _)| r);
        if let Some(lock) = &mut self.lock {
            lock.written_at = rank(lock.written_at);
        }
        for process in &mut self.processes {
            if process.step != Step::Idle {
                process.started_at = rank(process.started_at);
            }
            if let Step::Judge(seen) | Step::Flock(seen) | Step::Recheck(seen) = &mut process.step {
                seen.written_at = rank(seen.written_at);
            }
        }
        self.now = u8::try_from(times.len()).unwrap_or(u8::MAX);
    }
}

/// What happens next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start { slot: u8, pid: u8 },
    Step { slot: u8 },
    Kill { slot: u8 },
    PowerLoss { lock_survives: bool },
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            lock: None,
            flock: None,
            processes: vec![Process::IDLE; usize::from(self.slots)],
            started: 0,
            power_lost: false,
            visible: false,
            durable: false,
            acknowledged: false,
            judged_stale_by_reuse: false,
            retry_answered_after_takeover: false,
            power_lost_after_ack: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (slot, process) in (0u8..).zip(&state.processes) {
            if process.step == Step::Idle {
                if state.started < self.starts {
                    // Pids are only compared with each other: of the pids nothing in the state
                    // names, one stands for all.
                    let mut unnamed_tried = false;
                    for pid in 0..self.slots {
                        let running =
                            state.processes.iter().any(|p| p.step != Step::Idle && p.pid == pid);
                        let named = state.names_pid(pid);
                        if running || (!named && unnamed_tried) {
                            continue;
                        }
                        unnamed_tried |= !named;
                        actions.push(Action::Start { slot, pid });
                    }
                }
                continue;
            }
            let blocked = matches!(process.step, Step::Flock(_))
                && state.flock.is_some_and(|holder| holder != slot);
            if !blocked {
                actions.push(Action::Step { slot });
            }
            actions.push(Action::Kill { slot });
        }
        if !state.power_lost {
            actions.push(Action::PowerLoss { lock_survives: true });
            actions.push(Action::PowerLoss { lock_survives: false });
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Start { slot, pid } => {
                state.now += 1;
                state.started += 1;
                *state.processes.get_mut(usize::from(slot))? = Process {
                    pid,
                    started_at: state.now,
                    step: Step::Create,
                    took_over: false,
                    retry: false,
                };
            }
            Action::Kill { slot } => {
                state.processes.get_mut(usize::from(slot))?.step = Step::Idle;
                if state.flock == Some(slot) {
                    state.flock = None;
                }
            }
            Action::PowerLoss { lock_survives } => {
                for process in &mut state.processes {
                    process.step = Step::Idle;
                }
                state.flock = None;
                state.visible = state.durable;
                state.power_lost = true;
                state.power_lost_after_ack = state.acknowledged;
                if !lock_survives {
                    state.lock = None;
                }
            }
            Action::Step { slot } => self.step(&mut state, slot)?,
        }
        state.normalize();
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, state: &State| {
                state.processes.iter().filter(|p| p.step.holds()).count() <= 1
            }),
            Property::always("no acknowledged send lost", |_, state: &State| {
                !state.acknowledged || state.durable
            }),
            Property::always(
                "a lock not taken over shows only durable data",
                |_, state: &State| {
                    state.processes.iter().all(|p| {
                        p.step != Step::Lookup || p.took_over || !state.visible || state.durable
                    })
                },
            ),
            Property::sometimes("a dead holder's lock is taken over", |_, state: &State| {
                state.processes.iter().any(|p| p.step.holds() && p.took_over)
            }),
            Property::sometimes(
                "a lock is judged stale because its pid was reused",
                |_, state: &State| state.judged_stale_by_reuse,
            ),
            Property::sometimes("a retry is answered after a takeover", |_, state: &State| {
                state.retry_answered_after_takeover
            }),
            Property::sometimes(
                "the power is lost after an acknowledgement",
                |_, state: &State| state.power_lost_after_ack,
            ),
        ]
    }
}

impl LockModel {
    /// What a process that just got the lock does first: vouch if it took the lock over.
    fn first_step_holding(&self, took_over: bool) -> Step {
        if took_over && self.variant != Variant::NoVouchAfterTakeover {
            Step::Vouch
        } else {
            Step::Lookup
        }
    }

    /// Runs the next system call of the process in `slot`.
    fn step(&self, state: &mut State, slot: u8) -> Option<()> {
        let index = usize::from(slot);
        let process = *state.processes.get(index)?;
        let next = match process.step {
            Step::Idle => return None,
            Step::Vouch | Step::Lookup | Step::Sync | Step::Ack | Step::Release => {
                Self::holding(state, index, process)?
            }
            _ => self.acquiring(state, slot, process)?,
        };
        state.processes.get_mut(index)?.step = next;
        Some(())
    }

    /// The next step of a process taking the lock (creating it, or judging and taking over a
    /// stale one); `None` when it must wait (another holds the takeover flock).
    fn acquiring(&self, state: &mut State, slot: u8, process: Process) -> Option<Step> {
        let index = usize::from(slot);
        Some(match process.step {
            Step::Create => match state.lock {
                None => {
                    state.now += 1;
                    state.lock = Some(LockFile { pid: process.pid, written_at: state.now });
                    self.first_step_holding(process.took_over)
                }
                Some(_) => Step::Read,
            },
            Step::Read => match state.lock {
                None => Step::Create,
                Some(seen) => Step::Judge(seen),
            },
            Step::Judge(seen) => match state.judge(seen) {
                Holder::Alive => Step::Create,
                Holder::Reused => {
                    state.judged_stale_by_reuse = true;
                    Step::Flock(seen)
                }
                Holder::Dead => Step::Flock(seen),
            },
            Step::Flock(seen) => {
                if state.flock.is_some_and(|holder| holder != slot) {
                    return None;
                }
                state.flock = Some(slot);
                Step::Recheck(seen)
            }
            Step::Recheck(seen) => {
                let recheck = self.variant != Variant::TakeoverWithoutRecheck;
                if !recheck || state.lock == Some(seen) {
                    Step::Replace
                } else {
                    Step::Unflock { holding: false }
                }
            }
            Step::Replace if self.variant == Variant::RemoveThenCreate => {
                if state.lock.take().is_some() {
                    state.processes.get_mut(index)?.took_over = true;
                }
                Step::Unflock { holding: false }
            }
            Step::Replace => {
                state.now += 1;
                state.lock = Some(LockFile { pid: process.pid, written_at: state.now });
                state.processes.get_mut(index)?.took_over = true;
                Step::Unflock { holding: true }
            }
            Step::Unflock { holding } => {
                state.flock = None;
                if holding { self.first_step_holding(process.took_over) } else { Step::Create }
            }
            Step::Idle | Step::Vouch | Step::Lookup | Step::Sync | Step::Ack | Step::Release => {
                unreachable!("a step of a process holding the lock, or none")
            }
        })
    }

    /// The next step of a process holding the lock: vouch (after a takeover), look the keyed
    /// send up, write and sync it, acknowledge, release.
    fn holding(state: &mut State, index: usize, process: Process) -> Option<Step> {
        Some(match process.step {
            Step::Vouch => {
                state.durable |= state.visible;
                Step::Lookup
            }
            Step::Lookup => {
                if state.visible {
                    state.processes.get_mut(index)?.retry = true;
                    Step::Ack
                } else {
                    state.visible = true;
                    Step::Sync
                }
            }
            Step::Sync => {
                state.durable |= state.visible;
                Step::Ack
            }
            Step::Ack => {
                state.acknowledged = true;
                if process.retry && process.took_over {
                    state.retry_answered_after_takeover = true;
                }
                Step::Release
            }
            Step::Release => {
                state.lock = None;
                Step::Idle
            }
            _ => unreachable!("a step of a process taking the lock"),
        })
    }
}

/// A property that failed, with a run that breaks it (cut at the first state that does).
#[derive(Clone, Debug)]
pub struct Counterexample {
    pub property: &'static str,
    pub actions: Vec<Action>,
    pub last: State,
}

/// What one exhaustive check found.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub model: LockModel,
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    /// The `always` properties, each with its counterexample if it failed.
    pub safety: Vec<(&'static str, Option<Counterexample>)>,
    /// The `sometimes` properties, each with whether an example was reached.
    pub examples: Vec<(&'static str, bool)>,
}

impl Verdict {
    /// Whether every safety property held and every example was reached.
    pub fn holds(&self) -> bool {
        self.safety.iter().all(|(_, broken)| broken.is_none())
            && self.examples.iter().all(|(_, reached)| *reached)
    }
}

/// Explores every reachable state of `model` breadth first on `threads` threads (with one
/// thread each counterexample is a shortest one; with more, threads race to record one).
pub fn check(model: LockModel, threads: usize) -> Verdict {
    let checker = model.checker().threads(threads.max(1)).spawn_bfs().join();
    let mut safety = Vec::new();
    let mut examples = Vec::new();
    for property in model.properties() {
        let found = checker.discovery(property.name);
        match property.expectation {
            stateright::Expectation::Always => {
                let broken =
                    found.map(|path| first_failure(&model, &property, path.into_actions()));
                safety.push((property.name, broken));
            }
            _ => examples.push((property.name, found.is_some())),
        }
    }
    Verdict {
        model,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        safety,
        examples,
    }
}

/// The run `actions` up to the first state where `property` fails (threads racing can record a
/// later state of a run that already failed).
fn first_failure(
    model: &LockModel,
    property: &Property<LockModel>,
    actions: Vec<Action>,
) -> Counterexample {
    let mut state = model.init_states().remove(0);
    let mut taken = Vec::new();
    for action in actions {
        if !(property.condition)(model, &state) {
            break;
        }
        let Some(next) = model.next_state(&state, action) else { break };
        taken.push(action);
        state = next;
    }
    Counterexample { property: property.name, actions: taken, last: state }
}

/// `action`, as a line a reader can follow; `names` are the processes' names by slot (`P1`,
/// `P2`, ... in the order they started).
fn describe(model: &LockModel, action: &Action, before: &State, names: &[String]) -> String {
    let name = |slot: u8| names.get(usize::from(slot)).cloned().unwrap_or_default();
    match *action {
        Action::Start { slot, pid } => format!("{} starts with pid {pid}", name(slot)),
        Action::Kill { slot } => format!("{} is killed", name(slot)),
        Action::PowerLoss { lock_survives: true } => "power loss (the lock file survives)".into(),
        Action::PowerLoss { lock_survives: false } => "power loss (the lock file is lost)".into(),
        Action::Step { slot } => {
            let step = before.processes.get(usize::from(slot)).map_or(Step::Idle, |p| p.step);
            let what = match step {
                Step::Idle => "does nothing".to_string(),
                Step::Create => match before.lock {
                    None => "links its pid file: it holds the lock".to_string(),
                    Some(_) => "fails to link its pid file: the lock exists".to_string(),
                },
                Step::Read => match before.lock {
                    None => "reads the lock file: gone".to_string(),
                    Some(lock) => format!("reads the lock file: pid {}", lock.pid),
                },
                Step::Judge(seen) => match before.judge(seen) {
                    Holder::Alive => format!("judges pid {}: alive, it waits", seen.pid),
                    Holder::Dead => format!("judges pid {}: dead, the lock is stale", seen.pid),
                    Holder::Reused => {
                        format!(
                            "judges pid {}: reused by a later process, the lock is stale",
                            seen.pid
                        )
                    }
                },
                Step::Flock(_) => "takes the takeover flock".to_string(),
                Step::Recheck(_) if model.variant == Variant::TakeoverWithoutRecheck => {
                    "does not re-read the lock".to_string()
                }
                Step::Recheck(seen) => match before.lock == Some(seen) {
                    true => "re-reads the lock: still the stale one".to_string(),
                    false => "re-reads the lock: it changed, it backs off".to_string(),
                },
                Step::Replace if model.variant == Variant::RemoveThenCreate => {
                    "removes the lock".to_string()
                }
                Step::Replace => {
                    "renames its pid file over the lock: it holds the lock".to_string()
                }
                Step::Unflock { .. } => "lets the takeover flock go".to_string(),
                Step::Vouch => "vouches: syncs what the dead holder left".to_string(),
                Step::Lookup => match before.visible {
                    true => "finds the message on disk (a retry)".to_string(),
                    false => "appends the message".to_string(),
                },
                Step::Sync => "syncs the message".to_string(),
                Step::Ack => "acknowledges the send".to_string(),
                Step::Release => "removes its lock".to_string(),
            };
            format!("{} {what}", name(slot))
        }
    }
}

/// The counterexample's run, one described action per line.
pub fn narrate(model: &LockModel, counterexample: &Counterexample) -> Vec<String> {
    let mut state = model.init_states().remove(0);
    let mut lines = Vec::new();
    let mut names = vec![String::new(); usize::from(model.slots)];
    let mut started = 0;
    for action in &counterexample.actions {
        if let Action::Start { slot, .. } = action {
            started += 1;
            if let Some(name) = names.get_mut(usize::from(*slot)) {
                *name = format!("P{started}");
            }
        }
        lines.push(describe(model, action, &state, &names));
        match model.next_state(&state, *action) {
            Some(next) => state = next,
            None => break,
        }
    }
    lines
}
