//! Receipt lookup for keyed sends and the drain's fence.
//!
//! An index of receipts (operation + request digest -> message id, frozen delivery, settled?)
//! folded from the log, kept in memory per handle and persisted per session in
//! `receipts.index.json` (a SHA-256 of the rest on its first line, then JSON with the cursor it
//! was folded to and a hash of the bytes just before it), so a new process does not re-read the
//! whole log either.
//!
//! Cost of a lookup: loading the persisted index (O(receipts)) once per handle, then reading only
//! the log bytes appended since its cursor (O(new bytes)). The index is rewritten once the lines
//! folded since its last write reach an eighth of its receipts (amortized O(1) per line). The index is derived data: it is
//! written without fsync (tmp + rename) and trusted only if its checksum holds (a power loss can
//! splice chunks of two versions into one that still parses) and its cursor still points into the log
//! and the bytes before it still hash the same; otherwise (lost, torn, stale, or a log that was
//! truncated and regrown after a power loss) it is rebuilt from the log, which costs one full
//! read and never a wrong answer. An index too large to load (over the state-file bound) is
//! treated the same way, and one that would be too large is not written: a new handle then folds
//! the log from the last copy that fit (see BENCHMARKS.md for where that starts). Lookups run under the record lock, after recovery, so every
//! line folded is complete.

use std::collections::HashMap;

use faultfs::{Boundary, File, Fs, OpenOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::atomic::{self, ReplaceBoundaries};
use crate::error::{Error, Result};
use crate::layout::{Layout, STATE_FILE_BYTES_MAX, SegmentNo, SessionId};
use crate::sync::{Mutex, lock};
use crate::timeline::{self, Cursor, Line, Receipt, SentEvent};

/// Format version of the persisted index.
const INDEX_VERSION: u32 = 2;
/// Bytes before the cursor whose hash pins the persisted index to the log it was folded from.
const TAIL_PIN_BYTES: u64 = 256;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Persisted {
    version: u32,
    segment: u64,
    offset: u64,
    index: u64,
    tail_sha256: String,
    receipts: Vec<PersistedReceipt>,
}

#[derive(Serialize, Deserialize)]
struct PersistedReceipt {
    mid: String,
    settled: bool,
    receipt: Receipt,
}

/// What the log says about one receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    /// The keyed message's id.
    pub mid: String,
    /// The receipt, from the first `sent` line carrying its operation and request digest.
    pub receipt: Receipt,
    /// Whether a `dispatch-settled` line names it (the adapter accepted it).
    pub settled: bool,
}

#[derive(Debug, Default)]
struct Index {
    cursor: Cursor,
    receipts: HashMap<(String, String), Known>,
    /// Lines folded since the index was last persisted.
    unpersisted_lines: u64,
}

/// The index is persisted again once the lines folded since it was last written reach an
/// eighth of its receipts: rewriting it costs O(receipts), so this keeps the write cost per
/// folded line constant, and a new handle folds at most that many lines past the persisted copy.
const PERSIST_EVERY_RECEIPTS_DIVISOR: u64 = 8;

/// The hash of the bytes before `cursor` in its segment: the whole last line before it, and at
/// least the last `TAIL_PIN_BYTES` (fewer only at the start of the segment).
pub(crate) fn tail_pin<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    cursor: Cursor,
) -> Result<Option<String>> {
    if cursor.offset == 0 {
        // A cursor at the start of a segment stands just past the end of the segment before
        // it: pin that one's last line. A power loss may take the new segment's name back, and
        // the writer then appends to the segment before it again; the pin must see that.
        if cursor.segment == 0
            || crate::mutant::active(crate::mutant::Mutant::EmptyPinAtSegmentStart)
        {
            return Ok(Some(String::new()));
        }
        let segments = timeline::list_segments(fs, layout, id)?;
        let previous =
            segments.iter().rfind(|segment| segment.no.map_or(0, |no| no.0) < cursor.segment);
        return match previous {
            None => Ok(Some(String::new())),
            Some(segment) => {
                let len = timeline::segment_len(fs, segment)?;
                let end = Cursor {
                    segment: segment.no.map_or(0, |no| no.0),
                    offset: len,
                    index: cursor.index,
                };
                if len == 0 { Ok(Some(String::new())) } else { tail_pin(fs, layout, id, end) }
            }
        };
    }
    let path = if cursor.segment == 0 {
        layout.legacy_segment(id)
    } else {
        layout.segment(id, SegmentNo(cursor.segment))
    };
    let file = match fs.open(&path, OpenOptions::read(), Boundary::new("read")) {
        Ok(file) => file,
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    if file.len()? < cursor.offset {
        return Ok(None);
    }
    // Read backward until the bytes hold the whole last line before the cursor (the byte just
    // before the cursor is that line's `\n`) and at least `TAIL_PIN_BYTES`. The whole line is
    // needed: two lines can end alike (a keyed send's receipt repeats the same delivery bytes),
    // while its start (time and mid) tells them apart.
    let mut start = cursor.offset;
    let mut bytes: Vec<u8> = Vec::new();
    loop {
        let take = TAIL_PIN_BYTES.max(4096).min(start);
        let mut block = vec![0u8; usize::try_from(take).unwrap_or(usize::MAX)];
        let mut filled = 0;
        while filled < block.len() {
            let read = file.read_at(start - take + filled as u64, &mut block[filled..])?;
            if read == 0 {
                return Ok(None);
            }
            filled += read;
        }
        start -= take;
        block.extend_from_slice(&bytes);
        bytes = block;
        let body = &bytes[..bytes.len().saturating_sub(1)];
        let line_found = body.contains(&b'\n') || start == 0;
        if (line_found && bytes.len() as u64 >= TAIL_PIN_BYTES.min(cursor.offset))
            || bytes.len() > crate::layout::LINE_BYTES_MAX + 1
        {
            break;
        }
    }
    let body = &bytes[..bytes.len().saturating_sub(1)];
    let line_start = body.iter().rposition(|&b| b == b'\n').map_or(0, |newline| newline + 1);
    let pinned_from = line_start.min(bytes.len().saturating_sub(TAIL_PIN_BYTES as usize));
    Ok(Some(hex::encode(Sha256::digest(&bytes[pinned_from..]))))
}

/// Loads the persisted index if it is intact and still pinned to this log.
fn load<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<Option<Index>> {
    let bytes = match atomic::read(fs, &layout.receipt_index(id)) {
        Ok(Some(bytes)) => bytes,
        // Derived data too large to load is treated as absent: rebuilt, never an error.
        Ok(None) | Err(Error::TooLarge { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    // The first line is the SHA-256 of the rest: the file is written without fsync, so a
    // power loss can leave chunks of two versions spliced into one that still parses.
    let Some(newline) = bytes.iter().position(|&b| b == b'\n') else { return Ok(None) };
    let (checksum, body) = (&bytes[..newline], &bytes[newline + 1..]);
    if checksum != hex::encode(Sha256::digest(body)).as_bytes()
        && !crate::mutant::active(crate::mutant::Mutant::IndexWithoutChecksum)
    {
        return Ok(None);
    }
    let Ok(persisted) = serde_json::from_slice::<Persisted>(body) else { return Ok(None) };
    if persisted.version != INDEX_VERSION {
        return Ok(None);
    }
    let cursor =
        Cursor { segment: persisted.segment, offset: persisted.offset, index: persisted.index };
    if tail_pin(fs, layout, id, cursor)?.as_deref() != Some(persisted.tail_sha256.as_str()) {
        return Ok(None);
    }
    let receipts = persisted
        .receipts
        .into_iter()
        .map(|r| {
            (
                (r.receipt.operation.clone(), r.receipt.request_digest.clone()),
                Known { mid: r.mid, receipt: r.receipt, settled: r.settled },
            )
        })
        .collect();
    Ok(Some(Index { cursor, receipts, unpersisted_lines: 0 }))
}

/// Persists the index (derived data: no fsync; a lost or torn copy is rebuilt).
fn persist<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    index: &Index,
    steps: &ReplaceBoundaries,
) -> Result<()> {
    let Some(tail_sha256) = tail_pin(fs, layout, id, index.cursor)? else { return Ok(()) };
    let mut receipts: Vec<PersistedReceipt> = index
        .receipts
        .values()
        .map(|known| PersistedReceipt {
            mid: known.mid.clone(),
            settled: known.settled,
            receipt: known.receipt.clone(),
        })
        .collect();
    receipts.sort_by(|a, b| {
        (&a.receipt.operation, &a.receipt.request_digest)
            .cmp(&(&b.receipt.operation, &b.receipt.request_digest))
    });
    let persisted = Persisted {
        version: INDEX_VERSION,
        segment: index.cursor.segment,
        offset: index.cursor.offset,
        index: index.cursor.index,
        tail_sha256,
        receipts,
    };
    let body = serde_json::to_vec(&persisted).expect("the index always serializes");
    let mut bytes = hex::encode(Sha256::digest(&body)).into_bytes();
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    if bytes.len() as u64 > STATE_FILE_BYTES_MAX {
        // Too large to load again: keep whatever (older, still pinned) copy is on disk; a new
        // handle folds the rest of the log from it.
        return Ok(());
    }
    let tmp = layout.receipt_index_tmp(id);
    let file = fs.open(&tmp, OpenOptions::create_truncate(), steps.create)?;
    file.write_at(0, &bytes, steps.write)?;
    drop(file);
    fs.rename(&tmp, &layout.receipt_index(id), steps.rename)?;
    Ok(())
}

impl Index {
    fn fold(&mut self, lines: Vec<Line>) {
        for line in lines {
            match line {
                Line::Sent(SentEvent { mid: Some(mid), .. }, Some(receipt)) => {
                    let key = (receipt.operation.clone(), receipt.request_digest.clone());
                    // The first receipt for a key is the one a replay must return.
                    self.receipts.entry(key).or_insert(Known {
                        mid,
                        receipt: *receipt,
                        settled: false,
                    });
                }
                Line::Settled(settlement) => {
                    let key = (settlement.operation, settlement.request_digest);
                    if let Some(known) = self.receipts.get_mut(&key)
                        && known.mid == settlement.mid
                    {
                        known.settled = true;
                    }
                }
                // A receipt on a line without a mid (no writer made one) answers nothing.
                Line::Sent(_, _) | Line::Status(_) => {}
            }
        }
    }
}

/// The receipt indexes of one store handle.
#[derive(Debug, Default)]
pub(crate) struct ReceiptIndexes {
    by_session: Mutex<HashMap<SessionId, Index>>,
}

impl ReceiptIndexes {
    /// The receipt for (operation, request digest), after folding what the log gained (and
    /// persisting the index if it moved).
    pub(crate) fn lookup<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        operation: &str,
        request_digest: &str,
        steps: &ReplaceBoundaries,
    ) -> Result<Option<Known>> {
        let mut indexes = lock(&self.by_session);
        if !indexes.contains_key(id) {
            let loaded = load(fs, layout, id)?.unwrap_or_default();
            indexes.insert(id.clone(), loaded);
        }
        let index = indexes.get_mut(id).expect("inserted above");
        let before = index.cursor;
        match timeline::read_from(fs, layout, id, index.cursor) {
            Ok((lines, next)) => {
                index.unpersisted_lines += lines.len() as u64;
                index.fold(lines);
                index.cursor = next;
            }
            Err(Error::InvalidCursor { .. }) => {
                let (lines, next) = timeline::read_from(fs, layout, id, Cursor::START)?;
                *index = Index { unpersisted_lines: lines.len() as u64, ..Index::default() };
                index.fold(lines);
                index.cursor = next;
            }
            Err(error) => return Err(error),
        }
        if index.cursor != before
            && index.unpersisted_lines * PERSIST_EVERY_RECEIPTS_DIVISOR
                >= index.receipts.len() as u64
        {
            persist(fs, layout, id, index, steps)?;
            index.unpersisted_lines = 0;
        }
        Ok(index.receipts.get(&(operation.to_owned(), request_digest.to_owned())).cloned())
    }

    /// Drops a session's index (it is closed, or its handle was poisoned).
    pub(crate) fn forget(&self, id: &SessionId) {
        lock(&self.by_session).remove(id);
    }
}

impl<F: Fs> crate::store::Store<F> {
    /// The receipt of the keyed send `(operation, request_digest)` to session `id`, if the log
    /// has one (the existing implementation's `sentDispatchReceipt`). Lock-free; it may persist
    /// the derived receipt index.
    pub fn receipt(
        &self,
        id: &SessionId,
        operation: &str,
        request_digest: &str,
    ) -> Result<Option<Known>> {
        self.require_session(id)?;
        self.receipts.lookup(
            &self.fs,
            &self.layout,
            id,
            operation,
            request_digest,
            &crate::boundaries::RECOVER.index,
        )
    }
}
