//! The demonstration sweep of a durable log writer: the correct writer shows no violation under
//! either crash mode, every broken writer is caught, and a violation replays to the same image.
//! A sweep that cannot catch a writer missing an fsync would prove nothing about the engine.

use faultfs::CrashMode;
use spex_verification::demo::{Writer, sweep};

const MODES: [CrashMode; 2] = [CrashMode::ProcessKill, CrashMode::PowerLoss];

#[test]
fn correct_writer_survives_every_crash_point() {
    for seed in [1, 2, 3] {
        let report = sweep(seed, Writer::Correct, 6, &MODES, None);
        assert_eq!(report.violations().count(), 0, "seed {seed}: {:?}", report.violations().next());
        for mode in &report.modes {
            assert_eq!(mode.crash_points, report.boundaries.len() as u64 + 1);
            assert!(mode.images >= mode.crash_points, "every crash point yields an image");
        }
    }
}

#[test]
fn every_broken_writer_is_caught_under_power_loss_only() {
    for writer in [Writer::NoSync, Writer::AckBeforeSync, Writer::NoDirSync] {
        let report = sweep(5, writer, 6, &MODES, None);
        let by_mode = |mode| report.modes.iter().find(|report| report.mode == mode).unwrap();
        assert!(!by_mode(CrashMode::PowerLoss).violations.is_empty(), "{writer} must be caught");
        assert!(
            by_mode(CrashMode::ProcessKill).violations.is_empty(),
            "{writer}: a process kill keeps what the kernel accepted, so only power loss exposes it"
        );
    }
}

#[test]
fn a_violation_replays_to_the_same_image() {
    let report = sweep(9, Writer::NoSync, 6, &[CrashMode::PowerLoss], None);
    let first = report.violations().next().expect("no-sync is caught").clone();
    for _ in 0..2 {
        let replay = sweep(9, Writer::NoSync, 6, &[CrashMode::PowerLoss], Some(first.crash_at));
        assert_eq!(replay.trace_hash, report.trace_hash);
        assert!(
            replay.violations().any(|violation| violation == &first),
            "replay reproduces {first:?}"
        );
    }
}
