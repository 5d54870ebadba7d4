//! `RealFs`: the real filesystem, with real `fdatasync`/`fsync` and real directory fsync.
//!
//! Durability is whatever the kernel and the disk give for these calls; the crate contract
//! (see the crate documentation) is what callers may rely on. A failed sync is reported and
//! never retried here: after fsyncgate, a retry can report success for data that is gone.
//!
//! Its assertions are `assert!`: this is the shipped binary's data path, checked in every build
//! (the simulator's are debug assertions, on in the test build).
#![expect(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "RealFs is the one implementation of the storage seam that touches std::fs"
)]

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::{Boundary, DirEntry, Error, File, FileKind, Fs, Metadata, OpKind, OpenOptions, Result};

/// The real filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl RealFs {
    /// The real filesystem.
    pub const fn new() -> Self {
        RealFs
    }
}

/// An open file of the real filesystem.
#[derive(Debug)]
pub struct RealFile {
    file: fs::File,
    path: PathBuf,
}

fn context(op: OpKind, path: &Path, boundary: Option<Boundary>) -> impl FnOnce(io::Error) -> Error {
    assert!(!path.as_os_str().is_empty(), "an error names the path it is about");
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, boundary, source }
}

impl Fs for RealFs {
    type File = RealFile;

    fn open(&self, path: &Path, options: OpenOptions, boundary: Boundary) -> Result<RealFile> {
        // O_NOFOLLOW: a symbolic link in a file's place is refused (ELOOP), never followed.
        // O_NONBLOCK: a FIFO or a device in a file's place opens at once (or fails) instead of
        // waiting for a peer; it is then refused below, never read. On a regular file the flag
        // changes nothing. A file created is private to its owner (0600).
        assert!(
            options.read || options.write || options.mutates(),
            "an open reads, writes or creates"
        );
        let on_error = || context(OpKind::Open, path, Some(boundary));
        let file = fs::OpenOptions::new()
            .custom_flags(open_flags())
            .mode(FILE_MODE)
            .read(options.read)
            .write(options.write || options.create || options.create_new || options.truncate)
            .create(options.create)
            .create_new(options.create_new)
            .truncate(options.truncate)
            .open(path)
            .map_err(on_error())?;
        let metadata = file.metadata().map_err(on_error())?;
        let kind = kind_of(&metadata.file_type());
        if kind != FileKind::File {
            return Err(on_error()(not_a_file(kind)));
        }
        assert!(!options.create_new || metadata.len() == 0, "a file created new starts empty");
        Ok(RealFile { file, path: path.to_path_buf() })
    }

    fn rename(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()> {
        assert_ne!(from, to, "a rename moves a file between two names");
        fs::rename(from, to).map_err(context(OpKind::Rename, to, Some(boundary)))
    }

    fn hard_link(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()> {
        assert_ne!(from, to, "a hard link gives a file a second name");
        fs::hard_link(from, to).map_err(context(OpKind::HardLink, to, Some(boundary)))
    }

    fn remove_file(&self, path: &Path, boundary: Boundary) -> Result<()> {
        assert!(path.file_name().is_some(), "a removal names an entry: {path:?}");
        fs::remove_file(path).map_err(context(OpKind::RemoveFile, path, Some(boundary)))
    }

    fn create_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt as _;
        assert!(path.file_name().is_some(), "a new directory is an entry: {path:?}");
        fs::DirBuilder::new().mode(DIR_MODE).create(path).map_err(context(
            OpKind::CreateDir,
            path,
            Some(boundary),
        ))
    }

    fn remove_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        assert!(path.file_name().is_some(), "a removal names an entry: {path:?}");
        fs::remove_dir(path).map_err(context(OpKind::RemoveDir, path, Some(boundary)))
    }

    fn sync_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        assert!(!path.as_os_str().is_empty(), "a directory sync names its directory");
        let on_error = || context(OpKind::SyncDir, path, Some(boundary));
        // O_DIRECTORY: anything else in the directory's place fails at once (a FIFO would block).
        let dir = fs::OpenOptions::new()
            .read(true)
            .custom_flags(open_flags() | directory_flag())
            .open(path)
            .map_err(on_error())?;
        dir.sync_all().map_err(on_error())
    }

    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let on_error = || context(OpKind::ReadDir, path, None);
        let mut entries = Vec::new();
        for entry in fs::read_dir(path).map_err(on_error())? {
            let entry = entry.map_err(on_error())?;
            // A name that is not UTF-8 is listed escaped (`\xNN` for each byte that is not),
            // never a failure of the whole listing: it is no name the store gave, so callers
            // that look for their own names skip it, and `doctor` names it.
            let name = match entry.file_name().into_string() {
                Ok(name) => name,
                Err(name) => escape_name(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str())),
            };
            let kind = kind_of(&entry.file_type().map_err(on_error())?);
            entries.push(DirEntry { name, kind });
        }
        entries.sort();
        assert!(
            entries.iter().all(|entry| !entry.name.is_empty() && !entry.name.contains('/')),
            "a listing names entries, each one component"
        );
        Ok(entries)
    }

    fn metadata(&self, path: &Path) -> Result<Metadata> {
        let on_error = || context(OpKind::Metadata, path, None);
        // The link itself, never its target: the store never follows a symbolic link.
        let metadata = fs::symlink_metadata(path).map_err(on_error())?;
        Ok(Metadata {
            len: metadata.len(),
            kind: kind_of(&metadata.file_type()),
            modified: metadata.modified().map_err(on_error())?,
        })
    }

    fn process_id(&self) -> u32 {
        let pid = std::process::id();
        assert_ne!(pid, 0, "a running process has an id");
        pid
    }

    fn process_start_ms(&self, pid: u32) -> Result<Option<u64>> {
        let start = proc_start_ms(pid)?;
        assert!(
            pid != std::process::id() || start.is_some(),
            "this process runs: its own start time reads"
        );
        Ok(start)
    }
}

/// `bytes` as text: valid UTF-8 as it is, every other byte as `\xNN`.
fn escape_name(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    assert!(out.len() >= bytes.len(), "an escaped name loses no byte");
    out
}

/// The mode of every file the store creates: private to its owner.
const FILE_MODE: u32 = 0o600;

/// The mode of every directory the store creates: private to its owner.
const DIR_MODE: u32 = 0o700;

/// `O_NOFOLLOW | O_NONBLOCK`.
fn open_flags() -> i32 {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let flags = i32::try_from(flags.bits()).unwrap_or(0);
    assert_ne!(flags, 0, "every open refuses links and never blocks");
    flags
}

/// `O_DIRECTORY`.
fn directory_flag() -> i32 {
    let flag = i32::try_from(rustix::fs::OFlags::DIRECTORY.bits()).unwrap_or(0);
    assert_ne!(flag, 0, "a directory sync opens a directory or nothing");
    flag
}

/// The error of an open that found something other than a regular file.
fn not_a_file(kind: FileKind) -> io::Error {
    assert_ne!(kind, FileKind::File, "a regular file is never refused as one");
    let what = match kind {
        FileKind::Dir => "a directory",
        FileKind::Symlink => "a symbolic link",
        FileKind::File | FileKind::Other => "a special file (a FIFO, a socket or a device)",
    };
    io::Error::new(io::ErrorKind::InvalidInput, format!("{what} where a regular file belongs"))
}

/// The kind of an entry, its links not followed.
fn kind_of(file_type: &fs::FileType) -> FileKind {
    let kind = if file_type.is_symlink() {
        FileKind::Symlink
    } else if file_type.is_dir() {
        FileKind::Dir
    } else if file_type.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    };
    assert!(file_type.is_symlink() || kind != FileKind::Symlink, "only a link is a link");
    kind
}

/// Reads a process's start time from `/proc/<pid>/stat` (field 22, clock ticks since boot) and
/// `/proc/stat` (`btime`). A zombie counts as not running: it holds nothing any more.
fn proc_start_ms(pid: u32) -> Result<Option<u64>> {
    let stat_path = PathBuf::from(format!("/proc/{pid}/stat"));
    let stat = match fs::read_to_string(&stat_path) {
        Ok(stat) => stat,
        // A process that exits while its stat is read answers ESRCH: it is gone, like ENOENT.
        Err(error)
            if error.kind() == io::ErrorKind::NotFound
                || error.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) =>
        {
            return Ok(None);
        }
        Err(error) => return Err(Error::io(OpKind::Read, &stat_path, None, error)),
    };
    let malformed = |what: &str| {
        Error::io(
            OpKind::Read,
            &stat_path,
            None,
            io::Error::new(io::ErrorKind::InvalidData, format!("malformed /proc stat: {what}")),
        )
    };
    // The command name (field 2) may contain spaces and parentheses; fields resume after the
    // last ')'. Field 3 is the state, field 22 the start time.
    let after_name = stat.rsplit_once(')').ok_or_else(|| malformed("no ')'"))?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let state = fields.first().ok_or_else(|| malformed("no state"))?;
    if matches!(*state, "Z" | "X" | "x") {
        return Ok(None);
    }
    let start_ticks: u64 = fields
        .get(19)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| malformed("no start time"))?;
    let boot_path = Path::new("/proc/stat");
    let boot = fs::read_to_string(boot_path).map_err(context(OpKind::Read, boot_path, None))?;
    let boot_secs: u64 = boot
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| malformed("no btime in /proc/stat"))?;
    let ticks_per_second = rustix::param::clock_ticks_per_second().max(1);
    let start_ms = boot_secs * 1000 + start_ticks * 1000 / ticks_per_second;
    assert!(start_ms >= boot_secs * 1000, "a process starts after its machine booted");
    Ok(Some(start_ms))
}

impl File for RealFile {
    fn path(&self) -> &Path {
        assert!(!self.path.as_os_str().is_empty(), "an open file has a path");
        &self.path
    }

    fn append(&self, data: &[u8], boundary: Boundary) -> Result<()> {
        let on_error = || context(OpKind::Append, &self.path, Some(boundary));
        let end = self.file.metadata().map_err(on_error())?.len();
        assert!(end.checked_add(data.len() as u64).is_some(), "an append ends inside u64");
        self.file.write_all_at(data, end).map_err(on_error())
    }

    fn write_at(&self, offset: u64, data: &[u8], boundary: Boundary) -> Result<()> {
        assert!(offset.checked_add(data.len() as u64).is_some(), "a write ends inside u64");
        self.file.write_all_at(data, offset).map_err(context(
            OpKind::WriteAt,
            &self.path,
            Some(boundary),
        ))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        loop {
            match self.file.read_at(buf, offset) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                result => {
                    let read = result.map_err(context(OpKind::Read, &self.path, None))?;
                    assert!(read <= buf.len(), "a read fills at most its buffer");
                    return Ok(read);
                }
            }
        }
    }

    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(context(OpKind::Metadata, &self.path, None))?.len())
    }

    fn set_len(&self, len: u64, boundary: Boundary) -> Result<()> {
        assert!(i64::try_from(len).is_ok(), "a length fits the kernel's file offset");
        self.file.set_len(len).map_err(context(OpKind::SetLen, &self.path, Some(boundary)))
    }

    fn sync_data(&self, boundary: Boundary) -> Result<()> {
        self.file.sync_data().map_err(context(OpKind::SyncData, &self.path, Some(boundary)))
    }

    fn sync_all(&self, boundary: Boundary) -> Result<()> {
        self.file.sync_all().map_err(context(OpKind::SyncAll, &self.path, Some(boundary)))
    }

    fn try_lock(&self) -> Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(fs::TryLockError::WouldBlock) => Ok(false),
            Err(fs::TryLockError::Error(error)) => {
                Err(Error::io(OpKind::Lock, &self.path, None, error))
            }
        }
    }

    fn unlock(&self) -> Result<()> {
        self.file.unlock().map_err(context(OpKind::Lock, &self.path, None))
    }
}
