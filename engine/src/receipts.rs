//! Receipt lookup for keyed sends and the drain's fence.
//!
//! What the log says about a receipt (operation + request digest -> message id, frozen
//! delivery, settled?) is found through a derived index persisted per session in
//! `receipts.index`: a sorted run of fixed-width records, one per receipt, each holding the
//! SHA-256 of the key, whether it was settled, and where its `sent` line starts in the log. A
//! lookup reads the header, binary-searches the run with positioned reads of 4 KiB blocks
//! (O(log n) blocks), and reads the one line the record points at (the mid, the payload hash
//! and the delivery bytes come from the log itself, never from the index). Receipts and
//! settlements appended since the run was written are folded from the log by each handle
//! (O(new bytes)) and kept in memory beside the run.
//!
//! # Format
//!
//! Block 0 is the header: magic `SPEXRCP4`, the record and block counts, the cursor the run was
//! folded to, the hash pinning that cursor to the log (as for the session index), and a
//! SHA-256 of all that. Blocks 1.. hold up to 72 records of 56 bytes (key digest, segment,
//! offset, settled), sorted by key across blocks, each block with its record count and a
//! checksum of its bytes.
//!
//! # Crash story
//!
//! The index is derived data: written whole to a staging file and renamed, without fsync. A
//! power loss may keep the new name with blocks lost (zeros, or stale bytes), or a mix of two
//! versions. Nothing in it is trusted unchecked: the header's checksum and the log pin (its
//! cursor still points into the log and the bytes before it hash the same), each block's
//! checksum on every read, and the line a record points at must be a `sent` line carrying that
//! very key. Any failure drops the run and rebuilds it from the log (one full read, never a
//! wrong answer). The run is rewritten once the lines folded past it reach an eighth of its
//! receipts (amortized O(1) per line). Lookups run under the record lock, after recovery, so
//! every line folded is complete; `Store::receipt` reads without the lock, never writes the
//! index, and may fold a line a power loss later takes back, which the pin then detects.

use std::collections::{HashMap, HashSet};

use faultfs::{Boundary, File, Fs, OpenOptions};
use sha2::{Digest, Sha256};

use crate::atomic::ReplaceBoundaries;
use crate::error::{Error, Result};
use crate::layout::{Layout, SessionId};
use crate::sync::{Mutex, lock};
use crate::timeline::{self, Cursor, Line, Position, Receipt, SentEvent};

/// Bytes before the cursor whose hash pins the persisted index to the log it was folded from.
const TAIL_PIN_BYTES: u64 = 256;

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
        return pin_before_segment(fs, layout, id, cursor);
    }
    let Some(path) = layout.segment_of_key(id, cursor.segment) else { return Ok(None) };
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
        if file.read_full_at(start - take, &mut block)? < block.len() {
            return Ok(None);
        }
        start -= take;
        block.extend_from_slice(&bytes);
        bytes = block;
        let body = bytes.split_last().map_or(&[][..], |(_, body)| body);
        let line_found = body.contains(&b'\n') || start == 0;
        if (line_found && bytes.len() as u64 >= TAIL_PIN_BYTES.min(cursor.offset))
            || bytes.len() > crate::layout::LINE_BYTES_MAX + 1
        {
            break;
        }
    }
    assert!(bytes.len() as u64 <= cursor.offset, "a pin hashes bytes before its cursor only");
    let body = bytes.split_last().map_or(&[][..], |(_, body)| body);
    let line_start = body.iter().rposition(|&b| b == b'\n').map_or(0, |newline| newline + 1);
    let pinned_from = line_start.min(bytes.len().saturating_sub(TAIL_PIN_BYTES as usize));
    let pinned = bytes.get(pinned_from..).unwrap_or_default();
    assert!(
        pinned.len() as u64 >= TAIL_PIN_BYTES.min(cursor.offset)
            || bytes.len() > crate::layout::LINE_BYTES_MAX,
        "a pin covers at least its bytes, or the whole segment before the cursor"
    );
    let pin = hex::encode(Sha256::digest(pinned));
    Ok(Some(pin))
}

/// [`tail_pin`] of a cursor at the start of a segment: it stands just past the end of the
/// segment before it, so that one's last line is pinned. A power loss may take the new
/// segment's name back, and the writer then appends to the segment before it again; the pin
/// must see that.
fn pin_before_segment<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    cursor: Cursor,
) -> Result<Option<String>> {
    assert_eq!(cursor.offset, 0, "a cursor at the start of a segment");
    if cursor.segment == 0 || crate::mutant::active(crate::mutant::Mutant::EmptyPinAtSegmentStart) {
        return Ok(Some(String::new()));
    }
    let segments = timeline::list_segments(fs, layout, id)?;
    let previous =
        segments.iter().rfind(|segment| segment.no.map_or(0, |no| no.0) < cursor.segment);
    let Some(segment) = previous else { return Ok(Some(String::new())) };
    let len = timeline::segment_len(fs, segment)?;
    if len == 0 {
        return Ok(Some(String::new()));
    }
    let end = Cursor { segment: segment.no.map_or(0, |no| no.0), offset: len, index: cursor.index };
    tail_pin(fs, layout, id, end)
}

/// Magic at the start of the header block.
const MAGIC: &[u8; 8] = b"SPEXRCP4";
/// The size of every block (the header is block 0).
const BLOCK_BYTES: usize = 4096;
/// Where the header's checksum sits, and its length.
const HEADER_CHECKSUM_AT: usize = 120;
const HEADER_CHECKSUM_BYTES: usize = 32;
/// One record: key digest (32), segment (8), offset (8), settled (1), padding (7).
const POSTING_BYTES: usize = 56;
/// Records per data block.
const RECORDS_PER_BLOCK: usize = 72;
/// Where a data block's records start (after its count and padding), and its checksum.
const RECORDS_AT: usize = 8;
const CHECKSUM_AT: usize = RECORDS_AT + RECORDS_PER_BLOCK * POSTING_BYTES;
const CHECKSUM_BYTES: usize = 16;
const _: () = assert!(CHECKSUM_AT + CHECKSUM_BYTES <= BLOCK_BYTES);

/// A receipt's key as the run stores it.
type Digest32 = [u8; 32];

/// The `len` bytes at `at` of `bytes`, when it holds them.
fn field(bytes: &[u8], at: usize, len: usize) -> Option<&[u8]> {
    let found = bytes.get(at..at.checked_add(len)?);
    debug_assert!(found.is_none_or(|found| found.len() == len), "a field is as long as asked");
    found
}

/// The `len` bytes at `at` of a buffer this module sized from the layout's constants, to be
/// written (the constants keep every field inside its block: a miss is a bug here).
fn field_mut(bytes: &mut [u8], at: usize, len: usize) -> &mut [u8] {
    debug_assert!(at + len <= BLOCK_BYTES, "a field lies inside one block");
    (bytes.get_mut(at..at + len).expect("a field inside the block the layout sized")) as _
}

/// The little-endian word at `at` of `bytes`, when it holds it.
fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    debug_assert!(at.is_multiple_of(8), "a word is aligned in its block");
    Some(u64::from_le_bytes(field(bytes, at, 8)?.try_into().ok()?))
}

fn key_digest(operation: &str, request_digest: &str) -> Digest32 {
    // The NUL between them keeps the key one-to-one.
    debug_assert!(!operation.contains('\0'), "an operation name holds no NUL");
    let mut hasher = Sha256::new();
    hasher.update(operation.as_bytes());
    hasher.update([0u8]);
    hasher.update(request_digest.as_bytes());
    hasher.finalize().into()
}

/// One posting of the run: a key and where its receipt line is (settled or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Posting {
    key: Digest32,
    position: Position,
    settled: bool,
}

impl Posting {
    fn encode(&self, out: &mut [u8]) {
        assert_eq!(out.len(), POSTING_BYTES, "a posting's place is a posting long");
        field_mut(out, 0, 32).copy_from_slice(&self.key);
        field_mut(out, 32, 8).copy_from_slice(&self.position.segment.to_le_bytes());
        field_mut(out, 40, 8).copy_from_slice(&self.position.offset.to_le_bytes());
        field_mut(out, 48, 1).fill(u8::from(self.settled));
        field_mut(out, 49, POSTING_BYTES - 49).fill(0);
        debug_assert_eq!(Posting::decode(out), Some(*self), "an encoded posting decodes to itself");
    }

    /// The posting in `bytes` (`None` when they are shorter than one).
    fn decode(bytes: &[u8]) -> Option<Posting> {
        if bytes.len() < POSTING_BYTES {
            return None;
        }
        let posting = Posting {
            key: field(bytes, 0, 32)?.try_into().ok()?,
            position: Position { segment: word_at(bytes, 32)?, offset: word_at(bytes, 40)? },
            settled: *field(bytes, 48, 1)?.first()? != 0,
        };
        Some(posting)
    }
}

/// The header of a persisted run.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    records: u64,
    blocks: u64,
    cursor: Cursor,
    pin: String,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; BLOCK_BYTES];
        field_mut(&mut bytes, 0, 8).copy_from_slice(MAGIC);
        let words =
            [self.records, self.blocks, self.cursor.segment, self.cursor.offset, self.cursor.index];
        for (i, word) in words.iter().enumerate() {
            field_mut(&mut bytes, 8 + i * 8, 8).copy_from_slice(&word.to_le_bytes());
        }
        let pin = self.pin.as_bytes();
        assert!(pin.len() <= 71, "a pin is a 64-character hash or empty");
        field_mut(&mut bytes, 48, 1)
            .fill(u8::try_from(pin.len()).expect("a pin is a 64-character hash or empty"));
        field_mut(&mut bytes, 49, pin.len()).copy_from_slice(pin);
        let checksum = block_digest(&bytes, HEADER_CHECKSUM_AT, HEADER_CHECKSUM_BYTES);
        field_mut(&mut bytes, HEADER_CHECKSUM_AT, HEADER_CHECKSUM_BYTES)
            .copy_from_slice(field(&checksum, 0, HEADER_CHECKSUM_BYTES).expect("a digest's bytes"));
        debug_assert_eq!(Header::decode(&bytes).as_ref(), Some(self), "a header decodes to itself");
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<Header> {
        if bytes.len() < BLOCK_BYTES || field(bytes, 0, 8)? != MAGIC {
            return None;
        }
        let digest = block_digest(bytes, HEADER_CHECKSUM_AT, HEADER_CHECKSUM_BYTES);
        if field(bytes, HEADER_CHECKSUM_AT, HEADER_CHECKSUM_BYTES)?
            != field(&digest, 0, HEADER_CHECKSUM_BYTES)?
            && !crate::mutant::active(crate::mutant::Mutant::IndexWithoutChecksum)
        {
            return None;
        }
        let word = |i: usize| word_at(bytes, 8 + i * 8);
        let pin_len = usize::from(*field(bytes, 48, 1)?.first()?).min(71);
        let header = Header {
            records: word(0)?,
            blocks: word(1)?,
            cursor: Cursor { segment: word(2)?, offset: word(3)?, index: word(4)? },
            pin: String::from_utf8(field(bytes, 49, pin_len)?.to_vec()).ok()?,
        };
        debug_assert!(header.pin.len() <= 71, "a pin fits its field");
        Some(header)
    }
}

/// The receipt index's format as a simulated machine is told it (see
/// [`faultfs::SimFs::set_checked_blocks`]): a lookup refuses a block through
/// [`block_accepted`] alone, and a refused block ends the run's use (it is dropped and rebuilt
/// from the log) with nothing more of its bytes read, so every version of a block it refuses
/// leads it to the same reads and writes.
pub const INDEX_BLOCKS: faultfs::CheckedBlocks = faultfs::CheckedBlocks {
    names: &[crate::layout::RECEIPT_INDEX, crate::layout::RECEIPT_INDEX_TMP],
    block_bytes: BLOCK_BYTES as u64,
    accepts: block_accepted,
};

/// Whether a lookup accepts `bytes` as block `index` of a run: the header for block 0, a data
/// block after it.
fn block_accepted(index: u64, bytes: &[u8]) -> bool {
    let accepted =
        if index == 0 { Header::decode(bytes).is_some() } else { decode_block(bytes).is_some() };
    debug_assert!(!accepted || bytes.len() >= BLOCK_BYTES, "only a whole block is accepted");
    accepted
}

/// A data block: its records, if its checksum holds.
fn decode_block(bytes: &[u8]) -> Option<Vec<Posting>> {
    if bytes.len() < BLOCK_BYTES {
        return None;
    }
    let digest = block_digest(bytes, CHECKSUM_AT, CHECKSUM_BYTES);
    if field(bytes, CHECKSUM_AT, CHECKSUM_BYTES)? != field(&digest, 0, CHECKSUM_BYTES)?
        && !crate::mutant::active(crate::mutant::Mutant::IndexWithoutChecksum)
    {
        return None;
    }
    let count = usize::from(u16::from_le_bytes(field(bytes, 0, 2)?.try_into().ok()?));
    if count == 0 || count > RECORDS_PER_BLOCK {
        return None;
    }
    let records: Vec<Posting> = (0..count)
        .map(|i| Posting::decode(field(bytes, RECORDS_AT + i * POSTING_BYTES, POSTING_BYTES)?))
        .collect::<Option<_>>()?;
    debug_assert!(
        (1..=RECORDS_PER_BLOCK).contains(&records.len()),
        "a block holds 1 to a block of records"
    );
    Some(records)
}

fn encode_block(records: &[Posting]) -> Vec<u8> {
    assert!(
        !records.is_empty() && records.len() <= RECORDS_PER_BLOCK,
        "a data block holds 1 to {RECORDS_PER_BLOCK} records, not {}",
        records.len()
    );
    let mut bytes = vec![0u8; BLOCK_BYTES];
    let count = u16::try_from(records.len()).expect("at most a block of records");
    field_mut(&mut bytes, 0, 2).copy_from_slice(&count.to_le_bytes());
    for (i, record) in records.iter().enumerate() {
        record.encode(field_mut(&mut bytes, RECORDS_AT + i * POSTING_BYTES, POSTING_BYTES));
    }
    let checksum = block_digest(&bytes, CHECKSUM_AT, CHECKSUM_BYTES);
    field_mut(&mut bytes, CHECKSUM_AT, CHECKSUM_BYTES)
        .copy_from_slice(field(&checksum, 0, CHECKSUM_BYTES).expect("a digest's bytes"));
    debug_assert_eq!(decode_block(&bytes).as_deref(), Some(records), "a block decodes to itself");
    bytes
}

/// SHA-256 of every byte of a block but its checksum field (`len` bytes at `at`): a block is
/// intact only if each of its 4096 bytes is as written (unused bytes included), so every
/// damaged version of a block is refused alike.
fn block_digest(bytes: &[u8], at: usize, len: usize) -> [u8; 32] {
    assert!(at + len <= BLOCK_BYTES, "a checksum field lies inside its block");
    let mut hasher = Sha256::new();
    hasher.update(bytes.get(..at).unwrap_or_default());
    hasher.update(bytes.get(at + len..BLOCK_BYTES).unwrap_or_default());
    hasher.finalize().into()
}

/// Makes every checksum of a persisted run valid (the header's, and each whole data block's),
/// so a fuzzer reaches what is behind them.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn fix_checksums(bytes: &mut [u8]) {
    if bytes.len() >= BLOCK_BYTES {
        let checksum = block_digest(bytes, HEADER_CHECKSUM_AT, HEADER_CHECKSUM_BYTES);
        field_mut(bytes, HEADER_CHECKSUM_AT, HEADER_CHECKSUM_BYTES)
            .copy_from_slice(field(&checksum, 0, HEADER_CHECKSUM_BYTES).expect("a digest's bytes"));
    }
    for block in bytes.chunks_mut(BLOCK_BYTES).skip(1).filter(|block| block.len() == BLOCK_BYTES) {
        let checksum = block_digest(block, CHECKSUM_AT, CHECKSUM_BYTES);
        field_mut(block, CHECKSUM_AT, CHECKSUM_BYTES)
            .copy_from_slice(field(&checksum, 0, CHECKSUM_BYTES).expect("a digest's bytes"));
    }
}

/// Whether a persisted run's header is intact and pinned to this session's log as it is now
/// (so a lookup trusts it).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn pinned<F: Fs>(fs: &F, layout: &Layout, id: &SessionId, bytes: &[u8]) -> bool {
    let Some(header) = bytes.get(..BLOCK_BYTES).and_then(Header::decode) else { return false };
    tail_pin(fs, layout, id, header.cursor).ok().flatten().as_deref() == Some(header.pin.as_str())
}

/// A run's header alone, claiming no records (a forgery that hides every receipt).
#[cfg(test)]
pub(crate) fn without_records(bytes: &[u8]) -> Vec<u8> {
    let mut header = Header::decode(bytes).expect("a persisted header");
    header.records = 0;
    header.blocks = 0;
    let bytes = header.encode();
    assert_eq!(bytes.len(), BLOCK_BYTES, "a run without records is its header alone");
    bytes
}

/// Changes a run's pin so it no longer matches its log.
#[cfg(test)]
pub(crate) fn break_pin(bytes: &mut [u8]) {
    field_mut(bytes, 49, 1).iter_mut().for_each(|byte| *byte ^= 1);
}

/// What the persisted index gave: an answer, or a run that cannot answer (torn, stale, moved
/// under its log), which is dropped and rebuilt from the log.
#[derive(Debug)]
enum Persisted<T> {
    /// The run answered.
    Sound(T),
    /// The run is damaged.
    Damaged,
}

#[cfg(feature = "mutants")]
impl<T> Persisted<T> {
    /// The answer, if the run gave one.
    fn sound(self) -> Option<T> {
        match self {
            Persisted::Sound(value) => Some(value),
            Persisted::Damaged => None,
        }
    }
}

/// A persisted run this handle found intact and pinned (its records stay on disk).
#[derive(Clone, Debug)]
struct Run {
    header: Header,
}

impl Run {
    /// Opens the session's run if its header is intact and it is still pinned to the log.
    fn open<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<Option<Run>> {
        let file =
            match fs.open(&layout.receipt_index(id), OpenOptions::read(), Boundary::new("read")) {
                Ok(file) => file,
                Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {
                    return Ok(None);
                }
                Err(error) => return Err(error.into()),
            };
        let mut bytes = vec![0u8; BLOCK_BYTES];
        if file.read_full_at(0, &mut bytes)? < BLOCK_BYTES {
            return Ok(None);
        }
        let Some(header) = Header::decode(&bytes) else { return Ok(None) };
        let len =
            header.blocks.checked_add(1).and_then(|blocks| blocks.checked_mul(BLOCK_BYTES as u64));
        if len != Some(file.len()?)
            || header.records > header.blocks.saturating_mul(RECORDS_PER_BLOCK as u64)
        {
            return Ok(None);
        }
        if tail_pin(fs, layout, id, header.cursor)?.as_deref() != Some(header.pin.as_str()) {
            return Ok(None);
        }
        debug_assert!(
            header.records <= header.blocks * RECORDS_PER_BLOCK as u64,
            "an opened run's records fit in its blocks"
        );
        Ok(Some(Run { header }))
    }

    /// The record for `key`: a binary search over the blocks, each read checked.
    fn find<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        key: &Digest32,
    ) -> Result<Persisted<Option<Posting>>> {
        let file =
            match fs.open(&layout.receipt_index(id), OpenOptions::read(), Boundary::new("read")) {
                Ok(file) => file,
                Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {
                    return Ok(Persisted::Damaged);
                }
                Err(error) => return Err(error.into()),
            };
        let (mut low, mut high) = (0u64, self.header.blocks);
        let mut bytes = vec![0u8; BLOCK_BYTES];
        while low < high {
            let middle = low + (high - low) / 2;
            debug_assert!(low <= middle && middle < high, "a search narrows inside its bounds");
            if file.read_full_at((middle + 1) * BLOCK_BYTES as u64, &mut bytes)? < BLOCK_BYTES {
                return Ok(Persisted::Damaged);
            }
            let Some(records) = decode_block(&bytes) else { return Ok(Persisted::Damaged) };
            let (Some(first), Some(last)) = (records.first(), records.last()) else {
                return Ok(Persisted::Damaged);
            };
            let (first, last) = (first.key, last.key);
            if *key < first {
                high = middle;
            } else if *key > last {
                low = middle + 1;
            } else {
                return Ok(Persisted::Sound(records.into_iter().find(|record| record.key == *key)));
            }
        }
        Ok(Persisted::Sound(None))
    }

    /// Every record, in key order (to merge into a new run).
    fn records<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
    ) -> Result<Persisted<Vec<Posting>>> {
        let file =
            fs.open(&layout.receipt_index(id), OpenOptions::read(), Boundary::new("read"))?;
        let mut records = Vec::with_capacity(usize::try_from(self.header.records).unwrap_or(0));
        let mut bytes = vec![0u8; BLOCK_BYTES];
        for block in 0..self.header.blocks {
            if file.read_full_at((block + 1) * BLOCK_BYTES as u64, &mut bytes)? < BLOCK_BYTES {
                return Ok(Persisted::Damaged);
            }
            let Some(mut found) = decode_block(&bytes) else { return Ok(Persisted::Damaged) };
            records.append(&mut found);
        }
        if records.len() as u64 != self.header.records {
            return Ok(Persisted::Damaged);
        }
        debug_assert!(
            records.len() <= self.header.blocks as usize * RECORDS_PER_BLOCK,
            "a run's records come from its blocks"
        );
        Ok(Persisted::Sound(records))
    }
}

/// Writes a run of `records` (sorted by key) pinned at `cursor` (derived data: no fsync; a lost
/// or torn copy is detected and rebuilt).
fn persist<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    records: &[Posting],
    cursor: Cursor,
    steps: &ReplaceBoundaries,
) -> Result<()> {
    assert!(records.is_sorted_by_key(|record| record.key), "a run is sorted by key");
    let Some(pin) = tail_pin(fs, layout, id, cursor)? else { return Ok(()) };
    let blocks: Vec<&[Posting]> = records.chunks(RECORDS_PER_BLOCK).collect();
    let header = Header { records: records.len() as u64, blocks: blocks.len() as u64, cursor, pin };
    let mut bytes = header.encode();
    for block in blocks {
        bytes.extend_from_slice(&encode_block(block));
    }
    assert_eq!(
        bytes.len() as u64,
        (header.blocks + 1) * BLOCK_BYTES as u64,
        "a run is its header and its blocks, whole"
    );
    let tmp = layout.receipt_index_tmp(id);
    let file = fs.open(&tmp, OpenOptions::create_truncate(), steps.create)?;
    file.write_at(0, &bytes, steps.write)?;
    drop(file);
    fs.rename(&tmp, &layout.receipt_index(id), steps.rename)?;
    debug_assert!(
        fs.exists(&tmp).is_ok_and(|there| !there),
        "the staging file became the run: no staging file survives a persist"
    );
    Ok(())
}

/// A receipt folded from the log past the run.
#[derive(Clone, Debug)]
struct FoldedReceipt {
    known: Known,
    position: Position,
}

/// What one handle knows of one session's receipts.
#[derive(Debug, Default)]
struct Index {
    /// The persisted run, if one was found intact (or written).
    run: Option<Run>,
    /// FoldedReceipt up to here: the run's cursor, then the lines folded since.
    cursor: Cursor,
    /// Receipts first seen past the run, by (operation, request digest).
    folded: HashMap<(String, String), FoldedReceipt>,
    /// Settlements past the run of receipts in the run: (key digest, mid).
    settled: HashSet<(Digest32, String)>,
    /// Lines folded since the run was written.
    unpersisted_lines: u64,
}

impl Index {
    /// The session's persisted run as found (none if absent or damaged), folded to its cursor.
    fn persisted<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<Index> {
        let run = Run::open(fs, layout, id)?;
        let cursor = run.as_ref().map_or(Cursor::START, |run| run.header.cursor);
        let index = Index { run, cursor, ..Index::default() };
        debug_assert!(index.folded.is_empty() && index.unpersisted_lines == 0, "nothing folded");
        Ok(index)
    }

    /// Folds positioned lines read past `self.cursor`.
    fn fold<F: Fs>(
        &mut self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        lines: Vec<(Position, Line)>,
    ) -> Result<Persisted<()>> {
        for (position, line) in lines {
            match line {
                Line::Sent(SentEvent { mid: Some(mid), .. }, Some(receipt)) => {
                    let key = (receipt.operation.clone(), receipt.request_digest.clone());
                    if self.folded.contains_key(&key) {
                        continue;
                    }
                    // The first receipt for a key is the one a replay must return: one in the
                    // run came first.
                    if let Some(run) = &self.run {
                        match run.find(fs, layout, id, &key_digest(&key.0, &key.1))? {
                            Persisted::Damaged => return Ok(Persisted::Damaged),
                            Persisted::Sound(Some(_)) => continue,
                            Persisted::Sound(None) => {}
                        }
                    }
                    let known = Known { mid, receipt: *receipt, settled: false };
                    let first = self.folded.insert(key, FoldedReceipt { known, position });
                    debug_assert!(first.is_none(), "the first receipt for a key is kept");
                }
                Line::Settled(settlement) => {
                    let key = (settlement.operation, settlement.request_digest);
                    match self.folded.get_mut(&key) {
                        Some(folded) if folded.known.mid == settlement.mid => {
                            debug_assert_eq!(
                                folded.known.receipt.request_digest, key.1,
                                "a settlement settles the receipt of its key"
                            );
                            folded.known.settled = true;
                        }
                        Some(_) => {}
                        None => {
                            self.settled.insert((key_digest(&key.0, &key.1), settlement.mid));
                        }
                    }
                }
                // A receipt on a line without a mid (no writer made one) answers nothing.
                Line::Sent(_, _) | Line::Status(_) => {}
            }
        }
        Ok(Persisted::Sound(()))
    }

    /// The receipt for `key` as the run and the folded lines know it.
    fn get<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        operation: &str,
        request_digest: &str,
    ) -> Result<Persisted<Option<Known>>> {
        let digest = key_digest(operation, request_digest);
        if let Some(run) = &self.run {
            match run.find(fs, layout, id, &digest)? {
                Persisted::Damaged => return Ok(Persisted::Damaged),
                Persisted::Sound(None) => {}
                Persisted::Sound(Some(record)) => {
                    // The mid and the receipt come from the line itself; it must be the
                    // receipt of this very key.
                    let Some(Line::Sent(SentEvent { mid: Some(mid), .. }, Some(receipt))) =
                        timeline::line_at(fs, layout, id, record.position)?
                    else {
                        return Ok(Persisted::Damaged);
                    };
                    if receipt.operation != operation || receipt.request_digest != request_digest {
                        return Ok(Persisted::Damaged);
                    }
                    let settled = record.settled || self.settled.contains(&(digest, mid.clone()));
                    return Ok(Persisted::Sound(Some(Known { mid, receipt: *receipt, settled })));
                }
            }
        }
        let folded = self
            .folded
            .get(&(operation.to_owned(), request_digest.to_owned()))
            .map(|folded| folded.known.clone());
        debug_assert!(
            folded.as_ref().is_none_or(|known| known.receipt.operation == operation),
            "a folded receipt is found under its own key"
        );
        Ok(Persisted::Sound(folded))
    }

    /// Receipts in all (the run's and the folded ones).
    fn receipts(&self) -> u64 {
        let persisted = self.run.as_ref().map_or(0, |run| run.header.records);
        debug_assert!(
            (self.run.as_ref()).is_none_or(|run| {
                run.header.records <= run.header.blocks * RECORDS_PER_BLOCK as u64
            }),
            "a run's records fit in its blocks"
        );

        persisted + self.folded.len() as u64
    }

    /// The records of a new run: the old run's (with settlements folded since), merged with the
    /// folded receipts, sorted by key.
    fn merged<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
    ) -> Result<Persisted<Vec<Posting>>> {
        let mut records = match &self.run {
            None => Vec::new(),
            Some(run) => match run.records(fs, layout, id)? {
                Persisted::Damaged => return Ok(Persisted::Damaged),
                Persisted::Sound(records) => records,
            },
        };
        if !self.settled.is_empty() {
            let keys: HashSet<Digest32> = self.settled.iter().map(|(key, _)| *key).collect();
            for record in &mut records {
                if record.settled {
                    continue;
                }
                // A settlement names a mid: the record's mid is on its line.
                if keys.contains(&record.key) {
                    let Some(Line::Sent(SentEvent { mid: Some(mid), .. }, _)) =
                        timeline::line_at(fs, layout, id, record.position)?
                    else {
                        return Ok(Persisted::Damaged);
                    };
                    record.settled = self.settled.contains(&(record.key, mid));
                }
            }
        }
        records.extend(self.folded.iter().map(|((operation, request_digest), folded)| Posting {
            key: key_digest(operation, request_digest),
            position: folded.position,
            settled: folded.known.settled,
        }));
        records.sort_by_key(|record| record.key);
        debug_assert_eq!(
            records.len() as u64,
            self.receipts(),
            "a new run holds every receipt: the old run's and the folded ones, each once"
        );
        Ok(Persisted::Sound(records))
    }
}

/// The receipt indexes of one store handle.
#[derive(Debug, Default)]
pub(crate) struct ReceiptIndexes {
    by_session: Mutex<HashMap<SessionId, Index>>,
}

impl ReceiptIndexes {
    /// The receipt for (operation, request digest), after folding what the log gained (and,
    /// with `steps`, rewriting the run once enough was folded past it; without, nothing is
    /// written: a send's lookup, which may end refused or replayed, writes nothing). A damaged
    /// run is dropped and the index rebuilt from the log.
    pub(crate) fn lookup<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        operation: &str,
        request_digest: &str,
        steps: Option<&ReplaceBoundaries>,
    ) -> Result<Option<Known>> {
        let mut indexes = lock(&self.by_session);
        if !indexes.contains_key(id) {
            indexes.insert(id.clone(), Index::persisted(fs, layout, id)?);
        }
        let index = indexes.get_mut(id).expect("inserted above");
        for attempt in 0..2 {
            match Self::refresh_and_get(fs, layout, id, index, operation, request_digest, steps)? {
                Persisted::Sound(found) => {
                    assert!(
                        found.as_ref().is_none_or(|known| {
                            known.receipt.operation == operation
                                && known.receipt.request_digest == request_digest
                        }),
                        "a lookup answers with the receipt of the key asked about"
                    );
                    return Ok(found);
                }
                // Damaged (or a log that moved under the run): rebuild from the log, once.
                Persisted::Damaged if attempt == 0 => *index = Index::default(),
                Persisted::Damaged => break,
            }
        }
        Err(Error::Corrupt {
            path: layout.receipt_index(id),
            offset: 0,
            reason: crate::error::CorruptReason::BadFile(
                "the receipt index could not be rebuilt from the log".to_owned(),
            ),
        })
    }

    /// The `lock-free-receipt-without-refresh` mutant's lookup: the persisted index alone, the
    /// log past it not folded.
    #[cfg(feature = "mutants")]
    pub(crate) fn lookup_without_refresh<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        operation: &str,
        request_digest: &str,
    ) -> Result<Option<Known>> {
        let index = Index::persisted(fs, layout, id)?;
        Ok(index.get(fs, layout, id, operation, request_digest)?.sound().flatten())
    }

    /// After a send appended lines to session `id`: folds them into the index a lookup of this
    /// handle holds, and rewrites the run when enough was folded past it (the rewrite a send's
    /// own lookup left for after its lines were written). Without such an index, nothing.
    pub(crate) fn maintain<F: Fs>(
        &self,
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        steps: &ReplaceBoundaries,
    ) -> Result<()> {
        let mut indexes = lock(&self.by_session);
        let Some(index) = indexes.get_mut(id) else { return Ok(()) };
        if let Persisted::Damaged = Self::refresh(fs, layout, id, index, Some(steps))? {
            // Rebuilt from the log by the next lookup.
            *index = Index::default();
        }
        debug_assert!(
            index.run.as_ref().is_none_or(|run| {
                (run.header.cursor.segment, run.header.cursor.offset)
                    <= (index.cursor.segment, index.cursor.offset)
            }),
            "the index reaches at least as far as its persisted run"
        );

        Ok(())
    }

    fn refresh_and_get<F: Fs>(
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        index: &mut Index,
        operation: &str,
        request_digest: &str,
        steps: Option<&ReplaceBoundaries>,
    ) -> Result<Persisted<Option<Known>>> {
        if let Persisted::Damaged = Self::refresh(fs, layout, id, index, steps)? {
            return Ok(Persisted::Damaged);
        }
        debug_assert!(
            index.run.as_ref().is_none_or(|run| {
                (run.header.cursor.segment, run.header.cursor.offset)
                    <= (index.cursor.segment, index.cursor.offset)
            }),
            "the lines folded in memory lie past the persisted run"
        );
        index.get(fs, layout, id, operation, request_digest)
    }

    /// Folds what the log gained past the index's cursor (see [`ReceiptIndexes::lookup`]).
    fn refresh<F: Fs>(
        fs: &F,
        layout: &Layout,
        id: &SessionId,
        index: &mut Index,
        steps: Option<&ReplaceBoundaries>,
    ) -> Result<Persisted<()>> {
        let before = index.cursor;
        let (lines, next) = match timeline::read_from_positioned(fs, layout, id, index.cursor) {
            Ok(read) => read,
            Err(Error::InvalidCursor { .. }) => return Ok(Persisted::Damaged),
            Err(error) => return Err(error),
        };
        index.unpersisted_lines += lines.len() as u64;
        if let Persisted::Damaged = index.fold(fs, layout, id, lines)? {
            return Ok(Persisted::Damaged);
        }
        debug_assert!(
            (next.segment, next.offset) >= (before.segment, before.offset),
            "an index folds forward only"
        );
        index.cursor = next;
        if let Some(steps) = steps
            && index.cursor != before
            && index.unpersisted_lines * PERSIST_EVERY_RECEIPTS_DIVISOR >= index.receipts()
        {
            let records = match index.merged(fs, layout, id)? {
                Persisted::Sound(records) => records,
                Persisted::Damaged => return Ok(Persisted::Damaged),
            };
            persist(fs, layout, id, &records, index.cursor, steps)?;
            match Run::open(fs, layout, id)? {
                Some(run) if run.header.cursor == index.cursor => {
                    *index = Index { run: Some(run), cursor: index.cursor, ..Index::default() };
                }
                // Not written (no pin): keep what was folded in memory.
                _ => index.unpersisted_lines = 0,
            }
        }
        Ok(Persisted::Sound(()))
    }

    /// Drops a session's index (it is closed, or its handle was poisoned).
    pub(crate) fn forget(&self, id: &SessionId) {
        let mut indexes = lock(&self.by_session);
        indexes.remove(id);
        debug_assert!(!indexes.contains_key(id), "a forgotten index is gone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posting(n: u8) -> Posting {
        Posting {
            key: [n; 32],
            position: Position { segment: 1, offset: u64::from(n) },
            settled: n.is_multiple_of(2),
        }
    }

    #[test]
    fn blocks_and_headers_decode_to_what_was_encoded_and_refuse_short_bytes() {
        let records: Vec<Posting> = (1..=RECORDS_PER_BLOCK as u8).map(posting).collect();
        let block = encode_block(&records);
        assert_eq!(decode_block(&block), Some(records));
        assert_eq!(decode_block(block.get(..BLOCK_BYTES - 1).unwrap_or_default()), None);
        let header = Header {
            records: 3,
            blocks: 1,
            cursor: Cursor { segment: 2, offset: 10, index: 4 },
            pin: "ab".repeat(32),
        };
        assert_eq!(Header::decode(&header.encode()), Some(header));
        assert_eq!(Posting::decode(&[0; POSTING_BYTES - 1]), None, "a short posting is none");
    }

    #[test]
    #[should_panic(expected = "a data block holds 1 to 72 records, not 73")]
    fn a_block_of_too_many_records_is_refused_before_it_is_written() {
        let records: Vec<Posting> = (0..=RECORDS_PER_BLOCK as u8).map(posting).collect();
        let _ = encode_block(&records);
    }
}
