#![no_main]
//! See `spex_engine::fuzz::queue`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_engine::fuzz::queue(data));
