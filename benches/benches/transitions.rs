//! Criterion benches of one durable send (engine, fsync floor, SQLite FULL) and of the reads
//! (tail of 500 and follow of one new event) on a 64 MiB log. The side-by-side run with every
//! workload and its ratios is `cargo run --release -p spex-benches --bin compare`.

#![expect(clippy::unwrap_used, reason = "bench setup: a failed step should panic with its error")]

use criterion::{Criterion, criterion_group, criterion_main};
use spex_benches::{fixture, floor::Floor, message, open_store, sent_line, sqlite};
use spex_engine::queue::Entry;
use spex_engine::{Cursor, SendRequest, SessionId, Status, Triple};

fn send(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir.path().join("engine"));
    let mut group = c.benchmark_group("durable send");
    group.sample_size(30);
    let mut session = 0u64;
    let mut i = 0u64;
    // A fresh session every 100 sends keeps the queue short, as a drained queue would be.
    let mut id = SessionId::new("s0").unwrap();
    store.create_session(&id, &Triple::new(Status::Active, None, None), None, None).unwrap();
    group.bench_function("engine", |b| {
        b.iter(|| {
            i += 1;
            if i.is_multiple_of(100) {
                session += 1;
                id = SessionId::new(&format!("s{session}")).unwrap();
                store
                    .create_session(&id, &Triple::new(Status::Active, None, None), None, None)
                    .unwrap();
            }
            let request = SendRequest { text: message(i), ..SendRequest::default() };
            store.send(&id, &request).unwrap()
        });
    });
    let mut floor = Floor::create(&dir.path().join("floor"), "f0").unwrap();
    let mut j = 0u64;
    group.bench_function("fsync floor", |b| {
        b.iter(|| {
            j += 1;
            if j.is_multiple_of(100) {
                floor = Floor::create(&dir.path().join("floor"), &format!("f{j}")).unwrap();
            }
            let mid = format!("00000000-0000-4000-8000-{j:012}");
            let line = sent_line("2026-11-30T00:00:00.000Z", &mid, &message(j));
            let entry =
                Entry { mid, text: message(j), from: None, attributes: None, dispatch: None };
            floor.send(&line, entry).unwrap();
        });
    });
    let mut connection = sqlite::open(&dir.path().join("bench.sqlite")).unwrap();
    let mut k = 0u64;
    group.bench_function("sqlite FULL", |b| {
        b.iter(|| {
            k += 1;
            let mid = format!("00000000-0000-4000-8000-{k:012}");
            let line = sent_line("2026-11-30T00:00:00.000Z", &mid, &message(k));
            sqlite::send(&mut connection, "s", &line, &mid, &message(k)).unwrap();
        });
    });
    group.finish();
}

fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("engine");
    let id = SessionId::new("big").unwrap();
    let mut connection = sqlite::open(&dir.path().join("reads.sqlite")).unwrap();
    fixture::build(&root, &id, 64 << 20, Some(&mut connection)).unwrap();
    let store = open_store(&root);
    let mut group = c.benchmark_group("reads, 64 MiB log");
    group.bench_function("engine tail(500)", |b| b.iter(|| store.tail(&id, 500).unwrap()));
    group.bench_function("sqlite tail(500)", |b| {
        b.iter(|| sqlite::tail(&connection, "big", 500).unwrap())
    });
    let (_, cursor) = store.follow(&id, Cursor::START).unwrap();
    group.bench_function("engine follow (nothing new)", |b| {
        b.iter(|| store.follow(&id, cursor).unwrap())
    });
    group.finish();
}

criterion_group!(benches, send, reads);
criterion_main!(benches);
