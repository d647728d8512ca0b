#![no_main]

/// Counts allocations so the target can assert its memory bound.
#[global_allocator]
static ALLOC: juxta_fuzz::counting_alloc::CountingAlloc = juxta_fuzz::counting_alloc::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| juxta_fuzz::proto::stream(data));
