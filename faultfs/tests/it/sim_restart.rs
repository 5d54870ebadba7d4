//! A kill is not a sync: after `SimFs::restart`, what the killed process wrote is visible to the
//! next one but still pending, so a later power loss may drop it; what the next process syncs
//! (including, through a sync of the same file, the killed one's bytes) survives.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use std::path::Path;

use faultfs::{Boundary, CrashMode, FaultPlan, File, Fs, OpenOptions, SimFs};

const B: Boundary = Boundary::new("test");

fn setup() -> SimFs {
    let fs = SimFs::new(FaultPlan::none(1));
    fs.create_dir(Path::new("/d"), B).unwrap();
    fs.sync_dir(Path::new("/"), B).unwrap();
    let file = fs.open(Path::new("/d/f"), OpenOptions::create_new(), B).unwrap();
    fs.sync_dir(Path::new("/d"), B).unwrap();
    file.append(b"synced\n", B).unwrap();
    file.sync_data(B).unwrap();
    file.append(b"unsynced\n", B).unwrap();
    fs
}

fn contents(image: &faultfs::Image) -> Vec<u8> {
    image.file("/d/f").unwrap_or_default().to_vec()
}

#[test]
fn a_killed_process_s_writes_stay_pending_after_the_restart() {
    let fs = setup();
    let restarted = fs.restart(FaultPlan::none(1));
    assert_eq!(restarted.read(Path::new("/d/f")).unwrap(), b"synced\nunsynced\n", "visible");
    assert!(restarted.pending_pieces() > 0, "still pending");
    let images = restarted.crash(CrashMode::PowerLoss).images;
    assert!(images.iter().any(|image| contents(image) == b"synced\n"), "a power loss may drop it");
    assert!(images.iter().all(|image| contents(image).starts_with(b"synced\n")), "synced stays");
}

#[test]
fn the_next_process_s_sync_makes_the_killed_one_s_bytes_durable() {
    let restarted = setup().restart(FaultPlan::none(1));
    let file = restarted.open(Path::new("/d/f"), OpenOptions::read_write(), B).unwrap();
    file.sync_data(B).unwrap();
    let images = restarted.crash(CrashMode::PowerLoss).images;
    assert!(images.iter().all(|image| contents(image) == b"synced\nunsynced\n"));
}

#[test]
fn a_restart_is_a_separate_machine_with_a_new_process() {
    let fs = setup();
    let first = fs.restart(FaultPlan::none(1));
    let second = fs.restart(FaultPlan::none(1));
    first.remove_file(Path::new("/d/f"), B).unwrap();
    assert!(second.exists(Path::new("/d/f")).unwrap(), "restarts are copies");
    assert_ne!(first.process_id(), fs.process_id());
    assert_eq!(first.process_start_ms(fs.process_id()).unwrap(), None, "the killed one is dead");
    assert_ne!(first.machine_id(), second.machine_id());
    assert_eq!(first.boot(), 1);
}
