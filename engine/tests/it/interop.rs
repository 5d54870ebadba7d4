//! Interoperability with stores the existing TypeScript spex wrote: the corpus in
//! `../shared/interop` (its README describes every case), read as the existing implementation
//! reads it, and continued (sends, key replays, drains, lifecycle writes, archive, close) with
//! bytes the existing implementation accepts. Every test works on a copy of the corpus.
//!
//! Deviations from the existing implementation's answers, each deliberate:
//! - `b-midtorn`: the complete line glued onto a torn fragment is read (the existing reader
//!   drops it), and the fragment is noted as damage.
//! - `knownDefects`: the existing tail read splits UTF-8 across 64 KiB blocks; the correct value
//!   is compared instead.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(clippy::panic, reason = "a corpus mismatch should panic naming the case")]
#![expect(
    clippy::disallowed_methods,
    reason = "the test copies the corpus with real files, outside the engine"
)]

use crate::common;

use common::corpus::snapshot;

use common::corpus::{copy_tree, corpus};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use spex_engine::faultfs::{Fs, RealFs};
use spex_engine::record::GOVERNED_KEYS;
use spex_engine::{
    DamageKind, Error, Event, Key, Lifecycle, SendRequest, SessionId, Status, Store, Triple,
};

/// The placeholder of every session's worktree in the corpus.
const WORKTREE: &str = "/spex-corpus/worktree";

/// A writable copy of the corpus store, with the worktree placeholder replaced by a real
/// directory in every record (`worktree` is that directory's path).
struct Copy {
    _dir: tempfile::TempDir,
    root: PathBuf,
    worktree: String,
}

fn copy() -> Copy {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    copy_tree(&corpus().join("stores/upstream"), &root);
    let worktree = dir.path().join("worktree");
    std::fs::create_dir_all(&worktree).unwrap();
    let worktree = worktree.to_str().unwrap().to_owned();
    for entry in std::fs::read_dir(root.join("sessions")).unwrap() {
        let record = entry.unwrap().path().join("session.json");
        if let Ok(text) = std::fs::read_to_string(&record) {
            let placeholder = serde_json::to_string(WORKTREE).unwrap();
            let real = serde_json::to_string(&worktree).unwrap();
            std::fs::write(&record, text.replace(&placeholder, &real)).unwrap();
        }
    }
    Copy { _dir: dir, root, worktree }
}

fn open(root: &Path) -> Store<RealFs> {
    Store::open(
        RealFs::new(),
        root,
        Arc::new(spex_engine::env::ManualClock::new(1_796_200_000_000)),
        Arc::new(spex_engine::env::SeededIds::new(12)),
        common::config(),
    )
    .unwrap()
}

/// Every expected session file, with its parsed contents.
fn cases() -> Vec<(String, Value)> {
    let mut cases: Vec<(String, Value)> = std::fs::read_dir(corpus().join("expected"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().unwrap().to_str().unwrap().starts_with("b-"))
        .map(|path| {
            let value: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            (value["session"].as_str().unwrap().to_owned(), value)
        })
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(cases.len(), 23, "the corpus has 22 stored sessions and the closed one");
    cases
}

/// `value` with every string equal to the real worktree replaced by the placeholder.
fn placeholder(value: Value, worktree: &str) -> Value {
    match value {
        Value::String(text) if text == worktree => Value::String(WORKTREE.to_owned()),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|item| placeholder(item, worktree)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter().map(|(key, value)| (key, placeholder(value, worktree))).collect(),
        ),
        other => other,
    }
}

/// An event as the existing implementation's `timelineEvents` returns it (no display word).
fn plain(event: &Event) -> Value {
    let mut value = event.to_public_json();
    value.as_object_mut().unwrap().shift_remove("display");
    value
}

/// The expected value of `field`, or its `correct` value where the corpus records a defect.
fn expected<'a>(case: &'a Value, field: &str, pointer: &str) -> &'a Value {
    case["knownDefects"]
        .get(field)
        .map_or_else(|| case.pointer(pointer).unwrap(), |defect| &defect["correct"])
}

#[test]
fn every_case_reads_as_the_existing_implementation_reads_it() {
    let copy = copy();
    let store = open(&copy.root);
    for (name, case) in cases() {
        let id = SessionId::new(&name).unwrap();
        let record = match store.record(&id) {
            Ok(record) => Some(record),
            Err(Error::NoSuchSession { .. }) => None,
            Err(error) => panic!("{name}: {error}"),
        };

        // The whole log.
        let events: Vec<Value> = if record.is_some() {
            store.events(&id).unwrap().iter().map(plain).collect()
        } else {
            Vec::new()
        };
        let mut want = case["timelineEvents"].as_array().unwrap().clone();
        if name == "b-midtorn" {
            // The line glued onto the torn fragment is recovered (see the header).
            let glued = events
                .iter()
                .find(|event| event["text"] == "after the torn line (glued to it)")
                .unwrap_or_else(|| panic!("b-midtorn: the glued line is read: {events:?}"))
                .clone();
            want.insert(1, glued);
        }
        assert_eq!(events, want, "{name}: timelineEvents");

        // The tail reads.
        for n in ["1", "2", "5", "500"] {
            if record.is_none() {
                break;
            }
            let tail: Vec<Value> =
                store.tail(&id, n.parse().unwrap()).unwrap().iter().map(plain).collect();
            let want = expected(&case, &format!("timelineTail.{n}"), &format!("/timelineTail/{n}"));
            let want = want.as_array().unwrap();
            if name == "b-midtorn" {
                // The corrected log (one more event than the existing reader's): its last N.
                let n: usize = n.parse().unwrap();
                assert_eq!(tail, events[events.len().saturating_sub(n)..], "{name}: tail {n}");
            } else {
                assert_eq!(&tail, want, "{name}: timelineTail.{n}");
            }
        }

        // The HTTP projection: the tail with display words, for governed records only.
        let read_timeline = match &record {
            Some(record) if record.governed() => {
                let events: Vec<Value> =
                    store.tail(&id, 500).unwrap().iter().map(Event::to_public_json).collect();
                json!({ "events": events })
            }
            _ => Value::Null,
        };
        if name == "b-midtorn" {
            let mut plain_events = read_timeline["events"].as_array().unwrap().clone();
            for event in &mut plain_events {
                event.as_object_mut().unwrap().shift_remove("display");
            }
            assert_eq!(plain_events, events, "{name}: readTimeline");
        } else {
            assert_eq!(read_timeline, *expected(&case, "readTimeline", "/readTimeline"), "{name}");
        }

        // The record, as a public reader sees it.
        let public = match &record {
            Some(record) => json!({
                "kind": "ok",
                "raw": placeholder(Value::Object(record.public_fields()), &copy.worktree),
                "liveness": if record.launch_pending().is_some() { json!("offline") } else { Value::Null },
            }),
            None => json!({ "kind": "absent" }),
        };
        assert_eq!(public, case["publicRecord"], "{name}: publicRecord");

        // The typed record.
        if let Some(record) = &record {
            let typed = &case["record"];
            let triple = record.public_triple();
            assert_eq!(triple.status.name(), typed["status"], "{name}: status");
            assert_eq!(json!(triple.proposal.map(|p| p.name())), typed["proposal"], "{name}");
            assert_eq!(json!(triple.note), typed["note"], "{name}: note");
            assert_eq!(json!(record.created_at_ms()), typed["createdAt"], "{name}: createdAt");
            assert_eq!(json!(record.launch_owner()), typed["launchOwner"], "{name}");
            assert_eq!(record.harness(), typed["harness"], "{name}: harness");
            assert_eq!(record.archived(), typed["archived"], "{name}: archived");
            assert_eq!(record.stopped(), typed["stopped"], "{name}: stopped");
            assert_eq!(
                json!(record.worktree().map(|path| placeholder(json!(path), &copy.worktree))),
                json!(typed["worktreePath"].as_str().filter(|path| !path.is_empty())),
                "{name}: worktree"
            );
        }

        // The delivery queue.
        let queue = if record.is_some() { store.queue(&id).unwrap() } else { Vec::new() };
        assert_eq!(json!(queue), case["pendingMessages"], "{name}: pendingMessages");
        assert_eq!(store.owes_delivery(&id).unwrap(), case["owesDelivery"], "{name}");

        // Keyed receipts.
        for lookup in case["sentDispatchReceipts"].as_array().unwrap() {
            let operation = lookup["operation"].as_str().unwrap();
            let digest = lookup["requestDigest"].as_str().unwrap();
            let known = store.receipt(&id, operation, digest).unwrap();
            let got = known.map(|known| {
                json!({
                    "mid": known.mid,
                    "payloadHash": known.receipt.payload_hash,
                    "delivery": known.receipt.delivery,
                    "delivered": known.settled,
                })
            });
            assert_eq!(json!(got), lookup["receipt"], "{name}: receipt of {operation}");
        }

        // The last human send and its reply channel.
        let last_human =
            store.events(&id).unwrap_or_default().into_iter().rev().find_map(|event| match event {
                Event::Sent(sent) if sent.from.is_none() => Some(sent),
                _ => None,
            });
        let via = last_human.as_ref().and_then(|sent| sent.reply_via.clone());
        assert_eq!(json!(via), case["lastHumanSendVia"], "{name}: lastHumanSendVia");
        let turn =
            last_human.as_ref().map(|sent| json!({"token": sent.mid, "acceptedAt": sent.ts}));
        assert_eq!(json!(turn), case["currentHumanTurn"], "{name}: currentHumanTurn");

        // Revocation and closure.
        let revoked = store.fs().exists(&store.layout().revoked(&id)).unwrap();
        assert_eq!(revoked, case["senderDeliveryRevoked"], "{name}");
        let closure =
            store.closure(&name).unwrap().map(|c| json!({"id": c.id, "closedAt": c.closed_at}));
        assert_eq!(json!(closure), case["findSessionClosure"], "{name}: findSessionClosure");
        if let Some(prefixes) = case.get("findSessionClosureByPrefix") {
            for (prefix, want) in prefixes.as_object().unwrap() {
                let closure = store
                    .closure(prefix)
                    .unwrap()
                    .map(|c| json!({"id": c.id, "closedAt": c.closed_at}));
                assert_eq!(json!(closure), *want, "{name}: closure by prefix {prefix}");
            }
        }
    }
}

#[test]
fn the_listing_holds_every_session_and_the_board_is_in_the_existing_order() {
    let copy = copy();
    let store = open(&copy.root);
    let board: Value =
        serde_json::from_slice(&std::fs::read(corpus().join("expected/board.json")).unwrap())
            .unwrap();
    let mut listed: Vec<String> =
        store.list().unwrap().into_iter().map(|row| row.id.to_string()).collect();
    listed.sort();
    let mut every: Vec<String> =
        cases().into_iter().map(|(name, _)| name).filter(|name| name != "b-closed").collect();
    every.sort();
    assert_eq!(listed, every, "every stored session is listed");
    for (archived, field) in [(false, "listSessions"), (true, "listSessionsIncludeArchived")] {
        let rows: Vec<String> =
            store.board(archived).unwrap().into_iter().map(|row| row.id.to_string()).collect();
        assert_eq!(json!(rows), board[field], "{field}");
    }
}

#[test]
fn the_segment_bound_is_the_existing_implementations() {
    let table: Value = serde_json::from_slice(
        &std::fs::read(corpus().join("expected/segment-bytes-env.json")).unwrap(),
    )
    .unwrap();
    let rows = table["values"].as_array().unwrap_or_else(|| panic!("{table}"));
    assert!(!rows.is_empty());
    for row in rows {
        let env = row["env"].as_str();
        let bound = row["bound"].as_u64().unwrap();
        assert_eq!(spex_engine::layout::segment_bytes_from_env(env), bound, "{row}");
    }
}

#[test]
fn doctor_lists_exactly_the_damaged_cases() {
    let copy = copy();
    let store = open(&copy.root);
    let found = store.doctor(None).unwrap();
    let mut sessions: Vec<(String, &'static str)> = found
        .iter()
        .map(|damage| {
            let relative = damage.path.strip_prefix(copy.root.join("sessions")).unwrap();
            let session = relative.components().next().unwrap().as_os_str().to_str().unwrap();
            let kind = match damage.kind {
                DamageKind::GluedFragment { .. } => "glued",
                DamageKind::TornTail { .. } => "torn-tail",
                DamageKind::DamagedQueue { .. } => "queue",
                DamageKind::StaleStaging => "staging",
                DamageKind::Foreign { .. } => "foreign",
                DamageKind::Corrupt { .. } => "corrupt",
            };
            (session.to_owned(), kind)
        })
        .collect();
    sessions.sort();
    assert_eq!(
        sessions,
        [
            ("b-midtorn".to_owned(), "glued"),
            ("b-q-empty".to_owned(), "queue"),
            ("b-q-invalid".to_owned(), "queue"),
            ("b-q-object".to_owned(), "queue"),
            ("b-torntail".to_owned(), "torn-tail"),
        ],
        "{found:#?}"
    );
    let midtorn =
        found.iter().find(|d| matches!(d.kind, DamageKind::GluedFragment { .. })).unwrap();
    let segment = corpus().join("stores/upstream/sessions/b-midtorn/timeline/000000000001.ndjson");
    let first_line = std::fs::read(segment).unwrap().iter().position(|&b| b == b'\n').unwrap();
    assert_eq!(midtorn.offset, first_line as u64 + 1, "the fragment follows the first line");
}

/// Checks `bytes` against the record schema of the corpus README: a governed record holds every
/// key of the projection in order (the optional ones only when set), with its types.
fn assert_upstream_record(bytes: &[u8], what: &str) {
    let text = std::str::from_utf8(bytes).unwrap();
    assert!(
        text.ends_with("}\n") && text.starts_with("{\n  \""),
        "{what}: two-space JSON + newline"
    );
    let value: Value = serde_json::from_str(text).unwrap();
    let map = value.as_object().unwrap();
    let keys: Vec<&str> = map.keys().map(String::as_str).collect();
    let want: Vec<&str> = GOVERNED_KEYS
        .into_iter()
        .filter(|key| !matches!(*key, "zcode_child_session_ids" | "base") || map.contains_key(*key))
        .collect();
    assert_eq!(keys, want, "{what}: keys in the projection's order");
    for (key, value) in map {
        let ok = match key.as_str() {
            "governed" | "stopped" | "archived" => value.is_boolean(),
            "merges" | "createdAt" => value.is_u64(),
            "sortkey" => value.is_number() || value == "",
            "launch_readiness_pending" => value == "" || value.is_object(),
            "zcode_child_session_ids" => value.is_array(),
            _ => value.is_string(),
        };
        assert!(ok, "{what}: {key} has the wrong type: {value}");
    }
    let status = map["status"].as_str().unwrap();
    assert!(
        Status::parse(status).is_some() || status == "launch-queued",
        "{what}: status {status}"
    );
    assert!(matches!(map["proposal"].as_str().unwrap(), "" | "merge" | "nothing" | "close"));
}

/// Every line of a log checked against the line formats of the corpus README.
fn assert_upstream_lines(store: &Store<RealFs>, id: &SessionId) {
    for line in store.lines(id).unwrap() {
        let bytes = line.encode();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        let kind = value["kind"].as_str().unwrap();
        let keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        match kind {
            "status" => assert_eq!(keys, ["ts", "kind", "status", "proposal", "note"]),
            "sent" => assert_eq!(&keys[..2], ["ts", "kind"]),
            "dispatch-settled" => {
                assert_eq!(keys, ["ts", "kind", "operation", "requestDigest", "mid"]);
            }
            other => panic!("unknown kind {other}"),
        }
    }
}

#[test]
fn continuations_write_what_the_existing_implementation_accepts() {
    let copy = copy();
    let store = open(&copy.root);
    let keys: Value =
        serde_json::from_slice(&std::fs::read(corpus().join("expected/keys.json")).unwrap())
            .unwrap();

    // Replays of keys the existing implementation accepted: the same mid, nothing written.
    for key in keys.as_array().unwrap().iter().filter(|key| key["scheme"] == "spex") {
        let id = SessionId::new(key["session"].as_str().unwrap()).unwrap();
        let before = store.lines(&id).unwrap().len();
        let request = SendRequest {
            text: key["text"].as_str().unwrap().to_owned(),
            from: key["from"].as_str().map(|from| SessionId::new(from).unwrap()),
            reply_via: key["replyVia"].as_str().map(|via| via.parse().unwrap()),
            key: Some(Key {
                operation: key["operation"].as_str().unwrap().to_owned(),
                key: key["key"].as_str().unwrap().to_owned(),
            }),
            ..SendRequest::default()
        };
        let accepted = store.send(&id, &request).unwrap();
        assert!(accepted.replayed, "{key}");
        assert_eq!(accepted.mid, key["mid"].as_str().unwrap(), "{key}");
        assert_eq!(store.lines(&id).unwrap().len(), before, "a replay writes no line: {key}");
    }

    // A plain send to every session with a sound queue; a damaged queue refuses, writing nothing.
    for (name, _) in cases() {
        if name == "b-closed" {
            continue;
        }
        let id = SessionId::new(&name).unwrap();
        let dir = store.layout().session_dir(&id);
        let before = snapshot(&dir);
        let result = store.send(
            &id,
            &SendRequest { text: format!("from spex to {name}"), ..SendRequest::default() },
        );
        if name.starts_with("b-q-") {
            let error = result.unwrap_err();
            assert!(
                matches!(&error, Error::Corrupt { path, .. } if path.ends_with("pending.json")),
                "{name}: {error}"
            );
            assert_eq!(snapshot(&dir), before, "{name}: a refused send writes nothing");
            continue;
        }
        let accepted = result.unwrap_or_else(|error| panic!("{name}: {error}"));
        assert!(!accepted.replayed);
        let last = store.tail(&id, 1).unwrap();
        assert!(
            matches!(&last[0], Event::Sent(sent) if sent.mid.as_deref() == Some(accepted.mid.as_str()))
        );
        assert_upstream_lines(&store, &id);
        let queue: Value =
            serde_json::from_slice(&store.fs().read(&store.layout().queue(&id)).unwrap()).unwrap();
        assert!(
            queue.as_array().unwrap().iter().any(|entry| entry["mid"] == accepted.mid.as_str())
        );
    }

    // b-roll continues at the existing implementation's bound: the new line goes where its
    // writer would put it.
    let roll = SessionId::new("b-roll").unwrap();
    assert!(store.fs().exists(&store.layout().segment(&roll, spex_engine::SegmentNo(17))).unwrap());

    // Drains of the existing implementation's queues.
    let mut recorder = common::Recorder::default();
    let pending = SessionId::new("b-pending").unwrap();
    let report = store.drain(&pending, &mut recorder).unwrap();
    assert_eq!(report.stopped, None, "{report:?}");
    assert_eq!(report.delivered.len(), 6, "five owed by the existing implementation, one by spex");
    let p1 = keys.as_array().unwrap().iter().find(|key| key["key"] == "p1").unwrap();
    let known = store
        .receipt(&pending, p1["operation"].as_str().unwrap(), p1["requestDigest"].as_str().unwrap())
        .unwrap()
        .unwrap();
    assert!(known.settled, "the keyed message is settled");
    assert!(!store.owes_delivery(&pending).unwrap(), "the drained queue file is removed");
    let keyed = SessionId::new("b-keyed").unwrap();
    let report = store.drain(&keyed, &mut common::Recorder::default()).unwrap();
    assert_eq!(report.stopped, None, "receipts of both key schemes match: {report:?}");
    let peer = SessionId::new("b-peer").unwrap();
    let report = store.drain(&peer, &mut common::Recorder::default()).unwrap();
    assert_eq!(report.dropped.len(), 1, "the closed sender's message is dropped: {report:?}");
    assert_upstream_lines(&store, &pending);

    // Lifecycle writes to records the existing implementation wrote.
    for name in ["b-life", "b-plain", "b-queued", "b-launching", "b-utf8"] {
        let id = SessionId::new(name).unwrap();
        store
            .append(
                &id,
                &Lifecycle::Set(Triple::new(
                    Status::Asking,
                    None,
                    Some(format!("spex asks {name}")),
                )),
            )
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        let bytes = store.fs().read(&store.layout().record(&id)).unwrap();
        assert_upstream_record(&bytes, name);
        let record = store.record(&id).unwrap();
        assert_eq!(
            record.public_triple().note.as_deref(),
            Some(format!("spex asks {name}").as_str())
        );
        assert!(record.launch_pending().is_none(), "{name}: the write ends a pending launch");
        assert_upstream_lines(&store, &id);
    }
    let queued = SessionId::new("b-queued").unwrap();
    assert_eq!(
        store.record(&queued).unwrap().fields()["launch_owner"],
        "",
        "leaving the queue clears the owner"
    );

    // Archive and close in the existing implementation's format.
    let plain = SessionId::new("b-plain").unwrap();
    store.archive(&plain).unwrap();
    let bytes = store.fs().read(&store.layout().record(&plain)).unwrap();
    assert_upstream_record(&bytes, "archived b-plain");
    let record = store.record(&plain).unwrap();
    assert_eq!(record.fields()["cold_proof"], "cold-v1|claude|b-plain|no-resident-ref");
    assert!(record.archived() && record.stopped());

    store.close(&peer).unwrap();
    let ledger =
        String::from_utf8(store.fs().read(&store.layout().close_ledger()).unwrap()).unwrap();
    let line: Value = serde_json::from_str(ledger.lines().last().unwrap()).unwrap();
    let keys: Vec<&str> = line.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["version", "action", "at", "source", "target"]);
    assert_eq!(line["action"], "close-authorized");
    assert_eq!(line["source"], json!({"kind": "user"}));
    assert_eq!(line["target"]["id"], "b-peer");
    assert_eq!(line["target"]["worktree"], copy.worktree.as_str());
    assert_eq!(line["target"]["harness"], "claude");
    assert_eq!(store.fs().read(&store.layout().revoked(&peer)).unwrap(), b"b-peer\n");
    let closure = store.closure("b-peer").unwrap().unwrap();
    assert_eq!(closure.closed_at, line["at"].as_str().unwrap());
    assert!(store.closure("b-").is_err(), "two closed sessions match the prefix");
}

#[test]
fn a_damaged_queue_is_repaired_from_what_is_left_and_what_the_log_proves() {
    let copy = copy();
    let store = open(&copy.root);
    let id = SessionId::new("b-q-invalid").unwrap();
    let repair = store.repair_queue(&id).unwrap();
    let kept = repair.kept.clone().unwrap();
    assert!(store.fs().exists(&kept).unwrap(), "the damaged file is kept beside");
    assert_eq!(repair.carried, 2, "{repair:?}");
    assert_eq!(store.queue(&id).unwrap().len(), 2);
    assert!(store.doctor(Some(&id)).unwrap().is_empty());
    // Sound now: writers accept it.
    store
        .send(&id, &SendRequest { text: "after repair".to_owned(), ..SendRequest::default() })
        .unwrap();
    assert_eq!(store.repair_queue(&id).unwrap(), spex_engine::QueueRepair::default());
}

#[test]
fn a_lost_or_replaced_segment_is_corruption_naming_it() {
    let copy = copy();
    let store = open(&copy.root);
    let roll = SessionId::new("b-roll").unwrap();
    let fifth = store.layout().segment(&roll, spex_engine::SegmentNo(5));
    std::fs::remove_file(&fifth).unwrap();
    let error = store.events(&roll).unwrap_err();
    assert!(matches!(&error, Error::Corrupt { path, .. } if *path == fifth), "{error}");
    assert!(store.tail(&roll, 1).is_err(), "a tail read refuses too");
    let third = store.layout().segment(&roll, spex_engine::SegmentNo(3));
    std::fs::remove_file(&third).unwrap();
    std::fs::create_dir(&third).unwrap();
    let error = store.events(&roll).unwrap_err();
    assert!(matches!(&error, Error::Corrupt { path, .. } if *path == third), "{error}");
    let found = store.doctor(Some(&roll)).unwrap();
    assert!(found.iter().any(|damage| damage.path == third && !damage.is_warning()), "{found:?}");
    // The listing still holds every session.
    assert_eq!(store.list().unwrap().len(), 22);
}

#[test]
fn a_command_that_refuses_has_written_nothing() {
    let copy = copy();
    let store = open(&copy.root);
    // A torn tail that a write would repair, in a session whose record is damaged: the send is
    // refused before the repair.
    let torn = SessionId::new("b-torntail").unwrap();
    std::fs::write(store.layout().record(&torn), b"{\"session_id\": ").unwrap();
    let dir = store.layout().session_dir(&torn);
    let before = snapshot(&dir);
    let error = store
        .send(&torn, &SendRequest { text: "refused".to_owned(), ..SendRequest::default() })
        .unwrap_err();
    assert!(
        matches!(&error, Error::Corrupt { path, .. } if path.ends_with("session.json")),
        "{error}"
    );
    assert_eq!(snapshot(&dir), before, "the torn tail is still there");
    // A damaged queue refuses a drain the same way.
    let empty = SessionId::new("b-q-empty").unwrap();
    let dir = store.layout().session_dir(&empty);
    let before = snapshot(&dir);
    assert!(matches!(
        store.drain(&empty, &mut common::Recorder::default()),
        Err(Error::Corrupt { .. })
    ));
    assert_eq!(snapshot(&dir), before);
    // The listing shows the damaged record as a row of its own.
    let rows = store.list().unwrap();
    let row = rows.iter().find(|row| row.id == torn).unwrap();
    assert!(row.corrupt.as_deref().is_some_and(|why| why.contains("session.json")), "{row:?}");
}
