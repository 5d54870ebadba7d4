//! The power-loss images of the engine's own writes are the same with the zero-chunk reduction
//! and without it: at every crash point of the embedded scenarios whose every subset both
//! enumerations reach, the two sets of images are equal (and so are the verdicts, the judgement
//! being a deterministic program of the image), and where only the reduced one reaches every
//! subset, every image the sampled one found (its families, torn writes among them, and its
//! seeded samples) is among the reduced one's.

use std::collections::BTreeSet;

use faultfs::{CrashImages, CrashMode, FaultPlan, SimFs};
use spex_verification::sweep::{run::execute, scenario};

fn crash(name: &str, k: u64, reduce: bool) -> CrashImages {
    let scenario = scenario::named(name).expect("an embedded scenario");
    let fs = SimFs::new(FaultPlan::crash_at(SEED, k));
    fs.set_zero_chunk_reduction(reduce);
    execute(&fs, &scenario, SEED);
    fs.crash(CrashMode::PowerLoss)
}

fn hashes(crash: &CrashImages) -> BTreeSet<[u8; 32]> {
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
