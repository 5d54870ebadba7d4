//! The integration tests of this crate, one module per subject, linked into one test binary.

mod adapter_tmux;
mod agents_real;
mod cli_demo;
mod common;
mod corpus_cli;
mod fleet_cli;
mod history_cli;
mod index_cli;
mod people_cli;
mod serve_http;
mod session_cli;
mod terminal_tmux;
mod verify_real;
mod web_browser;
