//! A hard bound on I/O buffer memory, with a pool that recycles the buffers.
//!
//! An [`IoBudget`] owns `capacity` bytes of buffer memory. Every aligned buffer the store uses
//! for a disk read or write on a worker comes from it: [`IoBudget::alloc`] waits (in turn) until
//! the bytes are free, [`IoBudget::try_alloc`] does not wait (read-ahead
//! uses it, so a read-ahead never delays anyone). The buffer carries its charge: it goes back
//! when the [`AlignedBuf`] is dropped, wherever that happens (in hyper after the bytes were
//! written to the socket, through `Bytes::from_owner`; in the kernel after a cancelled
//! io_uring operation completes; on an I/O pool thread). So N concurrent streams share a fixed
//! budget and wait for it instead of allocating, and the bytes of live buffers (in use or
//! pooled) never exceed `capacity`. Waiters queue in order (tokio `Notify`, FIFO): each returned
//! buffer wakes one, which reuses it, or frees pooled buffers of other sizes to make room.
//!
//! Recycling: a returned buffer is kept in a per-size-class free list (its charge stays taken)
//! and handed out again without a new allocation, page faults or zeroing: a 1 MiB
//! `alloc_zeroed` with 4096 alignment is `posix_memalign` (an `mmap` above glibc's threshold)
//! plus a 1 MiB `memset` that faults in 256 pages, then a `munmap` at free; that was about half
//! the CPU of a 1 MiB hit (see the store module docs). Reused buffers hold stale bytes, never
//! uninitialised ones (each was zeroed once at allocation); readers only expose what the
//! kernel filled. Pooled buffers of another size are freed when a request needs the room, so
//! pooled memory never starves a request.
//!
//! Size classes: powers of two from 4 KiB to 64 KiB, then multiples of 64 KiB up to
//! [`MAX_POOLED`]. A request is charged its class size; one larger than the whole budget is
//! charged the whole budget (it waits until everything else is returned), so nothing can wait
//! forever.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore};

use super::AlignedBuf;

/// Largest buffer kept in the free lists (larger ones are freed when returned).
pub const MAX_POOLED: usize = 4 << 20;
/// Smallest budget accepted (smaller values are raised): one of every buffer a read needs.
pub const MIN_BUDGET: u64 = 1 << 20;
/// Largest budget (the semaphore counts bytes in `u32` requests).
pub const MAX_BUDGET: u64 = 1 << 31;

const SMALL_CLASSES: usize = 5; // 4, 8, 16, 32, 64 KiB
const BIG_STEP: usize = 64 * 1024;
const CLASSES: usize = SMALL_CLASSES + MAX_POOLED / BIG_STEP - 1;

/// The capacity a request of `len` bytes gets: its size class.
pub fn class_cap(len: usize) -> usize {
    let len = len.max(1);
    if len <= BIG_STEP {
        len.next_power_of_two().max(4096)
    } else {
        len.div_ceil(BIG_STEP) * BIG_STEP
    }
}

/// Free-list index of a class capacity, `None` when it is not pooled.
fn class_index(cap: usize) -> Option<usize> {
    if cap <= BIG_STEP {
        Some((cap / 4096).trailing_zeros() as usize)
    } else if cap <= MAX_POOLED {
        Some(SMALL_CLASSES + cap / BIG_STEP - 2)
    } else {
        None
    }
}

struct Pool {
    free: Vec<Vec<AlignedBuf>>,
}

pub(crate) struct Shared {
    sem: Semaphore,
    capacity: usize,
    /// Bytes charged: buffers in use plus pooled ones. Never above `capacity`.
    charged: AtomicUsize,
    peak: AtomicUsize,
    pooled: AtomicUsize,
    waits: AtomicU64,
    allocs: AtomicU64,
    /// Tasks waiting in `alloc`; returns wake one of them (FIFO) through `notify`.
    waiting: AtomicUsize,
    notify: Notify,
    pool: Mutex<Pool>,
}

impl Shared {
    pub(crate) fn usage(&self) -> IoBufferUsage {
        IoBufferUsage {
            capacity: self.capacity as u64,
            charged: self.charged.load(Relaxed) as u64,
            pooled: self.pooled.load(Relaxed) as u64,
            peak: self.peak.load(Relaxed) as u64,
            waits: self.waits.load(Relaxed),
            allocs: self.allocs.load(Relaxed),
        }
    }

    fn charge_of(&self, cap: usize) -> usize {
        cap.min(self.capacity)
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        match self.pool.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn take_permits(&self, charge: usize) {
        let now = self.charged.fetch_add(charge, Relaxed) + charge;
        self.peak.fetch_max(now, Relaxed);
    }

    fn release(&self, charge: usize) {
        self.charged.fetch_sub(charge, Relaxed);
        self.sem.add_permits(charge);
    }

    /// Called by `AlignedBuf::drop` for a budgeted buffer (`raw` has no home any more): pool it
    /// (its charge stays taken) and wake a waiter, which takes it or frees it to make room.
    pub(crate) fn give_back(&self, raw: AlignedBuf) {
        let cap = raw.capacity();
        match class_index(cap).filter(|_| cap <= self.capacity) {
            Some(i) => {
                self.lock().free[i].push(raw);
                self.pooled.fetch_add(cap, Relaxed);
            }
            None => {
                drop(raw);
                self.release(self.charge_of(cap));
            }
        }
        if self.waiting.load(Relaxed) > 0 {
            self.notify.notify_one();
        }
    }
}

/// One worker's buffer budget. Cheap to clone (an `Arc`); `Send + Sync`.
#[derive(Clone)]
pub struct IoBudget {
    shared: Arc<Shared>,
}

/// A snapshot of a budget's use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoBufferUsage {
    /// The bound, in bytes.
    pub capacity: u64,
    /// Bytes of live buffers now: in use plus pooled for reuse.
    pub charged: u64,
    /// Bytes of pooled (free, reusable) buffers now.
    pub pooled: u64,
    /// Highest `charged` seen.
    pub peak: u64,
    /// Requests that had to wait for buffer memory.
    pub waits: u64,
    /// Fresh allocations (requests not served from the pool).
    pub allocs: u64,
}

impl std::fmt::Debug for IoBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoBudget")
            .field("usage", &self.usage())
            .finish()
    }
}

impl IoBudget {
    /// A budget of `bytes`, clamped to [`MIN_BUDGET`]..=[`MAX_BUDGET`].
    pub fn new(bytes: u64) -> IoBudget {
        let capacity = bytes.clamp(MIN_BUDGET, MAX_BUDGET) as usize;
        IoBudget {
            shared: Arc::new(Shared {
                sem: Semaphore::new(capacity),
                capacity,
                charged: AtomicUsize::new(0),
                peak: AtomicUsize::new(0),
                pooled: AtomicUsize::new(0),
                waits: AtomicU64::new(0),
                allocs: AtomicU64::new(0),
                waiting: AtomicUsize::new(0),
                notify: Notify::new(),
                pool: Mutex::new(Pool {
                    free: (0..CLASSES).map(|_| Vec::new()).collect(),
                }),
            }),
        }
    }

    /// The bound in bytes.
    pub fn capacity(&self) -> u64 {
        self.shared.capacity as u64
    }

    pub fn usage(&self) -> IoBufferUsage {
        self.shared.usage()
    }

    /// A handle that does not keep the budget alive (for store-wide statistics).
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Shared> {
        Arc::downgrade(&self.shared)
    }


    /// Reset the peak to the current charge (for measurements).
    pub fn reset_peak(&self) {
        let s = &self.shared;
        s.peak.store(s.charged.load(Relaxed), Relaxed);
    }

    fn fresh(&self, cap: usize) -> AlignedBuf {
        self.shared.allocs.fetch_add(1, Relaxed);
        AlignedBuf::new(cap).with_home(Arc::clone(&self.shared))
    }

    /// A buffer of at least `len` bytes (length 0) if the budget has room now, else `None`.
    pub fn try_alloc(&self, len: usize) -> Option<AlignedBuf> {
        let cap = class_cap(len);
        let s = &self.shared;
        let charge = s.charge_of(cap);
        if let Some(i) = class_index(cap) {
            let mut p = s.lock();
            if let Some(mut b) = p.free[i].pop() {
                drop(p);
                s.pooled.fetch_sub(cap, Relaxed);
                b.clear();
                return Some(b.with_home(Arc::clone(s)));
            }
        }
        loop {
            if let Ok(permit) = s.sem.try_acquire_many(charge as u32) {
                permit.forget();
                s.take_permits(charge);
                return Some(self.fresh(cap));
            }
            // Make room by freeing pooled buffers of other sizes, largest first.
            let mut p = s.lock();
            let b = p.free.iter_mut().rev().find(|l| !l.is_empty())?.pop()?;
            drop(p);
            s.pooled.fetch_sub(b.capacity(), Relaxed);
            let c = s.charge_of(b.capacity());
            drop(b);
            s.release(c);
        }
    }

    /// Like [`try_alloc`](Self::try_alloc), but only while a quarter of the budget stays free
    /// for buffers in use after this one: for read-ahead, which must not take the memory the
    /// next stream's first read needs.
    pub fn try_alloc_spare(&self, len: usize) -> Option<AlignedBuf> {
        let s = &self.shared;
        let in_use = s
            .charged
            .load(Relaxed)
            .saturating_sub(s.pooled.load(Relaxed));
        if in_use + class_cap(len) > s.capacity - s.capacity / 4 {
            return None;
        }
        self.try_alloc(len)
    }

    /// A buffer of at least `len` bytes (length 0), waiting for the budget if needed. Waiters
    /// are served in turn: while any waits, a new request queues behind them.
    pub async fn alloc(&self, len: usize) -> AlignedBuf {
        let s = &self.shared;
        if s.waiting.load(Relaxed) == 0
            && let Some(b) = self.try_alloc(len)
        {
            return b;
        }
        s.waits.fetch_add(1, Relaxed);
        let _waiting = Waiting::enter(s);
        loop {
            let notified = s.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a return between the check and the await wakes us.
            notified.as_mut().enable();
            if let Some(b) = self.try_alloc(len) {
                return b;
            }
            notified.await;
        }
    }
}

/// Counts a waiter for as long as it waits (also when the wait is cancelled).
struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    fn enter(s: &'a Shared) -> Waiting<'a> {
        s.waiting.fetch_add(1, Relaxed);
        Waiting(s)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let left = self.0.waiting.fetch_sub(1, Relaxed) - 1;
        // We may have consumed a wake-up another waiter could use: pass one on.
        if left > 0 {
            self.0.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class_cap(1), 4096);
        assert_eq!(class_cap(4097), 8192);
        assert_eq!(class_cap(65536), 65536);
        assert_eq!(class_cap(65537), 131072);
        assert_eq!(class_cap(104 * 1024), 128 * 1024);
        assert_eq!(class_cap(260 * 1024), 320 * 1024);
        assert_eq!(class_index(4096), Some(0));
        assert_eq!(class_index(65536), Some(4));
        assert_eq!(class_index(131072), Some(5));
        assert_eq!(class_index(MAX_POOLED), Some(CLASSES - 1));
        assert_eq!(class_index(MAX_POOLED + BIG_STEP), None);
    }

    #[test]
    fn bounded_pooled_and_waiting() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let b = IoBudget::new(1 << 20);
            let x = b.alloc(300 * 1024).await; // 320 KiB
            let y = b.alloc(512 * 1024).await;
            assert_eq!(b.usage().charged, 832 * 1024);
            assert!(b.try_alloc(256 * 1024).is_none(), "over budget");
            drop(x);
            // Pooled, still charged; a request of another size frees it to make room.
            assert_eq!(b.usage().pooled, 320 * 1024);
            let z = b.try_alloc(256 * 1024).expect("room after freeing the pool");
            assert_eq!(b.usage().pooled, 0);
            drop(z);
            let again = b.try_alloc(200 * 1024).expect("pooled 256 KiB reused");
            assert_eq!(again.capacity(), 256 * 1024);
            assert_eq!(b.usage().allocs, 3);
            // A waiter gets memory when `y` is dropped on another thread.
            let t = std::thread::spawn(move || drop(y));
            let w = b.alloc(700 * 1024).await;
            t.join().expect("join");
            assert!(b.usage().peak <= 1 << 20);
            drop((w, again));
            // An oversize request takes the whole budget instead of waiting forever.
            let big = b.alloc(3 << 20).await;
            assert_eq!(b.usage().charged, 1 << 20);
            drop(big);
        });
    }
}
