//! The integration tests of this crate, one module per subject, linked into one test binary.

mod history;
mod opencode;
mod secrets;
