#![no_main]
//! See `spex_engine::fuzz::record`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_engine::fuzz::record(data));
