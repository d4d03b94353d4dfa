//! A counting global allocator for the suites that measure memory independently of the store's
//! own accounting: the live bytes of the allocations its filter selects, and their peak. A
//! suite installs it with `#[global_allocator] static A: Counting = Counting(filter);`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// Counts the allocations its function selects.
pub struct Counting(pub fn(&Layout) -> bool);

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Bytes of the counted allocations alive now.
pub fn live() -> usize {
    LIVE.load(SeqCst)
}

/// The most bytes alive at once since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(SeqCst)
}

/// Start a new peak from what is alive now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(SeqCst), SeqCst);
}

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, SeqCst) + by;
    PEAK.fetch_max(now, SeqCst);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are plain atomics.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if (self.0)(&l) {
            grew(l.size());
        }
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if (self.0)(&l) {
            grew(l.size());
        }
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if (self.0)(&l) {
            LIVE.fetch_sub(l.size(), SeqCst);
        }
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if (self.0)(&l) {
            // Both blocks are alive while the old one is copied.
            grew(new);
            LIVE.fetch_sub(l.size(), SeqCst);
        }
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.realloc(p, l, new) }
    }
}
