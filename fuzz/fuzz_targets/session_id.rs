#![no_main]
//! See `spex_engine::fuzz::session_id`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_engine::fuzz::session_id(data));
