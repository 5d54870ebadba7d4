//! `spex watch`: the session list as a stream (NDJSON here, server-sent events over HTTP).
//!
//! The stream starts with a reset snapshot
//! `{"type":"reset","version":V,"sessions":[...],"history":[...]}`, then increments
//! `{"type":"update","version":W,"session":{...}}` and `{"type":"remove","version":W,"id":"..."}`
//! for spex sessions, `{"type":"update","version":W,"history":{...}}` and
//! `{"type":"remove","version":W,"history":{"harness":"...","id":"..."}}` for history sessions
//! (harness transcripts, redacted), all with strictly increasing versions. Consumer rule:
//! on a reset, replace everything you hold; apply an increment only if its version is newer than
//! the last one applied. A rebuild of the index sends a new reset.
//!
//! On a terminal (without `--json`), the stream is not printed: it is applied by that rule to
//! the session table, which is redrawn in place.
//!
//! Driven by filesystem notifications on the sessions directory and the transcript roots
//! (inotify), with a polling fallback (every `--interval-ms`) that also catches what
//! notifications miss. A history session's state is as of its last change: the stream carries
//! no increment when only time passes (running turning into unfinished).

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use faultfs::RealFs;
use notify::Watcher as _;
use serde_json::{Value, json};
use spex_engine::Store;
use spex_index::{Filter, Index, Sort};

use crate::args::Global;
use crate::exit::Code;
use crate::render::{self, SCHEMA_VERSION};

/// Arguments of `spex watch`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Poll at least this often, besides filesystem notifications.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
}

/// A running watch over one store.
pub(crate) struct Watch {
    store: Arc<Store<RealFs>>,
    index: Index,
    /// Where harness transcripts are found.
    roots: Vec<spex_history::Root>,
    /// Whose identity redaction hides.
    identity: spex_history::Identity,
    version: i64,
    generation: i64,
    interval: Duration,
    // Kept alive for as long as the watch runs; `None` when notifications are unavailable.
    _notifier: Option<notify::RecommendedWatcher>,
    notified: Receiver<()>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("version", &self.version).finish_non_exhaustive()
    }
}

impl Watch {
    /// Starts watching: refreshes the index and returns the reset snapshot.
    pub(crate) fn start(
        store: Arc<Store<RealFs>>,
        interval: Duration,
        roots: Vec<spex_history::Root>,
    ) -> anyhow::Result<(Watch, Value)> {
        let (sender, notified) = channel();
        let notifier = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // Only changes wake the watch: the refresh it runs opens and reads the very files
            // it watches, and waking on those accesses would make an idle watch spin.
            if event.is_ok_and(|event| changes_something(&event.kind)) {
                let _ignored = sender.send(());
            }
        })
        .and_then(|mut watcher| {
            watcher
                .watch(&store.layout().sessions_dir(), notify::RecursiveMode::Recursive)
                .map(|()| watcher)
        })
        .map(|mut watcher| {
            // A transcript root that does not exist (yet) is found by the polling.
            for root in &roots {
                let _absent = watcher.watch(&root.dir, notify::RecursiveMode::Recursive);
            }
            watcher
        });
        let notifier = match notifier {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                eprintln!("spex watch: no filesystem notifications ({error}); polling");
                None
            }
        };
        let index = crate::args::open_index(&store)?;
        let mut watch = Watch {
            store,
            index,
            roots,
            identity: spex_history::Identity::of_this_machine(),
            version: 0,
            generation: 0,
            interval,
            _notifier: notifier,
            notified,
        };
        let reset = watch.reset()?;
        Ok((watch, reset))
    }

    fn reset(&mut self) -> anyhow::Result<Value> {
        let reset = snapshot(&self.store, &mut self.index, &self.roots, &self.identity)?;
        self.version = reset["version"].as_i64().unwrap_or(0);
        self.generation = self.index.generation()?;
        Ok(reset)
    }

    /// The next increments (or a new reset), waiting at most `wait` for something to change;
    /// empty when nothing did.
    pub(crate) fn next(&mut self, wait: Duration) -> anyhow::Result<Vec<Value>> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.notified.recv_timeout(left.min(self.interval)) {
                Ok(()) => while self.notified.try_recv().is_ok() {},
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
            self.index.refresh(&self.store)?;
            self.index.scan_history(&spex_history::discover(&self.roots)?)?;
            if self.index.generation()? != self.generation {
                return Ok(vec![self.reset()?]);
            }
            let changes = self.index.changes_since(self.version)?;
            if let Some(last) = changes.last() {
                self.version = last.version();
                return Ok(changes
                    .into_iter()
                    .map(|change| {
                        let mut value = change.shown(&self.identity).to_json();
                        if let Some(map) = value.as_object_mut() {
                            map.insert("schema".to_owned(), SCHEMA_VERSION.into());
                        }
                        value
                    })
                    .collect());
            }
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }
}

/// The reset snapshot of `store` through `index` (refreshed first, and the transcripts under
/// `roots` scanned): every session, every history session (redacted for `identity`), and the
/// version an increment must be newer than to apply.
pub(crate) fn snapshot(
    store: &Store<RealFs>,
    index: &mut Index,
    roots: &[spex_history::Root],
    identity: &spex_history::Identity,
) -> anyhow::Result<Value> {
    index.refresh(store)?;
    index.scan_history(&spex_history::discover(roots)?)?;
    let version = index.version()?;
    let rows = index.sessions(&Filter { sort: Sort::Activity, status: None, all: true })?;
    let history = index.history()?;
    Ok(json!({
        "schema": SCHEMA_VERSION,
        "type": "reset",
        "version": version,
        "sessions": rows.iter().map(spex_index::Row::to_json).collect::<Vec<_>>(),
        "history": history
            .into_iter()
            .map(|history| history.shown(identity).to_json())
            .collect::<Vec<_>>(),
    }))
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let Some(store) = global.existing_store()? else {
        return Err(anyhow::anyhow!(
            "there is no store at {} yet, so there is nothing to watch (`spex where` says how it was chosen)",
            global.root()?.path.display()
        ));
    };
    let store = Arc::new(store);
    let interval = Duration::from_millis(args.interval_ms.max(10));
    let roots = crate::args::history_roots(global, &[])?;
    let (mut watch, reset) = Watch::start(Arc::clone(&store), interval, roots)?;
    if !global.json && std::io::stdout().is_terminal() {
        return live_table(&store, &mut watch, reset, global);
    }
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(out, "{reset}")?;
    } else {
        writeln!(out, "v{} reset", reset["version"])?;
        for session in reset["sessions"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "{}",
                render(
                    &json!({ "type": "update", "version": session["version"], "session": session })
                )
            )?;
        }
    }
    out.flush()?;
    loop {
        for value in watch.next(Duration::from_secs(3600))? {
            if global.json {
                writeln!(out, "{value}")?;
            } else {
                writeln!(out, "{}", render(&value))?;
            }
        }
        out.flush()?;
    }
}

/// On a terminal: the session table, redrawn in place whenever the stream changes it (and every
/// few seconds, so relative times stay true). The stream is applied by the consumer rule: a reset
/// replaces every row; an increment applies only when newer than the last one applied.
fn live_table(
    store: &Store<RealFs>,
    watch: &mut Watch,
    reset: Value,
    global: &Global,
) -> anyhow::Result<Code> {
    let paint = render::Paint::for_stdout(global.color);
    let zone = crate::when::zone(false);
    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    let mut applied = i64::MIN;
    let mut pending = vec![reset];
    loop {
        for value in pending.drain(..) {
            apply(&mut rows, &mut applied, value);
        }
        let mut sessions: Vec<&Value> =
            rows.values().filter(|row| row["archived"] != Value::Bool(true)).collect();
        sessions.sort_by(|a, b| {
            when(b).cmp(&when(a)).then_with(|| a["id"].as_str().cmp(&b["id"].as_str()))
        });
        let table: Vec<render::SessionRow> = sessions
            .iter()
            .map(|row| {
                let id = row["id"].as_str().unwrap_or("?").to_owned();
                let owed = row["owed"].as_u64().map(|owed| owed as usize);
                let display = row["state"]["display"].as_str().unwrap_or("?").to_owned();
                let text = if display == "corrupt" {
                    row["state"]["note"].as_str()
                } else {
                    row["preview"].as_str().or(row["state"]["note"].as_str())
                };
                render::SessionRow {
                    agent: crate::ops::agent::agent_word(store, &id),
                    id,
                    display,
                    when: when(row).map(str::to_owned),
                    owed,
                    preview: render::first_line(text.unwrap_or("")),
                    archived: false,
                    title: row["title"].as_str().map(str::to_owned),
                }
            })
            .collect();
        let now = jiff::Timestamp::now();
        let mut screen = String::from("\u{1b}[H\u{1b}[2J");
        screen.push_str(&paint.dim(&format!(
            "spex watch · {} · {} session{} · Ctrl-C stops",
            store.layout().root().display(),
            table.len(),
            if table.len() == 1 { "" } else { "s" }
        )));
        screen.push_str("\n\n");
        if table.is_empty() {
            screen.push_str("no sessions yet\n");
        } else {
            let every: Vec<&str> = rows.keys().map(String::as_str).collect();
            screen.push_str(&render::session_table(
                &table,
                &every,
                now,
                &zone,
                paint,
                render::terminal_columns(),
            ));
        }
        crate::render::out!("{screen}")?;
        pending = watch.next(Duration::from_secs(5))?;
    }
}

/// Applies one stream value to the rows held, by the consumer rule.
fn apply(rows: &mut BTreeMap<String, Value>, applied: &mut i64, value: Value) {
    let version = value["version"].as_i64().unwrap_or(0);
    match value["type"].as_str() {
        Some("reset") => {
            rows.clear();
            for session in value["sessions"].as_array().into_iter().flatten() {
                if let Some(id) = session["id"].as_str() {
                    rows.insert(id.to_owned(), session.clone());
                }
            }
            *applied = version;
        }
        Some("update") if version > *applied => {
            if let Some(id) = value["session"]["id"].as_str() {
                rows.insert(id.to_owned(), value["session"].clone());
            }
            *applied = version;
        }
        Some("remove") if version > *applied => {
            if let Some(id) = value["id"].as_str() {
                rows.remove(id);
            }
            *applied = version;
        }
        _ => {}
    }
}

/// A row's last activity, else its creation.
fn when(row: &Value) -> Option<&str> {
    row["lastActivity"].as_str().or(row["createdAt"].as_str())
}

/// Whether a filesystem event is a change (not a read, an open or an access-time update).
fn changes_something(kind: &notify::EventKind) -> bool {
    use notify::event::{MetadataKind, ModifyKind};
    !matches!(
        kind,
        notify::EventKind::Access(_)
            | notify::EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime))
    )
}

/// One increment for a terminal.
fn render(value: &Value) -> String {
    match value["type"].as_str() {
        Some("update") if value.get("session").is_some() => format!(
            "v{} {} {} {}",
            value["version"],
            value["session"]["id"].as_str().unwrap_or("?"),
            value["session"]["state"]["display"].as_str().unwrap_or("?"),
            value["session"]["lastActivity"].as_str().unwrap_or("-"),
        ),
        Some("update") if value.get("history").is_some() => format!(
            "v{} {} {} {} {}",
            value["version"],
            value["history"]["harness"].as_str().unwrap_or("?"),
            value["history"]["id"].as_str().unwrap_or("?"),
            value["history"]["state"].as_str().unwrap_or("?"),
            value["history"]["lastActivity"].as_str().unwrap_or("-"),
        ),
        Some("remove") if value.get("history").is_some() => format!(
            "v{} {} {} removed",
            value["version"],
            value["history"]["harness"].as_str().unwrap_or("?"),
            value["history"]["id"].as_str().unwrap_or("?")
        ),
        Some("remove") => {
            format!("v{} {} removed", value["version"], value["id"].as_str().unwrap_or("?"))
        }
        _ => value.to_string(),
    }
}
