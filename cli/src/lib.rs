//! `spex`: the command line of the spex engine, as a library the `spex` binary runs (and the fuzz
//! targets reach the HTTP surface through, with the `fuzzing` feature).
//!
//! `main` only parses, dispatches, prints and maps the exit code; each command lives in its own
//! module under `commands/` with an `Args` struct and a `run` function. Results go to stdout,
//! diagnostics to stderr.

mod commands;
mod exit;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;

use clap::{Parser, Subcommand};

/// spex: a crash-consistency engine for agent sessions, and the harness that proves it.
#[derive(Debug, Parser)]
#[command(name = "spex", version, about)]
struct Cli {
    #[command(flatten)]
    global: commands::Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, send to, declare, read, drain, archive, close and list sessions.
    Session(commands::session::Args),
    /// Search what was said to sessions and the notes they declared.
    Search(commands::search::Args),
    /// Stream the session list: a reset snapshot, then versioned increments.
    Watch(commands::watch::Args),
    /// Scan the store (or one session) read-only and list every damage with what a repair does.
    Doctor(commands::doctor::Args),
    /// Refresh or rebuild the derived session index.
    Index(commands::index::Args),
    /// Serve the sessions over HTTP on loopback.
    Serve(commands::serve::Args),
    /// The single writer path for lifecycle hooks.
    Internal(commands::internal::Args),
    /// Demonstrate the crash model: litmus tests, and a crash sweep of a small log writer.
    Demo(commands::demo::Args),
    /// Crash sweeps of the engine, replays of their violations, and the mutant check.
    Verify(commands::verify::Args),
}

/// Runs the command line with the process's arguments; the process's exit code.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let global = &cli.global;
    let result = match cli.command {
        Command::Session(args) => commands::session::run(&args, global),
        Command::Search(args) => commands::search::run(&args, global),
        Command::Watch(args) => commands::watch::run(&args, global),
        Command::Index(args) => commands::index::run(&args, global),
        Command::Doctor(args) => commands::doctor::run(&args, global),
        Command::Serve(args) => commands::serve::run(&args, global),
        Command::Internal(args) => commands::internal::run(&args, global),
        Command::Demo(args) => commands::demo::run(&args),
        Command::Verify(args) => commands::verify::run(&args, global),
    };
    // Damage reads tolerated (a torn fragment with a complete line glued onto it) is reported,
    // whatever the command's outcome.
    for damage in spex_engine::damage::take_noted() {
        eprintln!("spex: warning: {damage} (repair: {})", damage.repair());
    }
    match result {
        Ok(code) => code.into(),
        Err(error) => {
            eprintln!("spex: error: {error:#}");
            exit::code_for(&error).into()
        }
    }
}
