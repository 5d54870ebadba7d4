#![no_main]
//! See `spex_history::fuzz::codex_transcript`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_history::fuzz::codex_transcript(data));
