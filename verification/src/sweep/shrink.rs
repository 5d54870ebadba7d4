//! Shrinking a violation to a minimal reproducer: first the workload (drop steps while a crash
//! at the same boundary still breaks a rule), then the image (of the violating images at that
//! crash point, the one closest to what the kernel held at the crash).

use faultfs::{CrashMode, FaultPlan, Image, SimFs};

use super::run::{self, execute};
use super::scenario::{self, Scenario};
use super::token::Token;
use super::{phase, replay};

/// A minimal reproducer.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The token of the minimal reproducer (its scenario names the kept steps).
    pub token: Token,
    /// The steps kept, as indices into the original scenario.
    pub steps: Vec<usize>,
    /// What the minimal reproducer breaks.
    pub messages: Vec<String>,
    /// Bytes by which the chosen image differs from the process-kill image.
    pub image_distance: u64,
}

/// Shrinks the violation `token` names. Depth-2 tokens are not shrunk.
pub fn shrink(token: &Token) -> Result<Shrunk, String> {
    if token.second.is_some() || token.first_crash.is_some() {
        return Err(
            "shrinking a crash inside recovery or inside a first command is not supported; shrink its first crash".to_owned()
        );
    }
    let original = replay(token)?;
    if original.messages.is_empty() {
        return Err(format!("{token} shows no violation to shrink"));
    }
    let base = token.scenario.split('[').next().unwrap_or_default().to_owned();
    let full = scenario::named(&token.scenario)
        .ok_or_else(|| format!("unknown scenario {:?}", token.scenario))?;
    let base_len = scenario::named(&base).map_or(0, |s| s.steps.len());
    // Indices into the base scenario of the steps `full` holds.
    let mut steps: Vec<usize> = match token.scenario.split_once('[') {
        Some(_) => parse_subset(&token.scenario).ok_or("malformed scenario subset")?,
        None => (0..base_len).collect(),
    };
    debug_assert_eq!(steps.len(), full.steps.len());
    let mut best = (token.clone(), original.messages);
    loop {
        let mut improved = false;
        for drop in 0..steps.len() {
            let candidate: Vec<usize> =
                steps.iter().enumerate().filter(|(i, _)| *i != drop).map(|(_, s)| *s).collect();
            let name = scenario::subset_name(&base, &candidate);
            let Some(reduced) = scenario::named(&name) else { continue };
            if let Some(found) = find(&reduced, token, &original.boundary) {
                steps = candidate;
                best = found;
                improved = true;
                break;
            }
        }
        if !improved {
            break;
        }
    }
    let (token, messages, distance) =
        closest_image(&best.0)?.unwrap_or((best.0.clone(), best.1.clone(), u64::MAX));
    Ok(Shrunk { token, steps, messages, image_distance: distance })
}

fn parse_subset(name: &str) -> Option<Vec<usize>> {
    let inner = name.split_once('[')?.1.strip_suffix(']')?;
    inner.split(',').filter(|part| !part.is_empty()).map(|part| part.parse().ok()).collect()
}

/// The first violation of `scenario` at a crash point with `boundary`, in the token's mode (and
/// with its fault, if any).
fn find(scenario: &Scenario, like: &Token, boundary: &str) -> Option<(Token, Vec<String>)> {
    let seed = like.seed;
    let pass = SimFs::new(FaultPlan::none(seed));
    execute(&pass, scenario, seed);
    let points: Vec<u64> = pass
        .trace()
        .entries()
        .iter()
        .filter(|entry| entry.boundary.name() == boundary)
        .map(|entry| entry.index)
        .chain((boundary == "end").then(|| pass.op_count()))
        .collect();
    for k in points {
        let token = Token {
            scenario: scenario.name.to_string(),
            k,
            image: 0,
            second: None,
            ..like.clone()
        };
        let images = match like.fault {
            None => {
                let fs = run::machine(FaultPlan::crash_at(seed, k), like.media);
                execute(&fs, scenario, seed);
                fs.crash(like.mode).images.len()
            }
            Some(fault) => {
                let fs = run::machine(FaultPlan::fault_at(seed, k, fault), like.media);
                drop(run::execute_with(&fs, scenario, seed));
                fs.crash(CrashMode::PowerLoss).images.len()
            }
        };
        let indices: Vec<usize> = if like.fault.is_some() && like.image == usize::MAX {
            vec![usize::MAX]
        } else {
            (0..images).collect()
        };
        for image in indices {
            let token = Token { image, ..token.clone() };
            if let Ok(result) = replay(&token)
                && !result.messages.is_empty()
            {
                return Some((token, result.messages));
            }
        }
    }
    None
}

/// Of the violating images at the token's crash point, the one that differs least from the
/// process-kill image (what the kernel held): the smallest deviation that still breaks a rule.
fn closest_image(token: &Token) -> Result<Option<(Token, Vec<String>, u64)>, String> {
    if token.fault.is_some()
        || token.mode != CrashMode::PowerLoss
        || token.second.is_some()
        || token.then_power.is_some()
    {
        return Ok(None);
    }
    let scenario = scenario::named(&token.scenario).ok_or("unknown scenario")?;
    let fs = run::machine(FaultPlan::crash_at(token.seed, token.k), token.media);
    let run = execute(&fs, &scenario, token.seed);
    let kill = fs.crash(CrashMode::ProcessKill).images.remove(0);
    let mut best: Option<(Token, Vec<String>, u64)> = None;
    for (index, image) in fs.crash(CrashMode::PowerLoss).images.iter().enumerate() {
        let distance = distance(&kill, image);
        if best.as_ref().is_some_and(|(_, _, d)| *d <= distance) {
            continue;
        }
        let messages = match phase::check_image(
            SimFs::from_image(image, FaultPlan::none(token.seed)),
            &scenario,
            &run,
            token.seed,
        ) {
            Ok(checked) => checked.violations,
            Err(_) => vec!["recovery crashed without a planned fault".to_owned()],
        };
        if !messages.is_empty() {
            best = Some((Token { image: index, ..token.clone() }, messages, distance));
        }
    }
    Ok(best)
}

/// Bytes that differ between two images, counting a missing file as all its bytes.
fn distance(a: &Image, b: &Image) -> u64 {
    let mut total = 0u64;
    let paths: std::collections::BTreeSet<&String> =
        a.nodes().keys().chain(b.nodes().keys()).collect();
    for path in paths {
        match (a.file(path), b.file(path)) {
            (Some(x), Some(y)) => {
                let common = x.len().min(y.len());
                total +=
                    x[..common].iter().zip(&y[..common]).filter(|(p, q)| p != q).count() as u64;
                total += (x.len().max(y.len()) - common) as u64;
            }
            (Some(x), None) | (None, Some(x)) => total += x.len() as u64 + 1,
            (None, None) => total += u64::from(a.contains(path) != b.contains(path)),
        }
    }
    total
}
