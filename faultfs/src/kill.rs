//! `KillFs`: abort the real process at a chosen boundary, for sweeps that kill real processes.
//!
//! Configured by environment so a harness can drive the real `spex` binary:
//!
//! - `SPEX_KILL_AT=<k>`: abort before mutating op `k` (0-based, counted as `SimFs` counts them:
//!   creating or truncating opens, writes, length changes, syncs, renames, removals, mkdirs).
//! - `SPEX_KILL_AT=<boundary>` or `<boundary>#<n>`: abort before the `n`-th (1-based, default 1)
//!   op carrying that boundary name.
//! - `SPEX_KILL_TRACE=<file>`: append one line per mutating op (`<k> <boundary> <op> <path>`)
//!   to this file before the op runs, so a first pass can count and name the boundaries.
//!
//! The abort is `std::process::abort`: no destructors run, no user-space buffer is flushed, and
//! the kernel keeps exactly what earlier ops handed it (process-kill semantics). The op at the
//! kill point never starts.
#![expect(
    clippy::disallowed_types,
    reason = "the kill trace is written to a real file, beside RealFs, outside the storage seam"
)]

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::{Boundary, DirEntry, File, Fs, Metadata, OpKind, OpenOptions, Result};

/// The environment variable naming the kill point.
pub const KILL_AT_ENV: &str = "SPEX_KILL_AT";

/// The environment variable naming the trace file.
pub const KILL_TRACE_ENV: &str = "SPEX_KILL_TRACE";

/// Where to abort.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillPoint {
    /// Before the mutating op with this 0-based index.
    OpIndex(u64),
    /// Before the `occurrence`-th (1-based) op with this boundary name.
    Boundary {
        /// The boundary name.
        name: String,
        /// Which occurrence.
        occurrence: u64,
    },
}

impl FromStr for KillPoint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err("kill point is empty".to_owned());
        }
        if let Ok(index) = s.parse::<u64>() {
            return Ok(KillPoint::OpIndex(index));
        }
        let (name, occurrence) = match s.split_once('#') {
            Some((name, n)) => {
                let occurrence = n.parse::<u64>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    format!("kill point {s:?}: occurrence must be an integer >= 1")
                })?;
                (name, occurrence)
            }
            None => (s, 1),
        };
        if name.is_empty() {
            return Err(format!("kill point {s:?}: the boundary name is empty"));
        }
        debug_assert!(
            !name.contains('#') && occurrence >= 1,
            "a boundary's kill point is its name and an occurrence from 1"
        );
        Ok(KillPoint::Boundary { name: name.to_owned(), occurrence })
    }
}

impl fmt::Display for KillPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(
            !matches!(self, KillPoint::Boundary { occurrence: 0, .. }),
            "a boundary's occurrences count from 1, as its parser reads them"
        );
        match self {
            KillPoint::OpIndex(index) => write!(f, "{index}"),
            KillPoint::Boundary { name, occurrence } => write!(f, "{name}#{occurrence}"),
        }
    }
}

#[derive(Debug)]
struct KillState {
    point: Option<KillPoint>,
    ops: AtomicU64,
    boundary_counts: Mutex<std::collections::HashMap<&'static str, u64>>,
    trace: Option<Mutex<std::fs::File>>,
}

impl KillState {
    /// Counts one mutating op; aborts the process if it is the kill point.
    fn before(&self, boundary: Boundary, op: OpKind, path: &Path) -> u64 {
        assert!(op != OpKind::Read && op != OpKind::Metadata, "only a mutating op is a kill point");
        debug_assert!(path.file_name().is_some(), "a mutating op names an entry: {path:?}");
        let index = self.ops.fetch_add(1, Ordering::SeqCst);
        let occurrence = {
            let mut counts = self.boundary_counts.lock().unwrap_or_else(PoisonError::into_inner);
            let count = counts.entry(boundary.name()).or_insert(0);
            *count += 1;
            *count
        };
        if let Some(trace) = &self.trace {
            let mut trace = trace.lock().unwrap_or_else(PoisonError::into_inner);
            // One write per line on an O_APPEND file: lines from this process never interleave.
            // A failure to trace must not change what the traced process does, so it is ignored.
            let _ =
                trace.write_all(format!("{index} {boundary} {op} {}\n", path.display()).as_bytes());
        }
        let hit = match &self.point {
            Some(KillPoint::OpIndex(at)) => *at == index,
            Some(KillPoint::Boundary { name, occurrence: at }) => {
                name == boundary.name() && *at == occurrence
            }
            None => false,
        };
        if hit {
            eprintln!("spex: aborting before op {index} at boundary {boundary} ({KILL_AT_ENV})");
            std::process::abort();
        }
        index
    }
}

/// A wrapper over any [`Fs`] that aborts the process at a [`KillPoint`].
#[derive(Debug, Clone)]
pub struct KillFs<F> {
    inner: F,
    state: Arc<KillState>,
}

impl<F: Fs> KillFs<F> {
    /// Wraps `inner`, aborting at `point` (if any) and tracing to `trace` (if any).
    pub fn new(inner: F, point: Option<KillPoint>, trace: Option<&Path>) -> std::io::Result<Self> {
        assert!(
            point.as_ref().is_none_or(|point| match point {
                KillPoint::OpIndex(_) => true,
                KillPoint::Boundary { name, occurrence } => !name.is_empty() && *occurrence >= 1,
            }),
            "a kill point names an op index or a boundary's occurrence from 1"
        );
        let trace = match trace {
            Some(path) => {
                Some(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(path)?))
            }
            None => None,
        };
        Ok(KillFs {
            inner,
            state: Arc::new(KillState {
                point,
                ops: AtomicU64::new(0),
                boundary_counts: Mutex::new(std::collections::HashMap::new()),
                trace,
            }),
        })
    }

    /// Wraps `inner` as configured by `SPEX_KILL_AT` and `SPEX_KILL_TRACE`; with neither set
    /// the wrapper only counts. Fails on a malformed kill point or an unopenable trace file.
    pub fn from_env(inner: F) -> std::result::Result<Self, String> {
        let point = match std::env::var(KILL_AT_ENV) {
            Ok(value) => Some(
                value.parse::<KillPoint>().map_err(|error| format!("{KILL_AT_ENV}: {error}"))?,
            ),
            Err(std::env::VarError::NotPresent) => None,
            Err(error) => return Err(format!("{KILL_AT_ENV}: {error}")),
        };
        let trace = std::env::var_os(KILL_TRACE_ENV);
        let fs = KillFs::new(inner, point, trace.as_deref().map(Path::new))
            .map_err(|error| format!("{KILL_TRACE_ENV}: cannot open trace file: {error}"))?;
        debug_assert_eq!(fs.op_count(), 0, "a new wrapper has counted no op");
        Ok(fs)
    }

    /// How many mutating ops have been issued through this wrapper.
    pub fn op_count(&self) -> u64 {
        self.state.ops.load(Ordering::SeqCst)
    }

    /// The wrapped filesystem.
    pub fn inner(&self) -> &F {
        &self.inner
    }
}

/// An open file of a [`KillFs`].
#[derive(Debug)]
pub struct KillFile<T> {
    inner: T,
    state: Arc<KillState>,
}

impl<F: Fs> Fs for KillFs<F> {
    type File = KillFile<F::File>;

    fn open(&self, path: &Path, options: OpenOptions, boundary: Boundary) -> Result<Self::File> {
        if options.mutates() {
            self.state.before(boundary, OpKind::Open, path);
        }
        let inner = self.inner.open(path, options, boundary)?;
        assert_eq!(inner.path(), path, "a file opened keeps the path it was opened by");
        Ok(KillFile { inner, state: Arc::clone(&self.state) })
    }

    fn rename(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()> {
        debug_assert_ne!(from, to, "a rename moves a file between two names");
        self.state.before(boundary, OpKind::Rename, to);
        self.inner.rename(from, to, boundary)
    }

    fn hard_link(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()> {
        debug_assert_ne!(from, to, "a hard link gives a file a second name");
        self.state.before(boundary, OpKind::HardLink, to);
        self.inner.hard_link(from, to, boundary)
    }

    fn remove_file(&self, path: &Path, boundary: Boundary) -> Result<()> {
        let index = self.state.before(boundary, OpKind::RemoveFile, path);
        self.inner.remove_file(path, boundary)?;
        debug_assert!(self.op_count() > index, "an op is counted before it runs");
        Ok(())
    }

    fn create_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        let index = self.state.before(boundary, OpKind::CreateDir, path);
        self.inner.create_dir(path, boundary)?;
        debug_assert!(self.op_count() > index, "an op is counted before it runs");
        Ok(())
    }

    fn remove_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        let index = self.state.before(boundary, OpKind::RemoveDir, path);
        self.inner.remove_dir(path, boundary)?;
        debug_assert!(self.op_count() > index, "an op is counted before it runs");
        Ok(())
    }

    fn sync_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        let index = self.state.before(boundary, OpKind::SyncDir, path);
        self.inner.sync_dir(path, boundary)?;
        debug_assert!(self.op_count() > index, "an op is counted before it runs");
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let entries = self.inner.read_dir(path)?;
        debug_assert!(
            entries.iter().all(|entry| !entry.name.is_empty() && !entry.name.contains('/')),
            "a listing names entries, each one component"
        );
        Ok(entries)
    }

    fn metadata(&self, path: &Path) -> Result<Metadata> {
        self.inner.metadata(path)
    }

    fn process_id(&self) -> u32 {
        let pid = self.inner.process_id();
        assert_ne!(pid, 0, "a running process has an id");
        pid
    }

    fn machine_id(&self) -> u64 {
        self.inner.machine_id()
    }

    fn process_start_ms(&self, pid: u32) -> Result<Option<u64>> {
        self.inner.process_start_ms(pid)
    }
}

impl<T: File> File for KillFile<T> {
    fn path(&self) -> &Path {
        let path = self.inner.path();
        debug_assert!(!path.as_os_str().is_empty(), "an open file has a path");
        path
    }

    fn append(&self, data: &[u8], boundary: Boundary) -> Result<()> {
        self.state.before(boundary, OpKind::Append, self.inner.path());
        self.inner.append(data, boundary)?;
        // Files only grow under the store's locks; a truncation is a recovery's, under one too.
        debug_assert!(
            self.inner.len().is_ok_and(|len| len >= data.len() as u64),
            "an append leaves its bytes in the file"
        );
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8], boundary: Boundary) -> Result<()> {
        self.state.before(boundary, OpKind::WriteAt, self.inner.path());
        self.inner.write_at(offset, data, boundary)?;
        debug_assert!(
            self.inner.len().is_ok_and(|len| len >= offset + data.len() as u64),
            "a write extends its file to at least its end"
        );
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let read = self.inner.read_at(offset, buf)?;
        assert!(read <= buf.len(), "a read fills at most its buffer");
        Ok(read)
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64, boundary: Boundary) -> Result<()> {
        let index = self.state.before(boundary, OpKind::SetLen, self.inner.path());
        self.inner.set_len(len, boundary)?;
        debug_assert!(
            self.state.ops.load(Ordering::SeqCst) > index,
            "an op is counted before it runs"
        );
        Ok(())
    }

    fn sync_data(&self, boundary: Boundary) -> Result<()> {
        let index = self.state.before(boundary, OpKind::SyncData, self.inner.path());
        self.inner.sync_data(boundary)?;
        debug_assert!(
            self.state.ops.load(Ordering::SeqCst) > index,
            "an op is counted before it runs"
        );
        Ok(())
    }

    fn sync_all(&self, boundary: Boundary) -> Result<()> {
        let index = self.state.before(boundary, OpKind::SyncAll, self.inner.path());
        self.inner.sync_all(boundary)?;
        debug_assert!(
            self.state.ops.load(Ordering::SeqCst) > index,
            "an op is counted before it runs"
        );
        Ok(())
    }

    fn try_lock(&self) -> Result<bool> {
        self.inner.try_lock()
    }

    fn unlock(&self) -> Result<()> {
        self.inner.unlock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_point_parses_indices_and_boundaries() {
        assert_eq!("12".parse(), Ok(KillPoint::OpIndex(12)));
        assert_eq!(
            "send.log.sync".parse(),
            Ok(KillPoint::Boundary { name: "send.log.sync".into(), occurrence: 1 })
        );
        assert_eq!(
            "send.log.sync#3".parse(),
            Ok(KillPoint::Boundary { name: "send.log.sync".into(), occurrence: 3 })
        );
        assert!("send.log.sync#0".parse::<KillPoint>().is_err());
        assert!("".parse::<KillPoint>().is_err());
        for text in ["7", "a.b#2"] {
            assert_eq!(
                text.parse::<KillPoint>().map(|point| point.to_string()),
                Ok(text.to_owned())
            );
        }
    }
}
