//! The op trace: every mutating op, in order, with its boundary. Printable (one line per op) and
//! hashable, so two runs from the same seed can be compared bit for bit.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::Boundary;

/// The kind of a filesystem operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// Opening a file (a boundary when it creates or truncates).
    Open,
    /// Appending at the end of a file.
    Append,
    /// A positioned write.
    WriteAt,
    /// A positioned read.
    Read,
    /// Truncating or extending a file.
    SetLen,
    /// `fdatasync`.
    SyncData,
    /// `fsync`.
    SyncAll,
    /// Renaming a name.
    Rename,
    /// Binding a second name to a file.
    HardLink,
    /// Removing a file's name.
    RemoveFile,
    /// Creating a directory.
    CreateDir,
    /// Removing an empty directory.
    RemoveDir,
    /// `fsync` of a directory.
    SyncDir,
    /// Listing a directory.
    ReadDir,
    /// Reading metadata.
    Metadata,
    /// Taking or releasing an advisory lock.
    Lock,
}

impl OpKind {
    /// The op's short name, as printed in traces.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Open => "open",
            OpKind::Append => "append",
            OpKind::WriteAt => "write_at",
            OpKind::Read => "read",
            OpKind::SetLen => "set_len",
            OpKind::SyncData => "sync_data",
            OpKind::SyncAll => "sync_all",
            OpKind::Rename => "rename",
            OpKind::HardLink => "hard_link",
            OpKind::RemoveFile => "remove_file",
            OpKind::CreateDir => "create_dir",
            OpKind::RemoveDir => "remove_dir",
            OpKind::SyncDir => "sync_dir",
            OpKind::ReadDir => "read_dir",
            OpKind::Metadata => "metadata",
            OpKind::Lock => "lock",
        }
    }

    /// Whether this op is a sync (a barrier).
    pub const fn is_sync(self) -> bool {
        let sync = matches!(self, OpKind::SyncData | OpKind::SyncAll | OpKind::SyncDir);
        debug_assert!(!(sync && self.is_data_write()), "a barrier writes no data");
        sync
    }

    /// Whether this op writes file data.
    pub const fn is_data_write(self) -> bool {
        matches!(self, OpKind::Append | OpKind::WriteAt)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(!self.name().is_empty(), "every op has a printed name");
        f.pad(self.name())
    }
}

/// One mutating op as it was issued.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TraceEntry {
    /// Position among the mutating ops of the run (0-based); crash point `k` is "before op k".
    pub index: u64,
    /// The caller's name for this step.
    pub boundary: Boundary,
    /// What was done.
    pub op: OpKind,
    /// To what (for a rename, `from -> to`).
    pub target: String,
    /// Op-specific detail (offset and length, new length, ...), empty when there is none.
    pub detail: String,
    /// The outcome: `ok`, or the fault that was injected.
    pub outcome: &'static str,
}

impl fmt::Display for TraceEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(!self.outcome.is_empty(), "every op has an outcome");
        write!(
            f,
            "{:>5} {:<28} {:<11} {}",
            self.index,
            self.boundary.name(),
            self.op.name(),
            self.target
        )?;
        if !self.detail.is_empty() {
            write!(f, " {}", self.detail)?;
        }
        write!(f, " -> {}", self.outcome)
    }
}

/// The ordered list of mutating ops of a run. Each entry is shared with the copies of the trace
/// (a simulated machine copied at each op keeps the trace up to there), so a copy costs a
/// pointer per entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    entries: Vec<Arc<TraceEntry>>,
}

impl Trace {
    /// The entries, in issue order.
    pub fn entries(&self) -> &[Arc<TraceEntry>] {
        debug_assert!(
            self.entries.last().is_none_or(|last| last.index as usize >= self.entries.len() - 1),
            "a trace's entries are numbered among the run's ops"
        );
        &self.entries
    }

    /// Number of mutating ops recorded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no op was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn push(&mut self, entry: TraceEntry) {
        debug_assert!(!entry.outcome.is_empty(), "every op has an outcome");
        assert!(
            self.entries.last().is_none_or(|last| last.index < entry.index),
            "trace entries are in op order"
        );
        self.entries.push(Arc::new(entry));
    }

    /// SHA-256 over the printed trace, as lowercase hex. Equal hashes mean identical runs.
    pub fn hash_hex(&self) -> String {
        let mut hasher = Sha256::new();
        for entry in &self.entries {
            hasher.update(entry.to_string().as_bytes());
            hasher.update(b"\n");
        }
        let hex = hex::encode(hasher.finalize());
        debug_assert_eq!(hex.len(), 64, "a trace hash is 64 hex digits");
        hex
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(
            self.entries.is_sorted_by_key(|entry| entry.index),
            "a trace prints in op order"
        );

        for entry in &self.entries {
            writeln!(f, "{entry}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Trace, TraceEntry};
    use crate::{Boundary, OpKind};

    fn entry(index: u64) -> TraceEntry {
        TraceEntry {
            index,
            boundary: Boundary::new("test.write"),
            op: OpKind::Append,
            target: "/f".to_owned(),
            detail: String::new(),
            outcome: "ok",
        }
    }

    /// A trace that went back in time (a simulation bug: two ops with one index) stops the run
    /// at the write, not in a replay that no longer matches.
    #[test]
    #[should_panic(expected = "trace entries are in op order")]
    fn an_entry_out_of_op_order_is_refused() {
        let mut trace = Trace::default();
        trace.push(entry(0));
        trace.push(entry(1));
        trace.push(entry(1));
    }
}
