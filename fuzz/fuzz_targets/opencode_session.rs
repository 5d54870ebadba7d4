#![no_main]
//! See `spex_history::fuzz::opencode_session`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_history::fuzz::opencode_session(data));
