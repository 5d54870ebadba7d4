//! `KillFs` kills a real process at a chosen boundary: the process dies by SIGABRT before the op
//! runs, and the real files hold exactly what the earlier ops wrote. Real-process sweeps rely on
//! the kill landing at the boundary the trace names, not near it.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(clippy::disallowed_methods, reason = "the test reads real files written by its child")]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use faultfs::{Boundary, File, Fs, KILL_AT_ENV, KILL_TRACE_ENV, KillFs, OpenOptions, RealFs};

const CHILD_DIR_ENV: &str = "FAULTFS_KILL_CHILD_DIR";
const LINES: usize = 5;

/// The child's workload: a directory, then five appended and synced lines, then a rename.
/// It does nothing unless the parent test started it.
#[test]
fn child_workload() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else { return };
    let dir = Path::new(&dir);
    let fs = KillFs::from_env(RealFs::new()).unwrap();
    let store = dir.join("store");
    fs.create_dir(&store, Boundary::new("child.store.mkdir")).unwrap();
    fs.sync_dir(dir, Boundary::new("child.root.sync")).unwrap();
    let log = fs
        .open(&store.join("log"), OpenOptions::create(), Boundary::new("child.log.create"))
        .unwrap();
    for i in 0..LINES {
        log.append(format!("line {i}\n").as_bytes(), Boundary::new("child.log.append")).unwrap();
        log.sync_data(Boundary::new("child.log.sync")).unwrap();
    }
    fs.rename(&store.join("log"), &store.join("log.done"), Boundary::new("child.log.rename"))
        .unwrap();
    fs.sync_dir(&store, Boundary::new("child.store.sync")).unwrap();
}

fn run_child(dir: &Path, env: &[(&str, String)]) -> Output {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", "kill_fs::child_workload", "--nocapture", "--test-threads=1"]);
    command.env(CHILD_DIR_ENV, dir).env_remove(KILL_AT_ENV).env_remove(KILL_TRACE_ENV);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

/// The lines of the log as the child left it (under either name), or none if it never existed.
fn surviving_lines(dir: &Path) -> Option<usize> {
    let store = dir.join("store");
    let fs = RealFs::new();
    for name in ["log", "log.done"] {
        if let Ok(bytes) = fs.read(&store.join(name)) {
            assert!(
                bytes.is_empty() || bytes.ends_with(b"\n"),
                "a process kill never tears a line"
            );
            return Some(bytes.iter().filter(|&&b| b == b'\n').count());
        }
    }
    None
}

#[test]
fn kill_at_every_boundary_leaves_exactly_the_earlier_ops() {
    // Pass 1: count and name the boundaries.
    let dir = tempfile::tempdir().unwrap();
    let trace_path = dir.path().join("trace");
    let output = run_child(dir.path(), &[(KILL_TRACE_ENV, trace_path.display().to_string())]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let trace = String::from_utf8(std::fs::read(&trace_path).unwrap()).unwrap();
    let ops: Vec<(u64, String)> = trace
        .lines()
        .map(|line| {
            let mut fields = line.split(' ');
            (fields.next().unwrap().parse().unwrap(), fields.next().unwrap().to_owned())
        })
        .collect();
    assert_eq!(
        ops.len(),
        3 + 2 * LINES + 2,
        "mkdir, sync, create, append+sync per line, rename, sync"
    );
    assert!(ops.iter().enumerate().all(|(i, (index, _))| *index == i as u64));
    assert_eq!(surviving_lines(dir.path()), Some(LINES));

    // Pass 2: kill before every op k; op k must not have run, every op before it must have.
    for k in 0..ops.len() {
        let dir = tempfile::tempdir().unwrap();
        let output = run_child(dir.path(), &[(KILL_AT_ENV, k.to_string())]);
        assert_eq!(output.status.signal(), Some(6), "killed by SIGABRT before op {k}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("before op {k} at boundary {}", ops[k].1)), "{stderr}");
        let appended = ops[..k].iter().filter(|(_, name)| name == "child.log.append").count();
        let expected = if k > 2 { Some(appended) } else { None };
        assert_eq!(surviving_lines(dir.path()), expected, "kill before op {k} ({})", ops[k].1);
    }
}

#[test]
fn kill_at_the_nth_occurrence_of_a_named_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let output = run_child(dir.path(), &[(KILL_AT_ENV, "child.log.append#3".to_owned())]);
    assert_eq!(output.status.signal(), Some(6));
    assert_eq!(surviving_lines(dir.path()), Some(2), "the third append never ran");

    let dir = tempfile::tempdir().unwrap();
    let output = run_child(dir.path(), &[(KILL_AT_ENV, "no.such.boundary".to_owned())]);
    assert!(output.status.success(), "a kill point that never comes kills nothing");

    let dir = tempfile::tempdir().unwrap();
    let output = run_child(dir.path(), &[(KILL_AT_ENV, "x#0".to_owned())]);
    assert!(!output.status.success(), "a malformed kill point is refused");
    assert!(String::from_utf8_lossy(&output.stderr).contains("occurrence must be"));
    assert_eq!(surviving_lines(dir.path()), None, "nothing ran");
}
