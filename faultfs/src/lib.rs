//! `faultfs`: the engine's only way to touch storage.
//!
//! The engine never calls `std::fs`. It talks to an [`Fs`], which has three implementations:
//!
//! - [`RealFs`]: the real filesystem, with real `fsync`/`fdatasync` and real directory fsync.
//! - [`SimFs`]: a deterministic in-memory filesystem that keeps *durable* and *volatile* state
//!   apart and can produce every post-crash image the crash model allows (DESIGN.md section 5),
//!   with faults (crash, EIO, ENOSPC, short write, fsync failure) injected at a chosen op.
//! - [`KillFs`]: a wrapper over any `Fs` that aborts the real process at a chosen boundary,
//!   configured by environment, for sweeps that kill real processes.
//!
//! # The contract every implementation keeps, and every caller must assume
//!
//! 1. Nothing is durable without a sync. A write is visible to every reader at once, but a crash
//!    (power loss) may lose it until [`File::sync_data`] or [`File::sync_all`] of that file has
//!    returned `Ok`.
//! 2. Creating, renaming and removing a name become durable only after [`Fs::sync_dir`] of the
//!    parent directory has returned `Ok`. A file whose data was synced but whose directory entry
//!    was not may be missing after a crash.
//! 3. Rename is atomic: after a crash the target name holds either the old file or the new one,
//!    never neither and never a mix. It is *not* durable until the parent directory is synced,
//!    and renaming a file whose data was not synced may leave the target empty or partial.
//! 4. Without a sync between them, pending changes have no order: not between files, not between
//!    data and metadata, not within one file. Each 512-byte chunk may survive or not on its own,
//!    and a file extension may survive as zeros without its data.
//! 5. Closing a file or exiting the process makes nothing durable.
//! 6. A failed sync may have dropped the dirty data while leaving it visible to reads, and a
//!    later sync may report success anyway ("fsyncgate"). A caller must never retry a failed
//!    sync and trust the result: treat the handle as poisoned and recover by reopening.
//!
//! # Boundaries
//!
//! Every operation that can change storage takes a [`Boundary`]: a stable name chosen by the
//! caller (`send.log.append`, `send.log.sync`, `send.queue.rename`, ...). Boundaries are the
//! crash points of a sweep and the names in a failure report. Reads take no boundary: they
//! cannot change what survives a crash.
//!
//! No code here indexes or slices past a bound it has not checked (`clippy::indexing_slicing`
//! is denied): an inode, a span of a buffer or a piece is reached through a helper that names
//! why it must exist, and a miss is a bug of the simulation, said as such.
#![deny(clippy::indexing_slicing)]

mod digest;
mod error;
mod kill;
pub mod litmus;
mod plan;
mod real;
mod sim;
mod trace;

use std::fmt;
use std::path::Path;
use std::time::SystemTime;

pub use digest::{Digest, DigestMap, DigestSet, DigestState, Hasher, digest};
pub use error::{Error, Result};
pub use kill::{KILL_AT_ENV, KILL_TRACE_ENV, KillFile, KillFs, KillPoint};
pub use plan::{Fault, FaultPlan};
pub use real::{RealFile, RealFs};
pub use sim::{
    CheckedBlocks, CrashImages, CrashMode, EXHAUSTIVE_IMAGES_MAX, EXHAUSTIVE_PIECES_MAX, Image,
    ImageNode, Media, Observed, REBOOT_CLOCK_MS, ReadMark, Reads, Rules, Sifted, SimFile, SimFs,
    chunk_bytes,
};
pub use trace::{OpKind, Trace, TraceEntry};

/// A stable name for one step of a transition, supplied by the caller of every mutating op.
///
/// Names are dotted paths: `<transition>.<artifact>.<step>`, e.g. `send.log.sync`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Boundary(&'static str);

impl Boundary {
    /// A boundary named `name`.
    pub const fn new(name: &'static str) -> Self {
        assert!(!name.is_empty(), "a boundary has a name");
        Boundary(name)
    }

    /// The boundary's name.
    pub const fn name(self) -> &'static str {
        self.0
    }
}

impl fmt::Debug for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        assert!(!self.0.is_empty(), "a boundary has a name");
        f.pad(self.0)
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        assert!(!self.0.is_empty(), "a boundary has a name");
        f.pad(self.0)
    }
}

/// How to open a file. Mirrors the subset of `std::fs::OpenOptions` the engine needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Open for reading.
    pub read: bool,
    /// Open for writing (positioned writes, appends, `set_len`).
    pub write: bool,
    /// Create the file if it does not exist.
    pub create: bool,
    /// Create the file, failing with `AlreadyExists` if it exists (`O_CREAT | O_EXCL`). This is
    /// the primitive the lock files of the existing store rely on.
    pub create_new: bool,
    /// Truncate an existing file to zero length on open.
    pub truncate: bool,
}

impl OpenOptions {
    /// Read-only access to an existing file.
    pub const fn read() -> Self {
        let options = OpenOptions {
            read: true,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
        };
        assert!(options.consistent(), "an open asks for write access to change anything");
        options
    }

    /// Read and write access to an existing file.
    pub const fn read_write() -> Self {
        let options = OpenOptions {
            read: true,
            write: true,
            create: false,
            create_new: false,
            truncate: false,
        };
        assert!(options.consistent(), "an open asks for write access to change anything");
        options
    }

    /// Read and write, creating the file if it is missing.
    pub const fn create() -> Self {
        let options = OpenOptions {
            read: true,
            write: true,
            create: true,
            create_new: false,
            truncate: false,
        };
        assert!(options.consistent(), "an open asks for write access to change anything");
        options
    }

    /// Read and write, creating the file and failing if it already exists.
    pub const fn create_new() -> Self {
        let options = OpenOptions {
            read: true,
            write: true,
            create: false,
            create_new: true,
            truncate: false,
        };
        assert!(options.consistent(), "an open asks for write access to change anything");
        options
    }

    /// Read and write, creating the file or truncating an existing one to zero length.
    pub const fn create_truncate() -> Self {
        let options = OpenOptions {
            read: true,
            write: true,
            create: true,
            create_new: false,
            truncate: true,
        };
        assert!(options.consistent(), "an open asks for write access to change anything");
        options
    }

    /// Whether opening with these options can change storage (and so is a boundary).
    pub const fn mutates(&self) -> bool {
        let mutates = self.create || self.create_new || self.truncate;
        assert!(!mutates || self.write, "only a writable open changes storage");
        mutates
    }

    /// Whether what these options change needs, and has, write access (as `open(2)` requires
    /// of `O_CREAT`, `O_EXCL` and `O_TRUNC`), and whether they allow some access at all.
    const fn consistent(&self) -> bool {
        self.write || (self.read && !self.create && !self.create_new && !self.truncate)
    }
}

/// What a directory entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed: [`Fs::metadata`] and [`Fs::read_dir`] report the link
    /// itself, and [`Fs::open`] refuses one).
    Symlink,
    /// Anything else (a FIFO, a socket, a device).
    Other,
}

/// One entry of [`Fs::read_dir`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    /// The entry's name (one path component). A name that is not UTF-8 (`RealFs` only) is given
    /// escaped, `\xNN` for each byte that is not: it names no file, and the store never builds a
    /// path from it.
    pub name: String,
    /// What it names.
    pub kind: FileKind,
}

/// What [`Fs::metadata`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// File length in bytes (0 for directories on `SimFs`; filesystem-defined on `RealFs`).
    pub len: u64,
    /// File or directory.
    pub kind: FileKind,
    /// Last modification time. `SimFs` keeps a logical clock that starts at the epoch and
    /// advances one millisecond per mutating op.
    pub modified: SystemTime,
}

impl Metadata {
    /// The modification time in nanoseconds since the epoch (0 before it, saturating).
    pub fn modified_ns(&self) -> u64 {
        let ns = self
            .modified
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |at| u64::try_from(at.as_nanos()).unwrap_or(u64::MAX));
        assert!(ns > 0 || self.modified <= std::time::UNIX_EPOCH, "0 is the epoch or before");
        ns
    }
}

/// A storage backend: the engine's only I/O seam. See the crate documentation for the crash
/// contract every implementation keeps.
pub trait Fs: Send + Sync + 'static {
    /// An open file of this backend.
    type File: File;

    /// Opens (and, per `options`, creates or truncates) the file at `path`. The parent directory
    /// must exist. A new file's name is not durable until [`Fs::sync_dir`] of its parent.
    fn open(&self, path: &Path, options: OpenOptions, boundary: Boundary) -> Result<Self::File>;

    /// Atomically replaces the binding of `to` with the file or directory at `from`. Not durable
    /// until the parent directories are synced (rule 3 of the crate contract).
    fn rename(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()>;

    /// Binds the new name `to` to the file at `from` (a hard link); fails with `AlreadyExists`
    /// if `to` exists, so it creates a file with its contents in one step. Not durable until the
    /// parent directory is synced.
    fn hard_link(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()>;

    /// Removes the name `path` (a file). Not durable until the parent directory is synced.
    fn remove_file(&self, path: &Path, boundary: Boundary) -> Result<()>;

    /// Creates the directory `path`; the parent must exist. Not durable until the parent
    /// directory is synced.
    fn create_dir(&self, path: &Path, boundary: Boundary) -> Result<()>;

    /// Removes the empty directory `path`. Not durable until the parent directory is synced.
    fn remove_dir(&self, path: &Path, boundary: Boundary) -> Result<()>;

    /// Makes every create, rename and removal of a name in the directory `path` durable.
    fn sync_dir(&self, path: &Path, boundary: Boundary) -> Result<()>;

    /// Lists the directory `path`, sorted by name.
    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>>;

    /// Describes the file or directory at `path` (without following into it).
    fn metadata(&self, path: &Path) -> Result<Metadata>;

    /// The id of the calling process, as other processes would see it (what a lock file holds).
    fn process_id(&self) -> u32;

    /// Which machine this filesystem belongs to: 0 for the real one; each simulated machine
    /// has its own, so per-process state keyed by pid (a lock registry) is kept per machine.
    fn machine_id(&self) -> u64 {
        0
    }

    /// When the process `pid` started, in milliseconds since the Unix epoch, or `None` if no
    /// such process is running. Lock recovery compares this with a lock file's modification
    /// time, so that a reused pid is not mistaken for a live holder.
    fn process_start_ms(&self, pid: u32) -> Result<Option<u64>>;

    /// Reads the whole file at `path`.
    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let file = self.open(path, OpenOptions::read(), Boundary::new("read"))?;
        file.read_to_end()
    }

    /// Whether `path` exists, as a file or a directory.
    fn exists(&self, path: &Path) -> Result<bool> {
        match self.metadata(path) {
            Ok(_) => Ok(true),
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// An open file. Every method that can change storage takes a [`Boundary`].
pub trait File: Send + Sync {
    /// The path this file was opened at (for error reports).
    fn path(&self) -> &Path;

    /// Writes all of `data` at the current end of the file. Visible at once, durable only after
    /// a sync. On error, a prefix of `data` may have been written (a short write).
    fn append(&self, data: &[u8], boundary: Boundary) -> Result<()>;

    /// Writes all of `data` at `offset`, extending the file with zeros if `offset` is past its
    /// end. Visible at once, durable only after a sync. On error, a prefix may have been written.
    fn write_at(&self, offset: u64, data: &[u8], boundary: Boundary) -> Result<()>;

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;

    /// Reads at `offset` until `buf` is full or the file ends; returns how many bytes were read
    /// (fewer than `buf.len()` only at the end of the file).
    fn read_full_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            let Some(rest) = buf.get_mut(filled..) else { break };
            let read = self.read_at(offset + filled as u64, rest)?;
            assert!(read <= rest.len(), "a read fills at most its buffer");
            if read == 0 {
                break;
            }
            filled += read;
        }
        Ok(filled)
    }

    /// The file's current length in bytes.
    fn len(&self) -> Result<u64>;

    /// Whether the file is currently empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Truncates or extends (with zeros) the file to `len` bytes. Durable only after a sync.
    fn set_len(&self, len: u64, boundary: Boundary) -> Result<()>;

    /// Makes the file's data (and the length needed to read it) durable (`fdatasync`).
    /// On error the dirty data may be lost even though reads still return it: never retry.
    fn sync_data(&self, boundary: Boundary) -> Result<()>;

    /// Makes the file's data and all of its metadata durable (`fsync`). Same error rule.
    fn sync_all(&self, boundary: Boundary) -> Result<()>;

    /// Tries to take an exclusive advisory lock (`flock(LOCK_EX | LOCK_NB)`) on the open file.
    /// Returns `Ok(false)` if another open file holds it. Released by [`File::unlock`], by
    /// dropping the file, or by the death of the process.
    fn try_lock(&self) -> Result<bool>;

    /// Releases a lock taken with [`File::try_lock`].
    fn unlock(&self) -> Result<()>;

    /// Reads the whole file.
    fn read_to_end(&self) -> Result<Vec<u8>> {
        let len = self.len()?;
        let len = usize::try_from(len).map_err(|_| {
            Error::io(
                OpKind::Read,
                self.path(),
                None,
                std::io::Error::new(std::io::ErrorKind::OutOfMemory, "file larger than memory"),
            )
        })?;
        let mut buf = vec![0u8; len];
        let filled = self.read_full_at(0, &mut buf)?;
        buf.truncate(filled);
        assert!(buf.len() <= len, "a file is read to the end it had when measured");
        Ok(buf)
    }
}
