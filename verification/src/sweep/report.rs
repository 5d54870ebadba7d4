//! What a sweep reports: the matrix of cells, the violations with their tokens, how the
//! power-loss crashes were enumerated, and the images skipped as already judged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use faultfs::CrashMode;
use faultfs::{Digest, Hasher};

use super::scenario::Scenario;
use super::token::Token;

/// A violation: where, and what broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// How to replay it.
    pub token: Token,
    /// The transition in flight.
    pub transition: String,
    /// The boundary of the crash point.
    pub boundary: String,
    /// What was wrong.
    pub messages: Vec<String>,
    /// The matrix cell it was counted in (`None`: the fault-free run, before any crash).
    pub cell: Option<CellKey>,
}

impl Violation {
    /// The one command that reproduces it.
    pub fn replay_command(&self) -> String {
        format!("spex verify replay {}", self.token)
    }
}

/// The coordinates of one sequence in the matrix and its token.
pub(crate) struct Place<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) transition: String,
    pub(crate) boundary: String,
    pub(crate) token: Token,
}

impl Place<'_> {
    pub(crate) fn key(&self, sequence: &str, mode: CrashMode) -> CellKey {
        let transition = if sequence.is_empty() {
            self.transition.clone()
        } else {
            format!("{}/{sequence}", self.transition)
        };
        (self.scenario.name.to_string(), transition, self.boundary.clone(), mode)
    }
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// Crash points in this cell.
    pub points: u64,
    /// Images checked.
    pub images: u64,
    /// Images with a violation.
    pub violations: u64,
    /// Images skipped: already judged against the same run elsewhere in the sweep.
    pub repeated: u64,
    /// Images not judged because a judged one stands for them (see [`Report::equivalent`]).
    pub equivalent: u64,
}

/// Key of a matrix cell: (scenario, transition, boundary, mode).
pub type CellKey = (String, String, String, CrashMode);

/// Progress, for a progress bar.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Crash points done.
    pub done: u64,
    /// Crash points in all.
    pub total: u64,
    /// Images checked so far.
    pub images: u64,
    /// Violations so far.
    pub violations: u64,
}

/// The result of a sweep.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The matrix.
    pub cells: BTreeMap<CellKey, Cell>,
    /// Every violation (the first few per cell are kept in full).
    pub violations: Vec<Violation>,
    /// Crash points visited.
    pub crash_points: u64,
    /// Crash points the sweep set out to visit (of its shard).
    pub planned_points: u64,
    /// Images checked (first and second crashes).
    pub images: u64,
    /// Whether the budget ran out before every point was visited.
    pub truncated: bool,
    /// Per scenario, power-loss crashes whose images were every subset of the pending pieces
    /// (exhaustive) and those that were families plus samples (sampled).
    pub enumeration: BTreeMap<String, Enumeration>,
    /// Images not judged again because the same image had already been judged against the
    /// same run (same content hash, same boot, same acknowledgements): the verdict would be
    /// the same.
    pub repeated: u64,
    /// (image, boot, run) digests already judged at this crash point.
    judged: faultfs::DigestSet,
    /// The power losses enumerated exhaustively at this crash point, by a digest of (what
    /// their images depend on, the run they were judged against), with how many images each
    /// left and how they were enumerated: every image of one was judged against that run here.
    crashes: faultfs::DigestMap<Enumerated>,
    /// Images not judged because an image judged at the same crash point, in the same cell and
    /// against the same run agreed with them on everything its judgement could observe (every
    /// path, kind, length and link target, and the bytes of every file it read): the
    /// judgement is a deterministic program of what it observes, so it would have gone the
    /// same way (see `faultfs`'s `Image::digest_within`).
    pub equivalent: u64,
    /// Per (cell, run), the judged images' digests, grouped by the files their judgement read.
    classes: faultfs::DigestMap<Vec<Class>>,
    /// Last phases whose continued work did not run again: recovery had left the same machine
    /// (every path, kind, byte and link, the boot and the pid; not the times) as before a
    /// continuation that ran against the same run of the same scenario, and the continued work
    /// is a deterministic program of those (see `point::judge_to_end`). Which image of several
    /// alike runs its continuation depends on the order the points are judged in, so this
    /// count (alone of the report's) may differ with `--jobs`.
    pub shared: u64,
    /// Of the last phases that did not share a judgement, those whose continued work did not
    /// run again: recovery had left the same machine as before a continued work that ran for a
    /// run retrying the same keyed sends and holding the same watermarks (all the work reads of
    /// a run: `phase::Worked::inputs`); what it did is judged against this run apart. Like
    /// `shared`, this count may differ with `--jobs`.
    pub worked: u64,
    /// Judged images whose judgement did not run again: the same image (paths, kinds, bytes,
    /// boot, medium) had been judged against the same run in another cell (another sequence or
    /// crash point) of the same scenario, and a judgement is a deterministic program of those
    /// (see `point::judge_image_to_end`); or a machine restarted after a kill that every
    /// process sees as one judged against the same run before (see `point::judge_restarted`).
    /// Like `shared`, this count may differ with `--jobs`.
    pub reused: u64,
    /// Of the judged images that did not reuse a judgement, those whose recovery did not run
    /// again: the same image had been recovered for a run that created the same sessions, and
    /// recovery is a deterministic program of those (see `point::RECOVERIES`); what followed it
    /// was shared (counted in `shared` or `worked` too). When verifying the reductions, the
    /// images whose remembered recovery was compared with the one run. Like `shared`, this count
    /// may differ with `--jobs`.
    pub recalled: u64,
    /// Power losses whose images were not enumerated again: one with the same power-loss
    /// digest had been enumerated exhaustively and had built every image new at this point (see
    /// `point::POWER_LOSSES`). When verifying the reductions, the power losses enumerated again
    /// and compared with the one kept. Like `shared`, this count may differ with `--jobs`.
    pub kept_power_losses: u64,

    /// When verifying the reduction ([`Options::verify_equivalent`]), every image stood for
    /// whose own verdict differs from the one of the image that stood for it (none, if the
    /// reduction is sound).
    ///
    /// [`Options::verify_equivalent`]: super::options::Options::verify_equivalent
    pub unequal_stand_ins: Vec<String>,
    /// Whether images stood for are judged anyway, to check the reduction.
    pub(crate) verify: bool,
    /// Whether images a judged one stands for are left out (on by default; off judges every
    /// image, to compare verdicts against).
    pub(crate) reduce: bool,
    /// Per scenario, the crash points set out to visit and those visited.
    pub reach: BTreeMap<String, Reach>,
    /// Every boundary a simulated op of the sweep passed (the scenarios, the phases after a
    /// crash, the first commands, the work after an injected fault).
    pub reached: BTreeSet<String>,
    /// Every boundary the sweep crashed at or injected a fault at.
    pub crashed: BTreeSet<String>,
    /// Wall time.
    pub elapsed: Duration,
    /// Threads that judged the points.
    pub jobs: usize,
}

/// How far a sweep got through one scenario's crash points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// Crash points of the scenario in this sweep (its shard).
    pub planned: u64,
    /// Crash points visited.
    pub done: u64,
}

/// How one scenario's power-loss crashes were enumerated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Enumeration {
    /// Crashes whose every pending subset was an image.
    pub exhaustive: u64,
    /// Of those and of the crashes by class, the crashes at which pending pieces no image can
    /// tell apart were left out (all-zero chunks past a file's durable end: see `faultfs`'s
    /// crash images).
    pub reduced: u64,
    /// Crashes whose images are one per class of the pending subsets' images: for a file in a
    /// checked-block format, one image stands for every version of a block its reader refuses
    /// (see `faultfs::SimFs::set_checked_blocks`).
    pub classes: u64,
    /// Crashes with too many pending pieces: structured families and seeded samples.
    pub sampled: u64,
    /// The most pending pieces seen at one crash.
    pub pieces_max: usize,
}

impl Report {
    pub(crate) fn count_enumeration(&mut self, scenario: &Scenario, crash: &faultfs::Sifted) {
        self.count_enumerated(scenario, &Enumerated::of(crash));
    }

    fn count_enumerated(&mut self, scenario: &Scenario, crash: &Enumerated) {
        let entry = self.enumeration.entry(scenario.name.to_string()).or_default();
        if crash.exhaustive {
            if crash.checked_groups > 0 {
                entry.classes += 1;
            } else {
                entry.exhaustive += 1;
            }
            entry.reduced += u64::from(crash.reduced_pieces > 0);
        } else {
            entry.sampled += 1;
        }
        entry.pieces_max = entry.pieces_max.max(crash.pending_pieces);
    }
}

impl Report {
    /// The power-loss crashes of every scenario, counted together.
    pub fn total_enumeration(&self) -> Enumeration {
        let mut total = Enumeration::default();
        for counts in self.enumeration.values() {
            total.exhaustive += counts.exhaustive;
            total.reduced += counts.reduced;
            total.classes += counts.classes;
            total.sampled += counts.sampled;
            total.pieces_max = total.pieces_max.max(counts.pieces_max);
        }
        total
    }

    /// Adds `part` (the report of later crash points) to this one: counts add up, violations
    /// follow in order, at most [`VIOLATIONS_KEPT_PER_CELL`] kept per cell across both.
    pub fn absorb(&mut self, part: Report) {
        for (key, cell) in part.cells {
            let into = self.cells.entry(key).or_default();
            into.points += cell.points;
            into.images += cell.images;
            into.violations += cell.violations;
            into.repeated += cell.repeated;
            into.equivalent += cell.equivalent;
        }
        for violation in part.violations {
            let kept = self
                .violations
                .iter()
                .filter(|kept| kept.cell.is_some() && kept.cell == violation.cell)
                .count() as u64;
            if violation.cell.is_none() || kept < VIOLATIONS_KEPT_PER_CELL {
                self.violations.push(violation);
            }
        }
        self.crash_points += part.crash_points;
        self.images += part.images;
        self.repeated += part.repeated;
        self.equivalent += part.equivalent;
        self.shared += part.shared;
        self.worked += part.worked;
        self.recalled += part.recalled;
        self.kept_power_losses += part.kept_power_losses;
        self.reused += part.reused;
        self.unequal_stand_ins.extend(part.unequal_stand_ins);
        self.reached.extend(part.reached);
        self.crashed.extend(part.crashed);
        for (scenario, counts) in part.enumeration {
            let into = self.enumeration.entry(scenario).or_default();
            into.exhaustive += counts.exhaustive;
            into.sampled += counts.sampled;
            into.reduced += counts.reduced;
            into.classes += counts.classes;
            into.pieces_max = into.pieces_max.max(counts.pieces_max);
        }
    }
}

impl Report {
    /// The coverage gaps: boundaries some op of the sweep passed that no crash point and no
    /// injected fault was ever placed at (what follows a first command, for one, is judged
    /// after a power loss but not crashed op by op).
    pub fn never_crashed(&self) -> Vec<&str> {
        self.reached.difference(&self.crashed).map(String::as_str).collect()
    }

    /// Notes the boundaries of every op `fs` has run as reached.
    pub(crate) fn note_reached(&mut self, fs: &faultfs::SimFs) {
        for entry in fs.trace().entries() {
            if !self.reached.contains(entry.boundary.name()) {
                self.reached.insert(entry.boundary.name().to_owned());
            }
        }
    }

    /// Notes the boundary `name` as crashed at (or faulted at), and so also reached.
    pub(crate) fn note_crashed(&mut self, name: &str) {
        if !self.crashed.contains(name) {
            self.crashed.insert(name.to_owned());
            self.reached.insert(name.to_owned());
        }
    }
}

/// Violations kept in full per cell; the rest are only counted.
pub(crate) const VIOLATIONS_KEPT_PER_CELL: u64 = 3;

impl Report {
    /// The cell `key` (its key copied only the first time: most images count in a cell that
    /// holds some already).
    pub(crate) fn cell(&mut self, key: &CellKey) -> &mut Cell {
        if !self.cells.contains_key(key) {
            self.cells.insert(key.clone(), Cell::default());
        }
        self.cells.get_mut(key).expect("the cell was just made if it was missing")
    }

    /// Whether the image with hash `image` (rebooted as `boot`) has not yet been judged against
    /// the run with digest `run`; marks it. The caller counts it as skipped
    /// ([`Report::note_skipped`]) when it was.
    pub(crate) fn first_judgement(&mut self, image: (&Digest, u64), run: &Digest) -> bool {
        self.judged.insert(judgement_of(image, run))
    }

    /// The mark [`Report::first_judgement`] leaves for the image with hash `image` (rebooted
    /// as `boot`) against the run with digest `run`, unless it was left before; marks nothing
    /// (see [`Report::mark_judged`]).
    pub(crate) fn unjudged(&self, image: (&Digest, u64), run: &Digest) -> Option<Digest> {
        let mark = judgement_of(image, run);
        (!self.judged.contains(&mark)).then_some(mark)
    }

    /// Leaves `mark`, which [`Report::unjudged`] gave since the last mark left.
    pub(crate) fn mark_judged(&mut self, mark: Digest) {
        let new = self.judged.insert(mark);
        debug_assert!(new, "an image is marked judged against a run once");
    }

    /// Counts `skipped` images of cell `key` as skipped: each judged against the same run at
    /// this crash point before ([`Report::first_judgement`]).
    pub(crate) fn note_skipped(&mut self, key: &CellKey, skipped: u64) {
        self.repeated += skipped;
        self.cell(key).repeated += skipped;
    }

    /// Whether a power loss of a machine whose `SimFs::power_loss_digest` is `machine`, judged
    /// against the run with digest `run` in cell `key`, was enumerated exhaustively at this
    /// crash point before. Then it leaves the images it left then, in the same order, every one
    /// of them judged against that run here ([`Report::first_judgement`]): it is counted as
    /// enumerated, and its images as skipped, without building them again.
    pub(crate) fn repeated_crash(
        &mut self,
        scenario: &Scenario,
        key: &CellKey,
        (machine, run): (&Digest, &Digest),
    ) -> bool {
        let Some(known) = self.crashes.get(&crash_key(machine, run)).cloned() else {
            return false;
        };
        self.count_enumerated(scenario, &known);
        self.repeated += known.images as u64;
        self.cell(key).repeated += known.images as u64;
        true
    }

    /// Notes that `crash` (of a machine whose `SimFs::power_loss_digest` is `machine`) was
    /// enumerated and each of its images judged against the run with digest `run` (`skipped`
    /// of them as judged here before): see [`Report::repeated_crash`]. When verifying the
    /// reductions, a power loss enumerated before with an equal digest is every image of it
    /// skipped, or the reduction is reported broken.
    pub(crate) fn note_crash(
        &mut self,
        crash: &faultfs::Sifted,
        (machine, run): (&Digest, &Digest),
        skipped: u64,
    ) {
        if !crash.crash.exhaustive {
            return;
        }
        let enumerated = Enumerated::of(crash);
        match self.crashes.entry(crash_key(machine, run)) {
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(enumerated);
            }
            std::collections::hash_map::Entry::Occupied(known) => {
                if *known.get() != enumerated || skipped != enumerated.images as u64 {
                    self.unequal_stand_ins.push(format!(
                        "a power loss with the digest of one enumerated before left \
                         {enumerated:?} ({skipped} of its images judged before), that one {:?}",
                        known.get()
                    ));
                }
            }
        }
    }
}

/// What the report counts of one power loss's enumeration.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Enumerated {
    images: usize,
    exhaustive: bool,
    checked_groups: usize,
    reduced_pieces: usize,
    pending_pieces: usize,
}

impl Enumerated {
    fn of(sifted: &faultfs::Sifted) -> Enumerated {
        let crash = &sifted.crash;
        Enumerated {
            images: sifted.distinct,
            exhaustive: crash.exhaustive,
            checked_groups: crash.checked_groups,
            reduced_pieces: crash.reduced_pieces,
            pending_pieces: crash.pending_pieces,
        }
    }
}

/// What [`Report::first_judgement`] marks: the image's hash, its boot and the run's digest.
fn judgement_of((image, boot): (&Digest, u64), run: &Digest) -> Digest {
    let mut bytes = [0; 40];
    let boot = boot.to_le_bytes();
    let key = image.iter().chain(&boot).chain(run);
    for (byte, from) in bytes.iter_mut().zip(key) {
        *byte = *from;
    }
    faultfs::digest(&bytes)
}

fn crash_key(machine: &Digest, run: &Digest) -> Digest {
    let mut hasher = Hasher::new();
    hasher.update(machine);
    hasher.update(run);
    hasher.finish()
}

/// The images judged in one cell against one run whose judgements read the same files.
#[derive(Clone, Debug)]
struct Class {
    /// The files (paths in the image) the judgements read.
    read: BTreeSet<String>,
    /// Each judged image's digest within `read`, and its verdict.
    verdicts: faultfs::DigestMap<Vec<String>>,
}

impl Report {
    /// The empty report of one crash point swept with `options`.
    pub(crate) fn for_point(options: &super::options::Options) -> Report {
        Report {
            reduce: options.reduce_equivalent,
            verify: options.verify_equivalent,
            ..Report::default()
        }
    }

    /// The key of the judged images that may stand for others in cell `key` against the run
    /// with digest `run` ([`Report::stood_for`], [`Report::note_judged`]): worked out once per
    /// crash, not per image.
    pub(crate) fn class_key(key: &CellKey, run: &Digest) -> Digest {
        let (scenario, transition, boundary, mode) = key;
        let mut hasher = Hasher::new();
        for name in [scenario.as_str(), transition, boundary, mode.name()] {
            hasher.update((name.len() as u64).to_le_bytes());
            hasher.update(name.as_bytes());
        }
        hasher.update(run);
        hasher.finish()
    }

    /// The verdict of an image judged at this crash point in `key` against the run with digest
    /// `run` that stands for `image` (they agree on everything that judgement observed);
    /// counts `image` as stood for. `class` is [`Report::class_key`] of `key` and `run`.
    pub(crate) fn stood_for(
        &mut self,
        key: &CellKey,
        class: &Digest,
        image: &faultfs::Image,
    ) -> Option<Vec<String>> {
        if !self.reduce {
            return None;
        }
        let classes = self.classes.get(class)?;
        let verdict = classes
            .iter()
            .find_map(|class| class.verdicts.get(&image.digest_within(&class.read)))?
            .clone();
        self.equivalent += 1;
        self.cell(key).equivalent += 1;
        Some(verdict)
    }

    /// Notes that `image` was judged against a run, in the class `class` of judged images
    /// ([`Report::class_key`] of its cell and the run's digest), what its judgement observed of
    /// it, and its verdict.
    pub(crate) fn note_judged(
        &mut self,
        class: &Digest,
        image: &faultfs::Image,
        observed: &faultfs::Observed,
        verdict: &[String],
    ) {
        let faultfs::Observed::Files(read) = observed else { return };
        if !self.reduce {
            return;
        }
        let digest = image.digest_within(read);
        let classes = self.classes.entry(*class).or_default();
        let verdict = verdict.to_vec();
        match classes.iter_mut().find(|class| class.read == *read) {
            Some(class) => {
                class.verdicts.insert(digest, verdict);
            }
            None => classes.push(Class {
                read: read.clone(),
                verdicts: [(digest, verdict)].into_iter().collect(),
            }),
        }
    }

    /// When verifying the reduction: an image stood for was judged after all; its verdict must
    /// be the one of the image that stood for it.
    pub(crate) fn compare_stand_in(&mut self, key: &CellKey, stand_in: &[String], own: &[String]) {
        if stand_in != own {
            self.unequal_stand_ins.push(format!(
                "{key:?}: the image standing in was judged {stand_in:?}, an image it stood for {own:?}"
            ));
        }
    }
}

/// Counts one judged image in its cell, and keeps its violation (the first few per cell) with
/// the token `token` makes (only then: most images are judged clean).
pub(crate) fn record(
    report: &mut Report,
    key: &CellKey,
    token: impl FnOnce() -> Token,
    place: &Place<'_>,
    messages: Vec<String>,
) {
    report.images += 1;
    let cell = report.cell(key);
    cell.images += 1;
    if messages.is_empty() {
        return;
    }
    cell.violations += 1;
    if cell.violations <= VIOLATIONS_KEPT_PER_CELL {
        report.violations.push(Violation {
            token: token(),
            transition: key.1.clone(),
            boundary: place.boundary.clone(),
            messages,
            cell: Some(key.clone()),
        });
    }
}

/// Merges the reports of a sweep's shards (each a set of crash points `k % N == i` of the same
/// scenarios, seed and options) into the report one run over every point gives: counts add up,
/// and the violations follow in point order (the fault-free runs' first, then by scenario in
/// `scenarios` order and crash point), at most [`VIOLATIONS_KEPT_PER_CELL`] per cell. This is
/// exact because each shard keeps the first violations of each cell among its own points, and
/// the first ones over all points are among those.
pub fn merge(parts: Vec<Report>, scenarios: &[String]) -> Report {
    let mut merged = Report::default();
    let mut violations = Vec::new();
    for mut part in parts {
        violations.append(&mut part.violations);
        for (scenario, reach) in &part.reach {
            let into = merged.reach.entry(scenario.clone()).or_default();
            into.planned += reach.planned;
            into.done += reach.done;
        }
        merged.planned_points += part.planned_points;
        merged.truncated |= part.truncated;
        merged.elapsed = merged.elapsed.max(part.elapsed);
        merged.jobs += part.jobs;
        merged.absorb(part);
    }
    let position = |name: &str| scenarios.iter().position(|known| known == name);
    violations.sort_by_key(|violation| {
        (violation.cell.is_some(), position(&violation.token.scenario), violation.token.k)
    });
    merged.absorb(Report { violations, ..Report::default() });
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crash(pending_pieces: usize) -> faultfs::Sifted {
        faultfs::Sifted::from(faultfs::CrashImages {
            mode: CrashMode::PowerLoss,
            images: Vec::new(),
            generated: 1,
            exhaustive: true,
            pending_pieces,
            reduced_pieces: 0,
            checked_groups: 0,
        })
    }

    /// When verifying the reductions, a power loss whose digest equals one enumerated before
    /// must leave the same enumeration, every image of it judged before; otherwise the digest
    /// is reported as a broken reduction.
    #[test]
    fn a_repeated_power_loss_that_differs_is_reported_when_verifying() {
        let (machine, run) = ([1; 16], [2; 16]);
        let mut report = Report { verify: true, ..Report::default() };
        report.note_crash(&crash(3), (&machine, &run), 0);
        report.note_crash(&crash(3), (&machine, &run), 0);
        assert!(report.unequal_stand_ins.is_empty(), "{:?}", report.unequal_stand_ins);
        report.note_crash(&crash(4), (&machine, &run), 0);
        assert_eq!(report.unequal_stand_ins.len(), 1, "another enumeration under one digest");
        let machine_with_an_image = [3; 16];
        let empty = faultfs::SimFs::new(faultfs::FaultPlan::none(1)).crash(CrashMode::PowerLoss);
        let empty = faultfs::Sifted::from(empty);
        report.note_crash(&empty, (&machine_with_an_image, &run), 0);
        report.note_crash(&empty, (&machine_with_an_image, &run), 1);
        assert_eq!(report.unequal_stand_ins.len(), 1, "every image judged before: as expected");
        report.note_crash(&empty, (&machine_with_an_image, &run), 0);
        assert_eq!(report.unequal_stand_ins.len(), 2, "an image not judged before");
        let scenario = super::super::scenario::named("send").expect("an embedded scenario");
        let key = ("send".to_owned(), "send".to_owned(), "end".to_owned(), CrashMode::PowerLoss);
        assert!(report.repeated_crash(&scenario, &key, (&machine, &run)));
        assert!(!report.repeated_crash(&scenario, &key, (&[9; 16], &run)));
    }
}
