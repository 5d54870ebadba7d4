//! The interop corpus (`shared/interop`: stores the existing TypeScript spex wrote, and its own
//! reads of them) and copying a store tree. Shared by the engine's and the CLI's tests.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(clippy::panic, reason = "a missing corpus should stop the test naming it")]

use std::path::{Path, PathBuf};

/// The corpus directory: `SPEX_INTEROP_DIR`, else `shared/interop` beside an ancestor of the
/// crate under test (the project's checkout sits beside `shared/`).
pub(crate) fn corpus() -> PathBuf {
    if let Some(dir) = std::env::var_os("SPEX_INTEROP_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("shared/interop"))
        .find(|dir| dir.join("stores/upstream").is_dir())
        .unwrap_or_else(|| {
            panic!(
                "the interop corpus (shared/interop) is not beside this checkout; set SPEX_INTEROP_DIR"
            )
        })
}

/// Copies the tree `from` to `to`, every file writable (the corpus is read-only).
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::write(&target, std::fs::read(entry.path()).unwrap()).unwrap();
        }
    }
}

/// Every file under `dir` with its bytes, in path order (to show that a command wrote nothing).
pub(crate) fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}
