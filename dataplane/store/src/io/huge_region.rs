//! Memory for the large I/O buffers, on transparent huge pages.
//!
//! An O_DIRECT read into 4 KiB pages hands the device one segment per page: a 256 KiB piece is
//! 64 of them, and this VM's virtio disk read 1 MiB uniform hits at 1.1-1.25 GB/s from such
//! buffers against 1.8-1.9 GB/s from buffers on 2 MiB pages, in the same rounds
//! (bench/BENCHMARKS.md, session 30). But huge pages under the whole heap charged the cgroup
//! 2 MiB for each region the allocator touched at all: twice the process's memory at a 64 MiB
//! limit (`edgecache_host::huge_pages`). So only the I/O buffers get them: each budget maps one
//! region of its own size (rounded up to 2 MiB), asks for huge pages there (`MADV_HUGEPAGE`),
//! and places its buffers of 64 KiB and more in it, first fit in 64 KiB units. What the region
//! holds resident never exceeds its size, which the memory plan already counts as the worker's
//! I/O buffers; a buffer that finds no room (the region fragmented) comes from the heap.

use std::ptr::NonNull;
use std::sync::Mutex;

/// The unit of placement: every budget class from 64 KiB up is a multiple of it.
pub const UNIT: usize = 64 << 10;
/// A transparent huge page on x86-64 and arm64 (4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// One mapping, huge-page aligned, and which of its 64 KiB units are taken.
pub struct HugeRegion {
    /// The whole mapping (`map_len` bytes), for `munmap`.
    map: NonNull<u8>,
    map_len: usize,
    /// The aligned start of the usable bytes (`units * UNIT` of them).
    start: NonNull<u8>,
    units: usize,
    /// One bit a unit, set when taken.
    taken: Mutex<Vec<u64>>,
}

// SAFETY: the region only hands out disjoint ranges (under its lock) and its own pointers are
// never dereferenced by it; the mapping lives until the region is dropped.
#[allow(unsafe_code)]
unsafe impl Send for HugeRegion {}
// SAFETY: as above; all mutable state is behind the mutex.
#[allow(unsafe_code)]
unsafe impl Sync for HugeRegion {}

impl HugeRegion {
    /// A region of at least `bytes` (rounded up to [`HUGE_PAGE`]), or `None` when the mapping
    /// fails. Nothing is resident until a buffer is written.
    #[allow(unsafe_code)]
    pub fn new(bytes: usize) -> Option<HugeRegion> {
        let len = bytes.max(1).checked_next_multiple_of(HUGE_PAGE)?;
        let map_len = len.checked_add(HUGE_PAGE)?;
        // SAFETY: an anonymous private mapping at an address the kernel picks; no file, no
        // existing memory is touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let map = NonNull::new(raw.cast::<u8>())?;
        let skip = (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize;
        // SAFETY: `skip < HUGE_PAGE`, so `start + len` stays inside the `map_len` bytes mapped.
        let start = unsafe { map.add(skip) };
        // SAFETY: advice on a range of our own mapping. It fails only where the kernel has no
        // transparent huge pages; the region then simply has base pages.
        let _ = unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        let units = len / UNIT;
        Some(HugeRegion {
            map,
            map_len,
            start,
            units,
            taken: Mutex::new(vec![0; units.div_ceil(64)]),
        })
    }

    /// Usable bytes.
    pub fn len(&self) -> usize {
        self.units * UNIT
    }

    /// Never true: a region has at least one huge page.
    pub fn is_empty(&self) -> bool {
        self.units == 0
    }

    /// Whether `ptr` lies in this region.
    pub fn contains(&self, ptr: *const u8) -> bool {
        let p = ptr as usize;
        let s = self.start.as_ptr() as usize;
        p >= s && p < s + self.len()
    }

    /// `cap` bytes (a multiple of [`UNIT`]) at the lowest free place, or `None` when no run of
    /// free units is long enough. The bytes hold whatever an earlier buffer left there.
    pub fn take(&self, cap: usize) -> Option<NonNull<u8>> {
        if cap == 0 || !cap.is_multiple_of(UNIT) {
            return None;
        }
        let need = cap / UNIT;
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let first = first_fit(&taken, self.units, need)?;
        for u in first..first + need {
            taken[u / 64] |= 1 << (u % 64);
        }
        // SAFETY: `first + need <= units`, so the offset stays inside the region.
        #[allow(unsafe_code)]
        let p = unsafe { self.start.add(first * UNIT) };
        Some(p)
    }

    /// Give back `cap` bytes at `ptr`, as [`HugeRegion::take`] handed them out.
    pub fn give_back(&self, ptr: NonNull<u8>, cap: usize) {
        let first = (ptr.as_ptr() as usize - self.start.as_ptr() as usize) / UNIT;
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        for u in first..(first + cap / UNIT).min(self.units) {
            taken[u / 64] &= !(1 << (u % 64));
        }
    }
}

/// The first unit of the lowest run of `need` free units among `units` (pure).
fn first_fit(taken: &[u64], units: usize, need: usize) -> Option<usize> {
    let mut run = 0;
    for u in 0..units {
        if taken[u / 64] & (1 << (u % 64)) == 0 {
            run += 1;
            if run == need {
                return Some(u + 1 - need);
            }
        } else {
            run = 0;
        }
    }
    None
}

impl Drop for HugeRegion {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in `new`; every buffer placed in it holds an `Arc` of
        // this region, so none is left when it drops.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_take_the_lowest_free_run_and_give_it_back() {
        let r = HugeRegion::new(3 << 20).unwrap();
        assert_eq!(r.len(), 4 << 20, "rounded up to whole huge pages");
        assert_eq!(
            r.start.as_ptr() as usize % HUGE_PAGE,
            0,
            "huge-page aligned"
        );
        let a = r.take(1 << 20).unwrap();
        let b = r.take(UNIT).unwrap();
        assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 1 << 20);
        assert!(r.contains(a.as_ptr()) && r.contains(b.as_ptr()));
        r.give_back(a, 1 << 20);
        // The hole left by `a` takes a smaller buffer first.
        assert_eq!(r.take(256 << 10).unwrap(), a);
        assert!(r.take(UNIT + 4096).is_none(), "not a multiple of the unit");
        assert!(r.take(4 << 20).is_none(), "no run that long is free");
        // Fill the rest: the 768 KiB left of the hole, then what follows `b`.
        assert!(r.take(3 << 20).is_none(), "no run spans `b`");
        assert_eq!(
            r.take(768 << 10).unwrap().as_ptr() as usize,
            a.as_ptr() as usize + (256 << 10)
        );
        assert!(r.take((4 << 20) - (1 << 20) - UNIT).is_some());
        assert!(r.take(UNIT).is_none(), "full");
        assert!(!r.contains(std::ptr::null()));
    }

    #[test]
    fn first_fit_finds_runs_across_words() {
        let mut taken = vec![0u64; 2];
        taken[0] = !0 >> 2; // units 0..62 taken, 62 and 63 free
        assert_eq!(first_fit(&taken, 128, 2), Some(62));
        assert_eq!(first_fit(&taken, 128, 3), Some(62));
        assert_eq!(first_fit(&taken, 64, 3), None);
    }
}
