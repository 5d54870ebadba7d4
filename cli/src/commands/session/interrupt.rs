//! `spex session interrupt`: the turn a harness session is running, stopped.

use faultfs::RealFs;
use serde_json::json;
use spex_engine::{SessionId, Store};

use crate::args::Global;
use crate::exit::Code;
use crate::ops::agent::Harness;
use crate::render::{outln, print_json};

/// Stops the turn session `id`'s harness is running: marks its run as stopped by a person,
/// then sends SIGINT to the run's process group.
pub(super) fn interrupt(
    store: &Store<RealFs>,
    id: &SessionId,
    global: &Global,
) -> anyhow::Result<Code> {
    let adapter = store.adapter(id, &store.record(id)?)?;
    if let Some((_, Some(pane))) = adapter.as_deref().and_then(Harness::from_spec) {
        crate::commands::harness::interrupt_pane(&pane).map_err(|error| anyhow::anyhow!(error))?;
        if global.json {
            print_json(json!({ "session": id.as_str(), "interrupted": pane }))?;
        } else {
            outln!("pressed Escape in pane {pane} of {id}")?;
        }
        return Ok(Code::Ok);
    }
    let Some(run) = crate::commands::harness::running(store, id)? else {
        if global.json {
            print_json(json!({ "session": id.as_str(), "interrupted": null }))?;
        } else if !global.quiet {
            eprintln!("spex: no turn of {id} is running; nothing to interrupt");
        }
        return Ok(Code::Ok);
    };
    let (ts, at_ms) = store.run_time();
    store.append_run(
        id,
        &spex_engine::runs::RunLine::Hook {
            ts,
            at_ms,
            run: Some(run.run.clone()),
            harness: run.harness.clone(),
            event: crate::commands::harness::INTERRUPT.to_owned(),
            native_id: None,
        },
    )?;
    let sent = run.pid.is_some_and(|(pid, _)| {
        crate::commands::harness::signal_group(pid, rustix::process::Signal::INT)
    });
    if !sent {
        return Err(anyhow::anyhow!("run {} of {id} has no process to interrupt", run.run));
    }
    if global.json {
        print_json(json!({ "session": id.as_str(), "interrupted": run.run }))?;
    } else {
        outln!("interrupted run {} of {id}", run.run)?;
    }
    Ok(Code::Ok)
}
