//! Verification of the spex engine: crash sweeps, conformance against the model, loom models
//! and real multi-process tests (DESIGN.md section 7).
//!
//! Not built yet beyond `faultfs`'s own litmus tests: this crate holds the workspace's place
//! for the sweeps of the verification issue.
