//! `spex demo`: demonstrates the crash model of `faultfs` on an embedded workload.
//!
//! Two parts: the litmus tests of the model (each must hold, and must fail with its rule
//! switched off), and a crash sweep of a small durable log writer, correct and broken (the
//! correct writer must show no violation; every broken one must be caught).

use std::fmt::Write as _;

use anyhow::Context as _;
use faultfs::litmus;
use serde_json::json;
use spex_verification::demo::{self, Report, Writer};
use spex_verification::seed;

use crate::args::{Global, ModeArg};
use crate::exit::{BadInput, Code};
use crate::render::{out, outln};

/// JSON schema version of `spex demo --json`.
const SCHEMA_VERSION: u32 = 1;

/// Arguments of `spex demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Sweep only this writer: correct, no-sync, ack-before-sync or no-dir-sync. With a single
    /// writer, a violation exits with code 5 (violation found).
    #[arg(long)]
    writer: Option<Writer>,
    /// Lines the log writer appends.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u16).range(1..=200))]
    lines: u16,
    /// Crash modes to sweep.
    #[arg(long, value_enum, default_value_t = ModeArg::All)]
    mode: ModeArg,
    /// Replay a single crash point (before mutating op K) instead of sweeping all of them.
    #[arg(long, value_name = "K")]
    crash_at: Option<u64>,
    /// Seed of the run (default: SPEX_SEED, else random; always printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

struct LitmusRow {
    litmus: litmus::Litmus,
    with: litmus::Outcome,
    without: litmus::Outcome,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    if global.root.is_some() {
        return Err(BadInput(
            "demo runs on simulated disks only and takes no --root (nothing is written)".to_owned(),
        )
        .into());
    }
    let seed = seed::resolve(args.seed).map_err(anyhow::Error::msg)?;
    eprintln!("spex demo: seed {seed} (replay with --seed {seed} or {}={seed})", seed::SEED_ENV);

    let litmus_rows = litmus::ALL
        .iter()
        .map(|litmus| {
            let with = (litmus.run)(faultfs::Rules::CRASH_MODEL)
                .with_context(|| format!("litmus {} failed to run", litmus.name))?;
            let without = (litmus.run)(litmus.without).with_context(|| {
                format!("litmus {} failed to run without its rule", litmus.name)
            })?;
            Ok(LitmusRow { litmus: *litmus, with, without })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let litmus_ok = litmus_rows.iter().all(|row| row.with.holds && !row.without.holds);

    let writers: Vec<Writer> = match args.writer {
        Some(writer) => vec![writer],
        None => Writer::ALL.to_vec(),
    };
    let reports: Vec<Report> = writers
        .iter()
        .map(|&writer| {
            demo::sweep(seed, writer, usize::from(args.lines), args.mode.modes(), args.crash_at)
        })
        .collect();

    // Expectations: the correct writer is clean; every broken writer is caught.
    let correct_clean = reports
        .iter()
        .filter(|report| report.writer == Writer::Correct)
        .all(|report| report.violations().next().is_none());
    let broken_caught = reports
        .iter()
        .filter(|report| report.writer != Writer::Correct)
        .all(|report| report.violations().next().is_some());

    if args.json {
        outln!("{}", serde_json::to_string_pretty(&to_json(seed, &litmus_rows, &reports))?)?;
    } else {
        out!("{}", render(seed, args, &litmus_rows, &reports))?;
    }

    let code = match args.writer {
        Some(_) if reports.iter().any(|report| report.violations().next().is_some()) => {
            Code::Violation
        }
        Some(_) => Code::Ok,
        None if litmus_ok && correct_clean && broken_caught && args.crash_at.is_none() => Code::Ok,
        None if args.crash_at.is_some() => Code::Ok,
        None => {
            eprintln!(
                "spex demo: expectations not met (litmus ok: {litmus_ok}, correct writer clean: \
                 {correct_clean}, broken writers caught: {broken_caught})"
            );
            Code::Failed
        }
    };
    Ok(code)
}

fn replay_command(seed: u64, report: &Report, violation: &demo::Violation) -> String {
    format!(
        "spex demo --writer {} --lines {} --seed {seed} --crash-at {} --mode {}",
        report.writer, report.lines, violation.crash_at, violation.mode
    )
}

fn render(seed: u64, args: &Args, litmus_rows: &[LitmusRow], reports: &[Report]) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "Crash model litmus tests (each must hold, and must fail without its rule)");
    let _ = writeln!(
        out,
        "  {:<26} {:<8} {:>6} {:>9}  {:<6} without its rule",
        "litmus", "rule", "images", "witnesses", "holds"
    );
    for row in litmus_rows {
        let rule = row.litmus.rule.split_whitespace().next().unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<26} {:<8} {:>6} {:>9}  {:<6} {}",
            row.litmus.name,
            rule,
            row.with.images,
            row.with.witnesses,
            if row.with.holds { "yes" } else { "NO" },
            if row.without.holds { "still holds (BAD)" } else { "fails, as it must" }
        );
    }
    let _ = writeln!(out);
    for report in reports {
        let _ = writeln!(
            out,
            "Crash sweep of the {} log writer: {} lines, {} boundaries, trace {}",
            report.writer,
            report.lines,
            report.boundaries.len(),
            &report.trace_hash[..16]
        );
        for mode in &report.modes {
            let _ = writeln!(
                out,
                "  {:<6} crash points {:>4}  images {:>6} (generated {:>6})  violations {:>5}",
                mode.mode,
                mode.crash_points,
                mode.images,
                mode.generated,
                mode.violations.len()
            );
        }
        if let Some(violation) = report.violations().next() {
            let _ = writeln!(
                out,
                "  first violation: {} crash before op {} ({}), image {}: {}",
                violation.mode,
                violation.crash_at,
                violation.boundary,
                &violation.image[..16],
                violation.reason
            );
            let _ = writeln!(out, "  replay: {}", replay_command(seed, report, violation));
        }
        if args.crash_at.is_some() {
            for violation in report.violations() {
                let _ = writeln!(
                    out,
                    "  {} image {}: {}",
                    violation.mode, violation.image, violation.reason
                );
            }
        }
        let _ = writeln!(out);
    }
    out
}

fn to_json(seed: u64, litmus_rows: &[LitmusRow], reports: &[Report]) -> serde_json::Value {
    json!({
        "schema": SCHEMA_VERSION,
        "seed": crate::render::json_u64(seed),
        "litmus": litmus_rows.iter().map(|row| json!({
            "name": row.litmus.name,
            "scenario": row.litmus.scenario,
            "expectation": row.litmus.expectation,
            "rule": row.litmus.rule,
            "images": row.with.images,
            "witnesses": row.with.witnesses,
            "holds": row.with.holds,
            "holdsWithoutRule": row.without.holds,
        })).collect::<Vec<_>>(),
        "sweeps": reports.iter().map(|report| json!({
            "writer": report.writer.name(),
            "lines": report.lines,
            "boundaries": report.boundaries,
            "traceHash": report.trace_hash,
            "modes": report.modes.iter().map(|mode| json!({
                "mode": mode.mode.name(),
                "crashPoints": mode.crash_points,
                "images": mode.images,
                "generated": mode.generated,
                "violations": mode.violations.iter().map(|violation| json!({
                    "crashAt": violation.crash_at,
                    "boundary": violation.boundary,
                    "image": violation.image,
                    "reason": violation.reason,
                    "replay": replay_command(seed, report, violation),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
