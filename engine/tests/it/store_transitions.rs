//! Every transition and every error of the engine, on real files: send (unkeyed and keyed, with
//! replay, restore and conflict), drain (delivery, settlement, the fail-closed fence, revoked
//! senders, adapter failure), lifecycle writes (including launch readiness and retired
//! sessions), archive and close. These are the behaviours the crash sweeps then attack.

#![expect(
    clippy::disallowed_methods,
    reason = "the test prepares real files directly, outside the engine"
)]

use crate::common;

use common::{Recorder, config, id, queued, real_store};
use spex_engine::faultfs::Fs;
use spex_engine::reply::{NOTE_HINT, ReplyChannel, TERMINAL_HINT};
use spex_engine::timeline::Line;
use spex_engine::{DrainStop, Error, Event, Key, Lifecycle, Proposal, SendRequest, Status, Triple};

fn text(text: &str) -> SendRequest {
    SendRequest { text: text.to_owned(), ..SendRequest::default() }
}

fn keyed(text: &str, key: &str) -> SendRequest {
    SendRequest {
        text: text.to_owned(),
        key: Some(Key { operation: "merge".to_owned(), key: key.to_owned() }),
        ..SendRequest::default()
    }
}

#[test]
fn create_rejects_duplicates_and_bad_ids() {
    let (_dir, store) = real_store(config());
    let s = id("s1");
    store.create_session(&s, &queued(), None, None).unwrap();
    assert!(matches!(
        store.create_session(&s, &queued(), None, None),
        Err(Error::SessionExists { .. })
    ));
    for bad in ["../x", "a/b", "", ".git"] {
        assert!(
            matches!(spex_engine::SessionId::new(bad), Err(spex_engine::InvalidId { .. })),
            "{bad}"
        );
    }
    assert!(store.events(&s).unwrap().is_empty(), "creation appends no event");
    let record = store.fs().read(&store.layout().record(&s)).unwrap();
    assert!(
        record.starts_with(b"{\n  \"session_id\": \"s1\",\n  \"governed\": true,"),
        "pretty, 2-space"
    );
    assert!(record.ends_with(b"}\n"));
}

#[test]
fn attributes_that_are_not_texts_are_refused_before_anything_is_written() {
    let (_dir, store) = real_store(config());
    let s = id("s1");
    store.create_session(&s, &queued(), None, None).unwrap();
    let mut attributes = serde_json::Map::new();
    attributes.insert("priority".to_owned(), serde_json::json!(1));
    let request = SendRequest { attributes: Some(attributes), ..text("hello") };
    assert!(matches!(
        store.send(&s, &request),
        Err(Error::InvalidInput { what: "delivery attributes", .. })
    ));
    assert!(store.events(&s).unwrap().is_empty(), "nothing was logged");
    assert!(store.queue_file(&s).unwrap().entries.is_empty(), "nothing is owed");
    let mut texts = serde_json::Map::new();
    texts.insert("priority".to_owned(), serde_json::json!("high"));
    store.send(&s, &SendRequest { attributes: Some(texts), ..text("hello") }).unwrap();
    assert_eq!(store.queue_file(&s).unwrap().damage, None, "a queue of texts reads whole");
}

#[test]
fn an_adapter_spec_that_is_not_one_line_is_refused_before_anything_is_created() {
    let (_dir, store) = real_store(config());
    for spec in ["", "exec:cat\nstdout", "exec:cat\r", "exec:c\0at"] {
        let s = id("s1");
        assert!(
            matches!(
                store.create_session(&s, &queued(), Some(spec), None),
                Err(Error::InvalidInput { what: "adapter", .. })
            ),
            "{spec:?}"
        );
        assert!(!store.fs().exists(&store.layout().session_dir(&s)).unwrap(), "{spec:?}");
    }
}

#[test]
fn unkeyed_send_is_logged_raw_and_queued_composed() {
    let (_dir, store) = real_store(config());
    let (pane, headless) = (id("pane"), id("headless"));
    store.create_session(&pane, &queued(), Some("tmux:%1"), None).unwrap();
    store.create_session(&headless, &queued(), Some("exec:cat"), None).unwrap();

    let accepted = store.send(&pane, &text("hello")).unwrap();
    assert!(!accepted.replayed);
    let queue = store.queue(&pane).unwrap();
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0].text, "hello");
    assert_eq!(queue[0].mid, accepted.mid);

    store.send(&headless, &text("hi")).unwrap();
    let queue = store.queue(&headless).unwrap();
    assert_eq!(queue[0].text, format!("hi{NOTE_HINT}"), "headless targets default to note");
    let events = store.events(&headless).unwrap();
    let Event::Sent(sent) = &events[0] else { panic!("a sent event") };
    assert_eq!(sent.text, "hi", "the log records the raw text");
    assert_eq!(sent.reply_via.as_deref(), Some("note"));
}

#[test]
fn terminal_counter_hint_fires_once_after_human_note_sends() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), Some("tmux:%1"), None).unwrap();
    let note = SendRequest { reply_via: Some(ReplyChannel::Note), ..text("from the phone") };
    store.send(&s, &note).unwrap();
    let agent = SendRequest { from: Some(id("other")), ..text("agent says") };
    store.send(&s, &agent).unwrap();
    store.send(&s, &text("back at the desk")).unwrap();
    store.send(&s, &text("still here")).unwrap();
    let texts: Vec<String> = store.queue(&s).unwrap().into_iter().map(|entry| entry.text).collect();
    assert_eq!(
        texts,
        vec![
            format!("from the phone{NOTE_HINT}"),
            "agent says".to_owned(),
            format!("back at the desk{TERMINAL_HINT}"),
            "still here".to_owned(),
        ]
    );
}

#[test]
fn keyed_send_replays_restores_and_conflicts() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let first = store.send(&s, &keyed("merge it", "k1")).unwrap();
    let again = store.send(&s, &keyed("merge it", "k1")).unwrap();
    assert_eq!(
        (again.mid.as_str(), again.replayed, again.restored),
        (first.mid.as_str(), true, false)
    );
    assert_eq!(store.events(&s).unwrap().len(), 1, "exactly one sent line per key");
    assert_eq!(store.queue(&s).unwrap().len(), 1, "still owed once");

    // A different payload under the same key: a conflict, and nothing written.
    let log_before = store.lines(&s).unwrap();
    let queue_before = store.queue(&s).unwrap();
    assert!(matches!(
        store.send(&s, &keyed("something else", "k1")),
        Err(Error::KeyConflict { .. })
    ));
    assert_eq!(store.lines(&s).unwrap(), log_before);
    assert_eq!(store.queue(&s).unwrap(), queue_before);

    // The queue entry lost after acceptance (a crash between append and publish): the replay
    // restores it from the receipt's frozen delivery bytes.
    store
        .fs()
        .remove_file(&store.layout().queue(&s), spex_engine::faultfs::Boundary::new("test"))
        .unwrap();
    let restored = store.send(&s, &keyed("merge it", "k1")).unwrap();
    assert_eq!(
        (restored.mid.as_str(), restored.replayed, restored.restored),
        (first.mid.as_str(), true, true)
    );
    let queue = store.queue(&s).unwrap();
    assert_eq!(queue, queue_before, "restored byte for byte");

    // The raw key is never stored.
    let log = String::from_utf8(common::read(
        &store,
        &store.layout().segment(&s, spex_engine::SegmentNo(1)),
    ))
    .unwrap();
    assert!(!log.contains("k1"));
    assert!(log.contains("\"requestDigest\":\"") && log.contains("\"payloadHash\":\""));
}

#[test]
fn revoked_senders_are_refused_and_their_debt_dropped() {
    let (_dir, store) = real_store(config());
    let (target, sender) = (id("target"), id("sender"));
    store.create_session(&target, &queued(), None, None).unwrap();
    store.create_session(&sender, &queued(), None, None).unwrap();
    let from_sender = SendRequest { from: Some(sender.clone()), ..text("from the sender") };
    let owed = store.send(&target, &from_sender).unwrap();
    store.send(&target, &text("from a human")).unwrap();
    store.close(&sender).unwrap();

    let before = store.lines(&target).unwrap();
    assert!(matches!(store.send(&target, &from_sender), Err(Error::Revoked { .. })));
    assert_eq!(store.lines(&target).unwrap(), before, "nothing written");

    let mut adapter = Recorder::default();
    let report = store.drain(&target, &mut adapter).unwrap();
    assert_eq!(report.dropped, vec![owed.mid]);
    assert_eq!(adapter.delivered.len(), 1);
    assert_eq!(adapter.delivered[0].1, "from a human");
}

#[test]
fn drain_delivers_settles_keyed_entries_and_empties_the_queue() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let plain = store.send(&s, &text("one")).unwrap();
    let key = store.send(&s, &keyed("two", "k")).unwrap();
    let mut adapter = Recorder::default();
    let report = store.drain(&s, &mut adapter).unwrap();
    assert_eq!(report.delivered, vec![plain.mid.clone(), key.mid.clone()]);
    assert_eq!(report.remaining, 0);
    assert!(report.stopped.is_none());
    assert!(!store.fs().exists(&store.layout().queue(&s)).unwrap(), "an empty queue has no file");
    let settled: Vec<String> = store
        .lines(&s)
        .unwrap()
        .into_iter()
        .filter_map(|line| match line {
            Line::Settled(settlement) => Some(settlement.mid),
            _ => None,
        })
        .collect();
    assert_eq!(settled, vec![key.mid.clone()], "only the keyed entry is settled");
    assert_eq!(store.events(&s).unwrap().len(), 2, "settlements are private");

    // A replay after settlement is inert: same mid, nothing owed again.
    let replay = store.send(&s, &keyed("two", "k")).unwrap();
    assert_eq!((replay.mid, replay.replayed, replay.restored), (key.mid, true, false));
    assert!(store.queue(&s).unwrap().is_empty());
    let report = store.drain(&s, &mut adapter).unwrap();
    assert!(report.delivered.is_empty() && adapter.delivered.len() == 2);
}

#[test]
fn drain_consumes_a_settled_entry_without_calling_the_adapter() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &keyed("once", "k")).unwrap();
    let entry = store.queue(&s).unwrap();
    store.drain(&s, &mut Recorder::default()).unwrap();
    // A crash after the settlement and before the removal leaves the entry owed: put it back.
    let queue_path = store.layout().queue(&s);
    let bytes = serde_json::to_vec_pretty(&entry).unwrap();
    std::fs::write(&queue_path, bytes).unwrap();
    let mut adapter = Recorder::default();
    let report = store.drain(&s, &mut adapter).unwrap();
    assert_eq!(report.consumed, vec![entry[0].mid.clone()]);
    assert!(adapter.delivered.is_empty(), "no redelivery after settlement");
}

#[test]
fn drain_stops_fail_closed_when_a_receipt_is_absent_or_differs() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &keyed("real", "k")).unwrap();
    let mut entries = store.queue(&s).unwrap();
    let queue_path = store.layout().queue(&s);

    entries[0].text = "tampered".to_owned();
    std::fs::write(&queue_path, serde_json::to_vec(&entries).unwrap()).unwrap();
    let mut adapter = Recorder::default();
    let report = store.drain(&s, &mut adapter).unwrap();
    assert!(
        matches!(report.stopped, Some(DrainStop::ReceiptDiffers { field: "text", .. })),
        "{report:?}"
    );
    assert!(adapter.delivered.is_empty(), "no adapter call");
    assert_eq!(report.remaining, 1, "left owed");

    entries[0].text = "real".to_owned();
    entries[0].dispatch.as_mut().unwrap().request_digest = "0".repeat(64);
    std::fs::write(&queue_path, serde_json::to_vec(&entries).unwrap()).unwrap();
    let report = store.drain(&s, &mut adapter).unwrap();
    assert!(matches!(report.stopped, Some(DrainStop::ReceiptMissing { .. })), "{report:?}");
    assert!(adapter.delivered.is_empty());
}

#[test]
fn drain_retries_then_stops_with_the_entry_still_owed() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &text("a")).unwrap();
    let mut adapter = Recorder { fail: 10, ..Recorder::default() };
    let report = store.drain(&s, &mut adapter).unwrap();
    assert!(matches!(report.stopped, Some(DrainStop::AdapterFailed { attempts: 3, .. })));
    assert_eq!(report.remaining, 1);
    let mut adapter = Recorder { fail: 2, ..Recorder::default() };
    let report = store.drain(&s, &mut adapter).unwrap();
    assert_eq!(report.delivered.len(), 1, "the third attempt lands");
}

#[test]
fn lifecycle_writes_log_each_move_exactly_once() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let active = Triple::new(Status::Active, None, None);
    let review = Triple::new(Status::Awaiting, Some(Proposal::Merge), Some("ready".into()));
    assert!(store.append(&s, &Lifecycle::Set(active.clone())).unwrap().logged);
    assert!(
        !store.append(&s, &Lifecycle::Set(active.clone())).unwrap().logged,
        "no move, no event"
    );
    assert!(store.append(&s, &Lifecycle::Set(review.clone())).unwrap().logged);
    let events = store.events(&s).unwrap();
    let triples: Vec<Triple> = events
        .iter()
        .map(|event| match event {
            Event::Status(status) => status.triple.clone(),
            Event::Sent(_) => panic!("only status events"),
        })
        .collect();
    assert_eq!(triples, vec![active, review.clone()]);
    assert_eq!(store.record(&s).unwrap().triple(), review);
    assert_eq!(review.display_word(), "review");
}

#[test]
fn guarded_writes_apply_only_from_their_statuses() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &Triple::new(Status::Active, None, None), None, None).unwrap();
    let idle_from_active = Lifecycle::SetFrom {
        from: vec![Status::Active],
        triple: Triple::new(Status::Idle, None, None),
    };
    let applied = store.append(&s, &idle_from_active).unwrap();
    assert!(applied.written && applied.logged);
    let record_before = store.fs().read(&store.layout().record(&s)).unwrap();
    let skipped = store.append(&s, &idle_from_active).unwrap();
    assert!(!skipped.written && !skipped.logged, "idle is not active: nothing written");
    assert_eq!(skipped.before, skipped.after);
    assert_eq!(
        store.fs().read(&store.layout().record(&s)).unwrap(),
        record_before,
        "the record is untouched (not even its update time)"
    );
    assert_eq!(store.events(&s).unwrap().len(), 1);
}

#[test]
fn launch_pending_writes_compare_through_the_frozen_projection() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    let parked = Triple::new(Status::Parked, None, Some("later".into()));
    store.create_session(&s, &parked, None, None).unwrap();
    let active = Triple::new(Status::Active, None, None);

    store.append(&s, &Lifecycle::BeginLaunch(active.clone())).unwrap();
    assert!(store.events(&s).unwrap().is_empty(), "beginning a launch logs nothing");
    assert_eq!(store.record(&s).unwrap().public_triple(), parked);
    store.append(&s, &Lifecycle::FailLaunch).unwrap();
    assert!(store.events(&s).unwrap().is_empty(), "failure logs nothing");
    assert_eq!(store.record(&s).unwrap().triple(), parked, "failure restores the frozen triple");

    store.append(&s, &Lifecycle::BeginLaunch(active.clone())).unwrap();
    let applied = store.append(&s, &Lifecycle::Set(active.clone())).unwrap();
    assert!(applied.logged);
    assert_eq!(store.events(&s).unwrap().len(), 1, "success logs exactly one move");
    assert!(store.record(&s).unwrap().launch_pending().is_none());
    assert!(matches!(store.append(&s, &Lifecycle::FailLaunch), Err(Error::Refused { .. })));
}

#[test]
fn retired_sessions_refuse_lifecycle_writes_but_still_receive() {
    let (dir, store) = real_store(config());
    let worktree = dir.path().join("worktree");
    std::fs::create_dir(&worktree).unwrap();
    let s = id("s");
    store.create_session(&s, &queued(), None, Some(worktree.to_str().unwrap())).unwrap();
    store.append(&s, &Lifecycle::Set(Triple::new(Status::Active, None, None))).unwrap();
    std::fs::remove_dir(&worktree).unwrap();
    let refused = store.append(&s, &Lifecycle::Set(Triple::new(Status::Idle, None, None)));
    assert!(matches!(refused, Err(Error::Retired { .. })), "{refused:?}");
    store.send(&s, &text("are you there?")).unwrap();
    assert_eq!(store.events(&s).unwrap().len(), 2, "the send left a trace");
}

#[test]
fn archive_is_record_only_and_close_is_complete() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    store.send(&s, &text("x")).unwrap();
    store.archive(&s).unwrap();
    assert!(store.record(&s).unwrap().archived());
    assert_eq!(store.events(&s).unwrap().len(), 1, "archive logs nothing and keeps every segment");

    store.close(&s).unwrap();
    assert!(!store.fs().exists(&store.layout().session_dir(&s)).unwrap());
    assert!(matches!(store.events(&s), Err(Error::NoSuchSession { .. })));
    assert!(matches!(store.send(&s, &text("late")), Err(Error::NoSuchSession { .. })));
    assert!(store.fs().exists(&store.layout().revoked(&s)).unwrap());
    let ledger = String::from_utf8(common::read(&store, &store.layout().close_ledger())).unwrap();
    assert_eq!(ledger.lines().count(), 1);
    assert!(ledger.contains("\"id\":\"s\""));
    assert!(store.list().unwrap().is_empty());
    // A closed id stays closed: creating it again is refused, writing nothing.
    assert!(matches!(store.create_session(&s, &queued(), None, None), Err(Error::Revoked { .. })));
    assert!(!store.fs().exists(&store.layout().session_dir(&s)).unwrap());
}

#[test]
fn oversized_messages_and_notes_are_refused_before_anything_is_written() {
    let (_dir, store) = real_store(config());
    let s = id("s");
    store.create_session(&s, &queued(), None, None).unwrap();
    let big = "x".repeat(spex_engine::layout::TEXT_BYTES_MAX + 1);
    assert!(matches!(store.send(&s, &text(&big)), Err(Error::TooLarge { .. })));
    let note = "n".repeat(spex_engine::layout::NOTE_BYTES_MAX + 1);
    let write = Lifecycle::Set(Triple::new(Status::Asking, None, Some(note)));
    assert!(matches!(store.append(&s, &write), Err(Error::TooLarge { .. })));
    assert!(store.events(&s).unwrap().is_empty());
    assert!(store.queue(&s).unwrap().is_empty());
}

#[test]
fn sends_committed_together_answer_each_in_order() {
    let (_dir, store) = real_store(config());
    let (s, closed) = (id("s"), id("closed"));
    store.create_session(&s, &queued(), Some("tmux:%1"), None).unwrap();
    store.create_session(&closed, &queued(), None, None).unwrap();
    store.close(&closed).unwrap();
    let before = store.send(&s, &keyed("earlier", "k0")).unwrap();
    let from_closed = SendRequest { from: Some(closed.clone()), ..text("from a closed session") };
    let note = SendRequest { reply_via: Some(ReplyChannel::Note), ..text("read my note") };
    let answers = store
        .send_together(
            &s,
            &[
                text("one"),
                keyed("two", "k1"),
                keyed("two", "k1"),
                keyed("earlier", "k0"),
                keyed("other bytes", "k1"),
                from_closed,
                SendRequest {
                    text: "x".repeat(spex_engine::layout::TEXT_BYTES_MAX + 1),
                    ..text("")
                },
                note,
                text("after the note"),
            ],
        )
        .unwrap();
    assert_eq!(answers.len(), 9);
    let one = answers[0].as_ref().unwrap();
    let two = answers[1].as_ref().unwrap();
    assert!(!one.replayed && !two.replayed);
    let again = answers[2].as_ref().unwrap();
    assert_eq!(
        (again.mid.as_str(), again.replayed),
        (two.mid.as_str(), true),
        "same key in one batch"
    );
    assert_eq!(answers[3].as_ref().unwrap().mid, before.mid, "a key from an earlier commit");
    assert!(matches!(answers[4], Err(Error::KeyConflict { .. })));
    assert!(matches!(answers[5], Err(Error::Revoked { .. })));
    assert!(matches!(answers[6], Err(Error::TooLarge { .. })));
    let owed: Vec<(String, String)> =
        store.queue(&s).unwrap().into_iter().map(|entry| (entry.mid, entry.text)).collect();
    let note_mid = &answers[7].as_ref().unwrap().mid;
    let after_mid = &answers[8].as_ref().unwrap().mid;
    assert_eq!(
        owed.iter().map(|(mid, _)| mid.as_str()).collect::<Vec<_>>(),
        [before.mid.as_str(), &one.mid, &two.mid, note_mid, after_mid],
        "owed once each, in order"
    );
    assert!(owed[3].1.ends_with(NOTE_HINT));
    assert!(owed[4].1.ends_with(TERMINAL_HINT), "the channel carries over inside a batch");
    let sent: Vec<String> = store
        .events(&s)
        .unwrap()
        .into_iter()
        .filter_map(|event| match event {
            Event::Sent(sent) => Some(sent.text),
            _ => None,
        })
        .collect();
    assert_eq!(sent, ["earlier", "one", "two", "read my note", "after the note"]);
    assert!(
        matches!(
            store.send_together(&id("nobody"), &[text("x")]),
            Err(Error::NoSuchSession { .. })
        ),
        "a missing session refuses the whole batch"
    );
}
