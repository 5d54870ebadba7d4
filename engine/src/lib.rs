//! The spex engine: a session's record, timeline and delivery queue, and the transitions over
//! them (DESIGN.md sections 3 and 4). All storage goes through [`faultfs::Fs`]; time and ids
//! are injected.
//!
//! Not built yet: this crate holds the workspace's place for it. The engine issue delivers the
//! format, the transitions, recovery and locks.

pub use faultfs;
