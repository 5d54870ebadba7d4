//! Litmus tests of the `SimFs` crash model: each is a classic crash bug (or its correct fix) that
//! the model must expose (or must not). Each litmus is also run under a model with its rule
//! switched off, and must then fail: a crash model whose litmus tests pass without the rule they
//! test would prove nothing.

#![allow(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::path::Path;

use faultfs::{Boundary, CrashMode, Fault, FaultPlan, File, Fs, OpenOptions, Rules, SimFs};

const B: Boundary = Boundary::new("litmus");

fn p(path: &str) -> &Path {
    Path::new(path)
}

fn power_images(fs: &SimFs) -> Vec<faultfs::Image> {
    fs.crash(CrashMode::PowerLoss).images
}

/// A fresh filesystem with a durable directory `/d`.
fn fs_with_dir(rules: Rules) -> SimFs {
    let fs = SimFs::with_rules(FaultPlan::none(1), rules);
    fs.create_dir(p("/d"), B).unwrap();
    fs.sync_dir(p("/"), B).unwrap();
    fs
}

/// A file whose data is synced but whose directory is not: some power-loss image lacks it.
fn file_synced_dir_not(rules: Rules) -> bool {
    let fs = fs_with_dir(rules);
    let file = fs.open(p("/d/f"), OpenOptions::create(), B).unwrap();
    file.append(b"data", B).unwrap();
    file.sync_data(B).unwrap();
    power_images(&fs).iter().any(|image| !image.contains("/d/f"))
}

#[test]
fn fsynced_file_in_unsynced_directory_can_vanish() {
    assert!(file_synced_dir_not(Rules::default()));
    let without = Rules { names_need_dir_sync: false, ..Rules::default() };
    assert!(!file_synced_dir_not(without), "the litmus must depend on rule R2");
}

/// tmp written but not synced, renamed over a durable target: some image has an empty or
/// partial target.
fn rename_unsynced_tmp(rules: Rules) -> bool {
    let fs = fs_with_dir(rules);
    let target = fs.open(p("/d/target"), OpenOptions::create(), B).unwrap();
    target.append(b"old contents\n", B).unwrap();
    target.sync_all(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    let new = vec![b'n'; 1500];
    let tmp = fs.open(p("/d/target.tmp"), OpenOptions::create_truncate(), B).unwrap();
    tmp.append(&new, B).unwrap();
    fs.rename(p("/d/target.tmp"), p("/d/target"), B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    power_images(&fs).iter().any(|image| {
        let target = image.file("/d/target").expect("rename is atomic: the target always exists");
        target != b"old contents\n" && target != new.as_slice()
    })
}

#[test]
fn rename_of_unsynced_tmp_can_leave_empty_or_partial_target() {
    assert!(rename_unsynced_tmp(Rules::default()));
    let without = Rules { pending_unordered: false, data_needs_sync: false, ..Rules::default() };
    assert!(!rename_unsynced_tmp(without), "the litmus must depend on rules R1 and R4");
}

/// An append without a sync: some image loses it.
fn append_unsynced(rules: Rules) -> bool {
    let fs = fs_with_dir(rules);
    let file = fs.open(p("/d/log"), OpenOptions::create(), B).unwrap();
    file.append(b"line 1\n", B).unwrap();
    file.sync_data(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    file.append(b"line 2\n", B).unwrap();
    power_images(&fs).iter().any(|image| image.file("/d/log") == Some(b"line 1\n".as_slice()))
}

#[test]
fn append_without_sync_can_be_lost() {
    assert!(append_unsynced(Rules::default()));
    let without = Rules { data_needs_sync: false, ..Rules::default() };
    assert!(!append_unsynced(without), "the litmus must depend on rule R1");
}

/// An unsynced extension can survive as zeros without its data (the size reached the disk, the
/// data did not).
fn extension_as_zeros(rules: Rules) -> bool {
    let fs = fs_with_dir(rules);
    let file = fs.open(p("/d/log"), OpenOptions::create(), B).unwrap();
    file.sync_data(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    file.append(b"abc\n", B).unwrap();
    power_images(&fs).iter().any(|image| image.file("/d/log") == Some(&[0u8; 4][..]))
}

#[test]
fn unsynced_extension_can_survive_as_zeros() {
    assert!(extension_as_zeros(Rules::default()));
    let without = Rules { pending_unordered: false, ..Rules::default() };
    assert!(!extension_as_zeros(without), "the litmus must depend on rule R4");
}

/// The correct sequence (write tmp, fsync it, rename, fsync the directory): every image, under
/// every mode, has the new data.
#[test]
fn tmp_fsync_rename_dirsync_is_durable_in_every_image() {
    let fs = fs_with_dir(Rules::default());
    let target = fs.open(p("/d/target"), OpenOptions::create(), B).unwrap();
    target.append(b"old", B).unwrap();
    target.sync_all(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    let tmp = fs.open(p("/d/target.tmp"), OpenOptions::create_truncate(), B).unwrap();
    tmp.append(&[b'n'; 3000], B).unwrap();
    tmp.sync_all(B).unwrap();
    fs.rename(p("/d/target.tmp"), p("/d/target"), B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    for mode in [CrashMode::ProcessKill, CrashMode::PowerLoss] {
        let crash = fs.crash(mode);
        assert_eq!(crash.images.len(), 1, "nothing is pending, so {mode} has one image");
        for image in &crash.images {
            assert_eq!(image.file("/d/target"), Some(&[b'n'; 3000][..]));
            assert!(!image.contains("/d/target.tmp"));
        }
    }
}

/// A rename is atomic: between a durable tmp and a durable target, every image has either the
/// old binding of both names or the new one, never neither and never both.
fn rename_atomic(rules: Rules) -> bool {
    let fs = fs_with_dir(rules);
    for (name, contents) in [("/d/target", b"old".as_slice()), ("/d/tmp", b"new".as_slice())] {
        let file = fs.open(p(name), OpenOptions::create(), B).unwrap();
        file.append(contents, B).unwrap();
        file.sync_all(B).unwrap();
    }
    fs.sync_dir(p("/d"), B).unwrap();
    fs.rename(p("/d/tmp"), p("/d/target"), B).unwrap();
    power_images(&fs).iter().all(|image| {
        match (image.file("/d/tmp"), image.file("/d/target")) {
            (Some(b"new"), Some(b"old")) => true, // the rename did not survive
            (None, Some(b"new")) => true,         // it did
            _ => false,
        }
    })
}

#[test]
fn rename_is_atomic() {
    assert!(rename_atomic(Rules::default()));
    let without = Rules { rename_atomic: false, ..Rules::default() };
    assert!(!rename_atomic(without), "the litmus must depend on rule R3");
}

/// A process kill keeps every write the kernel accepted, synced or not.
fn kill_keeps_writes(rules: Rules) -> bool {
    let fs = SimFs::with_rules(FaultPlan::none(3), rules);
    fs.create_dir(p("/d"), B).unwrap();
    let file = fs.open(p("/d/log"), OpenOptions::create(), B).unwrap();
    file.append(b"never synced\n", B).unwrap();
    fs.rename(p("/d/log"), p("/d/log2"), B).unwrap();
    let crash = fs.crash(CrashMode::ProcessKill);
    crash.images.len() == 1
        && crash.images[0].file("/d/log2") == Some(b"never synced\n".as_slice())
        && !crash.images[0].contains("/d/log")
}

#[test]
fn process_kill_never_loses_what_was_written() {
    assert!(kill_keeps_writes(Rules::default()));
    let without = Rules { kill_keeps_volatile: false, ..Rules::default() };
    assert!(!kill_keeps_writes(without), "the litmus must depend on the process-kill rule");
}

/// fsyncgate: EIO on fsync drops the dirty data; reads still return it, a second fsync
/// "succeeds", and the data is in no power-loss image.
fn failed_fsync_then_success(rules: Rules) -> bool {
    // Ops: create_dir 0, sync_dir 1, open 2, append 3, sync 4, sync_dir 5, append 6, sync 7 (EIO).
    let fs = SimFs::with_rules(FaultPlan::fault_at(5, 7, Fault::Eio), rules);
    fs.create_dir(p("/d"), B).unwrap();
    fs.sync_dir(p("/"), B).unwrap();
    let file = fs.open(p("/d/log"), OpenOptions::create(), B).unwrap();
    file.append(b"kept\n", B).unwrap();
    file.sync_data(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    file.append(b"dropped\n", B).unwrap();
    let first = file.sync_data(B);
    let error = first.expect_err("the planned fault fails the first fsync");
    assert!(error.to_string().contains("os error 5"), "EIO: {error}");
    file.sync_data(B).expect("the second fsync reports success");
    assert_eq!(file.read_to_end().unwrap(), b"kept\ndropped\n", "reads still see the data");
    power_images(&fs).iter().all(|image| image.file("/d/log") == Some(b"kept\n".as_slice()))
}

#[test]
fn fsync_failure_drops_data_and_a_later_fsync_still_succeeds() {
    assert!(failed_fsync_then_success(Rules::default()));
    let without = Rules { failed_sync_drops: false, ..Rules::default() };
    assert!(!failed_fsync_then_success(without), "the litmus must depend on fsyncgate semantics");
}

/// Two unsynced writes to one chunk: the chunk can survive as old, first or second version.
#[test]
fn chunk_written_twice_can_survive_at_either_version() {
    let fs = fs_with_dir(Rules::default());
    let file = fs.open(p("/d/f"), OpenOptions::create(), B).unwrap();
    file.append(b"0000", B).unwrap();
    file.sync_data(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    file.write_at(0, b"1111", B).unwrap();
    file.write_at(0, b"2222", B).unwrap();
    let contents: std::collections::BTreeSet<Vec<u8>> = power_images(&fs)
        .iter()
        .filter_map(|image| image.file("/d/f").map(<[u8]>::to_vec))
        .collect();
    let expected: std::collections::BTreeSet<Vec<u8>> =
        [b"0000", b"1111", b"2222"].into_iter().map(|bytes| bytes.to_vec()).collect();
    assert_eq!(contents, expected);
}

/// Chunk granularity: an unsynced write spanning three chunks can survive with any subset of
/// its chunks, including a middle chunk alone.
#[test]
fn multi_chunk_write_survives_per_chunk() {
    let fs = fs_with_dir(Rules::default());
    let file = fs.open(p("/d/f"), OpenOptions::create(), B).unwrap();
    file.append(&[b'a'; 1536], B).unwrap();
    file.sync_data(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    file.write_at(0, &[b'b'; 1536], B).unwrap();
    let crash = fs.crash(CrashMode::PowerLoss);
    assert!(crash.exhaustive);
    assert_eq!(crash.pending_pieces, 3);
    assert_eq!(crash.images.len(), 8, "every subset of three chunks");
    let mut middle_only = [b'a'; 1536];
    middle_only[512..1024].fill(b'b');
    assert!(crash.images.iter().any(|image| image.file("/d/f") == Some(&middle_only[..])));
}

/// Beyond the exhaustive limit, the structured families still produce torn writes at chunk,
/// page and byte granularity.
#[test]
fn large_pending_sets_produce_torn_families() {
    let fs = fs_with_dir(Rules::default());
    let file = fs.open(p("/d/log"), OpenOptions::create(), B).unwrap();
    file.sync_data(B).unwrap();
    fs.sync_dir(p("/d"), B).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    file.append(&data, B).unwrap();
    let crash = fs.crash(CrashMode::PowerLoss);
    assert!(!crash.exhaustive);
    assert!(crash.pending_pieces > faultfs::EXHAUSTIVE_PIECES_MAX);
    let lengths_with_prefix: std::collections::BTreeSet<usize> = crash
        .images
        .iter()
        .filter_map(|image| image.file("/d/log"))
        .filter_map(|bytes| {
            // The longest prefix of the write that survived, followed only by zeros.
            let kept = bytes.iter().zip(&data).take_while(|(a, b)| a == b).count();
            (bytes.len() == data.len() && bytes[kept..].iter().all(|&b| b == 0)).then_some(kept)
        })
        .collect();
    for expected in [0, 512, 4096, 8192, 1, 5000, 9999, 10_000] {
        assert!(
            lengths_with_prefix.contains(&expected),
            "no image torn at {expected}: {lengths_with_prefix:?}"
        );
    }
    assert!(
        crash.images.iter().any(|image| image.file("/d/log") == Some(&[][..])),
        "prefix family: nothing"
    );
}

/// Determinism: the same seed and the same calls give the same trace and the same images,
/// including the seeded samples of a large pending set.
#[test]
fn same_seed_gives_same_trace_and_images() {
    fn run(seed: u64) -> (String, Vec<String>, Vec<String>) {
        let fs = SimFs::new(FaultPlan::none(seed));
        fs.create_dir(p("/d"), B).unwrap();
        fs.sync_dir(p("/"), B).unwrap();
        let file = fs.open(p("/d/log"), OpenOptions::create(), B).unwrap();
        for i in 0..40u32 {
            file.append(format!("line {i} {}\n", "x".repeat(i as usize * 7)).as_bytes(), B)
                .unwrap();
            if i < 10 && i % 9 == 0 {
                file.sync_data(B).unwrap();
            }
        }
        fs.rename(p("/d/log"), p("/d/log.old"), B).unwrap();
        let hashes = |mode| fs.crash(mode).images.iter().map(faultfs::Image::hash_hex).collect();
        (fs.trace().hash_hex(), hashes(CrashMode::PowerLoss), hashes(CrashMode::ProcessKill))
    }
    let first = run(11);
    assert_eq!(first, run(11));
    assert!(first.1.len() > 100, "a large pending set gives many images: {}", first.1.len());
    let other = run(12);
    assert_eq!(first.0, other.0, "the trace does not depend on the seed without faults");
    assert_ne!(first.1, other.1, "the seeded samples do");
}

/// Crash at boundary k: op k never runs, every later op fails, and the trace names the point.
#[test]
fn crash_at_boundary_halts_before_the_op() {
    let fs = SimFs::new(FaultPlan::crash_at(9, 2));
    fs.create_dir(p("/d"), Boundary::new("t.mkdir")).unwrap();
    let file = fs.open(p("/d/f"), OpenOptions::create(), Boundary::new("t.create")).unwrap();
    let error = file.append(b"x", Boundary::new("t.append")).unwrap_err();
    assert!(error.is_crash());
    assert_eq!(fs.halted(), Some((Boundary::new("t.append"), 2)));
    assert!(file.sync_data(Boundary::new("t.sync")).unwrap_err().is_crash());
    assert!(fs.read_dir(p("/d")).unwrap_err().is_crash());
    assert_eq!(fs.op_count(), 3, "ops after the crash are not counted");
    let kill = fs.crash(CrashMode::ProcessKill);
    assert_eq!(kill.images[0].file("/d/f"), Some(&[][..]), "the append never ran");
    let trace = fs.trace().to_string();
    assert!(trace.lines().last().unwrap().contains("t.append"), "{trace}");
    assert!(trace.lines().last().unwrap().ends_with("crash"), "{trace}");
}

/// ENOSPC changes nothing; a short write leaves a prefix visible and fails.
#[test]
fn enospc_changes_nothing_and_short_write_leaves_a_prefix() {
    let fs = SimFs::new(FaultPlan::fault_at(4, 2, Fault::Enospc));
    fs.create_dir(p("/d"), B).unwrap();
    let file = fs.open(p("/d/f"), OpenOptions::create(), B).unwrap();
    let error = file.append(b"hello", B).unwrap_err();
    assert!(error.is_no_space(), "{error}");
    assert_eq!(file.read_to_end().unwrap(), b"");

    let data = vec![7u8; 1000];
    let short = (0..64u64)
        .map(|seed| {
            let fs = SimFs::new(FaultPlan::fault_at(seed, 2, Fault::ShortWrite));
            fs.create_dir(p("/d"), B).unwrap();
            let file = fs.open(p("/d/f"), OpenOptions::create(), B).unwrap();
            let error = file.append(&data, B).unwrap_err();
            assert_eq!(error.io_kind(), Some(std::io::ErrorKind::WriteZero));
            let kept = file.read_to_end().unwrap();
            assert!(kept.len() < data.len() && data.starts_with(&kept));
            kept.len()
        })
        .collect::<std::collections::BTreeSet<_>>();
    assert!(short.len() > 32, "short-write lengths derive from the seed: {short:?}");
}

/// An image reboots into a filesystem holding exactly it, all durable.
#[test]
fn image_reboots_into_a_durable_filesystem() {
    let fs = fs_with_dir(Rules::default());
    let file = fs.open(p("/d/f"), OpenOptions::create(), B).unwrap();
    file.append(b"abc", B).unwrap();
    let kill = fs.crash(CrashMode::ProcessKill);
    let rebooted = SimFs::from_image(&kill.images[0], FaultPlan::none(1));
    assert_eq!(rebooted.read(p("/d/f")).unwrap(), b"abc");
    let power = rebooted.crash(CrashMode::PowerLoss);
    assert_eq!(power.images.len(), 1);
    assert_eq!(power.images[0], kill.images[0]);
}

/// Locks: a second open file cannot take a held lock; dropping the holder releases it.
#[test]
fn lock_excludes_other_open_files_until_dropped() {
    let fs = fs_with_dir(Rules::default());
    let first = fs.open(p("/d/lock"), OpenOptions::create_new(), B).unwrap();
    assert!(fs.open(p("/d/lock"), OpenOptions::create_new(), B).is_err(), "O_EXCL");
    let other = fs.as_process(2000);
    let second = other.open(p("/d/lock"), OpenOptions::read_write(), B).unwrap();
    assert!(first.try_lock().unwrap());
    assert!(!second.try_lock().unwrap());
    drop(first);
    assert!(second.try_lock().unwrap());
    assert_eq!(other.process_id(), 2000);
    assert!(fs.process_start_ms(2000).unwrap().is_some());
    fs.kill_process(2000);
    assert_eq!(fs.process_start_ms(2000).unwrap(), None);
}
