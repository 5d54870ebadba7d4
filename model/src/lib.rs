//! The reference model: a small, pure, executable specification of the spex transitions and
//! the public state they produce (DESIGN.md section 7). It does not import the engine: it is a
//! second, independent statement of what the engine must do.
//!
//! The public state of a store is, per open session: its public triple, its public events in
//! order, the messages it is owed in order, the receipts of keyed sends (key -> mid, settled?),
//! and whether it is archived; plus the set of closed sessions.
//!
//! Message ids are chosen by the engine. The model takes them from the engine's answers; for a
//! transition interrupted by a crash (whose answer never came) an id is [`Mid::Any`] until the
//! recovered state binds it.
//!
//! For an acknowledged transition the model gives the one next state ([`Model::apply`]). For a
//! transition interrupted by a crash it gives every state allowed after recovery
//! ([`Model::crash_candidates`]):
//!
//! - send: before; appended but not owed (unkeyed: the documented window; keyed: pending a
//!   replay); appended and owed;
//! - lifecycle write, archive, create, close: before or after;
//! - one drain step: before (also when the adapter was called and the crash came before the
//!   settlement); settled but still owed (keyed); consumed;
//! - a whole drain ([`Model::interrupted_drain`]): any number of heads drained, then a batch of
//!   the heads that follow with a prefix of them settled (the keyed ones) but still owed: a
//!   drain commits a batch by settling its delivered heads, then removing them.
//! - sends committed together ([`Model::interrupted_sends`]): before; the new messages of a
//!   prefix of them appended but none owed; all of them applied.

use std::collections::{BTreeMap, BTreeSet};

/// A message id, or any id (an interrupted send's, not yet seen).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mid {
    /// This id.
    Known(String),
    /// Whatever id the engine chose.
    Any,
}

impl Mid {
    fn matches(&self, actual: &str) -> bool {
        match self {
            Mid::Known(mid) => mid == actual,
            Mid::Any => true,
        }
    }
}

/// The public lifecycle triple, as stored strings.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Triple {
    /// Status name.
    pub status: String,
    /// Proposal name; only with `awaiting`.
    pub proposal: Option<String>,
    /// Note; never empty.
    pub note: Option<String>,
}

impl Triple {
    /// A normalized triple.
    pub fn new(status: &str, proposal: Option<&str>, note: Option<&str>) -> Triple {
        Triple {
            status: status.to_owned(),
            proposal: if status == "awaiting" { proposal.map(str::to_owned) } else { None },
            note: note.filter(|note| !note.is_empty()).map(str::to_owned),
        }
    }
}

/// A public event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A lifecycle move.
    Status(Triple),
    /// A message addressed to the session (raw text).
    Sent {
        /// Its id.
        mid: Mid,
        /// The raw text.
        text: String,
        /// The sender (`None`: a human).
        from: Option<String>,
    },
}

/// An owed message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owed {
    /// Its id.
    pub mid: Mid,
    /// The raw text it was sent with (the engine's composed text starts with it).
    pub text: String,
    /// The sender.
    pub from: Option<String>,
    /// Whether it was a keyed send.
    pub keyed: bool,
}

/// What the log says about a keyed send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState {
    /// The original mid.
    pub mid: Mid,
    /// The payload it was sent with (raw text).
    pub text: String,
    /// Its sender (part of the payload: another sender under the same key is a conflict).
    pub from: Option<String>,
    /// Whether its delivery was settled.
    pub settled: bool,
}

/// A launch in flight (its readiness fence): what the session becomes if it succeeds. Readers
/// see the triple and the archived flag frozen when it began until it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The triple the launch declared when it began.
    pub triple: Triple,
    /// Whether the session is archived underneath the fence (an archive during the launch
    /// shows once it succeeds; a failed launch restores the frozen flag).
    pub archived: bool,
}

/// One open session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The public triple.
    pub triple: Triple,
    /// A launch in flight.
    pub launching: Option<Launch>,
    /// Public events, in order.
    pub events: Vec<Event>,
    /// Owed messages, in order.
    pub owed: Vec<Owed>,
    /// Receipts by (operation, key).
    pub keys: BTreeMap<(String, String), KeyState>,
    /// Archived?
    pub archived: bool,
    /// Retired (its worktree is gone): lifecycle writes are refused, sends still recorded.
    pub retired: bool,
}

impl Session {
    /// A new message `mid` accepted: its event, its debt, and its receipt when keyed.
    fn accept(
        &mut self,
        mid: &Mid,
        text: &str,
        from: Option<&String>,
        key: Option<&(String, String)>,
    ) {
        self.events.push(Event::Sent {
            mid: mid.clone(),
            text: text.to_owned(),
            from: from.cloned(),
        });
        self.owed.push(Owed {
            mid: mid.clone(),
            text: text.to_owned(),
            from: from.cloned(),
            keyed: key.is_some(),
        });
        if let Some(key) = key {
            self.keys.insert(
                key.clone(),
                KeyState {
                    mid: mid.clone(),
                    text: text.to_owned(),
                    from: from.cloned(),
                    settled: false,
                },
            );
        }
    }

    /// A replay of the keyed message `original`: its debt restored if neither owed nor settled.
    fn replay(&mut self, key: &(String, String), original: Mid) {
        let state = self.keys[key].clone();
        let owed = self.owed.iter().any(|owed| owed.mid == original);
        if !owed && !state.settled {
            self.owed.push(Owed { mid: original, text: state.text, from: state.from, keyed: true });
        }
    }

    /// The head of the debt handed over: delivered (settling its key) or, from a sender in
    /// `closed`, dropped (nothing settled).
    fn drain_head(&mut self, closed: &BTreeSet<String>) {
        if self.owed.is_empty() {
            return;
        }
        let head = self.owed.remove(0);
        let revoked = head.from.as_ref().is_some_and(|from| closed.contains(from));
        if head.keyed && !revoked {
            for state in self.keys.values_mut() {
                if state.mid == head.mid {
                    state.settled = true;
                }
            }
        }
    }
}

/// The whole public state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    /// Open sessions by id.
    pub sessions: BTreeMap<String, Session>,
    /// Closed sessions (revoked as senders).
    pub closed: BTreeSet<String>,
}

/// A transition, with the answers the engine gave (mids) where it gave them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create a session.
    Create {
        /// The id.
        id: String,
        /// Its first triple (no event).
        triple: Triple,
    },
    /// A lifecycle write of `triple`.
    Lifecycle {
        /// The session.
        id: String,
        /// The declared triple.
        triple: Triple,
    },
    /// A launch begins: the fence freezes what readers see, the record takes `triple`, nothing
    /// is logged.
    BeginLaunch {
        /// The session.
        id: String,
        /// The triple the launch declares.
        triple: Triple,
    },
    /// The launch failed: the frozen state comes back, nothing is logged.
    FailLaunch {
        /// The session.
        id: String,
    },
    /// A send.
    Send {
        /// The target.
        to: String,
        /// The raw text.
        text: String,
        /// The sender.
        from: Option<String>,
        /// (operation, key) for a keyed send.
        key: Option<(String, String)>,
        /// The mid the engine answered (`Any` if it never answered).
        mid: Mid,
    },
    /// One drain step on the head of the queue: delivered (or consumed) and removed.
    DrainHead {
        /// The session.
        id: String,
    },
    /// Archive.
    Archive {
        /// The session.
        id: String,
    },
    /// Close.
    Close {
        /// The session.
        id: String,
    },
    /// The session's worktree disappears.
    Retire {
        /// The session.
        id: String,
    },
}

/// What the model expects of a transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Success.
    Ok,
    /// A keyed replay returning this original mid.
    Replay(Mid),
    /// Refused: the key was used with another payload.
    KeyConflict,
    /// Refused: the sender is closed.
    Revoked,
    /// Refused: no such session.
    NoSuchSession,
    /// Refused: the session already exists.
    Exists,
    /// Refused: the session is retired (lifecycle writes only).
    Retired,
    /// Refused: a launch is already in flight (to begin one), or none is (to fail one).
    LaunchState,
}

impl Model {
    /// What `op` should answer in the current state.
    pub fn expect(&self, op: &Op) -> Expect {
        match op {
            Op::Create { id, .. } => {
                if self.sessions.contains_key(id) {
                    Expect::Exists
                } else if self.closed.contains(id) {
                    // A closed id stays closed: its close is on record and it is revoked.
                    Expect::Revoked
                } else {
                    Expect::Ok
                }
            }
            Op::Send { to, text, from, key, .. } => {
                if let Some(sender) = from
                    && self.closed.contains(sender)
                {
                    return Expect::Revoked;
                }
                let Some(session) = self.sessions.get(to) else { return Expect::NoSuchSession };
                match key.as_ref().and_then(|key| session.keys.get(key)) {
                    Some(state) if state.text == *text && state.from == *from => {
                        Expect::Replay(state.mid.clone())
                    }
                    Some(_) => Expect::KeyConflict,
                    None => Expect::Ok,
                }
            }
            Op::Lifecycle { id, .. } | Op::BeginLaunch { id, .. } | Op::FailLaunch { id } => {
                match self.sessions.get(id) {
                    None => Expect::NoSuchSession,
                    Some(session) if session.retired => Expect::Retired,
                    Some(session) => match (op, &session.launching) {
                        (Op::BeginLaunch { .. }, Some(_)) | (Op::FailLaunch { .. }, None) => {
                            Expect::LaunchState
                        }
                        _ => Expect::Ok,
                    },
                }
            }
            Op::DrainHead { id } | Op::Archive { id } | Op::Close { id } | Op::Retire { id } => {
                if self.sessions.contains_key(id) {
                    Expect::Ok
                } else {
                    Expect::NoSuchSession
                }
            }
        }
    }

    /// The state after `op` completed and was acknowledged. A refused op changes nothing.
    pub fn apply(&self, op: &Op) -> Model {
        let mut next = self.clone();
        next.apply_mut(op);
        next
    }

    /// [`Model::apply`], in place.
    pub fn apply_mut(&mut self, op: &Op) {
        let next = self;
        match (op, next.expect(op)) {
            (Op::Create { id, triple }, Expect::Ok) => {
                next.sessions.insert(
                    id.clone(),
                    Session {
                        triple: triple.clone(),
                        events: Vec::new(),
                        owed: Vec::new(),
                        keys: BTreeMap::new(),
                        archived: false,
                        retired: false,
                        launching: None,
                    },
                );
            }
            (Op::Lifecycle { id, triple }, Expect::Ok) => {
                let session = next.session_mut(id);
                // A lifecycle write ends a launch in flight, successfully.
                if let Some(launch) = session.launching.take() {
                    session.archived = launch.archived;
                }
                if session.triple != *triple {
                    session.events.push(Event::Status(triple.clone()));
                    session.triple = triple.clone();
                }
            }
            (Op::Send { to, text, from, key, mid }, Expect::Ok) => {
                next.session_mut(to).accept(mid, text, from.as_ref(), key.as_ref());
            }
            (Op::Send { to, key: Some(key), .. }, Expect::Replay(original)) => {
                next.session_mut(to).replay(key, original);
            }
            (Op::DrainHead { id }, Expect::Ok) => {
                let Model { sessions, closed } = next;
                let session =
                    sessions.get_mut(id).expect("ops are applied only to sessions that exist");
                session.drain_head(closed);
            }
            (Op::BeginLaunch { id, triple }, Expect::Ok) => {
                let session = next.session_mut(id);
                session.launching =
                    Some(Launch { triple: triple.clone(), archived: session.archived });
            }
            (Op::FailLaunch { id }, Expect::Ok) => next.session_mut(id).launching = None,
            (Op::Archive { id }, Expect::Ok) => {
                let session = next.session_mut(id);
                match &mut session.launching {
                    Some(launch) => launch.archived = true,
                    None => session.archived = true,
                }
            }
            (Op::Retire { id }, Expect::Ok) => next.session_mut(id).retired = true,
            (Op::Close { id }, Expect::Ok) => {
                next.sessions.remove(id);
                next.closed.insert(id.clone());
                // Debt from a closed sender is dropped by the next drain; until then it is owed.
            }
            _ => {}
        }
    }

    /// Every state allowed after `op` was interrupted by a crash and the store recovered.
    pub fn crash_candidates(&self, op: &Op) -> Vec<Model> {
        let mut candidates = vec![self.clone()];
        let after = self.apply(op);
        match (op, self.expect(op)) {
            (Op::Send { to, text, from, key, .. }, Expect::Ok) => {
                // Appended, not owed.
                let mut appended = self.clone();
                appended.append_unowed(to, text, from, key);
                candidates.push(appended);
                candidates.push(self.apply(&Op::Send {
                    to: to.clone(),
                    text: text.clone(),
                    from: from.clone(),
                    key: key.clone(),
                    mid: Mid::Any,
                }));
            }
            (Op::DrainHead { id }, Expect::Ok) => {
                if let Some(head) = self.sessions.get(id).and_then(|session| session.owed.first())
                    && head.keyed
                {
                    let mut settled = self.clone();
                    for state in settled.session_mut(id).keys.values_mut() {
                        if state.mid == head.mid {
                            state.settled = true;
                        }
                    }
                    candidates.push(settled);
                }
                candidates.push(after);
            }
            _ => candidates.push(after),
        }
        candidates.dedup();
        candidates
    }

    /// Every state allowed after sends committed together (one queue replace after their
    /// lines) were interrupted by a crash: before; the lines of the first `k` new messages
    /// appended (keys recorded, nothing owed, no lost debt restored), for every `k`; every send
    /// applied in order.
    pub fn interrupted_sends(&self, sends: &[Op]) -> Vec<Model> {
        let mut candidates = vec![self.clone()];
        let mut appended = self.clone();
        for op in sends {
            if let (Op::Send { to, text, from, key, .. }, Expect::Ok) = (op, appended.expect(op)) {
                appended.append_unowed(to, text, from, key);
                candidates.push(appended.clone());
            }
        }
        let mut all = self.clone();
        sends.iter().for_each(|op| all.apply_mut(op));
        candidates.push(all);
        candidates.dedup();
        candidates
    }

    /// A send's line appended without its queue entry (a send interrupted after its commit).
    fn append_unowed(
        &mut self,
        to: &str,
        text: &str,
        from: &Option<String>,
        key: &Option<(String, String)>,
    ) {
        let session = self.session_mut(to);
        session.events.push(Event::Sent {
            mid: Mid::Any,
            text: text.to_owned(),
            from: from.clone(),
        });
        if let Some(key) = key {
            session.keys.insert(
                key.clone(),
                KeyState {
                    mid: Mid::Any,
                    text: text.to_owned(),
                    from: from.clone(),
                    settled: false,
                },
            );
        }
    }

    /// Every state allowed after a drain of session `id` was interrupted by a crash (see the
    /// module header): `n` heads drained, then the next `m` heads' keys settled and still owed,
    /// for every `n` and `m`.
    pub fn interrupted_drain(&self, id: &str) -> Vec<Model> {
        let drain = Op::DrainHead { id: id.to_owned() };
        let owed = self.sessions.get(id).map_or(0, |session| session.owed.len());
        let mut candidates = Vec::new();
        let mut state = self.clone();
        for drained in 0..=owed {
            candidates.extend(state.crash_candidates(&drain));
            for settled in 2..=owed - drained {
                let mut batch = state.clone();
                let heads: Vec<Owed> = batch.session_mut(id).owed[..settled].to_vec();
                for head in heads {
                    let revoked = head.from.as_ref().is_some_and(|from| self.closed.contains(from));
                    if head.keyed && !revoked {
                        for key in batch.session_mut(id).keys.values_mut() {
                            if key.mid == head.mid {
                                key.settled = true;
                            }
                        }
                    }
                }
                candidates.push(batch);
            }
            state.apply_mut(&drain);
        }
        candidates.dedup();
        candidates
    }

    /// Whether the observed (recovered) state `actual`, whose mids are all known, is this
    /// candidate with its `Any` mids bound.
    pub fn admits(&self, actual: &Model) -> bool {
        if self.closed != actual.closed || self.sessions.len() != actual.sessions.len() {
            return false;
        }
        self.sessions.iter().all(|(id, expected)| {
            actual.sessions.get(id).is_some_and(|actual| session_admits(expected, actual))
        })
    }

    fn session_mut(&mut self, id: &str) -> &mut Session {
        self.sessions.get_mut(id).expect("ops are applied only to sessions that exist")
    }
}

fn mid_of(mid: &Mid) -> &str {
    match mid {
        Mid::Known(mid) => mid,
        Mid::Any => "",
    }
}

fn session_admits(expected: &Session, actual: &Session) -> bool {
    let events_match = expected.events.len() == actual.events.len()
        && expected.events.iter().zip(&actual.events).all(|pair| match pair {
            (Event::Status(a), Event::Status(b)) => a == b,
            (
                Event::Sent { mid, text, from },
                Event::Sent { mid: actual_mid, text: actual_text, from: actual_from },
            ) => mid.matches(mid_of(actual_mid)) && text == actual_text && from == actual_from,
            _ => false,
        });
    let owed_match = expected.owed.len() == actual.owed.len()
        && expected.owed.iter().zip(&actual.owed).all(|(e, a)| {
            e.mid.matches(mid_of(&a.mid))
                && e.text == a.text
                && e.from == a.from
                && e.keyed == a.keyed
        });
    let keys_match = expected.keys.len() == actual.keys.len()
        && expected.keys.iter().all(|(key, e)| {
            actual.keys.get(key).is_some_and(|a| {
                e.mid.matches(mid_of(&a.mid)) && e.text == a.text && e.settled == a.settled
            })
        });
    expected.triple == actual.triple
        && expected.archived == actual.archived
        && expected.launching == actual.launching
        && events_match
        && owed_match
        && keys_match
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(text: &str, key: Option<&str>, mid: &str) -> Op {
        Op::Send {
            to: "s".into(),
            text: text.into(),
            from: None,
            key: key.map(|key| ("op".to_owned(), key.to_owned())),
            mid: Mid::Known(mid.into()),
        }
    }

    fn created() -> Model {
        Model::default()
            .apply(&Op::Create { id: "s".into(), triple: Triple::new("queued", None, None) })
    }

    #[test]
    fn keyed_replay_and_conflict() {
        let model = created().apply(&send("x", Some("k"), "m1"));
        assert_eq!(
            model.expect(&send("x", Some("k"), "m2")),
            Expect::Replay(Mid::Known("m1".into()))
        );
        assert_eq!(model.expect(&send("y", Some("k"), "m2")), Expect::KeyConflict);
        let drained = model.apply(&Op::DrainHead { id: "s".into() });
        assert!(drained.sessions["s"].keys[&("op".into(), "k".into())].settled);
        let replayed = drained.apply(&send("x", Some("k"), "m2"));
        assert!(replayed.sessions["s"].owed.is_empty(), "a settled replay is inert");
    }

    #[test]
    fn another_sender_under_the_same_key_is_a_conflict() {
        // Found by conformance: the sender is part of the payload.
        let model = created().apply(&send("x", Some("k"), "m1"));
        let mut other = send("x", Some("k"), "m2");
        if let Op::Send { from, .. } = &mut other {
            *from = Some("someone".into());
        }
        assert_eq!(model.expect(&other), Expect::KeyConflict);
    }

    #[test]
    fn interrupted_send_allows_three_states() {
        let model = created();
        let candidates = model.crash_candidates(&send("x", None, "m1"));
        assert_eq!(candidates.len(), 3);
        let mut observed = model.apply(&send("x", None, "real-mid"));
        assert!(candidates.iter().any(|c| c.admits(&observed)));
        observed.sessions.get_mut("s").unwrap().owed.push(Owed {
            mid: Mid::Known("other".into()),
            text: "x".into(),
            from: None,
            keyed: false,
        });
        assert!(
            !candidates.iter().any(|c| c.admits(&observed)),
            "a second owed copy is not allowed"
        );
    }

    #[test]
    fn lifecycle_logs_moves_only() {
        let model = created();
        let active = Triple::new("active", None, None);
        let moved = model.apply(&Op::Lifecycle { id: "s".into(), triple: active.clone() });
        let same = moved.apply(&Op::Lifecycle { id: "s".into(), triple: active });
        assert_eq!(moved.sessions["s"].events.len(), 1);
        assert_eq!(same, moved);
    }
}
