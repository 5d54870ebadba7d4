//! The integration tests of this crate, one module per subject, linked into one test binary.

/// The sweeps allocate on every simulated op; mimalloc, as the `spex` binary has.
#[global_allocator]
static ALLOCATOR: spex_alloc::Mimalloc = spex_alloc::Mimalloc;

mod conformance;
mod crash_images;
mod demo_sweep;
mod engine_sweep;
mod generated_sweep;
mod kill_then_power_loss;
mod lock_protocol;
mod mutant_catalogue;
