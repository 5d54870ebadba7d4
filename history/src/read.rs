//! Reading a transcript another process may be appending to: complete lines only, from a byte
//! offset, in bounded memory. A final line without its newline is being written: it is left for
//! the next read (the returned offset stops before it). A line longer than [`LINE_BYTES_MAX`] is
//! skipped whole and counted as `oversized-line`, without holding it in memory.

use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::Path;

use crate::Error;
use crate::event::{Event, Harness, Kind};
use crate::parse::{Parser, Reading};

/// Opens `path` for reading if it is a regular file (a link to one is followed: transcript
/// roots are often links). Anything else (a FIFO, a device, a socket, a directory) is refused
/// at once: the open does not wait for a peer (`O_NONBLOCK`, which changes nothing for a regular
/// file), and the type is checked on the open file.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let nonblock = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
    let file = std::fs::OpenOptions::new().read(true).custom_flags(nonblock).open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, a device, a socket or a directory): refused, not read",
        ));
    }
    Ok(file)
}

/// The longest transcript line parsed (a longer one is skipped and counted).
pub const LINE_BYTES_MAX: usize = 16 << 20;

/// Reads the complete lines of `path` from byte `offset` (line numbers continue from
/// `lines_before`), parsing them as `harness` transcripts.
pub fn read_from(
    path: &Path,
    harness: Harness,
    offset: u64,
    lines_before: u64,
) -> Result<Reading, Error> {
    read_chunk(path, &mut Parser::new(harness), offset, lines_before, u64::MAX)
}

/// As [`read_from`], with `parser` (kept from the chunk before, so what spans lines, such as a
/// reply's usage, is seen once), stopping after the line that takes the read past `budget`
/// bytes (its `more` then says whether a byte follows): a long transcript is read in chunks of
/// bounded memory, each continuing from the last one's offset and lines. An OpenCode session
/// (`path` its locator) is read from its rendition, to its end in one snapshot: no budget cuts
/// it.
pub fn read_chunk(
    path: &Path,
    parser: &mut Parser,
    offset: u64,
    lines_before: u64,
    budget: u64,
) -> Result<Reading, Error> {
    if parser.harness() == Harness::OpenCode {
        return crate::opencode::read(path, parser, offset, lines_before);
    }
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut file = open_regular(path).map_err(io)?;
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut reader = BufReader::with_capacity(64 << 10, file);
    let mut read = Reading { offset, lines: lines_before, ..Reading::default() };
    let mut line = Vec::new();
    loop {
        line.clear();
        let (complete, oversized, consumed) = next_line(&mut reader, &mut line).map_err(io)?;
        if !complete {
            // End of file: nothing, or a line still being written.
            break;
        }
        read.offset += consumed;
        read.lines += 1;
        if oversized {
            read.events.push(Event {
                ts: None,
                line: read.lines,
                kind: Kind::Unknown { kind: "oversized-line".to_owned() },
            });
        } else {
            let text = String::from_utf8_lossy(&line);
            parser.line(read.lines, text.trim_end_matches(['\n', '\r']), &mut read.events);
        }
        if read.offset - offset >= budget {
            read.more = !reader.fill_buf().map_err(io)?.is_empty();
            break;
        }
    }
    read.meta = parser.meta.clone();
    Ok(read)
}

/// Reads one line into `line` (at most [`LINE_BYTES_MAX`] bytes kept): whether it ended with a
/// newline, whether it was longer than the bound, and the bytes it took in the file.
fn next_line(
    reader: &mut BufReader<std::fs::File>,
    line: &mut Vec<u8>,
) -> std::io::Result<(bool, bool, u64)> {
    let mut consumed = 0u64;
    let mut oversized = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok((false, oversized, consumed));
        }
        let (take, done) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        if line.len() + take <= LINE_BYTES_MAX {
            line.extend_from_slice(&buffer[..take]);
        } else {
            oversized = true;
            line.clear();
        }
        reader.consume(take);
        consumed += take as u64;
        if done {
            return Ok((true, oversized, consumed));
        }
    }
}
