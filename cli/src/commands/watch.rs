//! `spex watch`: the session list as a stream (NDJSON here, server-sent events over HTTP).
//!
//! The stream starts with a reset snapshot `{"type":"reset","version":V,"sessions":[...]}`,
//! then increments `{"type":"update","version":W,"session":{...}}` and
//! `{"type":"remove","version":W,"id":"..."}` with strictly increasing versions. Consumer rule:
//! on a reset, replace everything you hold; apply an increment only if its version is newer than
//! the last one applied. A rebuild of the index sends a new reset.
//!
//! Driven by filesystem notifications on the sessions directory (inotify), with a polling
//! fallback (every `--interval-ms`) that also catches what notifications miss.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use faultfs::RealFs;
use notify::Watcher as _;
use serde_json::{Value, json};
use spex_engine::Store;
use spex_index::{Filter, Index, Sort};

use crate::args::Global;
use crate::render::SCHEMA_VERSION;
use crate::exit::Code;

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
        });
        let notifier = match notifier {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                eprintln!("spex watch: no filesystem notifications ({error}); polling");
                None
            }
        };
        let index = Index::open(store.layout().root())?;
        let mut watch = Watch {
            store,
            index,
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
        let reset = snapshot(&self.store, &mut self.index)?;
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
            if self.index.generation()? != self.generation {
                return Ok(vec![self.reset()?]);
            }
            let changes = self.index.changes_since(self.version)?;
            if let Some(last) = changes.last() {
                self.version = last.version();
                return Ok(changes
                    .iter()
                    .map(|change| {
                        let mut value = change.to_json();
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

/// The reset snapshot of `store` through `index` (refreshed first): every session, and the
/// version an increment must be newer than to apply.
pub(crate) fn snapshot(store: &Store<RealFs>, index: &mut Index) -> anyhow::Result<Value> {
    index.refresh(store)?;
    let version = index.version()?;
    let rows = index.sessions(&Filter { sort: Sort::Activity, status: None, all: true })?;
    Ok(json!({
        "schema": SCHEMA_VERSION,
        "type": "reset",
        "version": version,
        "sessions": rows.iter().map(spex_index::Row::to_json).collect::<Vec<_>>(),
    }))
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let store = Arc::new(global.open_store()?);
    let interval = Duration::from_millis(args.interval_ms.max(10));
    let (mut watch, reset) = Watch::start(store, interval)?;
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
        Some("update") => format!(
            "v{} {} {} {}",
            value["version"],
            value["session"]["id"].as_str().unwrap_or("?"),
            value["session"]["state"]["display"].as_str().unwrap_or("?"),
            value["session"]["lastActivity"].as_str().unwrap_or("-"),
        ),
        Some("remove") => {
            format!("v{} {} removed", value["version"], value["id"].as_str().unwrap_or("?"))
        }
        _ => value.to_string(),
    }
}
