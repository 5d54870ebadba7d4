#![no_main]
//! See `spex_engine::fuzz::receipt_index`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spex_engine::fuzz::receipt_index(data));
