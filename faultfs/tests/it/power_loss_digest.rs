//! `SimFs::power_loss_digest`: two machines with equal digests leave the same power-loss images
//! (a harness skips building them again), and what an image holds, or the seeds of a torn
//! write's cuts, changes the digest.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::path::Path;

use faultfs::{Boundary, CrashMode, FaultPlan, File, Fs, OpenOptions, SimFs};

const B: Boundary = Boundary::new("test");

/// A machine with a synced file, an unsynced name (`/d/g`, created, its data synced), and an
/// ephemeral directory `/locks`.
fn setup() -> SimFs {
    let fs = SimFs::new(FaultPlan::none(1));
    fs.create_dir(Path::new("/d"), B).unwrap();
    fs.create_dir(Path::new("/locks"), B).unwrap();
    fs.sync_dir(Path::new("/"), B).unwrap();
    fs.set_ephemeral(&[Path::new("/locks")]);
    let file = fs.open(Path::new("/d/f"), OpenOptions::create_new(), B).unwrap();
    fs.sync_dir(Path::new("/d"), B).unwrap();
    file.append(b"synced\n", B).unwrap();
    file.sync_data(B).unwrap();
    let other = fs.open(Path::new("/d/g"), OpenOptions::create_new(), B).unwrap();
    other.append(b"data synced, name not\n", B).unwrap();
    other.sync_data(B).unwrap();
    fs
}

fn hashes(fs: &SimFs) -> Vec<String> {
    let crash = fs.crash(CrashMode::PowerLoss);
    assert!(crash.exhaustive, "a handful of pieces is enumerated whole");
    crash.images.iter().map(faultfs::Image::hash_hex).collect()
}

/// A lock file taken and released in an ephemeral directory, and a sync with nothing pending,
/// change nothing an image holds: the digest stays, and so do the images, though the machine
/// is further in its history.
#[test]
fn ops_no_image_holds_leave_the_digest_and_the_images() {
    let fs = setup();
    let (digest, images) = (fs.power_loss_digest(), hashes(&fs));
    assert!(images.len() >= 2, "the pending name survives or not: {images:?}");
    let lock = fs.open(Path::new("/locks/s.lock"), OpenOptions::create_new(), B).unwrap();
    lock.append(b"4242\n", B).unwrap();
    drop(lock);
    fs.remove_file(Path::new("/locks/s.lock"), B).unwrap();
    let synced = fs.open(Path::new("/d/f"), OpenOptions::read_write(), B).unwrap();
    synced.sync_data(B).unwrap();
    assert_eq!(fs.power_loss_digest(), digest);
    assert_eq!(hashes(&fs), images);
}

/// What an image can hold changes the digest: a name made durable, bytes written.
#[test]
fn a_change_an_image_holds_changes_the_digest() {
    let fs = setup();
    let before = fs.power_loss_digest();
    fs.sync_dir(Path::new("/d"), B).unwrap();
    let synced = fs.power_loss_digest();
    assert_ne!(synced, before, "the name became durable");
    let file = fs.open(Path::new("/d/f"), OpenOptions::read_write(), B).unwrap();
    file.append(b"unsynced\n", B).unwrap();
    assert_ne!(fs.power_loss_digest(), synced, "bytes pending");
}

/// While a write an image can hold is pending, its torn cuts are seeded with the op count:
/// an op no image holds then changes the digest (and may change the images).
#[test]
fn a_pending_write_ties_the_digest_to_the_op_count() {
    let fs = setup();
    let file = fs.open(Path::new("/d/f"), OpenOptions::read_write(), B).unwrap();
    file.append(b"a line long enough to be torn at several places\n", B).unwrap();
    let before = fs.power_loss_digest();
    let lock = fs.open(Path::new("/locks/s.lock"), OpenOptions::create_new(), B).unwrap();
    lock.append(b"4242\n", B).unwrap();
    assert_ne!(fs.power_loss_digest(), before);
}
