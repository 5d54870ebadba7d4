//! Times as the store writes them and as people read and type them: the stored form (UTC,
//! milliseconds, `Z`), the zone people read in, how long ago, `--since`, and durations
//! (`--budget 2m`, `--read-timeout 10s`, `--since 7days`).

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A stored timestamp (`2026-12-01T07:00:00.000Z`) as an instant, if it is one.
pub(crate) fn parse_ts(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

/// An instant in the stored form: UTC, milliseconds, `Z`.
pub(crate) fn stored_ts(instant: Timestamp) -> String {
    instant.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The zone people read times in: the system's (`TZ` honoured), or UTC with `--utc`.
pub(crate) fn zone(utc: bool) -> TimeZone {
    if utc { TimeZone::UTC } else { TimeZone::system() }
}

/// How long ago `then` was, for people: "just now", "42 s ago", "3 min ago", "5 h ago",
/// "2 days ago", then the date.
pub(crate) fn relative(now: Timestamp, then: Timestamp, zone: &TimeZone) -> String {
    let seconds = now.as_second() - then.as_second();
    match seconds {
        i64::MIN..=-1 => "in the future".to_owned(),
        0..=4 => "just now".to_owned(),
        5..=59 => format!("{seconds} s ago"),
        60..=3_599 => format!("{} min ago", seconds / 60),
        3_600..=86_399 => format!("{} h ago", seconds / 3_600),
        86_400..=172_799 => "yesterday".to_owned(),
        172_800..=2_591_999 => format!("{} days ago", seconds / 86_400),
        _ => then.to_zoned_datetime(zone.clone()).strftime("%Y-%m-%d").to_string(),
    }
}

/// Parses `--since`: an RFC 3339 time (`2026-12-01T07:00:00+01:00`), a local date or date and
/// time (`2026-12-01`, `2026-12-01T07:00`), or a duration back from now (`2h`, `7days`). The
/// answer is the instant in the stored form (UTC, milliseconds), so comparing it with stored
/// times as text compares instants.
pub(crate) fn since(
    text: &str,
    now: jiff::Timestamp,
    zone: &jiff::tz::TimeZone,
) -> Result<String, NotATime> {
    let instant = parse_instant(text, now, zone).ok_or_else(|| {
        NotATime(format!(
            "--since {text:?} is not a time: give an RFC 3339 time (2026-12-01T07:00:00+01:00), \
             a local date or time (2026-12-01, 2026-12-01T07:00) or a duration (90m, 2h, 7days)"
        ))
    })?;
    Ok(stored_ts(instant))
}

/// An optional `--since` (or `?since=`), read from now as [`since`] reads it.
pub(crate) fn since_now(
    text: Option<&str>,
    zone: &jiff::tz::TimeZone,
) -> Result<Option<String>, NotATime> {
    text.map(|text| since(text, jiff::Timestamp::now(), zone)).transpose()
}

fn parse_instant(
    text: &str,
    now: jiff::Timestamp,
    zone: &jiff::tz::TimeZone,
) -> Option<jiff::Timestamp> {
    let text = text.trim();
    if let Ok(back) = parse_duration(text) {
        return now.checked_sub(jiff::SignedDuration::try_from(back).ok()?).ok();
    }
    if let Ok(instant) = text.parse::<jiff::Timestamp>() {
        return Some(instant);
    }
    if let Ok(civil) = text.parse::<jiff::civil::DateTime>() {
        return civil.to_zoned_datetime(zone.clone()).ok().map(|zoned| zoned.timestamp());
    }
    if let Ok(date) = text.parse::<jiff::civil::Date>() {
        return date.to_zoned_datetime(zone.clone()).ok().map(|zoned| zoned.timestamp());
    }
    None
}

/// A `--since` that is not a time: what was given and what is accepted.
#[derive(Debug)]
pub(crate) struct NotATime(pub(crate) String);

impl std::fmt::Display for NotATime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses a duration as people write one: `90s`, `2m`, `1h 30m`, `7days`, `2 weeks` (a day is 24
/// hours; months and years, whose length varies, are refused), or ISO 8601 (`PT2H`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let span: jiff::Span =
        text.trim().parse().map_err(|error| format!("{text:?} is not a duration: {error}"))?;
    let exact = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|error| format!("{text:?} is not a fixed length of time: {error}"))?;
    Duration::try_from(exact).map_err(|_| format!("{text:?} is negative"))
}

/// A duration for people, to the second: `2m 24s`, `1h 3s`, `0s`.
pub(crate) fn format_duration(duration: Duration) -> String {
    let seconds = Duration::from_secs(duration.as_secs());
    match jiff::SignedDuration::try_from(seconds) {
        Ok(duration) => format!("{duration:#}"),
        Err(_) => format!("{}s", seconds.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        for (text, seconds) in [
            ("90s", 90),
            ("2m", 120),
            ("1h 30m", 5_400),
            ("1h30m", 5_400),
            ("7days", 604_800),
            ("2 weeks", 1_209_600),
            ("PT2H", 7_200),
        ] {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(seconds)), "{text}");
        }
        for text in ["", "soon", "1 month", "-5m", "2y"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(144_900)), "2m 24s");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        assert_eq!(stored_ts(now), "2026-12-01T12:00:00.000Z");
    }

    #[test]
    fn since_compares_instants_whatever_the_offset() {
        let now: jiff::Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let paris = jiff::tz::TimeZone::get("Europe/Paris").unwrap();
        let utc = jiff::tz::TimeZone::UTC;
        assert_eq!(
            since("2026-12-01T07:00:00+01:00", now, &utc).unwrap(),
            "2026-12-01T06:00:00.000Z"
        );
        assert_eq!(since("2026-12-01T06:00:00Z", now, &utc).unwrap(), "2026-12-01T06:00:00.000Z");
        assert_eq!(since("2h", now, &utc).unwrap(), "2026-12-01T10:00:00.000Z");
        assert_eq!(since("90m", now, &utc).unwrap(), "2026-12-01T10:30:00.000Z");
        // A date or a time without an offset is local.
        assert_eq!(since("2026-12-01", now, &paris).unwrap(), "2026-11-30T23:00:00.000Z");
        assert_eq!(since("2026-07-01T08:00", now, &paris).unwrap(), "2026-07-01T06:00:00.000Z");
        for bad in ["yesterday-ish", "2026-13-01", "", "12"] {
            assert!(since(bad, now, &utc).is_err(), "{bad:?} is refused");
        }
    }
}
