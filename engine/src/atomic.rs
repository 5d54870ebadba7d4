//! Whole-file state (the record and the queue): durable atomic replace and removal.
//!
//! A replace writes `<name>.tmp`, syncs it, renames it over `<name>` and syncs the directory:
//! after a crash the file holds the old contents or the new ones, never a mix, and once the
//! replace returns the new contents survive power loss. A stale `.tmp` (a crash before the
//! rename) is removed by the next writer's recovery. A removal is durable once the directory
//! is synced.

use std::path::Path;

use faultfs::{Boundary, File, FileKind, Fs, OpenOptions};

use crate::error::{Error, Result};
use crate::layout::STATE_FILE_BYTES_MAX;
use crate::mutant::{Mutant, active};

/// Which state file a replace writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateFile {
    Record,
    Queue,
    /// Derived data (the receipt index): written without syncs.
    Index,
}

/// The boundaries of one transition's writes of one state file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplaceBoundaries {
    pub(crate) file: StateFile,
    pub(crate) create: Boundary,
    pub(crate) write: Boundary,
    pub(crate) sync: Boundary,
    pub(crate) rename: Boundary,
    pub(crate) dir_sync: Boundary,
    pub(crate) remove: Boundary,
}

/// Stages `bytes` durably in `tmp`: the space-consuming half of a replace, done before a
/// transition's commit point so that running out of space leaves the store as it was.
pub(crate) fn stage<F: Fs>(
    fs: &F,
    tmp: &Path,
    bytes: &[u8],
    steps: &ReplaceBoundaries,
) -> Result<()> {
    assert!(
        bytes.len() as u64 <= STATE_FILE_BYTES_MAX,
        "a state file is written within the bound its reader reads ({} bytes)",
        bytes.len()
    );
    let file = fs.open(tmp, OpenOptions::create_truncate(), steps.create)?;
    file.write_at(0, bytes, steps.write)?;
    if !(steps.file == StateFile::Record && active(Mutant::NoRecordTmpSync)) {
        file.sync_all(steps.sync)?;
    }
    Ok(())
}

/// Publishes a staged `tmp` as `target` (in `dir`): rename, then directory sync.
pub(crate) fn publish<F: Fs>(
    fs: &F,
    dir: &Path,
    tmp: &Path,
    target: &Path,
    steps: &ReplaceBoundaries,
) -> Result<()> {
    assert!(
        tmp.parent() == Some(dir) && target.parent() == Some(dir),
        "a replace renames within the directory it syncs"
    );
    fs.rename(tmp, target, steps.rename)?;
    if !(steps.file == StateFile::Queue && active(Mutant::NoQueueDirSync)) {
        fs.sync_dir(dir, steps.dir_sync)?;
    }
    Ok(())
}

/// Replaces `target` (in `dir`) with `bytes`, durably and atomically, staging in `tmp`.
pub(crate) fn replace<F: Fs>(
    fs: &F,
    dir: &Path,
    target: &Path,
    tmp: &Path,
    bytes: &[u8],
    steps: &ReplaceBoundaries,
) -> Result<()> {
    assert_ne!(tmp, target, "a replace stages beside its target, never in its place");
    stage(fs, tmp, bytes, steps)?;
    publish(fs, dir, tmp, target, steps)
}

/// Best-effort removal of a staged file after a failure (recovery removes it otherwise).
pub(crate) fn discard<F: Fs>(fs: &F, tmp: &Path, steps: &ReplaceBoundaries) {
    assert!(
        tmp.extension().is_some_and(|extension| extension == "tmp"),
        "only a staging file is discarded"
    );
    let _ = fs.remove_file(tmp, steps.remove);
}

/// Removes `path` (in `dir`) durably; a missing file is already removed.
pub(crate) fn remove<F: Fs>(
    fs: &F,
    dir: &Path,
    path: &Path,
    remove: Boundary,
    dir_sync: Boundary,
) -> Result<()> {
    assert_eq!(path.parent(), Some(dir), "a removal syncs the directory that held the file");
    if !fs.exists(path)? {
        return Ok(());
    }
    match fs.remove_file(path, remove) {
        Ok(()) => {}
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(()),
        Err(error) => return Err(error.into()),
    }
    fs.sync_dir(dir, dir_sync)?;
    Ok(())
}

/// Reads a whole state file, or `None` if it does not exist.
pub(crate) fn read<F: Fs>(fs: &F, path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match fs.open(path, OpenOptions::read(), Boundary::new("read")) {
        Ok(file) => file,
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(None),
        // The open refuses a symbolic link (O_NOFOLLOW): name what is there instead.
        Err(error) => {
            return Err(crate::layout::expect_kind(fs, path, FileKind::File)
                .err()
                .unwrap_or(error.into()));
        }
    };
    let len = file.len()?;
    if len > STATE_FILE_BYTES_MAX {
        return Err(Error::TooLarge {
            what: "state file",
            bytes: len,
            bytes_max: STATE_FILE_BYTES_MAX,
        });
    }
    let bytes = file.read_to_end()?;
    debug_assert!(
        bytes.len() as u64 <= STATE_FILE_BYTES_MAX.max(len),
        "a state file is read within its bound (or as long as it was when measured)"
    );
    Ok(Some(bytes))
}
