//! Benchmarks of spex, side by side with SQLite and the fsync floor (see `BENCHMARKS.md`).
//!
//! - [`floor`]: the same bytes as the engine's format written with raw syscalls and the fewest
//!   syncs the format needs: the physical limit of the format on this disk.
//! - [`sqlite`]: what a user would pick instead: SQLite (bundled), WAL, `synchronous=FULL`, each
//!   transition in one transaction.
//! - [`fixture`]: large logs in the engine's format, written directly (sending a gigabyte
//!   through durable sends would take hours), and the same rows in SQLite.
//! - [`stats`]: medians and percentiles.

pub mod fixture;
pub mod floor;
pub mod plot;
pub mod sqlite;
pub mod stats;

use std::path::Path;
use std::sync::Arc;

use faultfs::RealFs;
use spex_engine::timeline::{Line, SentEvent};
use spex_engine::{Config, Store};

/// Opens the engine's store at `root` on real files, as the CLI does.
pub fn open_store(root: &Path) -> Store<RealFs> {
    Store::open(
        RealFs,
        root,
        Arc::new(spex_engine::env::SystemClock),
        Arc::new(spex_engine::env::RandomIds),
        Config::default(),
    )
    .expect("the bench store opens")
}

/// The text of benchmark message `i`: about 100 bytes, like a short human message.
pub fn message(i: u64) -> String {
    format!(
        "benchmark message {i:08}: please look at the failing test in the parser and report back"
    )
}

/// A `sent` line as the engine writes it, for a message with id `mid`.
pub fn sent_line(ts: &str, mid: &str, text: &str) -> Vec<u8> {
    Line::Sent(
        SentEvent {
            ts: ts.to_owned(),
            mid: Some(mid.to_owned()),
            text: text.to_owned(),
            from: None,
            reply_via: None,
        },
        None,
    )
    .encode()
}
