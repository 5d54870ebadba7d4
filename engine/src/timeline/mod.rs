//! The timeline: a session's append-only event log, split into immutable segments.
//!
//! # Format
//!
//! NDJSON, one event per `\n`-terminated line (see [`line`]). The legacy `timeline.ndjson` is
//! the first segment (read, never written); then `timeline/000000000001.ndjson`, ... in file-name
//! order. The directory listing is the only index.
//!
//! # Durability
//!
//! An append goes to the highest-numbered segment if it is empty or the line fits under the
//! bound, else to a new segment. The line is `fdatasync`ed before anything is acknowledged; a
//! new segment's directory is synced before its first line is acknowledged. A sealed segment is
//! never modified again.
//!
//! # Recovery (torn tails)
//!
//! Only the unsynced end of the newest segment can be damaged by a crash: an unterminated final
//! line, or (after a power loss that kept a later 512-byte chunk of the line but not an earlier
//! one) a final line holding NUL bytes, which valid JSON text never contains. Readers ignore such
//! a final line. The next writer, under the record lock, truncates it durably before appending,
//! so a partial line can never glue onto a new one. A line that does not parse anywhere else is
//! reported as corruption naming the file and byte offset; writers refuse to append after it.
//! The legacy segment, written by the existing implementation, gets the same tolerance for its
//! final line (it is never written here, so it is never repaired).

pub mod activity;
pub mod line;
mod read;
mod write;

pub use line::{
    Delivery, Event, Line, Proposal, Receipt, SentEvent, Settlement, Status, StatusEvent, Triple,
    display_word,
};
pub use read::{Cursor, Position, Stamp};
pub(crate) use read::{
    line_at, list_segments, page_lines, read_from, read_from_positioned, scan, segment_len, stamp,
    tail_lines, tail_lines_in,
};
pub(crate) use write::{LogBoundaries, append, append_or_cut_back, repair_torn_tail, vouch};
