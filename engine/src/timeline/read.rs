//! Lock-free timeline reads: segment listing, backward tail, forward reads from a cursor, and
//! the stamp. Readers never modify anything and never take a lock; they see a line once its
//! bytes are complete, and ignore a torn final line (see the module header of `timeline`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use faultfs::{File, FileKind, Fs, OpenOptions};

use super::line::Line;
use crate::damage::{Damage, DamageKind};
use crate::error::{CorruptReason, Error, Result};
use crate::layout::{LINE_BYTES_MAX, Layout, READ_BLOCK_BYTES, SegmentNo, SessionId};

/// One segment of a session's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// `None` for the legacy segment.
    pub(crate) no: Option<SegmentNo>,
    pub(crate) path: PathBuf,
    /// The length when listed: known for the legacy segment and the newest one; `None` for a
    /// sealed numbered segment (it never changes, and a listing must not cost a stat per
    /// segment: see [`list_segments`]).
    pub(crate) len: Option<u64>,
    /// The modification time when listed (nanoseconds since the epoch), known exactly when
    /// `len` is.
    pub(crate) modified_ns: Option<u64>,
}

impl Segment {
    /// The segment's position in a cursor: 0 for legacy, else its number.
    fn key(&self) -> u64 {
        let key = self.no.map_or(0, |no| no.0);
        debug_assert!(key <= SegmentNo::MAX.0, "a segment's key is one a name can hold");
        key
    }
}

/// Lists a session's segments in event order: legacy first, then numbered ones. One directory
/// listing, and one stat each for the legacy segment and the newest numbered one (the only
/// segments whose length can change); sealed segments are not statted, so the cost of a listing
/// does not grow with a stat per segment of a long log.
pub(crate) fn list_segments<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
) -> Result<Vec<Segment>> {
    let mut segments = Vec::new();
    // Never through a symbolic link: the session directory, the legacy segment and the
    // timeline directory must be what they are (corrupt, naming the path, otherwise).
    if !crate::layout::expect_kind(fs, &layout.session_dir(id), FileKind::Dir)? {
        return Ok(segments);
    }
    let legacy = layout.legacy_segment(id);
    match fs.metadata(&legacy) {
        Ok(metadata) if metadata.kind == FileKind::File => segments.push(Segment {
            no: None,
            path: legacy,
            len: Some(metadata.len),
            modified_ns: Some(metadata.modified_ns()),
        }),
        // Something else in its place: name it.
        Ok(_) => {
            crate::layout::expect_kind(fs, &legacy, FileKind::File)?;
        }
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {}
        Err(error) => return Err(error.into()),
    }
    let dir = layout.timeline_dir(id);
    if !crate::layout::expect_kind(fs, &dir, FileKind::Dir)? {
        return Ok(segments);
    }
    let numbered = numbered_segments(fs, layout, id)?;
    let newest = numbered.last().copied();
    for no in numbered {
        let path = layout.segment(id, no);
        if Some(no) != newest {
            segments.push(Segment { no: Some(no), path, len: None, modified_ns: None });
            continue;
        }
        match fs.metadata(&path) {
            Ok(metadata) => segments.push(Segment {
                no: Some(no),
                path,
                len: Some(metadata.len),
                modified_ns: Some(metadata.modified_ns()),
            }),
            // Closed between the listing and the stat: the session is gone.
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {}
            Err(error) => return Err(error.into()),
        }
    }
    debug_assert!(
        segments
            .windows(2)
            .all(|pair| pair.first().map(Segment::key) < pair.get(1).map(Segment::key)),
        "segments are listed oldest first, each once"
    );
    assert!(
        segments.iter().skip(1).all(|segment| segment.no.is_some()),
        "only the first segment can be the legacy one"
    );
    Ok(segments)
}

/// The numbers of a session's numbered segments, in order: 1 to the newest without a gap
/// (corrupt, naming the first missing one, otherwise; a missing number is a lost part of the
/// log), each a regular file (corrupt, naming it, otherwise).
fn numbered_segments<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<Vec<SegmentNo>> {
    let dir = layout.timeline_dir(id);
    let entries = match fs.read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => Vec::new(),
        Err(error) => return Err(error.into()),
    };
    let mut numbered = Vec::new();
    for entry in &entries {
        let Some(no) = SegmentNo::parse(&entry.name) else { continue };
        if entry.kind != FileKind::File {
            return Err(Error::Corrupt {
                path: dir.join(&entry.name),
                offset: 0,
                reason: CorruptReason::BadSegment(
                    "a segment that is not a regular file".to_owned(),
                ),
            });
        }
        numbered.push(no);
    }
    numbered.sort();
    for (expected, no) in (1..).zip(&numbered) {
        if no.0 != expected {
            return Err(Error::Corrupt {
                path: layout.segment(id, SegmentNo(expected)),
                offset: 0,
                reason: CorruptReason::BadSegment(format!(
                    "segment {expected} is missing (the log continues at segment {})",
                    no.0
                )),
            });
        }
    }
    debug_assert!(
        numbered.iter().zip(1..).all(|(no, expected)| no.0 == expected),
        "the numbered segments run from 1 without a gap"
    );
    Ok(numbered)
}

/// The current length of `segment` (a stat unless the listing already holds it).
pub(crate) fn segment_len<F: Fs>(fs: &F, segment: &Segment) -> Result<u64> {
    debug_assert_eq!(
        segment.len.is_some(),
        segment.modified_ns.is_some(),
        "a listing knows a segment's length exactly when it knows its time"
    );
    match segment.len {
        Some(len) => Ok(len),
        None => Ok(fs.metadata(&segment.path)?.len),
    }
}

/// Whether a complete line is damaged: NUL bytes in it (a power loss kept a later chunk of it
/// but not an earlier one, and the extension reads as zeros) or bytes that do not decode (stale
/// blocks a grown file showed in place of unsynced data).
///
/// Under the medium assumption (a sync that succeeded made every byte before the file's end
/// durable, and a torn write never damages bytes synced before it), a damaged line in the newest
/// segment lies past the last successful sync, and so does every line after it: none of them was
/// acknowledged. The torn tail is therefore the first damaged line whose followers are all
/// damaged too, up to the end; a damaged line with a sound line after it is corruption.
fn damaged(body: &[u8]) -> bool {
    debug_assert!(!body.contains(&b'\n'), "a line is judged without its line end");
    body.contains(&0) || body.len() > LINE_BYTES_MAX || Line::decode_lenient(body).is_none()
}

/// Whether `rest` (starting at a line) holds only damaged lines and perhaps an unterminated end.
fn torn_from(rest: &[u8]) -> bool {
    rest.split_inclusive(|&b| b == b'\n').filter_map(|line| line.strip_suffix(b"\n")).all(damaged)
}

/// The length of the newest segment without its torn tail (an unterminated end and the damaged
/// lines before it, see [`damaged`]), reading backward only as far as that tail reaches.
pub(crate) fn sound_len<F: Fs>(fs: &F, segment: &Segment) -> Result<u64> {
    let sound = BackwardLines::open(fs, segment, true)?.end();
    debug_assert!(
        segment.len.is_none_or(|len| sound <= len),
        "the sound part of a segment is a prefix of it"
    );
    Ok(sound)
}

/// Whether a segment may end in a torn line: the newest one, and the legacy one.
fn tail_tolerant(segments: &[Segment], index: usize) -> bool {
    debug_assert!(index < segments.len(), "a segment of the listing");
    index + 1 == segments.len() || segments.get(index).is_some_and(|segment| segment.no.is_none())
}

/// Parses the complete lines of `bytes`, which start at byte `base` of `segment`. Returns the
/// lines with their offsets and the offset just past the last line taken. With `tolerant`, an
/// unterminated end and a damaged (NUL-holding) final line are left unread (a torn tail);
/// otherwise they are corruption.
fn parse_forward(
    segment: &Segment,
    base: u64,
    bytes: &[u8],
    tolerant: bool,
) -> Result<(Vec<(u64, Line)>, u64)> {
    let mut lines = Vec::new();
    let mut start = 0usize;
    for piece in bytes.split_inclusive(|&b| b == b'\n') {
        let Some(body) = piece.strip_suffix(b"\n") else {
            if tolerant {
                break;
            }
            return Err(Error::Corrupt {
                path: segment.path.clone(),
                offset: base + start as u64,
                reason: CorruptReason::BadLine("unterminated line in a sealed segment".to_owned()),
            });
        };
        let line = match Line::decode_at(body, &segment.path, base + start as u64) {
            Ok(line) if !(tolerant && body.contains(&0)) => line,
            // A damaged line followed only by damaged lines (and perhaps an unterminated end)
            // is a torn tail: see `damaged`.
            _ if tolerant && torn_from(bytes.get(start..).unwrap_or_default()) => break,
            Ok(line) => line,
            Err(error) => return Err(error),
        };
        lines.push((base + start as u64, line));
        start += piece.len();
    }
    debug_assert!(start <= bytes.len(), "the lines taken are within the bytes read");
    debug_assert!(
        lines.windows(2).all(|pair| pair.first().map(|l| l.0) < pair.get(1).map(|l| l.0)),
        "lines are taken in the order they are written"
    );
    Ok((lines, base + start as u64))
}

/// Reads `segment` from `offset` to its current end.
fn read_rest<F: Fs>(fs: &F, segment: &Segment, offset: u64) -> Result<Vec<u8>> {
    let file = fs.open(&segment.path, OpenOptions::read(), faultfs::Boundary::new("read"))?;
    let len = file.len()?;
    if offset > len {
        return Ok(Vec::new());
    }
    let mut buf = vec![0u8; usize::try_from(len - offset).unwrap_or(usize::MAX)];
    let filled = file.read_full_at(offset, &mut buf)?;
    buf.truncate(filled);
    debug_assert!(buf.len() as u64 <= len - offset, "no more read than the segment held");
    Ok(buf)
}

/// A position in a session's log: the segment and byte offset just past the last line read, and
/// how many public events lie before it. Private lines do not count toward `index`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// Segment key: 0 for the legacy segment (or the start of a log without one), else the
    /// segment number.
    pub segment: u64,
    /// Byte offset within that segment.
    pub offset: u64,
    /// Public events before this position.
    pub index: u64,
}

impl Cursor {
    /// The start of the log.
    pub const START: Cursor = Cursor { segment: 0, offset: 0, index: 0 };
}

impl fmt::Display for Cursor {
    /// `<index>.<segment>.<offset>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.index, self.segment, self.offset)
    }
}

impl FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Cursor> {
        let invalid =
            |reason: &str| Error::InvalidCursor { cursor: s.to_owned(), reason: reason.to_owned() };
        let parts: Vec<&str> = s.split('.').collect();
        let [index, segment, offset] = parts.as_slice() else {
            return Err(invalid("expected <index>.<segment>.<offset>"));
        };
        let number = |text: &str| text.parse::<u64>().map_err(|_| invalid("not a number"));
        let segment = number(segment)?;
        if segment > SegmentNo::MAX.0 {
            return Err(invalid("the segment number has more digits than a segment's name"));
        }
        let cursor = Cursor { index: number(index)?, segment, offset: number(offset)? };
        debug_assert!(cursor.segment <= SegmentNo::MAX.0, "a cursor names a segment a name holds");
        Ok(cursor)
    }
}

/// Reads every line after `cursor`, returning them (private ones included) and the cursor past
/// the last complete line. Reads only the bytes past the cursor.
pub(crate) fn read_from<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    cursor: Cursor,
) -> Result<(Vec<Line>, Cursor)> {
    let (lines, next) = read_from_positioned(fs, layout, id, cursor)?;
    debug_assert!(
        lines.is_sorted_by(|earlier, later| earlier.0 < later.0),
        "lines are read in log order"
    );
    Ok((lines.into_iter().map(|(_, line)| line).collect(), next))
}

/// Where a line of a session's log starts: its segment's key (0 for the legacy segment) and
/// byte offset. A page of older events is read backward from one (see [`tail_page`]); its text
/// form is `<segment>.<offset>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// Segment key: 0 for the legacy segment, else the segment number.
    pub segment: u64,
    /// Byte offset within that segment.
    pub offset: u64,
}

impl fmt::Display for Position {
    /// `<segment>.<offset>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.segment, self.offset)
    }
}

impl FromStr for Position {
    type Err = Error;

    fn from_str(s: &str) -> Result<Position> {
        let invalid =
            |reason: &str| Error::InvalidCursor { cursor: s.to_owned(), reason: reason.to_owned() };
        let (segment, offset) =
            s.split_once('.').ok_or_else(|| invalid("expected <segment>.<offset>"))?;
        let number = |text: &str| text.parse::<u64>().map_err(|_| invalid("not a number"));
        let segment = number(segment)?;
        if segment > SegmentNo::MAX.0 {
            return Err(invalid("the segment number has more digits than a segment's name"));
        }
        let position = Position { segment, offset: number(offset)? };
        debug_assert!(
            position.segment <= SegmentNo::MAX.0,
            "a position names a segment a name holds"
        );
        Ok(position)
    }
}

/// [`read_from`], with each line's position.
pub(crate) fn read_from_positioned<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    cursor: Cursor,
) -> Result<(Vec<(Position, Line)>, Cursor)> {
    let segments = list_segments(fs, layout, id)?;
    let first = if cursor == Cursor::START {
        0
    } else {
        let position = segments.iter().position(|segment| segment.key() == cursor.segment);
        match position.and_then(|position| Some((position, segments.get(position)?))) {
            Some((position, segment)) if segment_len(fs, segment)? >= cursor.offset => position,
            Some(_) => {
                return Err(Error::InvalidCursor {
                    cursor: cursor.to_string(),
                    reason: "offset is past the end of its segment".to_owned(),
                });
            }
            None => {
                return Err(Error::InvalidCursor {
                    cursor: cursor.to_string(),
                    reason: "its segment does not exist".to_owned(),
                });
            }
        }
    };
    let mut lines = Vec::new();
    let mut next = cursor;
    for (index, segment) in segments.iter().enumerate().skip(first) {
        let offset = if index == first && cursor != Cursor::START { cursor.offset } else { 0 };
        let bytes = read_rest(fs, segment, offset)?;
        let (parsed, end) =
            parse_forward(segment, offset, &bytes, tail_tolerant(&segments, index))?;
        next.index += parsed.iter().filter(|(_, line)| line.is_public()).count() as u64;
        next.segment = segment.key();
        next.offset = end;
        let key = segment.key();
        lines.extend(
            parsed.into_iter().map(|(offset, line)| (Position { segment: key, offset }, line)),
        );
    }
    assert!(
        (next.segment, next.offset) >= (cursor.segment, cursor.offset)
            && next.index >= cursor.index,
        "a read never moves its cursor backwards"
    );
    Ok((lines, next))
}

/// The complete line that starts at `position`, if there is one (`None`: no such segment, or no
/// whole line there). A positioned read of at most the line's bytes.
pub(crate) fn line_at<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    position: Position,
) -> Result<Option<Line>> {
    let Position { segment, offset } = position;
    let Some(path) = layout.segment_of_key(id, segment) else { return Ok(None) };
    let file = match fs.open(&path, OpenOptions::read(), faultfs::Boundary::new("read")) {
        Ok(file) => file,
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    // Most lines fit one page; a longer one is read a page at a time.
    let mut bytes = Vec::new();
    let mut block = vec![0u8; 4096];
    loop {
        let read = file.read_at(offset + bytes.len() as u64, &mut block)?;
        if read == 0 {
            return Ok(None);
        }
        let start = bytes.len();
        bytes.extend_from_slice(block.get(..read).unwrap_or(&block));
        if let Some(newline) = block.iter().take(read).position(|&b| b == b'\n') {
            bytes.truncate(start + newline);
            break;
        }
        if bytes.len() > LINE_BYTES_MAX {
            return Ok(None);
        }
    }
    assert!(!bytes.contains(&b'\n'), "a line read at a position is that one line");
    assert!(bytes.len() <= LINE_BYTES_MAX + 4096, "a line read is bounded");
    Ok(Line::decode_at(&bytes, &path, offset).ok())
}

/// The last lines of the log (newest first) until `want` lines satisfy `counts`, reading
/// segments backward from the end in blocks. The cost depends on what is read, not on the size
/// of the log ([`page_lines`] from the end).
pub(crate) fn tail_lines<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    want: usize,
    counts: impl Fn(&Line) -> bool,
) -> Result<Vec<Line>> {
    let page = page_lines(fs, layout, id, None, want, counts)?;
    debug_assert!(
        page.lines.windows(2).all(|pair| matches!(pair, [newer, older] if older.0 < newer.0)),
        "a tail is read newest first"
    );
    Ok(page.lines.into_iter().map(|(_, line)| line).collect())
}

/// Lines read backward from a position (see [`page_lines`]).
pub(crate) struct PageLines {
    /// Newest first, each with where it starts.
    pub(crate) lines: Vec<(Position, Line)>,
    /// Whether the read stopped because `want` lines counted with older lines left.
    pub(crate) full: bool,
    /// Where the read started: the end of the last complete line (or `before`).
    pub(crate) end: Position,
}

/// The lines before `before` (`None`: the end of the log), newest first, until `want` lines
/// satisfy `counts`: [`tail_lines`] from any line start. `before` must be where a line starts
/// (or a segment's end): anything else is [`Error::InvalidCursor`].
pub(crate) fn page_lines<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    before: Option<Position>,
    want: usize,
    counts: impl Fn(&Line) -> bool,
) -> Result<PageLines> {
    // A reader takes no lock: a writer repairing a torn tail may shrink the newest segment under
    // it. That is not damage; read again (a few times at most).
    const ATTEMPTS: usize = 3;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match page_once(fs, layout, id, before, want, &counts) {
            Err(Error::Corrupt { reason: CorruptReason::Shrank, .. }) if attempt < ATTEMPTS => {
                continue;
            }
            result => {
                return result.inspect(|page| {
                    assert!(
                        page.lines.is_sorted_by(|newer, older| newer.0 > older.0),
                        "a page is read newest first, each line once"
                    );
                    assert!(
                        page.lines.first().is_none_or(|(newest, _)| *newest < page.end),
                        "a page's lines start before its end"
                    );
                });
            }
        }
    }
}

fn page_once<F: Fs>(
    fs: &F,
    layout: &Layout,
    id: &SessionId,
    before: Option<Position>,
    want: usize,
    counts: &impl Fn(&Line) -> bool,
) -> Result<PageLines> {
    page_in(fs, &list_segments(fs, layout, id)?, before, want, counts)
}

/// The last `want` lines of the log whose listing is `segments`, newest first: [`tail_lines`]
/// for a writer that listed the log under the record lock (no other writer changes it then).
/// Each segment is opened and read to its current end, so a length the listing holds from
/// before a repair of the torn tail does not matter.
pub(crate) fn tail_lines_in<F: Fs>(fs: &F, segments: &[Segment], want: usize) -> Result<Vec<Line>> {
    let page = page_in(fs, segments, None, want, &|_| true)?;
    debug_assert!(page.lines.len() <= want, "no more lines than were asked for");
    Ok(page.lines.into_iter().map(|(_, line)| line).collect())
}

/// [`page_once`] on the listing `segments`.
fn page_in<F: Fs>(
    fs: &F,
    segments: &[Segment],
    before: Option<Position>,
    want: usize,
    counts: &impl Fn(&Line) -> bool,
) -> Result<PageLines> {
    let newest = segments.len().checked_sub(1);
    assert_eq!(newest.is_none(), segments.is_empty(), "an empty log has no newest segment");
    let (last, stop) = match before {
        None => (newest, None),
        Some(before) => {
            let index = segments.iter().position(|segment| segment.key() == before.segment);
            let Some(index) = index else {
                return Err(Error::InvalidCursor {
                    cursor: before.to_string(),
                    reason: "its segment does not exist".to_owned(),
                });
            };
            (Some(index), Some(before.offset))
        }
    };
    let mut page = PageLines { lines: Vec::new(), full: false, end: before.unwrap_or_default() };
    let Some(last) = last else { return Ok(page) };
    assert!(last < segments.len(), "a page starts in a segment of the log");
    let mut counted = 0usize;
    for (index, segment) in segments.iter().enumerate().take(last + 1).rev() {
        let mut reader = match stop.filter(|_| index == last) {
            Some(offset) => BackwardLines::open_before(fs, segment, offset)?,
            None => BackwardLines::open(fs, segment, tail_tolerant(segments, index))?,
        };
        if index == last {
            page.end = Position { segment: segment.key(), offset: reader.end() };
        }
        if want == 0 {
            return Ok(page);
        }
        while let Some((offset, line)) = reader.next_line()? {
            if counts(&line) {
                counted += 1;
            }
            page.lines.push((Position { segment: segment.key(), offset }, line));
            if counted >= want {
                // Nothing is older than the first line of the first segment.
                page.full = index > 0 || offset > 0;
                return Ok(page);
            }
        }
    }
    Ok(page)
}

/// Reads a segment's lines from the end backward, in blocks.
struct BackwardLines<T: File> {
    file: T,
    segment: Segment,
    /// Bytes `[pos, pos + buf.len())` of the segment not yet returned; `buf` ends at a line end.
    buf: Vec<u8>,
    pos: u64,
}

impl<T: File> BackwardLines<T> {
    fn open<F: Fs<File = T>>(fs: &F, segment: &Segment, tolerant: bool) -> Result<Self> {
        let file = fs.open(&segment.path, OpenOptions::read(), faultfs::Boundary::new("read"))?;
        let len = file.len()?;
        let mut reader =
            BackwardLines { file, segment: segment.clone(), buf: Vec::new(), pos: len };
        // Find the end of the last complete line.
        loop {
            if let Some(newline) = reader.buf.iter().rposition(|&b| b == b'\n') {
                let unterminated = reader.buf.len() - newline - 1;
                if unterminated > 0 && !tolerant {
                    return Err(Error::Corrupt {
                        path: segment.path.clone(),
                        offset: reader.pos + newline as u64 + 1,
                        reason: CorruptReason::BadLine(
                            "unterminated line in a sealed segment".to_owned(),
                        ),
                    });
                }
                reader.buf.truncate(newline + 1);
                break;
            }
            if reader.pos == 0 {
                if !reader.buf.is_empty() && !tolerant {
                    return Err(Error::Corrupt {
                        path: segment.path.clone(),
                        offset: 0,
                        reason: CorruptReason::BadLine(
                            "unterminated line in a sealed segment".to_owned(),
                        ),
                    });
                }
                reader.buf.clear();
                return Ok(reader);
            }
            reader.read_block()?;
        }
        if tolerant {
            // Damaged final lines are a torn tail too: skip every one of them.
            while !reader.buf.is_empty() {
                let (start, body) = reader.last_line()?;
                if !damaged(&body) {
                    break;
                }
                reader.buf.truncate(start);
            }
        }
        assert!(reader.end() <= len, "a reader ends within the file");
        assert!(reader.buf.last().is_none_or(|&b| b == b'\n'), "a reader holds whole lines");
        Ok(reader)
    }

    /// A reader of the lines that end before `offset`, which must be where a line starts or the
    /// segment's end (a position a page handed out).
    fn open_before<F: Fs<File = T>>(fs: &F, segment: &Segment, offset: u64) -> Result<Self> {
        let file = fs.open(&segment.path, OpenOptions::read(), faultfs::Boundary::new("read"))?;
        let invalid = |reason: &str| Error::InvalidCursor {
            cursor: Position { segment: segment.key(), offset }.to_string(),
            reason: reason.to_owned(),
        };
        if offset > file.len()? {
            return Err(invalid("offset is past the end of its segment"));
        }
        let mut reader =
            BackwardLines { file, segment: segment.clone(), buf: Vec::new(), pos: offset };
        if offset > 0 {
            // The buffer holds the bytes up to `offset`, ending at a line end (empty only at 0).
            reader.read_block()?;
            if reader.buf.last() != Some(&b'\n') {
                return Err(invalid("no line starts there"));
            }
        }
        assert_eq!(reader.end(), offset, "a page read back starts where it was asked to");
        Ok(reader)
    }

    /// Where the lines not yet returned end.
    fn end(&self) -> u64 {
        let end = self.pos.checked_add(self.buf.len() as u64);
        debug_assert!(end.is_some(), "a page ends inside a segment's length");
        end.unwrap_or(u64::MAX)
    }

    /// Prepends one block before `pos`.
    fn read_block(&mut self) -> Result<()> {
        let end = self.end();
        let take = (READ_BLOCK_BYTES as u64).min(self.pos);
        let start = self.pos - take;
        let mut block = vec![0u8; usize::try_from(take).unwrap_or(READ_BLOCK_BYTES)];
        if self.file.read_full_at(start, &mut block)? < block.len() {
            // The file shrank under us (a torn tail was repaired): what we hold may be stale.
            return Err(Error::Corrupt {
                path: self.segment.path.clone(),
                offset: start,
                reason: CorruptReason::Shrank,
            });
        }
        block.extend_from_slice(&self.buf);
        self.buf = block;
        self.pos = start;
        assert_eq!(self.end(), end, "a block is read before what is held, never past it");
        if self.buf.len() > LINE_BYTES_MAX + READ_BLOCK_BYTES {
            return Err(Error::Corrupt {
                path: self.segment.path.clone(),
                offset: self.pos,
                reason: CorruptReason::LineTooLong,
            });
        }
        Ok(())
    }

    /// The index in `buf` where the last line starts, and its body (without `\n`), reading
    /// more blocks as needed. `buf` must be non-empty and end with `\n`.
    fn last_line(&mut self) -> Result<(usize, Vec<u8>)> {
        loop {
            let Some((last, before)) = self.buf.split_last() else {
                unreachable!("last_line is called on a non-empty buffer");
            };
            assert_eq!(*last, b'\n', "the buffer ends with a line's newline");
            if let Some(newline) = before.iter().rposition(|&b| b == b'\n') {
                let body = before.get(newline + 1..).unwrap_or_default();
                return Ok((newline + 1, body.to_vec()));
            }
            if self.pos == 0 {
                return Ok((0, before.to_vec()));
            }
            self.read_block()?;
        }
    }

    /// The previous line, and where it starts.
    fn next_line(&mut self) -> Result<Option<(u64, Line)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let (start, body) = self.last_line()?;
        let offset = self.pos + start as u64;
        let line = Line::decode_at(&body, &self.segment.path, offset)?;
        self.buf.truncate(start);
        assert_eq!(self.end(), offset, "what is left ends where the line returned starts");
        Ok(Some((offset, line)))
    }
}

/// Cheap change detection: equal stamps mean no line was appended in between (a repair or a new
/// segment changes the stamp too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stamp {
    /// Number of segments.
    pub segments: u64,
    /// Key of the newest segment (0: legacy or none).
    pub newest: u64,
    /// Its length in bytes.
    pub newest_len: u64,
    /// Its modification time (nanoseconds since the epoch): a log that lost unsynced bytes in a
    /// power loss and regrew to the same length since has another one.
    pub newest_modified_ns: u64,
}

/// The stamp of a session's log: one directory listing and one stat of the newest segment.
pub(crate) fn stamp<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<Stamp> {
    let segments = list_segments(fs, layout, id)?;
    let stamp = segments.last().map_or(Stamp::default(), |newest| Stamp {
        segments: segments.len() as u64,
        newest: newest.key(),
        newest_len: newest.len.unwrap_or(0),
        newest_modified_ns: newest.modified_ns.unwrap_or(0),
    });
    debug_assert!(
        segments.last().is_none_or(|newest| newest.len.is_some()),
        "a listing knows the newest segment's length"
    );
    Ok(stamp)
}

/// A read-only scan of a session's whole log for doctor: every glued fragment, the torn tail of
/// the newest segment (and of the legacy one), and the first line of each segment that no read
/// can take (reads stop there). A segment listing that fails is one corrupt entry.
pub(crate) fn scan<F: Fs>(fs: &F, layout: &Layout, id: &SessionId) -> Result<Vec<Damage>> {
    let segments = match list_segments(fs, layout, id) {
        Ok(segments) => segments,
        Err(Error::Corrupt { path, offset, reason }) => {
            let kind = DamageKind::Corrupt { reason: reason.to_string() };
            return Ok(vec![Damage { path, offset, kind }]);
        }
        Err(error) => return Err(error),
    };
    let mut found = Vec::new();
    for (index, segment) in segments.iter().enumerate() {
        let bytes = read_rest(fs, segment, 0)?;
        let tolerant = tail_tolerant(&segments, index);
        let mut start = 0usize;
        while let Some(rest) = bytes.get(start..).filter(|rest| !rest.is_empty()) {
            let at = start as u64;
            let newline = rest.iter().position(|&b| b == b'\n');
            let rest_torn = tolerant && torn_from(rest);
            let Some(newline) = newline.filter(|_| !rest_torn) else {
                let kind = if tolerant {
                    DamageKind::TornTail { bytes: (bytes.len() - start) as u64 }
                } else {
                    let reason = if newline.is_none() {
                        "unterminated line in a sealed segment".to_owned()
                    } else {
                        "damaged lines at the end of a sealed segment".to_owned()
                    };
                    DamageKind::Corrupt { reason }
                };
                found.push(Damage { path: segment.path.clone(), offset: at, kind });
                break;
            };
            let body = rest.get(..newline).unwrap_or_default();
            if Line::decode(body).is_err() {
                let kind = match Line::decode_lenient(body).filter(|_| !body.contains(&0)) {
                    Some(_) => {
                        let fragment = body
                            .windows(6)
                            .skip(1)
                            .position(|window| window == b"{\"ts\":")
                            .map_or(0, |at| at + 1);
                        DamageKind::GluedFragment { fragment_bytes: fragment as u64 }
                    }
                    None => {
                        let reason = match Line::decode_at(body, &segment.path, at) {
                            Err(Error::Corrupt { reason, .. }) => reason.to_string(),
                            _ => "damaged line".to_owned(),
                        };
                        found.push(Damage {
                            path: segment.path.clone(),
                            offset: at,
                            kind: DamageKind::Corrupt { reason },
                        });
                        break;
                    }
                };
                found.push(Damage { path: segment.path.clone(), offset: at, kind });
            }
            start += newline + 1;
        }
    }
    debug_assert!(
        found.iter().all(|damage| segments.iter().any(|segment| segment.path == damage.path)),
        "a scan of the log names segments only"
    );
    Ok(found)
}
