//! The power-loss images of the engine's own writes are the same with the zero-chunk reduction
//! and without it: at every crash point of the embedded scenarios whose every subset both
//! enumerations reach, the two sets of images are equal (and so are the verdicts, the judgement
//! being a deterministic program of the image), and where only the reduced one reaches every
//! subset, every image the sampled one found (its families, torn writes among them, and its
//! seeded samples) is among the reduced one's.

use std::collections::{BTreeMap, BTreeSet};

use faultfs::{CheckedBlocks, CrashImages, CrashMode, FaultPlan, Media, SimFs};
use sha2::{Digest, Sha256};
use spex_verification::sweep::{crash_in_phase, judge_rebooted, run, run::execute, scenario};

fn crash(name: &str, k: u64, reduce: bool) -> CrashImages {
    let scenario = scenario::named(name).expect("an embedded scenario");
    let fs = SimFs::new(FaultPlan::crash_at(SEED, k));
    fs.set_zero_chunk_reduction(reduce);
    execute(&fs, &scenario, SEED);
    fs.crash(CrashMode::PowerLoss)
}

fn hashes(crash: &CrashImages) -> BTreeSet<faultfs::Digest> {
    crash.images.iter().map(faultfs::Image::hash).collect()
}

const SEED: u64 = 5;

#[test]
fn leaving_out_zero_chunks_changes_no_image_of_the_engines_writes() {
    let (mut compared, mut turned_exhaustive) = (0, 0);
    for name in ["send", "close"] {
        let scenario = scenario::named(name).expect("an embedded scenario");
        let fs = SimFs::new(FaultPlan::none(SEED));
        execute(&fs, &scenario, SEED);
        for k in 0..=fs.op_count() {
            let (reduced, full) = (crash(name, k, true), crash(name, k, false));
            assert!(reduced.exhaustive || !full.exhaustive, "{name} at {k}: the reduction samples");
            if full.exhaustive {
                assert_eq!(full.reduced_pieces, 0);
                assert_eq!(
                    hashes(&reduced),
                    hashes(&full),
                    "{name} at {k}: other images with the reduction"
                );
                compared += 1;
            } else if reduced.exhaustive {
                let every = hashes(&reduced);
                let sampled = hashes(&full);
                assert!(
                    sampled.is_subset(&every),
                    "{name} at {k}: {} sampled images the enumeration lacks",
                    sampled.difference(&every).count()
                );
                turned_exhaustive += 1;
            }
        }
    }
    assert!(compared > 50, "crash points compared both ways: {compared}");
    assert!(turned_exhaustive > 5, "sampled crashes the reduction enumerates: {turned_exhaustive}");
}

/// What a reader whose blocks are `checked` can tell of an image: every path and its bytes,
/// except that the blocks of a file in that format the reader refuses are all alike.
fn reader_class(checked: CheckedBlocks, image: &faultfs::Image) -> String {
    let mut class = String::new();
    for (path, node) in image.nodes() {
        class.push_str(path);
        let name = path.rsplit('/').next().unwrap_or_default();
        match node {
            faultfs::ImageNode::File(bytes) if checked.names.contains(&name) => {
                class.push_str(&format!(" {} bytes:", bytes.len()));
                let block_bytes = usize::try_from(checked.block_bytes).expect("a block's size");
                for (block, bytes) in (0u64..).zip(bytes.chunks(block_bytes)) {
                    if (checked.accepts)(block, bytes) {
                        class.push_str(&format!(" {}", hex::encode(Sha256::digest(bytes))));
                    } else {
                        class.push_str(" refused");
                    }
                }
            }
            node => class.push_str(&format!(" {node:?}")),
        }
        class.push('\n');
    }
    class
}

/// How many crash points, images judged and images another stood for a comparison covered.
#[derive(Debug)]
struct Compared {
    points: usize,
    judged: usize,
    stood_for: usize,
}

/// At every crash point of the embedded send scenario (on zero tails, where every subset of
/// the pending pieces is enumerated without the reduction too) whose power loss leaves a file
/// in the `checked` format pending: the images enumerated block by block must fall in exactly
/// the classes of those of every subset, and each image of every subset, judged alone, must
/// get the verdict and issue the trace of the image standing for its class. The first
/// difference is the error.
fn compare_by_block(checked: CheckedBlocks) -> Result<Compared, String> {
    let scenario = scenario::named("send").expect("an embedded scenario");
    let probe = run::machine(FaultPlan::none(SEED), Media::ZeroTails);
    execute(&probe, &scenario, SEED);
    let mut compared = Compared { points: 0, judged: 0, stood_for: 0 };
    for k in 0..=probe.op_count() {
        let crash = |by_block: bool| {
            let fs = run::machine(FaultPlan::crash_at(SEED, k), Media::ZeroTails);
            fs.set_checked_blocks(by_block.then_some(checked));
            let run = execute(&fs, &scenario, SEED);
            (run, fs.crash(CrashMode::PowerLoss))
        };
        let (run, by_block) = crash(true);
        if by_block.checked_groups == 0 {
            continue;
        }
        let (_, every) = crash(false);
        assert!(every.exhaustive && every.checked_groups == 0, "at {k}: every subset");
        let mut standing: BTreeMap<String, &faultfs::Image> = BTreeMap::new();
        for image in &by_block.images {
            standing.entry(reader_class(checked, image)).or_insert(image);
        }
        let classes: BTreeSet<String> =
            every.images.iter().map(|image| reader_class(checked, image)).collect();
        if !standing.keys().eq(classes.iter()) {
            return Err(format!(
                "at {k}: the classes block by block are not those of every subset"
            ));
        }
        let mut verdicts = BTreeMap::new();
        for image in &every.images {
            let class = reader_class(checked, image);
            let stand_in = standing.get(&class).expect("every class stands");
            let expected = verdicts
                .entry(class)
                .or_insert_with(|| judge_rebooted(&scenario, SEED, &run, stand_in))
                .clone();
            let got = judge_rebooted(&scenario, SEED, &run, image);
            if got != expected {
                return Err(format!(
                    "at {k}: image {} judged {got:?}, the image standing for its class {expected:?}",
                    image.hash_hex()
                ));
            }
            compared.judged += 1;
            compared.stood_for += usize::from(image.hash() != stand_in.hash());
        }
        compared.points += 1;
    }
    Ok(compared)
}

/// The receipt index's blocks taken whole or refused change no verdict and no write (see
/// `compare_by_block`). At these first crash points the index's contents do not change what the
/// engine answers (a damaged run is rebuilt from the log), so a declaration coarser than the
/// reader (every data block refused alike) passes here too; where the contents do matter, the
/// two tests below compare at a crash inside the phase that rewrites the index.
#[test]
fn an_index_block_refused_alike_changes_no_verdict_and_no_write() {
    let compared =
        compare_by_block(spex_engine::INDEX_BLOCKS).unwrap_or_else(|error| panic!("{error}"));
    assert!(compared.points >= 5, "crash points with a pending receipt index: {compared:?}");
    assert!(compared.stood_for >= 20, "images another stood for, judged: {compared:?}");
}

/// The second power loss where the catalogue catches `IndexWithoutChecksum` (a crash at op 43
/// of the send scenario, the first image, then a crash at op 53 of the phase after it, which
/// rewrites the receipt index), compared block by block and by every subset (see
/// `compare_by_block`): `Some(images judged)` when alike, `None` when there is nothing there
/// to compare.
fn compare_in_phase(checked: CheckedBlocks) -> Result<Option<usize>, String> {
    let scenario = scenario::named("send").expect("an embedded scenario");
    let fs = run::machine(FaultPlan::crash_at(SEED, 43), Media::ZeroTails);
    let run = execute(&fs, &scenario, SEED);
    let first = fs.crash(CrashMode::PowerLoss).images.swap_remove(0);
    let crash = |by_block: bool| {
        let (run, fs) = crash_in_phase(&scenario, SEED, &run, &first, 53)?;
        fs.set_checked_blocks(by_block.then_some(checked));
        Some((run, fs.crash(CrashMode::PowerLoss)))
    };
    let (Some((run, by_block)), Some((_, every))) = (crash(true), crash(false)) else {
        return Ok(None);
    };
    if by_block.checked_groups == 0 || !every.exhaustive {
        return Ok(None);
    }
    let mut standing: BTreeMap<String, &faultfs::Image> = BTreeMap::new();
    for image in &by_block.images {
        standing.entry(reader_class(checked, image)).or_insert(image);
    }
    let mut judged = 0;
    for image in &every.images {
        let stand_in =
            standing.get(&reader_class(checked, image)).ok_or("a class lacks an image")?;
        let (expected, got) = (
            judge_rebooted(&scenario, SEED, &run, stand_in),
            judge_rebooted(&scenario, SEED, &run, image),
        );
        if got != expected {
            return Err(format!("{} judged {got:?}, its class's {expected:?}", image.hash_hex()));
        }
        judged += 1;
    }
    Ok(Some(judged))
}

/// The real engine's index, rewritten inside a phase, compares alike too.
#[test]
fn an_index_rewritten_in_a_phase_compares_alike() {
    let judged =
        compare_in_phase(spex_engine::INDEX_BLOCKS).unwrap_or_else(|error| panic!("{error}"));
    assert!(judged.is_some_and(|judged| judged > 1), "a pending index there: {judged:?}");
}

/// The comparison can fail: an engine that trusts a block without its checksum
/// (`IndexWithoutChecksum`), declared to refuse every block alike, answers from some versions
/// of a block what it does not from others.
#[test]
fn a_reader_that_tells_refused_blocks_apart_fails_the_comparison() {
    spex_engine::mutant::select(Some(spex_engine::mutant::Mutant::IndexWithoutChecksum));
    let refuses_all = CheckedBlocks { accepts: |_, _| false, ..spex_engine::INDEX_BLOCKS };
    let compared = compare_in_phase(refuses_all);
    assert!(compared.is_err(), "the mutant judged alike across a class: {compared:?}");
}
