//! The oracle: judge a recovered image against what was acknowledged (DESIGN.md section 7).
//!
//! 1. Acceptance: every acknowledged send is in the log, and owed, settled or delivered.
//! 2. Same-key replay: retrying the in-flight keyed send yields exactly one `sent` line for the
//!    key, the original mid if it had been appended, and the debt restored if owed.
//! 3. Fail-closed drain: no adapter call for a message without a sent line, with bytes that
//!    differ from its receipt, or already settled (checked at every call, see `run`).
//! 4. Append-only: segment bytes acknowledged before the crash are still there (a prefix of the
//!    newest segment, the whole of a sealed one).
//! 5. Lifecycle completeness: the record's public triple is the last logged move (or the
//!    creation triple), and no move is logged twice in a row.
//! 6. Close atomicity: a session is fully open or fully closed.
//! 7. Model refinement: the recovered public state is one the model allows.
//! 8. Activity index: a reader (the session index) that folded each log up to the crash, synced
//!    or not, and folds on from its watermark after recovery and the continued workload, sees
//!    exactly the log's events, and its stored last activity equals the in-log projection.
//!
//! This module only judges; `phase` drives recovery and the continued work and calls it.

use std::collections::BTreeMap;

use faultfs::Fs;

use spex_engine::Store;
use spex_model::{self as model, Mid, Model};

use super::decode;
use super::run::{Answer, Execution, begin, hash, sid};
use super::scenario::{OPERATION, Scenario, Step};

/// The oracle's rules, as every violation of one begins.
pub const RULES: [&str; 8] = [
    "rule 1 (acceptance)",
    "rule 2 (same-key replay)",
    "rule 3 (fail-closed drain)",
    "rule 4 (append-only)",
    "rule 5 (lifecycle completeness)",
    "rule 6 (close atomicity)",
    "rule 7 (model refinement)",
    "rule 8 (activity index)",
];

/// The rules that `messages` (one violation's) name, in rule order; none for a violation of
/// the harness's other checks (an error where none is allowed, an answer no state expects).
pub fn rules_named(messages: &[String]) -> Vec<&'static str> {
    RULES
        .into_iter()
        .filter(|rule| messages.iter().any(|message| message.starts_with(rule)))
        .collect()
}

/// Projects the recovered store onto the model's public state, read with the oracle's own
/// decoder (`decode`), not the engine's.
pub(crate) fn project<F: Fs>(store: &Store<F>, run: &Execution) -> Result<Model, String> {
    let fs = store.fs();
    let root = store.layout().root();
    let mut observed = Model::default();
    for id in run.created.keys() {
        if fs.exists(&root.join(".revoked-senders").join(id)).map_err(|e| e.to_string())? {
            observed.closed.insert(id.clone());
        }
    }
    for id in decode::sessions(fs, root)? {
        let Some(record) = decode::record(fs, root, &id)? else { continue };
        let lines = decode::lines(fs, root, &id)?;
        let (events, raw) = events_of(&lines);
        let owed = decode::queue(fs, root, &id)?
            .into_iter()
            .map(|entry| {
                let text = match raw.get(&entry.mid) {
                    Some(text) if entry.text.starts_with(text.as_str()) => text.clone(),
                    Some(_) => {
                        format!("<owed text of {} does not start with its logged text>", entry.mid)
                    }
                    None => format!("<owed {} without a sent line>", entry.mid),
                };
                model::Owed {
                    mid: Mid::Known(entry.mid),
                    text,
                    from: entry.from,
                    keyed: entry.keyed,
                }
            })
            .collect();
        let keys = keys_of(run, &id, &lines);
        let retired = match &record.worktree {
            Some(worktree) => {
                !fs.exists(std::path::Path::new(worktree)).map_err(|e| e.to_string())?
            }
            None => false,
        };
        observed.sessions.insert(
            id.clone(),
            model::Session {
                triple: model::Triple::new(
                    &record.status,
                    record.proposal.as_deref(),
                    record.note.as_deref(),
                ),
                events,
                owed,
                keys,
                archived: record.archived,
                retired,
                launching: record.launching.map(|(status, proposal, note, archived)| {
                    model::Launch {
                        triple: model::Triple::new(&status, proposal.as_deref(), note.as_deref()),
                        archived,
                    }
                }),
            },
        );
    }
    Ok(observed)
}

/// The public events of a session's decoded log, and each message's raw text by mid.
fn events_of(lines: &[decode::Line]) -> (Vec<model::Event>, BTreeMap<String, String>) {
    let mut raw = BTreeMap::new();
    let mut events = Vec::new();
    for line in lines {
        match line {
            decode::Line::Status { status, proposal, note } => events.push(model::Event::Status(
                model::Triple::new(status, proposal.as_deref(), note.as_deref()),
            )),
            decode::Line::Sent { mid, text, from, .. } => {
                raw.insert(mid.clone(), text.clone());
                events.push(model::Event::Sent {
                    mid: Mid::Known(mid.clone()),
                    text: text.clone(),
                    from: from.clone(),
                });
            }
            decode::Line::Settled { .. } => {}
        }
    }
    (events, raw)
}

/// What the decoded log says of each key the run sent to session `id`: the first receipt's
/// message and whether it was settled.
fn keys_of(
    run: &Execution,
    id: &str,
    lines: &[decode::Line],
) -> BTreeMap<(String, String), model::KeyState> {
    let mut keys = BTreeMap::new();
    for (session, key) in &run.keys {
        if session != id {
            continue;
        }
        let digest = decode::request_digest(OPERATION, key);
        let found = lines.iter().find_map(|line| match line {
            decode::Line::Sent { mid, text, from, receipt: Some(receipt) }
                if receipt.request_digest == digest =>
            {
                Some((mid.clone(), text.clone(), from.clone()))
            }
            _ => None,
        });
        if let Some((mid, text, from)) = found {
            let settled = lines.iter().any(|line| {
                matches!(line, decode::Line::Settled { request_digest, mid: m } if *request_digest == digest && *m == mid)
            });
            keys.insert(
                (OPERATION.to_owned(), key.clone()),
                model::KeyState { mid: Mid::Known(mid), text, from, settled },
            );
        }
    }
    keys
}

/// What the oracle reads of a recovered store before it judges it against a run: the
/// projection, the engine's receipt lookups, the segments and what the close check looks at.
/// It is read for every session and key the scenario may create or send, not only the run's,
/// so that it is the same whichever run the machine is judged against: a last phase's
/// continued work runs once per machine and its reads are judged against each run apart
/// (`phase::Worked`). Reading more than a run needs is reading files the judgement reads
/// anyway (every session's log, queue and receipt index), or names that are absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The public state, with every scenario session's revocation and every scenario key.
    projection: Model,
    /// `Store::receipt`'s answer for each scenario key of an open session: (mid, settled).
    receipts: BTreeMap<(String, String), Result<Found, String>>,
    /// Every file in a session's timeline directory that reads, by its path from the root.
    segments: BTreeMap<String, Vec<u8>>,
    /// The close ledger's ids.
    ledger: Result<Vec<String>, String>,
    /// What exists of each scenario session, for the close check.
    presence: BTreeMap<String, Presence>,
}

impl Seen {
    /// The open sessions read (those with a record).
    pub(crate) fn sessions(&self) -> impl Iterator<Item = &String> {
        self.projection.sessions.keys()
    }
}

/// What `Store::receipt` found of one key: (mid, settled), or nothing.
type Found = Option<(Mid, bool)>;

/// What exists of one session: its directory, record, revocation and close marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Presence {
    dir: bool,
    record: bool,
    revoked: bool,
    closing: bool,
}

/// Every session `scenario` may create and every key it may send, as a run that began every
/// step holds them.
fn everything(scenario: &Scenario) -> Execution {
    let mut all = Execution::default();
    for step in &scenario.steps {
        begin(&mut all, step);
    }
    all
}

/// The public state of `store` as [`project`] reads it for every session and key of
/// `scenario`; [`restrict`] gives what it reads for one run.
pub(crate) fn project_all<F: Fs>(store: &Store<F>, scenario: &Scenario) -> Result<Model, String> {
    project(store, &everything(scenario))
}

/// What [`project`] reads for `run`, out of what it read for every session and key of the
/// scenario: the revocations of the sessions the run created, the keys the run sent.
fn restrict(all: &Model, run: &Execution) -> Model {
    let mut model = all.clone();
    model.closed.retain(|id| run.created.contains_key(id));
    for (id, session) in &mut model.sessions {
        session.keys.retain(|(_, key), _| {
            run.keys.iter().any(|(session, sent)| session == id && sent == key)
        });
    }
    debug_assert!(model.sessions.len() == all.sessions.len(), "a run restricts no session away");
    model
}

/// Reads what the oracle judges a recovered store by (see [`Seen`]); an error when the store
/// cannot be projected.
pub(crate) fn see<F: Fs>(store: &Store<F>, scenario: &Scenario) -> Result<Seen, String> {
    let all = everything(scenario);
    let projection = project(store, &all)?;
    let mut receipts = BTreeMap::new();
    for (id, key) in &all.keys {
        if !projection.sessions.contains_key(id) {
            continue;
        }
        let digest = decode::request_digest(OPERATION, key);
        let found = store
            .receipt(&sid(id), OPERATION, &digest)
            .map(|found| found.map(|known| (Mid::Known(known.mid), known.settled)))
            .map_err(|error| error.to_string());
        receipts.insert((id.clone(), key.clone()), found);
    }
    let segments = timeline_files(store.fs(), store.layout()).into_iter().collect();
    let ledger = decode::ledger_ids(store.fs(), store.layout().root());
    let exists = |path: &std::path::Path| store.fs().exists(path).unwrap_or(false);
    let presence = all
        .created
        .keys()
        .map(|id| {
            let session = sid(id);
            let layout = store.layout();
            let presence = Presence {
                dir: exists(&layout.session_dir(&session)),
                record: exists(&layout.record(&session)),
                revoked: exists(&layout.revoked(&session)),
                closing: exists(&layout.closing(&session)),
            };
            (id.clone(), presence)
        })
        .collect();
    Ok(Seen { projection, receipts, segments, ledger, presence })
}

/// Every file in a session's timeline directory that reads, with its path from the root
/// (`sessions/<id>/timeline/<name>`) and bytes.
pub(crate) fn timeline_files<F: Fs>(
    fs: &F,
    layout: &spex_engine::layout::Layout,
) -> Vec<(String, Vec<u8>)> {
    let sessions = layout.sessions_dir();
    let mut files = Vec::new();
    for session in fs.read_dir(&sessions).unwrap_or_default() {
        let timeline = sessions.join(&session.name).join("timeline");
        for segment in fs.read_dir(&timeline).unwrap_or_default() {
            if let Ok(bytes) = fs.read(&timeline.join(&segment.name)) {
                let relative = format!("sessions/{}/timeline/{}", session.name, segment.name);
                files.push((relative, bytes));
            }
        }
    }
    files
}

/// Checks a store rebooted from a crash image, opened and recovered: the violations, and the
/// state the store holds (`None` when it cannot be read). The checks only read, so the state
/// is still the store's when they return.
pub(crate) fn check_recovered<F: Fs>(
    store: &Store<F>,
    scenario: &Scenario,
    run: &Execution,
    allowed: &[Model],
) -> (Vec<String>, Option<Model>) {
    judge_seen(&see(store, scenario), run, allowed)
}

/// [`check_recovered`]'s judgement of what it read (`seen`) against `run`.
pub(crate) fn judge_seen(
    seen: &Result<Seen, String>,
    run: &Execution,
    allowed: &[Model],
) -> (Vec<String>, Option<Model>) {
    let mut violations = Vec::new();
    let seen = match seen {
        Ok(seen) => seen,
        Err(error) => {
            violations.push(format!("the recovered store is unreadable: {error}"));
            return (violations, None);
        }
    };
    let observed = restrict(&seen.projection, run);
    if !allowed.iter().any(|candidate| candidate.admits(&observed)) {
        violations.push(format!(
            "rule 7 (model refinement): the recovered state is none of the {} the model allows: {}",
            allowed.len(),
            describe(&observed)
        ));
        if std::env::var_os("SPEX_DEBUG_RULE7").is_some() {
            eprintln!("observed {observed:#?}\nallowed {allowed:#?}");
        }
    }
    check_acceptance(&observed, run, &run.delivered, &mut violations);
    check_receipts(seen, run, &observed, &mut violations);
    check_append_only(seen, run, &mut violations);
    check_lifecycle(run, &observed, &mut violations);
    check_close(seen, run, &mut violations);
    (violations, Some(observed))
}

/// Rule 2, as a reader sees it: the engine's lock-free receipt lookup (`Store::receipt`, what a
/// caller asks before retrying) answers, for every key the run used on an open session, what
/// the oracle's own decoding of the log holds: the same mid and settlement, or nothing.
fn check_receipts(seen: &Seen, run: &Execution, observed: &Model, violations: &mut Vec<String>) {
    for (id, key) in &run.keys {
        let Some(session) = observed.sessions.get(id) else { continue };
        let expected = session.keys.get(&(OPERATION.to_owned(), key.clone()));
        let Some(found) = seen.receipts.get(&(id.clone(), key.clone())) else {
            unreachable!("every key of a run is a key of its scenario, looked up on open sessions")
        };
        let found = match found {
            Ok(found) => found,
            Err(error) => {
                violations.push(format!(
                    "rule 2 (same-key replay): the receipt lookup of {id}/{key} failed: {error}"
                ));
                continue;
            }
        };
        let logged = expected.map(|state| (state.mid.clone(), state.settled));
        if *found != logged {
            violations.push(format!(
                "rule 2 (same-key replay): the receipt lookup of {id}/{key} answers {found:?}, \
                 the log holds {logged:?} (mid, settled)"
            ));
        }
    }
}

/// What a keyed retry left, read right after it: the mids owed to its session, and how many
/// sent lines of its log carry its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    owed: Vec<String>,
    keyed_lines: usize,
}

/// Reads what [`check_retry`] judges a keyed retry `step` by, right after it ran (`None` for a
/// step that is no keyed send).
pub(crate) fn probe<F: Fs>(store: &Store<F>, step: &Step) -> Option<Probe> {
    let Step::Send { to, key: Some(key), .. } = step else { return None };
    let owed = store
        .queue(&sid(to))
        .map(|queue| queue.into_iter().map(|entry| entry.mid).collect())
        .unwrap_or_default();
    let digest = decode::request_digest(OPERATION, key);
    let keyed_lines = decode::lines(store.fs(), store.layout().root(), to)
        .map(|lines| {
            lines
                .iter()
                .filter(|line| matches!(line, decode::Line::Sent { receipt: Some(r), .. } if r.request_digest == digest))
                .count()
        })
        .unwrap_or(0);
    Some(Probe { owed, keyed_lines })
}

/// Rule 2, for a retry of the crashed keyed send after recovery: `before` is the state it found,
/// `answer` what the engine said (an error as it printed), `probe` what it left.
pub(crate) fn check_retry(
    before: &Model,
    step: &Step,
    answer: &Result<Answer, String>,
    probe: Option<&Probe>,
    violations: &mut Vec<String>,
) {
    let Step::Send { to, text, from, key: Some(key) } = step else { return };
    let Some(probe) = probe else { unreachable!("a keyed retry is probed after it runs") };
    let prior = before
        .sessions
        .get(*to)
        .and_then(|session| session.keys.get(&(OPERATION.to_owned(), (*key).to_owned())).cloned());
    match answer {
        // The sender is part of the payload: the same key from another sender is a conflict.
        Ok(Answer::Refused(_))
            if prior.as_ref().is_some_and(|p| p.text != *text || p.from.as_deref() != *from) => {}
        Ok(Answer::Refused(_)) if !before.sessions.contains_key(*to) => {}
        // A closed sender is refused before any key is looked at, replay or not (the model's
        // `expect`): its close revoked it.
        Ok(Answer::Refused(_)) if from.is_some_and(|sender| before.closed.contains(sender)) => {}
        Ok(Answer::Refused(refusal)) => {
            violations.push(format!("rule 2 (same-key replay): the retry was refused: {refusal}"))
        }
        Err(error) => {
            violations.push(format!("rule 2 (same-key replay): the retry failed: {error}"))
        }
        Ok(Answer::Accepted { mid, .. }) => {
            if let Some(prior) = &prior {
                if Mid::Known(mid.clone()) != prior.mid {
                    violations.push(format!(
                        "rule 2 (same-key replay): the retry answered {mid} instead of the original {:?}",
                        prior.mid
                    ));
                }
                let owed = probe.owed.contains(mid);
                if !prior.settled && !owed {
                    violations.push(format!(
                        "rule 2 (same-key replay): {mid} is neither settled nor owed after the retry"
                    ));
                }
            }
            let count = probe.keyed_lines;
            if count != 1 {
                violations.push(format!(
                    "rule 2 (same-key replay): {count} sent lines for key {key:?} after the retry"
                ));
            }
        }
        Ok(other) => {
            violations.push(format!("rule 2 (same-key replay): the retry answered {other:?}"))
        }
    }
}

/// After the continued work drained everything (`after`: the store then, as [`project_all`]
/// read it): nothing acknowledged is lost, nothing is owed.
pub(crate) fn check_drained(
    after: &Result<Model, String>,
    run: &Execution,
    violations: &mut Vec<String>,
) {
    if let Ok(after) = after {
        let after = restrict(after, run);
        check_acceptance(&after, run, &run.delivered, violations);
        for (id, session) in &after.sessions {
            if !session.owed.is_empty() {
                violations.push(format!(
                    "{} message(s) still owed to {id} after a full drain",
                    session.owed.len()
                ));
            }
        }
    }
}

/// Rule 8: folding on from the pre-crash watermark gives the log's events and activity.
pub(crate) fn check_activity_index<F: Fs>(
    store: &Store<F>,
    run: &Execution,
    violations: &mut Vec<String>,
) {
    for (id, (mark, before)) in &run.watermarks {
        let all = match store.events(&sid(id)) {
            Ok(all) => all,
            Err(spex_engine::Error::NoSuchSession { .. }) => continue,
            Err(error) => {
                violations.push(format!("rule 8 (activity index): {id} is unreadable: {error}"));
                continue;
            }
        };
        let folded = match spex_index::fold(store, &sid(id), Some(mark)) {
            Ok(folded) => folded,
            Err(error) => {
                violations.push(format!(
                    "rule 8 (activity index): folding {id} from its watermark failed: {error}"
                ));
                continue;
            }
        };
        let seen: Vec<&spex_engine::Event> = if folded.reset {
            folded.events.iter().collect()
        } else {
            before.iter().chain(&folded.events).collect()
        };
        if seen != all.iter().collect::<Vec<_>>() {
            let first = seen
                .iter()
                .zip(&all)
                .position(|(a, b)| *a != b)
                .unwrap_or(seen.len().min(all.len()));
            violations.push(format!(
                "rule 8 (activity index): a reader folding {id} from its watermark (cursor {}, \
                 {}trusted) sees {} events, the log holds {}; first difference at event {first}: \
                 {:?} vs {:?}",
                mark.cursor,
                if folded.reset { "not " } else { "" },
                seen.len(),
                all.len(),
                seen.get(first),
                all.get(first),
            ));
        }
        let projected = spex_engine::timeline::activity::last_activity(&all);
        if folded.watermark.last_activity.as_deref() != projected {
            violations.push(format!(
                "rule 8 (activity index): stored last activity of {id} is {:?}, the log says {:?}",
                folded.watermark.last_activity, projected
            ));
        }
    }
}

fn describe(observed: &Model) -> String {
    let sessions: Vec<String> = observed
        .sessions
        .iter()
        .map(|(id, s)| {
            format!(
                "{id}: {} events, {} owed, status {}, {} keys{}",
                s.events.len(),
                s.owed.len(),
                s.triple.status,
                s.keys.len(),
                if s.archived { ", archived" } else { "" }
            )
        })
        .collect();
    format!("[{}] closed {:?}", sessions.join("; "), observed.closed)
}

/// Rule 1.
fn check_acceptance(
    observed: &Model,
    run: &Execution,
    delivered: &[String],
    violations: &mut Vec<String>,
) {
    for (to, mid, from) in &run.acked {
        let Some(session) = observed.sessions.get(to) else { continue };
        // A closed sender's debt is dropped by design; its line must still be there.
        let revoked = from.as_ref().is_some_and(|from| observed.closed.contains(from));
        let known = Mid::Known(mid.clone());
        let logged = session
            .events
            .iter()
            .any(|event| matches!(event, model::Event::Sent { mid: m, .. } if *m == known));
        if !logged {
            violations
                .push(format!("rule 1 (acceptance): acknowledged {mid} is not in {to}'s log"));
            continue;
        }
        let owed = session.owed.iter().any(|owed| owed.mid == known);
        let settled = session.keys.values().any(|key| key.mid == known && key.settled);
        let handed = delivered.iter().any(|d| d == mid);
        if !(owed || settled || handed || revoked) {
            violations.push(format!(
                "rule 1 (acceptance): acknowledged {mid} is neither owed, settled nor delivered"
            ));
        }
    }
}

/// Rule 4.
fn check_append_only(seen: &Seen, run: &Execution, violations: &mut Vec<String>) {
    for (path, snapshot) in &run.segments {
        let Some(now) = seen.segments.get(path) else {
            // A segment of a closed session is gone with it; otherwise it was lost.
            let closed =
                run.model.closed.iter().any(|id| path.starts_with(&format!("sessions/{id}/")));
            if !closed && !run_closes_in_flight(run, path) {
                violations
                    .push(format!("rule 4 (append-only): acknowledged segment {path} is gone"));
            }
            continue;
        };
        let intact = now.len() as u64 >= snapshot.len
            && hash(&now[..snapshot.len as usize]) == snapshot.sha256
            && (snapshot.newest || now.len() as u64 == snapshot.len);
        if !intact {
            violations.push(format!(
                "rule 4 (append-only): {} segment {path} changed ({} acknowledged bytes, {} now)",
                if snapshot.newest { "newest" } else { "sealed" },
                snapshot.len,
                now.len()
            ));
        }
    }
}

/// Whether the step in flight is the close of the session owning `path`.
fn run_closes_in_flight(run: &Execution, path: &str) -> bool {
    run.closing_in_flight.as_ref().is_some_and(|id| path.starts_with(&format!("sessions/{id}/")))
}

/// Rule 5.
fn check_lifecycle(run: &Execution, observed: &Model, violations: &mut Vec<String>) {
    for (id, session) in &observed.sessions {
        let statuses: Vec<&model::Triple> = session
            .events
            .iter()
            .filter_map(|event| match event {
                model::Event::Status(triple) => Some(triple),
                model::Event::Sent { .. } => None,
            })
            .collect();
        let expected = statuses.last().copied().or_else(|| run.created.get(id));
        if let Some(expected) = expected
            && *expected != session.triple
        {
            violations.push(format!(
                "rule 5 (lifecycle completeness): {id}'s record shows {:?} but its last logged move is {:?}",
                session.triple, expected
            ));
        }
        if statuses.windows(2).any(|pair| pair[0] == pair[1]) {
            violations.push(format!(
                "rule 5 (lifecycle completeness): {id} logs the same move twice in a row"
            ));
        }
    }
}

/// Rule 6.
fn check_close(seen: &Seen, run: &Execution, violations: &mut Vec<String>) {
    let ledger = match &seen.ledger {
        Ok(ids) => ids,
        Err(reason) => {
            violations.push(format!("rule 6 (close atomicity): the close ledger: {reason}"));
            return;
        }
    };
    for id in run.created.keys() {
        let Some(&Presence { dir, record, revoked, closing }) = seen.presence.get(id) else {
            unreachable!("every session a run created is one of its scenario")
        };
        let in_ledger = ledger.iter().any(|closed| closed == id);
        let open = dir && record && !revoked && !closing && !in_ledger;
        let closed = !dir && revoked && !closing && in_ledger;
        // A create that never completed leaves nothing (or an empty directory) behind.
        let never_created = !record && !revoked && !in_ledger && !closing;
        if !(open || closed || never_created) {
            violations.push(format!(
                "rule 6 (close atomicity): {id} is half closed (dir {dir}, record {record}, revoked {revoked}, closing {closing}, ledger {in_ledger})"
            ));
        }
    }
}
