//! Activity: which events make a session "last worked in". The one definition, used by every
//! surface that orders sessions (the index's stored field and the in-log projection alike).
//!
//! | event                                   | activity? | why                                   |
//! |-----------------------------------------|-----------|---------------------------------------|
//! | `sent` from a human (`from: null`)      | yes       | someone worked with the session       |
//! | `status` (any declared move)            | yes       | the session itself did work           |
//! | `sent` from another session             | no        | automation; the user did not touch it |
//! | `dispatch-settled`                      | no        | delivery bookkeeping                  |
//! | torn-tail repair, rollover              | no        | they write no event                   |
//! | record-only writes (archive, creation)  | no        | they write no event                   |
//!
//! Because only events count, a session opened and abandoned, repaired, or archived keeps its
//! place: nothing it did wrote an activity event.

use super::line::{Event, Line};

/// Whether `event` is activity (see the table above).
pub fn is_activity(event: &Event) -> bool {
    match event {
        Event::Status(_) => true,
        Event::Sent(sent) => sent.from.is_none(),
    }
}

/// Whether the stored line `line` is activity (private lines never are).
pub fn line_is_activity(line: &Line) -> bool {
    let activity = line.public().as_ref().is_some_and(is_activity);
    debug_assert!(!activity || line.is_public(), "a private line is never activity");
    activity
}

/// The in-log projection: the timestamp of the last activity among `events`, if any.
pub fn last_activity<'a>(events: impl IntoIterator<Item = &'a Event>) -> Option<&'a str> {
    let last = events.into_iter().filter(|event| is_activity(event)).last();
    last.map(Event::ts)
}
