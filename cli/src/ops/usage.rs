//! What the agents spent (`spex usage`, `GET /api/usage`): the tokens of every reply and the
//! turns of every harness session, summed per day, session, project, model or harness, with a
//! cost from a price table committed with its date and its sources.
//!
//! A projection of the index's usage rows (see `spex_index::Spent`): nothing here reads or
//! writes a transcript. Titles and projects are redacted as every surface shows them.

use std::collections::{BTreeMap, BTreeSet};

use jiff::tz::TimeZone;
use serde::Deserialize;
use serde_json::{Value, json};
use spex_index::Spent;

use crate::exit::BadInput;

/// The price table this version carries (`prices.json`).
const PRICES: &str = include_str!("prices.json");

/// What the rows are summed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum By {
    /// The day a reply or turn happened, in the reader's zone.
    Day,
    /// The harness session.
    Session,
    /// The session's working directory.
    Project,
    /// The model that replied.
    Model,
    /// The harness.
    Harness,
}

impl By {
    /// Every grouping, in the order `--by` lists them.
    pub(crate) const ALL: [By; 5] = [By::Day, By::Session, By::Project, By::Model, By::Harness];

    /// The grouping's name, as `--by` and `?by=` take it.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            By::Day => "day",
            By::Session => "session",
            By::Project => "project",
            By::Model => "model",
            By::Harness => "harness",
        }
    }

    /// Parses a grouping's name.
    pub(crate) fn parse(text: &str) -> Result<By, String> {
        By::ALL.into_iter().find(|by| by.name() == text).ok_or_else(|| {
            let names: Vec<&str> = By::ALL.iter().map(|by| by.name()).collect();
            format!("{text:?} is not a grouping: give one of {}", names.join(", "))
        })
    }
}

/// A usage report to make.
#[derive(Debug)]
pub(crate) struct Asked {
    /// What the rows are summed by.
    pub(crate) by: By,
    /// Only replies and turns at or after this stored timestamp.
    pub(crate) since: Option<String>,
    /// The zone days are counted in.
    pub(crate) zone: TimeZone,
}

/// One model's prices, in the table's currency per million tokens.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Price {
    input: f64,
    output: f64,
    cache_read: f64,
    cache_write: f64,
}

/// A price table: the date its prices were read, where from, and each model's prices.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Prices {
    as_of: String,
    currency: String,
    unit: String,
    sources: Vec<String>,
    note: String,
    models: BTreeMap<String, Price>,
}

impl Prices {
    /// The table this version carries.
    pub(crate) fn committed() -> Prices {
        Prices::parse(PRICES, "the committed price table").expect("the committed table parses")
    }

    /// A price table in the committed table's form, from `text` (named `origin` in errors).
    pub(crate) fn parse(text: &str, origin: &str) -> anyhow::Result<Prices> {
        let prices: Prices = serde_json::from_str(text)
            .map_err(|error| BadInput(format!("{origin} is not a price table: {error}")))?;
        if jiff::civil::Date::strptime("%Y-%m-%d", &prices.as_of).is_err() {
            return Err(BadInput(format!(
                "{origin}: asOf {:?} is not a date (YYYY-MM-DD)",
                prices.as_of
            ))
            .into());
        }
        if let Some((model, _)) = prices.models.iter().find(|(_, price)| {
            [price.input, price.output, price.cache_read, price.cache_write]
                .iter()
                .any(|value| !value.is_finite() || *value < 0.0)
        }) {
            return Err(BadInput(format!("{origin}: {model}'s prices are not all >= 0")).into());
        }
        Ok(prices)
    }

    /// The price of `model`: its own, or that of its name without a trailing `-YYYYMMDD`.
    fn of(&self, model: &str) -> Option<&Price> {
        self.models.get(model).or_else(|| {
            let (base, date) = model.rsplit_once('-')?;
            (date.len() == 8 && date.bytes().all(|byte| byte.is_ascii_digit()))
                .then(|| self.models.get(base))
                .flatten()
        })
    }
}

/// Tokens, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub(crate) input: u64,
    pub(crate) output: u64,
    pub(crate) cache_read: u64,
    pub(crate) cache_write: u64,
}

impl Tokens {
    fn add(&mut self, other: Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }

    /// Every token, of every kind.
    pub(crate) fn sum(self) -> u64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    fn cost(self, price: &Price) -> f64 {
        let million = 1_000_000.0;
        (self.input as f64 * price.input
            + self.output as f64 * price.output
            + self.cache_read as f64 * price.cache_read
            + self.cache_write as f64 * price.cache_write)
            / million
    }
}

/// One row of a report: what one day, session, project, model or harness spent.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Line {
    /// The day, `harness:id`, project, model or harness (`(none)` when unknown).
    pub(crate) key: String,
    /// For a session: its title.
    pub(crate) label: Option<String>,
    /// Messages a person typed.
    pub(crate) turns: u64,
    /// Replies (model calls) counted.
    pub(crate) replies: u64,
    /// Their tokens.
    pub(crate) tokens: Tokens,
    /// The cost of the replies whose model has a price.
    pub(crate) cost: f64,
    /// Tokens of replies whose model has no price.
    pub(crate) unpriced_tokens: u64,
    /// The models (or `(unknown)`) of those replies.
    pub(crate) unpriced: BTreeSet<String>,
}

impl Line {
    fn add(&mut self, other: &Line) {
        self.turns += other.turns;
        self.replies += other.replies;
        self.tokens.add(other.tokens);
        self.cost += other.cost;
        self.unpriced_tokens += other.unpriced_tokens;
        self.unpriced.extend(other.unpriced.iter().cloned());
    }

    /// The cost, when any of its tokens has a price (`None`: all of them are unpriced).
    pub(crate) fn priced_cost(&self) -> Option<f64> {
        (self.unpriced_tokens == 0 || self.unpriced_tokens < self.tokens.sum()).then_some(self.cost)
    }

    fn to_json(&self) -> Value {
        json!({
            "key": self.key,
            "label": self.label,
            "turns": self.turns,
            "replies": self.replies,
            "input": self.tokens.input,
            "output": self.tokens.output,
            "cacheRead": self.tokens.cache_read,
            "cacheWrite": self.tokens.cache_write,
            "tokens": self.tokens.sum(),
            "cost": self.priced_cost().map(|cost| (cost * 1e6).round() / 1e6),
            "unpriced": self.unpriced,
        })
    }
}

/// A usage report.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) by: By,
    pub(crate) since: Option<String>,
    /// The rows: days oldest first, everything else most tokens first.
    pub(crate) lines: Vec<Line>,
    pub(crate) total: Line,
    pub(crate) prices: Prices,
}

impl Report {
    /// The report as both surfaces give it.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "by": self.by.name(),
            "since": self.since,
            "rows": self.lines.iter().map(Line::to_json).collect::<Vec<_>>(),
            "total": self.total.to_json(),
            "prices": {
                "asOf": self.prices.as_of,
                "currency": self.prices.currency,
                "unit": self.prices.unit,
                "sources": self.prices.sources,
                "note": self.prices.note,
            },
        })
    }

    /// Where the prices come from, in one line for people.
    pub(crate) fn prices_line(&self) -> String {
        format!(
            "costs in {} from list prices as of {} ({})",
            self.prices.currency,
            self.prices.as_of,
            self.prices.sources.join(", ")
        )
    }
}

/// The report of the transcripts in `found`: each folded into `index` past its watermark, then
/// their rows summed as `asked` (see [`report`]). The scan's outcome comes with it (a transcript
/// that could not be read is left out, and named there).
pub(crate) fn measure(
    index: &mut spex_index::Index,
    found: &[spex_history::Found],
    asked: &Asked,
    prices: Prices,
    identity: &spex_history::Identity,
) -> anyhow::Result<(Report, spex_index::Scanned)> {
    let scanned = index.scan_history(found)?;
    // Rows of other roots (another command's `--source`) are not this report's.
    let paths: std::collections::HashSet<String> =
        found.iter().map(|found| found.path.to_string_lossy().into_owned()).collect();
    let mut spent = index.spent(asked.since.as_deref())?;
    spent.retain(|row| paths.contains(&row.path));
    Ok((report(&spent, asked, prices, identity), scanned))
}

/// Sums `spent` (the index's rows, already narrowed to the transcripts this report covers) as
/// `asked`, priced from `prices`; titles and projects redacted with `identity`.
pub(crate) fn report(
    spent: &[Spent],
    asked: &Asked,
    prices: Prices,
    identity: &spex_history::Identity,
) -> Report {
    let shown = |text: &str| spex_history::redact(text, identity);
    let mut lines: BTreeMap<String, Line> = BTreeMap::new();
    for row in spent {
        let key = match asked.by {
            By::Day => row.ts.as_deref().and_then(crate::when::parse_ts).map(|when| {
                when.to_zoned_datetime(asked.zone.clone()).strftime("%Y-%m-%d").to_string()
            }),
            By::Session => Some(format!("{}:{}", row.harness, row.id)),
            By::Project => row.project.as_deref().map(shown),
            By::Model => row.model.clone(),
            By::Harness => Some(row.harness.clone()),
        }
        .unwrap_or_else(|| "(none)".to_owned());
        let line = lines.entry(key.clone()).or_insert_with(|| Line {
            key,
            label: (asked.by == By::Session).then(|| row.title.as_deref().map(shown)).flatten(),
            ..Line::default()
        });
        line.add(&priced(row, &prices));
    }
    let mut lines: Vec<Line> = lines.into_values().collect();
    if asked.by != By::Day {
        lines.sort_by(|a, b| b.tokens.sum().cmp(&a.tokens.sum()).then(a.key.cmp(&b.key)));
    }
    let mut total = Line { key: "total".to_owned(), ..Line::default() };
    for line in &lines {
        total.add(line);
    }
    Report { by: asked.by, since: asked.since.clone(), lines, total, prices }
}

/// One row of the index as a line of its own: a turn, or a reply with its cost.
fn priced(row: &Spent, prices: &Prices) -> Line {
    if row.turn {
        return Line { turns: 1, ..Line::default() };
    }
    let tokens = Tokens {
        input: row.input,
        output: row.output,
        cache_read: row.cache_read,
        cache_write: row.cache_write,
    };
    let mut line = Line { replies: 1, tokens, ..Line::default() };
    match row.model.as_deref().and_then(|model| prices.of(model)) {
        Some(price) => line.cost = tokens.cost(price),
        None => {
            line.unpriced_tokens = tokens.sum();
            line.unpriced.insert(row.model.clone().unwrap_or_else(|| "(unknown)".to_owned()));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(model: &str, ts: &str, input: u64, output: u64) -> Spent {
        Spent {
            harness: "claude".to_owned(),
            id: "s1".to_owned(),
            path: "/t/s1.jsonl".to_owned(),
            project: Some("/work/shop".to_owned()),
            title: Some("fix the tests".to_owned()),
            ts: Some(ts.to_owned()),
            model: Some(model.to_owned()),
            turn: false,
            input,
            output,
            cache_read: 0,
            cache_write: 0,
        }
    }

    #[test]
    fn the_committed_table_prices_dated_models() {
        let prices = Prices::committed();
        assert_eq!(prices.of("claude-sonnet-4-5-20250929"), prices.of("claude-sonnet-4-5"));
        assert!(prices.of("claude-sonnet-4-5").is_some());
        assert!(prices.of("gpt-5-codex").is_some());
        assert!(prices.of("scripted").is_none());
        assert!(prices.of("claude-sonnet-4-5-2025").is_none(), "not a date suffix");
    }

    #[test]
    fn costs_sum_priced_replies_and_name_the_unpriced() {
        let rows = [
            spent("claude-sonnet-4-5-20250929", "2026-11-30T10:00:00.000Z", 1_000_000, 0),
            spent("claude-sonnet-4-5", "2026-11-30T23:30:00.000Z", 0, 1_000_000),
            spent("scripted", "2026-12-01T00:30:00.000Z", 5, 5),
            Spent {
                turn: true,
                input: 0,
                output: 0,
                ..spent("x", "2026-12-01T01:00:00.000Z", 0, 0)
            },
        ];
        let asked = Asked { by: By::Day, since: None, zone: TimeZone::UTC };
        let identity = spex_history::Identity::default();
        let utc = report(&rows, &asked, Prices::committed(), &identity);
        let days: Vec<&str> = utc.lines.iter().map(|line| line.key.as_str()).collect();
        assert_eq!(days, ["2026-11-30", "2026-12-01"]);
        assert_eq!(utc.lines[0].priced_cost(), Some(18.0), "3 + 15 per million");
        assert_eq!(utc.lines[1].priced_cost(), None, "only unpriced tokens");
        assert_eq!(utc.lines[1].turns, 1);
        assert_eq!(utc.total.replies, 3);
        assert_eq!(utc.total.priced_cost(), Some(18.0));
        assert_eq!(utc.total.unpriced.iter().collect::<Vec<_>>(), ["scripted"]);
        // Two hours east, the reply at 23:30 UTC is the next day's.
        let east = Asked { zone: TimeZone::fixed(jiff::tz::offset(2)), ..asked };
        let east = report(&rows, &east, Prices::committed(), &identity);
        assert_eq!(east.lines[0].tokens, Tokens { input: 1_000_000, ..Tokens::default() });
        assert_eq!(east.lines[1].tokens.output, 1_000_005);
    }

    #[test]
    fn a_price_table_that_is_not_one_is_refused() {
        assert!(Prices::parse("{}", "t.json").is_err());
        let negative = PRICES.replace("\"input\": 5.0", "\"input\": -5.0");
        let error = Prices::parse(&negative, "t.json").unwrap_err().to_string();
        assert!(error.contains("claude-opus-4-5"), "{error}");
    }
}
