//! The side-by-side run: the engine, the fsync floor and SQLite measured in one run on one
//! filesystem, printed as Markdown tables with ratios (absolute times on a shared machine drift;
//! ratios hold). Progress goes to stderr, the tables to stdout.
//!
//!     cargo run --release -p spex-benches --bin compare            # every row, logs to 1 GiB
//!     cargo run --release -p spex-benches --bin compare -- --quick # small sizes, a minute

#![expect(clippy::unwrap_used, reason = "a benchmark step that fails should stop the run loudly")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use faultfs::{FaultPlan, OpKind, SimFs};
use spex_benches::plot::{self, Chart, Series};
use spex_benches::stats::{Samples, ratio, show};
use spex_benches::{fixture, floor::Floor, message, open_store, sent_line, sqlite};
use spex_engine::queue::{Dispatch, Entry};
use spex_engine::timeline::{Line, Settlement};
use spex_engine::{Adapter, Config, Cursor, Key, Message, SendRequest, SessionId, Status, Store};
use spex_engine::{Triple, env::format_ts};

#[derive(Debug, Parser)]
struct Args {
    /// Where the stores are built (default: a temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Log sizes in MiB for the read, follow, lookup and open rows.
    #[arg(long, value_delimiter = ',', default_value = "1,64,1024")]
    sizes: Vec<u64>,
    /// Sends per competitor per round.
    #[arg(long, default_value_t = 100)]
    sends: u64,
    /// Rounds (competitors alternate between rounds).
    #[arg(long, default_value_t = 5)]
    rounds: u64,
    /// Sessions for the session-index rows (each with `--index-events` events).
    #[arg(long, default_value_t = 10_000)]
    index_sessions: u64,
    /// Events per session for the session-index rows.
    #[arg(long, default_value_t = 100)]
    index_events: u64,
    /// Only the session-index rows.
    #[arg(long)]
    index_only: bool,
    /// Owed backlogs drained whole, for the drain-growth row.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,4000")]
    backlogs: Vec<u64>,
    /// Only the drain rows.
    #[arg(long)]
    drain_only: bool,
    /// Only the send rows (one sender, eight senders, senders from one to eight).
    #[arg(long)]
    send_only: bool,
    /// Also draw the charts of `BENCHMARKS.md` as SVG files into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Small sizes and fewer operations (about a minute).
    #[arg(long)]
    quick: bool,
}

fn main() {
    let mut args = Args::parse();
    if args.quick {
        args.sizes = vec![1, 16];
        args.sends = 40;
        args.rounds = 3;
        args.index_sessions = 1_000;
        args.index_events = 20;
        args.backlogs = vec![250, 500, 1000];
    }
    let temp = tempfile::tempdir().unwrap();
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    println!("# spex side-by-side run\n");
    println!("{}\n", machine());
    if args.index_only {
        session_index(&dir, &args);
        return;
    }
    if args.drain_only {
        drain(&dir, &args);
        backlog(&dir, &args);
        return;
    }
    let mut figures = Figures::default();
    durable_send(&dir, &args);
    concurrent_sends(&dir, &args);
    senders(&dir, &args, &mut figures);
    if !args.send_only {
        drain(&dir, &args);
        backlog(&dir, &args);
        reads(&dir, &args, &mut figures);
        session_index(&dir, &args);
        sweep_throughput();
    }
    if let Some(plots) = &args.plots {
        figures.draw(plots).unwrap();
    }
}

/// The figures the charts are drawn from, gathered as the tables are measured.
#[derive(Default)]
struct Figures {
    /// Sends/s against the number of senders to one session: engine, floor, SQLite.
    senders: [Vec<(f64, f64)>; 3],
    /// Medians in µs against the log size in MiB.
    tail: [Vec<(f64, f64)>; 2],
    follow: Vec<(f64, f64)>,
    lookup: [Vec<(f64, f64)>; 2],
}

impl Figures {
    fn draw(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        let named = |name: &str, points: &Vec<(f64, f64)>| Series {
            name: name.to_owned(),
            points: points.clone(),
        };
        if !self.senders[0].is_empty() {
            plot::draw(
                &dir.join("senders.svg"),
                Chart {
                    title: "Durable sends to one session, by number of senders",
                    x: "concurrent senders (threads)",
                    y: "sends/s (higher is better)",
                    log_x: true,
                    log_y: false,
                },
                &[
                    named("engine (group commit)", &self.senders[0]),
                    named("fsync floor (one send at a time)", &self.senders[1]),
                    named("SQLite WAL FULL", &self.senders[2]),
                ],
            )?;
            progress(&format!("drew {}", dir.join("senders.svg").display()));
        }
        if !self.tail[0].is_empty() {
            plot::draw(
                &dir.join("log-size.svg"),
                Chart {
                    title: "Reads against log size (warm)",
                    x: "log size (MiB)",
                    y: "median (µs, lower is better)",
                    log_x: true,
                    log_y: true,
                },
                &[
                    named("tail(500), engine", &self.tail[0]),
                    named("tail(500), SQLite", &self.tail[1]),
                    named("follow: one new event", &self.follow),
                    named("receipt lookup, warm handle", &self.lookup[1]),
                    named("receipt lookup, new handle", &self.lookup[0]),
                ],
            )?;
            progress(&format!("drew {}", dir.join("log-size.svg").display()));
        }
        Ok(())
    }
}

fn progress(text: &str) {
    eprintln!("compare: {text}");
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!(
        "Machine: {cores} cores ({cpu}), {}; {} profile. Ratios are the figures to read.",
        std::env::consts::OS,
        if cfg!(debug_assertions) { "debug" } else { "release" }
    )
}

fn active() -> Triple {
    Triple::new(Status::Active, None, None)
}

fn mid(i: u64) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

/// Mutating ops and syncs of one engine send, counted on the simulated filesystem.
fn send_ops() -> (usize, usize) {
    let fs = SimFs::new(FaultPlan::none(1));
    let store = Store::open(
        fs.clone(),
        "/store",
        Arc::new(spex_engine::env::ManualClock::new(1_000)),
        Arc::new(spex_engine::env::SeededIds::new(1)),
        Config::default(),
    )
    .unwrap();
    let id = SessionId::new("s").unwrap();
    store.create_session(&id, &active(), None, None).unwrap();
    store.send(&id, &SendRequest { text: message(0), ..SendRequest::default() }).unwrap();
    let before = fs.trace().len();
    store.send(&id, &SendRequest { text: message(1), ..SendRequest::default() }).unwrap();
    let trace = fs.trace();
    let ops = &trace.entries()[before..];
    let syncs = ops
        .iter()
        .filter(|op| matches!(op.op, OpKind::SyncData | OpKind::SyncAll | OpKind::SyncDir))
        .count();
    (ops.len(), syncs)
}

fn durable_send(dir: &Path, args: &Args) {
    progress("durable send, one sender");
    let root = dir.join("send");
    let store = open_store(&root.join("engine"));
    let mut connection = sqlite::open(&root.join("send.sqlite")).unwrap();
    let (mut engine, mut floor, mut lite, mut wal) =
        (Samples::default(), Samples::default(), Samples::default(), Samples::default());
    let mut i = 0;
    for round in 0..args.rounds {
        // A fresh session per round keeps the queue as short as a drained one would be.
        let id = SessionId::new(&format!("s{round}")).unwrap();
        store.create_session(&id, &active(), None, None).unwrap();
        let mut raw = Floor::create(&root.join("floor"), &format!("f{round}")).unwrap();
        for _ in 0..args.sends {
            i += 1;
            let request = SendRequest { text: message(i), ..SendRequest::default() };
            engine.time(|| store.send(&id, &request).unwrap());
        }
        for _ in 0..args.sends {
            i += 1;
            let line = sent_line(&format_ts(1_700_000_000_000 + i), &mid(i), &message(i));
            let entry = Entry {
                mid: mid(i),
                text: message(i),
                from: None,
                attributes: None,
                dispatch: None,
            };
            floor.time(|| raw.send(&line, entry).unwrap());
        }
        let mut prototype = Floor::create(&root.join("wal"), &format!("w{round}")).unwrap();
        for _ in 0..args.sends {
            i += 1;
            let line = sent_line(&format_ts(1_700_000_000_000 + i), &mid(i), &message(i));
            let entry = Entry {
                mid: mid(i),
                text: message(i),
                from: None,
                attributes: None,
                dispatch: None,
            };
            wal.time(|| prototype.send_log_as_wal(&line, entry).unwrap());
        }
        for _ in 0..args.sends {
            i += 1;
            let line = sent_line(&format_ts(1_700_000_000_000 + i), &mid(i), &message(i));
            let session = format!("s{round}");
            lite.time(|| {
                sqlite::send(&mut connection, &session, &line, &mid(i), &message(i)).unwrap()
            });
        }
    }
    let (ops, syncs) = send_ops();
    println!("## 1. Durable send, one sender\n");
    println!(
        "{} sends per competitor in {} alternating rounds; a fresh session per round.\n",
        args.sends * args.rounds,
        args.rounds
    );
    println!("| competitor | median | p99 | sends/s | engine ÷ this (median) |");
    println!("|---|---|---|---|---|");
    for (name, samples) in [
        ("engine", &engine),
        ("fsync floor", &floor),
        ("SQLite WAL FULL", &lite),
        ("log-as-WAL prototype (1 sync; not shipped)", &wal),
    ] {
        println!(
            "| {name} | {} | {} | {:.0} | {} |",
            show(samples.median()),
            show(samples.quantile(0.99)),
            samples.per_second(),
            ratio(engine.median(), samples.median())
        );
    }
    println!(
        "\nOne engine send issues {ops} mutating operations, {syncs} of them syncs (the floor: 3 \
         syncs: log fdatasync, queue fsync, directory fsync).\n"
    );
}

fn concurrent_sends(dir: &Path, args: &Args) {
    const THREADS: u64 = 8;
    let per_thread = args.sends.max(10) / 2;
    progress("durable send, eight concurrent senders");
    let root = dir.join("concurrent");
    println!("## 1b. Durable send, eight concurrent senders\n");
    println!("{THREADS} threads x {per_thread} sends each; total throughput.\n");
    println!("| competitor | one session: sends/s | eight sessions: sends/s |");
    println!("|---|---|---|");
    let store = Arc::new(open_store(&root.join("engine")));
    let mut engine = Vec::new();
    for (case, sessions) in [("one", 1u64), ("eight", THREADS)] {
        for s in 0..sessions {
            let id = SessionId::new(&format!("{case}{s}")).unwrap();
            store.create_session(&id, &active(), None, None).unwrap();
        }
        let started = Instant::now();
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let store = Arc::clone(&store);
                let id = SessionId::new(&format!("{case}{}", t % sessions)).unwrap();
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        let request =
                            SendRequest { text: message(t * 1000 + i), ..SendRequest::default() };
                        store.send(&id, &request).unwrap();
                    }
                })
            })
            .collect();
        workers.into_iter().for_each(|worker| worker.join().unwrap());
        engine.push((THREADS * per_thread) as f64 / started.elapsed().as_secs_f64());
    }
    let mut lite = Vec::new();
    for (case, sessions) in [("one", 1u64), ("eight", THREADS)] {
        let path = root.join(format!("{case}.sqlite"));
        drop(sqlite::open(&path).unwrap());
        let started = Instant::now();
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut connection = sqlite::open(&path).unwrap();
                    let session = format!("{case}{}", t % sessions);
                    for i in 0..per_thread {
                        let n = t * 1000 + i;
                        let line =
                            sent_line(&format_ts(1_700_000_000_000 + n), &mid(n), &message(n));
                        sqlite::send(&mut connection, &session, &line, &mid(n), &message(n))
                            .unwrap();
                    }
                })
            })
            .collect();
        workers.into_iter().for_each(|worker| worker.join().unwrap());
        lite.push((THREADS * per_thread) as f64 / started.elapsed().as_secs_f64());
    }
    println!("| engine | {:.0} | {:.0} |", engine[0], engine[1]);
    println!("| SQLite WAL FULL | {:.0} | {:.0} |", lite[0], lite[1]);
    println!("| engine ÷ SQLite | {:.2}x | {:.2}x |\n", engine[0] / lite[0], engine[1] / lite[1]);
}

/// Sends/s to one session for 1, 2, 4 and 8 concurrent senders: the engine (threads on one
/// handle: group commit), the floor (one send at a time behind a mutex: it has no lock of its
/// own) and SQLite (a connection per thread).
fn senders(dir: &Path, args: &Args, figures: &mut Figures) {
    progress("durable send, one to eight senders on one session");
    let root = dir.join("senders");
    let store = Arc::new(open_store(&root.join("engine")));
    let total = args.sends.max(10) * 4;
    println!(
        "## 1c. Durable sends to one session, by number of senders
"
    );
    println!(
        "{total} sends in all per row, spread over the senders; total throughput.
"
    );
    println!(
        "| senders | engine sends/s | fsync floor sends/s | SQLite sends/s | engine ÷ SQLite |"
    );
    println!("|---|---|---|---|---|");
    for threads in [1u64, 2, 4, 8] {
        let per_thread = total / threads;
        let id = SessionId::new(&format!("t{threads}")).unwrap();
        store.create_session(&id, &active(), None, None).unwrap();
        let rate = |run: &(dyn Fn(u64, u64) + Sync)| {
            let started = Instant::now();
            std::thread::scope(|scope| {
                for t in 0..threads {
                    scope.spawn(move || {
                        for i in 0..per_thread {
                            run(t, i);
                        }
                    });
                }
            });
            (threads * per_thread) as f64 / started.elapsed().as_secs_f64()
        };
        let engine = rate(&|t, i| {
            let request = SendRequest { text: message(t * 100_000 + i), ..SendRequest::default() };
            store.send(&id, &request).unwrap();
        });
        let floor = std::sync::Mutex::new(
            Floor::create(&root.join("floor"), &format!("t{threads}")).unwrap(),
        );
        let floor = rate(&|t, i| {
            let n = t * 100_000 + i;
            let line = sent_line(&format_ts(1_700_000_000_000 + n), &mid(n), &message(n));
            let entry = Entry {
                mid: mid(n),
                text: message(n),
                from: None,
                attributes: None,
                dispatch: None,
            };
            floor.lock().unwrap().send(&line, entry).unwrap();
        });
        let path = root.join(format!("t{threads}.sqlite"));
        drop(sqlite::open(&path).unwrap());
        let connections: Vec<std::sync::Mutex<rusqlite::Connection>> =
            (0..threads).map(|_| std::sync::Mutex::new(sqlite::open(&path).unwrap())).collect();
        let lite = rate(&|t, i| {
            let n = t * 100_000 + i;
            let line = sent_line(&format_ts(1_700_000_000_000 + n), &mid(n), &message(n));
            let mut connection = connections[t as usize].lock().unwrap();
            sqlite::send(&mut connection, "s", &line, &mid(n), &message(n)).unwrap();
        });
        let x = threads as f64;
        figures.senders[0].push((x, engine));
        figures.senders[1].push((x, floor));
        figures.senders[2].push((x, lite));
        println!("| {threads} | {engine:.0} | {floor:.0} | {lite:.0} | {:.2}x |", engine / lite);
    }
    println!();
}

/// A duration in microseconds, for a chart.
fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// An adapter that accepts everything and does nothing.
struct NoOp;

impl Adapter for NoOp {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        std::hint::black_box(message.text);
        Ok(())
    }
}

fn drain(dir: &Path, args: &Args) {
    progress("drain with a no-op adapter");
    let root = dir.join("drain");
    let entries = args.sends;
    let store = open_store(&root.join("engine"));
    let mut connection = sqlite::open(&root.join("drain.sqlite")).unwrap();
    let (mut engine, mut floor, mut lite) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let id = SessionId::new(&format!("d{round}")).unwrap();
        store.create_session(&id, &active(), None, None).unwrap();
        send_keyed(&store, &id, entries);
        let started = Instant::now();
        let report = store.drain(&id, &mut NoOp).unwrap();
        assert_eq!(report.delivered.len() as u64, entries);
        engine.push(started.elapsed());

        let mut raw = Floor::create(&root.join("floor"), &format!("f{round}")).unwrap();
        let settle = |mid: &str| {
            Line::Settled(Settlement {
                ts: format_ts(1_700_000_000_000),
                operation: "bench".into(),
                request_digest: format!("{:064x}", 7),
                mid: mid.to_owned(),
            })
            .encode()
        };
        for i in 0..entries {
            let line = sent_line(&format_ts(1_700_000_000_000 + i), &mid(i), &message(i));
            let dispatch =
                Some(Dispatch { operation: "bench".into(), request_digest: format!("{i:064x}") });
            raw.send(
                &line,
                Entry { mid: mid(i), text: message(i), from: None, attributes: None, dispatch },
            )
            .unwrap();
        }
        let started = Instant::now();
        let mut i = 0;
        while raw.drain_one(&settle(&mid(i))).unwrap() {
            i += 1;
        }
        floor.push(started.elapsed());

        let session = format!("d{round}");
        for i in 0..entries {
            let line = sent_line(&format_ts(1_700_000_000_000 + i), &mid(i), &message(i));
            sqlite::send(&mut connection, &session, &line, &mid(i), &message(i)).unwrap();
        }
        let started = Instant::now();
        while sqlite::drain_one(&mut connection, &session, |mid| settle(mid)).unwrap() {}
        lite.push(started.elapsed());
    }
    let rate = |times: &[Duration]| {
        let mut sorted = times.to_vec();
        sorted.sort();
        entries as f64 / sorted[sorted.len() / 2].as_secs_f64()
    };
    let (e, f, l) = (rate(&engine), rate(&floor), rate(&lite));
    println!("## 2. Drain, no-op adapter\n");
    println!(
        "{entries} keyed entries drained per round (the engine: a settlement line each, one queue rewrite per batch; the floor and SQLite: one entry per transaction), median of {} rounds.\n",
        args.rounds
    );
    println!("| competitor | entries/s | engine ÷ this |");
    println!("|---|---|---|");
    println!("| engine | {e:.0} | 1.00x |");
    println!("| fsync floor | {f:.0} | {:.2}x |", e / f);
    println!("| SQLite WAL FULL | {l:.0} | {:.2}x |\n", e / l);
}

/// Sends `count` keyed messages to session `id` (what the drain rows drain).
fn send_keyed(store: &Store<faultfs::RealFs>, id: &SessionId, count: u64) {
    for i in 0..count {
        let request = SendRequest {
            text: message(i),
            key: Some(Key { operation: "bench".into(), key: format!("k{i}") }),
            ..SendRequest::default()
        };
        store.send(id, &request).unwrap();
    }
}

/// A whole backlog drained at once: the time should grow linearly with the backlog.
fn backlog(dir: &Path, args: &Args) {
    let root = dir.join("backlog");
    let store = open_store(&root.join("engine"));
    let mut rows = Vec::new();
    for &owed in &args.backlogs {
        progress(&format!("draining a backlog of {owed} keyed messages"));
        let id = SessionId::new(&format!("b{owed}")).unwrap();
        store.create_session(&id, &active(), None, None).unwrap();
        send_keyed(&store, &id, owed);
        let started = Instant::now();
        let report = store.drain(&id, &mut NoOp).unwrap();
        let took = started.elapsed();
        assert_eq!(report.delivered.len() as u64, owed);
        rows.push((owed, took));
    }
    println!(
        "## 2b. Drain a backlog, no-op adapter
"
    );
    println!(
        "Every owed keyed message drained by one `drain` call (one run each).
"
    );
    println!("| owed | time | per message | ÷ the smallest backlog's per-message time |");
    println!("|---|---|---|---|");
    let per = |(owed, took): (u64, Duration)| took.as_secs_f64() / owed as f64;
    let base = rows.first().copied().map_or(1.0, per);
    for &(owed, took) in &rows {
        let per_message = per((owed, took));
        println!(
            "| {owed} | {:.2} s | {:.0} µs | {:.2}x |",
            took.as_secs_f64(),
            per_message * 1e6,
            per_message / base
        );
    }
    println!();
}

struct Sized {
    mib: u64,
    root: PathBuf,
    id: SessionId,
    sqlite: rusqlite::Connection,
    built: fixture::Built,
    build_time: Duration,
}

fn reads(dir: &Path, args: &Args, figures: &mut Figures) {
    let mut logs = Vec::new();
    for &mib in &args.sizes {
        progress(&format!("building a {mib} MiB log (and its SQLite mirror)"));
        let root = dir.join(format!("log{mib}"));
        let id = SessionId::new("big").unwrap();
        let mut connection = sqlite::open(&root.with_extension("sqlite")).unwrap();
        let started = Instant::now();
        let built = fixture::build(&root, &id, mib << 20, Some(&mut connection)).unwrap();
        logs.push(Sized {
            mib,
            root,
            id,
            sqlite: connection,
            built,
            build_time: started.elapsed(),
        });
    }
    tail(&logs, figures);
    follow(&logs, figures);
    lookup(&logs, figures);
    open_and_recover(&logs);
    full_reads(&logs);
    for log in &logs {
        progress(&format!("built {} MiB in {:.1} s", log.mib, log.build_time.as_secs_f64()));
    }
}

fn tail(logs: &[Sized], figures: &mut Figures) {
    progress("tail(500)");
    println!("## 3. tail(500), warm\n");
    println!(
        "| log | lines | segments | engine median | SQLite median | engine ÷ SQLite | naive full read |"
    );
    println!("|---|---|---|---|---|---|---|");
    for log in logs {
        let store = open_store(&log.root);
        let (mut engine, mut lite) = (Samples::default(), Samples::default());
        for _ in 0..3 {
            store.tail(&log.id, 500).unwrap();
            sqlite::tail(&log.sqlite, "big", 500).unwrap();
        }
        for _ in 0..50 {
            let events = engine.time(|| store.tail(&log.id, 500).unwrap());
            assert_eq!(events.len(), 500);
            lite.time(|| {
                let rows = sqlite::tail(&log.sqlite, "big", 500).unwrap();
                // Parsed into the same events the engine returns.
                rows.iter()
                    .filter_map(|row| Line::decode(row.as_bytes()).unwrap().public())
                    .collect::<Vec<_>>()
            });
        }
        let naive = if log.mib <= 64 {
            let mut naive = Samples::default();
            for _ in 0..3 {
                naive.time(|| store.events(&log.id).unwrap().len());
            }
            show(naive.median())
        } else {
            "(skipped)".to_owned()
        };
        figures.tail[0].push((log.mib as f64, micros(engine.median())));
        figures.tail[1].push((log.mib as f64, micros(lite.median())));
        println!(
            "| {} MiB | {} | {} | {} | {} | {} | {naive} |",
            log.mib,
            log.built.lines,
            log.built.segments,
            show(engine.median()),
            show(lite.median()),
            ratio(engine.median(), lite.median())
        );
    }
    println!();
}

fn follow(logs: &[Sized], figures: &mut Figures) {
    progress("follow");
    println!("## 4. Follow: one new event\n");
    println!("`follow(cursor)` after one new `sent` line (the naive alternative is section 6b).\n");
    println!("| log | follow median |");
    println!("|---|---|");
    for log in logs {
        let store = open_store(&log.root);
        let (_, mut cursor) = store.follow(&log.id, Cursor::START).unwrap();
        let mut samples = Samples::default();
        for i in 0..20 {
            let request = SendRequest { text: message(i), ..SendRequest::default() };
            store.send(&log.id, &request).unwrap();
            let (events, next) = samples.time(|| store.follow(&log.id, cursor).unwrap());
            assert_eq!(events.len(), 1);
            cursor = next;
        }
        figures.follow.push((log.mib as f64, micros(samples.median())));
        println!("| {} MiB | {} |", log.mib, show(samples.median()));
    }
    println!();
}

fn lookup(logs: &[Sized], figures: &mut Figures) {
    progress("keyed-send receipt lookup");
    println!("## 5. Keyed-send receipt lookup (a replay of the log's first keyed send)\n");
    println!(
        "One receipt in ten lines. Cold: no index file (the whole log is folded once). New \
         handle: the persisted index is loaded. Warm: the same handle again (only new bytes).\n"
    );
    println!("| log | receipts | cold (no index) | new handle (persisted index) | warm |");
    println!("|---|---|---|---|---|");
    for log in logs {
        let index = open_store(&log.root).layout().receipt_index(&log.id);
        let _ignored = std::fs::remove_file(&index);
        let store = open_store(&log.root);
        let started = Instant::now();
        let accepted = store.send(&log.id, &fixture::keyed_request()).unwrap();
        assert!(accepted.replayed);
        let cold = started.elapsed();
        let fresh = open_store(&log.root);
        let started = Instant::now();
        assert!(fresh.send(&log.id, &fixture::keyed_request()).unwrap().replayed);
        let loaded = started.elapsed();
        let mut warm = Samples::default();
        for _ in 0..20 {
            assert!(warm.time(|| fresh.send(&log.id, &fixture::keyed_request()).unwrap()).replayed);
        }
        figures.lookup[0].push((log.mib as f64, micros(loaded)));
        figures.lookup[1].push((log.mib as f64, micros(warm.median())));
        println!(
            "| {} MiB | {} | {} | {} | {} |",
            log.mib,
            log.built.lines / 10,
            show(cold),
            show(loaded),
            show(warm.median())
        );
    }
    println!();
}

fn open_and_recover(logs: &[Sized]) {
    progress("open and recovery");
    println!("## 6. Open and recovery\n");
    println!(
        "`Store::open` plus the recovery every writer runs first (`recover_session`), on a \
         new handle; and the same after a torn final line.\n"
    );
    println!("| log | segments | open + recovery | with a torn tail to repair |");
    println!("|---|---|---|---|");
    for log in logs {
        let mut clean = Samples::default();
        for _ in 0..10 {
            clean.time(|| {
                let store = open_store(&log.root);
                store.recover_session(&log.id).unwrap();
            });
        }
        let mut torn = Samples::default();
        for _ in 0..5 {
            let store = open_store(&log.root);
            let newest = std::fs::read_dir(store.layout().timeline_dir(&log.id))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .max()
                .unwrap();
            let mut file = std::fs::OpenOptions::new().append(true).open(&newest).unwrap();
            std::io::Write::write_all(&mut file, b"{\"ts\":\"2026-11-30T00:00:00.000Z\",\"ki")
                .unwrap();
            drop(file);
            drop(store);
            torn.time(|| {
                let store = open_store(&log.root);
                store.recover_session(&log.id).unwrap();
            });
        }
        println!(
            "| {} MiB | {} | {} | {} |",
            log.mib,
            log.built.segments,
            show(clean.median()),
            show(torn.median())
        );
    }
    println!();
}

/// Last of the log rows: reading millions of events and freeing them leaves the allocator with
/// millions of small free chunks, and glibc's malloc consolidates them on the next large
/// allocation (about a second after a 1 GiB read), which would land in whatever is measured next.
fn full_reads(logs: &[Sized]) {
    progress("full re-reads");
    println!("## 6b. The naive baseline: re-reading the whole log\n");
    println!("`events()`: every event, parsed (what a reader without a cursor or a tail pays).\n");
    println!("| log | full read |");
    println!("|---|---|");
    for log in logs {
        let store = open_store(&log.root);
        let started = Instant::now();
        let events = store.events(&log.id).unwrap();
        let elapsed = started.elapsed();
        assert!(events.len() as u64 >= log.built.lines - log.built.lines / 20 - 1);
        drop(events);
        println!("| {} MiB | {} |", log.mib, show(elapsed));
    }
    println!();
}

fn session_index(dir: &Path, args: &Args) {
    use spex_index::{Filter, Index, SearchFilter, Sort};
    let (sessions, events) = (args.index_sessions, args.index_events);
    progress(&format!("session index: {sessions} sessions x {events} events"));
    let root = dir.join("index");
    fixture::many_sessions(&root, sessions, events).unwrap();
    let store = open_store(&root);
    let mut index = Index::open(&root).unwrap();
    let started = Instant::now();
    index.rebuild(&store).unwrap();
    let rebuild = started.elapsed();
    let all = Filter { sort: Sort::Activity, status: None, all: true };
    let mut ls = Samples::default();
    for _ in 0..10 {
        let rows = ls.time(|| {
            index.refresh(&store).unwrap();
            index.sessions(&all).unwrap()
        });
        assert_eq!(rows.len() as u64, sessions);
    }
    let mut query_only = Samples::default();
    for _ in 0..10 {
        query_only.time(|| index.sessions(&all).unwrap().len());
    }
    let mut search = Samples::default();
    let words = ["w0042", "w1234 w0042", "w4999", "w0007", "w3141"];
    for round in 0..20 {
        let filter = SearchFilter { limit: 20, ..SearchFilter::default() };
        search.time(|| index.search(words[round % words.len()], &filter).unwrap());
    }
    // One new event in one session: the refresh folds only it (plus one stat per session).
    let mut one = Samples::default();
    for i in 0..10 {
        let id = SessionId::new(&format!("s{:06}", i * 7 % sessions)).unwrap();
        store.send(&id, &SendRequest { text: message(i), ..SendRequest::default() }).unwrap();
        let refreshed = one.time(|| index.refresh(&store).unwrap());
        assert_eq!((refreshed.updated, refreshed.events), (1, 1));
    }
    println!("## 8. Session index ({sessions} sessions x {events} events)\n");
    println!("| operation | median | target |");
    println!("|---|---|---|");
    println!("| rebuild from the logs (once) | {} | - |", show(rebuild));
    println!(
        "| `ls` warm: refresh (four stats per session) + query | {} | 50 ms |",
        show(ls.median())
    );
    println!("| the listing query alone | {} | - |", show(query_only.median()));
    println!("| search, 20 hits, bm25 + snippets | {} (p50) | 5 ms |", show(search.median()));
    println!("| refresh after one new event | {} | O(new bytes) |", show(one.median()));
    println!();
}

fn sweep_throughput() {
    use spex_verification::sweep::{self, Options};
    progress("crash sweep throughput");
    println!("## 7. Crash sweep throughput (one core)\n");
    println!("| sweep | crash points | images | wall | images/s |");
    println!("|---|---|---|---|---|");
    let cases: [(&str, Options); 3] = [
        (
            "send, depth 1, power loss, no faults",
            Options {
                scenarios: vec![sweep::scenario::named("send").unwrap()],
                modes: vec![faultfs::CrashMode::PowerLoss],
                depth2: false,
                faults: Vec::new(),
                ..Options::full(1)
            },
        ),
        (
            "send, depth 2, every mode and fault",
            Options {
                scenarios: vec![sweep::scenario::named("send").unwrap()],
                ..Options::full(1)
            },
        ),
        ("every scenario, depth 2, every mode and fault (the CI sweep)", Options::full(1)),
    ];
    for (name, options) in cases {
        let report = sweep::sweep(&options, &mut |_| {});
        assert!(report.violations.is_empty(), "the sweep found a violation: run spex verify sweep");
        println!(
            "| {name} | {} | {} | {:.1} s | {:.0} |",
            report.crash_points,
            report.images,
            report.elapsed.as_secs_f64(),
            report.images as f64 / report.elapsed.as_secs_f64()
        );
    }
    println!();
}
