//! The fold: how a reader goes from a watermark to the end of a session's log, trusting the
//! watermark only while the log still holds the bytes it was pinned to.

use faultfs::Fs;
use spex_engine::timeline::activity::last_activity;
use spex_engine::{Cursor, Event, SessionId, Store};

/// `Store::pin`), and the last activity among the events before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watermark {
    /// Where the fold stopped.
    pub cursor: Cursor,
    /// The hash of the log bytes just before `cursor` when the fold stopped.
    pub pin: String,
    /// The last activity among the events folded.
    pub last_activity: Option<String>,
}

/// What [`fold`] read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// The events past the watermark (every event when `reset`).
    pub events: Vec<Event>,
    /// Whether the watermark was not trusted and the log was folded from its start.
    pub reset: bool,
    /// The new watermark.
    pub watermark: Watermark,
}

/// Test-only switch for the verification: trust a watermark without checking its pin (the
/// broken index the crash sweep's activity rule must catch).
#[cfg(feature = "mutants")]
pub static TRUST_WATERMARK_MUTANT: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

fn trust_without_pin() -> bool {
    #[cfg(feature = "mutants")]
    {
        TRUST_WATERMARK_MUTANT.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "mutants"))]
    {
        false
    }
}

/// Folds session `id`'s log past `from`: the one algorithm by which the index stays fresh.
///
/// The watermark is trusted only if the log still holds the bytes it was pinned to: a power loss
/// can drop unsynced lines a reader already saw, and later appends can regrow the log past the
/// old cursor with different bytes. An untrusted watermark (or a cursor the log no longer
/// reaches) folds the whole log again (`reset`). The new last activity is the in-log
/// projection (`last_activity`) of the events folded, or the watermark's when none is activity.
pub fn fold<F: Fs>(
    store: &Store<F>,
    id: &SessionId,
    from: Option<&Watermark>,
) -> spex_engine::Result<Folded> {
    let trusted = match from {
        Some(mark) if trust_without_pin() => Some(mark),
        Some(mark) if store.pin(id, mark.cursor)?.as_deref() == Some(mark.pin.as_str()) => {
            Some(mark)
        }
        _ => None,
    };
    let (events, cursor, reset) = match trusted {
        Some(mark) => match store.follow(id, mark.cursor) {
            Ok((events, next)) => (events, next, false),
            Err(spex_engine::Error::InvalidCursor { .. }) => {
                let (events, next) = store.follow(id, Cursor::START)?;
                (events, next, true)
            }
            Err(error) => return Err(error),
        },
        None => {
            let (events, next) = store.follow(id, Cursor::START)?;
            (events, next, true)
        }
    };
    let before = if reset { None } else { trusted.and_then(|mark| mark.last_activity.clone()) };
    let last_activity = last_activity(&events).map(str::to_owned).or(before);
    let pin = store.pin(id, cursor)?.unwrap_or_default();
    Ok(Folded { events, reset, watermark: Watermark { cursor, pin, last_activity } })
}
