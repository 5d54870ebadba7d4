//! One module per command, each with an `Args` struct and a `run` function. Commands share only
//! `crate::args` (argument types) and `crate::render` (output); they never import each other.
//! `adapter`, `harness` and `guard` are not commands: the drain adapters (the harness adapters of
//! Claude Code and Codex among them) and the HTTP guard.

pub(crate) mod adapter;
pub(crate) mod completions;
pub(crate) mod demo;
pub(crate) mod doctor;
pub(crate) mod export;
pub(crate) mod fleet;
pub(crate) mod guard;
pub(crate) mod harness;
pub(crate) mod history;
pub(crate) mod import;
pub(crate) mod index;
pub(crate) mod internal;
pub(crate) mod migrate;
pub(crate) mod pick;
pub(crate) mod runs;
pub(crate) mod search;
pub(crate) mod serve;
pub(crate) mod session;
pub(crate) mod tmux;
pub(crate) mod usage;
pub(crate) mod verify;
pub(crate) mod verify_locks;
pub(crate) mod verify_report;
pub(crate) mod watch;
pub(crate) mod where_;
