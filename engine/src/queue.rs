//! The delivery queue: `pending.json`, the ordered messages still owed to a session.
//!
//! # Format
//!
//! A JSON array of entries `{"mid","text","from","attributes"?,"dispatch"?:{"operation",
//! "requestDigest"}}`, where `text` is the composed transport text. The file is absent when the
//! queue is empty, so "is anything owed?" is one existence check. The log is never read to
//! decide what is owed.
//!
//! # Reading what the existing implementation reads
//!
//! Readers take an empty, unparsable or non-array file as an empty queue, and of an array only
//! the valid entries (`mid` and `text` strings, `attributes` an object of strings, `dispatch`
//! with string `operation` and `requestDigest`), as the existing implementation does. Such a
//! queue is *damaged*: writers refuse it (corrupt, naming the file) instead of overwriting what
//! they cannot read, and `Store::repair_queue` rebuilds it from what is left and what the log
//! proves.
//!
//! # Durability and concurrency
//!
//! Written whole by atomic replace (see `atomic`); removed durably when it empties. Every
//! mutation (a send's enqueue, a drain's removal, a replay's restore) goes through `write`
//! or `write_around` under the session's record lock, so two processes can never lose each
//! other's change (the existing implementation enqueued under the record lock and removed under
//! the delivery lock, and lost entries that way).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use faultfs::Fs;

use crate::atomic;
use crate::boundaries::Boundaries;
use crate::error::{CorruptReason, Error, Result};
use crate::layout::SessionFiles;

/// The receipt a keyed entry must match before any adapter call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dispatch {
    /// The operation.
    pub operation: String,
    /// The request digest.
    pub request_digest: String,
}

/// One owed message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The message id.
    pub mid: String,
    /// The composed transport text.
    pub text: String,
    /// The sender (`None`: a human).
    pub from: Option<String>,
    /// Optional delivery attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<serde_json::Map<String, serde_json::Value>>,
    /// For a keyed send, the receipt to match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<Dispatch>,
}

/// A queue file as read: its valid entries, and why it is damaged if it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueFile {
    /// The valid entries, in order.
    pub entries: Vec<Entry>,
    /// Why the file is damaged (not an array, or entries left out), if it is.
    pub damage: Option<String>,
}

/// Reads a queue file as the existing implementation reads it (see the module header).
pub(crate) fn parse(bytes: &[u8]) -> QueueFile {
    let file = match parse_sound(bytes) {
        Some(entries) => QueueFile { entries, damage: None },
        None => parse_lenient(bytes),
    };
    debug_assert!(file.entries.iter().all(valid), "a reader returns valid entries only");
    file
}

/// Whether an entry is one the existing reader keeps: its attributes, if any, are texts.
fn valid(entry: &Entry) -> bool {
    entry.attributes.as_ref().is_none_or(|map| map.values().all(serde_json::Value::is_string))
}

/// One entry as the fast path reads it: a field that is present must have its type (an
/// explicit `null` for `attributes` or `dispatch` is not absent, as [`entry_of`] judges it).
#[derive(Deserialize)]
struct SoundEntry {
    mid: String,
    text: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(default, deserialize_with = "present")]
    attributes: Option<Option<serde_json::Map<String, serde_json::Value>>>,
    #[serde(default, deserialize_with = "present_object")]
    dispatch: Option<Option<Dispatch>>,
}

/// A struct read from a JSON object only. A derived struct also accepts an array of its fields
/// in order (`["m", "t"]`), which the lenient reader rightly refuses (found by the `queue` fuzz
/// target); this asks the reader for a map instead.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        T::deserialize(MapOnly(deserializer)).map(Object)
    }
}

/// A deserializer that reads a struct as a map, and anything else as its inner one does.
struct MapOnly<D>(D);

impl<'de, D: serde::Deserializer<'de>> serde::Deserializer<'de> for MapOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> std::result::Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// [`present`] for a struct, read from an object only (see [`Object`]).
fn present_object<'de, D, T>(deserializer: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Object<T>>::deserialize(deserializer).map(|object| Some(object.map(|object| object.0)))
}

/// A field that is present: `Some`, holding `None` for an explicit `null`.
fn present<'de, D, T>(deserializer: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// The common case, typed in one pass: a sound queue (every entry valid). `None` sends the
/// bytes to [`parse_lenient`], which judges entry by entry; the two agree on every sound queue
/// (a test and the `queue` fuzz target compare them).
fn parse_sound(bytes: &[u8]) -> Option<Vec<Entry>> {
    // A typed parse skips the bytes of fields it ignores; the lenient reader refuses invalid
    // UTF-8 anywhere (found by the `queue` fuzz target), so check it first.
    let text = std::str::from_utf8(bytes).ok()?;
    let raw: Vec<Object<SoundEntry>> = serde_json::from_str(text).ok()?;
    raw.into_iter()
        .map(|Object(entry)| {
            let attributes = match entry.attributes {
                None => None,
                Some(Some(map)) if map.values().all(serde_json::Value::is_string) => Some(map),
                Some(_) => return None,
            };
            let dispatch = match entry.dispatch {
                None => None,
                Some(Some(dispatch)) => Some(dispatch),
                Some(None) => return None,
            };
            Some(Entry { mid: entry.mid, text: entry.text, from: entry.from, attributes, dispatch })
        })
        .collect::<Option<Vec<Entry>>>()
        .inspect(|entries| {
            debug_assert!(entries.iter().all(valid), "a sound queue's every entry is valid");
        })
}

/// Reads a queue file entry by entry: the valid entries, and why the file is damaged.
///
/// Each value is held as its raw text until a known field needs it, so what the file holds
/// where no field is read (an unknown field's `1e999`, which a JSON engine reads as infinity) does
/// not make the whole file unreadable, as it does not for the existing implementation (found by
/// the `queue` fuzz target: the fast path skips such a value, a parse into `Value` refused it).
pub(crate) fn parse_lenient(bytes: &[u8]) -> QueueFile {
    let items: Vec<&RawValue> = match serde_json::from_slice(bytes) {
        Ok(items) => items,
        Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => {
            return QueueFile { entries: Vec::new(), damage: Some("empty file".to_owned()) };
        }
        Err(error) => {
            let damage = match serde_json::from_slice::<&RawValue>(bytes) {
                Ok(_) => "not a JSON array".to_owned(),
                Err(_) => format!("not JSON: {error}"),
            };
            return QueueFile { entries: Vec::new(), damage: Some(damage) };
        }
    };
    let mut file = QueueFile::default();
    let mut invalid = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        match entry_of(item) {
            Some(entry) => file.entries.push(entry),
            None => invalid.push(index.to_string()),
        }
    }
    if !invalid.is_empty() {
        file.damage = Some(format!("invalid entries at index {}", invalid.join(", ")));
    }
    debug_assert!(file.entries.iter().all(valid), "a reader keeps only valid entries");
    file
}

/// An object's fields as raw values; of a repeated name the last, as a JSON engine keeps it.
type RawFields<'a> = std::collections::HashMap<String, &'a RawValue>;

/// A raw value read as `T`, if it is one.
fn typed<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Option<T> {
    serde_json::from_str(raw.get()).ok()
}

/// One entry, if it is valid.
fn entry_of(item: &RawValue) -> Option<Entry> {
    let fields: RawFields<'_> = typed(item)?;
    let attributes = match fields.get("attributes") {
        None => None,
        Some(raw) => Some(
            typed::<serde_json::Map<String, serde_json::Value>>(raw)
                .filter(|map| map.values().all(serde_json::Value::is_string))?,
        ),
    };
    let dispatch = match fields.get("dispatch") {
        None => None,
        Some(raw) => {
            let dispatch: RawFields<'_> = typed(raw)?;
            Some(Dispatch {
                operation: typed(dispatch.get("operation")?)?,
                request_digest: typed(dispatch.get("requestDigest")?)?,
            })
        }
    };
    let entry = Entry {
        mid: typed(fields.get("mid")?)?,
        text: typed(fields.get("text")?)?,
        from: fields.get("from").and_then(|raw| typed(raw)),
        attributes,
        dispatch,
    };
    debug_assert!(valid(&entry), "an entry read is a valid one");
    Some(entry)
}

/// The bytes of a non-empty queue: pretty JSON, trailing newline.
pub(crate) fn encode(entries: &[Entry]) -> Vec<u8> {
    assert!(!entries.is_empty(), "an empty queue is represented by no file");
    debug_assert!(entries.iter().all(valid), "a writer writes what readers keep");
    let mut bytes = serde_json::to_vec_pretty(entries).expect("queue entries always serialize");
    bytes.push(b'\n');
    debug_assert_eq!(parse(&bytes).entries, entries, "an encoded queue decodes to itself");
    bytes
}

/// The session's queue file as a reader reads it: the valid entries and, when the file is
/// damaged, why (an empty queue when there is no file).
pub(crate) fn read<F: Fs>(files: SessionFiles<'_, F>) -> Result<QueueFile> {
    let file = atomic::read(files.fs, &files.layout.queue(files.id))?
        .map_or_else(QueueFile::default, |bytes| parse(&bytes));
    debug_assert!(file.damage.is_some() || file.entries.iter().all(valid), "sound means valid");
    Ok(file)
}

/// Whether the session has a queue file at all (the existing implementation's "owes
/// delivery": true even when the file is empty or damaged).
pub(crate) fn exists<F: Fs>(files: SessionFiles<'_, F>) -> Result<bool> {
    let path = files.layout.queue(files.id);
    debug_assert!(crate::layout::lies_in(&path, files.layout.root()), "the store's own queue");
    Ok(files.fs.exists(&path)?)
}

/// The queue for a writer: corrupt (naming the file) when damaged, so that nothing a reader
/// could not read is overwritten.
pub(crate) fn read_for_write<F: Fs>(files: SessionFiles<'_, F>) -> Result<Vec<Entry>> {
    let file = read(files)?;
    match file.damage {
        None => {
            debug_assert!(file.entries.iter().all(valid), "a writer builds on valid entries only");
            Ok(file.entries)
        }
        Some(reason) => Err(Error::Corrupt {
            path: files.layout.queue(files.id),
            offset: 0,
            reason: CorruptReason::BadFile(format!(
                "damaged delivery queue ({reason}); `spex session repair {}` rebuilds it",
                files.id
            )),
        }),
    }
}

/// Replaces the queue with `entries` around the commit point `commit` (the append and sync of
/// the log lines that say why): the new queue is staged first (the space-consuming step, so a
/// full disk changes nothing), then `commit` runs, then the queue is published (or removed when
/// it empties). A failure before the commit discards the staged queue. The one path by which a
/// send enqueues and a drain settles (a drain of unkeyed heads has no line to append).
pub(crate) fn write_around<F: Fs>(
    files: SessionFiles<'_, F>,
    entries: &[Entry],
    steps: &Boundaries,
    commit: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let tmp = files.layout.queue_tmp(files.id);
    if !entries.is_empty()
        && let Err(error) = atomic::stage(files.fs, &tmp, &encode(entries), &steps.queue)
    {
        atomic::discard(files.fs, &tmp, &steps.queue);
        return Err(error);
    }
    if let Err(error) = commit() {
        atomic::discard(files.fs, &tmp, &steps.queue);
        return Err(error);
    }
    publish(files, entries.is_empty(), steps)?;
    debug_assert!(
        files.fs.exists(&tmp).is_ok_and(|there| !there),
        "a published queue leaves no staging file"
    );
    Ok(())
}

/// Publishes the staged queue, or removes the queue when it is empty.
fn publish<F: Fs>(files: SessionFiles<'_, F>, empty: bool, steps: &Boundaries) -> Result<()> {
    let (layout, id) = (files.layout, files.id);
    let dir = layout.session_dir(id);
    if empty {
        atomic::remove(
            files.fs,
            &dir,
            &layout.queue(id),
            steps.queue.remove,
            steps.queue.dir_sync,
        )?;
    } else {
        atomic::publish(files.fs, &dir, &layout.queue_tmp(id), &layout.queue(id), &steps.queue)?;
    }
    debug_assert!(
        files.fs.exists(&layout.queue(id)).is_ok_and(|there| there != empty),
        "a published queue is there exactly when something is owed"
    );
    Ok(())
}

/// Replaces the queue durably (removing the file when it empties).
pub(crate) fn write<F: Fs>(
    files: SessionFiles<'_, F>,
    entries: &[Entry],
    steps: &Boundaries,
) -> Result<()> {
    if entries.is_empty() {
        return publish(files, true, steps);
    }
    let (layout, id) = (files.layout, files.id);
    let bytes = encode(entries);
    debug_assert!(bytes.ends_with(b"\n"), "a queue file ends its last line");
    atomic::replace(
        files.fs,
        &layout.session_dir(id),
        &layout.queue(id),
        &layout.queue_tmp(id),
        &bytes,
        &steps.queue,
    )
}

/// The fast path, when it answers, answers as the lenient reader does (panics otherwise).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_agreement(bytes: &[u8]) {
    if let Some(entries) = parse_sound(bytes) {
        let lenient = parse_lenient(bytes);
        assert_eq!(lenient.damage, None, "{}", String::from_utf8_lossy(bytes));
        assert_eq!(lenient.entries, entries, "{}", String::from_utf8_lossy(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_queues_read_as_the_existing_implementation_reads_them() {
        for (bytes, valid) in [
            ("", 0),
            ("{\"mid\":\"m\",\"text\":\"t\",\"from\":null}", 0),
            (
                "[{\"mid\":\"a\",\"text\":\"x\",\"from\":null},{\"mid\":\"b\",\"text\":42},{\"mid\":\"c\",\"text\":\"y\",\"from\":\"p\"}]",
                2,
            ),
            ("[{\"mid\":\"a\",\"text\":\"x\",\"attributes\":{\"k\":1}}]", 0),
            ("[{\"mid\":\"a\",\"text\":\"x\",\"dispatch\":{\"operation\":\"o\"}}]", 0),
        ] {
            let file = parse(bytes.as_bytes());
            assert_eq!(file.entries.len(), valid, "{bytes}");
            assert!(file.damage.is_some(), "{bytes}");
        }
        let sound = parse(b"[{\"mid\":\"a\",\"text\":\"x\",\"from\":null}]\n");
        assert_eq!((sound.entries.len(), sound.damage), (1, None));
        // What no field reads is skipped, as a JSON engine reads it (`1e999` is infinity there),
        // and a name spelled with an escape is the name.
        for bytes in [
            "[{\"mid\":\"a\",\"text\":\"x\",\"extra\":1e999}]",
            "[{\"m\\u0069d\":\"a\",\"text\":\"x\"}]",
        ] {
            let file = parse_lenient(bytes.as_bytes());
            assert_eq!((file.entries.len(), file.damage), (1, None), "{bytes}");
        }
    }

    #[test]
    fn the_fast_path_reads_what_the_lenient_reader_reads() {
        for bytes in [
            "[]",
            "[[\"mid\",\"mid\"]]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"dispatch\":[\"o\",\"d\"]}]",
            "[{\"mid\":\"a\",\"text\":\"x\"}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"from\":7}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"from\":\"p\",\"extra\":[1]}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"attributes\":null}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"attributes\":{}}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"attributes\":{\"k\":\"v\"}}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"attributes\":{\"k\":null}}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"dispatch\":null}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"dispatch\":{\"operation\":\"o\",\"requestDigest\":\"d\",\"x\":1}}]",
            "[{\"mid\":\"a\",\"mid\":\"b\",\"text\":\"x\"}]",
            "[{\"mid\":\"a\",\"text\":\"x\"},{\"mid\":\"b\"}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"extra\":1e999}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"extra\":\"\\ud800\"}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"extra\":-0}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"extra\":{\"k\":1,\"k\":2}}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"dispatch\":{\"operation\":\"o\",\"requestDigest\":\"d\",\"operation\":\"p\"}}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"attributes\":{\"k\":\"v\",\"k\":1}}]",
            "[{\"mid\":\"a\",\"text\":\"x\",\"from\":\"p\",\"from\":1}]",
            "[{\"m\\u0069d\":\"a\",\"text\":\"x\"}]",
        ] {
            check_agreement(bytes.as_bytes());
        }
    }
}
