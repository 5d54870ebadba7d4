//! The session index against real stores: the stored last activity agrees with the in-log
//! projection over logs with repairs, settlements, rollovers and record-only writes; an
//! incremental refresh equals a rebuild; a version bump re-extracts without duplicates; search
//! takes its query literally and ranks what was said above notes. These matter because the
//! listing order and search results are served without reading logs, so they must never drift
//! from the logs.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::sync::Arc;

use faultfs::RealFs;
use spex_engine::env::{ManualClock, SeededIds};
use spex_engine::timeline::activity::last_activity;
use spex_engine::{
    Adapter, Config, Key, Lifecycle, Message, SendRequest, SessionId, Status, Store, Triple,
};
use spex_index::{Filter, Index, SearchFilter, Sort};

struct Accept;

impl Adapter for Accept {
    fn deliver(&mut self, _message: &Message<'_>) -> Result<(), String> {
        Ok(())
    }
}

struct World {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    store: Store<RealFs>,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(1_784_200_000_000));
        let config = Config { segment_bytes_max: 1024, ..Config::default() };
        let store = Store::open(
            RealFs::new(),
            dir.path(),
            clock.clone(),
            Arc::new(SeededIds::new(7)),
            config,
        )
        .unwrap();
        World { dir, clock, store }
    }

    fn tick(&self) {
        self.clock.advance_ms(1000);
    }

    fn create(&self, id: &str) -> SessionId {
        self.tick();
        let id = SessionId::new(id).unwrap();
        self.store
            .create_session(&id, &Triple::new(Status::Active, None, None), None, None)
            .unwrap();
        id
    }

    fn say(&self, id: &SessionId, text: &str, from: Option<&SessionId>) {
        self.tick();
        let request =
            SendRequest { text: text.into(), from: from.cloned(), ..SendRequest::default() };
        self.store.send(id, &request).unwrap();
    }

    fn index(&self) -> Index {
        Index::open(self.dir.path()).unwrap()
    }

    /// Asserts the index's stored last activity equals the in-log projection for `id`.
    fn agrees(&self, index: &Index, id: &SessionId) {
        let events = self.store.events(id).unwrap();
        let projected = last_activity(&events).map(str::to_owned);
        let rows =
            index.sessions(&Filter { sort: Sort::Activity, status: None, all: true }).unwrap();
        let row = rows.iter().find(|row| row.id == id.as_str()).unwrap();
        assert_eq!(row.last_activity, projected, "stored and projected activity of {id}");
    }
}

fn order(index: &Index) -> Vec<String> {
    index
        .sessions(&Filter { sort: Sort::Activity, status: None, all: true })
        .unwrap()
        .into_iter()
        .map(|row| row.id)
        .collect()
}

#[test]
fn stored_activity_agrees_with_the_log_projection() {
    let world = World::new();
    let mut index = world.index();
    let (worked, abandoned, agent) =
        (world.create("worked"), world.create("abandoned"), world.create("agent"));
    world.say(&abandoned, "an early question", None);
    index.refresh(&world.store).unwrap();
    world.say(&worked, "please fix the parser", None);
    world.tick();
    world
        .store
        .append(
            &worked,
            &Lifecycle::Set(Triple::new(Status::Asking, None, Some("which parser?".into()))),
        )
        .unwrap();
    // Keyed sends rolled over 1 KiB segments and drained: settlements are not activity.
    for i in 0..6 {
        world.tick();
        let request = SendRequest {
            text: format!("keyed message {i} {}", "x".repeat(200)),
            key: Some(Key { operation: "op".into(), key: format!("k{i}") }),
            ..SendRequest::default()
        };
        world.store.send(&worked, &request).unwrap();
    }
    index.refresh(&world.store).unwrap();
    world.agrees(&index, &worked);
    let worked_at = last_activity(&world.store.events(&worked).unwrap()).unwrap().to_owned();
    world.tick();
    world.store.drain(&worked, &mut Accept).unwrap();
    index.refresh(&world.store).unwrap();
    world.agrees(&index, &worked);
    assert_eq!(
        index.sessions(&Filter { sort: Sort::Activity, status: None, all: true }).unwrap()[0]
            .last_activity
            .as_deref(),
        Some(worked_at.as_str()),
        "settlements did not move the activity"
    );

    // The abandoned session is touched without being worked in: a message from another
    // session, a torn tail repaired by the next writer, an archive. None is activity.
    world.say(&abandoned, "automated ping", Some(&agent));
    let newest = std::fs::read_dir(world.dir.path().join("sessions/abandoned/timeline"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes.extend_from_slice(b"{\"ts\":\"2030-01-01T00:00:00.000Z\",\"kind\":\"sen");
    std::fs::write(&newest, bytes).unwrap();
    index.refresh(&world.store).unwrap();
    world.agrees(&index, &abandoned);
    world.tick();
    world.store.recover_session(&abandoned).unwrap();
    world.store.archive(&abandoned).unwrap();
    index.refresh(&world.store).unwrap();
    world.agrees(&index, &abandoned);
    world.agrees(&index, &agent);
    assert_eq!(
        order(&index),
        ["worked", "abandoned", "agent"],
        "the abandoned session stays below"
    );
    // Archived sessions are listed only with `all`.
    let visible =
        index.sessions(&Filter { sort: Sort::Activity, status: None, all: false }).unwrap();
    assert!(visible.iter().all(|row| row.id != "abandoned"));
    // A status filter takes the stored name or the display word.
    let asking = index
        .sessions(&Filter { sort: Sort::Activity, status: Some("asking".into()), all: true })
        .unwrap();
    assert_eq!(asking.len(), 1);
    let working = index
        .sessions(&Filter { sort: Sort::Activity, status: Some("working".into()), all: true })
        .unwrap();
    assert_eq!(working.len(), 2);
}

#[test]
fn incremental_refreshes_equal_a_rebuild() {
    let world = World::new();
    let mut incremental = world.index();
    let a = world.create("a");
    let b = world.create("b");
    for i in 0..30 {
        let target = if i % 3 == 0 { &b } else { &a };
        world.say(
            target,
            &format!("message {i} about the storage engine {}", "y".repeat(i * 7)),
            None,
        );
        if i % 4 == 0 {
            world.tick();
            world
                .store
                .append(
                    target,
                    &Lifecycle::Set(Triple::new(
                        Status::Parked,
                        None,
                        Some(format!("parked note {i}")),
                    )),
                )
                .unwrap();
        }
        if i % 5 == 0 {
            incremental.refresh(&world.store).unwrap();
        }
    }
    world.store.close(&b).unwrap();
    incremental.refresh(&world.store).unwrap();
    let first = incremental.dump().unwrap();
    assert!(first.contains("message 29"));
    assert!(!first.contains("\"b\""), "a closed session is removed");
    // A fresh file folded from nothing is identical.
    std::fs::remove_file(world.dir.path().join(spex_index::INDEX_FILE)).unwrap();
    let _ = std::fs::remove_file(world.dir.path().join("index.sqlite-wal"));
    let _ = std::fs::remove_file(world.dir.path().join("index.sqlite-shm"));
    let mut rebuilt = world.index();
    rebuilt.rebuild(&world.store).unwrap();
    assert_eq!(rebuilt.dump().unwrap(), first);
    // A refresh with nothing new changes nothing, and reads no log.
    let before = rebuilt.version().unwrap();
    let refreshed = rebuilt.refresh(&world.store).unwrap();
    assert_eq!((refreshed.updated, rebuilt.version().unwrap()), (0, before));
}

#[test]
fn a_content_version_change_re_extracts_without_duplicates() {
    let world = World::new();
    let a = world.create("a");
    world.say(&a, "the only message", None);
    let mut index = world.index();
    index.refresh(&world.store).unwrap();
    let expected = index.dump().unwrap();
    // A row indexed under an older content version.
    let connection = rusqlite_connection(&world);
    connection.execute("UPDATE sessions SET content_version = 0", []).unwrap();
    drop(connection);
    let refreshed = index.refresh(&world.store).unwrap();
    assert_eq!((refreshed.updated, refreshed.events), (1, 1), "the session was re-extracted");
    assert_eq!(index.dump().unwrap(), expected, "once, not twice");
}

fn rusqlite_connection(world: &World) -> rusqlite::Connection {
    rusqlite::Connection::open(world.dir.path().join(spex_index::INDEX_FILE)).unwrap()
}

#[test]
fn search_is_literal_ranked_and_filtered() {
    let world = World::new();
    let a = world.create("a");
    let b = world.create("b");
    world.say(&a, "the flaky deploy failed again on the staging cluster", None);
    world.tick();
    world
        .store
        .append(
            &b,
            &Lifecycle::Set(Triple::new(
                Status::Asking,
                None,
                Some("should I retry the deploy?".into()),
            )),
        )
        .unwrap();
    world.say(&b, "NEAR(x* OR \"quoted\" is plain text here", None);
    let mut index = world.index();
    index.refresh(&world.store).unwrap();
    let all = SearchFilter { limit: 10, ..SearchFilter::default() };
    let hits = index.search("deploy", &all).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(
        (hits[0].session.as_str(), hits[0].kind.name()),
        ("a", "said"),
        "said ranks above notes"
    );
    assert!(hits[0].marked("[", "]").contains("[deploy]"), "{}", hits[0].snippet);
    assert_eq!(hits[1].kind, spex_index::HitKind::Note);
    // FTS syntax in the query is data.
    let literal = index.search("NEAR(x* OR \"quoted\"", &all).unwrap();
    assert_eq!(literal.len(), 1);
    assert_eq!(literal[0].session, "b");
    assert!(index.search("OR", &all).unwrap().len() == 1, "OR is a word, not an operator");
    // Filters.
    let only_b = SearchFilter { session: Some("b".into()), ..all.clone() };
    assert_eq!(index.search("deploy", &only_b).unwrap().len(), 1);
    let asking = SearchFilter { status: Some("asking".into()), ..all.clone() };
    assert_eq!(index.search("deploy", &asking).unwrap()[0].session, "b");
    let later = SearchFilter { since: Some("2100-01-01".into()), ..all.clone() };
    assert!(index.search("deploy", &later).unwrap().is_empty());
    assert!(matches!(index.search("   ", &all), Err(spex_index::Error::EmptyQuery)));
    let two =
        SearchFilter { session: Some("b".into()), since: Some("2000-01-01".into()), ..asking };
    assert_eq!(index.search("deploy", &two).unwrap().len(), 1, "filters combine");
    // A closed session's content is gone from search, with or without a status filter.
    world.store.close(&a).unwrap();
    index.refresh(&world.store).unwrap();
    assert_eq!(index.search("deploy", &all).unwrap().len(), 1);
    let active = SearchFilter { status: Some("active".into()), ..all.clone() };
    assert!(index.search("deploy", &active).unwrap().is_empty());
}

// The owed count is the queue's: a delivery that writes nothing to the log (unkeyed messages
// leave no settlement line) still changes the row, under a new version a watcher is sent; an
// untouched queue costs a refresh nothing.
#[test]
fn a_delivery_alone_changes_the_owed_count() {
    let world = World::new();
    let mut index = world.index();
    let a = world.create("a");
    world.say(&a, "first", None);
    world.say(&a, "second", None);
    index.refresh(&world.store).unwrap();
    let owed = |index: &Index| {
        index.sessions(&Filter { sort: Sort::Activity, status: None, all: true }).unwrap()[0].owed
    };
    assert_eq!(owed(&index), Some(2));
    let before = index.version().unwrap();
    let log = world.store.stamp(&a).unwrap();
    world.store.drain(&a, &mut Accept).unwrap();
    assert_eq!(world.store.stamp(&a).unwrap(), log, "the delivery wrote nothing to the log");
    let refreshed = index.refresh(&world.store).unwrap();
    assert_eq!(refreshed.updated, 1);
    assert_eq!(owed(&index), Some(0));
    let changes = index.changes_since(before).unwrap();
    assert_eq!(changes.len(), 1, "one update for the watch stream");
    assert_eq!(index.refresh(&world.store).unwrap().updated, 0);
    // A damaged queue leaves the session listed, its owed count unknown (not the 0 a reader of
    // its valid entries would count).
    world.say(&a, "third", None);
    index.refresh(&world.store).unwrap();
    assert_eq!(owed(&index), Some(1));
    std::fs::write(world.store.layout().queue(&a), b"{ not json").unwrap();
    index.refresh(&world.store).unwrap();
    assert_eq!(owed(&index), None);
    assert_eq!(
        index.sessions(&Filter { sort: Sort::Activity, status: None, all: true }).unwrap()[0]
            .display,
        "working"
    );
}

/// The index holds no credential in the clear: every secret shape of the shared corpus, said to
/// a session, is stored redacted, so a search for any 6 characters of a secret, starting at any
/// offset, finds no snippet that shows a part of it, and the file holds none of it.
#[test]
fn no_snippet_shows_a_secret_whatever_the_query_pulls_into_its_window() {
    let world = World::new();
    let id = world.create("s");
    let corpus = include_str!("../../../history/tests/data/secrets.tsv");
    let mut secrets = Vec::new();
    for line in corpus.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let fields: Vec<&str> = line.split('\t').collect();
        let (text, secret) = (fields[1].replace("\\n", "\n"), fields[2].replace("\\n", "\n"));
        world.say(&id, &format!("before it {text} and after it"), None);
        secrets.push((fields[0].to_owned(), secret));
    }
    let mut index = Index::open(world.dir.path()).unwrap();
    index.refresh(&world.store).unwrap();
    let all = SearchFilter { limit: 100, ..SearchFilter::default() };
    assert_eq!(index.search("before", &all).unwrap().len(), secrets.len());
    let leak = |shown: &str, secret: &str| {
        let chars: Vec<char> = secret.chars().collect();
        chars.windows(8).map(|w| w.iter().collect::<String>()).find(|w| shown.contains(w.as_str()))
    };
    let mut queries = 0;
    for (label, secret) in &secrets {
        let chars: Vec<char> = secret.chars().filter(|c| !c.is_whitespace()).collect();
        for at in 0..chars.len().saturating_sub(6) {
            let query: String = chars[at..at + 6].iter().collect();
            queries += 1;
            for hit in index.search(&query, &all).unwrap_or_default() {
                assert!(leak(&hit.snippet, secret).is_none(), "{label} at {at}: {}", hit.snippet);
            }
        }
    }
    assert!(queries > 1000, "{queries}");
    let bytes = std::fs::read(world.dir.path().join(spex_index::INDEX_FILE)).unwrap();
    let stored = String::from_utf8_lossy(&bytes);
    for (label, secret) in &secrets {
        assert!(leak(&stored, secret).is_none(), "{label} is stored in the clear");
    }
}

/// The listing reads each session's status as a type: a status the index never writes (a
/// hand-edited index) is an error naming the index file and the value, never a panic and never
/// shown as if it were a status.
#[test]
fn a_status_the_index_never_writes_is_an_error_naming_it() {
    let world = World::new();
    world.create("a");
    let mut index = world.index();
    index.refresh(&world.store).unwrap();
    let all = Filter { sort: Sort::Activity, status: None, all: true };
    let rows = index.sessions(&all).unwrap();
    assert_eq!(rows[0].status, spex_index::RowStatus::Authored(Status::Active));
    rusqlite_connection(&world).execute("UPDATE sessions SET status = 'bogus'", []).unwrap();
    let error = index.sessions(&all).unwrap_err().to_string();
    assert!(error.contains(spex_index::INDEX_FILE) && error.contains("bogus"), "{error}");
}
