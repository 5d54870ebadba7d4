//! `spex verify locks`: the lock protocol across processes, model checked exhaustively.
//!
//! Every reachable state of the model in `spex_verification::lock_protocol` is explored; each
//! safety property holds in all of them or a run that breaks it is printed, step by step.
//! Exit 5 when a property fails (as for a broken variant), 1 when an example the model must
//! reach was not reached (bounds too small to say anything).

use std::time::Instant;

use serde_json::json;
use spex_verification::lock_protocol::{self, LockModel, Variant};

use crate::exit::Code;
use crate::render::{SCHEMA_VERSION, out, outln};

/// Arguments of `spex verify locks`.
#[derive(Debug, clap::Args)]
pub(crate) struct LocksArgs {
    /// The protocol: `faithful` (the engine's), or a broken variant: `takeover-without-recheck`,
    /// `no-vouch-after-takeover`, `remove-then-create`.
    #[arg(long, default_value = "faithful", value_parser = parse_variant)]
    variant: Variant,
    /// Processes that run at the same time.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=4))]
    processes: u8,
    /// Processes started in all (a slot's next process follows a killed one, often under a
    /// reused pid); each one more multiplies the states by about five.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(1..=7))]
    starts: u8,
    /// Threads exploring (default: the cores).
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
}

fn parse_variant(name: &str) -> Result<Variant, String> {
    Variant::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Variant::ALL.iter().map(|variant| variant.name()).collect();
        format!("no variant {name:?}; one of: {}", names.join(", "))
    })
}

pub(crate) fn run(args: &LocksArgs, json: bool) -> anyhow::Result<Code> {
    let model = LockModel { variant: args.variant, slots: args.processes, starts: args.starts };
    let jobs = args.jobs.unwrap_or_else(spex_verification::sweep::cores);
    eprintln!(
        "spex: checking the lock protocol ({}): {} processes at once, {} in all, {jobs} threads",
        model.variant.name(),
        model.slots,
        model.starts
    );
    let started = Instant::now();
    let verdict = lock_protocol::check(model, jobs);
    let seconds = started.elapsed().as_secs_f64();
    let broken = verdict.safety.iter().any(|(_, broken)| broken.is_some());
    let unreached = verdict.examples.iter().any(|(_, reached)| !reached);
    if json {
        outln!("{}", serde_json::to_string_pretty(&verdict_json(&model, &verdict, seconds))?)?;
    } else {
        print_verdict(&model, &verdict, seconds)?;
    }
    Ok(if broken {
        Code::Violation
    } else if unreached {
        Code::Failed
    } else {
        Code::Ok
    })
}

/// The verdict as JSON: each property with its counterexample, each example reached or not.
fn verdict_json(
    model: &LockModel,
    verdict: &lock_protocol::Verdict,
    seconds: f64,
) -> serde_json::Value {
    let safety: Vec<_> = verdict
        .safety
        .iter()
        .map(|(property, broken)| {
            json!({
                "property": property,
                "holds": broken.is_none(),
                "counterexample": broken.as_ref().map(|broken| lock_protocol::narrate(model, broken)),
            })
        })
        .collect();
    let examples: Vec<_> = verdict
        .examples
        .iter()
        .map(|(example, reached)| json!({ "example": example, "reached": reached }))
        .collect();
    json!({
        "schema": SCHEMA_VERSION,
        "kind": "locks",
        "variant": model.variant.name(),
        "processes": model.slots,
        "starts": model.starts,
        "states": verdict.unique_states,
        "visited": verdict.states,
        "depth": verdict.max_depth,
        "seconds": seconds,
        "safety": safety,
        "examples": examples,
    })
}

/// The verdict for people: each property holding or failing (with the run that breaks it),
/// each example reached or not.
fn print_verdict(
    model: &LockModel,
    verdict: &lock_protocol::Verdict,
    seconds: f64,
) -> anyhow::Result<()> {
    out!(
        "lock protocol ({}): {} states ({} visited), runs up to {} steps, {seconds:.1} s\n",
        model.variant.name(),
        verdict.unique_states,
        verdict.states,
        verdict.max_depth
    )?;
    for (property, broken) in &verdict.safety {
        match broken {
            None => out!("  holds     {property}\n")?,
            Some(broken) => {
                let steps = lock_protocol::narrate(model, broken);
                out!("  FAILS     {property}: a run that breaks it ({} steps)\n", steps.len())?;
                for (number, step) in (1..).zip(&steps) {
                    out!("              {number:>2}. {step}\n")?;
                }
            }
        }
    }
    for (example, reached) in &verdict.examples {
        let word = if *reached { "reached" } else { "NOT REACHED" };
        out!("  {word:<9} {example}\n")?;
    }
    Ok(())
}
