//! Where everything lives, and the limits and format constants of the store.
//!
//! The layout is the existing spex store's (DESIGN.md section 3), so an existing store opens
//! without migration:
//!
//! ```text
//! <root>/sessions/<id>/session.json                  the record
//! <root>/sessions/<id>/timeline.ndjson               legacy first segment (read, never written)
//! <root>/sessions/<id>/timeline/000000000001.ndjson  numbered segments
//! <root>/sessions/<id>/pending.json                  the delivery queue (absent when empty)
//! <root>/.session-locks/<id>.lock                    record lock (holds the owner's pid)
//! <root>/.delivery-locks/<id>.lock                   delivery lock (same)
//! <root>/.revoked-senders/<id>                       a closed sender's marker
//! <root>/session-close-ledger.ndjson                 one line per close
//! ```
//!
//! Additions of this engine (each needed for crash safety, documented in the README):
//! `session.json.tmp` and `pending.json.tmp` (the staging files of atomic replaces, removed by
//! recovery), `<root>/.closing/<id>` (a session being closed, moved out of `sessions/` in one
//! rename so a close is atomic), and `<lock>.takeover` (the flock that makes stale-lock takeover
//! race-free), `adapter` (the drain adapter spec of a session this engine created: the existing
//! implementation rewrites the record without keys it does not know), and `receipts.index` (a derived index of keyed-send receipts, rebuilt from
//! the log whenever it is missing or stale).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Default bound of one timeline segment.
pub const SEGMENT_BYTES_DEFAULT: u64 = 4 * 1024 * 1024;
/// The smallest segment bound the override may set.
pub const SEGMENT_BYTES_MIN: u64 = 1024;
/// The environment variable that overrides the segment bound (read by the caller, not here).
pub const SEGMENT_BYTES_ENV: &str = "SPEXCODE_TIMELINE_SEGMENT_BYTES";
pub use crate::id::{SESSION_ID_BYTES_MAX, SessionId};
/// Largest message text accepted by a send.
pub const TEXT_BYTES_MAX: usize = 256 * 1024;
/// Largest note accepted by a lifecycle write.
pub const NOTE_BYTES_MAX: usize = 64 * 1024;
/// Longest timeline line the engine writes or reads. A longer line is corruption.
pub const LINE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Most entries a delivery queue may hold; a send beyond it is refused.
pub const QUEUE_ENTRIES_MAX: usize = 10_000;
/// Largest record or queue file read.
pub const STATE_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Default bound on a lock wait.
pub const LOCK_WAIT_MS_DEFAULT: u64 = 10_000;
/// Block size of backward timeline reads.
pub const READ_BLOCK_BYTES: usize = 64 * 1024;
/// Digits of a numbered segment's file name.
pub const SEGMENT_NAME_DIGITS: usize = 12;

// A message and its receipt's composed copy, JSON-escaped (at most 6 bytes per input byte), plus
// hints and fields, must fit one line.
const _: () = assert!(TEXT_BYTES_MAX * 2 * 6 + 65_536 <= LINE_BYTES_MAX);
const _: () = assert!(SEGMENT_BYTES_MIN <= SEGMENT_BYTES_DEFAULT);
const _: () = assert!(NOTE_BYTES_MAX * 6 + 4096 <= LINE_BYTES_MAX);

/// Parses the segment-bound override exactly as the existing implementation does: the value is
/// read as a JavaScript number (surrounding blanks ignored, `""` is 0, hexadecimal, octal and
/// binary literals and exponents are numbers); a finite value is floored and raised to at least
/// [`SEGMENT_BYTES_MIN`]; anything else (unset, `abc`, `Infinity`) gives the default. Never fails.
pub fn segment_bytes_from_env(value: Option<&str>) -> u64 {
    let Some(value) = value else { return SEGMENT_BYTES_DEFAULT };
    let bound = segment_bytes_of(value);
    debug_assert!(bound >= SEGMENT_BYTES_MIN, "a segment bound is at least the minimum");
    bound
}

/// [`segment_bytes_from_env`] of a value that is set.
fn segment_bytes_of(value: &str) -> u64 {
    let bound = match js_number(value) {
        Some(number) if number.is_finite() => {
            let floored = number.floor();
            if floored <= SEGMENT_BYTES_MIN as f64 {
                SEGMENT_BYTES_MIN
            } else if floored >= u64::MAX as f64 {
                u64::MAX
            } else {
                floored as u64
            }
        }
        _ => SEGMENT_BYTES_DEFAULT,
    };
    debug_assert!(
        bound >= SEGMENT_BYTES_MIN,
        "whatever the text, the bound is at least the minimum"
    );
    bound
}

/// JavaScript's `Number(text)`: `None` for NaN.
fn js_number(text: &str) -> Option<f64> {
    let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if text.is_empty() {
        return Some(0.0);
    }
    for (prefix, radix) in [("0x", 16), ("0X", 16), ("0o", 8), ("0O", 8), ("0b", 2), ("0B", 2)] {
        if let Some(digits) = text.strip_prefix(prefix) {
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            return Some(digits.chars().fold(0.0, |value, c| {
                value * f64::from(radix) + f64::from(c.to_digit(radix).unwrap_or(0))
            }));
        }
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    if unsigned == "Infinity" {
        return Some(if text.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    // Rust accepts `inf` and `nan` spellings JavaScript does not: only digits, one point and an
    // exponent pass on.
    if !unsigned.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        || !unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.')
    {
        return None;
    }
    let number: Option<f64> = text.parse().ok();
    debug_assert!(number.is_none_or(|number| !number.is_nan()), "NaN reads as none");
    number
}

/// Whether `path` exists as a `kind` (a directory or a regular file) without following a
/// symbolic link: `Ok(false)` when absent; corrupt, naming the path, when something else is
/// there (a symbolic link above all: the store never follows one, so that nothing it reads,
/// writes or removes can be outside its root).
pub(crate) fn expect_kind<F: faultfs::Fs>(
    fs: &F,
    path: &Path,
    kind: faultfs::FileKind,
) -> Result<bool> {
    debug_assert!(
        matches!(kind, faultfs::FileKind::File | faultfs::FileKind::Dir),
        "the store expects a file or a directory, nothing else"
    );
    let found = match fs.metadata(path) {
        Ok(metadata) => metadata.kind,
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(false),
        Err(error) => return Err(error.into()),
    };
    if found == kind {
        return Ok(true);
    }
    let what = |kind| match kind {
        faultfs::FileKind::File => "a regular file",
        faultfs::FileKind::Dir => "a directory",
        faultfs::FileKind::Symlink => "a symbolic link",
        faultfs::FileKind::Other => "a special file",
    };
    Err(Error::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        reason: crate::error::CorruptReason::Unexpected(format!(
            "{} where {} belongs (refused: the store never follows links)",
            what(found),
            what(kind)
        )),
    })
}

/// A numbered segment (`1` is `000000000001.ndjson`); the legacy segment has no number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentNo(pub u64);

impl SegmentNo {
    /// The largest number a segment's name can hold (12 digits).
    pub const MAX: SegmentNo = SegmentNo(999_999_999_999);

    /// The numbered segment a cursor's or position's segment key names: `None` for the legacy
    /// key (0) and for a number no segment's name can hold (a forged or damaged cursor).
    pub fn from_key(key: u64) -> Option<SegmentNo> {
        let no = (1..=SegmentNo::MAX.0).contains(&key).then_some(SegmentNo(key));
        debug_assert!(no.is_none_or(|no| no.0 == key), "a key names its own segment");
        no
    }

    /// The segment's file name.
    pub fn file_name(self) -> String {
        debug_assert!(self <= SegmentNo::MAX, "segment {} has no 12-digit name", self.0);
        // Digit by digit, not through `format!`: a segment's path is built on every read of it.
        let mut digits = [b'0'; SEGMENT_NAME_DIGITS];
        let mut rest = self.0;
        for digit in digits.iter_mut().rev() {
            *digit = b'0' + u8::try_from(rest % 10).expect("a digit");
            rest /= 10;
        }
        let mut name = String::with_capacity(SEGMENT_NAME_DIGITS + ".ndjson".len());
        name.push_str(std::str::from_utf8(&digits).expect("ASCII digits"));
        name.push_str(".ndjson");
        debug_assert_eq!(
            name.len(),
            SEGMENT_NAME_DIGITS + ".ndjson".len(),
            "a segment's name is one its reader reads back"
        );
        name
    }

    /// Parses a numbered segment's file name (exactly 12 digits, `.ndjson`).
    pub fn parse(name: &str) -> Option<SegmentNo> {
        let digits = name.strip_suffix(".ndjson")?;
        if digits.len() != SEGMENT_NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let no = digits.parse().ok().map(SegmentNo);
        debug_assert!(
            no.is_none_or(|no| no.file_name() == name),
            "a segment number read from a name writes that name"
        );
        no
    }
}

/// The default store root: `$SPEXCODE_HOME` (else `~/.spexcode`) + `/projects/<enc>`, where
/// `<enc>` is `project` (the parent of the absolute git common dir, or the cwd outside git)
/// with every `/` and `.` replaced by `-`.
pub fn default_root(spexcode_home: Option<&Path>, home: &Path, project: &Path) -> PathBuf {
    let base = spexcode_home.map_or_else(|| home.join(".spexcode"), Path::to_path_buf);
    let encoded: String = project
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' || c == '.' { '-' } else { c })
        .collect();
    debug_assert!(!encoded.contains(['/', '.']), "a project is one name under projects/");
    base.join("projects").join(encoded)
}

/// Whether `path` lies inside the directory `dir`, compared as bytes: the layout builds every
/// path by pushing names onto its root, so a byte prefix ending at a separator is containment
/// (no component parsing on the paths every step names).
pub(crate) fn lies_in(path: &Path, dir: &Path) -> bool {
    let (path, dir) = (path.as_os_str().as_encoded_bytes(), dir.as_os_str().as_encoded_bytes());
    debug_assert!(!dir.is_empty(), "a directory has a name");
    path.len() > dir.len()
        && path.starts_with(dir)
        && (dir.ends_with(b"/") || path.get(dir.len()) == Some(&b'/'))
}

/// Whether the last name of `path` is `name`, compared as bytes (see [`lies_in`]).
pub(crate) fn ends_in(path: &Path, name: &str) -> bool {
    let (path, name) = (path.as_os_str().as_encoded_bytes(), name.as_bytes());
    debug_assert!(!name.is_empty() && !name.contains(&b'/'), "a name is one component");
    path.ends_with(name)
        && path.len() > name.len()
        && path.get(path.len() - name.len() - 1) == Some(&b'/')
}

/// One session's files on one filesystem: what the file-format modules (the record, the queue,
/// the receipt index, the run log) read and write, with no store around them.
#[derive(Debug)]
pub(crate) struct SessionFiles<'a, F> {
    /// The filesystem.
    pub(crate) fs: &'a F,
    /// The store's paths.
    pub(crate) layout: &'a Layout,
    /// The session.
    pub(crate) id: &'a SessionId,
}

impl<F> Clone for SessionFiles<'_, F> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<F> Copy for SessionFiles<'_, F> {}

/// The persisted receipt index's name in its session directory, and its staging file's.
pub(crate) const RECEIPT_INDEX: &str = "receipts.index";
pub(crate) const RECEIPT_INDEX_TMP: &str = "receipts.index.tmp";

/// The paths of one store.
#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
    /// `<root>/sessions`, which every session's path starts with.
    sessions: PathBuf,
}

impl Layout {
    /// The layout of the store at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        let root = root.into();
        let sessions = root.join("sessions");
        debug_assert_eq!(sessions.parent(), Some(root.as_path()), "sessions/ is in the root");
        Layout { root, sessions }
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/sessions`.
    pub fn sessions_dir(&self) -> PathBuf {
        debug_assert!(self.sessions.starts_with(&self.root), "sessions/ is in the root");
        self.sessions.clone()
    }

    /// `<root>/sessions/<id>`.
    pub fn session_dir(&self, id: &SessionId) -> PathBuf {
        let dir = self.in_session(id, &[]);
        debug_assert!(
            dir.file_name() == Some(OsStr::new(id.as_str())),
            "a session's directory is one name under sessions/"
        );
        dir
    }

    /// `<root>/sessions/<id>/<names...>`, built in one allocation: the transitions name a
    /// session's files on every step.
    fn in_session(&self, id: &SessionId, names: &[&str]) -> PathBuf {
        let len = self.sessions.as_os_str().len()
            + 1
            + id.as_str().len()
            + names.iter().map(|name| 1 + name.len()).sum::<usize>();
        let mut path = PathBuf::with_capacity(len);
        path.push(&self.sessions);
        path.push(id.as_str());
        for name in names {
            debug_assert!(!name.contains('/') && !name.starts_with(".."), "{name:?} is one name");
            path.push(name);
        }
        debug_assert_eq!(
            path.as_os_str().len(),
            len,
            "a session's path is built in one allocation"
        );
        path
    }

    /// The record.
    pub fn record(&self, id: &SessionId) -> PathBuf {
        let path = self.in_session(id, &["session.json"]);
        debug_assert!(
            ends_in(&path, "session.json"),
            "a session's file is one name in its directory"
        );
        path
    }

    /// The record's staging file.
    pub fn record_tmp(&self, id: &SessionId) -> PathBuf {
        let tmp = self.in_session(id, &["session.json.tmp"]);
        debug_assert!(
            tmp.parent().and_then(Path::file_name) == Some(OsStr::new(id.as_str())),
            "a staging file lies beside what it replaces: one rename in one directory"
        );
        tmp
    }

    /// The persisted receipt index (derived; see `receipts`).
    pub fn receipt_index(&self, id: &SessionId) -> PathBuf {
        let path = self.in_session(id, &[RECEIPT_INDEX]);
        debug_assert!(
            ends_in(&path, RECEIPT_INDEX),
            "a session's file is one name in its directory"
        );
        path
    }

    /// The receipt index's staging file.
    pub fn receipt_index_tmp(&self, id: &SessionId) -> PathBuf {
        let tmp = self.in_session(id, &[RECEIPT_INDEX_TMP]);
        debug_assert!(
            tmp.parent().and_then(Path::file_name) == Some(OsStr::new(id.as_str())),
            "a staging file lies beside what it replaces: one rename in one directory"
        );
        tmp
    }

    /// The legacy first segment.
    pub fn legacy_segment(&self, id: &SessionId) -> PathBuf {
        let path = self.in_session(id, &["timeline.ndjson"]);
        debug_assert!(
            ends_in(&path, "timeline.ndjson"),
            "a session's file is one name in its directory"
        );
        path
    }

    /// The directory of numbered segments.
    pub fn timeline_dir(&self, id: &SessionId) -> PathBuf {
        let path = self.in_session(id, &["timeline"]);
        debug_assert!(ends_in(&path, "timeline"), "a session's file is one name in its directory");
        path
    }

    /// A numbered segment.
    pub fn segment(&self, id: &SessionId, no: SegmentNo) -> PathBuf {
        debug_assert!(no.0 >= 1, "numbered segments count from 1; 0 is the legacy one");
        self.in_session(id, &["timeline", &no.file_name()])
    }

    /// The segment a cursor's or position's key names: the legacy segment for 0, else the
    /// numbered one; `None` for a key no segment's name can hold (it names no file).
    pub fn segment_of_key(&self, id: &SessionId, key: u64) -> Option<PathBuf> {
        let path = if key == 0 {
            Some(self.legacy_segment(id))
        } else {
            SegmentNo::from_key(key).map(|no| self.segment(id, no))
        };
        debug_assert!(key > SegmentNo::MAX.0 || path.is_some(), "a key a name holds names a file");
        path
    }

    /// The drain adapter spec of a session created by this engine (one line).
    pub fn adapter(&self, id: &SessionId) -> PathBuf {
        let path = self.in_session(id, &["adapter"]);
        debug_assert!(ends_in(&path, "adapter"), "a session's file is one name in its directory");
        path
    }

    /// The adapter spec's staging file.
    pub fn adapter_tmp(&self, id: &SessionId) -> PathBuf {
        let tmp = self.in_session(id, &["adapter.tmp"]);
        debug_assert!(
            tmp.parent().and_then(Path::file_name) == Some(OsStr::new(id.as_str())),
            "a staging file lies beside what it replaces: one rename in one directory"
        );
        tmp
    }

    /// The delivery queue.
    pub fn queue(&self, id: &SessionId) -> PathBuf {
        let path = self.in_session(id, &["pending.json"]);
        debug_assert!(
            ends_in(&path, "pending.json"),
            "a session's file is one name in its directory"
        );
        path
    }

    /// The delivery queue's staging file.
    pub fn queue_tmp(&self, id: &SessionId) -> PathBuf {
        let tmp = self.in_session(id, &["pending.json.tmp"]);
        debug_assert!(
            tmp.parent().and_then(Path::file_name) == Some(OsStr::new(id.as_str())),
            "a staging file lies beside what it replaces: one rename in one directory"
        );
        tmp
    }

    /// Directory of record locks.
    pub fn session_locks_dir(&self) -> PathBuf {
        let path = self.root.join(".session-locks");
        debug_assert!(lies_in(&path, &self.root), "one name in the root");
        path
    }

    /// The record lock.
    pub fn session_lock(&self, id: &SessionId) -> PathBuf {
        let dir = self.session_locks_dir();
        let lock = dir.join(format!("{id}.lock"));
        debug_assert_eq!(lock.parent(), Some(dir.as_path()), "a lock is one name in its directory");
        lock
    }

    /// Directory of delivery locks.
    pub fn delivery_locks_dir(&self) -> PathBuf {
        let path = self.root.join(".delivery-locks");
        debug_assert!(lies_in(&path, &self.root), "one name in the root");
        path
    }

    /// The delivery lock.
    pub fn delivery_lock(&self, id: &SessionId) -> PathBuf {
        let dir = self.delivery_locks_dir();
        let lock = dir.join(format!("{id}.lock"));
        debug_assert_eq!(lock.parent(), Some(dir.as_path()), "a lock is one name in its directory");
        lock
    }

    /// Directory of revoked-sender markers.
    pub fn revoked_dir(&self) -> PathBuf {
        let path = self.root.join(".revoked-senders");
        debug_assert!(lies_in(&path, &self.root), "one name in the root");
        path
    }

    /// A revoked sender's marker.
    pub fn revoked(&self, id: &SessionId) -> PathBuf {
        let dir = self.revoked_dir();
        let marker = dir.join(id.as_str());
        debug_assert_eq!(
            marker.parent(),
            Some(dir.as_path()),
            "a marker is one name in its directory"
        );
        marker
    }

    /// The close ledger.
    pub fn close_ledger(&self) -> PathBuf {
        let path = self.root.join("session-close-ledger.ndjson");
        debug_assert!(lies_in(&path, &self.root), "one name in the root");
        path
    }

    /// The close ledger's lock (in the record-lock directory; no session id starts with `.`).
    pub fn close_ledger_lock(&self) -> PathBuf {
        debug_assert!(
            SessionId::new(".close-ledger").is_err(),
            "the ledger's lock can never be a session's"
        );
        self.session_locks_dir().join(".close-ledger.lock")
    }

    /// Directory of sessions being closed.
    pub fn closing_dir(&self) -> PathBuf {
        let path = self.root.join(".closing");
        debug_assert!(lies_in(&path, &self.root), "one name in the root");
        path
    }

    /// A session being closed.
    pub fn closing(&self, id: &SessionId) -> PathBuf {
        let closing = self.closing_dir();
        let dir = closing.join(id.as_str());
        debug_assert!(
            dir.parent() == Some(closing.as_path()),
            "a closing session is one name under .closing/"
        );
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_validated_before_any_path_is_built() {
        for good in ["a", "s-1", "A.b_c-9", &"x".repeat(128)] {
            assert!(SessionId::new(good).is_ok(), "{good}");
        }
        for bad in
            ["", ".", "..", "../x", "a/b", "a\0b", ".hidden", "-flag", "é", &"x".repeat(129), "a b"]
        {
            assert!(SessionId::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_key_past_twelve_digits_names_no_segment() {
        let layout = Layout::new("/store");
        let id = SessionId::new("s").expect("an id");
        assert_eq!(layout.segment_of_key(&id, 0), Some(layout.legacy_segment(&id)));
        assert_eq!(SegmentNo::MAX.file_name(), "999999999999.ndjson");
        assert_eq!(SegmentNo::from_key(SegmentNo::MAX.0), Some(SegmentNo::MAX));
        for key in [SegmentNo::MAX.0 + 1, u64::MAX] {
            assert_eq!(layout.segment_of_key(&id, key), None, "{key}");
            let cursor = format!("0.{key}.0");
            assert!(cursor.parse::<crate::timeline::Cursor>().is_err(), "{cursor}");
            assert!(format!("{key}.0").parse::<crate::timeline::Position>().is_err(), "{key}");
        }
    }

    #[test]
    fn segment_names_are_twelve_digits() {
        assert_eq!(SegmentNo(1).file_name(), "000000000001.ndjson");
        assert_eq!(SegmentNo::parse("000000000042.ndjson"), Some(SegmentNo(42)));
        for bad in [
            "42.ndjson",
            "00000000001.ndjson",
            "0000000000001.ndjson",
            "00000000000a.ndjson",
            "000000000001.json",
        ] {
            assert_eq!(SegmentNo::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn segment_bound_override_is_parsed_as_the_existing_implementation_parses_it() {
        // The existing implementation's own bounds for these values (measured, interop corpus).
        for (value, bound) in [
            (None, 4_194_304),
            (Some(""), 1024),
            (Some("abc"), 4_194_304),
            (Some("-5"), 1024),
            (Some("0x800"), 2048),
            (Some("Infinity"), 4_194_304),
            (Some("1024"), 1024),
            (Some("2048"), 2048),
            (Some("1e4"), 10_000),
            (Some(" 3000 "), 3000),
            (Some("2048.9"), 2048),
            (Some("inf"), 4_194_304),
            (Some("NaN"), 4_194_304),
            (Some("-Infinity"), 4_194_304),
            (Some("-0x10"), 4_194_304),
            (Some(".5e4"), 5000),
        ] {
            assert_eq!(segment_bytes_from_env(value), bound, "{value:?}");
        }
    }

    #[test]
    fn default_root_encodes_the_project_path() {
        let root = default_root(None, Path::new("/home/u"), Path::new("/work/my.repo"));
        assert_eq!(root, Path::new("/home/u/.spexcode/projects/-work-my-repo"));
        let root = default_root(Some(Path::new("/x")), Path::new("/home/u"), Path::new("/a"));
        assert_eq!(root, Path::new("/x/projects/-a"));
    }
}
