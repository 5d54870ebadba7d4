//! Shared helpers of the CLI's integration tests.

use std::process::{Command, Output};

/// Runs the real `spex` binary with `args`, without an inherited seed.
pub(crate) fn spex(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spex"))
        .args(args)
        .env_remove("SPEX_SEED")
        .output()
        .expect("the spex binary runs")
}
