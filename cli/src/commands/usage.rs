//! `spex usage`: the tokens and turns of every Claude Code and Codex session on this machine,
//! summed per day, session, project, model or harness, with what they cost at list prices.
//!
//! Read-only toward the transcripts: they are folded into the store's session index (or, with no
//! store here, an index in memory) and the report is a projection of it.

use std::path::PathBuf;

use spex_history::Root;

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::ops::usage::{Asked, By, Line, Prices, Report};
use crate::render::{self, outln, print_json};

/// Arguments of `spex usage`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// What to sum by: day (in the local zone; --utc for UTC), session, project, model or
    /// harness.
    #[arg(long, default_value = "day", value_parser = By::parse)]
    by: By,
    /// Only replies and turns since this time: RFC 3339, a local date or time, or a duration
    /// back from now (90m, 2h, 7days).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Price replies from this table (the committed table's JSON form) instead of the one this
    /// version carries.
    #[arg(long, value_name = "FILE")]
    prices: Option<PathBuf>,
    /// Count days in UTC instead of the local zone.
    #[arg(long)]
    utc: bool,
    /// Also look for transcripts under this root: `claude=DIR` or `codex=DIR`. Repeatable.
    #[arg(long = "source", value_name = "HARNESS=DIR", value_parser = crate::args::parse_source)]
    sources: Vec<Root>,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let zone = crate::when::zone(args.utc);
    let since = crate::when::since_now(args.since.as_deref(), &zone).map_err(BadInput::from)?;
    let prices = match &args.prices {
        Some(file) => {
            let text = std::fs::read_to_string(file).map_err(|error| {
                BadInput(format!("cannot read the price table {}: {error}", file.display()))
            })?;
            Prices::parse(&text, &file.display().to_string())?
        }
        None => Prices::committed(),
    };
    let found = spex_history::discover(&crate::args::history_roots(global, &args.sources)?)?;
    let mut index = match global.existing_store()? {
        Some(store) => crate::args::open_index(&store)?,
        None => spex_index::Index::in_memory(&global.root()?.path)?,
    };
    let asked = Asked { by: args.by, since, zone };
    let identity = spex_history::Identity::of_this_machine();
    let (report, scanned) =
        crate::ops::usage::measure(&mut index, &found, &asked, prices, &identity)?;
    for (path, reason) in &scanned.unreadable {
        eprintln!("spex: skipped {}: {reason}", path.display());
    }
    if global.json {
        print_json(report.to_json())?;
        return Ok(Code::Ok);
    }
    if report.lines.is_empty() {
        if !global.quiet {
            eprintln!(
                "no usage recorded{} in {} transcripts found",
                if report.since.is_some() { " since then" } else { "" },
                found.len()
            );
        }
        return Ok(Code::Ok);
    }
    render_table(&report)?;
    if !global.quiet {
        eprintln!("{}", report.prices_line());
        if !report.total.unpriced.is_empty() {
            let models: Vec<&str> = report.total.unpriced.iter().map(String::as_str).collect();
            eprintln!("no price for {} (their tokens are not in the costs)", models.join(", "));
        }
    }
    Ok(Code::Ok)
}

/// The report as a table, numbers right-aligned, the total last.
fn render_table(report: &Report) -> anyhow::Result<()> {
    let mut header: Vec<String> =
        [report.by.name(), "turns", "replies", "input", "output", "cache read", "cache write"]
            .iter()
            .map(|name| name.to_uppercase())
            .collect();
    header.push("COST".to_owned());
    let session = report.by == By::Session;
    if session {
        header.push("TITLE".to_owned());
    }
    let cells = |line: &Line| -> Vec<String> {
        let mut cells = vec![
            line.key.clone(),
            grouped(line.turns),
            grouped(line.replies),
            grouped(line.tokens.input),
            grouped(line.tokens.output),
            grouped(line.tokens.cache_read),
            grouped(line.tokens.cache_write),
            cost(line),
        ];
        if session {
            cells.push(line.label.clone().unwrap_or_default());
        }
        cells
    };
    let mut rows: Vec<Vec<String>> = report.lines.iter().map(cells).collect();
    rows.push(cells(&report.total));
    // Numbers read down their right edge.
    for column in 1..=7 {
        let wide = rows.iter().map(|row| row[column].len()).max().unwrap_or(0);
        let wide = wide.max(header[column].len());
        for row in &mut rows {
            row[column] = format!("{:>wide$}", row[column]);
        }
        header[column] = format!("{:>wide$}", header[column]);
    }
    let text = render::table(&header, &rows, render::terminal_columns());
    outln!("{}", text.trim_end())?;
    Ok(())
}

/// A cost as people read it: two decimals, `+?` when some tokens have no price, `no price`
/// when none has.
fn cost(line: &Line) -> String {
    match line.priced_cost() {
        None => "no price".to_owned(),
        Some(cost) if line.unpriced.is_empty() => format!("${cost:.2}"),
        Some(cost) => format!("${cost:.2}+?"),
    }
}

/// A count with thousands separated by commas.
fn grouped(count: u64) -> String {
    let digits = count.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(super::grouped(0), "0");
        assert_eq!(super::grouped(999), "999");
        assert_eq!(super::grouped(1_000), "1,000");
        assert_eq!(super::grouped(12_345_678), "12,345,678");
    }
}
