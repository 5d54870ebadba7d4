//! `spex verify`: crash sweeps of the engine, replays of their violations, and the mutant check.
//!
//! - `sweep`: crash every scenario at every boundary under process kill and power loss (and its
//!   recovery again, with `--depth 2`), check every oracle rule, print the matrix. Exit 5 when a
//!   violation is found, so a pipeline can gate on it; `--shard I/N` splits the crash points.
//! - `replay TOKEN`: re-run the one image a violation names, bit for bit.
//! - `mutants`: run the sweep against each deliberately broken engine; every one must be caught.
//! - `locks`: model check the lock protocol across processes (`verify_locks.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use spex_engine::mutant::Mutant;
use spex_verification::realproc::{self, Kill};
use spex_verification::seed;
use spex_verification::sweep::{self, Options, Report, Token};

use crate::args::{Global, ModeArg};
use crate::exit::Code;
use crate::render::{SCHEMA_VERSION, out, outln};

use super::verify_report::{images_per_second, sweep_json};

/// Arguments of `spex verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Crash every scenario at every boundary, recover, and check every oracle rule.
    #[command(after_help = "Examples:
  spex verify sweep --budget 2m                     every scenario, at most two minutes
  spex verify sweep --scenario send --matrix        one scenario, and every matrix row
  spex verify sweep --media stale-tails --seed 7    the harsher medium, a fixed seed
  spex verify sweep --shard 0/4                     a quarter of the crash points")]
    Sweep(SweepArgs),
    /// Re-run the one crash image a violation's token names.
    #[command(after_help = "Examples:
  spex verify replay 'v1:send:power:...' --trace    the token a violation printed")]
    Replay(ReplayArgs),
    /// Reduce a violation to a minimal reproducer: fewest workload steps, closest image.
    #[command(after_help = "Examples:
  spex verify shrink 'v1:send:power:...'")]
    Shrink(ShrinkArgs),
    /// Sweep each deliberately broken engine variant; every one must be caught.
    #[command(after_help = "Examples:
  cargo run -p spex --features mutants -- verify mutants --seed 3
  cargo run -p spex --features mutants -- verify mutants --mutant no-log-sync")]
    Mutants(MutantsArgs),
    /// Merge the --json reports of every shard of one sweep (or of one mutant catalogue) into
    /// one verdict; fails when a shard is missing, repeated, cut short or swept something else.
    #[command(after_help = "Examples:
  for i in 0 1 2 3; do spex verify sweep --shard $i/4 --json > sweep-$i.json; done
  spex verify merge sweep-*.json")]
    Merge(MergeArgs),
    /// Model check the lock protocol across processes: every reachable state of up to 3
    /// processes at once, kills, pid reuse and a power loss; mutual exclusion and no
    /// acknowledged send lost.
    #[command(after_help = "Examples:
  spex verify locks                                  the engine's protocol, 5 processes in all
  spex verify locks --variant remove-then-create     a broken takeover, and the run that breaks it")]
    Locks(super::verify_locks::LocksArgs),
    /// Kill the real binary at every boundary of each scenario (and at random moments with
    /// SIGKILL), then recover the real directory and check every oracle rule.
    #[command(after_help = "Examples:
  spex verify real-sweep --scenario send --soak 50")]
    RealSweep(RealSweepArgs),
    /// Run one scenario on a real directory (the child of `real-sweep`; honours SPEX_KILL_AT).
    #[command(hide = true)]
    RunScenario(RunScenarioArgs),
}

#[derive(Debug, clap::Args)]
struct RealSweepArgs {
    /// Only these scenarios (repeatable).
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<String>,
    /// SIGKILL runs at seeded random moments, after the per-boundary kills.
    #[arg(long, default_value_t = 20)]
    soak: u64,
    /// Replay one kill: before mutating op K only.
    #[arg(long, value_name = "K", conflicts_with = "kill_after_us")]
    kill_at: Option<u64>,
    /// Replay one soak kill: SIGKILL after this many microseconds.
    #[arg(long, value_name = "US")]
    kill_after_us: Option<u64>,
    /// Seed (default: SPEX_SEED, else random; always printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Scratch directory for the runs (default: a temporary directory, removed afterwards).
    #[arg(long)]
    scratch: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
struct MergeArgs {
    /// The reports (`spex verify sweep --shard I/N --json`, or `verify mutants --shard I/N
    /// --json`), one per shard.
    #[arg(required = true, value_name = "REPORT")]
    reports: Vec<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RunScenarioArgs {
    #[arg(long)]
    scenario: String,
    #[arg(long)]
    journal: std::path::PathBuf,
    #[arg(long)]
    seed: u64,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum MediaArg {
    ZeroTails,
    StaleTails,
}

#[derive(Debug, clap::Args)]
struct SweepArgs {
    /// Only these scenarios (repeatable): send, drain, lifecycle, close, rollover, together.
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<String>,
    /// The medium: `zero-tails` (the default: a file that grew without its data shows zeros
    /// there) or `stale-tails` (it shows stale bytes, as ext4 data=writeback and xfs may).
    #[arg(long, value_enum, default_value_t = MediaArg::ZeroTails)]
    media: MediaArg,
    /// Sweep N generated workloads (seeded from --seed) instead of the embedded scenarios.
    #[arg(long, value_name = "N", conflicts_with = "scenarios")]
    random: Option<u64>,
    /// Crash modes.
    #[arg(long, value_enum, default_value_t = ModeArg::All)]
    mode: ModeArg,
    /// 1: crash each transition; 2: also crash every op of what follows a crash (recovery, the
    /// keyed retry, the drains) in every mode.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    depth: u8,
    /// Of each crash point's power-loss images, how many also get a power loss after their
    /// recovery and (depth 2) a crash at every op of it, as a kill does.
    #[arg(long, default_value_t = 1, value_name = "N")]
    deep_power_images: usize,
    /// Stop starting new crash points after this long (e.g. 90s, 5m). A sweep cut short exits 1
    /// (a check that did not check everything does not pass) unless --partial.
    #[arg(long, value_parser = crate::when::parse_duration)]
    budget: Option<Duration>,
    /// A sweep the budget cut short exits 0 when it found no violation (it still says what it
    /// did not reach).
    #[arg(long, requires = "budget")]
    partial: bool,
    /// Faults injected at every boundary besides the crashes: eio, enospc, short.
    #[arg(long, value_delimiter = ',', default_value = "eio,enospc,short")]
    faults: Vec<faultfs::Fault>,
    /// Inject no faults (crashes only).
    #[arg(long, conflicts_with = "faults")]
    no_faults: bool,
    /// Judge every distinct image, also those a judged image stands for (one that agrees with
    /// them on every path, kind and length and on the bytes of every file its judgement read),
    /// and run the judgement after recovery for every image, also where one that recovered to
    /// the same machine ran it: slower, with the same verdicts.
    #[arg(long, conflicts_with = "check_stand_ins")]
    every_image: bool,
    /// Check the images a judged one stands for and the shared judgements after recovery: judge
    /// each anyway and fail when its verdict (or what it read) differs from the one it would
    /// have been given (as slow as --every-image).
    #[arg(long)]
    check_stand_ins: bool,
    /// Sweep only shard I of N (0-based): crash point k is swept when k % N == I.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    shard: Option<(u64, u64)>,
    /// Threads judging crash points at once (default: the machine's cores). The report is the
    /// same for any number.
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    jobs: Option<u64>,
    /// Seed of every plan and sampled image (default: SPEX_SEED, else random; always printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also print the matrix: every scenario x transition x mode row (`--json` has every cell).
    #[arg(long)]
    matrix: bool,
    /// Sweep this deliberately broken engine instead of the real one (a build with the
    /// `mutants` feature only).
    #[arg(long, value_parser = parse_mutant)]
    mutant: Option<Mutant>,
}

#[derive(Debug, clap::Args)]
struct ShrinkArgs {
    /// The token a violation printed.
    token: String,
    /// Run against this deliberately broken engine (as `spex verify mutants` reports).
    #[arg(long, value_parser = parse_mutant)]
    mutant: Option<Mutant>,
}

fn parse_mutant(name: &str) -> Result<Mutant, String> {
    Mutant::parse(name).ok_or_else(|| {
        let names: Vec<String> = Mutant::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mutant {name:?} (expected one of: {})", names.join(", "))
    })
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The token a violation printed.
    token: String,
    /// Run against this deliberately broken engine (as `spex verify mutants` reports).
    #[arg(long, value_parser = parse_mutant)]
    mutant: Option<Mutant>,
    /// Also print the op trace of the run up to the crash.
    #[arg(long)]
    trace: bool,
}

#[derive(Debug, clap::Args)]
struct MutantsArgs {
    /// Seed of the sweeps.
    #[arg(long)]
    seed: Option<u64>,
    /// Only these mutants (repeatable; kebab-case names, as listed by a full run).
    #[arg(long = "mutant", value_parser = parse_mutant)]
    only: Vec<Mutant>,
    /// Only shard I of N (0-based) of the catalogue: mutant m is swept when m % N == I (merge
    /// the shards' --json reports with `spex verify merge`).
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    shard: Option<(u64, u64)>,
}

fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let (index, count) = text.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let index: u64 = index.parse().map_err(|_| format!("{index:?} is not a number"))?;
    let count: u64 = count.parse().map_err(|_| format!("{count:?} is not a number"))?;
    if count == 0 || index >= count {
        return Err(format!("shard {index}/{count}: need 0 <= I < N"));
    }
    Ok((index, count))
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let json = global.json;
    match &args.command {
        Command::Sweep(args) => run_sweep(args, json),
        Command::Replay(args) => run_replay(args, json),
        Command::Shrink(args) => run_shrink(args),
        Command::Mutants(args) => run_mutants(args, json),
        Command::Merge(args) => run_merge(args, json),
        Command::Locks(args) => super::verify_locks::run(args, json),
        Command::RealSweep(args) => run_real_sweep(args),
        Command::RunScenario(args) => {
            let scenario = realproc::scenario_named(&args.scenario).map_err(anyhow::Error::msg)?;
            let root = global.root.as_ref().context("run-scenario needs --root")?;
            realproc::run_child(&scenario, root, args.seed, &args.journal)
                .map_err(anyhow::Error::msg)?;
            Ok(Code::Ok)
        }
    }
}

fn run_sweep(args: &SweepArgs, json: bool) -> anyhow::Result<Code> {
    let seed = seed::resolve(args.seed).map_err(anyhow::Error::msg)?;
    eprintln!(
        "spex verify sweep: seed {seed} (replay with --seed {seed} or {}={seed})",
        seed::SEED_ENV
    );
    let options = sweep_options(args, seed)?;
    select_mutant(args.mutant)?;
    let bar = crate::render::progress_bar("crash points");
    let report = sweep::sweep(&options, &mut |progress| {
        if let Some(bar) = &bar {
            bar.set_length(progress.total);
            bar.set_position(progress.done);
            bar.set_message(format!(
                "{} images, {} violations",
                progress.images, progress.violations
            ));
        }
    });
    select_mutant(None)?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&sweep_json(&options, args.depth, args.mutant, &report))?
        )?;
    } else {
        if args.matrix {
            out!("{}\n", render_matrix(&report))?;
        }
        out!("{}", render_summary(seed, args, &options, &report))?;
    }
    if !report.violations.is_empty() {
        return Ok(Code::Violation);
    }
    if !report.unequal_stand_ins.is_empty() {
        for unequal in &report.unequal_stand_ins {
            eprintln!("spex: an image stood for is judged otherwise: {unequal}");
        }
        return Ok(Code::Violation);
    }
    if report.truncated && !args.partial {
        let missing = unreached(&report);
        eprintln!(
            "spex: the sweep was cut short by its budget: {} of {} crash points judged{}; raise --budget, or pass --partial to accept a partial sweep",
            report.crash_points,
            report.planned_points,
            if missing.is_empty() {
                String::new()
            } else {
                format!(" (not finished: {})", missing.join(", "))
            }
        );
        return Ok(Code::Failed);
    }
    Ok(Code::Ok)
}

/// The options of a sweep as its arguments ask: the scenarios named, generated or all.
fn sweep_options(args: &SweepArgs, seed: u64) -> anyhow::Result<Options> {
    let mut scenarios = Vec::new();
    for name in &args.scenarios {
        scenarios.push(sweep::scenario::named(name).with_context(|| {
            let names: Vec<String> =
                sweep::scenario::all().iter().map(|s| s.name.to_string()).collect();
            format!("unknown scenario {name:?} (expected one of: {})", names.join(", "))
        })?);
    }
    if let Some(count) = args.random {
        scenarios = (0..count).map(|index| sweep::generate::nth(seed, index)).collect();
        eprintln!(
            "generated workloads: {}",
            scenarios.iter().map(|s| s.name.to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    if scenarios.is_empty() {
        scenarios = sweep::scenario::all();
    }
    let modes = args.mode.modes().to_vec();
    let options = Options {
        seed,
        scenarios,
        modes,
        depth2: args.depth == 2,
        shard: args.shard.unwrap_or((0, 1)),
        stop_at_first: false,
        budget: args.budget,
        faults: if args.no_faults {
            Vec::new()
        } else {
            args.faults.iter().copied().filter(|f| *f != faultfs::Fault::Crash).collect()
        },
        deep_power_images: args.deep_power_images,
        media: match args.media {
            MediaArg::ZeroTails => faultfs::Media::ZeroTails,
            MediaArg::StaleTails => faultfs::Media::StaleTails,
        },
        jobs: args.jobs.map_or_else(sweep::cores, |jobs| jobs as usize),
        reduce_equivalent: !args.every_image,
        verify_equivalent: args.check_stand_ins,
    };
    Ok(options)
}

/// Boundaries never crashed at that the summary names (`--json` has every one).
const NEVER_CRASHED_SHOWN: usize = 12;

/// The scenarios a sweep cut short did not finish, with how far it got in each.
fn unreached(report: &Report) -> Vec<String> {
    report
        .reach
        .iter()
        .filter(|(_, reach)| reach.done < reach.planned)
        .map(|(scenario, reach)| format!("{scenario} ({} of {} points)", reach.done, reach.planned))
        .collect()
}

/// Boundaries, crash points, images and violations of one summary row.
type RowTotals = (u64, u64, u64, u64);

fn render_matrix(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    // Roll the matrix up to scenario x transition x mode; the JSON has every cell.
    let mut rows: BTreeMap<(String, String, &'static str), RowTotals> = BTreeMap::new();
    for ((scenario, transition, _, mode), cell) in &report.cells {
        let row = rows.entry((scenario.clone(), transition.clone(), mode.name())).or_default();
        row.0 += 1;
        row.1 += cell.points;
        row.2 += cell.images;
        row.3 += cell.violations;
    }
    let _ = writeln!(
        out,
        "{:<10} {:<22} {:<6} {:>10} {:>12} {:>8} {:>10}",
        "scenario", "transition", "mode", "boundaries", "crash points", "images", "violations"
    );
    for ((scenario, transition, mode), (boundaries, points, images, violations)) in &rows {
        let _ = writeln!(
            out,
            "{scenario:<10} {transition:<22} {mode:<6} {boundaries:>10} {points:>12} {images:>8} {violations:>10}"
        );
    }
    out
}

/// The one-screen summary of a sweep: what was swept, how far it got, how the power-loss images
/// were chosen, and each violation with the command that replays it.
fn render_summary(seed: u64, args: &SweepArgs, options: &Options, report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let names: Vec<&str> = options.scenarios.iter().map(|s| s.name.as_ref()).collect();
    let modes: Vec<&str> = options.modes.iter().map(|mode| mode.name()).collect();
    let _ = writeln!(
        out,
        "swept {} scenario{} ({}) under {}, depth {}, seed {seed}",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        names.join(", "),
        modes.join(" and "),
        args.depth
    );
    let shard = match options.shard {
        (_, 1) => String::new(),
        (index, count) => format!(" (shard {index}/{count})"),
    };
    let stopped = how_far(args, report);
    let _ = writeln!(
        out,
        "crash points: {} of {}{shard}, {stopped}",
        report.crash_points, report.planned_points
    );
    let _ = writeln!(out, "{}", enumeration_line(report));
    let never = report.never_crashed();
    let _ = writeln!(
        out,
        "boundaries: {} passed, {} crashed or faulted at; never crashed at: {}",
        report.reached.len(),
        report.crashed.len(),
        match never.len() {
            0 => "none".to_owned(),
            n if n <= NEVER_CRASHED_SHOWN => never.join(", "),
            n => format!(
                "{} and {} more (`--json` lists them all)",
                never[..NEVER_CRASHED_SHOWN].join(", "),
                n - NEVER_CRASHED_SHOWN
            ),
        }
    );
    let (rate, per_core) = images_per_second(report);
    let _ = writeln!(
        out,
        "images judged: {}; {} more stood for by a judged image that agrees with them on everything its judgement read; {} more skipped: the same image against the same run at the same crash point; of the judged, {} had the verdict of the same image (or restarted machine) judged against the same run elsewhere, {} shared the judgement after recovery with an image recovered to the same machine, and {} more the continued work, judged against their own run",
        report.images,
        report.equivalent,
        report.repeated,
        report.reused,
        report.shared,
        report.worked,
    );
    let _ = writeln!(
        out,
        "speed: {:.0} images/s on {} job{}, {per_core:.0} images/s per core, in {}",
        rate,
        report.jobs,
        if report.jobs == 1 { "" } else { "s" },
        crate::when::format_duration(Duration::from_secs(report.elapsed.as_secs())),
    );
    if options.verify_equivalent {
        let _ = writeln!(
            out,
            "stand-ins checked: {} images stood for were judged too, {} of them otherwise",
            report.equivalent,
            report.unequal_stand_ins.len()
        );
    }
    write_violations(&mut out, report);
    if !args.matrix {
        let _ = writeln!(out, "(--matrix prints every scenario x transition x mode row)");
    }
    out
}

/// How far a sweep got: every point, or cut short (by the budget: which scenarios were not
/// finished).
fn how_far(args: &SweepArgs, report: &Report) -> String {
    if !report.truncated {
        return "every point visited".to_owned();
    }
    let Some(budget) = args.budget else { return "stopped early".to_owned() };
    let missing = unreached(report);
    format!(
        "CUT SHORT: the budget of {} ran out{}",
        crate::when::format_duration(budget),
        if missing.is_empty() {
            String::new()
        } else {
            format!("; not finished: {}", missing.join(", "))
        }
    )
}

/// How the power-loss images were chosen: exhaustive (reduced or not) or sampled, and where.
fn enumeration_line(report: &Report) -> String {
    let sweep::Enumeration { exhaustive, reduced, classes, sampled, .. } =
        report.total_enumeration();
    let sampled_in: Vec<String> = report
        .enumeration
        .iter()
        .filter(|(_, counts)| counts.sampled > 0)
        .map(|(scenario, counts)| format!("{scenario} {}", counts.sampled))
        .collect();
    format!(
        "power-loss crashes: {exhaustive} with every image of the pending writes (exhaustive), {classes} with an image of every class a checked file's reader tells apart ({reduced} of both after leaving out pieces no image tells apart), {sampled} sampled{}",
        if sampled_in.is_empty() { String::new() } else { format!(" ({})", sampled_in.join(", ")) }
    )
}

/// The violations, each with its messages and the command that replays it.
fn write_violations(out: &mut String, report: &Report) {
    use std::fmt::Write as _;
    if report.violations.is_empty() {
        let _ = writeln!(out, "violations: none");
    } else {
        let _ = writeln!(out, "violations: {}", report.violations.len());
    }
    for violation in &report.violations {
        let _ = writeln!(
            out,
            "\nviolation: {} crash in {} at {}",
            violation.token.mode, violation.transition, violation.boundary
        );
        for message in &violation.messages {
            let _ = writeln!(out, "  {message}");
        }
        let _ = writeln!(out, "  replay: {}", violation.replay_command());
    }
}

fn run_merge(args: &MergeArgs, json: bool) -> anyhow::Result<Code> {
    let mut documents = Vec::new();
    for path in &args.reports {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|error| crate::exit::BadInput(format!("reading {file}: {error}")))?;
        let document: serde_json::Value = serde_json::from_str(&text).map_err(|error| {
            crate::exit::BadInput(format!(
                "{file} is not a report (line {}: {error})",
                error.line()
            ))
        })?;
        documents.push((file, document));
    }
    let merged = super::verify_report::merge(&documents).map_err(|error| {
        eprintln!("spex: {error:#}");
        error
    });
    let Ok(merged) = merged else { return Ok(Code::Failed) };
    if json {
        outln!("{}", serde_json::to_string_pretty(&merged.document)?)?;
    } else {
        out!("{}", merged.text)?;
    }
    Ok(if merged.failed { Code::Violation } else { Code::Ok })
}

fn run_replay(args: &ReplayArgs, json: bool) -> anyhow::Result<Code> {
    // A token that does not parse, or names no image of the sweep, is bad input (exit 2).
    let token: Token = args.token.parse().map_err(|reason| {
        crate::exit::BadInput(format!("replay token {:?}: {reason}", args.token))
    })?;
    select_mutant(args.mutant)?;
    let replay = sweep::replay(&token).map_err(|reason| {
        anyhow::Error::from(crate::exit::BadInput(format!("replay token {token}: {reason}")))
    });
    select_mutant(None)?;
    let replay = replay?;
    if json {
        let document = json!({
            "schema": SCHEMA_VERSION,
            "token": token.to_string(),
            "boundary": replay.boundary,
            "traceHash": replay.trace_hash,
            "violations": replay.messages,
        });
        outln!("{}", serde_json::to_string_pretty(&document)?)?;
    } else {
        outln!("token      {token}")?;
        outln!("boundary   {}", replay.boundary)?;
        outln!("trace hash {}", replay.trace_hash)?;
        if replay.messages.is_empty() {
            outln!("result     no violation")?;
        }
        for message in &replay.messages {
            outln!("violation  {message}")?;
        }
        if args.trace {
            outln!("\n{}", replay.trace)?;
        }
    }
    Ok(if replay.messages.is_empty() { Code::Ok } else { Code::Violation })
}

/// Selects a deliberately broken engine for this thread (`None`: the real one). Only a build
/// with the `mutants` feature has them; the shipped binary refuses.
fn select_mutant(mutant: Option<Mutant>) -> anyhow::Result<()> {
    #[cfg(feature = "mutants")]
    spex_engine::mutant::select(mutant);
    #[cfg(not(feature = "mutants"))]
    if let Some(mutant) = mutant {
        return Err(crate::exit::BadInput(format!(
            "this spex was built without the deliberately broken engines, so it cannot run {}; \
             build it with `cargo run -p spex --features mutants -- verify ...`",
            mutant.name()
        ))
        .into());
    }
    Ok(())
}

#[cfg(not(feature = "mutants"))]
fn run_mutants(_args: &MutantsArgs, _json: bool) -> anyhow::Result<Code> {
    Err(crate::exit::BadInput(
        "this spex was built without the deliberately broken engines (they are not shipped); \
         run `cargo run -p spex --features mutants -- verify mutants`"
            .to_owned(),
    )
    .into())
}

#[cfg(feature = "mutants")]
fn run_mutants(args: &MutantsArgs, json: bool) -> anyhow::Result<Code> {
    let seed = seed::resolve(args.seed).map_err(anyhow::Error::msg)?;
    eprintln!("spex verify mutants: seed {seed}");
    // Depth 2: several windows (an acknowledgement resting on unsynced bytes until the next
    // op's sync) show only when the op right after the acknowledgement is crashed.
    let options = Options::full(seed);
    // Mutants are selected per thread and each sweep runs on machines of its own, so the
    // catalogue is shared out over the cores.
    let listed: Vec<Mutant> = if args.only.is_empty() {
        Mutant::ALL.to_vec()
    } else {
        Mutant::ALL.into_iter().filter(|mutant| args.only.contains(mutant)).collect()
    };
    let (shard, shards) = args.shard.unwrap_or((0, 1));
    let catalogue: Vec<Mutant> = listed
        .iter()
        .enumerate()
        .filter(|(index, _)| *index as u64 % shards == shard)
        .map(|(_, mutant)| *mutant)
        .collect();
    let results = sweep_catalogue(&catalogue, &options, json);
    if !json {
        print_caught(&results)?;
        print_rules(&results)?;
    } else {
        let names: Vec<String> = listed.iter().map(|mutant| mutant.name()).collect();
        let document = super::verify_report::mutants_json(
            seed,
            (shard, shards),
            &names,
            caught_json(&results),
        );
        outln!("{}", serde_json::to_string_pretty(&document)?)?;
    }
    let missed: Vec<String> = results
        .iter()
        .filter(|caught| caught.first.is_none())
        .map(|caught| caught.mutant.name())
        .collect();
    if !missed.is_empty() {
        anyhow::bail!("mutants not caught by the sweep: {}", missed.join(", "));
    }
    Ok(Code::Ok)
}

/// Sweeps each mutant of `catalogue` on its own, shared out over the cores (mutants are
/// selected per thread and each sweep runs on machines of its own), with a progress line per
/// mutant; the results in catalogue order.
#[cfg(feature = "mutants")]
fn sweep_catalogue(catalogue: &[Mutant], options: &Options, json: bool) -> Vec<sweep::Caught> {
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let bar = crate::render::progress_bar("mutants")
        .inspect(|bar| bar.set_length(catalogue.len() as u64));
    if let Some(bar) = &bar {
        bar.set_message("sweeping the catalogue");
    }
    let found = sweep::catch_each(catalogue, options, workers, &|caught| {
        let line = format!(
            "{} {} in {}",
            caught.mutant.name(),
            if caught.first.is_some() { "caught" } else { "NOT CAUGHT" },
            crate::when::format_duration(Duration::from_secs(caught.elapsed.as_secs()))
        );
        match &bar {
            Some(bar) => {
                bar.println(line);
                bar.inc(1);
            }
            None if !json => eprintln!("{line}"),
            None => {}
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    found
}

/// Each mutant's verdict: where it was caught, the first message and the replay command.
#[cfg(feature = "mutants")]
fn print_caught(results: &[sweep::Caught]) -> anyhow::Result<()> {
    for caught in results {
        let mutant = caught.mutant;
        match &caught.first {
            Some(violation) => {
                let message = violation.messages.first().map_or("", String::as_str);
                outln!(
                    "{:<30} caught in {:>8.1?} after {:>6} images at {}",
                    mutant.name(),
                    caught.elapsed,
                    caught.images,
                    violation.boundary
                )?;
                outln!("{:<30} {message}", "")?;
                outln!(
                    "{:<30} replay: {} --mutant {}",
                    "",
                    violation.replay_command(),
                    mutant.name()
                )?;
            }
            None => outln!("{:<30} NOT CAUGHT after {} images", mutant.name(), caught.images)?,
        }
    }
    Ok(())
}

/// The oracle rules a mutant's first violation names.
#[cfg(feature = "mutants")]
fn rules_of(caught: &sweep::Caught) -> Vec<&'static str> {
    caught.first.as_ref().map(|v| sweep::rules_named(&v.messages)).unwrap_or_default()
}

/// Which rule caught which mutant (the first violation's rules): a rule no mutant of this run
/// trips is named too.
#[cfg(feature = "mutants")]
fn print_rules(results: &[sweep::Caught]) -> anyhow::Result<()> {
    outln!("\noracle rules, by the mutants whose first violation names them:")?;
    for rule in sweep::RULES {
        let by: Vec<String> = results
            .iter()
            .filter(|caught| rules_of(caught).contains(&rule))
            .map(|caught| caught.mutant.name())
            .collect();
        let by = if by.is_empty() { "no mutant of this run".to_owned() } else { by.join(", ") };
        outln!("  {rule:<32} {by}")?;
    }
    let other: Vec<String> = results
        .iter()
        .filter(|caught| caught.first.is_some() && rules_of(caught).is_empty())
        .map(|caught| caught.mutant.name())
        .collect();
    if !other.is_empty() {
        outln!("  {:<32} {}", "the harness's other checks", other.join(", "))?;
    }
    Ok(())
}

/// Each mutant's verdict as JSON.
#[cfg(feature = "mutants")]
fn caught_json(results: &[sweep::Caught]) -> Vec<serde_json::Value> {
    results
        .iter()
        .map(|caught| {
            json!({
                "name": caught.mutant.name(),
                "caught": caught.first.is_some(),
                "elapsedMs": caught.elapsed.as_millis() as u64,
                "images": caught.images,
                "token": caught.first.as_ref().map(|v| v.token.to_string()),
                "message": caught.first.as_ref().and_then(|v| v.messages.first().cloned()),
                "rules": rules_of(caught),
            })
        })
        .collect()
}

fn run_real_sweep(args: &RealSweepArgs) -> anyhow::Result<Code> {
    let seed = seed::resolve(args.seed).map_err(anyhow::Error::msg)?;
    eprintln!(
        "spex verify real-sweep: seed {seed} (replay with --seed {seed} or {}={seed})",
        seed::SEED_ENV
    );
    let binary = std::env::current_exe().context("locating the spex binary")?;
    let mut scenarios = Vec::new();
    for name in &args.scenarios {
        scenarios.push(realproc::scenario_named(name).map_err(anyhow::Error::msg)?);
    }
    if scenarios.is_empty() {
        scenarios = sweep::scenario::all();
    }
    let temporary;
    let scratch = match &args.scratch {
        Some(dir) => dir.clone(),
        None => {
            temporary = tempfile::tempdir().context("creating a scratch directory")?;
            temporary.path().to_path_buf()
        }
    };
    let single = match (args.kill_at, args.kill_after_us) {
        (Some(k), _) => Some(Kill::AtOp(k)),
        (_, Some(us)) => Some(Kill::After(Duration::from_micros(us))),
        _ => None,
    };
    if let Some(kill) = single {
        return run_real_once(&binary, &scenarios, seed, kill, &scratch);
    }
    let bar = crate::render::progress_bar("runs of the real binary");
    let report = realproc::sweep(&binary, &scenarios, seed, args.soak, &scratch, &mut |progress| {
        if let Some(bar) = &bar {
            bar.set_length(progress.total);
            bar.set_position(progress.done);
            bar.set_message(format!("{}, {} violations", progress.scenario, progress.violations));
        }
    })
    .map_err(anyhow::Error::msg);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    outln!(
        "{} runs of the real binary ({} killed mid-way), {} violations in {:.1?}",
        report.runs,
        report.kills,
        report.violations.len(),
        report.elapsed
    )?;
    for violation in &report.violations {
        outln!("\nviolation in {} ({:?}):", violation.scenario, violation.kill)?;
        for message in &violation.messages {
            outln!("  {message}")?;
        }
        outln!("  replay: {}", violation.replay)?;
    }
    Ok(if report.violations.is_empty() { Code::Ok } else { Code::Violation })
}

/// One run of the real binary per scenario, killed at `kill`, each judged on its own.
fn run_real_once(
    binary: &std::path::Path,
    scenarios: &[sweep::scenario::Scenario],
    seed: u64,
    kill: Kill,
    scratch: &std::path::Path,
) -> anyhow::Result<Code> {
    let mut code = Code::Ok;
    for scenario in scenarios {
        let work = scratch.join(scenario.name.as_ref());
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        let outcome =
            realproc::run_once(binary, scenario, seed, kill, &work).map_err(anyhow::Error::msg)?;
        outln!(
            "{} {kill:?}: died {}, {} violation(s)",
            scenario.name,
            outcome.died,
            outcome.violations.len()
        )?;
        for message in &outcome.violations {
            outln!("  {message}")?;
            code = Code::Violation;
        }
    }
    Ok(code)
}

fn run_shrink(args: &ShrinkArgs) -> anyhow::Result<Code> {
    let token: Token = args.token.parse().map_err(anyhow::Error::msg)?;
    select_mutant(args.mutant)?;
    let shrunk = sweep::shrink::shrink(&token).map_err(anyhow::Error::msg);
    select_mutant(None)?;
    let shrunk = shrunk?;
    let scenario = sweep::scenario::named(&shrunk.token.scenario).context("the shrunk scenario")?;
    outln!("minimal reproducer: {} step(s) of {}", scenario.steps.len(), token.scenario)?;
    for (index, step) in scenario.steps.iter().enumerate() {
        outln!("  {index}. {step:?}")?;
    }
    if shrunk.image_distance != u64::MAX {
        outln!("image: {} bytes from what the kernel held at the crash", shrunk.image_distance)?;
    }
    for message in &shrunk.messages {
        outln!("violation: {message}")?;
    }
    let mutant = args.mutant.map(|m| format!(" --mutant {}", m.name())).unwrap_or_default();
    outln!("replay: spex verify replay '{}'{mutant}", shrunk.token)?;
    Ok(Code::Violation)
}
