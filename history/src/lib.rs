//! Session history across harnesses: the transcripts Claude Code and the Codex CLI write are the
//! durable truth of what an agent was asked and answered. This crate finds them (`discover`),
//! reads them as they grow (`read`: complete lines only, from a byte offset, bounded memory),
//! parses each harness's records into one event model (`parse`, `event`) and redacts every
//! rendered text (`redact`).
//!
//! Crash story: none to tell of its own. It never writes: transcripts belong to the harness, which
//! may be appending while they are read; a line without its newline is not read until it is
//! complete, so a reader never acts on half a record. Whatever is built from them is derived and
//! rebuilt from the transcripts.

pub mod discover;
pub mod event;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod parse;
pub mod read;
pub mod redact;
pub mod state;

pub use discover::{Device, Found, Root, discover, git_root};
pub use event::{Event, Harness, Kind, Lifecycle};
pub use parse::{Meta, Parser};
pub use read::{Read, read_chunk, read_from};
pub use redact::{Identity, redact};
pub use state::{Signal, Signals, State, state};

use std::path::PathBuf;

/// What can go wrong reading transcripts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One history session: a transcript, what it says about itself, and its events summarized.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The transcript.
    pub found: Found,
    /// What it says about its session.
    pub meta: Meta,
    /// The first and last timestamps of its events.
    pub first: Option<String>,
    pub last: Option<String>,
    /// The last activity: the last message a person typed.
    pub last_activity: Option<String>,
    /// The first message a person typed (its title).
    pub title: Option<String>,
    /// Events by kind.
    pub counts: std::collections::BTreeMap<&'static str, u64>,
    /// Unknown record kinds, counted.
    pub unknown: std::collections::BTreeMap<String, u64>,
}

/// Reads a whole transcript and summarizes it.
pub fn summarize(found: &Found) -> Result<(Summary, Vec<Event>), Error> {
    let read = read_from(&found.path, found.harness, 0, 0)?;
    let mut summary = Summary {
        found: found.clone(),
        meta: read.meta.clone(),
        first: None,
        last: None,
        last_activity: None,
        title: None,
        counts: std::collections::BTreeMap::new(),
        unknown: std::collections::BTreeMap::new(),
    };
    for event in &read.events {
        *summary.counts.entry(event.kind.name()).or_default() += 1;
        if let Kind::Unknown { kind } = &event.kind {
            *summary.unknown.entry(kind.clone()).or_default() += 1;
        }
        if let Some(ts) = &event.ts {
            if summary.first.is_none() {
                summary.first = Some(ts.clone());
            }
            summary.last = Some(ts.clone());
        }
        if let Kind::User { text } = &event.kind {
            if summary.title.is_none() {
                summary.title = Some(text.clone());
            }
            if let Some(ts) = &event.ts {
                summary.last_activity = Some(ts.clone());
            }
        }
    }
    Ok((summary, read.events))
}
