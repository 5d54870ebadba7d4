//! Which agent a session runs and how far it got: the harness an adapter spec names, and the
//! progress read from the session's run log (never a guess: `spex_engine::runs::progress`).

use faultfs::{Fs as _, RealFs};
use spex_engine::{SessionId, Store};

/// A harness spex can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Harness {
    /// Claude Code.
    Claude,
    /// Codex.
    Codex,
}

impl Harness {
    /// The harness's name (the record's `harness`, the adapter spec).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Harness::Claude => "claude",
            Harness::Codex => "codex",
        }
    }

    /// The harness an adapter spec names, if it names one: `claude`, `codex` (headless), or
    /// `claude:tmux:PANE`, `codex:tmux:PANE` (its terminal UI in a tmux pane), with the pane.
    pub(crate) fn from_spec(spec: &str) -> Option<(Harness, Option<String>)> {
        let (name, pane) = match spec.split_once(":tmux:") {
            Some((name, pane)) if !pane.is_empty() && !pane.contains(char::is_whitespace) => {
                (name, Some(pane.to_owned()))
            }
            Some(_) => return None,
            None => (spec, None),
        };
        let harness = match name {
            "claude" => Harness::Claude,
            "codex" => Harness::Codex,
            _ => return None,
        };
        Some((harness, pane))
    }
}

/// Session `id`'s progress from its runs (see `spex_engine::runs::progress`), when it has a run
/// log or a harness behind it (`harness`); `None` for a session no harness ever ran for.
pub(crate) fn agent_progress(
    store: &Store<RealFs>,
    id: &SessionId,
    triple: &spex_engine::Triple,
    harness: bool,
) -> anyhow::Result<Option<spex_engine::runs::Progress>> {
    let log = spex_engine::runs::run_log(store.layout(), id);
    if !harness && !RealFs::new().exists(&log)? {
        return Ok(None);
    }
    // A damaged run log is a missing signal, never a failure of the command reading it.
    Ok(Some(match store.runs(id) {
        Ok((runs, _)) => spex_engine::runs::progress(&runs, triple),
        // `spex runs ls` says why.
        Err(_) => spex_engine::runs::Progress::Unknown("run log unreadable".to_owned()),
    }))
}

/// The progress word of session `id` for a table (`session ls`, the live `watch` table): only
/// for a session with a run log; `None` for any other, or when its record cannot be read.
pub(crate) fn agent_word(store: &Store<RealFs>, id: &str) -> Option<String> {
    let id = SessionId::new(id).ok()?;
    // One stat for a session no harness ever ran for (most of a listing): its record is not
    // read again.
    let log = spex_engine::runs::run_log(store.layout(), &id);
    if !RealFs::new().exists(&log).ok()? {
        return None;
    }
    let triple = store.record(&id).ok()?.public_triple();
    agent_progress(store, &id, &triple, true).ok()?.map(|progress| progress.to_string())
}
