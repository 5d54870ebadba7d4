//! The JSON documents of `spex verify sweep --json` and `spex verify mutants --json`, read back
//! by `spex verify merge`, which merges the reports of a sweep's (or the catalogue's) shards
//! into one verdict.
//!
//! A sweep document names what was swept (seed, scenarios, modes, depth, faults, medium,
//! deep power images) and its shard; shards merge only when all of that is the same and every
//! shard `0..N` is present exactly once, complete (not cut short). The merged document has the
//! shape of one run's, with the same totals, cells and violations as one run over every point
//! (`sweep::merge` says why that is exact).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use spex_engine::mutant::Mutant;
use spex_verification::sweep::{
    self, Cell, CellKey, Enumeration, Options, Reach, Report, Violation,
};

use crate::render::{SCHEMA_VERSION, json_u64};

/// What a sweep's shards must agree on to be merged.
fn fingerprint(options: &Options, depth: u8, mutant: Option<Mutant>) -> Value {
    json!({
        "mutant": mutant.map(Mutant::name),
        "scenarios": options.scenarios.iter().map(|s| s.name.to_string()).collect::<Vec<_>>(),
        "modes": options.modes.iter().map(|mode| mode.name()).collect::<Vec<_>>(),
        "depth": depth,
        "deepPowerImages": options.deep_power_images,
        "everyImage": !options.reduce_equivalent,
        "faults": options.faults.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "media": options.media.name(),
    })
}

/// Images judged per second of wall time, and per second per job.
pub(crate) fn images_per_second(report: &Report) -> (f64, f64) {
    let seconds = report.elapsed.as_secs_f64();
    let rate = if seconds > 0.0 { report.images as f64 / seconds } else { 0.0 };
    (rate, rate / report.jobs.max(1) as f64)
}

fn mode_of(text: &str) -> anyhow::Result<faultfs::CrashMode> {
    match text {
        "kill" => Ok(faultfs::CrashMode::ProcessKill),
        "power" => Ok(faultfs::CrashMode::PowerLoss),
        other => bail!("unknown crash mode {other:?}"),
    }
}

fn cell_key(value: &Value) -> anyhow::Result<CellKey> {
    let text = |field: &str| -> anyhow::Result<String> {
        Ok(value[field].as_str().with_context(|| format!("a cell without {field}"))?.to_owned())
    };
    Ok((text("scenario")?, text("transition")?, text("boundary")?, mode_of(&text("mode")?)?))
}

fn cell_json(key: &CellKey) -> Value {
    let (scenario, transition, boundary, mode) = key;
    json!({ "scenario": scenario, "transition": transition, "boundary": boundary, "mode": mode.name() })
}

/// The document of a sweep's report.
pub(crate) fn sweep_json(
    options: &Options,
    depth: u8,
    mutant: Option<Mutant>,
    report: &Report,
) -> Value {
    let shard = (options.shard.0, options.shard.1);
    document(&json_u64(options.seed), shard, &fingerprint(options, depth, mutant), report)
}

/// A sweep document: what was swept, and its report.
fn document(seed: &Value, shard: (u64, u64), swept: &Value, report: &Report) -> Value {
    json!({
        "schema": SCHEMA_VERSION,
        "kind": "sweep",
        "seed": seed,
        "shard": { "index": shard.0, "count": shard.1 },
        "swept": swept,
        "crashPoints": report.crash_points,
        "plannedPoints": report.planned_points,
        "images": report.images,
        "elapsedMs": report.elapsed.as_millis() as u64,
        "jobs": report.jobs,
        "imagesPerSecond": images_per_second(report).0,
        "imagesPerSecondPerCore": images_per_second(report).1,
        "truncated": report.truncated,
        "repeatedImages": report.repeated,
        "equivalentImages": report.equivalent,
        "sharedContinuations": report.shared,
        "sharedWork": report.worked,
        "reusedJudgements": report.reused,
        "recalledRecoveries": report.recalled,
        "keptPowerLosses": report.kept_power_losses,
        "reach": report.reach.iter().map(|(scenario, reach)| json!({
            "scenario": scenario, "planned": reach.planned, "done": reach.done,
        })).collect::<Vec<_>>(),
        "enumeration": report.enumeration.iter().map(|(scenario, e)| json!({
            "scenario": scenario,
            "exhaustive": e.exhaustive,
            "reduced": e.reduced,
            "classes": e.classes,
            "sampled": e.sampled,
            "pendingPiecesMax": e.pieces_max,
        })).collect::<Vec<_>>(),
        "boundaries": {
            "reached": report.reached,
            "crashed": report.crashed,
            "neverCrashed": report.never_crashed(),
        },
        "cells": report.cells.iter().map(|(key, cell)| {
            let mut value = cell_json(key);
            value["points"] = json!(cell.points);
            value["images"] = json!(cell.images);
            value["violations"] = json!(cell.violations);
            value["repeated"] = json!(cell.repeated);
            value["equivalent"] = json!(cell.equivalent);
            value
        }).collect::<Vec<_>>(),
        "violations": report.violations.iter().map(|violation| json!({
            "token": violation.token.to_string(),
            "transition": violation.transition,
            "boundary": violation.boundary,
            "messages": violation.messages,
            "replay": violation.replay_command(),
            "cell": violation.cell.as_ref().map(cell_json),
        })).collect::<Vec<_>>(),
    })
}

fn u64_of(value: &Value, field: &str) -> anyhow::Result<u64> {
    value[field].as_u64().with_context(|| format!("no number {field:?}"))
}

fn array<'a>(value: &'a Value, field: &str) -> anyhow::Result<&'a Vec<Value>> {
    value[field].as_array().with_context(|| format!("no list {field:?}"))
}

/// A sweep document read back: what it swept, its shard, and its report.
struct SweepPart {
    seed: String,
    swept: Value,
    shard: (u64, u64),
    report: Report,
}

fn sweep_part(document: &Value) -> anyhow::Result<SweepPart> {
    let mut report = Report::default();
    report.crash_points = u64_of(document, "crashPoints")?;
    report.planned_points = u64_of(document, "plannedPoints")?;
    report.images = u64_of(document, "images")?;
    report.truncated = document["truncated"].as_bool().context("no \"truncated\"")?;
    report.repeated = u64_of(document, "repeatedImages")?;
    report.equivalent = u64_of(document, "equivalentImages")?;
    report.shared = u64_of(document, "sharedContinuations")?;
    report.worked = u64_of(document, "sharedWork")?;
    report.reused = u64_of(document, "reusedJudgements")?;
    report.recalled = u64_of(document, "recalledRecoveries")?;
    report.kept_power_losses = u64_of(document, "keptPowerLosses")?;
    report.elapsed = Duration::from_millis(u64_of(document, "elapsedMs")?);
    report.jobs = usize::try_from(u64_of(document, "jobs")?)?;
    for reach in array(document, "reach")? {
        let scenario = reach["scenario"].as_str().context("a reach without a scenario")?;
        let reach = Reach { planned: u64_of(reach, "planned")?, done: u64_of(reach, "done")? };
        report.reach.insert(scenario.to_owned(), reach);
    }
    for counts in array(document, "enumeration")? {
        let scenario = counts["scenario"].as_str().context("an enumeration without a scenario")?;
        let counts = Enumeration {
            exhaustive: u64_of(counts, "exhaustive")?,
            reduced: u64_of(counts, "reduced")?,
            classes: u64_of(counts, "classes")?,
            sampled: u64_of(counts, "sampled")?,
            pieces_max: usize::try_from(u64_of(counts, "pendingPiecesMax")?)?,
        };
        report.enumeration.insert(scenario.to_owned(), counts);
    }
    let boundaries = &document["boundaries"];
    for (field, into) in [("reached", &mut report.reached), ("crashed", &mut report.crashed)] {
        for name in array(boundaries, field)? {
            into.insert(name.as_str().context("a boundary that is not a string")?.to_owned());
        }
    }
    for cell in array(document, "cells")? {
        let counts = Cell {
            points: u64_of(cell, "points")?,
            images: u64_of(cell, "images")?,
            violations: u64_of(cell, "violations")?,
            repeated: u64_of(cell, "repeated")?,
            equivalent: u64_of(cell, "equivalent")?,
        };
        report.cells.insert(cell_key(cell)?, counts);
    }
    for violation in array(document, "violations")? {
        let token = violation["token"].as_str().context("a violation without a token")?;
        let messages = array(violation, "messages")?;
        report.violations.push(Violation {
            token: token.parse().map_err(|reason| anyhow::anyhow!("token {token:?}: {reason}"))?,
            transition: violation["transition"].as_str().unwrap_or_default().to_owned(),
            boundary: violation["boundary"].as_str().unwrap_or_default().to_owned(),
            messages: messages.iter().filter_map(|m| m.as_str().map(str::to_owned)).collect(),
            cell: match &violation["cell"] {
                Value::Null => None,
                cell => Some(cell_key(cell)?),
            },
        });
    }
    let shard = &document["shard"];
    Ok(SweepPart {
        seed: document["seed"].as_str().context("no seed")?.to_owned(),
        swept: document["swept"].clone(),
        shard: (u64_of(shard, "index")?, u64_of(shard, "count")?),
        report,
    })
}

/// Checks that `shards` (index, count) name every shard `0..N` exactly once.
fn check_shards(shards: &[(u64, u64)], what: &str) -> anyhow::Result<u64> {
    let count = shards.first().map_or(0, |shard| shard.1);
    if shards.iter().any(|shard| shard.1 != count) {
        bail!("the {what} reports split the work differently: {shards:?}");
    }
    let mut seen = vec![0u32; usize::try_from(count)?];
    for &(index, _) in shards {
        seen[usize::try_from(index)?] += 1;
    }
    let missing: Vec<String> =
        (0..count).filter(|i| seen[*i as usize] == 0).map(|i| format!("{i}/{count}")).collect();
    let twice: Vec<String> =
        (0..count).filter(|i| seen[*i as usize] > 1).map(|i| format!("{i}/{count}")).collect();
    if !missing.is_empty() {
        bail!("shard {} missing: the merge would not cover every point", missing.join(", "));
    }
    if !twice.is_empty() {
        bail!("shard {} given more than once", twice.join(", "));
    }
    Ok(count)
}

/// What `spex verify merge` found.
pub(crate) struct Merged {
    /// The merged document.
    pub(crate) document: Value,
    /// The lines a person reads.
    pub(crate) text: String,
    /// Whether it found a violation (or a mutant not caught).
    pub(crate) failed: bool,
}

/// Merges the documents of every shard of one sweep, or of one mutant catalogue.
pub(crate) fn merge(documents: &[(String, Value)]) -> anyhow::Result<Merged> {
    let kinds: Vec<&str> =
        documents.iter().map(|(_, document)| document["kind"].as_str().unwrap_or("?")).collect();
    match kinds.as_slice() {
        [] => bail!("nothing to merge"),
        [first, ..] if kinds.iter().any(|kind| kind != first) => {
            bail!("the reports are of different kinds: {}", kinds.join(", "))
        }
        ["sweep", ..] => merge_sweeps(documents),
        ["mutants", ..] => merge_mutants(documents),
        [other, ..] => bail!("not a sweep or mutants report (kind {other:?})"),
    }
}

fn merge_sweeps(documents: &[(String, Value)]) -> anyhow::Result<Merged> {
    let mut parts = Vec::new();
    for (file, document) in documents {
        parts.push(sweep_part(document).with_context(|| format!("reading {file}"))?);
    }
    let first = &parts[0];
    for (part, (file, _)) in parts.iter().zip(documents) {
        if part.seed != first.seed || part.swept != first.swept {
            bail!(
                "{file} swept something else (seed, scenarios or options differ from the first report)"
            );
        }
        if part.report.truncated {
            bail!(
                "{file} (shard {}/{}) was cut short: rerun it to the end",
                part.shard.0,
                part.shard.1
            );
        }
    }
    let shards: Vec<(u64, u64)> = parts.iter().map(|part| part.shard).collect();
    let count = check_shards(&shards, "sweep")?;
    let (seed, swept) = (first.seed.clone(), first.swept.clone());
    let scenarios: Vec<String> = swept["scenarios"]
        .as_array()
        .map(|names| names.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let report = sweep::merge(parts.into_iter().map(|part| part.report).collect(), &scenarios);
    let mut document = document(&json!(seed), (0, 1), &swept, &report);
    document["mergedShards"] = json!(count);
    let mut text = format!(
        "merged {count} shards of seed {seed}: {} of {} crash points, {} images judged, {} stood for by a judged one\n",
        report.crash_points, report.planned_points, report.images, report.equivalent
    );
    let Enumeration { exhaustive, reduced, classes, sampled, .. } = report.total_enumeration();
    text.push_str(&format!(
        "power-loss crashes: {exhaustive} exhaustive, {classes} by class ({reduced} of both reduced), {sampled} sampled\n"
    ));
    text.push_str(&format!("violations: {}\n", report.violations.len()));
    for violation in &report.violations {
        text.push_str(&format!(
            "\nviolation: {} crash in {} at {}\n",
            violation.token.mode, violation.transition, violation.boundary
        ));
        for message in &violation.messages {
            text.push_str(&format!("  {message}\n"));
        }
        text.push_str(&format!("  replay: {}\n", violation.replay_command()));
    }
    Ok(Merged { document, text, failed: !report.violations.is_empty() })
}

/// The document of a mutant catalogue's run (or of one shard of it).
pub(crate) fn mutants_json(
    seed: u64,
    shard: (u64, u64),
    catalogue: &[String],
    results: Vec<Value>,
) -> Value {
    json!({
        "schema": SCHEMA_VERSION,
        "kind": "mutants",
        "seed": json_u64(seed),
        "shard": { "index": shard.0, "count": shard.1 },
        "catalogue": catalogue,
        "mutants": results,
    })
}

fn merge_mutants(documents: &[(String, Value)]) -> anyhow::Result<Merged> {
    let mut shards = Vec::new();
    let mut results: BTreeMap<String, Value> = BTreeMap::new();
    let catalogue = &documents[0].1["catalogue"];
    let seed = &documents[0].1["seed"];
    for (file, document) in documents {
        if &document["catalogue"] != catalogue || &document["seed"] != seed {
            bail!("{file} ran another catalogue or seed than the first report");
        }
        let shard = &document["shard"];
        shards.push((u64_of(shard, "index")?, u64_of(shard, "count")?));
        for result in array(document, "mutants").with_context(|| format!("reading {file}"))? {
            let name = result["name"].as_str().context("a mutant without a name")?;
            if results.insert(name.to_owned(), result.clone()).is_some() {
                bail!("mutant {name} appears in two reports");
            }
        }
    }
    let count = check_shards(&shards, "mutants")?;
    let names: Vec<String> = catalogue
        .as_array()
        .map(|names| names.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let absent: Vec<&str> =
        names.iter().filter(|name| !results.contains_key(*name)).map(String::as_str).collect();
    if !absent.is_empty() {
        bail!("no report has mutant {}", absent.join(", "));
    }
    let missed: Vec<&str> = names
        .iter()
        .filter(|name| results[*name]["caught"].as_bool() != Some(true))
        .map(String::as_str)
        .collect();
    let ordered: Vec<Value> = names.iter().map(|name| results[name].clone()).collect();
    let mut document = mutants_json(0, (0, 1), &names, ordered);
    document["seed"] = seed.clone();
    document["mergedShards"] = json!(count);
    let mut text = format!(
        "merged {count} shards: {} mutants, {} caught\n",
        names.len(),
        names.len() - missed.len()
    );
    if !missed.is_empty() {
        text.push_str(&format!("NOT CAUGHT: {}\n", missed.join(", ")));
    }
    Ok(Merged { document, text, failed: !missed.is_empty() })
}
