//! A 4096-aligned buffer for O_DIRECT I/O, on the heap or in a huge-page region.
//!
//! `Vec<u8>` cannot be used with O_DIRECT: its address is only 8- or 16-aligned and the kernel
//! answers EINVAL. [`AlignedBuf`] allocates with `Layout::from_size_align(cap, 4096)` and is
//! zeroed, or is placed in a budget's [`HugeRegion`] (whose bytes are always initialised), so
//! every byte of its capacity can be handed out as a slice.
//! It implements tokio-uring's owned-buffer traits (in `io::uring`) and `AsRef<[u8]>`, so a
//! filled buffer becomes a [`bytes::Bytes`] without a copy through `Bytes::from_owner`.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

use super::budget;
use super::huge_region::HugeRegion;

pub use crate::align::{ALIGN, align_up};

/// An owned, 4096-aligned buffer. `len` bytes are "filled"; the capacity is a multiple of 4096.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
    /// The budget this buffer is charged to (see [`super::budget`]): dropping the buffer gives
    /// it back there instead of freeing it. `None` for unbudgeted buffers.
    home: Option<Arc<budget::Shared>>,
    /// The huge-page region holding the bytes ([`super::huge_region`]), or `None` for the heap.
    region: Option<Arc<HugeRegion>>,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>); nothing is shared.
#[allow(unsafe_code)]
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out `&[u8]`, like Vec<u8>.
#[allow(unsafe_code)]
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of at least `cap` bytes (rounded up to 4096, at least 4096), length 0.
    #[allow(unsafe_code)]
    pub fn new(cap: usize) -> AlignedBuf {
        let cap = align_up(cap.max(1) as u64) as usize;
        let Ok(layout) = Layout::from_size_align(cap, ALIGN) else {
            // Only possible for sizes near isize::MAX, which no caller asks for.
            alloc::handle_alloc_error(Layout::new::<u8>());
        };
        // SAFETY: `layout` has a non-zero size (cap >= 4096).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout);
        };
        AlignedBuf {
            ptr,
            cap,
            len: 0,
            home: None,
            region: None,
        }
    }

    /// A buffer of `cap` bytes placed in `region`, or `None` when `cap` is not a multiple of its
    /// unit or no free run is long enough. Its bytes are initialised (zero from the mapping, or
    /// what an earlier buffer left there, as for a buffer reused from a budget's pool), not
    /// zeroed: readers only ever expose what the kernel filled.
    pub(crate) fn in_region(region: &Arc<HugeRegion>, cap: usize) -> Option<AlignedBuf> {
        let ptr = region.take(cap)?;
        Some(AlignedBuf {
            ptr,
            cap,
            len: 0,
            home: None,
            region: Some(Arc::clone(region)),
        })
    }

    /// Whether the bytes are in a huge-page region rather than on the heap.
    pub fn in_huge_region(&self) -> bool {
        self.region.is_some()
    }

    pub(crate) fn with_home(mut self, home: Arc<budget::Shared>) -> AlignedBuf {
        self.home = Some(home);
        self
    }

    /// Capacity in bytes (a multiple of 4096).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Filled length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Set the filled length (clamped to the capacity). Every byte is initialised, so this is safe.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.cap);
    }

    /// The filled bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.full()[..self.len]
    }

    /// The whole capacity, filled or not (all of it is initialised).
    #[allow(unsafe_code)]
    pub fn full(&self) -> &[u8] {
        // SAFETY: ptr points to `cap` initialised bytes owned by self (zeroed at allocation on
        // the heap; in a huge-page region, zero from the mapping or written since).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }

    /// The whole capacity, mutable.
    #[allow(unsafe_code)]
    pub fn full_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `full`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    /// Append bytes at the filled end; returns how many fit.
    pub fn extend_from(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.cap - self.len);
        let start = self.len;
        self.full_mut()[start..start + n].copy_from_slice(&data[..n]);
        self.len += n;
        n
    }

    /// Zero the bytes past the filled length and extend it to the next multiple of 4096.
    pub fn pad_to_alignment(&mut self) {
        let end = (align_up(self.len as u64) as usize).min(self.cap);
        let start = self.len;
        self.full_mut()[start..end].fill(0);
        self.len = end;
    }

    /// Empty the buffer (length 0); the bytes are kept.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            // Hand the allocation to the budget's pool; `cap = 0` marks this value as empty.
            let raw = AlignedBuf {
                ptr: self.ptr,
                cap: self.cap,
                len: 0,
                home: None,
                region: self.region.take(),
            };
            self.cap = 0;
            home.give_back(raw);
            return;
        }
        if self.cap == 0 {
            return;
        }
        if let Some(region) = self.region.take() {
            region.give_back(self.ptr, self.cap);
            return;
        }
        if let Ok(layout) = Layout::from_size_align(self.cap, ALIGN) {
            // SAFETY: allocated in `new` with exactly this layout and not freed before.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("cap", &self.cap)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::new(10);
        assert_eq!(b.capacity(), 4096);
        assert_eq!(b.ptr() as usize % ALIGN, 0);
        assert!(b.full().iter().all(|&x| x == 0));
        assert_eq!(b.extend_from(b"hello"), 5);
        b.pad_to_alignment();
        assert_eq!(b.len(), 4096);
        assert_eq!(&b.as_slice()[..5], b"hello");
        let bytes = bytes::Bytes::from_owner(b);
        assert_eq!(bytes.len(), 4096);
    }
}
