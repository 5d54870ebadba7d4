//! `spex`: the command line of the spex engine, as a library the `spex` binary runs (and the fuzz
//! targets reach the HTTP surface through, with the `fuzzing` feature).
//!
//! `main` only parses, dispatches and maps the outcome to an exit code; each command lives in its
//! own module under `commands/` with an `Args` struct and a `run` function, and shares only the
//! argument types (`args`) and the renderers (`render`). Results go to stdout, reports and
//! diagnostics to stderr; under `--json` an error is a JSON document on stdout too. A closed
//! stdout (`spex ... | head`) ends the command quietly with exit 0.

mod args;
mod commands;
mod exit;
mod files;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
mod ops;
mod render;
mod when;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::exit::Code;

/// spex keeps the conversations of your coding agents safe: send to a session, deliver what it is
/// owed, read it as a conversation, list, search and watch every session, and crash-test the
/// engine under it.
#[derive(Debug, Parser)]
#[command(
    name = "spex",
    version,
    after_help = "Examples:
  spex session new --adapter tmux:work.0      create a session; prints its id
  spex session send 3f2a 'run the tests'      send to it (an id prefix is enough)
  spex session timeline 3f2a                  read the conversation
  spex session ls                             every session, most recently active first
  spex search 'deploy failed'                 find what was said
  spex where                                  which store, and why
  spex verify sweep --budget 2m               crash-test the engine"
)]
struct Cli {
    #[command(flatten)]
    global: args::Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, send to, declare, read, drain, archive, close and list sessions.
    #[command(after_help = "Examples:
  spex session new --id fix-login --adapter tmux:work.0
  spex session send fix 'run the tests again'
  spex session timeline fix
  spex session ls --status review")]
    Session(commands::session::Args),
    /// The execution records of harness runs (each launch and turn of Claude Code or Codex).
    #[command(after_help = "Examples:
  spex runs ls
  spex runs ls --session fix --failed")]
    Runs(commands::runs::Args),
    /// Search what was said to sessions and the notes they declared.
    #[command(after_help = "Examples:
  spex search 'deploy failed'                 every word, anywhere
  spex search デプロイ                          part of a text without spaces (3+ characters)
  spex search fix --status review --since 2h  filtered, newest two hours
  spex --json search fix | jq '.hits[].mid'")]
    Search(commands::search::Args),
    /// The session table, live (a terminal redraws it; a pipe gets the stream of changes).
    #[command(after_help = "Examples:
  spex watch                                  the table, redrawn as sessions change
  spex --json watch | jq -c .                 NDJSON: a reset, then increments")]
    Watch(commands::watch::Args),
    /// Scan the store (or one session) read-only and list every damage with what a repair does.
    #[command(after_help = "Examples:
  spex doctor                                 the whole store
  spex doctor 3f2a                            one session")]
    Doctor(commands::doctor::Args),
    /// Refresh or rebuild the derived session index.
    #[command(after_help = "Examples:
  spex index refresh
  spex index rebuild")]
    Index(commands::index::Args),
    /// Serve the sessions over HTTP on loopback.
    #[command(after_help = "Examples:
  spex serve                                  prints the tokened URL
  spex serve --port 8080")]
    Serve(commands::serve::Args),
    /// Sessions across harnesses: the Claude Code and Codex transcripts on this machine, listed
    /// and shown as conversations, redacted by default.
    History(commands::history::Args),
    /// Other devices' servers, asked by `history ls --fleet`, `search --fleet` and
    /// `history show DEVICE:ID`.
    #[command(after_help = "Examples:
  spex fleet add laptop http://127.0.0.1:7478 --token-file ~/.config/spex/laptop.token
  spex fleet ls
  spex history ls --fleet")]
    Fleet(commands::fleet::Args),
    /// What the agents spent: tokens, turns and cost of every Claude Code and Codex session, per
    /// day, session, project, model or harness.
    #[command(after_help = "Examples:
  spex usage                                  per day, local zone
  spex usage --by model --since 7days
  spex usage --by session --since 2026-12-01
  spex --json usage --by project | jq '.rows[] | {key, tokens, cost}'")]
    Usage(commands::usage::Args),
    /// Pick a session interactively: every spex, Claude Code and Codex session; type to filter,
    /// Enter opens its conversation, Ctrl-R resumes a harness session in its harness.
    #[command(after_help = "Examples:
  spex pick
  spex pick checkout                           start filtered
  spex session timeline \"$(spex pick --print)\"")]
    Pick(commands::pick::Args),
    /// Print the store root and how it was chosen.
    #[command(after_help = "Examples:
  spex where
  SPEX_ROOT=/tmp/s spex where --json")]
    Where(commands::where_::Args),
    /// Print a shell completion script.
    #[command(after_help = "Examples:
  spex completions bash > ~/.local/share/bash-completion/completions/spex
  spex completions zsh > ~/.zfunc/_spex
  spex completions fish > ~/.config/fish/completions/spex.fish")]
    Completions(commands::completions::Args),
    /// Write the man pages (spex.1 and one per command).
    #[command(after_help = "Examples:
  spex man --out /usr/local/share/man/man1
  spex man | man -l -")]
    Man(commands::completions::ManArgs),
    /// The single writer path for lifecycle hooks.
    #[command(hide = true)]
    Internal(commands::internal::Args),
    /// Demonstrate the crash model: litmus tests, and a crash sweep of a small log writer.
    #[command(after_help = "Examples:
  spex demo                                   every litmus test and writer
  spex demo --writer no-sync --seed 7         one broken writer, caught")]
    Demo(commands::demo::Args),
    /// Crash sweeps of the engine, replays of their violations, and the mutant check.
    #[command(after_help = "Examples:
  spex verify sweep --budget 2m               the crash sweep, two minutes
  spex verify sweep --scenario send --matrix  one scenario, every cell
  spex verify replay TOKEN                    one violation, bit for bit")]
    Verify(commands::verify::Args),
}

/// Runs the command line with the process's arguments; the process's exit code.
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return parse_failed(&error),
    };
    let global = &cli.global;
    init_tracing(global);
    if global.quiet {
        render::set_quiet();
    }
    let result = match cli.command {
        Command::Session(args) => commands::session::run(&args, global),
        Command::Runs(args) => commands::runs::run(&args, global),
        Command::Search(args) => commands::search::run(&args, global),
        Command::Watch(args) => commands::watch::run(&args, global),
        Command::Index(args) => commands::index::run(&args, global),
        Command::Doctor(args) => commands::doctor::run(&args, global),
        Command::Serve(args) => commands::serve::run(&args, global),
        Command::History(args) => commands::history::run(&args, global),
        Command::Fleet(args) => commands::fleet::run(&args, global),
        Command::Usage(args) => commands::usage::run(&args, global),
        Command::Pick(args) => commands::pick::run(&args, global),
        Command::Where(args) => commands::where_::run(&args, global),
        Command::Completions(args) => commands::completions::run(&args, &mut Cli::command()),
        Command::Man(args) => commands::completions::man(&args, &Cli::command()),
        Command::Internal(args) => commands::internal::run(&args, global),
        Command::Demo(args) => commands::demo::run(&args, global),
        Command::Verify(args) => commands::verify::run(&args, global),
    };
    render::finish_pager();
    // Damage reads tolerated (a torn fragment with a complete line glued onto it) is reported,
    // whatever the command's outcome.
    for damage in spex_engine::damage::take_noted() {
        let layout = global.root().ok().map(|root| spex_engine::layout::Layout::new(&root.path));
        eprintln!("spex: warning: {damage} (repair: {})", damage.repair(layout.as_ref()));
    }
    match result {
        Ok(code) => code.into(),
        Err(error) if render::is_closed_pipe(&error) => Code::Ok.into(),
        Err(error) => {
            let code = exit::code_for(&error);
            let message = format!("{error:#}{}", exit::hint(&error));
            if global.json {
                // The document may not reach a closed stdout; stderr still says it.
                let _ignored = render::print_json(exit::error_json(code, &message));
            }
            eprintln!("spex: error: {message}");
            code.into()
        }
    }
}

/// A command line clap refused: help and version print as usual; an error exits 2 (usage),
/// as a JSON document on stdout too when `--json` was asked for.
fn parse_failed(error: &clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ignored = error.print();
        return Code::Ok.into();
    }
    let json = std::env::args_os().take_while(|arg| arg != "--").any(|arg| arg == "--json");
    if json {
        let text = error.to_string();
        let message = text.lines().next().unwrap_or("").trim_start_matches("error: ");
        let _ignored = render::print_json(exit::error_json(Code::Usage, message));
    }
    let _ignored = error.print();
    Code::Usage.into()
}

/// Diagnostics on stderr: warnings by default, more with `-v`/`-vv`, errors only with `-q`.
fn init_tracing(global: &args::Global) {
    let level = match (global.quiet, global.verbose) {
        (true, _) => tracing::Level::ERROR,
        (false, 0) => tracing::Level::WARN,
        (false, 1) => tracing::Level::INFO,
        (false, _) => tracing::Level::DEBUG,
    };
    let _ignored = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .without_time()
        .try_init();
}
