//! The integration tests of this crate, one module per subject, linked into one test binary.

mod common;
mod containment;
mod containment_sim;
mod interop;
mod lock_exclusion;
mod lock_recovery;
mod multiprocess;
mod readme_counts;
mod receipt_index;
mod store_faults;
mod store_transitions;
mod timeline_format;
