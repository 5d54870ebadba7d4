#![no_main]
//! See `spex_history::fuzz::claude_transcript`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_history::fuzz::claude_transcript(data));
