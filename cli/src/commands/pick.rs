//! `spex pick`: an interactive picker over every session, spex's own and the Claude Code and
//! Codex sessions found on this machine, as `claude --resume` has one: type to filter, arrows to
//! move, a preview of the highlighted conversation, Enter to open it, Ctrl-R to resume a harness
//! session in its harness (in its project). Read-only: nothing is written.
//!
//! The screen is drawn with ratatui on the alternate screen; the terminal is restored on every
//! way out (a chosen session, Esc, Ctrl-C, an error).

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::os::unix::process::CommandExt as _;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, TableState};
use serde_json::json;
use spex_engine::SessionId;
use spex_history::{Harness, Identity};

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::render::ColorArg;
use crate::render::{self, Paint, print_json};

/// Arguments of `spex pick`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Start with this filter typed.
    query: Option<String>,
    /// Print the chosen session's id (JSON with --json: its kind and id) instead of opening it.
    #[arg(long)]
    print: bool,
}

/// One session on the list.
#[derive(Debug)]
struct Entry {
    /// `spex`, `claude` or `codex`.
    kind: &'static str,
    id: String,
    title: String,
    project: String,
    state: String,
    when: Option<String>,
    /// A harness session's harness and transcript.
    harness: Option<(Harness, Option<spex_history::Found>)>,
    /// What the filter searches, lowercased.
    haystack: String,
}

/// How many entries of a conversation the preview shows.
const PREVIEW_ENTRIES: usize = 6;

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(BadInput(
            "pick needs a terminal (for scripts: `spex session ls --json`, `spex history ls --json`)"
                .to_owned(),
        )
        .into());
    }
    let identity = Identity::of_this_machine();
    let shown = |text: &str| spex_history::redact(text, &identity);
    let entries = entries(global, &shown)?;
    if entries.is_empty() {
        eprintln!("spex: no sessions to pick from (none in the store, no transcripts found)");
        return Ok(Code::Failed);
    }
    let mut picker = Picker::new(entries, args.query.clone().unwrap_or_default());
    let chosen = {
        let mut terminal = ratatui::init();
        let chosen = picker.run(&mut terminal, global, &shown);
        ratatui::restore();
        chosen?
    };
    let Some((entry, action)) = chosen else { return Ok(Code::Failed) };
    if args.print {
        if global.json {
            print_json(json!({ "kind": entry.kind, "id": entry.id }))?;
        } else {
            render::outln!("{}", entry.id)?;
        }
        return Ok(Code::Ok);
    }
    let error = match (action, &entry.harness) {
        (Action::Resume, Some((harness, _))) => {
            let command = super::history::resume_command(*harness, &entry.id);
            eprintln!("spex: {command}");
            let mut resume = std::process::Command::new("sh");
            resume.arg("-c").arg(&command);
            if !entry.project.is_empty() && std::path::Path::new(&entry.project).is_dir() {
                resume.current_dir(&entry.project);
            }
            resume.exec()
        }
        _ => {
            // The conversation, as `session timeline` / `history show` print it.
            let mut open = std::process::Command::new(std::env::current_exe()?);
            if let Some(root) = &global.root {
                open.arg("--root").arg(root);
            }
            match entry.harness {
                Some(_) => open.args(["history", "show", &entry.id]),
                None => open.args(["session", "timeline", &entry.id]),
            };
            open.exec()
        }
    };
    Err(anyhow::Error::new(error).context("cannot open the chosen session"))
}

/// Every session: spex's own (from the session index), then every harness session found, most
/// recently active first.
fn entries(global: &Global, shown: &dyn Fn(&str) -> String) -> anyhow::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    if let Some(store) = global.existing_store()? {
        let index = crate::args::open_index(&store)?;
        let filter =
            spex_index::Filter { sort: spex_index::Sort::Activity, status: None, all: true };
        for row in index.sessions(&filter)? {
            let project = SessionId::new(&row.id)
                .ok()
                .and_then(|id| store.record(&id).ok())
                .and_then(|record| record.worktree().map(str::to_owned))
                .unwrap_or_default();
            entries.push(Entry::new(
                "spex",
                row.id.clone(),
                row.title.clone().unwrap_or_default(),
                project,
                row.display.clone(),
                row.last_activity.clone().or(row.created_at.clone()),
                None,
            ));
        }
    }
    for row in super::history::rows(global, shown)? {
        entries.push(Entry::new(
            row.harness.name(),
            row.id,
            row.title.unwrap_or_default(),
            row.project.unwrap_or_default(),
            row.state,
            row.activity,
            Some((row.harness, row.found)),
        ));
    }
    entries.sort_by(|a, b| b.when.cmp(&a.when));
    Ok(entries)
}

impl Entry {
    fn new(
        kind: &'static str,
        id: String,
        title: String,
        project: String,
        state: String,
        when: Option<String>,
        harness: Option<(Harness, Option<spex_history::Found>)>,
    ) -> Entry {
        let title = render::first_line(&title);
        let haystack = format!("{kind} {id} {title} {project} {state}").to_lowercase();
        Entry { kind, id, title, project, state, when, harness, haystack }
    }
}

/// What Enter or Ctrl-R asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Open,
    Resume,
}

/// The picker's state: the entries, the filter typed, which match is highlighted, and the
/// previews read so far.
struct Picker {
    entries: Vec<Entry>,
    query: String,
    shown: Vec<usize>,
    table: TableState,
    previews: HashMap<usize, String>,
    message: Option<String>,
}

impl Picker {
    fn new(entries: Vec<Entry>, query: String) -> Picker {
        let mut picker = Picker {
            entries,
            query,
            shown: Vec::new(),
            table: TableState::default(),
            previews: HashMap::new(),
            message: None,
        };
        picker.refilter();
        picker
    }

    /// The entries every word of the filter is in (ignoring case), in listing order.
    fn refilter(&mut self) {
        let words: Vec<String> = self.query.split_whitespace().map(str::to_lowercase).collect();
        self.shown = (0..self.entries.len())
            .filter(|&at| words.iter().all(|word| self.entries[at].haystack.contains(word)))
            .collect();
        self.table.select((!self.shown.is_empty()).then_some(0));
    }

    fn selected(&self) -> Option<usize> {
        self.table.selected().and_then(|at| self.shown.get(at)).copied()
    }

    /// Draws and reads keys until a session is chosen (`Some`) or the picker is left (`None`).
    fn run(
        &mut self,
        terminal: &mut ratatui::DefaultTerminal,
        global: &Global,
        shown: &dyn Fn(&str) -> String,
    ) -> anyhow::Result<Option<(Entry, Action)>> {
        loop {
            self.load_preview(global, shown);
            terminal.draw(|frame| self.draw(frame))?;
            let Event::Key(key) = event::read()? else { continue };
            if key.kind != KeyEventKind::Press {
                continue;
            }
            match self.key(key) {
                Some(Step::Leave) => return Ok(None),
                Some(Step::Choose(action)) => {
                    let Some(at) = self.selected() else { continue };
                    if action == Action::Resume && self.entries[at].harness.is_none() {
                        self.message = Some(
                            "Ctrl-R resumes a Claude Code or Codex session; Enter opens this one"
                                .to_owned(),
                        );
                        continue;
                    }
                    return Ok(Some((self.entries.swap_remove(at), action)));
                }
                None => {}
            }
        }
    }

    fn key(&mut self, key: KeyEvent) -> Option<Step> {
        let control = key.modifiers.contains(KeyModifiers::CONTROL);
        let count = self.shown.len();
        let at = self.table.selected().unwrap_or(0);
        self.message = None;
        match key.code {
            KeyCode::Esc => return Some(Step::Leave),
            KeyCode::Char('c' | 'd') if control => return Some(Step::Leave),
            KeyCode::Char('r') if control => return Some(Step::Choose(Action::Resume)),
            KeyCode::Enter => return Some(Step::Choose(Action::Open)),
            KeyCode::Down | KeyCode::Tab => self.select(at + 1, count),
            KeyCode::Char('n' | 'j') if control => self.select(at + 1, count),
            KeyCode::Up | KeyCode::BackTab => self.select(at.saturating_sub(1), count),
            KeyCode::Char('p' | 'k') if control => self.select(at.saturating_sub(1), count),
            KeyCode::PageDown => self.select(at + 10, count),
            KeyCode::PageUp => self.select(at.saturating_sub(10), count),
            KeyCode::Backspace => {
                self.query.pop();
                self.refilter();
            }
            KeyCode::Char('u') if control => {
                self.query.clear();
                self.refilter();
            }
            KeyCode::Char(c) if !control => {
                self.query.push(c);
                self.refilter();
            }
            _ => {}
        }
        None
    }

    fn select(&mut self, at: usize, count: usize) {
        if count > 0 {
            self.table.select(Some(at.min(count - 1)));
        }
    }

    /// Reads the highlighted conversation's last entries once (a damaged one says why).
    fn load_preview(&mut self, global: &Global, shown: &dyn Fn(&str) -> String) {
        let Some(at) = self.selected() else { return };
        if self.previews.contains_key(&at) {
            return;
        }
        let entry = &self.entries[at];
        let text = match &entry.harness {
            Some((_, Some(found))) => super::history::preview(found, PREVIEW_ENTRIES, shown),
            Some((_, None)) => Ok("(no transcript found)".to_owned()),
            None => spex_preview(global, &entry.id),
        };
        let text = text.unwrap_or_else(|error| format!("(cannot read it: {error:#})"));
        self.previews.insert(at, text);
    }
    /// The table's rows: each shown entry's kind, id (a UUID by its prefix), state, when it
    /// was last active and its title.
    fn rows(&self) -> Vec<Row<'static>> {
        let now = jiff::Timestamp::now();
        let zone = crate::when::zone(false);
        self.shown
            .iter()
            .map(|&at| {
                let entry = &self.entries[at];
                let when = entry
                    .when
                    .as_deref()
                    .and_then(crate::when::parse_ts)
                    .map_or_else(|| "-".to_owned(), |then| crate::when::relative(now, then, &zone));
                let id = if uuid::Uuid::try_parse(&entry.id).is_ok() {
                    render::prefix(&entry.id, 8).to_owned()
                } else {
                    render::literal(&entry.id)
                };
                Row::new(vec![
                    entry.kind.to_owned(),
                    id,
                    render::literal(&entry.state),
                    when,
                    entry.title.clone(),
                ])
            })
            .collect()
    }

    /// The preview's title (the selected entry's kind, id and project) and text.
    fn preview(&self) -> (String, String) {
        let Some(at) = self.selected() else { return (" no match ".to_owned(), String::new()) };
        let entry = &self.entries[at];
        let place = if entry.project.is_empty() {
            String::new()
        } else {
            format!(" · {}", render::literal(&entry.project))
        };
        let text = self.previews.get(&at).cloned().unwrap_or_default();
        (format!(" {} {}{place} ", entry.kind, render::literal(&entry.id)), text)
    }

    fn draw(&mut self, frame: &mut ratatui::Frame<'_>) {
        let [input, list, preview, help] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(12),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        let counts = format!("  {}/{}", self.shown.len(), self.entries.len());
        frame.render_widget(
            Paragraph::new(Line::from(format!("pick> {}{counts}", self.query))),
            input,
        );
        let rows = self.rows();
        let table = Table::new(
            rows,
            [
                Constraint::Length(6),
                Constraint::Length(16),
                Constraint::Length(18),
                Constraint::Length(14),
                Constraint::Min(10),
            ],
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
        frame.render_stateful_widget(table, list, &mut self.table);
        let (title, text) = self.preview();
        // The end of the conversation: the last lines that fit under the title.
        let room = usize::from(preview.height.saturating_sub(1));
        let lines: Vec<&str> = text.lines().collect();
        let text = lines[lines.len().saturating_sub(room)..].join("\n");
        frame.render_widget(
            Paragraph::new(text).block(Block::new().borders(Borders::TOP).title(title)),
            preview,
        );
        let hint = self.message.clone().unwrap_or_else(|| {
            "type to filter · ↑↓ move · Enter open · Ctrl-R resume in its harness · Esc quit"
                .to_owned()
        });
        frame.render_widget(
            Paragraph::new(hint).style(Style::new().add_modifier(Modifier::DIM)),
            help,
        );
    }
}

/// What a key asks of the loop.
enum Step {
    Leave,
    Choose(Action),
}

/// The last entries of a spex session's conversation, plain.
fn spex_preview(global: &Global, id: &str) -> anyhow::Result<String> {
    let Some(store) = global.existing_store()? else { return Ok(String::new()) };
    let id = SessionId::new(id)?;
    let events = store.tail(&id, PREVIEW_ENTRIES)?;
    let mut conversation = render::Conversation::new(
        Paint::for_stdout(ColorArg::Never),
        crate::when::zone(false),
        id.as_str(),
        crate::ops::timeline::owed_mids(&store, &id),
    );
    Ok(events.iter().map(|event| conversation.event(event)).collect())
}
