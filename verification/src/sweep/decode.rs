//! The oracle's own reading of a store, written from the format in DESIGN.md section 3 and the
//! digest encoding the README documents, without the engine's line, record, queue or digest
//! code. The checks read the store through this, so a bug in the engine's decoder (one that takes
//! a damaged line in the middle of a log, and everything after it, for a torn tail, say) cannot
//! hide from the rules that use the decoder to judge it.
//!
//! What it accepts, and nothing more:
//!
//! - segments: `timeline.ndjson` (legacy) first, then `timeline/<12 digits>.ndjson` in number
//!   order; every line a JSON object with a known `kind`;
//! - a torn tail only at the end of the newest segment: an unterminated end, and before it the
//!   damaged lines (NUL bytes, or stale bytes that are no line of the format) that only damaged
//!   lines follow; a damaged line with a sound one after it, or damage in a sealed segment, is
//!   corruption, reported with the file and byte offset;
//! - the close ledger: its sound lines' `target.id`, a torn tail left out;
//! - the queue: `pending.json`, a JSON array of entries, absent when nothing is owed;
//! - the record: `session.json`, of which the public triple and `archived` (the original of
//!   `launch_readiness_pending` while a launch is in flight) and `worktree_path` are read, `''`
//!   being none.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use faultfs::{FileKind, Fs};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// A keyed send's receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Receipt {
    pub(crate) request_digest: String,
    pub(crate) text: String,
}

/// One timeline line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Status { status: String, proposal: Option<String>, note: Option<String> },
    Sent { mid: String, text: String, from: Option<String>, receipt: Option<Receipt> },
    Settled { request_digest: String, mid: String },
}

/// One queue entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) mid: String,
    pub(crate) text: String,
    pub(crate) from: Option<String>,
    pub(crate) keyed: bool,
}

/// What the oracle reads of a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) status: String,
    pub(crate) proposal: Option<String>,
    pub(crate) note: Option<String>,
    pub(crate) archived: bool,
    pub(crate) worktree: Option<String>,
    /// While a launch is in flight (a fence with its frozen original): the record's own
    /// status, proposal, note and archived flag, which the launch declares if it succeeds.
    pub(crate) launching: Option<(String, Option<String>, Option<String>, bool)>,
}

fn session_dir(root: &Path, id: &str) -> PathBuf {
    root.join("sessions").join(id)
}

fn read_optional<F: Fs>(fs: &F, path: &Path) -> Result<Option<Vec<u8>>, String> {
    match fs.read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(None),
        Err(error) => Err(format!("reading {}: {error}", path.display())),
    }
}

/// The session ids with a directory under `sessions/`.
pub(crate) fn sessions<F: Fs>(fs: &F, root: &Path) -> Result<Vec<String>, String> {
    match fs.read_dir(&root.join("sessions")) {
        Ok(entries) => Ok(entries
            .into_iter()
            .filter(|entry| entry.kind == FileKind::Dir)
            .map(|entry| entry.name)
            .collect()),
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(Vec::new()),
        Err(error) => Err(format!("listing sessions: {error}")),
    }
}

/// Every line of session `id`'s log, in order, without its torn tail.
pub(crate) fn lines<F: Fs>(fs: &F, root: &Path, id: &str) -> Result<Vec<Line>, String> {
    let dir = session_dir(root, id);
    let mut segments = Vec::new();
    let legacy = dir.join("timeline.ndjson");
    if let Some(bytes) = read_optional(fs, &legacy)? {
        segments.push((legacy, bytes));
    }
    let timeline = dir.join("timeline");
    let mut numbered = Vec::new();
    match fs.read_dir(&timeline) {
        Ok(entries) => {
            for entry in entries {
                let number = entry
                    .name
                    .strip_suffix(".ndjson")
                    .filter(|stem| stem.len() == 12 && stem.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|stem| stem.parse::<u64>().ok());
                if let Some(number) = number {
                    numbered.push((number, timeline.join(&entry.name)));
                }
            }
        }
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {}
        Err(error) => return Err(format!("listing {}: {error}", timeline.display())),
    }
    numbered.sort();
    for (_, path) in numbered {
        let bytes =
            read_optional(fs, &path)?.ok_or_else(|| format!("{} vanished", path.display()))?;
        segments.push((path, bytes));
    }
    let mut lines = Vec::new();
    let count = segments.len();
    for (index, (path, bytes)) in segments.iter().enumerate() {
        let newest = index + 1 == count;
        let mut offset = 0usize;
        while offset < bytes.len() {
            let Some(length) = bytes[offset..].iter().position(|&b| b == b'\n') else {
                if newest {
                    break; // an unterminated final line: torn
                }
                return Err(format!("{} at byte {offset}: unterminated line", path.display()));
            };
            let body = &bytes[offset..offset + length];
            match parse_line(body) {
                Ok(line) if !body.contains(&0) => lines.push(line),
                // Damaged lines with only damaged lines after them: the torn tail.
                _ if newest && only_damaged(&bytes[offset..]) => break,
                Ok(_) => return Err(format!("{} at byte {offset}: NUL bytes", path.display())),
                Err(reason) => {
                    return Err(format!("{} at byte {offset}: {reason}", path.display()));
                }
            }
            offset += length + 1;
        }
    }
    Ok(lines)
}

/// Whether `rest` holds only damaged lines (NUL bytes, or not a line of the format) and perhaps
/// an unterminated end.
fn only_damaged(rest: &[u8]) -> bool {
    rest.split_inclusive(|&b| b == b'\n').filter(|line| line.ends_with(b"\n")).all(|line| {
        let body = &line[..line.len() - 1];
        body.contains(&0) || parse_line(body).is_err()
    })
}

fn text(object: &Map<String, Value>, key: &str) -> Result<String, String> {
    object.get(key).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| format!("no {key}"))
}

fn optional_text(object: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => Ok(Some(value.clone())),
        Some(other) => Err(format!("{key} is {other}")),
    }
}

/// A line's bytes and what they parse to (hashed fast: the lines are what the engine wrote).
type ParsedLines = HashMap<Box<[u8]>, Result<Line, String>, foldhash::fast::FixedState>;

thread_local! {
    /// Lines parsed on this thread, by their bytes: a sweep decodes the same lines in image
    /// after image, and a line's parse depends on its bytes alone. Cleared when it grows past
    /// [`PARSED_LINES_MAX`].
    static PARSED: RefCell<ParsedLines> = RefCell::new(HashMap::default());
}

/// The most lines [`PARSED`] remembers per thread.
const PARSED_LINES_MAX: usize = 1 << 16;

fn parse_line(body: &[u8]) -> Result<Line, String> {
    if let Some(parsed) = PARSED.with(|parsed| parsed.borrow().get(body).cloned()) {
        return parsed;
    }
    let parsed = parse_line_uncached(body);
    PARSED.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.len() >= PARSED_LINES_MAX {
            cache.clear();
        }
        cache.insert(body.into(), parsed.clone());
    });
    parsed
}

fn parse_line_uncached(body: &[u8]) -> Result<Line, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|error| format!("not JSON: {error}"))?;
    let object = value.as_object().ok_or("not an object")?;
    text(object, "ts")?;
    match text(object, "kind")?.as_str() {
        "status" => Ok(Line::Status {
            status: text(object, "status")?,
            proposal: optional_text(object, "proposal")?,
            note: optional_text(object, "note")?,
        }),
        "sent" => {
            let receipt = match object.get("dispatchReceipt") {
                None | Some(Value::Null) => None,
                Some(Value::Object(receipt)) => {
                    let delivery = receipt
                        .get("delivery")
                        .and_then(Value::as_object)
                        .ok_or("a receipt without delivery")?;
                    Some(Receipt {
                        request_digest: text(receipt, "requestDigest")?,
                        text: text(delivery, "text")?,
                    })
                }
                Some(other) => return Err(format!("dispatchReceipt is {other}")),
            };
            Ok(Line::Sent {
                mid: text(object, "mid")?,
                text: text(object, "text")?,
                from: optional_text(object, "from")?,
                receipt,
            })
        }
        "dispatch-settled" => Ok(Line::Settled {
            request_digest: text(object, "requestDigest")?,
            mid: text(object, "mid")?,
        }),
        other => Err(format!("unknown kind {other:?}")),
    }
}

/// Session `id`'s delivery queue (empty when `pending.json` is absent).
pub(crate) fn queue<F: Fs>(fs: &F, root: &Path, id: &str) -> Result<Vec<Entry>, String> {
    let path = session_dir(root, id).join("pending.json");
    let Some(bytes) = read_optional(fs, &path)? else { return Ok(Vec::new()) };
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|error| format!("{}: not JSON: {error}", path.display()))?;
    let entries = value.as_array().ok_or_else(|| format!("{}: not an array", path.display()))?;
    entries
        .iter()
        .map(|entry| {
            let object = entry.as_object().ok_or("an entry that is not an object")?;
            Ok(Entry {
                mid: text(object, "mid")?,
                text: text(object, "text")?,
                from: optional_text(object, "from")?,
                keyed: object.get("dispatch").is_some_and(|dispatch| !dispatch.is_null()),
            })
        })
        .collect::<Result<_, String>>()
        .map_err(|reason| format!("{}: {reason}", path.display()))
}

/// Session `id`'s record, or `None` without one.
pub(crate) fn record<F: Fs>(fs: &F, root: &Path, id: &str) -> Result<Option<Record>, String> {
    let path = session_dir(root, id).join("session.json");
    let Some(bytes) = read_optional(fs, &path)? else { return Ok(None) };
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|error| format!("{}: not JSON: {error}", path.display()))?;
    let object = value.as_object().ok_or_else(|| format!("{}: not an object", path.display()))?;
    // While a resume is in flight, readers see the fence's frozen original.
    let fenced = matches!(object.get("launch_readiness_pending"), Some(Value::Object(_)));
    let public = match object.get("launch_readiness_pending") {
        Some(Value::Object(fence)) => fence
            .get("original")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("{}: a launch fence without an original", path.display()))?,
        _ => object,
    };
    let none_if_empty = |value: Option<String>| value.filter(|value| !value.is_empty());
    let archived = |fields: &serde_json::Map<String, Value>| {
        fields.get("archived").and_then(Value::as_bool).unwrap_or(false)
    };
    let read = || -> Result<Record, String> {
        Ok(Record {
            status: text(public, "status")?,
            proposal: none_if_empty(optional_text(public, "proposal")?),
            note: none_if_empty(optional_text(public, "note")?),
            archived: archived(public),
            worktree: none_if_empty(optional_text(object, "worktree_path")?),
            launching: match fenced {
                true => Some((
                    text(object, "status")?,
                    none_if_empty(optional_text(object, "proposal")?),
                    none_if_empty(optional_text(object, "note")?),
                    archived(object),
                )),
                false => None,
            },
        })
    };
    read().map(Some).map_err(|reason| format!("{}: {reason}", path.display()))
}

/// The ids the close ledger (`session-close-ledger.ndjson`) records as closed: of each line
/// that parses as a JSON object, `target.id` (or `id`, the earlier format). Damaged final lines
/// (not JSON, NUL bytes, an unterminated end) with only damaged lines after them are a torn tail
/// and left out; a damaged line before a sound one is corruption.
pub(crate) fn ledger_ids<F: Fs>(fs: &F, root: &Path) -> Result<Vec<String>, String> {
    let path = root.join("session-close-ledger.ndjson");
    let Some(bytes) = read_optional(fs, &path)? else { return Ok(Vec::new()) };
    let mut ids = Vec::new();
    let mut damaged: Option<usize> = None;
    let mut offset = 0;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        let at = offset;
        offset += line.len();
        let parsed = line
            .strip_suffix(b"\n")
            .filter(|body| !body.contains(&0))
            .and_then(|body| serde_json::from_slice::<Value>(body).ok())
            .filter(Value::is_object);
        let Some(value) = parsed else {
            damaged.get_or_insert(at);
            continue;
        };
        if let Some(first) = damaged {
            return Err(format!(
                "{}: damaged line at byte {first} before a sound one",
                path.display()
            ));
        }
        if let Some(id) =
            value.pointer("/target/id").or_else(|| value.get("id")).and_then(Value::as_str)
        {
            ids.push(id.to_owned());
        }
    }
    Ok(ids)
}

/// `requestDigest` of (operation, key), from the documented encoding: SHA-256 over the domain
/// tag `spex.request-digest.v1`, the operation and the key, each framed by its length in bytes
/// (u64, big-endian).
pub(crate) fn request_digest(operation: &str, key: &str) -> String {
    let mut hasher = Sha256::new();
    for field in [b"spex.request-digest.v1".as_slice(), operation.as_bytes(), key.as_bytes()] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field);
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultfs::{Boundary, FaultPlan, File, OpenOptions, SimFs};

    const B: Boundary = Boundary::new("test");

    fn store_with(segments: &[&[u8]]) -> SimFs {
        let fs = SimFs::new(FaultPlan::none(1));
        for dir in ["/r", "/r/sessions", "/r/sessions/s", "/r/sessions/s/timeline"] {
            fs.create_dir(Path::new(dir), B).expect("a fresh directory");
        }
        for (index, bytes) in segments.iter().enumerate() {
            let path = format!("/r/sessions/s/timeline/{:012}.ndjson", index + 1);
            let file = fs.open(Path::new(&path), OpenOptions::create_new(), B).expect("a file");
            file.append(bytes, B).expect("a write");
        }
        fs
    }

    const STATUS: &[u8] =
        b"{\"ts\":\"2026-07-16T00:00:00.000Z\",\"kind\":\"status\",\"status\":\"active\",\"proposal\":null,\"note\":null}\n";

    #[test]
    fn only_the_end_of_the_newest_segment_may_be_torn() {
        let root = Path::new("/r");
        let torn = [STATUS, b"{\"ts\":\"2026"].concat();
        let fs = store_with(&[STATUS, &torn]);
        assert_eq!(lines(&fs, root, "s").expect("a torn tail is tolerated").len(), 2);
        let fs = store_with(&[&torn, STATUS]);
        let error = lines(&fs, root, "s").expect_err("a sealed segment is never torn");
        assert!(error.contains("000000000001.ndjson at byte"), "{error}");
        let damaged = [STATUS, b"{\"ts\0\0\0\n"].concat();
        let fs = store_with(&[&damaged]);
        assert_eq!(lines(&fs, root, "s").expect("NUL damage at the end is torn").len(), 1);
        let damaged_middle = [b"{\"ts\0\0\0\n".as_slice(), STATUS].concat();
        let fs = store_with(&[&damaged_middle]);
        let error = lines(&fs, root, "s").expect_err("damage before the end is corruption");
        assert!(error.contains("at byte 0"), "{error}");
    }

    #[test]
    fn the_request_digest_follows_the_documented_encoding() {
        // Cross-checked against the engine here, in a test only: the oracle never calls it.
        assert_eq!(
            request_digest("sweep", "k1"),
            spex_engine::digest::request_digest("sweep", "k1")
        );
        assert_ne!(request_digest("swee", "pk1"), request_digest("sweep", "k1"));
    }
}
