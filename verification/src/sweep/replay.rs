//! Replaying one sequence a token names, bit for bit (the trace hash covers every trace and
//! image of the replay).

use faultfs::{CrashMode, FaultPlan, SimFs};
use sha2::{Digest, Sha256};

use super::point::{Source, judge_last};
use super::scenario::Scenario;
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
    let fs = run::machine(plan, token.media);
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
            let image = image_at(&images, token.image, &format!("crash point {}", token.k))?;
            hasher.update(image.hash_hex());
            Source::Reboot(image)
        }
    };
    let mut replaying = Replaying {
        scenario: &scenario,
        seed,
        source,
        hasher,
        machine: source.machine(FaultPlan::none(seed)),
        judged: run.clone(),
    };
    let mut messages = run.violations.clone();
    let reached = replaying.steps(token, &mut messages)?;
    let Replaying { mut hasher, machine, judged, .. } = replaying;
    if reached == Reached::LastPhase {
        messages.extend(judge_last(machine.clone(), &scenario, &judged, seed));
        hasher.update(machine.trace().hash_hex());
    }
    Ok(Replay {
        messages,
        trace_hash: hex::encode(hasher.finalize()),
        boundary,
        trace: trace.to_string(),
    })
}

/// Where a replay's steps end: after the first command alone (its violations are the verdict),
/// or at the last phase, which is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reached {
    FirstCommand,
    LastPhase,
}

/// A replay under way: the machine it reached, the run it is judged against, and the hash of
/// every trace and image so far.
struct Replaying<'a> {
    scenario: &'a Scenario,
    seed: u64,
    /// The machine after the first crash (each call gives a fresh copy).
    source: Source<'a>,
    hasher: Sha256,
    machine: SimFs,
    judged: run::Execution,
}

impl Replaying<'_> {
    /// The steps the token names after the first crash, in the order the sweep takes them.
    fn steps(&mut self, token: &Token, messages: &mut Vec<String>) -> Result<Reached, String> {
        if let Some((mode, j, index)) = token.second {
            self.second_crash(mode, j, index)?;
        }
        if let Some((n, index)) = token.first {
            let violations = self.first_command(n, index)?;
            if index == usize::MAX {
                messages.extend(violations);
                return Ok(Reached::FirstCommand);
            }
        }
        if let Some((n, mode, j, index)) = token.first_crash {
            self.first_command_crash(n, mode, j, index)?;
        }
        if let Some(index) = token.then_power {
            self.power_after_phase(index)?;
        }
        Ok(Reached::LastPhase)
    }

    /// A crash at op `j` of the phase after the first crash, then image `index` of it.
    fn second_crash(&mut self, mode: CrashMode, j: u64, index: usize) -> Result<(), String> {
        let machine = self.source.machine(FaultPlan::crash_at(self.seed, j));
        let Err(halted) = phase::check_image(machine, self.scenario, &self.judged, self.seed)
        else {
            return Err(format!("the phase after the crash has no op {j}"));
        };
        self.machine = self.after(&halted.fs, mode, index, "the second crash")?;
        self.judged = std::sync::Arc::unwrap_or_clone(halted.run);
        Ok(())
    }

    /// The first command `n` after a kill, and (unless `index` is `usize::MAX`) image `index`
    /// of a power loss after it; returns the command's own violations.
    fn first_command(&mut self, n: usize, index: usize) -> Result<Vec<String>, String> {
        let commands = phase::first_commands(self.scenario, &self.judged);
        let step = commands
            .get(n)
            .ok_or_else(|| format!("the kill has only {} first commands", commands.len()))?;
        let (violations, next) = phase::first_command(
            self.machine.clone(),
            self.scenario,
            &self.judged,
            step,
            self.seed,
        )
        .map_err(|_| "the first command crashed without a planned fault".to_owned())?;
        self.hasher.update(self.machine.trace().hash_hex());
        if index == usize::MAX {
            return Ok(violations);
        }
        let images = self.machine.crash(CrashMode::PowerLoss).images;
        let image = image_at(&images, index, "the power loss after the first command")?;
        self.hasher.update(image.hash_hex());
        self.machine = SimFs::from_image(image, FaultPlan::none(self.seed));
        self.judged = next;
        Ok(violations)
    }

    /// A crash at op `j` of the first command `n` after a kill, then image `index` of it.
    fn first_command_crash(
        &mut self,
        n: usize,
        mode: CrashMode,
        j: u64,
        index: usize,
    ) -> Result<(), String> {
        let commands = phase::first_commands(self.scenario, &self.judged);
        let step = commands
            .get(n)
            .ok_or_else(|| format!("the kill has only {} first commands", commands.len()))?;
        let machine = self.source.machine(FaultPlan::crash_at(self.seed, j));
        let Err(halted) =
            phase::first_command(machine, self.scenario, &self.judged, step, self.seed)
        else {
            return Err(format!("the first command has no op {j}"));
        };
        self.machine = self.after(&halted.fs, mode, index, "the crash in the first command")?;
        self.judged = std::sync::Arc::unwrap_or_clone(halted.run);
        Ok(())
    }

    /// Image `index` of a power loss after the phase on the machine reached.
    fn power_after_phase(&mut self, index: usize) -> Result<(), String> {
        let checked =
            phase::check_image(self.machine.clone(), self.scenario, &self.judged, self.seed)
                .map_err(|_| "the phase crashed without a planned fault".to_owned())?;
        self.hasher.update(self.machine.trace().hash_hex());
        let images = self.machine.crash(CrashMode::PowerLoss).images;
        let image = image_at(&images, index, "the power loss after the phase")?;
        self.hasher.update(image.hash_hex());
        self.machine = SimFs::from_image(image, FaultPlan::none(self.seed));
        self.judged = checked.run;
        Ok(())
    }

    /// The machine after a crash of `halted` (its trace hashed): restarted after a kill, or
    /// rebooted from image `index` (hashed) of a power loss, which `what` names in an error.
    fn after(
        &mut self,
        halted: &SimFs,
        mode: CrashMode,
        index: usize,
        what: &str,
    ) -> Result<SimFs, String> {
        self.hasher.update(halted.trace().hash_hex());
        match mode {
            CrashMode::ProcessKill => Ok(halted.restart(FaultPlan::none(self.seed))),
            CrashMode::PowerLoss => {
                let images = halted.crash(mode).images;
                let image = image_at(&images, index, what)?;
                self.hasher.update(image.hash_hex());
                Ok(SimFs::from_image(image, FaultPlan::none(self.seed)))
            }
        }
    }
}

/// Image `index` of `images`, or an error naming `what` crashed and how many images it has.
fn image_at<'a>(
    images: &'a [faultfs::Image],
    index: usize,
    what: &str,
) -> Result<&'a faultfs::Image, String> {
    images.get(index).ok_or_else(|| format!("{what} has only {} images", images.len()))
}
