//! A counting global allocator for the memory property "a decoder allocates
//! at most [`bound`]`(n)` bytes for `n` bytes of input".
//!
//! It wraps [`std::alloc::System`] and keeps, per thread, the bytes
//! currently allocated and the peak since the last [`reset_peak`], so tests
//! running on other threads do not disturb a measurement. Install it in a
//! binary with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: CountingAlloc = CountingAlloc;
//! ```
//!
//! and wrap the decoder call in [`measure`] (or [`check`]). Shared by the
//! libFuzzer targets (`fuzz/`), the stable corpus replay and
//! `crates/juxta-proto/tests/alloc_bound.rs` (both include this file with
//! `#[path]`). Without the allocator installed every measurement is 0;
//! [`active`] tells.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Heap bytes a decoder may allocate for `input_len` bytes of input:
/// 16 bytes per input byte plus 1 MiB.
pub fn bound(input_len: usize) -> usize {
    input_len.saturating_mul(16).saturating_add(1 << 20)
}

thread_local! {
    // `const` initialisers of a type without `Drop`: on targets with
    // native thread-local storage (Linux, macOS, Windows) these are plain
    // `#[thread_local]` statics, so touching them never allocates (which
    // would recurse into the allocator) and they are never destroyed.
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(n: usize) {
    let _ = CURRENT.try_with(|c| {
        let v = c.get().saturating_add(n as isize);
        c.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v)
            }
        });
    });
}

fn sub(n: usize) {
    let _ = CURRENT.try_with(|c| c.set(c.get().saturating_sub(n as isize)));
}

/// The counting allocator (a wrapper over [`System`]).
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with exactly the arguments it
// received, and every pointer this allocator hands out was returned by
// `System` for that same layout; so the contract the caller upholds for
// our methods (non-zero size, `ptr` allocated here with `layout`,
// `new_size` valid for `layout.align()`) is exactly the contract of the
// `System` call it makes, and what `System` returns satisfies our own
// contract. The bookkeeping around the calls only touches thread-local
// `Cell<isize>`s with saturating arithmetic: it does not allocate (see the
// `thread_local!` above), cannot overflow or panic (`try_with` instead of
// `with`), and never reads or writes the memory being managed.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            // Counted as if old and new blocks coexisted for a moment (a
            // moving realloc does hold both): an upper bound of the peak.
            add(new_size);
            sub(layout.size());
        }
        p
    }
}

/// Bytes currently allocated by this thread (net of what it freed; memory
/// freed here that another thread allocated makes this smaller).
pub fn current() -> isize {
    CURRENT.try_with(Cell::get).unwrap_or(0)
}

/// The highest [`current`] since the last [`reset_peak`].
pub fn peak() -> isize {
    PEAK.try_with(Cell::get).unwrap_or(0)
}

/// Starts a new peak measurement at [`current`].
pub fn reset_peak() {
    let c = current();
    let _ = PEAK.try_with(|p| p.set(c));
}

/// Runs `f` and returns its result and the peak number of bytes allocated
/// above the level at the start, including what the result still holds.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = current();
    reset_peak();
    let r = f();
    (r, peak().saturating_sub(base).max(0) as usize)
}

/// Whether the counting allocator is this binary's global allocator.
pub fn active() -> bool {
    let (_, n) = measure(|| std::hint::black_box(Vec::<u8>::with_capacity(64)));
    n >= 64
}

/// Runs `f` and panics if, while it ran, this thread's allocations rose
/// more than [`bound`]`(input_len)` above `base` (an earlier [`current`]):
/// for a decoder called repeatedly on one input, so that what it keeps
/// between calls counts too.
pub fn check_since<R>(base: isize, what: &str, input_len: usize, f: impl FnOnce() -> R) -> R {
    reset_peak();
    let r = f();
    let used = peak().saturating_sub(base).max(0) as usize;
    assert!(
        used <= bound(input_len),
        "{what}: allocated {used} bytes for {input_len} input bytes (bound {})",
        bound(input_len)
    );
    r
}

/// [`measure`], then panics if the peak passes [`bound`]`(input_len)`.
pub fn check<R>(what: &str, input_len: usize, f: impl FnOnce() -> R) -> R {
    let (r, used) = measure(f);
    assert!(
        used <= bound(input_len),
        "{what}: allocated {used} bytes for {input_len} input bytes (bound {})",
        bound(input_len)
    );
    r
}
