//! Timeline writes, always under the record lock: durable append, and torn-tail repair.

use faultfs::{Boundary, File, Fs, OpenOptions};

use super::line::Line;
use super::read::{Segment, list_segments, segment_len};
use crate::error::{CorruptReason, Error, Result};
use crate::layout::{Layout, READ_BLOCK_BYTES, SegmentNo, SessionId};
use crate::mutant::{Mutant, active};

/// The boundaries of one transition's log writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogSteps {
    pub(crate) mkdir: Boundary,
    pub(crate) mkdir_sync: Boundary,
    pub(crate) create: Boundary,
    pub(crate) dir_sync: Boundary,
    pub(crate) append: Boundary,
    pub(crate) sync: Boundary,
    pub(crate) repair: Boundary,
    pub(crate) repair_sync: Boundary,
}

/// Where an appended line landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Appended {
    pub(crate) segment: SegmentNo,
    pub(crate) offset: u64,
}

/// Appends one encoded line durably: to the newest numbered segment if it is empty or the line
/// fits under `segment_bytes_max`, else to a new segment whose directory entry is synced before
/// returning. Returns only after the line is durable.
pub(crate) fn append<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    line: &[u8],
    segment_bytes_max: u64,
    steps: &LogSteps,
) -> Result<Appended> {
    assert!(line.ends_with(b"\n") && !line[..line.len() - 1].contains(&b'\n'), "one line");
    let segments = list_segments(fs, layout, id)?;
    let newest = match segments.iter().rev().find_map(|segment| segment.no.map(|no| (no, segment)))
    {
        Some((no, segment)) => Some((no, segment_len(fs, segment)?)),
        None => None,
    };
    if let Some((no, len)) = newest
        && (len == 0 || len + line.len() as u64 <= segment_bytes_max)
    {
        let file = fs.open(&layout.segment(id, no), OpenOptions::read_write(), steps.append)?;
        if let Err(error) = file.append(line, steps.append) {
            // A short write may have left part of the line: take it back now, so a full disk
            // leaves the log as it was (recovery would truncate it otherwise).
            let _ = file.set_len(len, steps.repair);
            return Err(error.into());
        }
        if !active(Mutant::NoLogSync) && !active(Mutant::AckBeforeSync) {
            file.sync_data(steps.sync)?;
        }
        return Ok(Appended { segment: no, offset: len });
    }
    if let Some((no, _)) = newest
        && active(Mutant::RolloverTouchesSealed)
    {
        let sealed = fs.open(&layout.segment(id, no), OpenOptions::read_write(), steps.append)?;
        sealed.append(b"\n", steps.append)?;
        sealed.sync_data(steps.sync)?;
    }
    let next = SegmentNo(newest.map_or(1, |(no, _)| no.0 + 1));
    let dir = layout.timeline_dir(id);
    if !fs.exists(&dir)? {
        fs.create_dir(&dir, steps.mkdir)?;
        fs.sync_dir(&layout.session_dir(id), steps.mkdir_sync)?;
    }
    let path = layout.segment(id, next);
    let file = fs.open(&path, OpenOptions::create_new(), steps.create)?;
    if let Err(error) = file.append(line, steps.append) {
        // As above: leave no new (empty or partial) segment behind a failed append.
        drop(file);
        let _ = fs.remove_file(&path, steps.repair);
        return Err(error.into());
    }
    if !active(Mutant::NoLogSync) && !active(Mutant::AckBeforeSync) {
        file.sync_data(steps.sync)?;
    }
    if !active(Mutant::NoSegmentDirSync) {
        fs.sync_dir(&dir, steps.dir_sync)?;
    }
    Ok(Appended { segment: next, offset: 0 })
}

/// Truncates a torn tail of the newest numbered segment durably: an unterminated final line,
/// or a final line damaged by a power loss (NUL bytes). Returns the bytes removed. A final line
/// that is complete but does not parse is corruption: nothing is written after it.
pub(crate) fn repair_torn_tail<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    steps: &LogSteps,
) -> Result<u64> {
    let segments = list_segments(fs, layout, id)?;
    let Some(newest) = segments.iter().rev().find(|segment| segment.no.is_some()) else {
        return Ok(0);
    };
    if segments.last().map(|last| &last.path) != Some(&newest.path) || newest.len == Some(0) {
        return Ok(0);
    }
    let file = fs.open(&newest.path, OpenOptions::read_write(), steps.repair)?;
    let len = file.len()?;
    let keep = sound_prefix(&file, newest, len)?;
    if keep == len {
        return Ok(0);
    }
    file.set_len(keep, steps.repair)?;
    file.sync_data(steps.repair_sync)?;
    Ok(len - keep)
}

/// The length of the segment without its torn tail, after checking that the last line kept
/// parses.
fn sound_prefix<T: File>(file: &T, segment: &Segment, len: u64) -> Result<u64> {
    // Read backward until the tail holds two line ends (or the start of the file).
    let mut pos = len;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        if buf.iter().filter(|&&b| b == b'\n').count() >= 2 || pos == 0 {
            break;
        }
        let take = (READ_BLOCK_BYTES as u64).min(pos);
        let mut block = vec![0u8; usize::try_from(take).unwrap_or(READ_BLOCK_BYTES)];
        let mut filled = 0;
        while filled < block.len() {
            let read = file.read_at(pos - take + filled as u64, &mut block[filled..])?;
            if read == 0 {
                break;
            }
            filled += read;
        }
        block.truncate(filled);
        block.extend_from_slice(&buf);
        buf = block;
        pos -= take;
        if buf.len() > crate::layout::LINE_BYTES_MAX * 2 + READ_BLOCK_BYTES {
            return Err(Error::Corrupt {
                path: segment.path.clone(),
                offset: pos,
                reason: CorruptReason::LineTooLong,
            });
        }
    }
    // `buf` holds bytes [pos, len).
    let mut end = match buf.iter().rposition(|&b| b == b'\n') {
        Some(newline) => newline + 1,
        None => return Ok(pos), // no complete line at all in what remains: all torn
    };
    // The final complete line: drop it if damaged, else it must parse.
    let start = buf[..end - 1].iter().rposition(|&b| b == b'\n').map_or(0, |newline| newline + 1);
    let body = &buf[start..end - 1];
    if body.contains(&0) {
        end = start;
    } else {
        Line::decode_at(body, &segment.path, pos + start as u64)?;
    }
    Ok(pos + end as u64)
}
