//! The engine's one error type. Context travels in the error: what was being done, to what
//! file, at what byte offset.

use std::path::PathBuf;

/// The result of every engine operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a file is considered damaged.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptReason {
    /// A line that is not valid JSON of a known shape.
    BadLine(String),
    /// A line longer than the engine's limit.
    LineTooLong,
    /// A complete line holding NUL bytes where only the unsynced tail may be damaged.
    DamagedLine,
    /// A record or queue file that does not parse.
    BadFile(String),
    /// Something other than the store's own kind of entry where one belongs (a symbolic link).
    Unexpected(String),
    /// The log's segments are not what a log can be: one is missing, or is not a regular file.
    BadSegment(String),
    /// The segment shrank while it was read (a writer repaired its torn tail): the read is
    /// retried, and reported only if it keeps happening.
    Shrank,
}

impl std::fmt::Display for CorruptReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorruptReason::BadLine(why) => write!(f, "malformed line: {why}"),
            CorruptReason::LineTooLong => f.write_str("line longer than the limit"),
            CorruptReason::DamagedLine => {
                f.write_str("damaged line (NUL bytes) before the end of the log")
            }
            CorruptReason::BadFile(why) => write!(f, "malformed file: {why}"),
            CorruptReason::BadSegment(why) => write!(f, "damaged log: {why}"),
            CorruptReason::Unexpected(why) => f.write_str(why),
            CorruptReason::Shrank => f.write_str("the segment shrank while being read"),
        }
    }
}

/// What went wrong, with what a caller needs to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filesystem operation failed (the error names the op, path and boundary).
    #[error(transparent)]
    Io(#[from] faultfs::Error),
    /// A store file is damaged. Writers refuse to touch it; nothing is skipped silently.
    #[error("corrupt {path} at byte {offset}: {reason}", path = path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        reason: CorruptReason,
    },
    /// A lock is held by another process and the bounded wait ran out.
    #[error("{path} is locked by {}; gave up after {waited_ms} ms", holder.map_or_else(|| "another process".to_owned(), |pid| format!("pid {pid}")), path = path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, if it could be read.
        holder: Option<u32>,
        /// How long the wait lasted.
        waited_ms: u64,
    },
    /// An earlier write or sync of this session failed in this store handle; reopen the store
    /// (which runs recovery) to continue.
    #[error(
        "session {session} is poisoned by an earlier failed write or sync; reopen the store to recover"
    )]
    Poisoned {
        /// The session.
        session: crate::id::SessionId,
    },
    /// A keyed send reused a key with a different payload. Nothing was written.
    #[error(
        "idempotency key conflict for operation {operation:?}: the key was first used for message {mid} with a different payload; nothing was sent (use a new key for a new message)"
    )]
    KeyConflict {
        /// The operation.
        operation: String,
        /// The request digest (never the raw key).
        request_digest: String,
        /// The message the key was first used for.
        mid: String,
    },
    /// An input exceeds a limit.
    #[error("{what} is {bytes} bytes; the limit is {bytes_max}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The limit.
        bytes_max: u64,
    },
    /// A session id failed validation.
    #[error(transparent)]
    InvalidId(#[from] crate::id::InvalidId),
    /// An input value is invalid (not an id).
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// What was invalid.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// A configuration value is invalid.
    #[error("invalid {what}: {reason}")]
    InvalidConfig {
        /// The setting.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// No such session.
    #[error("no such session {id}")]
    NoSuchSession {
        /// The session id.
        id: crate::id::SessionId,
    },
    /// The session already exists.
    #[error("session {id} already exists")]
    SessionExists {
        /// The session id.
        id: crate::id::SessionId,
    },
    /// The session's worktree is gone: lifecycle writes are refused (sends are still recorded).
    #[error(
        "session {id} is retired (its worktree {worktree} is gone); lifecycle writes are refused"
    )]
    Retired {
        /// The session id.
        id: crate::id::SessionId,
        /// The missing worktree.
        worktree: String,
    },
    /// The sender was closed; its messages are refused.
    #[error("sender {sender} is closed (revoked); nothing was written")]
    Revoked {
        /// The revoked sender.
        sender: String,
    },
    /// A lifecycle write the current state does not allow.
    #[error("lifecycle write refused: {reason}")]
    Refused {
        /// Why.
        reason: String,
    },
    /// A follow cursor that does not point into this log.
    #[error("invalid cursor {cursor}: {reason}")]
    InvalidCursor {
        /// The cursor as given.
        cursor: String,
        /// Why it is invalid.
        reason: String,
    },
}

impl Error {
    /// Whether this error comes from a simulated crash (the process is gone).
    pub fn is_crash(&self) -> bool {
        let crash = matches!(self, Error::Io(error) if error.is_crash());
        debug_assert!(!(crash && self.is_no_space()), "a crash is no full disk");
        crash
    }

    /// Whether the underlying failure is "no space left on device".
    pub fn is_no_space(&self) -> bool {
        matches!(self, Error::Io(error) if error.is_no_space())
    }
}
