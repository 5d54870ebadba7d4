#![no_main]
//! See `spex_engine::fuzz::timeline_line`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_engine::fuzz::timeline_line(data));
