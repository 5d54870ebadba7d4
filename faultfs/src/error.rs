//! The one error type of `faultfs`: an I/O failure with the operation, path and boundary that
//! produced it, or the report that a simulated process has died.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Boundary, OpKind};

/// The result of every `faultfs` operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with the context needed to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operation failed (for real, or injected by a fault plan).
    #[error("{op} {path}{}: {source}", boundary.map(|b| format!(" at boundary {b}")).unwrap_or_default(), path = path.display())]
    Io {
        /// What was being done.
        op: OpKind,
        /// To what.
        path: PathBuf,
        /// The boundary of the failed op, for mutating ops.
        boundary: Option<Boundary>,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The simulated process crashed at this boundary; every later op fails the same way until
    /// the harness takes the crash images.
    #[error("simulated crash before op {op_index} at boundary {boundary}")]
    Crashed {
        /// The boundary at which the crash happened.
        boundary: Boundary,
        /// The index of the mutating op that never ran.
        op_index: u64,
    },
}

impl Error {
    /// An I/O error with its context.
    pub fn io(op: OpKind, path: &Path, boundary: Option<Boundary>, source: io::Error) -> Self {
        Error::Io { op, path: path.to_path_buf(), boundary, source }
    }

    /// The kind of the underlying I/O error, if this is one.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        let kind = match self {
            Error::Io { source, .. } => Some(source.kind()),
            Error::Crashed { .. } => None,
        };
        debug_assert!(kind.is_some() != self.is_crash(), "a crash is no I/O error");
        kind
    }

    /// Whether the underlying error is "no space left on device".
    pub fn is_no_space(&self) -> bool {
        let full = self.io_kind() == Some(io::ErrorKind::StorageFull);
        debug_assert!(!(full && self.is_crash()), "a full disk is no crash");
        full
    }

    /// Whether this is a simulated crash.
    pub fn is_crash(&self) -> bool {
        let crash = matches!(self, Error::Crashed { .. });
        debug_assert_ne!(crash, matches!(self, Error::Io { .. }), "a crash or an I/O error");
        crash
    }
}
