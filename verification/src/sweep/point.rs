//! One crash point, judged: the crash of a scenario's run before one boundary, in every mode,
//! and every sequence that follows it (the phase after it, a power loss after that phase, a crash
//! at every op of the phase, the first commands after a kill and a crash inside their
//! takeovers), each image judged once per run and recorded in its cell of the matrix.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::sync::{Arc, LazyLock};

use faultfs::{CrashMode, FaultPlan, SimFs};
use faultfs::{Digest, Hasher};
use spex_model::Model;

use super::memo::Memo;
use super::options::Options;
use super::phase;
use super::report::{CellKey, Place, Report, record};
use super::run::{self, execute};
use super::scenario::Scenario;
use super::token::Token;

/// Where the first phase of a sequence runs: the restarted machine after a kill (or after an
/// injected fault), or a rebooted power-loss image. Each call gives a fresh copy.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    Restart(&'a SimFs),
    Reboot(&'a faultfs::Image),
}

impl Source<'_> {
    pub(crate) fn machine(self, plan: FaultPlan) -> SimFs {
        match self {
            Source::Restart(fs) => fs.restart(plan),
            Source::Reboot(image) => SimFs::from_image(image, plan),
        }
    }
}

pub(crate) fn sweep_point(
    options: &Options,
    scenario: &Scenario,
    boundaries: &[String],
    k: u64,
    report: &mut Report,
) {
    let seed = options.seed;
    let fs = run::machine(FaultPlan::crash_at(seed, k), options.media);
    let run = execute(&fs, scenario, seed);
    let run_digest = digest_of(&run);
    report.crash_points += 1;
    let boundary = boundaries.get(k as usize).cloned().unwrap_or_else(|| "end".to_owned());
    if let Some(name) = boundaries.get(k as usize) {
        report.note_crashed(name);
    }
    let transition = match run.in_flight {
        Some(index) => scenario.steps[index].transition().to_owned(),
        None if k as usize >= boundaries.len() => "end".to_owned(),
        None => "open".to_owned(),
    };
    for &mode in &options.modes {
        let base = Place {
            scenario,
            transition: transition.clone(),
            boundary: boundary.clone(),
            token: token_base(options, scenario, mode, k, 0),
        };
        report.cells.entry(base.key("", mode)).or_default().points += 1;
        match mode {
            CrashMode::ProcessKill => {
                let sequence = Sequence { run: &run, run_digest: &run_digest, deep: true };
                judge_sequence(options, sequence, Source::Restart(&fs), &base, report);
            }
            CrashMode::PowerLoss => {
                let sifted = faultfs::Sifted::from(fs.crash(mode));
                report.count_enumeration(scenario, &sifted);
                let crash = sifted.crash;
                let torn = crash.images.iter().position(torn_tail);
                for (index, image) in crash.images.iter().enumerate() {
                    let place = Place {
                        token: token_base(options, scenario, mode, k, index),
                        transition: transition.clone(),
                        boundary: boundary.clone(),
                        scenario,
                    };
                    // The first images, and the first whose log ends torn (its recovery
                    // repairs the tail: that repair must be crash-safe too).
                    let deep = index < options.deep_power_images
                        || (options.deep_power_images > 0 && Some(index) == torn);
                    let sequence = Sequence { run: &run, run_digest: &run_digest, deep };
                    judge_sequence(options, sequence, Source::Reboot(image), &place, report);
                }
            }
        }
    }
}

/// The run a sequence starts from: the run that crashed, its digest, and whether the sequence
/// goes deep (a power loss after its phase, a crash at every op of it).
#[derive(Clone, Copy)]
pub(crate) struct Sequence<'a> {
    pub(crate) run: &'a run::Execution,
    pub(crate) run_digest: &'a Digest,
    pub(crate) deep: bool,
}

/// Judges the phase that follows a crash of the sequence's run on `source`; when deep, also a
/// power loss after that phase, and (with `depth2`) a crash at every op of it in every mode.
/// An image that a judged one stands for is left out unless the sequence goes deep.
pub(crate) fn judge_sequence(
    options: &Options,
    sequence: Sequence<'_>,
    source: Source<'_>,
    place: &Place<'_>,
    report: &mut Report,
) {
    let seed = options.seed;
    let scenario = place.scenario;
    let first = place.token.mode;
    let run = sequence.run;
    let key = place.key("", first);
    let class = Report::class_key(&key, sequence.run_digest);
    let stand_in = match source {
        Source::Reboot(image) if !sequence.deep => report.stood_for(&key, &class, image),
        Source::Reboot(_) | Source::Restart(_) => None,
    };
    if stand_in.is_some() && !report.verify {
        return;
    }
    // A machine is rebuilt here unless the judgement of a last phase is the image's own (which
    // rebuilds one only when it runs).
    let (messages, observed, deeper) = if sequence.deep {
        let fs = source.machine(FaultPlan::none(seed));
        // At depth 2 the phase is crashed at each of its ops too: those crashes are kept as it
        // runs, not run again up to each.
        let (checked, crashes) = if options.depth2 {
            phase::check_image_crashed_everywhere(fs.clone(), scenario, run, seed)
        } else {
            (phase::check_image(fs.clone(), scenario, run, seed), Vec::new())
        };
        match checked {
            Ok(checked) => {
                let mut messages = run.violations.clone();
                messages.extend(checked.violations.iter().cloned());
                (messages, fs.observed(), Some((fs, checked, crashes)))
            }
            Err(_) => {
                (vec!["recovery crashed without a planned fault".to_owned()], fs.observed(), None)
            }
        }
    } else {
        // Nothing follows the phase: judged as a last one.
        let (verdict, observed) = match source {
            Source::Reboot(image) => {
                let judging = judging(scenario, run, sequence.run_digest, seed);
                let judged = judge_image_to_end(report, image, scenario, (run, &judging), seed);
                judged.as_ref().clone()
            }
            Source::Restart(_) => {
                let fs = source.machine(FaultPlan::none(seed));
                let judging = judging(scenario, run, sequence.run_digest, seed);
                let verdict = judge_restarted(report, fs.clone(), scenario, (run, &judging), seed);
                (verdict, fs.observed())
            }
        };
        let mut messages = run.violations.clone();
        messages.extend(verdict);
        (messages, observed, None)
    };
    if let Some(verdict) = stand_in {
        report.compare_stand_in(&key, &verdict, &messages);
        return;
    }
    if let Source::Reboot(image) = source {
        report.note_judged(&class, image, &observed, &messages);
    }
    let clean = messages.is_empty();
    record(report, &key, || place.token.clone(), place, messages);
    if let Some((fs, checked, crashes)) = deeper.filter(|_| clean) {
        judge_deeper(options, sequence, source, place, report, (&fs, &checked), crashes);
    }
}

/// What follows a deep sequence's clean phase (`fs` after it, `checked` its judgement,
/// `crashes` the phase crashed at each of its ops: `phase::check_image_crashed_everywhere`): a
/// power loss after it; after a kill, the first commands; and (with `depth2`) a crash at every
/// op of the phase in every mode. When verifying the reductions, each crash kept is compared
/// with the phase run again and crashed there.
fn judge_deeper(
    options: &Options,
    sequence: Sequence<'_>,
    source: Source<'_>,
    place: &Place<'_>,
    report: &mut Report,
    (fs, checked): (&SimFs, &phase::Checked),
    crashes: Vec<(phase::Halted, Digest)>,
) {
    let seed = options.seed;
    let scenario = place.scenario;
    let first = place.token.mode;
    let run = sequence.run;
    report.note_reached(fs);
    // Kill (or reboot), restart, work, power loss.
    let name = format!("{}+work+power", first.name());
    let key = place.key(&name, CrashMode::PowerLoss);
    report.cells.entry(key.clone()).or_default().points += 1;
    let run_digest = digest_of(&checked.run);
    let verdicts = judge_power_loss(fs, &key, scenario, (&checked.run, &run_digest), seed, report);
    for (index, messages) in verdicts {
        let token = || Token { then_power: Some(index), ..place.token.clone() };
        record(report, &key, token, place, messages);
    }
    if first == CrashMode::ProcessKill {
        judge_first_commands(options, run, &source, place, report);
    }
    if !options.depth2 {
        return;
    }
    // A crash at every op of the phase.
    assert_eq!(crashes.len() as u64, fs.op_count(), "a crash kept at each op of the phase");
    let keys: Vec<(CrashMode, CellKey)> = (options.modes.iter())
        .map(|&second| (second, place.key(&format!("{}+{}", first.name(), second.name()), second)))
        .collect();
    for (j, (halted, halted_digest)) in (0..).zip(crashes) {
        if report.verify {
            compare_kept_crash((&halted, &halted_digest), source, scenario, run, (seed, j), report);
        }
        if let Some((boundary, _)) = halted.fs.halted() {
            report.note_crashed(boundary.name());
        }
        for (second, key) in &keys {
            let second = *second;
            report.cell(key).points += 1;
            for (index, messages) in
                judge_second_crash((&halted, &halted_digest), second, key, scenario, seed, report)
            {
                let token = || Token { second: Some((second, j, index)), ..place.token.clone() };
                record(report, key, token, place, messages);
            }
        }
    }
}

/// Compares a crash of the phase kept as it ran (`halted`, at op `j`) with the phase run again
/// on `source` and crashed at op `j`: the same halted machine (where it halted, its trace, what
/// a process and a power loss see of it) and the same run, whose digest is the one the kept
/// crash was judged with (`digest`), or the difference is reported as a broken reduction.
fn compare_kept_crash(
    (halted, digest): (&phase::Halted, &Digest),
    source: Source<'_>,
    scenario: &Scenario,
    run: &run::Execution,
    (seed, j): (u64, u64),
    report: &mut Report,
) {
    let machine = source.machine(FaultPlan::crash_at(seed, j));
    let seen = |halted: &phase::Halted| {
        let fs = &halted.fs;
        let machine = (fs.halted(), fs.plan(), fs.trace().hash_hex(), fs.visible_digest());
        (machine, fs.power_loss_digest(), digest_of(&halted.run))
    };
    let kept = seen(halted);
    if kept.2 != *digest {
        report
            .unequal_stand_ins
            .push(format!("the run of the crash kept at op {j} was digested as another"));
    }
    match phase::check_image(machine, scenario, run, seed) {
        Err(again) if seen(&again) == kept => {}
        Err(again) => report.unequal_stand_ins.push(format!(
            "the phase crashed at op {j} was kept as {kept:?} and runs again to {:?}",
            seen(&again)
        )),
        Ok(_) => report
            .unequal_stand_ins
            .push(format!("the phase crashed at op {j} was kept, and runs again to its end")),
    }
}

/// The verdicts on the images of a power loss of `fs` in cell `key` against `run` (its digest
/// `run_digest`), each with its image number, as [`judge_image`] judges them. The images
/// judged against the same run at this crash point before (`Report::first_judgement`) are
/// skipped and left unbuilt; a power loss enumerated before at this point, against the same
/// run, with the same digest (`Report::repeated_crash`) is not enumerated again.
fn judge_power_loss(
    fs: &SimFs,
    key: &CellKey,
    scenario: &Scenario,
    (run, run_digest): (&run::Execution, &Digest),
    seed: u64,
    report: &mut Report,
) -> Vec<(usize, Vec<String>)> {
    // Neighbouring ops of a phase, and the power losses after a phase and after each first
    // command, often leave what a power loss keeps as it was (a lock taken or released, a sync
    // with nothing pending), against the same run. When verifying the reductions, it is
    // enumerated anyway, and must leave the same images, every one skipped.
    let machine = fs.power_loss_digest();
    if !report.verify && report.repeated_crash(scenario, key, (&machine, run_digest)) {
        return Vec::new();
    }
    let boot = fs.boot() + 1;
    let (loss, new, skipped) = sift_power_loss(fs, (&machine, boot), run_digest, report);
    let sifted = &loss.sifted;
    report.note_skipped(key, skipped);
    report.count_enumeration(scenario, sifted);
    let mut verdicts = Vec::new();
    // Every image is judged against the same run, in the same class of stand-ins.
    let against = (run, &*judging(scenario, run, run_digest, seed));
    let class = Report::class_key(key, run_digest);
    for at in new {
        let (Some(&index), Some(image)) = (sifted.positions.get(at), sifted.crash.images.get(at))
        else {
            unreachable!("an image new here is one built")
        };
        debug_assert_eq!(image.boot(), boot, "an image is rebooted as one more boot");
        if let Some(messages) = judge_image(report, (key, &class), image, scenario, against, seed) {
            verdicts.push((index, messages));
        }
    }
    report.note_crash(sifted, (&machine, run_digest), skipped);
    verdicts
}

/// A power loss enumerated exhaustively: its images as sifted the first time (those that
/// sifting's caller knew left unbuilt), and every distinct image's hash, in generation order.
struct PowerLoss {
    sifted: faultfs::Sifted,
    hashes: Vec<Digest>,
}

/// The power losses every worker has enumerated exhaustively, by the machine's
/// `SimFs::power_loss_digest`: machines with equal digests leave the same images in the same
/// order (whatever the run they are judged against, the engine variant or the crash point), so
/// the images are built once for many. Neighbouring ops of a phase, and the same phase after
/// different first crashes, often leave equal machines.
static POWER_LOSSES: LazyLock<Memo<PowerLoss>> = LazyLock::new(|| Memo::new(2_048));

/// The images of a power loss of `fs` (its `power_loss_digest` `machine`, its images rebooted
/// as `boot`) not judged against the run with digest `run` at this crash point before, each now
/// marked judged: the power loss, the index of each such image among those built in it, and how
/// many images were skipped as judged before. A power loss enumerated before by any worker is
/// not enumerated again when it built every image new here; when verifying the reductions, it
/// is, and must leave the same images.
fn sift_power_loss(
    fs: &SimFs,
    (machine, boot): (&Digest, u64),
    run: &Digest,
    report: &mut Report,
) -> (Arc<PowerLoss>, Vec<usize>, u64) {
    let known = POWER_LOSSES.get(machine);
    if let Some(loss) = known.as_ref().filter(|_| !report.verify) {
        // The images new here, by their position among the distinct ones, each with its index
        // among those built (`None`: it was not built then), and the marks they leave.
        let mut built = loss.sifted.positions.iter().enumerate().peekable();
        let mut marks = Vec::new();
        let new: Option<Vec<usize>> = (loss.hashes.iter().enumerate())
            .filter_map(|(position, image)| {
                report.unjudged((image, boot), run).map(|mark| (position, mark))
            })
            .map(|(position, mark)| {
                marks.push(mark);
                while built.next_if(|&(_, &at)| at < position).is_some() {}
                built.next_if(|&(_, &at)| at == position).map(|(index, _)| index)
            })
            .collect();
        if let Some(new) = new {
            for mark in marks {
                report.mark_judged(mark);
            }
            let skipped = (loss.hashes.len() - new.len()) as u64;
            report.kept_power_losses += 1;
            return (Arc::clone(loss), new, skipped);
        }
    }
    let mut hashes = Vec::new();
    let mut skipped = 0;
    let sifted = fs.crash_sifted(CrashMode::PowerLoss, &mut |image| {
        hashes.push(*image);
        let known = !report.first_judgement((image, boot), run);
        skipped += u64::from(known);
        known
    });
    assert_eq!(hashes.len(), sifted.distinct, "sifting asks once per distinct image");
    // Not enumerated again but for the check: a kept one that could not serve is not counted.
    report.kept_power_losses += u64::from(known.is_some() && report.verify);
    if let Some(known) = &known
        && known.hashes != hashes
    {
        report.unequal_stand_ins.push(format!(
            "a power loss with the digest of one enumerated before left {} distinct images, \
             that one {} (or others, or in another order)",
            hashes.len(),
            known.hashes.len()
        ));
    }
    let new = (0..sifted.crash.images.len()).collect();
    let loss = Arc::new(PowerLoss { sifted, hashes });
    if loss.sifted.crash.exhaustive {
        POWER_LOSSES.insert(*machine, Arc::clone(&loss));
    }
    (loss, new, skipped)
}

/// Judges the last phase on `image` (a power loss's, not judged against the same run at this
/// crash point before) in cell `key` (its class of stand-ins `class`: [`Report::class_key`])
/// against `run` (what the last phase reads of it: `judging`); `None` when a judged image
/// stands for it.
fn judge_image(
    report: &mut Report,
    (key, class): (&CellKey, &Digest),
    image: &faultfs::Image,
    scenario: &Scenario,
    (run, judging): (&run::Execution, &Judging),
    seed: u64,
) -> Option<Vec<String>> {
    let stand_in = report.stood_for(key, class, image);
    if stand_in.is_some() && !report.verify {
        return None;
    }
    let judged = judge_image_to_end(report, image, scenario, (run, judging), seed);
    let (messages, observed) = &*judged;
    if let Some(verdict) = stand_in {
        report.compare_stand_in(key, &verdict, messages);
        return None;
    }
    report.note_judged(class, image, observed, messages);
    Some(messages.clone())
}

/// The last phase of a sequence on a machine rebuilt from `image`, as [`judge_to_end`] judges
/// it against `run` (what the last phase reads of it: `judging`): its verdict and what it
/// observed of the image, shared with the memo that keeps it.
/// It is a deterministic program of the image (its paths, kinds, bytes, boot and medium), what
/// the last phase reads of the run ([`Judging`]), the scenario, the seed and the engine variant
/// (a rebuilt machine's clock, ids and process table are the same for every image; its machine
/// id is written nowhere: README, "Verification"), so the same image judged against a run that
/// agrees on that in another cell (another sequence or crash point) gets the verdict and
/// observations of the first judgement. When verifying the reductions, it runs anyway and must
/// reach the same.
fn judge_image_to_end(
    report: &mut Report,
    image: &faultfs::Image,
    scenario: &Scenario,
    (run, judging): (&run::Execution, &Judging),
    seed: u64,
) -> Arc<Judged> {
    if !report.reduce {
        let machine = SimFs::from_image(image, FaultPlan::none(seed));
        let verdict = judge_to_end(report, machine.clone(), scenario, (run, judging), seed, None);
        return Arc::new((verdict, machine.observed()));
    }
    let key: Digest = {
        let mut hasher = judgement_key(scenario, seed);
        hasher.update(image.hash());
        hasher.update(image.boot().to_le_bytes());
        hasher.update(image.media().name());
        hasher.update(judging.digest);
        hasher.finish()
    };
    let known = JUDGEMENTS.get(&key);
    if let Some(known) = &known
        && !report.verify
    {
        report.reused += 1;
        return Arc::clone(known);
    }
    let recovery = recovery_key(scenario, seed, image, &judging.run);
    let recalled = (RECOVERIES.get(&recovery))
        .and_then(|recovered| judged_after(&recovered, scenario, judging, seed));
    if recalled.is_some() {
        report.recalled += 1;
    }
    if !report.verify
        && let Some((judged, how)) = recalled
    {
        if let Some(how) = how {
            how.count(report);
        }
        let judged = Arc::new(judged);
        JUDGEMENTS.insert(key, Arc::clone(&judged));
        return judged;
    }
    let machine = SimFs::from_image(image, FaultPlan::none(seed));
    let verdict =
        judge_to_end(report, machine.clone(), scenario, (run, judging), seed, Some(&recovery));
    let judged = (verdict, machine.observed());
    if let Some((recalled, _)) = recalled
        && recalled != judged
    {
        report.unequal_stand_ins.push(format!(
            "one image judged after its recovery as remembered went {recalled:?}, and {judged:?} when run"
        ));
    }
    let what = "one image judged against one run";
    if settle(&JUDGEMENTS, key, known, &judged, what, report) {
        report.reused += 1;
    }
    Arc::new(judged)
}

/// The verdicts on the machines a crash in `mode` of the halted phase (and the digest of its
/// run) leaves, each with its image number: the restarted machine after a kill; after a power
/// loss, each image [`judge_image`] judges.
fn judge_second_crash(
    (halted, run_digest): (&phase::Halted, &Digest),
    mode: CrashMode,
    key: &CellKey,
    scenario: &Scenario,
    seed: u64,
    report: &mut Report,
) -> Vec<(usize, Vec<String>)> {
    match mode {
        CrashMode::ProcessKill => {
            let machine = halted.fs.restart(FaultPlan::none(seed));
            let judging = judging(scenario, &halted.run, run_digest, seed);
            let run = &halted.run;
            vec![(0, judge_restarted(report, machine, scenario, (run, &judging), seed))]
        }
        CrashMode::PowerLoss => {
            let run = (&*halted.run, run_digest);
            judge_power_loss(&halted.fs, key, scenario, run, seed, report)
        }
    }
}

/// After a kill, each transition the CLI may run first (no recovery before it: it takes the
/// dead holder's lock over itself), then a power loss right after its answer: everything it
/// acknowledged, on whatever it found, must survive. At depth 2, also a crash at every op of
/// the command's takeover (`phase::is_takeover`), in every mode, judged by the process after.
///
/// After an injected I/O error too: the failed transition leaves its lock behind, so that the
/// next command takes it over and vouches for the failed step's unsynced bytes (the
/// `release-after-failed-write` mutant removes it, and a keyed retry then acknowledges what a
/// power loss loses).
fn judge_first_commands(
    options: &Options,
    run: &run::Execution,
    source: &Source<'_>,
    place: &Place<'_>,
    report: &mut Report,
) {
    let seed = options.seed;
    let scenario = place.scenario;
    for (n, step) in phase::first_commands(scenario, run).iter().enumerate() {
        let sequence = format!("kill+first-{}+power", step.transition());
        let key = place.key(&sequence, CrashMode::PowerLoss);
        report.cells.entry(key.clone()).or_default().points += 1;
        let fs = source.machine(FaultPlan::none(seed));
        let (messages, next) = match phase::first_command(fs.clone(), scenario, run, step, seed) {
            Ok(answered) => answered,
            Err(_) => {
                (vec!["the first command crashed without a planned fault".to_owned()], run.clone())
            }
        };
        report.note_reached(&fs);
        if !messages.is_empty() {
            let token = || Token { first: Some((n, usize::MAX)), ..place.token.clone() };
            record(report, &key, token, place, messages);
            continue;
        }
        let run_digest = digest_of(&next);
        let verdicts = judge_power_loss(&fs, &key, scenario, (&next, &run_digest), seed, report);
        for (index, messages) in verdicts {
            let token = || Token { first: Some((n, index)), ..place.token.clone() };
            record(report, &key, token, place, messages);
        }
        if !options.depth2 {
            continue;
        }
        let takeover: Vec<u64> = (fs.trace().entries().iter().enumerate())
            .filter(|(_, entry)| phase::is_takeover(entry.boundary.name()))
            .map(|(j, _)| j as u64)
            .collect();
        for j in takeover {
            let machine = source.machine(FaultPlan::crash_at(seed, j));
            let Err(halted) = phase::first_command(machine, scenario, run, step, seed) else {
                continue;
            };
            if let Some((boundary, _)) = halted.fs.halted() {
                report.note_crashed(boundary.name());
            }
            let halted_digest = digest_of(&halted.run);
            for &second in &options.modes {
                let sequence = format!("kill+takeover-{}+{}", step.transition(), second.name());
                let key = place.key(&sequence, second);
                report.cells.entry(key.clone()).or_default().points += 1;
                for (index, messages) in judge_second_crash(
                    (&halted, &halted_digest),
                    second,
                    &key,
                    scenario,
                    seed,
                    report,
                ) {
                    let token = || Token {
                        first_crash: Some((n, second, j, index)),
                        ..place.token.clone()
                    };
                    record(report, &key, token, place, messages);
                }
            }
        }
    }
}

/// A digest of everything a judgement of `run` depends on.
pub(crate) fn digest_of(run: &run::Execution) -> Digest {
    // Written straight into the hasher: the debug text of a run is long and made per image.
    let mut hasher = Hasher::new();
    write!(hasher, "{run:?}").expect("hashing does not fail");
    hasher.finish()
}

/// Whether some session's newest segment in `image` ends in a torn line (unterminated, or with
/// NUL bytes in its last line), which the next writer repairs.
fn torn_tail(image: &faultfs::Image) -> bool {
    let mut newest: BTreeMap<&str, &str> = BTreeMap::new();
    for path in image.nodes().keys() {
        if let Some((dir, _)) = path.rsplit_once("/timeline/")
            && path.ends_with(".ndjson")
            && newest.get(dir).is_none_or(|current| *current < path.as_str())
        {
            newest.insert(dir, path);
        }
    }
    newest.values().any(|path| {
        let bytes = image.file(path).unwrap_or_default();
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let last = body.rsplit(|&b| b == b'\n').next().unwrap_or_default();
        !bytes.is_empty() && (!bytes.ends_with(b"\n") || last.contains(&0))
    })
}

/// The last phase of a sequence on `fs`, a machine restarted after a kill, as [`judge_to_end`]
/// judges it against `whole` (what it reads of the run: `judging`). With no crash planned
/// after it, it is a deterministic program of what every op of the next process sees
/// (`SimFs::visible_digest`: every reachable path with its kind, bytes, link target and time,
/// the clock, the running processes, the pid, the boot and the locks held; what is pending
/// rather than durable shows only in a later crash's images), what it reads of the run, the
/// scenario, the seed and the engine variant. So a restarted machine that every process sees
/// as another one judged against a run that agrees with it there (a neighbouring op of the
/// same phase that only read, synced or locked) gets that one's verdict. When verifying the
/// reductions, it runs anyway and must reach the same.
fn judge_restarted(
    report: &mut Report,
    fs: SimFs,
    scenario: &Scenario,
    (whole, judging): (&run::Execution, &Judging),
    seed: u64,
) -> Vec<String> {
    if !report.reduce {
        return judge_to_end(report, fs, scenario, (whole, judging), seed, None);
    }
    let key: Digest = {
        let mut hasher = judgement_key(scenario, seed);
        hasher.update(fs.visible_digest());
        hasher.update(judging.digest);
        hasher.finish()
    };
    let known = RESTARTS.get(&key);
    if let Some(known) = &known
        && !report.verify
    {
        report.reused += 1;
        return Vec::clone(known);
    }
    let verdict = judge_to_end(report, fs, scenario, (whole, judging), seed, None);
    let what = "one restarted machine judged against one run";
    if settle(&RESTARTS, key, known, &verdict, what, report) {
        report.reused += 1;
    }
    verdict
}

/// The judgements of a machine restarted after a kill against a run every worker has run, by
/// a digest of (scenario, seed, the engine variant, what the machine shows every process,
/// run): see [`judge_restarted`].
static RESTARTS: LazyLock<Memo<Vec<String>>> = LazyLock::new(|| Memo::new(65_536));

/// What follows recovery in a last phase (the recovered store judged, the continued work, its
/// judgement): its verdict, and the files it read (by their paths when it began).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Continuation {
    verdict: Vec<String>,
    read: BTreeSet<String>,
}

/// A judgement's verdict and what it observed of the image judged.
type Judged = (Vec<String>, faultfs::Observed);

/// The judgements of an image against a run every worker has run, by a digest of (scenario,
/// seed, the engine variant, image, boot, medium, run): see [`judge_image_to_end`].
static JUDGEMENTS: LazyLock<Memo<Judged>> = LazyLock::new(|| Memo::new(131_072));

/// The continuations every worker has run, by a digest of (scenario, seed, the engine variant,
/// machine after recovery, run). Across crash points too: the points of one transition share a
/// run until it answers, and their images mostly recover to the machines of their neighbours'.
static CONTINUATIONS: LazyLock<Memo<Continuation>> = LazyLock::new(|| Memo::new(32_768));

/// The last phase of a sequence on `fs` against `whole` (what it reads of the run: `judging`), as
/// [`judge_last`] judges it, with what follows recovery run once per machine that recovery
/// leaves and run: it is a deterministic program of what the machine holds as every process
/// sees it, times left out (`SimFs::content_digest`), what it reads of the run, the scenario,
/// the seed and the engine variant (the store handle holds nothing else then: see
/// `Recovered::judge_rest`). The times are left out because nothing after recovery reads one
/// but to compare two it read of one file (whether a log changed since the handle last read it,
/// which the ops in between decide alike on both machines), or a lock file's against its
/// holder's start (a reused pid), and after recovery no lock file names a live process but this
/// one: the sweep runs one process at a time, and recovery took every lock the dead one held
/// over and released it. Recoveries that ran different ops (one repaired a torn tail) leave the
/// same files at different times, and share what follows. Without
/// the reductions it reads the whole run instead, so that the sweep judging every image also
/// checks that the rest of a run changes no verdict. A shared continuation's reads
/// are counted on `fs` as if it had run (`SimFs::note_read`), so that what the judgement
/// observed of the image stays whole for the stand-ins. When verifying the reductions, it runs
/// anyway and must read the same files and reach the same verdict.
fn judge_to_end(
    report: &mut Report,
    fs: SimFs,
    scenario: &Scenario,
    (whole, judging): (&run::Execution, &Judging),
    seed: u64,
    recovery: Option<&Digest>,
) -> Vec<String> {
    let run = if report.reduce { &judging.run } else { whole };
    let recovered = match phase::recover_only(fs.clone(), scenario, run, seed) {
        Ok(recovered) => recovered,
        Err(violations) => {
            if let Some(key) = recovery {
                let ran = Recovery { outcome: Err(violations.clone()), reads: fs.reads() };
                remember_recovery(report, *key, &ran);
            }
            return violations;
        }
    };
    if !report.reduce {
        return recovered.judge_rest(scenario, run, &judging.allowed);
    }
    let machine = recovered.fs.content_digest();
    if let Some(key) = recovery {
        let ran = Recovery { outcome: Ok(machine), reads: recovered.fs.reads() };
        remember_recovery(report, *key, &ran);
    }
    if !report.verify
        && let Some((shared, how)) = shared_after_recovery(&machine, scenario, judging, seed)
    {
        how.count(report);
        recovered.fs.note_read(&shared.read);
        return shared.verdict;
    }
    let fs = recovered.fs.clone();
    let mark = fs.mark_reads();
    let worked = recovered.work(scenario, run);
    let ran = Work { worked, read: fs.read_since(&mark) };
    let key = work_key(scenario, seed, &machine, run);
    let what = "the continued work on one recovered machine";
    if settle(&WORKS, key, WORKS.get(&key), &ran, what, report) {
        report.worked += 1;
    }
    let verdict = ran.worked.judge(run, &judging.allowed);
    let ran = Continuation { verdict, read: ran.read };
    let key = continuation_key(scenario, seed, &machine, judging);
    let what = "the judgement after recovery to one machine";
    if settle(&CONTINUATIONS, key, CONTINUATIONS.get(&key), &ran, what, report) {
        report.shared += 1;
    }
    ran.verdict
}

/// What recovery came to on a machine rebuilt from an image: the content digest of the machine
/// it left (`SimFs::content_digest`), or the violations that ended the phase there; and what it
/// read of the image, with the image file each path names after it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Recovery {
    outcome: Result<Digest, Vec<String>>,
    reads: faultfs::Reads,
}

/// The recoveries every worker has run on a machine rebuilt from an image, by a digest of
/// (scenario, seed, the engine variant, image, boot, medium, the sessions the run created).
/// Recovery is a deterministic program of these: it opens the store the scenario configures
/// (ids seeded with the seed and the boot) and recovers each session created that has a record
/// (`phase::recover_all`), reading nothing else of the run. The same image judged against runs
/// that differ elsewhere (what was acknowledged, what was in flight) recovers once.
static RECOVERIES: LazyLock<Memo<Recovery>> = LazyLock::new(|| Memo::new(65_536));

/// The key of the recovery of a machine rebuilt from `image` after a crash of `run`: see
/// [`RECOVERIES`].
fn recovery_key(
    scenario: &Scenario,
    seed: u64,
    image: &faultfs::Image,
    run: &run::Execution,
) -> Digest {
    let mut hasher = judgement_key(scenario, seed);
    hasher.update(image.hash());
    hasher.update(image.boot().to_le_bytes());
    hasher.update(image.media().name());
    for id in run.created.keys() {
        hasher.update((id.len() as u64).to_le_bytes());
        hasher.update(id.as_bytes());
    }
    hasher.finish()
}

/// Remembers the recovery `ran` under `key` (when verifying the reductions, one remembered
/// already must agree with it).
fn remember_recovery(report: &mut Report, key: Digest, ran: &Recovery) {
    let what = "the recovery of one image";
    settle(&RECOVERIES, key, RECOVERIES.get(&key), ran, what, report);
}

/// The judgement of a machine rebuilt from an image whose recovery is remembered as
/// `recovered`, against the run `judging` reads, without running anything: the violations
/// recovery met, or what follows it as remembered ([`shared_after_recovery`], and which was
/// shared), with what recovery and what follows read of the image. `None` when what follows is
/// not remembered.
fn judged_after(
    recovered: &Recovery,
    scenario: &Scenario,
    judging: &Judging,
    seed: u64,
) -> Option<(Judged, Option<Shared>)> {
    match &recovered.outcome {
        Err(violations) => {
            Some(((violations.clone(), recovered.reads.observed_with(&BTreeSet::new())), None))
        }
        Ok(machine) => {
            let (shared, how) = shared_after_recovery(machine, scenario, judging, seed)?;
            let observed = recovered.reads.observed_with(&shared.read);
            Some(((shared.verdict, observed), Some(how)))
        }
    }
}

/// What follows recovery to the machine whose content digest is `machine` against the run
/// `judging` reads (see [`judge_to_end`]), as remembered: the continuation judged against a run
/// that agrees with it there, or the continued work on that machine for a run it agrees with on
/// what the work reads of it, judged against this run here. Its verdict and the files it read
/// (their paths when it began), and which of the two it was; `None` when neither is remembered.
fn shared_after_recovery(
    machine: &Digest,
    scenario: &Scenario,
    judging: &Judging,
    seed: u64,
) -> Option<(Continuation, Shared)> {
    let key = continuation_key(scenario, seed, machine, judging);
    if let Some(known) = CONTINUATIONS.get(&key) {
        return Some((Continuation::clone(&known), Shared::Continuation));
    }
    let work = WORKS.get(&work_key(scenario, seed, machine, &judging.run))?;
    let verdict = work.worked.judge(&judging.run, &judging.allowed);
    let ran = Continuation { verdict, read: work.read.clone() };
    CONTINUATIONS.insert(key, Arc::new(ran.clone()));
    Some((ran, Shared::Work))
}

/// Which remembered judgement [`shared_after_recovery`] shared.
#[derive(Clone, Copy, Debug)]
enum Shared {
    /// The continuation, judged against a run that agrees with this one on what it reads.
    Continuation,
    /// The continued work, judged here.
    Work,
}

impl Shared {
    /// Counts the sharing in `report`.
    fn count(self, report: &mut Report) {
        match self {
            Shared::Continuation => report.shared += 1,
            Shared::Work => report.worked += 1,
        }
    }
}

/// The key of a continuation after recovery to `machine` (a content digest) against the run
/// `judging` reads: see [`CONTINUATIONS`].
fn continuation_key(scenario: &Scenario, seed: u64, machine: &Digest, judging: &Judging) -> Digest {
    let mut hasher = judgement_key(scenario, seed);
    hasher.update(machine);
    hasher.update(judging.digest);
    hasher.finish()
}

/// The key of the continued work on `machine` (a content digest) for `run`: see [`WORKS`].
fn work_key(scenario: &Scenario, seed: u64, machine: &Digest, run: &run::Execution) -> Digest {
    let mut hasher = judgement_key(scenario, seed);
    hasher.update(machine);
    phase::Worked::inputs(&mut hasher, scenario, run);
    hasher.finish()
}

/// A last phase's continued work on one recovered machine (see `phase::Worked`), and the
/// files it read (by their paths when it began).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Work {
    worked: phase::Worked,
    read: BTreeSet<String>,
}

/// The continued work every worker has run, by a digest of (scenario, seed, the engine
/// variant, machine after recovery, what the work reads of the run: `phase::Worked::inputs`).
/// Runs that differ elsewhere (what was acknowledged, the states allowed) are judged apart on
/// the one work.
static WORKS: LazyLock<Memo<Work>> = LazyLock::new(|| Memo::new(16_384));

/// What the last phase after a run's crash reads of the run: the part it is judged against
/// (`Execution::judged_after_crash`), the states the run allows after its crash (`run::candidates`), and a digest of the part and
/// the states, which keys the judgements and continuations remembered.
pub(crate) struct Judging {
    run: run::Execution,
    allowed: Vec<Model>,
    digest: Digest,
}

/// What the last phase reads of each run judged against, by a digest of (scenario, seed, the
/// engine variant, run).
static JUDGINGS: LazyLock<Memo<Judging>> = LazyLock::new(|| Memo::new(4_096));

/// What the last phase after the crash of `run` (its digest `run_digest`) reads of it: a
/// function of the scenario and the run alone, which every image of a crash point is judged
/// against, so it is worked out once per run.
fn judging(
    scenario: &Scenario,
    run: &run::Execution,
    run_digest: &Digest,
    seed: u64,
) -> Arc<Judging> {
    let key: Digest = {
        let mut hasher = judgement_key(scenario, seed);
        hasher.update(run_digest);
        hasher.finish()
    };
    if let Some(known) = JUDGINGS.get(&key) {
        return known;
    }
    let part = run.judged_after_crash();
    let allowed = run::candidates(scenario, run);
    assert!(!allowed.is_empty(), "a run allows some state after its crash");
    let mut hasher = Hasher::new();
    write!(hasher, "{part:?}\n{allowed:?}").expect("hashing does not fail");
    let judging = Arc::new(Judging { run: part, allowed, digest: hasher.finish() });
    JUDGINGS.insert(key, Arc::clone(&judging));
    judging
}

/// The start of the key of a judgement this thread remembers: what every such judgement
/// depends on besides its machine and run (the scenario, the seed and the engine variant).
fn judgement_key(scenario: &Scenario, seed: u64) -> Hasher {
    // Room for what the callers add (an image's or a machine's digest and a run's): it grows
    // once, not at each piece.
    let mut hasher = Hasher::with_capacity(512);
    hasher.update(scenario.name.as_bytes());
    hasher.update([0]);
    hasher.update(seed.to_le_bytes());
    match spex_engine::mutant::selected() {
        Some(mutant) => hasher.update(mutant.name()),
        None => hasher.update([0]),
    }
    hasher
}

/// After a judgement ran (`ran`, keyed `key`) where `memo` held `known` under that key (or
/// nothing): a known one it disagrees with is a broken reduction, reported as `what` went two
/// ways; a new one is remembered. Whether it agreed with a known one.
fn settle<V: Clone + PartialEq + std::fmt::Debug>(
    memo: &Memo<V>,
    key: Digest,
    known: Option<Arc<V>>,
    ran: &V,
    what: &str,
    report: &mut Report,
) -> bool {
    match known {
        Some(known) if *known != *ran => {
            report.unequal_stand_ins.push(format!("{what} went {known:?} once and {ran:?} again"));
            false
        }
        Some(_) => true,
        None => {
            memo.insert(key, Arc::new(ran.clone()));
            false
        }
    }
}

/// The last phase after a crash of `run` that left `image`, judged alone (no reduction, nothing
/// remembered): its violations, and the hash of the trace of every op it issued, so that two
/// images can be shown to lead the engine to the same writes and the same verdict.
pub fn judge_rebooted(
    scenario: &Scenario,
    seed: u64,
    run: &run::Execution,
    image: &faultfs::Image,
) -> (Vec<String>, String) {
    let fs = SimFs::from_image(image, FaultPlan::none(seed));
    let verdict = judge_last(fs.clone(), scenario, run, seed);
    (verdict, fs.trace().hash_hex())
}

/// The phase after a crash of `run` that left `image`, crashed before its op `j`: the run as
/// it stood then and the halted machine (`None` when the phase ends before op `j`).
pub fn crash_in_phase(
    scenario: &Scenario,
    seed: u64,
    run: &run::Execution,
    image: &faultfs::Image,
    j: u64,
) -> Option<(run::Execution, SimFs)> {
    let fs = SimFs::from_image(image, FaultPlan::crash_at(seed, j));
    match phase::check_image(fs, scenario, run, seed) {
        Ok(_) => None,
        Err(halted) => Some((Arc::unwrap_or_clone(halted.run), halted.fs)),
    }
}

/// The last phase of a sequence: judged, not crashed again.
pub(crate) fn judge_last(
    fs: SimFs,
    scenario: &Scenario,
    run: &run::Execution,
    seed: u64,
) -> Vec<String> {
    match phase::check_image(fs, scenario, run, seed) {
        Ok(checked) => checked.violations,
        Err(_) => vec!["recovery crashed without a planned fault".to_owned()],
    }
}

pub(crate) fn token_base(
    options: &Options,
    scenario: &Scenario,
    mode: CrashMode,
    k: u64,
    image: usize,
) -> Token {
    Token {
        media: options.media,
        scenario: scenario.name.to_string(),
        seed: options.seed,
        mode,
        k,
        image,
        second: None,
        then_power: None,
        first: None,
        first_crash: None,
        fault: None,
    }
}
