//! Benchmarks of spex (see `benches/`).
