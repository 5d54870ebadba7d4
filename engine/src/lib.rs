//! The spex engine: a session's record, timeline and delivery queue, and the transitions over
//! them (DESIGN.md sections 3 and 4).
//!
//! All storage goes through [`faultfs::Fs`]; time and ids are injected ([`env`]), so a run on
//! `faultfs::SimFs` is deterministic from one seed. Each module's header states its file's
//! format, durability guarantee and recovery rule.
//!
//! No code of the engine indexes or slices past a bound it has not checked
//! (`clippy::indexing_slicing` is denied): bytes read from disk are reached through `get`,
//! iterators and splits, and a field of a buffer the engine sized itself through a helper that
//! names the invariant. Tests and the fuzz entry points may index.
#![deny(clippy::indexing_slicing)]

mod atomic;
mod boundaries;
mod close;
pub mod damage;
pub mod digest;
mod doctor;
mod drain;
pub mod env;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[expect(clippy::indexing_slicing, reason = "fuzz entry points: a panic there is a finding")]
pub mod fuzz;
mod group;
mod id;
pub mod layout;
mod lifecycle;
pub mod lock;
pub mod mutant;
pub mod queue;
mod receipts;
pub mod record;
mod recover;
pub mod reply;
mod request;
pub mod runs;
mod send;
mod store;
pub(crate) mod sync;
pub mod timeline;

pub use close::Closure;
pub use damage::{Damage, DamageKind};
pub use doctor::QueueRepair;
pub use drain::{Adapter, DrainReport, DrainStop, Message};
pub use error::{CorruptReason, Error, Result};
pub use faultfs;
pub use id::InvalidId;
pub use layout::{SegmentNo, SessionId};
pub use lifecycle::{Applied, Lifecycle};
pub use receipts::{INDEX_BLOCKS, Known};
pub use record::Record;
pub use request::{Accepted, Key, SendRequest};
pub use store::{Config, Page, SessionSummary, Signature, Store};
pub use timeline::{Cursor, Event, Position, Proposal, Stamp, Status, Triple};
