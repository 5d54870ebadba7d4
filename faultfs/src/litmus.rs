//! Litmus scenarios of the crash model: each is a classic crash bug (or its correct fix) that the
//! model must expose (or must not). Each names the rule it depends on; run under [`Rules`] with
//! that rule switched off, the litmus must fail, which proves the model and its test can catch
//! the bug rather than pass by construction.
//!
//! The test suite runs every litmus both ways; `spex demo` prints them as a table.

use std::path::Path;

use crate::{
    Boundary, CrashMode, Fault, FaultPlan, File, Fs, Image, OpenOptions, Result, Rules, SimFs,
};

const B: Boundary = Boundary::new("litmus");

/// One litmus scenario.
#[derive(Clone, Copy, Debug)]
pub struct Litmus {
    /// A short stable name.
    pub name: &'static str,
    /// What the scenario does.
    pub scenario: &'static str,
    /// What must hold of the crash images.
    pub expectation: &'static str,
    /// The model without the rule this litmus depends on.
    pub without: Rules,
    /// The rule, as named in DESIGN.md.
    pub rule: &'static str,
    /// Runs the scenario under `rules`.
    pub run: fn(Rules) -> Result<Outcome>,
}

/// What a litmus observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Distinct crash images examined.
    pub images: usize,
    /// Images that witness the expectation (for "some image ..." litmuses) or that satisfy it
    /// (for "every image ..." ones).
    pub witnesses: usize,
    /// Whether the expectation holds.
    pub holds: bool,
}

impl Outcome {
    fn some(images: &[Image], witness: impl Fn(&Image) -> bool) -> Outcome {
        assert!(!images.is_empty(), "a crash leaves at least one machine to look for a witness in");
        let witnesses = images.iter().filter(|image| witness(image)).count();
        Outcome { images: images.len(), witnesses, holds: witnesses > 0 }
    }

    fn every(images: &[Image], holds: impl Fn(&Image) -> bool) -> Outcome {
        let witnesses = images.iter().filter(|image| holds(image)).count();
        assert!(!images.is_empty(), "a crash leaves at least one machine to judge");
        Outcome { images: images.len(), witnesses, holds: witnesses == images.len() }
    }
}

/// Every litmus, in a stable order.
pub const ALL: [Litmus; 8] = [
    Litmus {
        name: "file-synced-dir-not",
        scenario: "create a file, append, fsync the file but not its directory",
        expectation: "some power-loss image lacks the file",
        without: Rules { names_need_dir_sync: false, ..RULES },
        rule: "R2",
        run: file_synced_dir_not,
    },
    Litmus {
        name: "rename-unsynced-tmp",
        scenario: "write a tmp file without fsync, rename it over a durable target, fsync the dir",
        expectation: "some power-loss image has an empty or partial target",
        without: Rules { data_needs_sync: false, pending_unordered: false, ..RULES },
        rule: "R1+R4",
        run: rename_unsynced_tmp,
    },
    Litmus {
        name: "append-unsynced",
        scenario: "append a line after a synced one, without fsync",
        expectation: "some power-loss image loses the second line",
        without: Rules { data_needs_sync: false, ..RULES },
        rule: "R1",
        run: append_unsynced,
    },
    Litmus {
        name: "extension-as-zeros",
        scenario: "append to a durable empty file without fsync",
        expectation: "some power-loss image has the new length filled with zeros",
        without: Rules { pending_unordered: false, ..RULES },
        rule: "R4",
        run: extension_as_zeros,
    },
    Litmus {
        name: "tmp-fsync-rename-dirsync",
        scenario: "write tmp, fsync it, rename over the target, fsync the dir; then append unsynced elsewhere",
        expectation: "every power-loss image has the new target contents",
        without: Rules { sync_makes_durable: false, ..RULES },
        rule: "R1+R2 barriers (a sync makes durable)",
        run: tmp_fsync_rename_dirsync,
    },
    Litmus {
        name: "rename-atomic",
        scenario: "rename a durable tmp over a durable target, unsynced",
        expectation: "every power-loss image has both names as before or both as after",
        without: Rules { rename_atomic: false, ..RULES },
        rule: "R3",
        run: rename_atomic,
    },
    Litmus {
        name: "kill-keeps-writes",
        scenario: "append without fsync and rename without dir fsync, then kill the process",
        expectation: "the process-kill image has every write and the rename",
        without: Rules { kill_keeps_volatile: false, ..RULES },
        rule: "R5 (kill keeps what the kernel accepted)",
        run: kill_keeps_writes,
    },
    Litmus {
        name: "fsyncgate",
        scenario: "append, fsync fails with EIO, fsync again (succeeds)",
        expectation: "reads show the data but no power-loss image has it",
        without: Rules { failed_sync_drops: false, ..RULES },
        rule: "fsync failure drops dirty data",
        run: fsyncgate,
    },
];

const RULES: Rules = Rules::CRASH_MODEL;

fn p(path: &str) -> &Path {
    debug_assert!(path.starts_with('/'), "a litmus names absolute paths");
    Path::new(path)
}

/// A fresh filesystem with a durable directory `/d`.
fn fs_with_dir(plan: FaultPlan, rules: Rules) -> Result<SimFs> {
    let fs = SimFs::with_rules(plan, rules);
    fs.create_dir(p("/d"), B)?;
    fs.sync_dir(p("/"), B)?;
    assert!(fs.exists(p("/d"))?, "reads see a directory at once, under every rule");
    Ok(fs)
}

/// A durable file `/d/<name>` holding `contents`.
fn durable_file(fs: &SimFs, name: &str, contents: &[u8]) -> Result<()> {
    let path = Path::new("/d").join(name);
    let file = fs.open(&path, OpenOptions::create(), B)?;
    file.append(contents, B)?;
    file.sync_all(B)?;
    fs.sync_dir(p("/d"), B)?;
    assert_eq!(fs.read(&path)?, contents, "reads see what was written");
    Ok(())
}

fn power(fs: &SimFs) -> Vec<Image> {
    let images = fs.crash(CrashMode::PowerLoss).images;
    assert!(images.iter().all(|image| image.boot() == 1), "each image is the first reboot");
    images
}

fn file_synced_dir_not(rules: Rules) -> Result<Outcome> {
    let fs = fs_with_dir(FaultPlan::none(1), rules)?;
    let file = fs.open(p("/d/f"), OpenOptions::create(), B)?;
    file.append(b"data", B)?;
    file.sync_data(B)?;
    assert!(fs.exists(p("/d/f"))?, "the running process sees the file");
    Ok(Outcome::some(&power(&fs), |image| !image.contains("/d/f")))
}

fn rename_unsynced_tmp(rules: Rules) -> Result<Outcome> {
    let fs = fs_with_dir(FaultPlan::none(1), rules)?;
    durable_file(&fs, "target", b"old contents\n")?;
    let new = [b'n'; 1500];
    let tmp = fs.open(p("/d/target.tmp"), OpenOptions::create_truncate(), B)?;
    tmp.append(&new, B)?;
    fs.rename(p("/d/target.tmp"), p("/d/target"), B)?;
    fs.sync_dir(p("/d"), B)?;
    assert_eq!(fs.read(p("/d/target"))?, new, "the running process sees the new contents");
    Ok(Outcome::some(&power(&fs), |image| {
        image.file("/d/target").is_some_and(|target| target != b"old contents\n" && target != new)
    }))
}

fn append_unsynced(rules: Rules) -> Result<Outcome> {
    let fs = fs_with_dir(FaultPlan::none(1), rules)?;
    durable_file(&fs, "log", b"line 1\n")?;
    let file = fs.open(p("/d/log"), OpenOptions::read_write(), B)?;
    file.append(b"line 2\n", B)?;
    assert_eq!(fs.read(p("/d/log"))?, b"line 1\nline 2\n", "reads see the unsynced line");
    Ok(Outcome::some(&power(&fs), |image| image.file("/d/log") == Some(b"line 1\n")))
}

fn extension_as_zeros(rules: Rules) -> Result<Outcome> {
    let fs = fs_with_dir(FaultPlan::none(1), rules)?;
    durable_file(&fs, "log", b"")?;
    let file = fs.open(p("/d/log"), OpenOptions::read_write(), B)?;
    file.append(b"abc\n", B)?;
    assert_eq!(file.len()?, 4, "reads see the new length at once");
    Ok(Outcome::some(&power(&fs), |image| image.file("/d/log") == Some(&[0u8; 4][..])))
}

fn tmp_fsync_rename_dirsync(rules: Rules) -> Result<Outcome> {
    let fs = fs_with_dir(FaultPlan::none(1), rules)?;
    durable_file(&fs, "target", b"old")?;
    let new = [b'n'; 3000];
    let tmp = fs.open(p("/d/target.tmp"), OpenOptions::create_truncate(), B)?;
    tmp.append(&new, B)?;
    tmp.sync_all(B)?;
    fs.rename(p("/d/target.tmp"), p("/d/target"), B)?;
    fs.sync_dir(p("/d"), B)?;
    // Something else is still pending, so the images are not trivially one.
    let other = fs.open(p("/d/other"), OpenOptions::create(), B)?;
    other.append(b"pending", B)?;
    assert!(!fs.exists(p("/d/target.tmp"))?, "the renamed name is gone for the running process");
    let images = power(&fs);
    Ok(Outcome::every(&images, |image| {
        image.file("/d/target") == Some(&new[..]) && !image.contains("/d/target.tmp")
    }))
}

fn rename_atomic(rules: Rules) -> Result<Outcome> {
    let fs = fs_with_dir(FaultPlan::none(1), rules)?;
    durable_file(&fs, "target", b"old")?;
    durable_file(&fs, "tmp", b"new")?;
    fs.rename(p("/d/tmp"), p("/d/target"), B)?;
    assert_eq!(fs.read(p("/d/target"))?, b"new", "the running process sees the rename");
    Ok(Outcome::every(&power(&fs), |image| {
        matches!(
            (image.file("/d/tmp"), image.file("/d/target")),
            (Some(b"new"), Some(b"old")) | (None, Some(b"new"))
        )
    }))
}

fn kill_keeps_writes(rules: Rules) -> Result<Outcome> {
    let fs = fs_with_dir(FaultPlan::none(1), rules)?;
    let file = fs.open(p("/d/log"), OpenOptions::create(), B)?;
    file.append(b"never synced\n", B)?;
    fs.rename(p("/d/log"), p("/d/log2"), B)?;
    assert!(!fs.exists(p("/d/log"))?, "the running process sees the rename");
    let images = fs.crash(CrashMode::ProcessKill).images;
    Ok(Outcome::every(&images, |image| {
        image.file("/d/log2") == Some(b"never synced\n") && !image.contains("/d/log")
    }))
}

fn fsyncgate(rules: Rules) -> Result<Outcome> {
    // Ops: create_dir 0, sync_dir 1, open 2, append 3, sync 4, sync_dir 5, open 6 is not a
    // boundary (no create), append 6, sync 7 fails.
    let fs = fs_with_dir(FaultPlan::fault_at(5, 7, Fault::Eio), rules)?;
    durable_file(&fs, "log", b"kept\n")?;
    let file = fs.open(p("/d/log"), OpenOptions::read_write(), B)?;
    file.append(b"dropped\n", B)?;
    let failed = file.sync_data(B).is_err();
    assert!(failed, "the planned fault fails the first sync, under every rule");
    file.sync_data(B)?;
    let visible = file.read_to_end()? == b"kept\ndropped\n";
    let mut outcome = Outcome::every(&power(&fs), |image| image.file("/d/log") == Some(b"kept\n"));
    outcome.holds &= failed && visible;
    Ok(outcome)
}
