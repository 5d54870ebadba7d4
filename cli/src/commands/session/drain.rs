//! `spex session drain`: a session's owed messages handed to its adapter, once or watched.

use std::io::IsTerminal as _;
use std::time::Duration;

use faultfs::RealFs;
use serde_json::json;
use spex_engine::{DrainReport, Error, SessionId, Store};

use super::timeline::POLL_INTERVAL;
use crate::args::Global;
use crate::commands::adapter::Spec;
use crate::exit::{BadInput, Code};
use crate::render::{self, outln, print_json};

/// The first and the longest wait of `drain --watch` before it tries a stopped drain again.
pub(super) const RETRY_BACKOFF_MIN: Duration = Duration::from_secs(1);

pub(super) const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(60);

#[derive(Debug, clap::Args)]
pub(super) struct DrainArgs {
    /// The session (its id or a unique prefix).
    pub(super) id: String,
    /// The adapter (default: the session's own).
    #[arg(long, value_name = "SPEC")]
    pub(super) adapter: Option<String>,
    /// Keep draining as messages arrive, until interrupted.
    #[arg(long)]
    pub(super) watch: bool,
}

pub(super) fn drain(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &DrainArgs,
    global: &Global,
) -> anyhow::Result<Code> {
    let spec = match &args.adapter {
        Some(spec) => spec.clone(),
        None => store
            .adapter(id, &store.record(id)?)?
            .ok_or_else(|| BadInput(format!("session {id} has no adapter; pass --adapter SPEC")))?,
    };
    let spec = Spec::parse(&spec)?;
    // The stdout adapter's messages are the results on stdout; the report then goes to stderr.
    let report_to_stderr = spec == Spec::Stdout;
    let mut adapter = spec.adapter(store, id)?;
    if !args.watch {
        let report = store.drain(id, adapter.as_mut())?;
        // `drain --adapter stdout | head -2`: the reader had what it wanted; the rest is owed.
        if report_to_stderr
            && let Some(spex_engine::DrainStop::AdapterFailed { error, .. }) = &report.stopped
            && error == crate::commands::adapter::CLOSED_PIPE
        {
            if !global.quiet {
                eprintln!(
                    "spex: the reader closed the pipe after {} messages; {} left owed to {id}",
                    report.delivered.len(),
                    report.remaining
                );
            }
            return Ok(Code::Ok);
        }
        print_drain(id, &report, global, report_to_stderr)?;
        return Ok(if report.stopped.is_some() { Code::Failed } else { Code::Ok });
    }
    watch(store, id, adapter.as_mut(), global, report_to_stderr)
}

/// Drains session `id` as messages arrive, until it is closed (or Ctrl-C). After a drain that
/// stopped, the next try waits longer each time (a refusing adapter, a harness whose model
/// keeps failing: every try of a harness is a whole agent run).
fn watch(
    store: &Store<RealFs>,
    id: &SessionId,
    adapter: &mut dyn spex_engine::Adapter,
    global: &Global,
    report_to_stderr: bool,
) -> anyhow::Result<Code> {
    if std::io::stderr().is_terminal() && !global.quiet {
        eprintln!("spex: draining {id} as messages arrive (Ctrl-C stops)");
    }
    let mut last_stop = None;
    let mut backoff = Duration::ZERO;
    loop {
        match store.queue(id) {
            Ok(queue) if queue.is_empty() => backoff = Duration::ZERO,
            Ok(_) => {
                std::thread::sleep(backoff);
                let report = store.drain(id, adapter)?;
                backoff = match (&report.stopped, report.delivered.is_empty()) {
                    (Some(_), true) => (backoff * 2).clamp(RETRY_BACKOFF_MIN, RETRY_BACKOFF_MAX),
                    _ => Duration::ZERO,
                };
                if !report.delivered.is_empty()
                    || !report.consumed.is_empty()
                    || !report.dropped.is_empty()
                    || (report.stopped.is_some() && report.stopped != last_stop)
                {
                    print_drain(id, &report, global, report_to_stderr)?;
                }
                last_stop = report.stopped;
            }
            Err(Error::NoSuchSession { .. }) => {
                if !global.quiet {
                    eprintln!("spex: session {id} was closed");
                }
                return Ok(Code::Ok);
            }
            Err(error) => return Err(error.into()),
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

pub(super) fn print_drain(
    id: &SessionId,
    report: &DrainReport,
    global: &Global,
    to_stderr: bool,
) -> anyhow::Result<()> {
    let mut lines = Vec::new();
    if global.json {
        let mut document = json!({
            "session": id.as_str(),
            "delivered": report.delivered,
            "consumed": report.consumed,
            "dropped": report.dropped,
            "stopped": report.stopped.as_ref().map(ToString::to_string),
            "remaining": report.remaining,
        });
        if !to_stderr {
            return print_json(document);
        }
        if let Some(map) = document.as_object_mut() {
            map.insert("schema".to_owned(), render::SCHEMA_VERSION.into());
        }
        lines.push(document.to_string());
    } else {
        lines.extend(report.delivered.iter().map(|mid| format!("delivered {mid}")));
        lines.extend(report.consumed.iter().map(|mid| format!("consumed {mid} (already settled)")));
        lines.extend(report.dropped.iter().map(|mid| format!("dropped {mid} (sender closed)")));
        lines.push(format!("{} owed to {id}", report.remaining));
    }
    if to_stderr {
        if !global.quiet {
            for line in &lines {
                eprintln!("{line}");
            }
        }
    } else {
        for line in &lines {
            outln!("{line}")?;
        }
    }
    if let Some(stop) = &report.stopped {
        eprintln!("spex: drain of {id} stopped: {stop}");
    }
    Ok(())
}
