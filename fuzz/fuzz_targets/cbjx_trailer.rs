#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| juxta_fuzz::cbjx_trailer(data));
