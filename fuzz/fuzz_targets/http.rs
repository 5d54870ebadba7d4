#![no_main]
//! See `spex::fuzz::http`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex::fuzz::http(data));
