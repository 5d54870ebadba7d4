//! Entry points for fuzzing the parsers of untrusted bytes (feature `fuzzing`; the fuzz targets
//! under `fuzz/` call these). Each takes arbitrary bytes and panics only when a property the
//! parser promises is broken; a parser's refusal is never a failure.
//!
//! The committed seed corpus and every crash the fuzzers found (`fuzz/corpus/<target>/`) are
//! replayed by this module's test on every test run, so a fixed crash stays fixed.

use std::path::Path;
use std::sync::Arc;

use faultfs::{FaultPlan, File as _, Fs as _, OpenOptions, SimFs};

use crate::env::{ManualClock, SeededIds};
use crate::layout::{Layout, SessionId};
use crate::record::Record;
use crate::timeline::{Line, Status, Triple};
use crate::{Config, Key, SendRequest, Store};

/// A timeline line: what decodes encodes back to itself; a line recovered from a torn fragment
/// is a complete line that starts inside the input.
pub fn timeline_line(data: &[u8]) {
    if let Ok(line) = Line::decode(data) {
        let bytes = line.encode();
        let reread = Line::decode(&bytes[..bytes.len() - 1]);
        assert_eq!(reread.as_ref(), Ok(&line), "a decoded line encodes back to itself");
    } else if let Some((start, line)) = crate::timeline::line::glued(data) {
        assert!(0 < start && start < data.len(), "a recovered line starts inside the input");
        assert_eq!(Line::decode(&data[start..]).as_ref(), Ok(&line), "it is the input's rest");
        let encoded = line.encode();
        assert!(Line::decode(&encoded[..encoded.len() - 1]).is_ok(), "it is a complete line");
    }
}

/// A session record: what parses is written as a projection that parses to the same record (the
/// projection is a fixed point: reading and rewriting a record changes nothing more).
pub fn record(data: &[u8]) {
    let path = Path::new("/store/sessions/s/session.json");
    if let Ok(record) = Record::parse(data, path) {
        let written = record.encode();
        let reread = Record::parse(&written, path).expect("a written record parses");
        assert_eq!(reread.encode(), written, "rewriting a record is a fixed point");
        assert_eq!(reread.public_fields(), record.public_fields(), "the public record is kept");
        assert_eq!(reread.triple(), record.triple());
        assert_eq!(reread.session_id(), record.session_id());
    }
}

/// A delivery queue: the one-pass reader agrees with the entry-by-entry one; the valid entries,
/// written back, read back as exactly those entries with no damage.
pub fn queue(data: &[u8]) {
    crate::queue::check_agreement(data);
    let file = crate::queue::parse(data);
    assert!(file.damage.is_some() || data.iter().any(|b| !b.is_ascii_whitespace()));
    if !file.entries.is_empty() {
        let reread = crate::queue::parse(&crate::queue::encode(&file.entries));
        assert_eq!(reread.damage, None, "a written queue is sound");
        assert_eq!(reread.entries, file.entries, "a written queue keeps its entries");
    }
}

/// A session id: an accepted id names exactly one directory under `sessions/`, itself.
pub fn session_id(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(id) = SessionId::new(text) {
        assert_eq!(id.as_str(), text);
        let layout = Layout::new("/store");
        let dir = layout.session_dir(&id);
        assert_eq!(dir.parent(), Some(layout.sessions_dir().as_path()), "{text:?} stays inside");
        assert_eq!(dir.file_name().and_then(|name| name.to_str()), Some(text));
        assert!(!text.contains(['/', '\0', '\\']) && text != "." && text != "..");
    }
}

/// The keyed sends the receipt-index target's store holds, and the answers the log gives.
struct ReceiptWorld {
    fs: SimFs,
    id: SessionId,
    /// `(request_digest, mid)` of every keyed send.
    sent: Vec<(String, String)>,
    /// The persisted index the engine wrote.
    persisted: Vec<u8>,
}

const RECEIPT_OPERATION: &str = "fuzz";

fn open(fs: &SimFs) -> Store<SimFs> {
    let store = Store::open(
        fs.clone(),
        "/store",
        Arc::new(ManualClock::new(1_784_160_000_000)),
        Arc::new(SeededIds::new(7)),
        Config { drain_retry_delay_ms: 0, ..Config::default() },
    )
    .expect("a simulated store opens");
    assert_eq!(store.layout().root(), std::path::Path::new("/store"), "the world's store");
    store
}

/// A new world for every input (a simulated store is cheap), so an input replays alone exactly
/// as it ran.
fn receipt_world() -> ReceiptWorld {
    let fs = SimFs::new(FaultPlan::none(1));
    let store = open(&fs);
    let id = SessionId::new("s").expect("a valid id");
    store
        .create_session(&id, &Triple::new(Status::Active, None, None), None, None)
        .expect("a session is created");
    let mut sent = Vec::new();
    for key in ["a", "b", "c"] {
        let request = SendRequest {
            text: format!("message {key}"),
            key: Some(Key { operation: RECEIPT_OPERATION.to_owned(), key: key.to_owned() }),
            ..SendRequest::default()
        };
        let accepted = store.send(&id, &request).expect("a keyed send");
        sent.push((crate::digest::request_digest(RECEIPT_OPERATION, key), accepted.mid));
    }
    let (digest, _) = &sent[0];
    store.receipt(&id, RECEIPT_OPERATION, digest).expect("a lookup");
    let persisted = crate::atomic::read(&fs, &store.layout().receipt_index(&id))
        .expect("the index reads")
        .expect("the keyed sends persisted the index");
    assert!(
        sent.iter().all(|(_, mid)| !mid.is_empty()) && persisted.len() >= 4096,
        "three keyed messages, and a persisted index of a header and a block at least"
    );
    ReceiptWorld { fs, id, sent, persisted }
}

/// Writes `bytes` as the session's persisted receipt index.
fn plant_index(world: &ReceiptWorld, bytes: &[u8]) {
    let path = Layout::new("/store").receipt_index(&world.id);
    let file = world
        .fs
        .open(&path, OpenOptions::create_truncate(), faultfs::Boundary::new("fuzz.index"))
        .expect("the index file opens");
    file.write_at(0, bytes, faultfs::Boundary::new("fuzz.index.write")).expect("it is written");
    assert_eq!(file.len().ok(), Some(bytes.len() as u64), "the planted index is the input whole");
}

/// The persisted receipt index, with its checksums made valid (so the fuzzer reaches what is
/// behind them): a lookup never fails because of it, never answers a mid the log does not give
/// that key, never finds a key the log does not hold, and an index that is not pinned to this
/// very log (its header's pin matches the log at its cursor) never changes an answer.
pub fn receipt_index(data: &[u8]) {
    let world = receipt_world();
    let mut bytes = data.to_vec();
    crate::receipts::fix_checksums(&mut bytes);
    plant_index(&world, &bytes);
    let layout = Layout::new("/store");
    assert!(
        crate::receipts::pinned(&world.fs, &layout, &world.id, &world.persisted),
        "the engine's own run is pinned to its log"
    );
    let pinned = crate::receipts::pinned(&world.fs, &layout, &world.id, &bytes);
    // A new handle: the in-memory index of an earlier one would hide the file.
    let store = open(&world.fs);
    for (digest, mid) in &world.sent {
        let known = store
            .receipt(&world.id, RECEIPT_OPERATION, digest)
            .expect("a damaged or foreign index is rebuilt, never an error");
        let answered = known.map(|known| known.mid);
        if pinned {
            // A forged run may hide a receipt; it can never give it another message's id.
            assert!(answered.is_none() || answered.as_ref() == Some(mid), "the log's mid");
        } else {
            assert_eq!(answered.as_ref(), Some(mid), "the log's answer");
        }
    }
    let unknown = crate::digest::request_digest(RECEIPT_OPERATION, "never sent");
    let known = store.receipt(&world.id, RECEIPT_OPERATION, &unknown).expect("never an error");
    assert_eq!(known, None, "no receipt the log does not hold");
}

/// A fuzz target: arbitrary bytes in, a panic only when a promised property breaks.
pub type Target = fn(&[u8]);

/// Every target by its name under `fuzz/corpus/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("timeline_line", timeline_line),
    ("record", record),
    ("queue", queue),
    ("session_id", session_id),
    ("receipt_index", receipt_index),
];

#[cfg(test)]
mod tests {
    /// The receipt-index property is not vacuous: a forged index pinned to the log is trusted
    /// (so the property must exempt it: a run without a record hides that receipt), and the same
    /// forgery unpinned never changes an answer.
    #[test]
    fn a_forged_index_changes_answers_only_when_pinned() {
        let world = super::receipt_world();
        // The run without its records: one data block of nothing is damage, so drop them all.
        let forged = crate::receipts::without_records(&world.persisted);
        let mut unpinned = forged.clone();
        crate::receipts::break_pin(&mut unpinned);
        super::receipt_index(&unpinned);
        super::receipt_index(&forged);
        // Pinned, the forgery is believed: exactly what the property exempts.
        let world = super::receipt_world();
        let mut planted = forged.clone();
        crate::receipts::fix_checksums(&mut planted);
        super::plant_index(&world, &planted);
        let store = super::open(&world.fs);
        let (digest, _) = &world.sent[0];
        let known = store.receipt(&world.id, super::RECEIPT_OPERATION, digest).expect("lookup");
        assert_eq!(known, None, "a pinned run that lacks a receipt hides it");
    }

    /// Replays the committed corpus of every target: its seeds and every crash found.
    #[test]
    #[expect(
        clippy::disallowed_methods,
        reason = "the corpus is a real directory of the repository"
    )]
    fn the_committed_corpus_holds() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        for (name, target) in super::TARGETS {
            let dir = root.join(name);
            let mut inputs = 0;
            for entry in
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            {
                let path = entry.expect("a corpus entry").path();
                let data = std::fs::read(&path).expect("a corpus file reads");
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name}: {} breaks its property", path.display());
                inputs += 1;
            }
            assert!(inputs > 0, "{name} has a seed corpus");
        }
    }
}
