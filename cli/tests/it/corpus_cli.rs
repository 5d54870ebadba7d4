//! The CLI on a store the existing TypeScript spex wrote (the interop corpus in
//! `../shared/interop`, copied first): listing, search and show work through its damage, doctor
//! lists exactly the damaged cases and exits 4, repair rebuilds a damaged queue.

use crate::common;

use common::corpus::{copy_tree, corpus};

use common::Store;

fn corpus_store() -> Store {
    let store = Store::new();
    copy_tree(&corpus().join("stores/upstream"), &store.root());
    store
}

#[test]
fn listing_search_and_show_work_on_the_existing_implementations_store() {
    let store = corpus_store();
    let rows = store.json(&["session", "ls", "--all"]);
    let rows = rows["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 22, "{rows:?}");
    let life = rows.iter().find(|row| row["id"] == "b-life").unwrap();
    assert_eq!(life["state"]["display"], "review");
    let launching = rows.iter().find(|row| row["id"] == "b-launching").unwrap();
    assert_eq!(launching["state"]["note"], "frozen", "the frozen original is shown");
    assert!(store.run(&["search", "torn"]).ok().contains("glued to it"));
    // A read that recovers a line glued onto a torn fragment says so, naming file and offset.
    let timeline = store.run(&["session", "timeline", "b-midtorn"]);
    assert!(timeline.ok().contains("glued to it"));
    let warning = timeline.stderr();
    assert!(
        warning.contains("warning") && warning.contains("000000000001.ndjson at byte 135"),
        "{warning}"
    );
    let closed = store.run(&["session", "show", "b-closed"]).ok();
    assert!(closed.contains("closed    2026-12-01T07:45:33.313Z"), "{closed}");
    // A damaged record is a row of its own; the command succeeds.
    std::fs::write(store.root().join("sessions/b-plain/session.json"), b"[").unwrap();
    let rows = store.json(&["session", "ls", "--all"]);
    let plain =
        rows["sessions"].as_array().unwrap().iter().find(|row| row["id"] == "b-plain").cloned();
    assert_eq!(plain.unwrap()["state"]["status"], "corrupt");
    store.run(&["session", "show", "b-plain"]).fails(4, "session.json");
}

#[test]
fn doctor_lists_the_damaged_cases_and_repair_fixes_a_queue() {
    let store = corpus_store();
    let run = store.run(&["--json", "doctor"]);
    assert_eq!(run.code(), 4, "{}", run.stderr());
    let report: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    let mut damaged: Vec<String> = report["found"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["severity"] == "damage")
        .map(|item| {
            let path = item["path"].as_str().unwrap();
            path.split("/sessions/").nth(1).unwrap().split('/').next().unwrap().to_owned()
        })
        .collect();
    damaged.sort();
    assert_eq!(damaged, ["b-q-empty", "b-q-invalid", "b-q-object", "b-torntail"]);
    store.run(&["session", "send", "b-q-object", "refused"]).fails(4, "pending.json");
    let repaired = store.run(&["session", "repair", "b-q-object"]).ok();
    assert!(repaired.contains("kept the damaged file"), "{repaired}");
    assert_eq!(store.run(&["doctor", "b-q-object"]).code(), 0);
    store.run(&["session", "send", "b-q-object", "accepted now"]).ok();
}
