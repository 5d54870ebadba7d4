//! Timeline writes, always under the record lock: durable append, torn-tail repair, and the
//! vouching barrier.
//!
//! # What a writer may rest on
//!
//! A killed process's writes stay visible to the next process without being durable (the page
//! cache keeps them; a power loss may still drop them). A writer never appends after, or acts
//! on, bytes nobody vouches for:
//!
//! 1. A transition that ends normally has synced everything it wrote.
//! 2. A writer that takes the lock over from a dead holder calls [`vouch`] first (see `store`),
//!    which syncs the newest segment and the directories: the dead holder's bytes become
//!    durable before anything rests on them.
//! 3. After a failed write or sync, the failing writer cuts the segment back to the length it
//!    started from and syncs that (a failed sync may have dropped the bytes while reads still
//!    return them), then releases the lock normally. If that cut fails too, the window stays
//!    open: documented in the README.

use faultfs::{Boundary, File, Fs, OpenOptions};

use super::read::{Segment, list_segments, segment_len, sound_len};
use crate::error::{Error, Result};
use crate::layout::{Layout, SegmentNo, SessionId};
use crate::mutant::{Mutant, active, selected};

/// The boundaries of one transition's log writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogBoundaries {
    pub(crate) mkdir: Boundary,
    pub(crate) mkdir_sync: Boundary,
    pub(crate) create: Boundary,
    pub(crate) dir_sync: Boundary,
    pub(crate) append: Boundary,
    pub(crate) sync: Boundary,
    pub(crate) repair: Boundary,
    pub(crate) repair_sync: Boundary,
    /// The syncs of [`vouch`]: the newest segment, the timeline, session and sessions
    /// directories.
    pub(crate) vouch: Boundary,
    pub(crate) vouch_dir_sync: Boundary,
    pub(crate) vouch_session_dir_sync: Boundary,
    pub(crate) vouch_sessions_dir_sync: Boundary,
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
///
/// One line per write and sync, never more: the pages of one write may reach the disk in any
/// order before its sync, so a power loss inside a write of two lines could keep the second and
/// lose the first, leaving damage before a sound line (corrupt, not a torn tail). `sync_line` is
/// false only for a mutant.
pub(crate) fn append<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    line: &[u8],
    segment_bytes_max: u64,
    steps: &LogBoundaries,
    sync_line: bool,
) -> Result<Appended> {
    assert!(line.strip_suffix(b"\n").is_some_and(|body| !body.contains(&b'\n')), "one line");
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
        let sync = sync_line && !active(Mutant::NoLogSync) && !active(Mutant::AckBeforeSync);
        let cut = (steps.repair, steps.repair_sync);
        append_or_cut_back(&file, len, line, (steps.append, steps.sync), cut, sync)?;
        return Ok(Appended { segment: no, offset: len });
    }
    if let Some((no, _)) = newest
        && active(Mutant::RolloverTouchesSealed)
    {
        let sealed = fs.open(&layout.segment(id, no), OpenOptions::read_write(), steps.append)?;
        sealed.append(b"\n", steps.append)?;
        sealed.sync_data(steps.sync)?;
    }
    let Some(next) = SegmentNo::from_key(newest.map_or(1, |(no, _)| no.0 + 1)) else {
        return Err(Error::InvalidInput {
            what: "append",
            reason: format!(
                "the log already holds {} segments, the most a name can number",
                SegmentNo::MAX.0
            ),
        });
    };
    append_to_new_segment(fs, layout, id, next, line, steps, sync_line)?;
    Ok(Appended { segment: next, offset: 0 })
}

/// Creates segment `next` holding `line`, durably: the line synced (unless `sync_line` is off,
/// for a mutant), then the directory entry. A failure leaves no new segment behind.
fn append_to_new_segment<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    next: SegmentNo,
    line: &[u8],
    steps: &LogBoundaries,
    sync_line: bool,
) -> Result<()> {
    let dir = layout.timeline_dir(id);
    if !fs.exists(&dir)? {
        fs.create_dir(&dir, steps.mkdir)?;
        fs.sync_dir(&layout.session_dir(id), steps.mkdir_sync)?;
    }
    let path = layout.segment(id, next);
    let file = fs.open(&path, OpenOptions::create_new(), steps.create)?;
    let written = file.append(line, steps.append).and_then(|()| {
        if !sync_line || active(Mutant::NoLogSync) || active(Mutant::AckBeforeSync) {
            return Ok(());
        }
        file.sync_data(steps.sync)
    });
    let written = written.and_then(|()| {
        if active(Mutant::NoSegmentDirSync) {
            return Ok(());
        }
        fs.sync_dir(&dir, steps.dir_sync)
    });
    if let Err(error) = written {
        // As above (rule 3): leave no new segment behind a failed append, sync or directory
        // sync: a later writer would append to a segment whose data or name nobody vouches for.
        drop(file);
        if !active(Mutant::AppendAfterFailedSync) {
            let _ = fs.remove_file(&path, steps.repair);
        }
        return Err(error.into());
    }
    debug_assert!(
        selected().is_some() || file.len().ok() == Some(line.len() as u64),
        "a new segment holds exactly its first line"
    );
    Ok(())
}

/// Appends `bytes` at `len`, the end of `file`, and syncs them (unless `sync` is off, for a
/// mutant). On a failure, cuts the file back to `len` and syncs that (rule 5 of the module
/// header): a short write may have left part of the bytes, and a failed sync may have dropped
/// them while reads still return them, so nobody may append after them. `boundaries` are the
/// append's and its sync's, `cut` the cut's and its sync's.
pub(crate) fn append_or_cut_back<T: File>(
    file: &T,
    len: u64,
    bytes: &[u8],
    boundaries: (Boundary, Boundary),
    cut: (Boundary, Boundary),
    sync: bool,
) -> Result<()> {
    assert!(bytes.last() == Some(&b'\n'), "what is appended ends a line");
    let written = file
        .append(bytes, boundaries.0)
        .and_then(|()| if sync { file.sync_data(boundaries.1) } else { Ok(()) });
    if let Err(error) = written {
        if !active(Mutant::AppendAfterFailedSync) {
            let _ = file.set_len(len, cut.0).and_then(|()| file.sync_data(cut.1));
        }
        return Err(error.into());
    }
    // The file ended at `len` (the caller holds the lock, and cut any torn tail off first): it
    // grew by exactly the bytes.
    debug_assert!(
        selected().is_some() || file.len().ok() == Some(len + bytes.len() as u64),
        "an append grows its file by exactly its bytes ({} from {len}, now {:?})",
        bytes.len(),
        file.len().ok()
    );
    Ok(())
}

/// Makes everything this session's log, record and queue show durable (rule 2 of the module
/// header): syncs the newest numbered segment and the timeline, session and sessions
/// directories. The record and the queue are published by renaming a synced staging file, so a
/// durable directory entry is all they need; sealed segments were synced whole when written.
/// A session without a directory is left alone.
pub(crate) fn vouch<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    steps: &LogBoundaries,
) -> Result<()> {
    if !fs.exists(&layout.session_dir(id))? {
        return Ok(());
    }
    let segments = list_segments(fs, layout, id)?;
    let newest = if active(Mutant::VouchSyncsOldestSegment) {
        segments.iter().find(|segment| segment.no.is_some())
    } else {
        segments.iter().rev().find(|segment| segment.no.is_some())
    };
    debug_assert!(
        active(Mutant::VouchSyncsOldestSegment)
            || newest.is_none_or(|newest| segments.iter().all(|segment| segment.no <= newest.no)),
        "a vouch syncs the newest segment: the only one a holder appended to unsynced"
    );
    if let Some(newest) = newest {
        let file = fs.open(&newest.path, OpenOptions::read_write(), steps.vouch)?;
        file.sync_data(steps.vouch)?;
    }
    if active(Mutant::VouchSkipsDirectories) {
        return Ok(());
    }
    let dir = layout.timeline_dir(id);
    if fs.exists(&dir)? {
        fs.sync_dir(&dir, steps.vouch_dir_sync)?;
    }
    fs.sync_dir(&layout.session_dir(id), steps.vouch_session_dir_sync)?;
    fs.sync_dir(&layout.sessions_dir(), steps.vouch_sessions_dir_sync)?;
    Ok(())
}

/// Truncates a torn tail of the newest numbered segment durably: an unterminated final line,
/// or a final line damaged by a power loss (NUL bytes). Returns the bytes removed. A final line
/// that is complete but does not parse is corruption: nothing is written after it.
///
/// `segments` is the session's listing ([`list_segments`]) taken under the lock that this
/// recovery holds: no other process adds, removes or grows a segment meanwhile, so it is the
/// listing now.
pub(crate) fn repair_torn_tail<F: Fs>(
    fs: &F,
    segments: &[Segment],
    steps: &LogBoundaries,
) -> Result<u64> {
    let Some(newest) = segments.iter().rev().find(|segment| segment.no.is_some()) else {
        return Ok(0);
    };
    if segments.last().map(|last| &last.path) != Some(&newest.path) || newest.len == Some(0) {
        return Ok(0);
    }
    let file = fs.open(&newest.path, OpenOptions::read_write(), steps.repair)?;
    let len = file.len()?;
    let mut keep = if active(Mutant::RepairKeepsDamagedLines) {
        unterminated_cut(&file, len)?
    } else {
        sound_len(fs, newest)?
    };
    if keep == len {
        return Ok(0);
    }
    if active(Mutant::RepairCutsCompleteLine) {
        let mut prefix = vec![0u8; usize::try_from(keep).unwrap_or(0)];
        let read = file.read_at(0, &mut prefix)?;
        prefix.truncate(read);
        keep = prefix
            .split_last()
            .map_or(&[][..], |(_, before)| before)
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |newline| newline as u64 + 1);
    }
    if active(Mutant::RepairByUnsyncedCopy) {
        let mut prefix = vec![0u8; usize::try_from(keep).unwrap_or(0)];
        let read = file.read_at(0, &mut prefix)?;
        prefix.truncate(read);
        let copy = newest.path.with_extension("ndjson.repair");
        let staged = fs.open(&copy, OpenOptions::create_truncate(), steps.repair)?;
        staged.append(&prefix, steps.repair)?;
        fs.rename(&copy, &newest.path, steps.repair)?;
        return Ok(len - keep);
    }
    file.set_len(keep, steps.repair)?;
    file.sync_data(steps.repair_sync)?;
    debug_assert_eq!(file.len().ok(), Some(keep), "a repaired segment ends at its sound length");
    Ok(len - keep)
}

/// Only the unterminated end cut (what a repair that keeps damaged lines does).
fn unterminated_cut<T: File>(file: &T, len: u64) -> Result<u64> {
    let mut pos = len;
    let mut byte = [0u8; 1];
    while pos > 0 {
        file.read_at(pos - 1, &mut byte)?;
        if byte[0] == b'\n' {
            break;
        }
        pos -= 1;
    }
    debug_assert!(pos == 0 || byte[0] == b'\n', "what a cut keeps ends at a line's end");
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use faultfs::{Boundary, FaultPlan, File as _, Fs as _, OpenOptions, SimFs};

    use super::append_or_cut_back;

    /// The postcondition of an append is checked where it is written: told a wrong end of the
    /// file (as a caller that skipped the torn-tail cut would be), the append trips it.
    #[test]
    #[should_panic(expected = "an append grows its file by exactly its bytes")]
    fn an_append_told_the_wrong_end_trips_its_postcondition() {
        let fs = SimFs::new(FaultPlan::none(1));
        let step = Boundary::new("test.append");
        let file = fs.open(Path::new("/log"), OpenOptions::create_new(), step).expect("a file");
        file.append(b"a torn fragm", step).expect("the first bytes");
        // The caller believes the file is empty.
        let _ = append_or_cut_back(&file, 0, b"line\n", (step, step), (step, step), true);
    }
}
