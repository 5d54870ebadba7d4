//! What `spex` prints, for people and for machines: the one way to stdout (a closed pipe is an
//! error the caller ends quietly on, never a panic), JSON documents with their schema version and
//! JSON errors, colour, times (local, relative), tables measured in terminal columns, the session
//! table and the conversation view. Commands render through here and never print raw control
//! characters of stored text.

use std::fmt;
use std::io::Write as _;

use anstyle::{AnsiColor, Style};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

use crate::when::{parse_ts, relative};

/// When to colour output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorArg {
    Auto,
    Always,
    Never,
}

/// JSON schema version of every `--json` document and stream line `spex` prints.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Writes to stdout (through the pager, when one was started); an error (a closed pipe above
/// all: a pager quit early) is returned, not a panic.
pub(crate) fn write_out(args: fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut pager = PAGER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, input)) = pager.as_mut() {
        return input.write_fmt(args);
    }
    drop(pager);
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.flush()
}

/// The pager long output goes through, once started: the process and its standard input.
static PAGER: std::sync::Mutex<
    Option<(std::process::Child, std::io::BufWriter<std::process::ChildStdin>)>,
> = std::sync::Mutex::new(None);

/// Sends the rest of this command's stdout through a pager, as git does: only when stdout is a
/// terminal, not with `--json` or `--no-pager`; the pager is `SPEX_PAGER`, else `PAGER`, else
/// `less` (with `LESS=FRX` unless set: it quits at once when the text fits the screen, keeps
/// colour, and leaves the text on screen). An empty pager or `cat` means none.
pub(crate) fn page(json: bool, no_pager: bool) {
    use std::io::IsTerminal as _;
    if json || no_pager || !std::io::stdout().is_terminal() {
        return;
    }
    let chosen = ["SPEX_PAGER", "PAGER"].iter().find_map(|name| std::env::var(name).ok());
    // The default only where it is installed (a pager that cannot start would swallow it all).
    let less_installed = || {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("less").is_file()))
    };
    let command = match chosen {
        Some(command) => command,
        None if less_installed() => "less".to_owned(),
        None => return,
    };
    if command.trim().is_empty() || command.trim() == "cat" {
        return;
    }
    let mut pager = std::process::Command::new("sh");
    pager.arg("-c").arg(&command).stdin(std::process::Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        pager.env("LESS", "FRX");
    }
    match pager.spawn() {
        Ok(mut child) => {
            let Some(input) = child.stdin.take() else { return };
            let mut slot = PAGER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *slot = Some((child, std::io::BufWriter::new(input)));
        }
        Err(error) => {
            tracing::warn!(pager = command, %error, "cannot start the pager; printing directly")
        }
    }
}

/// Ends the pager, if one was started: the rest of the output is sent, and the pager waited for
/// (the person reads, then quits it).
pub(crate) fn finish_pager() {
    let taken = PAGER.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some((mut child, mut input)) = taken {
        let _ignored = input.flush();
        drop(input);
        let _ignored = child.wait();
    }
}

/// `println!` that returns the write's error (use with `?`).
macro_rules! outln {
    () => { $crate::render::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::render::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that returns the write's error (use with `?`).
macro_rules! out {
    ($($arg:tt)*) => { $crate::render::write_out(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};

/// Whether `error` is a write to a closed pipe (`spex ... | head`): the reader has what it
/// wanted, so the command ends quietly with success.
pub(crate) fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints `document` as one JSON line, with the schema version first.
pub(crate) fn print_json(mut document: serde_json::Value) -> anyhow::Result<()> {
    if let Some(map) = document.as_object_mut() {
        let mut versioned = serde_json::Map::new();
        versioned.insert("schema".to_owned(), SCHEMA_VERSION.into());
        versioned.extend(std::mem::take(map));
        document = serde_json::Value::Object(versioned);
    }
    outln!("{}", serde_json::to_string(&document)?)?;
    Ok(())
}

/// A 64-bit number as JSON: a string, so that no reader rounds it through a double (a seed above
/// 2^53 must replay exactly).
pub(crate) fn json_u64(value: u64) -> serde_json::Value {
    serde_json::Value::String(value.to_string())
}

/// `text` with only literal characters: what a tmux pane receives and what human-readable output
/// prints. Every control character but newline and tab (C0, DEL, C1; ESC above all, which could
/// end the bracketed paste and type the rest as keys) is shown as its Unicode control picture
/// (ESC as `␛`, DEL as `␡`) or, for C1, as `\u{..}`; a carriage return is a newline.
pub(crate) fn literal(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            '\r' => "\n".to_owned(),
            '\u{0}'..='\u{1f}' => {
                char::from_u32(0x2400 + c as u32).map_or_else(String::new, String::from)
            }
            '\u{7f}' => "\u{2421}".to_owned(),
            '\u{80}'..='\u{9f}' => format!("\\u{{{:x}}}", c as u32),
            _ => c.to_string(),
        })
        .collect()
}

/// The first line of `text`, literal, with a mark when more follows.
pub(crate) fn first_line(text: &str) -> String {
    let text = text.trim_start();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    let more = lines.any(|line| !line.trim().is_empty());
    let first = literal(first).replace('\t', " ");
    if more { format!("{first} …") } else { first }
}

// ---- transitions --------------------------------------------------------------------------

/// A lifecycle state as JSON: the raw lifecycle, and the display word beside it.
pub(crate) fn triple_json(triple: &spex_engine::Triple) -> serde_json::Value {
    serde_json::json!({
        "status": triple.status,
        "proposal": triple.proposal,
        "note": triple.note,
        "display": triple.display_word(),
    })
}

/// What a lifecycle write did.
pub(crate) fn applied(
    id: &spex_engine::SessionId,
    applied: &spex_engine::Applied,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        return print_json(serde_json::json!({
            "session": id.as_str(),
            "before": triple_json(&applied.before),
            "after": triple_json(&applied.after),
            "logged": applied.logged,
            "written": applied.written,
        }));
    }
    if !applied.written {
        outln!(
            "{id} unchanged: {} (the write does not apply from it)",
            applied.before.display_word()
        )?;
    } else if applied.logged {
        outln!("{id} {} -> {}", applied.before.display_word(), applied.after.display_word())?;
    } else {
        outln!("{id} {} (no move)", applied.after.display_word())?;
    }
    Ok(())
}

// ---- colour -------------------------------------------------------------------------------

/// Paints text when colour is on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Paint {
    on: bool,
}

impl Paint {
    /// Colour for stdout under `--color` (auto: stdout is a terminal, `NO_COLOR` is unset or
    /// empty, and `TERM` is not `dumb`).
    pub(crate) fn for_stdout(color: ColorArg) -> Paint {
        use std::io::IsTerminal as _;
        let on = match color {
            ColorArg::Always => true,
            ColorArg::Never => false,
            ColorArg::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
                    && std::env::var_os("TERM").is_none_or(|term| term != "dumb")
            }
        };
        Paint { on }
    }

    /// `text` in `style`.
    pub(crate) fn style(self, text: &str, style: Style) -> String {
        if self.on && !text.is_empty() {
            format!("{style}{text}{style:#}")
        } else {
            text.to_owned()
        }
    }

    /// `text` dimmed.
    pub(crate) fn dim(self, text: &str) -> String {
        self.style(text, Style::new().dimmed())
    }

    /// `text` in bold.
    pub(crate) fn bold(self, text: &str) -> String {
        self.style(text, Style::new().bold())
    }

    /// `text` in a colour.
    pub(crate) fn color(self, text: &str, color: AnsiColor) -> String {
        self.style(text, Style::new().fg_color(Some(color.into())))
    }

    /// A display status word in the colour people read it by.
    pub(crate) fn status(self, word: &str) -> String {
        let style = match word {
            "working" | "active" => Style::new().fg_color(Some(AnsiColor::Green.into())),
            "asking" => Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold(),
            "review" | "close-pending" => Style::new().fg_color(Some(AnsiColor::Magenta.into())),
            "done" => Style::new().fg_color(Some(AnsiColor::Cyan.into())),
            "error" | "corrupt" => Style::new().fg_color(Some(AnsiColor::Red.into())).bold(),
            "queued" => Style::new().fg_color(Some(AnsiColor::Blue.into())),
            "parked" | "idle" | "closed" => Style::new().dimmed(),
            _ => Style::new(),
        };
        self.style(word, style)
    }
}

// ---- progress ---------------------------------------------------------------------------

/// Set by `-q`: no progress bars.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns progress bars off for this process (`-q`).
pub(crate) fn set_quiet() {
    QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// A progress bar on stderr counting `unit`, when stderr is a terminal and `-q` was not given.
pub(crate) fn progress_bar(unit: &str) -> Option<indicatif::ProgressBar> {
    if QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    // On a terminal, a bar redrawn in place; elsewhere (a CI log, a pipe), the same line printed
    // every [`PROGRESS_LOG_INTERVAL`], so a long run is never silent.
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::new(0)
    } else {
        indicatif::ProgressBar::with_draw_target(
            Some(0),
            indicatif::ProgressDrawTarget::term_like(Box::new(LogLines::new())),
        )
    };
    let style = indicatif::ProgressStyle::with_template(&format!(
        "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit}, {{msg}}"
    ))
    .map(|style| style.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    Some(bar)
}

/// How often progress is printed where it cannot be redrawn in place.
const PROGRESS_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);

/// A progress "terminal" that is a log: each draw is a line on stderr, at most one per
/// [`PROGRESS_LOG_INTERVAL`] (the first after one interval: a short run prints nothing); cursor
/// moves and clears do nothing.
#[derive(Debug)]
struct LogLines {
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

impl LogLines {
    fn new() -> LogLines {
        LogLines { last: std::sync::Mutex::new(Some(std::time::Instant::now())) }
    }
}

impl indicatif::TermLike for LogLines {
    fn width(&self) -> u16 {
        100
    }

    fn move_cursor_up(&self, _n: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_down(&self, _n: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_right(&self, _n: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_left(&self, _n: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn write_line(&self, line: &str) -> std::io::Result<()> {
        self.write_str(line)
    }

    fn write_str(&self, line: &str) -> std::io::Result<()> {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let due = last.is_none_or(|then| then.elapsed() >= PROGRESS_LOG_INTERVAL);
        if due && !line.trim().is_empty() {
            *last = Some(std::time::Instant::now());
            use std::io::Write as _;
            writeln!(std::io::stderr(), "{}", line.trim_end())?;
        }
        Ok(())
    }

    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---- columns ------------------------------------------------------------------------------

/// The width of `text` in terminal columns (wide characters count two, escapes none).
pub(crate) fn width(text: &str) -> usize {
    strip_escapes(text).width()
}

fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `text` cut to at most `columns` terminal columns, with `…` when cut (never inside a wide
/// character).
pub(crate) fn truncate(text: &str, columns: usize) -> String {
    if text.width() <= columns {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > columns {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// `text` padded with spaces to `columns` terminal columns.
pub(crate) fn pad(text: &str, columns: usize) -> String {
    let w = width(text);
    format!("{text}{}", " ".repeat(columns.saturating_sub(w)))
}

/// The width of the terminal on stdout, when it is one (`COLUMNS`, else 100).
pub(crate) fn terminal_columns() -> Option<usize> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    Some(std::env::var("COLUMNS").ok().and_then(|text| text.parse().ok()).unwrap_or(100))
}

/// A table: a header and rows of cells, each column as wide as its widest cell; the last column
/// is cut to what fits in `columns`, when given.
pub(crate) fn table(header: &[String], rows: &[Vec<String>], columns: Option<usize>) -> String {
    let count = header.len();
    let mut widths: Vec<usize> = header.iter().map(|cell| width(cell)).collect();
    for row in rows {
        for (index, cell) in row.iter().enumerate().take(count) {
            widths[index] = widths[index].max(width(cell));
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let mut text = String::new();
        let mut used = 0;
        for (index, cell) in cells.iter().enumerate() {
            if index + 1 == cells.len() {
                let room = columns.map_or(usize::MAX, |columns| columns.saturating_sub(used));
                // Only plain text is ever in the last column, so it can be cut by columns.
                text.push_str(&truncate(cell, room.max(8)));
            } else {
                text.push_str(&pad(cell, widths[index]));
                text.push_str("  ");
                used += widths[index] + 2;
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header);
    for row in rows {
        line(row);
    }
    out
}

/// The shortest prefix of each of `shown` that no other id of `every` starts with (at least `min`
/// characters, not counting a kind that starts the id, as OpenCode's `ses_`). `every` is the whole set a reference is resolved against (every session of the
/// store, not the rows a filter left), so a printed prefix names the same session when typed
/// back; an id that is the start of another's is printed whole (it resolves as an exact id).
pub(crate) fn unique_prefixes(shown: &[&str], every: &[&str], min: usize) -> Vec<usize> {
    let mut sorted: Vec<&str> = every.iter().chain(shown).copied().collect();
    sorted.sort_unstable();
    sorted.dedup();
    let shared =
        |id: &str, other: &str| id.chars().zip(other.chars()).take_while(|(a, b)| a == b).count();
    shown
        .iter()
        .map(|id| {
            let at = sorted.binary_search(id).unwrap_or_else(|at| at);
            let before = at.checked_sub(1).and_then(|at| sorted.get(at));
            let after = sorted.get(at + 1);
            let need = before
                .map_or(0, |other| shared(id, other))
                .max(after.map_or(0, |other| shared(id, other)))
                + 1;
            need.max(min + kind_prefix(id)).min(id.chars().count())
        })
        .collect()
}

/// The characters of a kind that starts an id (`ses_`: one to three lowercase letters and an
/// underscore), which tell no two ids of that kind apart.
fn kind_prefix(id: &str) -> usize {
    match id.split_once('_') {
        Some((kind, _))
            if (1..=3).contains(&kind.len()) && kind.bytes().all(|b| b.is_ascii_lowercase()) =>
        {
            kind.len() + 1
        }
        _ => 0,
    }
}

/// The first `chars` characters of `text`.
pub(crate) fn prefix(text: &str, chars: usize) -> &str {
    text.char_indices().nth(chars).map_or(text, |(at, _)| &text[..at])
}

// ---- the session table --------------------------------------------------------------------

/// One row of the session table.
#[derive(Clone, Debug)]
pub(crate) struct SessionRow {
    pub(crate) id: String,
    /// The display status word (`corrupt` for a damaged session).
    pub(crate) display: String,
    /// Last activity, else creation (stored form).
    pub(crate) when: Option<String>,
    /// Messages owed (`None`: unknown, e.g. a damaged queue).
    pub(crate) owed: Option<usize>,
    /// The first line of the last message or note (the reason, for a damaged session).
    pub(crate) preview: String,
    pub(crate) archived: bool,
    /// The progress of the agent behind it, for a harness session (`running`, `crashed`, ...).
    pub(crate) agent: Option<String>,
    /// Its title (the record's, else its first message).
    pub(crate) title: Option<String>,
}

/// The widest a title is shown in a table (the last column takes the rest of the line).
const TITLE_COLUMNS: usize = 36;

/// The session table: a header, the shortest unique id prefixes, the status in colour, last
/// activity as relative time, owed count and a preview cut to the terminal.
pub(crate) fn session_table(
    rows: &[SessionRow],
    every: &[&str],
    now: Timestamp,
    zone: &TimeZone,
    paint: Paint,
    columns: Option<usize>,
) -> String {
    let ids: Vec<&str> = rows.iter().map(|row| row.id.as_str()).collect();
    let lengths = unique_prefixes(&ids, every, 4);
    let header: Vec<String> =
        ["ID", "STATUS", "ACTIVE", "OWED", "TITLE", "LAST"].iter().map(|h| paint.dim(h)).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .zip(&lengths)
        .map(|(row, &length)| {
            let id = literal(&row.id);
            // A UUID is shown by the prefix a command takes (`--json` has the whole id); a name
            // a person chose is shown whole.
            let id = if uuid::Uuid::try_parse(&row.id).is_ok() {
                paint.bold(prefix(&id, length))
            } else {
                paint.bold(&id)
            };
            let mut status = paint.status(&row.display);
            if let Some(agent) = &row.agent {
                status.push_str(&paint.dim(&format!(" · {agent}")));
            }
            if row.archived {
                status.push_str(&paint.dim(" (archived)"));
            }
            let when = row
                .when
                .as_deref()
                .and_then(parse_ts)
                .map_or_else(|| "-".to_owned(), |then| relative(now, then, zone));
            let owed = match row.owed {
                Some(0) => paint.dim("0"),
                Some(count) => paint.color(&count.to_string(), AnsiColor::Yellow),
                None => "?".to_owned(),
            };
            let title = row.title.as_deref().map_or_else(|| "-".to_owned(), first_line);
            vec![id, status, when, owed, truncate(&title, TITLE_COLUMNS), row.preview.clone()]
        })
        .collect();
    table(&header, &cells, columns)
}

// ---- the conversation ---------------------------------------------------------------------

/// The layout every conversation-like view shares: a line between days, then per entry its time
/// (local, or UTC with a `Z`), its heading, and its text indented under the heading, literal.
#[derive(Debug)]
struct Entries {
    paint: Paint,
    zone: TimeZone,
    day: Option<jiff::civil::Date>,
}

impl Entries {
    fn new(paint: Paint, zone: TimeZone) -> Entries {
        Entries { paint, zone, day: None }
    }

    /// One entry at `ts` (a stored time; unreadable, it is shown as it is; absent, as dashes).
    fn entry(&mut self, ts: Option<&str>, heading: &str, text: Option<&str>) -> String {
        let paint = self.paint;
        let mut out = String::new();
        let when = ts.and_then(parse_ts).map(|ts| ts.to_zoned_datetime(self.zone.clone()));
        if let Some(zoned) = &when
            && self.day != Some(zoned.date())
        {
            self.day = Some(zoned.date());
            out.push_str(&paint.dim(&format!("── {} ──", zoned.strftime("%A %-d %B %Y"))));
            out.push('\n');
        }
        let time = match (&when, ts) {
            (Some(zoned), _) if self.zone == TimeZone::UTC => {
                zoned.strftime("%H:%M:%SZ").to_string()
            }
            (Some(zoned), _) => zoned.strftime("%H:%M:%S").to_string(),
            (None, Some(ts)) => literal(ts),
            (None, None) => "--:--:--".to_owned(),
        };
        out.push_str(&paint.dim(&time));
        out.push_str("  ");
        out.push_str(heading);
        out.push('\n');
        if let Some(text) = text {
            let indent = " ".repeat(width(&time) + 2);
            for line in literal(text).split('\n') {
                out.push_str(&indent);
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// A session's timeline as a conversation: day separators, local times, who wrote to whom, the
/// agent's declarations as its replies, the reply channel, and whether each message was
/// delivered or is still owed.
#[derive(Debug)]
pub(crate) struct Conversation {
    entries: Entries,
    session: String,
    /// The message ids still owed to the session.
    owed: std::collections::HashSet<String>,
}

impl Conversation {
    pub(crate) fn new(
        paint: Paint,
        zone: TimeZone,
        session: &str,
        owed: std::collections::HashSet<String>,
    ) -> Conversation {
        Conversation { entries: Entries::new(paint, zone), session: session.to_owned(), owed }
    }

    /// The message ids owed changed (a follow re-reads the queue).
    pub(crate) fn set_owed(&mut self, owed: std::collections::HashSet<String>) {
        self.owed = owed;
    }

    /// One event: its heading line (after a day separator when the day changed), then its text
    /// indented under it.
    pub(crate) fn event(&mut self, event: &spex_engine::Event) -> String {
        let paint = self.entries.paint;
        let (heading, text) = match event {
            spex_engine::Event::Sent(sent) => {
                let from = match &sent.from {
                    Some(id) => paint.bold(&literal(id)),
                    None => paint.bold("you"),
                };
                let mut heading = format!("{from} → {}", literal(&self.session));
                if sent.reply_via.as_deref() == Some("note") {
                    heading.push_str(&paint.dim(" · reply via note"));
                }
                match &sent.mid {
                    Some(mid) if self.owed.contains(mid) => {
                        heading.push_str("  ");
                        heading.push_str(&paint.color("owed", AnsiColor::Yellow));
                    }
                    Some(_) => {
                        heading.push_str("  ");
                        heading.push_str(&paint.dim("delivered"));
                    }
                    None => {}
                }
                (heading, Some(sent.text.as_str()))
            }
            spex_engine::Event::Status(status) => {
                let triple = &status.triple;
                let mut heading = format!(
                    "{} · {}",
                    paint.bold(&literal(&self.session)),
                    paint.status(triple.display_word())
                );
                if let Some(proposal) = triple.proposal {
                    heading.push_str(&paint.dim(&format!(" (proposes {})", proposal.name())));
                }
                (heading, triple.note.as_deref())
            }
        };
        self.entries.entry(Some(event.ts()), &heading, text)
    }

    /// One message of the session's harness transcript, labelled with its harness: what a
    /// person asked there, or what the agent answered (its text through `shown`, the redaction).
    pub(crate) fn transcript_event(
        &mut self,
        harness: &str,
        event: &spex_history::Event,
        shown: &dyn Fn(&str) -> String,
    ) -> String {
        let paint = self.entries.paint;
        let (who, text) = match &event.kind {
            spex_history::Kind::User { text } => (paint.bold("you"), text),
            spex_history::Kind::Assistant { text } => {
                (paint.color(&literal(&self.session), AnsiColor::Cyan), text)
            }
            _ => return String::new(),
        };
        let heading = format!("{who}{}", paint.dim(&format!(" · in {}", literal(harness))));
        self.entries.entry(event.ts.as_deref(), &heading, Some(&shown(text)))
    }
}

// ---- a harness session --------------------------------------------------------------------

/// A harness transcript as a conversation: what the person asked, what the agent answered, and
/// (with `tools`) the tools it ran. Every text passes through the caller's `shown` (redaction).
#[derive(Debug)]
pub(crate) struct HistoryView {
    entries: Entries,
    tools: bool,
}

impl HistoryView {
    pub(crate) fn new(paint: Paint, zone: TimeZone, tools: bool) -> HistoryView {
        HistoryView { entries: Entries::new(paint, zone), tools }
    }

    /// One event (empty when this view leaves it out).
    pub(crate) fn event(
        &mut self,
        event: &spex_history::Event,
        shown: &dyn Fn(&str) -> String,
    ) -> String {
        use spex_history::{Kind, Lifecycle};
        let paint = self.entries.paint;
        let (heading, text): (String, Option<String>) = match &event.kind {
            Kind::User { text } => (paint.bold("you"), Some(shown(text))),
            Kind::Assistant { text } => (paint.color("agent", AnsiColor::Cyan), Some(shown(text))),
            Kind::ToolCall { name, summary } if self.tools => {
                (paint.dim(&format!("· {} {}", literal(name), literal(&shown(summary)))), None)
            }
            Kind::ToolResult { ok, bytes } if self.tools => {
                let word = if *ok { paint.dim("ok") } else { paint.color("error", AnsiColor::Red) };
                (
                    format!("{} {word} {}", paint.dim("  →"), paint.dim(&format!("{bytes} bytes"))),
                    None,
                )
            }
            Kind::Lifecycle(Lifecycle::Summary { text }) => {
                (paint.dim("· summary"), Some(shown(text)))
            }
            Kind::Lifecycle(Lifecycle::Aborted { reason }) => (
                paint.color(&format!("· aborted ({})", literal(&shown(reason))), AnsiColor::Red),
                None,
            ),
            _ => return String::new(),
        };
        self.entries.entry(event.ts.as_deref(), &heading, text.as_deref())
    }
}

/// One transcript event as JSON (`spex history show --json`, the HTTP history), its texts
/// through `shown`.
pub(crate) fn event_json(
    event: &spex_history::Event,
    shown: &dyn Fn(&str) -> String,
) -> serde_json::Value {
    use spex_history::{Kind, Lifecycle};
    let mut value =
        serde_json::json!({ "ts": event.ts, "line": event.line, "kind": event.kind.name() });
    let extra = match &event.kind {
        Kind::User { text } | Kind::Assistant { text } => {
            serde_json::json!({ "text": shown(text) })
        }
        Kind::ToolCall { name, summary } => {
            serde_json::json!({ "tool": name, "input": shown(summary) })
        }
        Kind::ToolResult { ok, bytes } => serde_json::json!({ "ok": ok, "bytes": bytes }),
        Kind::Usage { model, input, output, cache_read, cache_write, .. } => serde_json::json!({
            "model": model, "input": input, "output": output,
            "cacheRead": cache_read, "cacheWrite": cache_write,
        }),
        Kind::Lifecycle(Lifecycle::Summary { text }) => serde_json::json!({ "text": shown(text) }),
        Kind::Lifecycle(Lifecycle::Aborted { reason }) => {
            serde_json::json!({ "reason": shown(reason) })
        }
        Kind::Lifecycle(_) => serde_json::json!({}),
        Kind::Unknown { kind } => serde_json::json!({ "raw": shown(kind) }),
    };
    if let (Some(map), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        map.extend(extra.clone());
    }
    value
}

/// The event [`event_json`] wrote (as another device's server answers it), or `None` when the
/// value is not one. Texts come back as they were shown (redacted by the device that wrote them).
pub(crate) fn event_from_json(value: &serde_json::Value) -> Option<spex_history::Event> {
    use spex_history::{Kind, Lifecycle};
    let text = |name: &str| value[name].as_str().map(str::to_owned);
    let count = |name: &str| value[name].as_u64().unwrap_or(0);
    let kind = match value["kind"].as_str()? {
        "user" => Kind::User { text: text("text")? },
        "assistant" => Kind::Assistant { text: text("text")? },
        "tool-call" => Kind::ToolCall { name: text("tool")?, summary: text("input")? },
        "tool-result" => Kind::ToolResult { ok: value["ok"].as_bool()?, bytes: count("bytes") },
        "usage" => Kind::Usage {
            model: text("model"),
            input: count("input"),
            output: count("output"),
            cache_read: count("cacheRead"),
            cache_write: count("cacheWrite"),
            reply: None,
        },
        "start" => Kind::Lifecycle(Lifecycle::Start),
        "summary" => Kind::Lifecycle(Lifecycle::Summary { text: text("text")? }),
        "turn-end" => Kind::Lifecycle(Lifecycle::TurnEnd),
        "aborted" => Kind::Lifecycle(Lifecycle::Aborted { reason: text("reason")? }),
        "unknown" => Kind::Unknown { kind: text("raw")? },
        _ => return None,
    };
    Some(spex_history::Event { ts: text("ts"), line: value["line"].as_u64()?, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_decodes_to_itself() {
        use spex_history::{Event, Kind, Lifecycle};
        let kinds = [
            Kind::User { text: "fix it".to_owned() },
            Kind::Assistant { text: "done".to_owned() },
            Kind::ToolCall { name: "Bash".to_owned(), summary: "cargo test".to_owned() },
            Kind::ToolResult { ok: false, bytes: 12 },
            Kind::Usage {
                model: Some("m".to_owned()),
                input: 1,
                output: 2,
                cache_read: 3,
                cache_write: 4,
                reply: None,
            },
            Kind::Lifecycle(Lifecycle::Start),
            Kind::Lifecycle(Lifecycle::Summary { text: "so far".to_owned() }),
            Kind::Lifecycle(Lifecycle::TurnEnd),
            Kind::Lifecycle(Lifecycle::Aborted { reason: "interrupted".to_owned() }),
            Kind::Unknown { kind: "x/y".to_owned() },
        ];
        for (line, kind) in kinds.into_iter().enumerate() {
            let event =
                Event { ts: Some("2026-12-01T00:00:00Z".to_owned()), line: line as u64, kind };
            let json = event_json(&event, &|text| text.to_owned());
            assert_eq!(event_from_json(&json).as_ref(), Some(&event), "{json}");
        }
        assert_eq!(event_from_json(&serde_json::json!({"kind": "user"})), None);
    }

    #[test]
    fn only_literal_characters_reach_a_pane() {
        assert_eq!(literal("a\u{1b}[201~rm -rf ~\r\n"), "a\u{241b}[201~rm -rf ~\n");
        assert_eq!(literal("tab\tnew\nline"), "tab\tnew\nline");
        assert_eq!(literal("\u{3}\u{7f}\u{9b}x"), "\u{2403}\u{2421}\\u{9b}x");
        assert!(literal("\u{1b}\u{9b}\u{7}").chars().all(|c| !c.is_control()));
    }

    #[test]
    fn columns_count_wide_characters_twice_and_escapes_never() {
        assert_eq!(width("デプロイ"), 8);
        assert_eq!(width("\u{1b}[32mok\u{1b}[0m"), 2);
        assert_eq!(truncate("デプロイする", 7), "デプロ…");
        assert_eq!(truncate("short", 7), "short");
        assert_eq!(pad("デ", 4), "デ  ");
        let text = table(
            &["ID".to_owned(), "NOTE".to_owned()],
            &[vec!["デプロイ".to_owned(), "x".to_owned()], vec!["a".to_owned(), "y".to_owned()]],
            None,
        );
        assert_eq!(text, "ID        NOTE\nデプロイ  x\na         y\n");
    }

    #[test]
    fn unique_prefixes_are_the_shortest_that_tell_ids_apart() {
        let ids = ["abc123", "abd999", "zzz", "abc124"];
        assert_eq!(unique_prefixes(&ids, &ids, 1), [6, 3, 1, 6]);
        assert_eq!(unique_prefixes(&ids, &ids, 4), [6, 4, 3, 6]);
        assert_eq!(unique_prefixes(&["only"], &[], 1), [1]);
        // Only `demo2` shown, `demo` hidden by a filter: the prefix tells it from the hidden one.
        assert_eq!(unique_prefixes(&["demo2"], &["demo", "demo2"], 1), [5]);
        // A kind that starts the id (OpenCode's `ses_`) is not part of the minimum.
        assert_eq!(unique_prefixes(&["ses_dc13346b4ffe"], &[], 4), [8]);
        // `demo` is the start of `demo2`: printed whole, it resolves as an exact id.
        assert_eq!(unique_prefixes(&["demo"], &["demo", "demo2"], 1), [4]);
        assert_eq!(unique_prefixes(&["abc124"], &ids, 1), [6]);
    }

    #[test]
    fn relative_times_read_as_people_say_them() {
        let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let ago = |seconds: i64| {
            relative(now, now - jiff::SignedDuration::from_secs(seconds), &TimeZone::UTC)
        };
        assert_eq!(ago(2), "just now");
        assert_eq!(ago(42), "42 s ago");
        assert_eq!(ago(180), "3 min ago");
        assert_eq!(ago(5 * 3600), "5 h ago");
        assert_eq!(ago(30 * 3600), "yesterday");
        assert_eq!(ago(3 * 86_400), "3 days ago");
        assert_eq!(ago(60 * 86_400), "2026-10-02");
        assert_eq!(first_line("  first\nsecond"), "first …");
        assert_eq!(first_line("one\n\n"), "one");
    }
}
