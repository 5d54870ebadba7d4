//! Replaying one sequence a token names, bit for bit (the trace hash covers every trace and
//! image of the replay).

use faultfs::{CrashMode, FaultPlan, SimFs};
use sha2::{Digest, Sha256};

use super::point::{Source, judge_last};
use super::token::Token;
use super::{phase, run, scenario};

/// What a replay found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The violations of that one image (empty: it passes).
    pub messages: Vec<String>,
    /// SHA-256 over every trace of the replay and the image hashes: equal for equal runs.
    pub trace_hash: String,
    /// The boundary of the first crash point.
    pub boundary: String,
    /// The full op trace of the first run, up to the crash.
    pub trace: String,
}

/// Replays the one sequence a token names.
pub fn replay(token: &Token) -> Result<Replay, String> {
    let scenario = scenario::named(&token.scenario)
        .ok_or_else(|| format!("unknown scenario {:?}", token.scenario))?;
    let seed = token.seed;
    let plan = match token.fault {
        Some(fault) => FaultPlan::fault_at(seed, token.k, fault),
        None => FaultPlan::crash_at(seed, token.k),
    };
    let fs = SimFs::new(plan);
    fs.set_media(token.media);
    let (mut run, store) = run::execute_with(&fs, &scenario, seed);
    drop(store);
    if token.fault.is_some() {
        // The checks of the failing handle itself are the sweep's; a replay judges what follows.
        run.violations.clear();
    }
    let trace = fs.trace();
    let boundary = trace
        .entries()
        .get(token.k as usize)
        .map_or_else(|| "end".to_owned(), |entry| entry.boundary.to_string());
    let mut hasher = Sha256::new();
    hasher.update(trace.hash_hex());
    let first_mode = if token.fault.is_some() && token.image == usize::MAX {
        CrashMode::ProcessKill
    } else {
        token.mode
    };
    let images;
    let source = match first_mode {
        CrashMode::ProcessKill => Source::Restart(&fs),
        CrashMode::PowerLoss => {
            images = fs.crash(CrashMode::PowerLoss).images;
            let image = images.get(token.image).ok_or_else(|| {
                format!("crash point {} has only {} images", token.k, images.len())
            })?;
            hasher.update(image.hash_hex());
            Source::Reboot(image)
        }
    };
    let mut messages = run.violations.clone();
    let (mut machine, mut judged) = (source.machine(FaultPlan::none(seed)), run.clone());
    if let Some((mode, j, index)) = token.second {
        let halted = match phase::check_image(
            source.machine(FaultPlan::crash_at(seed, j)),
            &scenario,
            &run,
            seed,
        ) {
            Err(halted) => halted,
            Ok(_) => return Err(format!("the phase after the crash has no op {j}")),
        };
        hasher.update(halted.fs.trace().hash_hex());
        machine = match mode {
            CrashMode::ProcessKill => halted.fs.restart(FaultPlan::none(seed)),
            CrashMode::PowerLoss => {
                let images = halted.fs.crash(mode).images;
                let image = images
                    .get(index)
                    .ok_or_else(|| format!("the second crash has only {} images", images.len()))?;
                hasher.update(image.hash_hex());
                SimFs::from_image(image, FaultPlan::none(seed))
            }
        };
        judged = *halted.run;
    }
    if let Some((n, index)) = token.first {
        let commands = phase::first_commands(&scenario, &judged);
        let step = commands
            .get(n)
            .ok_or_else(|| format!("the kill has only {} first commands", commands.len()))?;
        let (violations, next) =
            phase::first_command(machine.clone(), &scenario, &judged, step, seed)
                .map_err(|_| "the first command crashed without a planned fault".to_owned())?;
        hasher.update(machine.trace().hash_hex());
        if index == usize::MAX {
            messages.extend(violations);
            return Ok(Replay {
                messages,
                trace_hash: hex::encode(hasher.finalize()),
                boundary,
                trace: trace.to_string(),
            });
        }
        let images = machine.crash(CrashMode::PowerLoss).images;
        let image = images.get(index).ok_or_else(|| {
            format!("the power loss after the first command has only {} images", images.len())
        })?;
        hasher.update(image.hash_hex());
        machine = SimFs::from_image(image, FaultPlan::none(seed));
        judged = next;
    }
    if let Some((n, mode, j, index)) = token.first_crash {
        let commands = phase::first_commands(&scenario, &judged);
        let step = commands
            .get(n)
            .ok_or_else(|| format!("the kill has only {} first commands", commands.len()))?;
        let Err(halted) = phase::first_command(
            source.machine(FaultPlan::crash_at(seed, j)),
            &scenario,
            &judged,
            step,
            seed,
        ) else {
            return Err(format!("the first command has no op {j}"));
        };
        hasher.update(halted.fs.trace().hash_hex());
        machine = match mode {
            CrashMode::ProcessKill => halted.fs.restart(FaultPlan::none(seed)),
            CrashMode::PowerLoss => {
                let images = halted.fs.crash(mode).images;
                let image = images.get(index).ok_or_else(|| {
                    format!("the crash in the first command has only {} images", images.len())
                })?;
                hasher.update(image.hash_hex());
                SimFs::from_image(image, FaultPlan::none(seed))
            }
        };
        judged = *halted.run;
    }
    if let Some(index) = token.then_power {
        let checked = phase::check_image(machine.clone(), &scenario, &judged, seed)
            .map_err(|_| "the phase crashed without a planned fault".to_owned())?;
        hasher.update(machine.trace().hash_hex());
        let images = machine.crash(CrashMode::PowerLoss).images;
        let image = images.get(index).ok_or_else(|| {
            format!("the power loss after the phase has only {} images", images.len())
        })?;
        hasher.update(image.hash_hex());
        machine = SimFs::from_image(image, FaultPlan::none(seed));
        judged = checked.run;
    }
    messages.extend(judge_last(machine.clone(), &scenario, &judged, seed));
    hasher.update(machine.trace().hash_hex());
    Ok(Replay {
        messages,
        trace_hash: hex::encode(hasher.finalize()),
        boundary,
        trace: trace.to_string(),
    })
}
