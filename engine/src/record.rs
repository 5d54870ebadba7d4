//! The record: `session.json`, a session's current authored state, in the existing spex's format.
//!
//! # Format
//!
//! A JSON object, pretty-printed with a 2-space indent, plus `"\n"`. A governed record (a board
//! session) holds every key of the existing implementation's projection, in its order, on every
//! write (see [`GOVERNED_KEYS`]); `''` stands for "none" in its string fields, `createdAt` is
//! epoch milliseconds, `sortkey` is a number or `''`, and `launch_readiness_pending` is `''` or
//! the fence of an in-flight resume (`{version: 1, startedAt, original: {status, proposal, note,
//! stopped, archived, cold_proof, adapter_recovery}}`), whose `original` is what every public
//! reader shows until the launch ends. The raw status `launch-queued` is `queued` with a launch
//! owner; an unknown status reads as `active` and an unknown proposal as none, as the existing
//! reader reads them.
//!
//! A runtime-owned record (`governed: false` with a `runtime_owner`) has a key set of its own;
//! it is rewritten in place, keeping its keys and their order.
//!
//! Keys this engine does not know are kept after the projection, in their order. The existing
//! implementation rebuilds its projection on every write and drops them, so nothing this engine
//! needs lives only there: the drain adapter spec is a file of its own (see `Store::adapter`).
//!
//! Records written by earlier versions of this engine (`id`, `worktree`, ISO `createdAt`,
//! `launchPending`, `updatedAt`, `archivedAt`) are read, and rewritten in the projection.
//!
//! # Durability and recovery
//!
//! Written by atomic replace (see `atomic`): a crash leaves the old record or the new one.
//! Lifecycle writes log their `status` event *before* replacing the record; the log is the
//! record's write-ahead log for the public triple, and recovery rolls a record that is behind its
//! last logged move forward (see `recover`).

use faultfs::Fs;
use serde_json::{Map, Value};

use crate::atomic;
use crate::env::{UnixMs, format_ts, parse_ts};
use crate::error::{CorruptReason, Error, Result};
use crate::layout::{SessionFiles, SessionId};
use crate::timeline::{Proposal, Status, Triple};

/// The keys of a governed record, in the order the existing implementation writes them.
/// `zcode_child_session_ids` and `base` are written only when present.
pub const GOVERNED_KEYS: [&str; 28] = [
    "session_id",
    "governed",
    "worktree_path",
    "branch",
    "node",
    "title",
    "name",
    "parent",
    "status",
    "proposal",
    "merges",
    "note",
    "sortkey",
    "createdAt",
    "harness",
    "harness_session_id",
    "stopped",
    "archived",
    "cold_proof",
    "adapter_recovery",
    "launcher",
    "launch_cmd",
    "launch_owner",
    "create_request_id",
    "create_payload_hash",
    "zcode_child_session_ids",
    "base",
    "launch_readiness_pending",
];

/// The keys that bind a session to the harness behind it: which harness, its own session id,
/// and how it was launched (`launcher`, `launch_cmd`). Writing them moves no triple and appends
/// no event.
pub const HARNESS_KEYS: [&str; 4] = ["harness", "harness_session_id", "launcher", "launch_cmd"];

/// Keys written only when set.
const OPTIONAL_KEYS: [&str; 2] = ["zcode_child_session_ids", "base"];

/// Keys of this engine's earlier record format, converted into the projection on a rewrite.
const EARLIER_KEYS: [&str; 6] =
    ["id", "worktree", "launchPending", "updatedAt", "archivedAt", "createdAtIso"];

/// The raw status of an owned launch queue: `queued`, with a `launch_owner`.
pub const LAUNCH_QUEUED: &str = "launch-queued";

/// The fields a launch readiness fence freezes, besides the triple.
const FROZEN_FLAGS: [&str; 4] = ["stopped", "archived", "cold_proof", "adapter_recovery"];

/// A session's record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    fields: Map<String, Value>,
}

impl Record {
    /// A new governed record for `id` in `triple`, with every key of the projection.
    pub fn new(id: &SessionId, triple: &Triple, now_ms: UnixMs, worktree: Option<&str>) -> Record {
        let mut fields = Map::new();
        fields.insert("session_id".to_owned(), Value::String(id.to_string()));
        fields.insert("governed".to_owned(), Value::Bool(true));
        fields.insert("worktree_path".to_owned(), Value::String(worktree.unwrap_or("").to_owned()));
        fields.insert("createdAt".to_owned(), Value::from(now_ms));
        let mut record = Record { fields };
        record.set_triple(triple);
        record.fields = record.projection();
        assert_eq!(record.session_id(), Some(id.as_str()), "a new record names its session");
        assert!(record.governed() && !record.runtime_owned(), "a new record is a board session");
        debug_assert!(record.check().is_ok(), "a new record is one the existing reader takes");
        record
    }

    /// Parses a record file. Corrupt (naming the file) when it is not a JSON object, carries no
    /// session id, or holds a launch fence or owned queue the existing reader refuses.
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
        record.check().map_err(corrupt)?;
        debug_assert!(record.session_id().is_some(), "a parsed record names its session");
        Ok(record)
    }

    fn check(&self) -> std::result::Result<(), String> {
        if self.session_id().is_none() {
            return Err("parsed, but carries no session_id: not a session record".to_owned());
        }
        if self.text("status") == Some(LAUNCH_QUEUED) && self.launch_owner().is_none() {
            return Err("an owned launch queue (launch-queued) without launch_owner".to_owned());
        }
        if let Some(children) = self.fields.get("zcode_child_session_ids")
            && !children.as_array().is_some_and(|ids| {
                ids.iter().all(|id| id.as_str().is_some_and(|id| !id.is_empty()))
            })
        {
            return Err("zcode_child_session_ids is not a list of session ids".to_owned());
        }
        self.fence()?;
        debug_assert!(self.session_id().is_some(), "a record that checks names its session");
        Ok(())
    }

    /// The record's bytes: pretty JSON, 2-space indent, trailing newline; a governed record in
    /// the projection's key order.
    pub fn encode(&self) -> Vec<u8> {
        let bytes = self.bytes();
        debug_assert!(
            Record::parse(&bytes, std::path::Path::new("session.json"))
                .is_ok_and(|decoded| decoded.bytes() == bytes),
            "an encoded record decodes to itself"
        );
        bytes
    }

    /// [`Record::encode`]'s bytes, unchecked.
    fn bytes(&self) -> Vec<u8> {
        let fields = if self.runtime_owned() { self.fields.clone() } else { self.projection() };
        let mut bytes = serde_json::to_vec_pretty(&fields).expect("a JSON map always serializes");
        bytes.push(b'\n');
        debug_assert!(
            bytes.starts_with(b"{") && bytes.ends_with(b"}\n"),
            "one object, one line end"
        );
        bytes
    }

    /// The governed projection: every key of [`GOVERNED_KEYS`] (the optional ones when present)
    /// with its value or its default, earlier-format keys converted, then unknown keys.
    fn projection(&self) -> Map<String, Value> {
        let mut out = Map::new();
        for key in GOVERNED_KEYS {
            let value = match key {
                "session_id" => Some(Value::String(self.session_id().unwrap_or("").to_owned())),
                "governed" => Some(Value::Bool(self.governed())),
                "worktree_path" => Some(Value::String(self.worktree().unwrap_or("").to_owned())),
                "createdAt" => Some(self.created_at_ms().map_or(Value::from(0), Value::from)),
                "launch_readiness_pending" => Some(match self.fields.get(key) {
                    Some(fence @ Value::Object(_)) => fence.clone(),
                    _ => match self.fields.get("launchPending") {
                        Some(Value::Object(frozen)) => self.fence_from_earlier(frozen),
                        _ => empty(),
                    },
                }),
                _ if OPTIONAL_KEYS.contains(&key) => self.fields.get(key).cloned(),
                _ => Some(match self.fields.get(key) {
                    Some(Value::Null) | None => default_of(key),
                    Some(value) => value.clone(),
                }),
            };
            if let Some(value) = value {
                out.insert(key.to_owned(), value);
            }
        }
        for (key, value) in &self.fields {
            if !GOVERNED_KEYS.contains(&key.as_str()) && !EARLIER_KEYS.contains(&key.as_str()) {
                out.insert(key.clone(), value.clone());
            }
        }
        let order: Vec<usize> = out
            .keys()
            .filter_map(|key| GOVERNED_KEYS.iter().position(|governed| governed == key))
            .collect();
        debug_assert!(
            order.is_sorted() && order.len() >= GOVERNED_KEYS.len() - OPTIONAL_KEYS.len(),
            "the projection holds every governed key, in order"
        );
        debug_assert!(
            !EARLIER_KEYS.iter().any(|key| out.contains_key(*key)),
            "the projection converts the earlier format's keys"
        );
        out
    }

    /// An earlier-format `launchPending` triple as a fence.
    fn fence_from_earlier(&self, frozen: &Map<String, Value>) -> Value {
        let mut original = Map::new();
        for key in ["status", "proposal", "note"] {
            original.insert(key.to_owned(), frozen.get(key).cloned().unwrap_or_else(empty));
        }
        self.freeze_flags(&mut original);
        assert_eq!(original.len(), 3 + FROZEN_FLAGS.len(), "a fence freezes the triple and flags");
        serde_json::json!({"version": 1, "startedAt": self.created_at_ms().unwrap_or(0), "original": original})
    }

    /// Adds the record's flags to a fence's `original`. A flag of the wrong type in the record
    /// is frozen as its default: a fence holds booleans and texts only, or no reader takes it.
    fn freeze_flags(&self, original: &mut Map<String, Value>) {
        for key in FROZEN_FLAGS {
            let value = match (key, self.fields.get(key)) {
                ("stopped" | "archived", Some(flag @ Value::Bool(_))) => flag.clone(),
                (
                    "cold_proof" | "adapter_recovery",
                    Some(text @ (Value::String(_) | Value::Null)),
                ) => text.clone(),
                _ => default_of(key),
            };
            original.insert(key.to_owned(), value);
        }
        debug_assert!(
            FROZEN_FLAGS.iter().all(|key| original.contains_key(*key)),
            "a fence freezes every flag"
        );
    }

    fn runtime_owned(&self) -> bool {
        let owned = self.fields.get("governed") == Some(&Value::Bool(false))
            && self.fields.contains_key("runtime_owner");
        debug_assert!(!(owned && self.governed()), "a runtime-owned record is no board session");
        owned
    }

    /// A string field, `''` read as none.
    fn text(&self, key: &str) -> Option<&str> {
        debug_assert!(!key.is_empty(), "a field has a name");
        self.fields.get(key).and_then(Value::as_str).filter(|text| !text.is_empty())
    }

    fn flag(&self, key: &str) -> bool {
        debug_assert!(FROZEN_FLAGS.contains(&key), "a flag is one a launch fence freezes");
        self.fields.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The session id the record names (`session_id`; `id` in this engine's earlier format).
    pub fn session_id(&self) -> Option<&str> {
        let id = self.text("session_id").or_else(|| self.text("id"));
        debug_assert!(id.is_none_or(|id| !id.is_empty()), "an empty session id is none");
        id
    }

    /// Whether a board session (`governed`; a record of this engine's earlier format, which
    /// had no such key, is one).
    pub fn governed(&self) -> bool {
        match self.fields.get("governed") {
            Some(value) => value.as_bool().unwrap_or(false),
            None => !self.fields.contains_key("session_id"),
        }
    }

    /// The launch readiness fence's frozen original, if a resume is in flight. An invalid fence
    /// is an error (the existing reader refuses such a record).
    fn fence(&self) -> std::result::Result<Option<&Map<String, Value>>, String> {
        let pending = match self.fields.get("launch_readiness_pending") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) if text.is_empty() => None,
            Some(pending) => Some(pending),
        };
        let Some(pending) = pending else {
            // The earlier format froze the triple alone; it becomes a fence on a rewrite, so it
            // must hold a triple a fence can (an empty object would not).
            return match self.fields.get("launchPending") {
                Some(Value::Object(frozen)) if frozen_triple_valid(frozen, true) => {
                    Ok(Some(frozen))
                }
                Some(Value::Object(_)) => Err("an invalid launchPending fence".to_owned()),
                _ => Ok(None),
            };
        };
        let invalid = || "an invalid launch_readiness_pending fence".to_owned();
        debug_assert!(!pending.is_null(), "a null fence is no fence");
        let original = pending.get("original").and_then(Value::as_object).ok_or_else(invalid)?;
        let text_or_null =
            |key: &str| matches!(original.get(key), Some(Value::String(_) | Value::Null));
        let valid = pending.get("version").and_then(Value::as_u64) == Some(1)
            && pending.get("startedAt").and_then(Value::as_f64).is_some_and(f64::is_finite)
            && frozen_triple_valid(original, false)
            && original.get("stopped").is_some_and(Value::is_boolean)
            && original.get("archived").is_some_and(Value::is_boolean)
            && text_or_null("cold_proof")
            && text_or_null("adapter_recovery");
        if valid { Ok(Some(original)) } else { Err(invalid()) }
    }

    /// The current (candidate) triple.
    pub fn triple(&self) -> Triple {
        let triple = triple_of(&self.fields);
        debug_assert_eq!(triple.note.as_deref(), self.text("note"), "the note reads as stored");
        triple
    }

    /// The triple a reader sees: the frozen original while a launch is in flight, else the
    /// current triple.
    pub fn public_triple(&self) -> Triple {
        let frozen = self.launch_pending();
        debug_assert!(
            frozen.is_some() == matches!(self.fence(), Ok(Some(_))),
            "a reader sees a frozen triple exactly while a valid fence stands"
        );
        frozen.unwrap_or_else(|| self.triple())
    }

    /// Sets the current triple. The raw status `launch-queued` stays while the status stays
    /// `queued`; any other status clears the launch owner.
    pub fn set_triple(&mut self, triple: &Triple) {
        let owned_queue = self.text("status") == Some(LAUNCH_QUEUED);
        if !(owned_queue && triple.status == Status::Queued) {
            self.fields.insert("status".to_owned(), Value::String(triple.status.name().to_owned()));
            if self.fields.contains_key("launch_owner") || !self.runtime_owned() {
                self.fields.insert("launch_owner".to_owned(), empty());
            }
        }
        self.fields.insert(
            "proposal".to_owned(),
            Value::String(triple.proposal.map_or("", Proposal::name).to_owned()),
        );
        self.fields
            .insert("note".to_owned(), Value::String(triple.note.clone().unwrap_or_default()));
        assert_eq!(
            self.triple(),
            Triple::new(triple.status, triple.proposal, triple.note.clone()),
            "a record reads back the triple set in it"
        );
    }

    /// The frozen triple, while a launch is in flight.
    pub fn launch_pending(&self) -> Option<Triple> {
        let frozen = self.fence().ok().flatten().map(triple_of);
        debug_assert!(
            frozen.is_none()
                || self.fields.contains_key("launch_readiness_pending")
                || self.fields.contains_key("launchPending"),
            "a frozen triple comes from a fence"
        );
        frozen
    }

    /// Freezes the current public state in a launch fence started at `now_ms`.
    pub fn begin_launch(&mut self, now_ms: UnixMs) {
        let mut original = Map::new();
        let triple = self.public_triple();
        original.insert("status".to_owned(), Value::String(triple.status.name().to_owned()));
        original.insert(
            "proposal".to_owned(),
            Value::String(triple.proposal.map_or("", Proposal::name).to_owned()),
        );
        original.insert("note".to_owned(), Value::String(triple.note.clone().unwrap_or_default()));
        self.freeze_flags(&mut original);
        self.fields.shift_remove("launchPending");
        self.fields.insert(
            "launch_readiness_pending".to_owned(),
            serde_json::json!({"version": 1, "startedAt": now_ms, "original": original}),
        );
        assert!(self.fence().is_ok_and(|fence| fence.is_some()), "a begun launch is fenced");
        assert_eq!(self.public_triple(), triple, "a launch fence freezes what readers saw");
    }

    /// Ends a launch: with `restore`, the frozen original comes back (a failed launch); either
    /// way the fence is cleared.
    pub fn end_launch(&mut self, restore: bool) {
        if restore && let Ok(Some(original)) = self.fence() {
            let original = original.clone();
            self.set_triple(&triple_of(&original));
            for key in FROZEN_FLAGS {
                if let Some(value) = original.get(key) {
                    let value = if value.is_null() { empty() } else { value.clone() };
                    self.fields.insert(key.to_owned(), value);
                }
            }
        }
        self.fields.shift_remove("launchPending");
        self.fields.insert("launch_readiness_pending".to_owned(), empty());
        assert!(self.launch_pending().is_none(), "an ended launch leaves no fence");
        assert_eq!(self.public_triple(), self.triple(), "with no fence, readers see the triple");
    }

    /// The worktree path, if the session has one (`worktree_path`; `worktree` earlier).
    pub fn worktree(&self) -> Option<&str> {
        let worktree = self.text("worktree_path").or_else(|| self.text("worktree"));
        debug_assert!(worktree.is_none_or(|path| !path.is_empty()), "an empty path is none");
        worktree
    }

    /// The harness (`''` reads as `claude`, as the existing reader reads it).
    pub fn harness(&self) -> &str {
        let harness = self.text("harness").unwrap_or("claude");
        debug_assert!(!harness.is_empty(), "a session always has a harness");
        harness
    }

    /// The title a person gave the session (`title`), if any and not blank.
    pub fn title(&self) -> Option<&str> {
        let title = self.fields.get("title").and_then(Value::as_str);
        let title = title.filter(|title| !title.trim().is_empty());
        debug_assert!(
            title.is_none_or(|title| title.chars().any(|c| !c.is_whitespace())),
            "a blank title is none"
        );

        title
    }

    /// The harness's own thread id.
    pub fn harness_session_id(&self) -> Option<&str> {
        self.binding("harness_session_id")
    }

    /// The launcher profile (`headless`, `pane`), set when a front end launched the harness.
    pub fn launcher(&self) -> Option<&str> {
        self.binding("launcher")
    }

    /// The launcher command pinned at creation (`claude`, `/opt/bin/codex`, ...).
    pub fn launch_cmd(&self) -> Option<&str> {
        self.binding("launch_cmd")
    }

    /// One of the harness binding's keys ([`HARNESS_KEYS`]), `''` read as none.
    fn binding(&self, key: &str) -> Option<&str> {
        debug_assert!(HARNESS_KEYS.contains(&key), "a binding key is one of the harness's");
        self.text(key)
    }

    /// Sets one of the harness binding's keys ([`HARNESS_KEYS`]) to `value`; returns whether
    /// the record changed. Any other key is refused.
    pub fn set_harness_field(&mut self, key: &str, value: &str) -> Result<bool> {
        if !HARNESS_KEYS.contains(&key) {
            return Err(crate::error::Error::InvalidInput {
                what: "harness binding",
                reason: format!("{key:?} is not one of {HARNESS_KEYS:?}"),
            });
        }
        let value = Value::String(value.to_owned());
        if self.fields.get(key) == Some(&value) {
            return Ok(false);
        }
        self.fields.insert(key.to_owned(), value.clone());
        assert_eq!(self.fields.get(key), Some(&value), "a binding reads back as set");
        Ok(true)
    }

    /// The branch.
    pub fn branch(&self) -> Option<&str> {
        let branch = self.text("branch");
        debug_assert!(branch.is_none_or(|name| !name.is_empty()), "an empty branch is none");
        branch
    }

    /// The owner of a queued launch (`launch-queued` only).
    pub fn launch_owner(&self) -> Option<&str> {
        if self.text("status") != Some(LAUNCH_QUEUED) {
            return None;
        }

        let owner = (self.fields.get("launch_owner").and_then(Value::as_str))
            .map(str::trim)
            .filter(|owner| !owner.is_empty());
        debug_assert!(owner.is_none_or(|owner| owner.trim() == owner), "an owner reads trimmed");
        owner
    }

    /// A flag as a public reader sees it (frozen while a launch is in flight).
    fn public_flag(&self, key: &str) -> bool {
        debug_assert!(FROZEN_FLAGS.contains(&key), "a public flag is one a fence freezes");
        match self.fence() {
            Ok(Some(original)) if original.contains_key(key) => {
                original.get(key).and_then(Value::as_bool).unwrap_or(false)
            }
            _ => self.flag(key),
        }
    }

    /// Whether the session is archived.
    pub fn archived(&self) -> bool {
        let archived = self.public_flag("archived");
        debug_assert!(
            !archived || self.fence().is_ok_and(|fence| fence.is_some()) || self.flag("archived"),
            "unfenced, a record is archived as its own flag says"
        );
        archived
    }

    /// Whether the session was stopped by a human.
    pub fn stopped(&self) -> bool {
        let stopped = self.public_flag("stopped");
        debug_assert!(
            !stopped || self.fence().is_ok_and(|fence| fence.is_some()) || self.flag("stopped"),
            "unfenced, a record is stopped as its own flag says"
        );
        stopped
    }

    /// Marks the session archived, with the cold proof the existing board requires.
    pub fn set_archived(&mut self) {
        let thread = self
            .harness_session_id()
            .map_or_else(|| "no-resident-ref".to_owned(), |thread| format!("thread:{thread}"));
        let proof = format!(
            "cold-v1|{}|{}|{thread}",
            self.harness(),
            self.session_id().unwrap_or_default()
        );
        self.fields.insert("stopped".to_owned(), Value::Bool(true));
        self.fields.insert("archived".to_owned(), Value::Bool(true));
        self.fields.insert("cold_proof".to_owned(), Value::String(proof));
        assert!(
            self.flag("archived") && self.flag("stopped") && self.text("cold_proof").is_some(),
            "an archived session is stopped, with its cold proof"
        );
    }

    /// `createdAt` in epoch milliseconds (a number; an ISO string in the earlier format).
    pub fn created_at_ms(&self) -> Option<UnixMs> {
        match self.fields.get("createdAt")? {
            Value::Number(number) => number
                .as_u64()
                .or_else(|| number.as_f64().filter(|ms| *ms >= 0.0).map(|ms| ms as u64)),
            Value::String(text) => parse_ts(text),
            _ => None,
        }
    }

    /// The board position: a finite numeric `sortkey` (floored), else `createdAt`.
    pub fn board_key(&self) -> i64 {
        let sortkey = self.fields.get("sortkey").and_then(Value::as_f64);
        let key = match sortkey.filter(|key| key.is_finite()) {
            Some(key) => key.floor() as i64,
            None => self.created_at_ms().map_or(0, |ms| i64::try_from(ms).unwrap_or(i64::MAX)),
        };
        debug_assert!(sortkey.is_some_and(f64::is_finite) || key >= 0, "a creation time is ≥ 0");
        key
    }

    /// `createdAt` as a store timestamp (UTC, ISO-8601, milliseconds).
    pub fn created_at(&self) -> Option<String> {
        let text = self.created_at_ms().filter(|ms| *ms > 0).map(format_ts);
        debug_assert!(
            text.as_deref().is_none_or(|text| parse_ts(text) == self.created_at_ms()),
            "a creation time reads back"
        );
        text
    }

    /// The drain adapter spec of this engine's earlier format (kept in the record).
    pub(crate) fn earlier_adapter(&self) -> Option<&str> {
        let spec = self.text("adapter");
        debug_assert!(spec.is_none_or(|spec| !spec.is_empty()), "an empty spec is none");
        spec
    }

    /// The record as a public reader sees it: while a launch is in flight, the frozen original
    /// in place of status, proposal, note, stopped, archived, cold_proof and adapter_recovery,
    /// and the fence cleared.
    pub fn public_fields(&self) -> Map<String, Value> {
        let mut fields = if self.runtime_owned() { self.fields.clone() } else { self.projection() };
        if let Ok(Some(original)) = self.fence() {
            for key in ["status", "proposal", "note"].into_iter().chain(FROZEN_FLAGS) {
                // As the existing reader projects it: an empty proposal or note is null; a
                // null proof or recovery is left out.
                match (key, original.get(key)) {
                    ("proposal" | "note", Some(Value::String(text))) if text.is_empty() => {
                        fields.insert(key.to_owned(), Value::Null);
                    }
                    ("cold_proof" | "adapter_recovery", Some(Value::Null) | None) => {
                        fields.shift_remove(key);
                    }
                    (_, Some(value)) => {
                        fields.insert(key.to_owned(), value.clone());
                    }
                    (_, None) => {}
                }
            }
            fields.insert("launch_readiness_pending".to_owned(), empty());
        }
        debug_assert!(
            fields
                .get("launch_readiness_pending")
                .is_none_or(|fence| *fence == empty() || fence.is_null()),
            "no public reader sees a fence"
        );
        fields
    }

    /// Every field, in order, as stored.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }
}

fn empty() -> Value {
    let none = Value::String(String::new());
    debug_assert!(none.as_str().is_some_and(str::is_empty), "'' stands for none");
    none
}

/// Whether a fence's frozen triple is one the existing reader takes: a known status, a known or
/// empty (or null) proposal, a text (or null) note; with `absent_ok` (this engine's earlier
/// format), a missing proposal or note is none.
fn frozen_triple_valid(original: &Map<String, Value>, absent_ok: bool) -> bool {
    let valid = original.get("status").and_then(Value::as_str).and_then(Status::parse).is_some()
        && match original.get("proposal") {
            None => absent_ok,
            Some(Value::Null) => true,
            Some(Value::String(name)) => name.is_empty() || Proposal::parse(name).is_some(),
            _ => false,
        }
        && match original.get("note") {
            None => absent_ok,
            Some(note) => matches!(note, Value::String(_) | Value::Null),
        };
    debug_assert!(!valid || absent_ok || original.len() >= 3, "a strict triple has its three keys");
    valid
}

/// The value a governed record's key takes when absent.
fn default_of(key: &str) -> Value {
    debug_assert!(GOVERNED_KEYS.contains(&key), "only a governed key has a default");
    match key {
        "merges" | "createdAt" => Value::from(0),
        "stopped" | "archived" => Value::Bool(false),
        "status" => Value::String("active".to_owned()),
        _ => empty(),
    }
}

/// The triple of a record or a fence's original, as the existing reader reads it: `launch-queued`
/// is `queued`, an unknown status is `active`, an unknown or empty proposal and an empty note
/// are none.
fn triple_of(fields: &Map<String, Value>) -> Triple {
    let status = match fields.get("status").and_then(Value::as_str) {
        Some(LAUNCH_QUEUED) => Status::Queued,
        Some(name) => Status::parse(name).unwrap_or(Status::Active),
        None => Status::Active,
    };
    let proposal = fields.get("proposal").and_then(Value::as_str).and_then(Proposal::parse);
    let note = fields.get("note").and_then(Value::as_str).map(str::to_owned);
    let triple = Triple::new(status, proposal, note);
    debug_assert!(
        triple.note.as_deref().is_none_or(|note| !note.is_empty()),
        "an empty note reads as none"
    );
    triple
}

/// Reads the session's record, or `None` if it has none (or no directory of its own: a link or
/// a file in the directory's place is refused, naming it).
pub(crate) fn read<F: Fs>(files: SessionFiles<'_, F>) -> Result<Option<Record>> {
    let (fs, layout, id) = (files.fs, files.layout, files.id);
    if !crate::layout::expect_kind(fs, &layout.session_dir(id), faultfs::FileKind::Dir)? {
        return Ok(None);
    }
    let path = layout.record(id);
    debug_assert!(
        crate::layout::lies_in(&path, layout.root()),
        "a record is in its session's directory"
    );
    match atomic::read(fs, &path)? {
        Some(bytes) => Ok(Some(Record::parse(&bytes, &path)?)),
        None => Ok(None),
    }
}

/// Replaces the session's record durably.
pub(crate) fn write<F: Fs>(
    files: SessionFiles<'_, F>,
    record: &Record,
    steps: &atomic::ReplaceBoundaries,
) -> Result<()> {
    let (layout, id) = (files.layout, files.id);
    let bytes = record.encode();
    debug_assert!(
        Record::parse(&bytes, &layout.record(id)).is_ok_and(|reread| reread.encode() == bytes),
        "a written record reads back as itself"
    );
    atomic::replace(
        files.fs,
        &layout.session_dir(id),
        &layout.record(id),
        &layout.record_tmp(id),
        &bytes,
        steps,
    )
}

/// The session's drain adapter spec (`exec:CMD`, `tmux:PANE`, `stdout`), if set: the file
/// `adapter` in its directory, or `record` of this engine's earlier format.
pub(crate) fn adapter<F: Fs>(
    files: SessionFiles<'_, F>,
    record: &Record,
) -> Result<Option<String>> {
    let spec = match atomic::read(files.fs, &files.layout.adapter(files.id))? {
        Some(bytes) => Some(String::from_utf8_lossy(&bytes).trim_end_matches('\n').to_owned()),
        None => record.earlier_adapter().map(str::to_owned),
    };
    debug_assert!(spec.as_ref().is_none_or(|spec| !spec.ends_with('\n')), "a spec is one line");
    Ok(spec)
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests: an index out of bounds fails the test")]
mod tests {
    use super::*;

    fn parse(text: &str) -> Record {
        Record::parse(text.as_bytes(), std::path::Path::new("s.json")).unwrap()
    }

    /// Every fence this engine writes is one it reads back: an earlier-format `launchPending`
    /// that holds no triple is refused (it would have become an unreadable fence), and flags of
    /// the wrong type are frozen as their defaults. Found by the `record` fuzz target.
    #[test]
    fn every_fence_written_reads_back() {
        let path = std::path::Path::new("s.json");
        let empty = br#"{"session_id":"s","governed":false,"launchPending":{}}"#;
        assert!(Record::parse(empty, path).is_err());
        let earlier = parse(
            r#"{"session_id":"s","status":"active","stopped":"yes","cold_proof":7,"launchPending":{"status":"parked"}}"#,
        );
        assert_eq!(earlier.public_triple(), Triple::new(Status::Parked, None, None));
        let reread = Record::parse(&earlier.encode(), path).unwrap();
        assert_eq!(reread.public_triple(), Triple::new(Status::Parked, None, None));
        assert_eq!(reread.fields()["launch_readiness_pending"]["original"]["stopped"], false);
        let mut launching = parse(r#"{"session_id":"s","status":"active","archived":1}"#);
        launching.begin_launch(5);
        assert!(Record::parse(&launching.encode(), path).is_ok(), "a fence begun reads back");
    }

    #[test]
    fn a_new_record_is_the_whole_projection_in_order() {
        let id = SessionId::new("s1").unwrap();
        let record = Record::new(&id, &Triple::new(Status::Active, None, None), 1_000, Some("/w"));
        let keys: Vec<&str> = record.fields().keys().map(String::as_str).collect();
        let expected: Vec<&str> =
            GOVERNED_KEYS.into_iter().filter(|key| !OPTIONAL_KEYS.contains(key)).collect();
        assert_eq!(keys, expected);
        assert_eq!(record.fields()["proposal"], "");
        assert_eq!(record.fields()["createdAt"], 1_000);
        assert_eq!(record.fields()["worktree_path"], "/w");
    }

    #[test]
    fn unknown_fields_survive_a_rewrite_after_the_projection() {
        let text = "{\n  \"session_id\": \"s\",\n  \"zeta\": 1,\n  \"status\": \"active\"\n}\n";
        let mut record = parse(text);
        record.set_triple(&Triple::new(Status::Awaiting, Some(Proposal::Merge), Some("ok".into())));
        let rewritten: Value = serde_json::from_slice(&record.encode()).unwrap();
        let keys: Vec<&String> = rewritten.as_object().unwrap().keys().collect();
        assert_eq!(keys.last().unwrap().as_str(), "zeta");
        assert_eq!(rewritten["proposal"], "merge");
    }

    #[test]
    fn empty_strings_are_none_and_unknown_values_read_as_the_existing_reader_reads_them() {
        let record = parse(r#"{"session_id":"s","status":"sleeping","proposal":"","note":""}"#);
        assert_eq!(record.triple(), Triple::new(Status::Active, None, None));
        let record = parse(
            r#"{"session_id":"s","status":"launch-queued","launch_owner":"http://x","proposal":"merge"}"#,
        );
        assert_eq!(record.triple().status, Status::Queued);
        assert_eq!(record.launch_owner(), Some("http://x"));
    }

    #[test]
    fn bad_records_are_corruption_naming_the_file() {
        for bad in [
            "[]",
            "{",
            "{}",
            r#"{"status":"active"}"#,
            r#"{"session_id":"s","status":"launch-queued","launch_owner":""}"#,
            r#"{"session_id":"s","launch_readiness_pending":{"version":2}}"#,
        ] {
            let error =
                Record::parse(bad.as_bytes(), std::path::Path::new("/s/session.json")).unwrap_err();
            assert!(error.to_string().contains("/s/session.json"), "{error}");
        }
    }
}
