//! The integration tests of this crate, one module per subject, linked into one test binary.

mod kill_fs;
mod power_loss_digest;
mod real_fs;
mod sim_litmus;
mod sim_restart;
