//! Litmus tests of the `SimFs` crash model: each is a classic crash bug (or its correct fix) that
//! the model must expose (or must not). Each litmus is also run under a model with its rule
//! switched off, and must then fail: a crash model whose litmus tests pass without the rule they
//! test would prove nothing.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::collections::BTreeSet;
use std::path::Path;

use faultfs::{
    Boundary, CrashMode, Fault, FaultPlan, File, Fs, Observed, OpenOptions, Rules, SimFs,
};

const B: Boundary = Boundary::new("litmus");

fn p(path: &str) -> &Path {
    Path::new(path)
}

/// Every litmus of the crash model holds under the model, and fails with its rule switched off.
#[test]
fn every_litmus_holds_and_fails_without_its_rule() {
    for litmus in faultfs::litmus::ALL {
        let with = (litmus.run)(Rules::default()).unwrap();
        assert!(with.holds, "{}: {} ({with:?})", litmus.name, litmus.expectation);
        assert!(with.images > 0 && with.witnesses > 0, "{}: {with:?}", litmus.name);
        let without = (litmus.run)(litmus.without).unwrap();
        assert!(
            !without.holds,
            "{}: must fail without rule {} ({without:?})",
            litmus.name, litmus.rule
        );
    }
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

/// Two unsynced writes to one chunk: the chunk can survive as old, first or second version,
/// and (the torn family, beyond the model's whole sectors) each write cut inside it over the
/// version before.
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
        [b"0000", b"1111", b"2222", b"1000", b"1100", b"1110", b"2111", b"2211", b"2221"]
            .into_iter()
            .map(|bytes| bytes.to_vec())
            .collect();
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
    let whole_chunks = crash
        .images
        .iter()
        .filter_map(|image| image.file("/d/f"))
        .filter(|bytes| bytes.chunks(512).all(|chunk| chunk.iter().all(|&b| b == chunk[0])))
        .count();
    assert_eq!(whole_chunks, 8, "every subset of three chunks");
    assert_eq!(crash.images.len(), 8 + 5, "and the write torn inside a chunk, 5 ways");
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

/// A machine rebuilt from an image knows which of the image's files some read reached, until
/// its whole state is handed out; two images that differ only in the bytes of a file no read
/// reached have the same digest within what was read, and differ once the file was read or
/// its length differs.
#[test]
fn a_rebuilt_machine_knows_which_files_it_read() {
    let image_with = |unread: &[u8]| {
        let fs = fs_with_dir(Rules::default());
        for (path, bytes) in [("/d/read", &b"read me"[..]), ("/d/unread", unread)] {
            fs.open(p(path), OpenOptions::create(), B).unwrap().append(bytes, B).unwrap();
        }
        fs.crash(CrashMode::ProcessKill).images.remove(0)
    };
    let (a, b, longer) = (image_with(b"one"), image_with(b"two"), image_with(b"three"));
    let machine = SimFs::from_image(&a, FaultPlan::none(1));
    assert_eq!(machine.observed(), Observed::Files(Default::default()));
    assert_eq!(machine.read(p("/d/read")).unwrap(), b"read me");
    let Observed::Files(read) = machine.observed() else { panic!("nothing was handed out") };
    assert_eq!(read, ["/d/read".to_owned()].into());
    assert_eq!(a.digest_within(&read), b.digest_within(&read), "only unread bytes differ");
    assert_ne!(a.digest_within(&read), longer.digest_within(&read), "a length is observable");
    let both = ["/d/read".to_owned(), "/d/unread".to_owned()].into();
    assert_ne!(a.digest_within(&both), b.digest_within(&both), "read bytes are observable");
    let _ = machine.crash(CrashMode::PowerLoss);
    assert_eq!(machine.observed(), Observed::Everything);
}

/// Two machines with the same visible digest are alike to every op: the digest sees the bytes
/// and modification time of every file, and which names share a file; it does not see what is
/// pending rather than durable. The files a mark's reads reached are named as at the mark, and
/// counting them read on a machine alike makes its observation what the reads would have made.
#[test]
fn a_visible_digest_tells_apart_what_an_op_can_and_a_mark_names_the_files_read() {
    let machine = |linked: bool, synced: bool| {
        let fs = fs_with_dir(Rules::default());
        fs.open(p("/d/a"), OpenOptions::create(), B).unwrap().append(b"bytes", B).unwrap();
        if linked {
            fs.hard_link(p("/d/a"), p("/d/b"), B).unwrap();
        } else {
            fs.open(p("/d/b"), OpenOptions::create(), B).unwrap().append(b"bytes", B).unwrap();
        }
        if synced {
            fs.open(p("/d/a"), OpenOptions::read(), B).unwrap().sync_data(B).unwrap();
        }
        fs
    };
    // The same ops, one machine with its data synced: a sync moves the clock like any
    // mutating op, so the syncing machine is compared with one that made another op instead.
    let (plain, synced) = (machine(false, false), machine(false, true));
    assert_ne!(plain.visible_digest(), synced.visible_digest(), "a sync moves the clock");
    plain.open(p("/d/a"), OpenOptions::read(), B).unwrap().sync_data(B).unwrap();
    assert_eq!(plain.visible_digest(), synced.visible_digest(), "durability is not visible");
    let (linked, separate) = (machine(true, false), machine(false, false));
    assert_ne!(linked.visible_digest(), separate.visible_digest(), "shared names are visible");
    plain.open(p("/d/a"), OpenOptions::read_write(), B).unwrap().write_at(0, b"B", B).unwrap();
    assert_ne!(plain.visible_digest(), synced.visible_digest(), "bytes are visible");

    let image = synced.crash(CrashMode::ProcessKill).images.remove(0);
    let (ran, alike) = (
        SimFs::from_image(&image, FaultPlan::none(1)),
        SimFs::from_image(&image, FaultPlan::none(1)),
    );
    assert_eq!(ran.visible_digest(), alike.visible_digest());
    let mark = ran.mark_reads();
    assert_eq!(ran.read(p("/d/b")).unwrap(), b"bytes");
    ran.rename(p("/d/a"), p("/d/c"), B).unwrap();
    assert_eq!(ran.read(p("/d/c")).unwrap(), b"bytes", "read under a name it took later");
    let read = ran.read_since(&mark);
    assert_eq!(read, ["/d/a".to_owned(), "/d/b".to_owned()].into(), "named as at the mark");
    alike.note_read(&read);
    assert_eq!(alike.observed(), ran.observed());
}

/// What a machine rebuilt from an image has read, and what each path names after ops that
/// renamed its files, say what it observes after more reads, the machine gone.
#[test]
fn reads_say_what_more_reads_would_observe() {
    let fs = fs_with_dir(Rules::default());
    for (path, bytes) in [("/d/a", b"aa"), ("/d/b", b"bb"), ("/d/e", b"ee")] {
        fs.open(p(path), OpenOptions::create(), B).unwrap().append(bytes, B).unwrap();
    }
    let image = fs.crash(CrashMode::ProcessKill).images.remove(0);
    let ran = SimFs::from_image(&image, FaultPlan::none(1));
    assert_eq!(ran.read(p("/d/b")).unwrap(), b"bb");
    ran.rename(p("/d/a"), p("/d/c"), B).unwrap();
    let reads = ran.reads();
    assert_eq!(reads.observed_with(&BTreeSet::new()), ran.observed(), "what was read so far");
    let mark = ran.mark_reads();
    assert_eq!(ran.read(p("/d/c")).unwrap(), b"aa", "an image file under its new name");
    let read = ran.read_since(&mark);
    assert_eq!(read, ["/d/c".to_owned()].into());
    let expected = Observed::Files(["/d/a".to_owned(), "/d/b".to_owned()].into());
    assert_eq!(ran.observed(), expected, "named as in the image; /d/e unread");
    assert_eq!(reads.observed_with(&read), expected);
}

/// The content digest is the visible digest without the times: the same files written by
/// more ops (a later clock, later modification times) digest alike, while bytes, names, which
/// names share a file and the process looking still tell machines apart.
#[test]
fn a_content_digest_leaves_out_the_times_alone() {
    let machine = |detour: bool| {
        let fs = fs_with_dir(Rules::default());
        if detour {
            // More ops to the same files: a file made and removed, a write made twice.
            fs.open(p("/d/tmp"), OpenOptions::create(), B).unwrap().append(b"x", B).unwrap();
            fs.remove_file(p("/d/tmp"), B).unwrap();
            fs.open(p("/d/a"), OpenOptions::create(), B).unwrap().append(b"bytes", B).unwrap();
            fs.open(p("/d/a"), OpenOptions::read_write(), B).unwrap().write_at(0, b"b", B).unwrap();
        } else {
            fs.open(p("/d/a"), OpenOptions::create(), B).unwrap().append(b"bytes", B).unwrap();
        }
        fs
    };
    let (direct, detour) = (machine(false), machine(true));
    assert_ne!(direct.visible_digest(), detour.visible_digest(), "the times differ");
    assert_eq!(direct.content_digest(), detour.content_digest(), "the files do not");
    let restarted = detour.restart(FaultPlan::none(1));
    assert_ne!(restarted.content_digest(), detour.content_digest(), "another process looks");
    detour.hard_link(p("/d/a"), p("/d/b"), B).unwrap();
    direct.open(p("/d/b"), OpenOptions::create(), B).unwrap().append(b"bytes", B).unwrap();
    assert_ne!(direct.content_digest(), detour.content_digest(), "shared names show");
    let plain = machine(false);
    plain.open(p("/d/a"), OpenOptions::read_write(), B).unwrap().write_at(0, b"B", B).unwrap();
    assert_ne!(plain.content_digest(), machine(false).content_digest(), "bytes show");
}

/// A directory made in `/s` without syncing `/s`, then renamed into `/c` and the rename synced
/// through `/c`: a later sync of `/s` cannot make the creation durable after the rename and bring
/// the name back. No image holds the directory under both names, or under `/s` at all once both
/// directories are synced.
#[test]
fn a_name_renamed_away_is_not_brought_back_by_its_creation() {
    let fs = SimFs::new(FaultPlan::none(1));
    for dir in ["/s", "/c"] {
        fs.create_dir(p(dir), B).unwrap();
    }
    fs.sync_dir(p("/"), B).unwrap();
    fs.create_dir(p("/s/b"), B).unwrap();
    fs.rename(p("/s/b"), p("/c/b"), B).unwrap();
    fs.sync_dir(p("/c"), B).unwrap();
    fs.sync_dir(p("/s"), B).unwrap();
    let images = power_images(&fs);
    assert_eq!(images.len(), 1, "everything is durable: one image");
    let paths: Vec<&String> = images[0].nodes().keys().collect();
    assert_eq!(paths, ["/c", "/c/b", "/s"], "the name moved, once");
}

/// The reduction of all-zero chunks past a file's durable end is sound: a power loss yields
/// the same set of images with it and without it (every subset enumerated both ways), from
/// fewer pieces. The case has each kind of chunk it must tell apart: zeros past the durable end
/// of a new file (left out), zeros over durable bytes (kept), zeros over an earlier unsynced
/// write to the same chunk (kept), and non-zero chunks (kept), with the rename that publishes
/// the new file pending too.
#[test]
fn leaving_out_zero_chunks_past_the_durable_end_loses_no_image() {
    let images = |reduce: bool| {
        let fs = fs_with_dir(Rules::default());
        fs.set_zero_chunk_reduction(reduce);
        let old = fs.open(p("/d/old"), OpenOptions::create(), B).unwrap();
        old.append(&[b'o'; 1024], B).unwrap();
        old.sync_data(B).unwrap();
        fs.sync_dir(p("/d"), B).unwrap();
        old.write_at(0, &[0; 512], B).unwrap();
        let new = fs.open(p("/d/new.tmp"), OpenOptions::create(), B).unwrap();
        let mut block = vec![0u8; 2048];
        block[..40].fill(b'h');
        block[1600..1640].fill(b'r');
        new.append(&block, B).unwrap();
        new.write_at(1024, &[b'x'; 16], B).unwrap();
        new.write_at(1024, &[0; 16], B).unwrap();
        fs.rename(p("/d/new.tmp"), p("/d/new"), B).unwrap();
        fs.crash(CrashMode::PowerLoss)
    };
    let (reduced, full) = (images(true), images(false));
    assert!(reduced.exhaustive && full.exhaustive, "both enumerate every subset");
    assert_eq!(full.reduced_pieces, 0);
    // The new file's second and third chunks as first written (zeros, nothing before them) are
    // indistinguishable; the zeros that later cover the third chunk's `x` are not, nor are the
    // zeros over the old file's durable bytes.
    assert_eq!(reduced.reduced_pieces, 2, "{reduced:?}");
    assert_eq!(reduced.pending_pieces + 2, full.pending_pieces);
    let hashes = |crash: &faultfs::CrashImages| -> std::collections::BTreeSet<String> {
        crash.images.iter().map(faultfs::Image::hash_hex).collect()
    };
    assert_eq!(hashes(&reduced), hashes(&full), "the same images either way");
}

/// What the reduction is for: an 8 KiB index written whole to a new staging file and renamed
/// (a header chunk, a data chunk and a checksum chunk, zeros between) is 16 chunks and a length,
/// too many to enumerate, so its images are sampled; with the zero chunks left out, every image
/// is enumerated, and each image of whole chunks the sampled enumeration found is among them
/// (its torn families also cut writes inside a chunk, which the enumeration, sector by sector,
/// does not).
#[test]
fn zero_chunks_left_out_turn_a_sampled_index_write_exhaustive() {
    let mut bytes = vec![0u8; 8192];
    bytes[..152].fill(b'h');
    bytes[4096..4300].fill(b'r');
    bytes[8136..8152].fill(b'c');
    let crash = |reduce: bool| {
        let fs = fs_with_dir(Rules::default());
        fs.set_zero_chunk_reduction(reduce);
        let index = fs.open(p("/d/index.tmp"), OpenOptions::create(), B).unwrap();
        index.write_at(0, &bytes, B).unwrap();
        fs.rename(p("/d/index.tmp"), p("/d/index"), B).unwrap();
        fs.crash(CrashMode::PowerLoss)
    };
    let (reduced, full) = (crash(true), crash(false));
    assert!(!full.exhaustive, "17 pieces of one file are sampled: {full:?}");
    assert!(reduced.exhaustive, "3 pieces of one file are enumerated: {reduced:?}");
    assert_eq!(reduced.reduced_pieces, 13);
    let every: std::collections::BTreeSet<String> =
        reduced.images.iter().map(faultfs::Image::hash_hex).collect();
    let whole_chunks = |image: &faultfs::Image| {
        let file = image.file("/d/index").or_else(|| image.file("/d/index.tmp")).unwrap_or(&[]);
        file.chunks(512)
            .zip(bytes.chunks(512))
            .all(|(got, written)| got.iter().all(|&byte| byte == 0) || got == &written[..got.len()])
    };
    let sampled: Vec<&faultfs::Image> =
        full.images.iter().filter(|image| whole_chunks(image)).collect();
    assert!(sampled.len() > 10, "the sampled enumeration has images of whole chunks");
    for image in sampled {
        assert!(every.contains(&image.hash_hex()), "a sampled image the enumeration lacks");
    }
}

/// A toy checked-block format: 1 KiB blocks (two chunks), each ending in a check byte over the
/// rest, so zeros, stale bytes and most mixes of two versions are refused.
const TOY_BLOCK: usize = 1024;

fn toy_accepts(_: u64, bytes: &[u8]) -> bool {
    let Some((check, rest)) = bytes.split_last() else { return false };
    bytes.len() == TOY_BLOCK && *check == toy_check(rest)
}

fn toy_check(bytes: &[u8]) -> u8 {
    let sum = bytes
        .iter()
        .enumerate()
        .fold(7u64, |sum, (i, &b)| sum.wrapping_mul(31).wrapping_add(i as u64 ^ u64::from(b)));
    u8::try_from(sum % 251).unwrap() + 1
}

/// Two blocks of the toy format, every byte depending on `version`.
fn toy_file(version: u8) -> Vec<u8> {
    let mut bytes = Vec::new();
    for block in 0..2u8 {
        let mut content: Vec<u8> = (0..TOY_BLOCK - 1)
            .map(|i| (i as u8).wrapping_mul(version).wrapping_add(block))
            .collect();
        content.push(toy_check(&content));
        bytes.extend(content);
    }
    bytes
}

const TOY: faultfs::CheckedBlocks = faultfs::CheckedBlocks {
    names: &["index", "index.tmp"],
    block_bytes: TOY_BLOCK as u64,
    accepts: toy_accepts,
};

/// What a reader of the toy format can tell of an image: every path and its bytes, except
/// that a toy file's blocks the reader refuses are all alike.
fn toy_class(image: &faultfs::Image) -> String {
    let mut class = String::new();
    for (path, node) in image.nodes() {
        class.push_str(path);
        match (node, path.rsplit('/').next()) {
            (faultfs::ImageNode::File(bytes), Some("index" | "index.tmp")) => {
                class.push_str(&format!(" {} bytes:", bytes.len()));
                for (block, bytes) in bytes.chunks(TOY_BLOCK).enumerate() {
                    let accepted = toy_accepts(block as u64, bytes);
                    class.push_str(&if accepted {
                        format!(" {bytes:?}")
                    } else {
                        " refused".into()
                    });
                }
            }
            (node, _) => class.push_str(&format!(" {node:?}")),
        }
        class.push('\n');
    }
    class
}

/// The checked-block reduction is sound: a staging file of the toy format, durable at one
/// version, truncated and rewritten whole, its second block written again, then renamed over
/// the published name, is 12 pieces; every subset enumerated gives images whose classes (what the
/// reader tells apart) are exactly those of the images enumerated block by block (a quarter
/// of them at most), on either medium. A block may survive as any of its versions, mixed with
/// the other block at another: those are kept apart.
#[test]
fn checked_blocks_keep_one_image_per_class_the_reader_tells_apart() {
    for media in [faultfs::Media::ZeroTails, faultfs::Media::StaleTails] {
        let crash = |by_block: bool| {
            let fs = fs_with_dir(Rules::default());
            fs.set_media(media);
            fs.set_checked_blocks(by_block.then_some(TOY));
            let staging = fs.open(p("/d/index.tmp"), OpenOptions::create(), B).unwrap();
            staging.write_at(0, &toy_file(1), B).unwrap();
            staging.sync_data(B).unwrap();
            fs.sync_dir(p("/d"), B).unwrap();
            staging.set_len(0, B).unwrap();
            staging.write_at(0, &toy_file(2), B).unwrap();
            staging.write_at(TOY_BLOCK as u64, &toy_file(3)[TOY_BLOCK..], B).unwrap();
            fs.rename(p("/d/index.tmp"), p("/d/index"), B).unwrap();
            fs.crash(CrashMode::PowerLoss)
        };
        let (by_block, every) = (crash(true), crash(false));
        let counts = |crash: &faultfs::CrashImages| {
            (crash.exhaustive, crash.checked_groups, crash.pending_pieces, crash.images.len())
        };
        assert!(every.exhaustive && every.checked_groups == 0, "{media:?}: {:?}", counts(&every));
        assert!(by_block.exhaustive && by_block.checked_groups == 1, "{:?}", counts(&by_block));
        // The truncation (a length and its 4 chunks), the rewrite (4 chunks and a length), the
        // second block written again (2 chunks), and the rename.
        assert_eq!(every.pending_pieces, 13, "{media:?}");
        let classes = |crash: &faultfs::CrashImages| -> Vec<String> {
            crash.images.iter().map(toy_class).collect()
        };
        let (kept, all) = (classes(&by_block), classes(&every));
        let kept_set: std::collections::BTreeSet<&String> = kept.iter().collect();
        let all_set: std::collections::BTreeSet<&String> = all.iter().collect();
        assert_eq!(kept_set, all_set, "{media:?}: the same classes either way");
        assert!(
            by_block.images.len() * 4 < every.images.len(),
            "{media:?}: {} images stand for {}",
            by_block.images.len(),
            every.images.len()
        );
        // A block of the first version beside one of the third: both accepted, kept apart.
        let (first, third) = (toy_file(1), toy_file(3));
        let mixed = by_block.images.iter().any(|image| {
            image.file("/d/index").is_some_and(|bytes| {
                bytes.get(..TOY_BLOCK) == first.get(..TOY_BLOCK)
                    && bytes.get(TOY_BLOCK..) == third.get(TOY_BLOCK..)
            })
        });
        assert!(mixed, "{media:?}: the blocks of two versions mixed");
    }
}

/// A program of every kind of op: a file made, written, synced, locked, renamed over another,
/// linked, cut, and removed, directories made and synced. Stops at the first error (a crash).
fn program(fs: &SimFs) -> faultfs::Result<()> {
    let file = fs.open(p("/d/a"), OpenOptions::create_new(), B)?;
    assert!(file.try_lock()?, "nothing else holds the lock");
    file.append(b"first line\n", B)?;
    file.sync_data(B)?;
    file.append(b"second, torn-able line\n", B)?;
    fs.create_dir(p("/d/sub"), B)?;
    fs.sync_dir(p("/d"), B)?;
    let staged = fs.open(p("/d/sub/tmp"), OpenOptions::create_new(), B)?;
    staged.append(b"staged", B)?;
    staged.sync_all(B)?;
    fs.rename(p("/d/sub/tmp"), p("/d/a"), B)?;
    fs.hard_link(p("/d/a"), p("/d/b"), B)?;
    fs.open(p("/d/b"), OpenOptions::read_write(), B)?.set_len(3, B)?;
    fs.remove_file(p("/d/b"), B)?;
    fs.sync_dir(p("/d/sub"), B)?;
    Ok(())
}

/// The machines a run keeps of its crash at each op (`SimFs::keep_crashes`) are those the run
/// crashed at that op leaves once its handles close: halted at the same op, with the same
/// trace, what every process sees, what a power loss leaves, and a restart alike.
#[test]
fn a_crash_kept_at_each_op_is_the_run_crashed_there() {
    let whole = fs_with_dir(Rules::default());
    let start = whole.op_count();
    whole.keep_crashes();
    program(&whole).unwrap();
    let kept = whole.kept_crashes();
    assert_eq!(kept.len() as u64, whole.op_count() - start, "one machine per op");
    assert!(whole.kept_crashes().is_empty(), "keeping stopped");
    for (kept, j) in kept.iter().zip(start..) {
        let replayed = SimFs::with_rules(FaultPlan::crash_at(1, j), Rules::default());
        replayed.create_dir(p("/d"), B).unwrap();
        replayed.sync_dir(p("/"), B).unwrap();
        assert!(program(&replayed).is_err(), "the replay crashes at op {j}");
        assert_eq!(kept.halted(), replayed.halted(), "op {j}");
        assert_eq!(kept.plan(), replayed.plan(), "op {j}");
        assert_eq!(kept.trace().hash_hex(), replayed.trace().hash_hex(), "op {j}");
        assert_eq!(kept.visible_digest(), replayed.visible_digest(), "op {j}");
        assert_eq!(kept.power_loss_digest(), replayed.power_loss_digest(), "op {j}");
        let images = |fs: &SimFs| -> Vec<String> {
            fs.crash(CrashMode::PowerLoss).images.iter().map(faultfs::Image::hash_hex).collect()
        };
        assert_eq!(images(kept), images(&replayed), "op {j}");
        let (a, b) = (kept.restart(FaultPlan::none(1)), replayed.restart(FaultPlan::none(1)));
        assert_eq!(a.visible_digest(), b.visible_digest(), "op {j}");
    }
}

/// A crash sifted by what the caller knows asks about each distinct image once, in the order
/// `crash` lists them, and builds exactly the ones not known, numbered as `crash` numbers them;
/// what it counts of the enumeration is what `crash` counts. Under unordered pending changes
/// (subsets of groups, torn writes) and ordered ones (prefixes) alike.
#[test]
fn a_sifted_crash_builds_the_images_not_known_where_the_crash_numbers_them() {
    for rules in [Rules::default(), Rules { pending_unordered: false, ..Rules::default() }] {
        let fs = fs_with_dir(rules);
        for (name, bytes) in [("/d/a", &b"first"[..]), ("/d/b", b"second"), ("/d/c", b"third")] {
            let file = fs.open(p(name), OpenOptions::create(), B).unwrap();
            file.append(bytes, B).unwrap();
            file.sync_data(B).unwrap();
            file.append(&[b'x'; 9000], B).unwrap();
        }
        fs.rename(p("/d/c"), p("/d/e"), B).unwrap();
        let full = fs.crash(CrashMode::PowerLoss);
        assert!(full.images.len() >= 6, "{rules:?}: enough images to sift ({})", full.images.len());
        for keep in [0, 1, 2] {
            // Known: every image whose number is `keep` modulo 3 is built.
            let mut asked = Vec::new();
            let sifted = fs.crash_sifted(CrashMode::PowerLoss, &mut |hash| {
                asked.push(*hash);
                (asked.len() - 1) % 3 != keep
            });
            let hashes: Vec<_> = full.images.iter().map(faultfs::Image::hash).collect();
            assert_eq!(asked, hashes, "{rules:?}: each distinct image asked about once, in order");
            assert_eq!(sifted.distinct, full.images.len(), "{rules:?}");
            let expected: Vec<usize> = (0..full.images.len()).filter(|i| i % 3 == keep).collect();
            assert_eq!(sifted.positions, expected, "{rules:?}: the images not known, numbered");
            for (&at, image) in sifted.positions.iter().zip(&sifted.crash.images) {
                let whole = &full.images[at];
                assert!(image == whole, "{rules:?}: image {at} is built as the crash builds it");
                assert_eq!((image.boot(), image.media()), (whole.boot(), whole.media()));
            }
            let counts = |crash: &faultfs::CrashImages| {
                (crash.generated, crash.exhaustive, crash.pending_pieces, crash.reduced_pieces)
            };
            assert_eq!(counts(&sifted.crash), counts(&full), "{rules:?}: the same enumeration");
        }
    }
}

/// Every image a power loss leaves is identified as the same tree read back: the image a kill
/// leaves of a machine rebuilt from it (everything it holds, hashed from scratch) has its hash.
/// The images of one crash are hashed from the durable state and the pieces each keeps (a
/// directory's or file's durable version where no piece changes it): a hash that missed a
/// change would give an image another's hash.
#[test]
fn an_image_hashes_as_the_tree_rebuilt_from_it() {
    let fs = fs_with_dir(Rules::default());
    fs.create_dir(p("/d/sub"), B).unwrap();
    fs.create_dir(p("/fixed"), B).unwrap();
    fs.create_dir(p("/g"), B).unwrap();
    let synced =
        [("/fixed/x", &b"still"[..]), ("/d/sub/a", b"first"), ("/d/b", b"b"), ("/g/y", b"y")];
    for (name, bytes) in synced {
        let file = fs.open(p(name), OpenOptions::create(), B).unwrap();
        file.append(bytes, B).unwrap();
        file.sync_data(B).unwrap();
    }
    for dir in ["/", "/d", "/d/sub", "/fixed", "/g"] {
        fs.sync_dir(p(dir), B).unwrap();
    }
    // Pending: a write under /d/sub, a new name in /d, a rename out of /d/sub, a rename in /g
    // (whose files are all durable).
    fs.rename(p("/g/y"), p("/g/z"), B).unwrap();
    fs.open(p("/d/sub/a"), OpenOptions::read_write(), B).unwrap().append(b" more", B).unwrap();
    fs.open(p("/d/c"), OpenOptions::create(), B).unwrap().append(b"new", B).unwrap();
    fs.rename(p("/d/b"), p("/d/sub/b"), B).unwrap();
    let images = power_images(&fs);
    assert!(images.len() > 4, "the pending changes leave several images: {}", images.len());
    for image in &images {
        let rebuilt = SimFs::from_image(image, FaultPlan::none(1));
        let again = rebuilt.crash(CrashMode::ProcessKill).images.remove(0);
        assert!(again == *image, "{image:?} is read back as {again:?}");
        assert_eq!(again.hash(), image.hash(), "{image:?}");
    }
}
