//! Verification of the spex engine: crash sweeps, conformance against the model, loom models
//! and real multi-process tests (DESIGN.md section 7).
//!
//! So far: the seed helper every randomized run uses, and [`demo`], a complete crash sweep of a
//! small log writer that demonstrates the method on `faultfs::SimFs`. The engine's sweeps are
//! the verification issue's.

pub mod conformance;
pub mod demo;
pub mod lock_protocol;
pub mod realproc;
pub mod seed;
pub mod sweep;
