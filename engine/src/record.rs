//! The record: `session.json`, a session's current authored state.
//!
//! # Format
//!
//! A JSON object, pretty-printed with a 2-space indent, plus `"\n"`. Fields this engine reads
//! and writes: `id`, `status`, `proposal`, `note`, `createdAt`, `updatedAt`, `adapter` (the
//! drain adapter spec), `worktree` (a retired session's worktree is gone), `archived` and
//! `archivedAt`, and `launchPending` (the frozen pre-resume public triple while a launch is being
//! validated). Every other field is kept as it was, in its order, so records written by the
//! existing implementation round-trip.
//!
//! # Durability and recovery
//!
//! Written by atomic replace (see `atomic`): a crash leaves the old record or the new one.
//! Lifecycle writes log their `status` event *before* replacing the record; the log is the
//! record's write-ahead log for the public triple, and recovery rolls a record that is behind its
//! last logged move forward (see `store`).

use serde_json::{Map, Value};

use crate::env::{UnixMs, format_ts};
use crate::error::{CorruptReason, Error, Result};
use crate::layout::SessionId;
use crate::timeline::{Proposal, Status, Triple};

/// A session's record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    fields: Map<String, Value>,
}

impl Record {
    /// A new record for `id` in `triple`.
    pub fn new(id: &SessionId, triple: &Triple, now_ms: UnixMs) -> Record {
        let mut record = Record { fields: Map::new() };
        record.fields.insert("id".to_owned(), Value::String(id.to_string()));
        record.set_triple(triple);
        let now = Value::String(format_ts(now_ms));
        record.fields.insert("createdAt".to_owned(), now.clone());
        record.fields.insert("updatedAt".to_owned(), now);
        record
    }

    /// Parses a record file.
    pub fn parse(bytes: &[u8], path: &std::path::Path) -> Result<Record> {
        let corrupt = |why: String| Error::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            reason: CorruptReason::BadFile(why),
        };
        let value: Value =
            serde_json::from_slice(bytes).map_err(|error| corrupt(error.to_string()))?;
        let Value::Object(fields) = value else {
            return Err(corrupt("not a JSON object".to_owned()));
        };
        let record = Record { fields };
        record.triple_checked().map_err(corrupt)?;
        Ok(record)
    }

    /// The record's bytes: pretty JSON, 2-space indent, trailing newline.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes =
            serde_json::to_vec_pretty(&self.fields).expect("a JSON map always serializes");
        bytes.push(b'\n');
        bytes
    }

    fn triple_checked(&self) -> std::result::Result<Triple, String> {
        triple_of(&self.fields)
    }

    /// The current public triple.
    pub fn triple(&self) -> Triple {
        self.triple_checked().expect("records are validated when parsed or built")
    }

    /// The triple a reader of the log should see: the frozen pre-resume projection while a
    /// launch is pending, else the current triple.
    pub fn public_triple(&self) -> Triple {
        self.launch_pending().unwrap_or_else(|| self.triple())
    }

    /// Sets the current triple.
    pub fn set_triple(&mut self, triple: &Triple) {
        self.fields.insert("status".to_owned(), Value::String(triple.status.name().to_owned()));
        self.fields.insert(
            "proposal".to_owned(),
            triple
                .proposal
                .map_or(Value::Null, |proposal| Value::String(proposal.name().to_owned())),
        );
        self.fields
            .insert("note".to_owned(), triple.note.clone().map_or(Value::Null, Value::String));
    }

    /// The frozen pre-resume triple, while a launch is pending.
    pub fn launch_pending(&self) -> Option<Triple> {
        match self.fields.get("launchPending") {
            Some(Value::Object(frozen)) => triple_of(frozen).ok(),
            _ => None,
        }
    }

    /// Sets or clears the frozen pre-resume triple.
    pub fn set_launch_pending(&mut self, frozen: Option<&Triple>) {
        match frozen {
            Some(triple) => {
                let mut inner = Record { fields: Map::new() };
                inner.set_triple(triple);
                self.fields.insert("launchPending".to_owned(), Value::Object(inner.fields));
            }
            None => {
                self.fields.shift_remove("launchPending");
            }
        }
    }

    /// Stamps `updatedAt`.
    pub fn touch(&mut self, now_ms: UnixMs) {
        self.fields.insert("updatedAt".to_owned(), Value::String(format_ts(now_ms)));
    }

    /// The drain adapter spec (`exec:CMD`, `tmux:PANE`, `stdout`), if set.
    pub fn adapter(&self) -> Option<&str> {
        self.fields.get("adapter").and_then(Value::as_str)
    }

    /// Sets the drain adapter spec.
    pub fn set_adapter(&mut self, adapter: Option<&str>) {
        match adapter {
            Some(spec) => {
                self.fields.insert("adapter".to_owned(), Value::String(spec.to_owned()));
            }
            None => {
                self.fields.shift_remove("adapter");
            }
        }
    }

    /// The session's worktree path, if it has one.
    pub fn worktree(&self) -> Option<&str> {
        self.fields.get("worktree").and_then(Value::as_str)
    }

    /// Sets the worktree path.
    pub fn set_worktree(&mut self, worktree: Option<&str>) {
        if let Some(path) = worktree {
            self.fields.insert("worktree".to_owned(), Value::String(path.to_owned()));
        }
    }

    /// Whether the session was archived.
    pub fn archived(&self) -> bool {
        self.fields.get("archived").and_then(Value::as_bool).unwrap_or(false)
    }

    /// Marks the session archived.
    pub fn set_archived(&mut self, now_ms: UnixMs) {
        self.fields.insert("archived".to_owned(), Value::Bool(true));
        self.fields.insert("archivedAt".to_owned(), Value::String(format_ts(now_ms)));
    }

    /// `createdAt`, if present.
    pub fn created_at(&self) -> Option<&str> {
        self.fields.get("createdAt").and_then(Value::as_str)
    }

    /// Every field, in order.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }
}

fn triple_of(fields: &Map<String, Value>) -> std::result::Result<Triple, String> {
    let status = fields
        .get("status")
        .and_then(Value::as_str)
        .ok_or_else(|| "missing \"status\"".to_owned())?;
    let status = Status::parse(status).ok_or_else(|| format!("unknown status {status:?}"))?;
    let proposal = match fields.get("proposal") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => {
            Some(Proposal::parse(name).ok_or_else(|| format!("unknown proposal {name:?}"))?)
        }
        Some(other) => return Err(format!("proposal is not a string: {other}")),
    };
    let note = match fields.get("note") {
        None | Some(Value::Null) => None,
        Some(Value::String(note)) => Some(note.clone()),
        Some(other) => return Err(format!("note is not a string: {other}")),
    };
    Ok(Triple::new(status, proposal, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_their_order_survive_a_rewrite() {
        let text = "{\n  \"zeta\": 1,\n  \"status\": \"active\",\n  \"alpha\": {\n    \"x\": [\n      1\n    ]\n  },\n  \"proposal\": null,\n  \"note\": null\n}\n";
        let mut record = Record::parse(text.as_bytes(), std::path::Path::new("s.json")).unwrap();
        assert_eq!(String::from_utf8(record.encode()).unwrap(), text);
        record.set_triple(&Triple::new(Status::Awaiting, Some(Proposal::Merge), Some("ok".into())));
        let rewritten = String::from_utf8(record.encode()).unwrap();
        assert!(
            rewritten.starts_with("{\n  \"zeta\": 1,\n  \"status\": \"awaiting\""),
            "{rewritten}"
        );
    }

    #[test]
    fn bad_records_are_corruption_naming_the_file() {
        for bad in ["[]", "{", "{\"status\":\"sleeping\"}", "{}"] {
            let error =
                Record::parse(bad.as_bytes(), std::path::Path::new("/s/session.json")).unwrap_err();
            assert!(error.to_string().contains("/s/session.json"), "{error}");
        }
    }
}
