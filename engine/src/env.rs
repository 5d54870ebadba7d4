//! The injected environment: a clock and an id source. The engine never reads the wall clock or
//! a global random generator itself; a simulated run injects [`ManualClock`] and [`SeededIds`]
//! and is deterministic from one seed.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::sync::{AtomicU64, Mutex, Ordering, yield_now};

/// Milliseconds since the Unix epoch.
pub type UnixMs = u64;

/// A source of time, and of waiting.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now_ms(&self) -> UnixMs;
    /// Waits `ms` milliseconds (a simulated clock advances instead).
    fn sleep_ms(&self, ms: u64);
}

/// A source of message ids (UUID v4).
pub trait IdSource: Send + Sync + std::fmt::Debug {
    /// A fresh message id.
    fn mid(&self) -> String;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[expect(
        clippy::disallowed_methods,
        reason = "the production clock is the one reader of the wall clock"
    )]
    fn now_ms(&self) -> UnixMs {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }

    #[expect(
        clippy::disallowed_methods,
        reason = "the production clock is the one place that really waits"
    )]
    fn sleep_ms(&self, ms: u64) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Random UUID v4 message ids from the operating system's generator.
#[derive(Clone, Copy, Debug, Default)]
pub struct RandomIds;

impl IdSource for RandomIds {
    #[expect(
        clippy::disallowed_methods,
        reason = "the production id source is the one user of OS randomness"
    )]
    fn mid(&self) -> String {
        let mid = uuid::Uuid::new_v4().to_string();
        debug_assert_eq!(mid.len(), 36, "a message id is a hyphenated UUID");
        mid
    }
}

/// A clock that moves only when told to (or when something sleeps on it).
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: UnixMs) -> ManualClock {
        ManualClock { now_ms: AtomicU64::new(start_ms) }
    }

    /// Moves the clock forward.
    pub fn advance_ms(&self, ms: u64) {
        let before = self.now_ms.fetch_add(ms, Ordering::SeqCst);
        assert!(before.checked_add(ms).is_some(), "a manual clock never wraps around");
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMs {
        // Every reading moves time forward by a millisecond, so timestamps stay distinct.
        let now = self.now_ms.fetch_add(1, Ordering::SeqCst);
        debug_assert!(now < u64::MAX, "a manual clock never wraps around");
        now
    }

    fn sleep_ms(&self, ms: u64) {
        let before = self.now_ms.fetch_add(ms, Ordering::SeqCst);
        debug_assert!(before.checked_add(ms).is_some(), "a manual clock never wraps around");
        yield_now();
    }
}

/// UUID v4 ids from a seeded generator: the same seed gives the same ids.
#[derive(Debug)]
pub struct SeededIds {
    rng: Mutex<ChaCha8Rng>,
}

impl SeededIds {
    /// Ids derived from `seed`.
    pub fn new(seed: u64) -> SeededIds {
        let ids = SeededIds { rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)) };
        debug_assert_eq!(
            crate::sync::lock(&ids.rng).get_word_pos(),
            0,
            "a seeded source starts at its seed's first word"
        );
        ids
    }
}

impl IdSource for SeededIds {
    fn mid(&self) -> String {
        let mut bytes = [0u8; 16];
        crate::sync::lock(&self.rng).fill_bytes(&mut bytes);
        let mid = uuid::Builder::from_random_bytes(bytes).into_uuid();
        debug_assert_eq!(mid.get_version_num(), 4, "a seeded id is a UUID v4, as a random one");
        mid.to_string()
    }
}

/// Formats `ms` as the store's timestamp: UTC, millisecond ISO-8601 with `Z`.
pub fn format_ts(ms: UnixMs) -> String {
    let text = i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || "1970-01-01T00:00:00.000Z".to_owned(),
            |at| at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        );
    assert!(
        text.len() == "1970-01-01T00:00:00.000Z".len() && text.ends_with('Z'),
        "a store timestamp is ISO-8601 UTC with milliseconds: {text}"
    );
    text
}

/// Parses a store timestamp back to milliseconds (any RFC 3339 time is accepted).
pub fn parse_ts(ts: &str) -> Option<UnixMs> {
    let at: jiff::Timestamp = ts.parse().ok()?;
    let ms = u64::try_from(at.as_millisecond()).ok()?;
    debug_assert!(
        at.as_millisecond() == ms as i64 && at >= jiff::Timestamp::UNIX_EPOCH,
        "a store time is at or after the epoch"
    );
    Some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_milliseconds_with_z() {
        assert_eq!(format_ts(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ts(1_784_160_000_123), "2026-07-16T00:00:00.123Z");
        assert_eq!(parse_ts("2026-07-16T00:00:00.123Z"), Some(1_784_160_000_123));
    }

    #[test]
    fn seeded_ids_are_uuid_v4_and_reproducible() {
        let (a, b) = (SeededIds::new(3), SeededIds::new(3));
        let first = a.mid();
        assert_eq!(first, b.mid());
        let parsed = uuid::Uuid::parse_str(&first).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_ne!(first, a.mid());
    }
}
