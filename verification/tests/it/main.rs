//! The integration tests of this crate, one module per subject, linked into one test binary.

mod conformance;
mod demo_sweep;
mod engine_sweep;
mod generated_sweep;
mod kill_then_power_loss;
mod lock_protocol;
