//! How fast `SimFs` produces post-crash images on a small store: the cost that bounds every
//! crash sweep. Throughput is reported in images per second.

#![expect(clippy::unwrap_used, reason = "bench setup: a failed step should panic with its error")]

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use faultfs::{Boundary, CrashMode, FaultPlan, File, Fs, OpenOptions, SimFs};

const B: Boundary = Boundary::new("bench");

/// A small session-like store: a durable record and log, then `pending_lines` unsynced appends
/// and an unsynced queue replace.
fn store(pending_lines: usize) -> SimFs {
    let fs = SimFs::new(FaultPlan::none(1));
    fs.create_dir(Path::new("/s"), B).unwrap();
    fs.sync_dir(Path::new("/"), B).unwrap();
    let record = fs.open(Path::new("/s/session.json"), OpenOptions::create(), B).unwrap();
    record.append(&[b'r'; 300], B).unwrap();
    record.sync_all(B).unwrap();
    let log = fs.open(Path::new("/s/timeline.ndjson"), OpenOptions::create(), B).unwrap();
    for i in 0..40 {
        log.append(format!("{{\"seq\":{i},\"text\":\"{}\"}}\n", "x".repeat(80)).as_bytes(), B)
            .unwrap();
    }
    log.sync_data(B).unwrap();
    fs.sync_dir(Path::new("/s"), B).unwrap();
    for i in 0..pending_lines {
        log.append(format!("{{\"seq\":{i},\"text\":\"{}\"}}\n", "y".repeat(60)).as_bytes(), B)
            .unwrap();
    }
    let queue =
        fs.open(Path::new("/s/pending.json.tmp"), OpenOptions::create_truncate(), B).unwrap();
    queue.append(b"[{\"mid\":\"m\",\"text\":\"t\"}]", B).unwrap();
    fs.rename(Path::new("/s/pending.json.tmp"), Path::new("/s/pending.json"), B).unwrap();
    fs
}

fn crash_images(c: &mut Criterion) {
    let mut group = c.benchmark_group("crash_images");
    for (name, pending_lines) in [("exhaustive", 3), ("families", 40)] {
        let fs = store(pending_lines);
        let images = fs.crash(CrashMode::PowerLoss).images.len() as u64;
        group.throughput(Throughput::Elements(images));
        group.bench_function(format!("power_loss_{name}_{images}_images"), |b| {
            b.iter(|| fs.crash(CrashMode::PowerLoss));
        });
    }
    let fs = store(3);
    group.throughput(Throughput::Elements(1));
    group.bench_function("process_kill", |b| b.iter(|| fs.crash(CrashMode::ProcessKill)));
    group.finish();
}

criterion_group!(benches, crash_images);
criterion_main!(benches);
