#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| juxta_fuzz::http(data));
