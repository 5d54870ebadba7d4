//! A crash sweep of a small durable log writer: the smallest complete demonstration of the
//! sweep method on `SimFs`, before the engine's own sweeps exist.
//!
//! The writer creates `/log/events.ndjson` and acknowledges lines one at a time. Pass 1 runs it
//! without faults and counts the mutating ops (the boundaries). Pass 2 crashes before every op
//! `k` (and once after the last), takes every post-crash image under process-kill and
//! power-loss semantics, and checks one rule: every acknowledged byte is in the image, in order.
//!
//! The correct writer (append, `fdatasync`, then acknowledge; directory synced after create)
//! must show no violation. Each broken variant drops one step and must be caught.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use faultfs::{Boundary, CrashMode, FaultPlan, File, Fs, OpenOptions, SimFs};

const DIR: &str = "/log";
const LOG: &str = "/log/events.ndjson";

/// Which log writer to sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Writer {
    /// Append, sync, acknowledge; the directory is synced after the file is created.
    Correct,
    /// Acknowledges without ever syncing the file.
    NoSync,
    /// Acknowledges a line before its sync.
    AckBeforeSync,
    /// Never syncs the directory after creating the file.
    NoDirSync,
}

impl Writer {
    /// Every writer, correct first.
    pub const ALL: [Writer; 4] =
        [Writer::Correct, Writer::NoSync, Writer::AckBeforeSync, Writer::NoDirSync];

    /// The writer's name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Writer::Correct => "correct",
            Writer::NoSync => "no-sync",
            Writer::AckBeforeSync => "ack-before-sync",
            Writer::NoDirSync => "no-dir-sync",
        }
    }
}

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for Writer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Writer::ALL.into_iter().find(|writer| writer.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Writer::ALL.iter().map(|writer| writer.name()).collect();
            format!("unknown writer {s:?} (expected one of: {})", names.join(", "))
        })
    }
}

/// One image that broke the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The crash point: before mutating op `crash_at` (equal to the op count: after the end).
    pub crash_at: u64,
    /// The boundary of that op (`end` after the last op).
    pub boundary: String,
    /// How the process died.
    pub mode: CrashMode,
    /// The content hash of the offending image.
    pub image: String,
    /// What was wrong.
    pub reason: String,
}

/// The result of sweeping one crash mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeReport {
    /// How the process died.
    pub mode: CrashMode,
    /// Crash points visited.
    pub crash_points: u64,
    /// Distinct images checked, summed over crash points.
    pub images: u64,
    /// Images generated before deduplication.
    pub generated: u64,
    /// Every image that broke the rule.
    pub violations: Vec<Violation>,
}

/// The result of a sweep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The seed everything derives from.
    pub seed: u64,
    /// The writer swept.
    pub writer: Writer,
    /// Lines written.
    pub lines: usize,
    /// The boundary of every mutating op of pass 1, in order.
    pub boundaries: Vec<String>,
    /// SHA-256 of pass 1's trace.
    pub trace_hash: String,
    /// One report per crash mode.
    pub modes: Vec<ModeReport>,
}

impl Report {
    /// Violations across every mode.
    pub fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.modes.iter().flat_map(|mode| mode.violations.iter())
    }
}

/// Runs the writer until it finishes or the filesystem fails; returns the acknowledged bytes.
fn write_log(fs: &SimFs, writer: Writer, lines: usize) -> Vec<u8> {
    let mut acked = Vec::new();
    // An error ends the run: a crash, like any failure, stops the writer where it is.
    let _ = try_write_log(fs, writer, lines, &mut acked);
    acked
}

fn try_write_log(
    fs: &SimFs,
    writer: Writer,
    lines: usize,
    acked: &mut Vec<u8>,
) -> faultfs::Result<()> {
    fs.create_dir(Path::new(DIR), Boundary::new("demo.dir.create"))?;
    fs.sync_dir(Path::new("/"), Boundary::new("demo.root.sync"))?;
    let log = fs.open(Path::new(LOG), OpenOptions::create(), Boundary::new("demo.log.create"))?;
    if writer != Writer::NoDirSync {
        fs.sync_dir(Path::new(DIR), Boundary::new("demo.dir.sync"))?;
    }
    for seq in 0..lines {
        let line = format!("{{\"seq\":{seq},\"text\":\"{}\"}}\n", "x".repeat(seq * 37 % 200));
        log.append(line.as_bytes(), Boundary::new("demo.log.append"))?;
        match writer {
            Writer::Correct | Writer::NoDirSync => {
                log.sync_data(Boundary::new("demo.log.sync"))?;
                acked.extend_from_slice(line.as_bytes());
            }
            Writer::NoSync => acked.extend_from_slice(line.as_bytes()),
            Writer::AckBeforeSync => {
                acked.extend_from_slice(line.as_bytes());
                log.sync_data(Boundary::new("demo.log.sync"))?;
            }
        }
    }
    Ok(())
}

/// The rule: every acknowledged byte survives, in order, at the start of the log.
fn check(image: &faultfs::Image, acked: &[u8]) -> Option<String> {
    if acked.is_empty() {
        return None;
    }
    match image.file(LOG) {
        None => Some(format!("{LOG} is missing but {} bytes were acknowledged", acked.len())),
        Some(bytes) if bytes.len() < acked.len() => {
            Some(format!("{LOG} holds {} bytes but {} were acknowledged", bytes.len(), acked.len()))
        }
        Some(bytes) => {
            let differ = bytes.iter().zip(acked).position(|(a, b)| a != b)?;
            Some(format!("{LOG} differs from the acknowledged bytes at offset {differ}"))
        }
    }
}

/// Sweeps `writer` over every crash point in `modes` (or only `crash_at`, to replay one).
pub fn sweep(
    seed: u64,
    writer: Writer,
    lines: usize,
    modes: &[CrashMode],
    crash_at: Option<u64>,
) -> Report {
    let pass1 = SimFs::new(FaultPlan::none(seed));
    write_log(&pass1, writer, lines);
    let trace = pass1.trace();
    let boundaries: Vec<String> =
        trace.entries().iter().map(|entry| entry.boundary.to_string()).collect();
    let op_count = pass1.op_count();
    let points: Vec<u64> = match crash_at {
        Some(k) => vec![k.min(op_count)],
        None => (0..=op_count).collect(),
    };
    let mut reports: Vec<ModeReport> = modes
        .iter()
        .map(|&mode| ModeReport {
            mode,
            crash_points: 0,
            images: 0,
            generated: 0,
            violations: Vec::new(),
        })
        .collect();
    for &k in &points {
        let fs = SimFs::new(FaultPlan::crash_at(seed, k));
        let acked = write_log(&fs, writer, lines);
        let boundary = boundaries.get(k as usize).map_or("end", String::as_str);
        for report in &mut reports {
            let crash = fs.crash(report.mode);
            report.crash_points += 1;
            report.images += crash.images.len() as u64;
            report.generated += crash.generated as u64;
            for image in &crash.images {
                if let Some(reason) = check(image, &acked) {
                    report.violations.push(Violation {
                        crash_at: k,
                        boundary: boundary.to_owned(),
                        mode: report.mode,
                        image: image.hash_hex(),
                        reason,
                    });
                }
            }
        }
    }
    Report { seed, writer, lines, boundaries, trace_hash: trace.hash_hex(), modes: reports }
}
