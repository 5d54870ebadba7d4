//! The spex engine: a session's record, timeline and delivery queue, and the transitions over
//! them (DESIGN.md sections 3 and 4).
//!
//! All storage goes through [`faultfs::Fs`]; time and ids are injected ([`env`]), so a run on
//! `faultfs::SimFs` is deterministic from one seed. Each module's header states its file's
//! format, durability guarantee and recovery rule.

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
pub mod fuzz;
mod group;
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
pub use layout::{SegmentNo, SessionId};
pub use lifecycle::{Applied, Lifecycle};
pub use receipts::Known;
pub use record::Record;
pub use request::{Accepted, Key, SendRequest};
pub use store::{Config, Page, SessionSummary, Signature, Store};
pub use timeline::{Cursor, Event, Position, Proposal, Stamp, Status, Triple};
