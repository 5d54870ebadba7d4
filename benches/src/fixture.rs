//! Large logs in the engine's format, and the same rows in SQLite.
//!
//! The session is created by the engine and receives one real keyed send first (so its receipt
//! sits at the very start of the log, behind everything else); then numbered segments up to the
//! 4 MiB bound are written directly with the engine's own line encoder: mostly `sent` lines of
//! about 200 bytes, one in ten keyed (with a receipt), one in twenty a `status` event.

use std::io::{BufWriter, Write as _};
use std::path::Path;

use rusqlite::{Connection, params};
use spex_engine::layout::{Layout, SEGMENT_BYTES_DEFAULT};
use spex_engine::timeline::{Delivery, Line, Receipt, SentEvent, StatusEvent};
use spex_engine::{Key, SegmentNo, SendRequest, SessionId, Status, Triple};

use crate::{message, open_store};

/// The operation and key of the fixture's one real keyed send.
pub const FIXTURE_OPERATION: &str = "bench";
/// The key of the fixture's one real keyed send.
pub const FIXTURE_KEY: &str = "fixture-key";

/// The fixture's real keyed send (replaying it is the receipt lookup benchmark).
pub fn keyed_request() -> SendRequest {
    SendRequest {
        text: message(0),
        key: Some(Key { operation: FIXTURE_OPERATION.to_owned(), key: FIXTURE_KEY.to_owned() }),
        ..SendRequest::default()
    }
}

/// What a fixture holds.
#[derive(Clone, Copy, Debug)]
pub struct Built {
    /// Log bytes.
    pub bytes: u64,
    /// Lines.
    pub lines: u64,
    /// Numbered segments.
    pub segments: u64,
}

/// The `i`-th fixture line.
pub fn line(i: u64) -> Line {
    let ts = spex_engine::env::format_ts(1_700_000_000_000 + i);
    if i % 20 == 19 {
        let status = if i % 40 == 39 { Status::Idle } else { Status::Active };
        return Line::Status(StatusEvent { ts, triple: Triple::new(status, None, None) });
    }
    let mid = format!("00000000-0000-4000-8000-{i:012}");
    let text = message(i);
    let receipt = (i % 10 == 3).then(|| {
        Box::new(Receipt {
            operation: FIXTURE_OPERATION.to_owned(),
            request_digest: format!("{i:064x}"),
            payload_hash: format!("{:064x}", i + 1),
            delivery: Some(Delivery { text: text.clone(), from: None, attributes: None }),
        })
    });
    Line::Sent(SentEvent { ts, mid: Some(mid), text, from: None, reply_via: None }, receipt)
}

/// Inserts fixture lines `0..count` into `connection`'s timeline for `id`, then checkpoints, so
/// the bulk load's dirty pages do not stall the syncs measured later.
fn mirror(connection: &mut Connection, id: &SessionId, count: u64) -> rusqlite::Result<()> {
    connection.pragma_update(None, "synchronous", "OFF")?;
    let transaction = connection.transaction()?;
    {
        let mut insert =
            transaction.prepare("INSERT INTO timeline(session, line) VALUES (?1, ?2)")?;
        for i in 0..count {
            let encoded = line(i).encode();
            insert
                .execute(params![id.as_str(), std::str::from_utf8(&encoded).unwrap_or_default()])?;
        }
    }
    transaction.commit()?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
}

/// Creates session `id` under `root` with a log of about `bytes` bytes; mirrors every line into
/// `sqlite`'s timeline table when given.
pub fn build(
    root: &Path,
    id: &SessionId,
    bytes: u64,
    sqlite: Option<&mut Connection>,
) -> std::io::Result<Built> {
    let store = open_store(root);
    store
        .create_session(id, &Triple::new(Status::Active, None, None), None, None)
        .map_err(std::io::Error::other)?;
    store.send(id, &keyed_request()).map_err(std::io::Error::other)?;
    let layout = Layout::new(root);
    let mut built = Built { bytes: 0, lines: 1, segments: 1 };
    let mut i = 0;
    while built.bytes < bytes {
        built.segments += 1;
        let path = layout.segment(id, SegmentNo(built.segments));
        let file = std::fs::File::create(&path)?;
        let mut writer = BufWriter::with_capacity(1 << 20, &file);
        let mut segment_bytes = 0;
        loop {
            let encoded = line(i).encode();
            if segment_bytes + encoded.len() as u64 > SEGMENT_BYTES_DEFAULT || built.bytes >= bytes
            {
                break;
            }
            writer.write_all(&encoded)?;
            segment_bytes += encoded.len() as u64;
            built.bytes += encoded.len() as u64;
            built.lines += 1;
            i += 1;
        }
        writer.flush()?;
        drop(writer);
        file.sync_all()?;
    }
    if let Some(connection) = sqlite {
        mirror(connection, id, i).map_err(std::io::Error::other)?;
    }
    std::process::Command::new("sync").status()?;
    std::fs::File::open(layout.timeline_dir(id))?.sync_all()?;
    Ok(built)
}

/// Creates `sessions` sessions under `root`, each with a log of `events` fixture lines written
/// directly into its first segment (records through the engine).
pub fn many_sessions(root: &Path, sessions: u64, events: u64) -> std::io::Result<()> {
    let store = open_store(root);
    let layout = Layout::new(root);
    for s in 0..sessions {
        let id = SessionId::new(&format!("s{s:06}")).map_err(std::io::Error::other)?;
        store
            .create_session(&id, &Triple::new(Status::Active, None, None), None, None)
            .map_err(std::io::Error::other)?;
        std::fs::create_dir_all(layout.timeline_dir(&id))?;
        let mut bytes = Vec::new();
        for e in 0..events {
            let mut line = line(s * 1_000 + e);
            if let Line::Sent(sent, _) = &mut line {
                sent.text = varied_text(s * 1_000 + e);
            }
            bytes.extend_from_slice(&line.encode());
        }
        std::fs::write(layout.segment(&id, SegmentNo(1)), bytes)?;
    }
    std::process::Command::new("sync").status()?;
    Ok(())
}

/// A message of about 100 bytes with eight words drawn from a vocabulary of 5,000 (`w0000` to
/// `w4999`), so a word matches about one message in 600, as in a varied real corpus.
pub fn varied_text(i: u64) -> String {
    let mut state = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut words = Vec::with_capacity(8);
    for _ in 0..8 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        words.push(format!("w{:04}", state % 5_000));
    }
    format!("please look at {} and report back on {}", words[..4].join(" "), words[4..].join(" "))
}
