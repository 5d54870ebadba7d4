//! Session history across harnesses: the transcripts Claude Code and the Codex CLI write, and the
//! sessions OpenCode keeps in its database, are the durable truth of what an agent was asked and
//! answered. This crate finds them (`discover`), reads them as they grow (`read`: complete lines
//! only, from a byte offset, bounded memory; `opencode`: a session's rows rendered as lines),
//! parses each harness's records into one event model (`parse`, `event`) and redacts every
//! rendered text (`redact`).
//!
//! Crash story: none to tell of its own. It never writes: transcripts belong to the harness, which
//! may be appending while they are read (OpenCode's database is opened read-only); a line without its newline is not read until it is
//! complete, so a reader never acts on half a record. Whatever is built from them is derived and
//! rebuilt from the transcripts.

pub mod discover;
pub mod event;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod opencode;
pub mod parse;
pub mod read;
pub mod redact;
pub mod state;

pub use discover::{DEVICE_ID_ENV, Device, Found, Root, discover, git_root};
pub use event::{Event, Harness, Kind, Lifecycle};
pub use parse::{Meta, Parser, Reading};
pub use read::{open_regular, read_chunk, read_from};
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
    /// OpenCode's database could not be read.
    #[error("cannot read the OpenCode database {}: {source}", path.display())]
    Database {
        /// The database.
        path: PathBuf,
        /// The error.
        source: rusqlite::Error,
    },
}

/// One history session: a transcript, what it says about itself, and its events digested.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The transcript.
    pub found: Found,
    /// What it says about its session.
    pub meta: Meta,
    /// What its events say.
    pub digest: Digest,
}

/// What a transcript's events say about its session, folded event by event: a whole read and
/// the index (which continues it from its watermark) keep the same digest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Digest {
    /// The first and last timestamps of its events.
    pub first: Option<String>,
    pub last: Option<String>,
    /// The last activity: the last message a person typed.
    pub last_activity: Option<String>,
    /// The first line of the first message a person typed (its title), at most
    /// [`TITLE_BYTES_MAX`] bytes.
    pub title: Option<String>,
    /// Events by kind.
    pub counts: std::collections::BTreeMap<String, u64>,
    /// Unknown record kinds, counted.
    pub unknown: std::collections::BTreeMap<String, u64>,
    /// Where the session stands, as far as its events tell.
    pub signals: Signals,
}

/// The longest title kept.
pub const TITLE_BYTES_MAX: usize = 200;

impl Digest {
    /// Continues the digest with `events` (those after the ones already folded).
    pub fn fold(&mut self, events: &[Event]) {
        self.signals.fold(events);
        for event in events {
            *self.counts.entry(event.kind.name().to_owned()).or_default() += 1;
            if let Kind::Unknown { kind } = &event.kind {
                *self.unknown.entry(kind.clone()).or_default() += 1;
            }
            if let Some(ts) = &event.ts {
                if self.first.is_none() {
                    self.first = Some(ts.clone());
                }
                self.last = Some(ts.clone());
            }
            if let Kind::User { text } = &event.kind {
                if self.title.is_none() {
                    self.title = Some(title_of(text));
                }
                if event.ts.is_some() {
                    self.last_activity.clone_from(&event.ts);
                }
            }
        }
    }
}

/// A title: the first non-blank line of a prompt, at most [`TITLE_BYTES_MAX`] bytes, cut from the
/// prompt redacted whole (credentials: a cut inside a key would keep its rest without the prefix
/// redaction anchors on; local identity is redacted where the title is shown).
fn title_of(text: &str) -> String {
    let text = redact(text, &Identity::default());
    let line = text.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    let mut end = line.len().min(TITLE_BYTES_MAX);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}

/// Reads a whole transcript and digests it.
pub fn summarize(found: &Found) -> Result<(Summary, Vec<Event>), Error> {
    let read = read_from(&found.path, found.harness, 0, 0)?;
    let mut digest = Digest::default();
    digest.fold(&read.events);
    Ok((Summary { found: found.clone(), meta: read.meta.clone(), digest }, read.events))
}
