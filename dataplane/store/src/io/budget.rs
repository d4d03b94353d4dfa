//! A hard bound on I/O buffer memory, with a pool that recycles the buffers.
//!
//! An [`IoBudget`] owns `capacity` bytes of buffer memory. Every aligned buffer the store uses
//! for a disk read or write on a worker comes from it: [`IoBudget::alloc`] waits until the bytes
//! are free, [`IoBudget::try_alloc`] does not wait (read-ahead uses it, so a read-ahead never
//! delays anyone). The buffer carries its charge: it goes back when the [`AlignedBuf`] is
//! dropped, wherever that happens (in hyper after the bytes were written to the socket, through
//! `Bytes::from_owner`; in the kernel after a cancelled io_uring operation completes; on an I/O
//! pool thread). So N concurrent streams share a fixed budget and wait for it instead of
//! allocating, and the bytes of live buffers (in use or pooled) never exceed `capacity`.
//!
//! Waiting: requests queue in arrival order, the next chunk of a started stream
//! ([`IoBudget::alloc`]) ahead of the first read of a new one ([`IoBudget::alloc_first`]), so
//! started streams finish first instead of the budget being shared by ever more streams. A
//! quarter of the budget is reserved for first reads: started streams hold their chunks until
//! the client's socket takes them, so clients that stop reading could otherwise hold the whole
//! budget and freeze every other hit on the worker until they time out. Only the waiters whose
//! turn it may be (the oldest of each kind) are woken when a buffer comes back.
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
//! Placement: a new buffer of 64 KiB or more goes in the budget's huge-page region
//! ([`super::huge_region`], one of the budget's size), where O_DIRECT hands the device one
//! segment per 2 MiB instead of one per 4 KiB page; smaller ones, and any that finds no room
//! there, come from the heap.
//!
//! Size classes: powers of two from 4 KiB to 64 KiB, then multiples of 64 KiB up to
//! [`MAX_POOLED`]. A request is charged its class size; one larger than the whole budget is
//! charged the whole budget (it waits until everything else is returned), so nothing can wait
//! forever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use tokio::sync::Semaphore;

use super::AlignedBuf;
use super::huge_region::{self, HugeRegion};

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
    /// Requests waiting for memory, in arrival order.
    waiters: VecDeque<Waiter>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    /// The first read of a stream (lower priority than the next chunk of a started stream).
    first: bool,
    /// The class capacity it asks for.
    cap: usize,
    waker: Option<Waker>,
}

impl Pool {
    fn oldest(&self, first: bool) -> Option<&Waiter> {
        self.waiters.iter().find(|w| w.first == first)
    }

    /// Whether the waiter `id` (a first read when `first`) may take memory now: the oldest
    /// continuation when it fits outside the reserve; the oldest first read when no
    /// continuation can go ahead of it (none waits, or the oldest does not fit outside the
    /// reserve: stalled streams then hold the rest of the budget, and first reads use the
    /// reserve they cannot touch).
    fn turn(&self, s: &Shared, id: u64, first: bool) -> bool {
        let cont = self.oldest(false);
        if !first {
            return cont.is_some_and(|w| w.id == id);
        }
        self.oldest(true).is_some_and(|w| w.id == id)
            && cont.is_none_or(|c| !s.fits_outside_reserve(c.cap))
    }

    /// The wakers of the two waiters that may be next: the oldest continuation and the oldest
    /// first read (wake them after unlocking; the one that cannot go waits again).
    fn turn_wakers(&mut self) -> [Option<Waker>; 2] {
        let mut out = [None, None];
        for (slot, first) in out.iter_mut().zip([false, true]) {
            if let Some(w) = self.waiters.iter_mut().find(|w| w.first == first) {
                *slot = w.waker.take();
            }
        }
        out
    }
}

fn wake_all(wakers: [Option<Waker>; 2]) {
    for w in wakers.into_iter().flatten() {
        w.wake();
    }
}

/// What a request got: a pooled buffer, or the charge for a fresh one.
enum Taken {
    Pooled(AlignedBuf),
    Charged,
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
    pool: Mutex<Pool>,
    /// Where new buffers of [`huge_region::UNIT`] and more are placed: a huge-page region of the
    /// budget's size (`None` when it could not be mapped: then the heap).
    region: Option<Arc<HugeRegion>>,
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

    /// The part of the budget that the next chunk of a started stream (and writes) may not
    /// use: first reads only. So streams whose clients stopped reading, which hold their chunks
    /// until the socket takes them, can never take the memory a new request's first read needs.
    fn reserve(&self) -> usize {
        self.capacity / 4
    }

    /// Whether a continuation of class `cap` fits in the budget outside the reserve (a request
    /// too large for that area may use the whole budget, so nothing waits forever).
    fn fits_outside_reserve(&self, cap: usize) -> bool {
        let limit = self.capacity - self.reserve();
        let charge = self.charge_of(cap);
        if charge > limit {
            return true;
        }
        let in_use = self
            .charged
            .load(Relaxed)
            .saturating_sub(self.pooled.load(Relaxed));
        in_use + charge <= limit
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        match self.pool.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn release(&self, charge: usize) {
        self.charged.fetch_sub(charge, Relaxed);
        self.sem.add_permits(charge);
    }

    /// Take a buffer of class `cap` from the pool, or its charge from the semaphore (freeing
    /// pooled buffers of other sizes to make room).
    fn take(&self, p: &mut Pool, cap: usize) -> Option<Taken> {
        if let Some(i) = class_index(cap)
            && let Some(b) = p.free[i].pop()
        {
            self.pooled.fetch_sub(cap, Relaxed);
            return Some(Taken::Pooled(b));
        }
        let charge = self.charge_of(cap);
        loop {
            if let Ok(permit) = self.sem.try_acquire_many(charge as u32) {
                permit.forget();
                let now = self.charged.fetch_add(charge, Relaxed) + charge;
                self.peak.fetch_max(now, Relaxed);
                return Some(Taken::Charged);
            }
            // Largest first: fewest frees.
            let b = p.free.iter_mut().rev().find(|l| !l.is_empty())?.pop()?;
            self.pooled.fetch_sub(b.capacity(), Relaxed);
            let c = self.charge_of(b.capacity());
            drop(b);
            self.release(c);
        }
    }

    /// A new buffer of `cap` bytes in the huge-page region, or `None` for the heap (a small
    /// buffer, or no room). When the region has no free run that long, the pooled buffers in it
    /// are freed first: they are free memory, and buffers of other sizes kept there would
    /// otherwise push the large ones out to the heap's base pages.
    fn place(&self, cap: usize) -> Option<AlignedBuf> {
        let region = self.region.as_ref().filter(|_| cap >= huge_region::UNIT)?;
        if let Some(b) = AlignedBuf::in_region(region, cap) {
            return Some(b);
        }
        let evicted: Vec<AlignedBuf> = {
            let mut p = self.lock();
            p.free
                .iter_mut()
                .flat_map(|list| {
                    let (there, kept) = std::mem::take(list)
                        .into_iter()
                        .partition(|b: &AlignedBuf| b.in_huge_region());
                    *list = kept;
                    there
                })
                .collect()
        };
        if evicted.is_empty() {
            return None;
        }
        for b in evicted {
            let cap = b.capacity();
            self.pooled.fetch_sub(cap, Relaxed);
            drop(b);
            self.release(self.charge_of(cap));
        }
        let w = self.lock().turn_wakers();
        wake_all(w);
        AlignedBuf::in_region(region, cap)
    }

    /// Called by `AlignedBuf::drop` for a budgeted buffer (`raw` has no home any more): pool it
    /// (its charge stays taken) and wake the waiter whose turn it is.
    pub(crate) fn give_back(&self, raw: AlignedBuf) {
        let cap = raw.capacity();
        let mut p = self.lock();
        match class_index(cap).filter(|_| cap <= self.capacity) {
            Some(i) => {
                p.free[i].push(raw);
                self.pooled.fetch_add(cap, Relaxed);
            }
            None => {
                drop(raw);
                self.release(self.charge_of(cap));
            }
        }
        let w = p.turn_wakers();
        drop(p);
        wake_all(w);
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
                pool: Mutex::new(Pool {
                    free: (0..CLASSES).map(|_| Vec::new()).collect(),
                    waiters: VecDeque::new(),
                    next_id: 0,
                }),
                region: HugeRegion::new(capacity).map(Arc::new),
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

    /// Whether some request is waiting for buffer memory now (the budget is under pressure).
    pub fn has_waiters(&self) -> bool {
        !self.shared.lock().waiters.is_empty()
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

    fn finish(&self, taken: Taken, cap: usize) -> AlignedBuf {
        let home = Arc::clone(&self.shared);
        match taken {
            Taken::Pooled(mut b) => {
                b.clear();
                b.with_home(home)
            }
            Taken::Charged => {
                self.shared.allocs.fetch_add(1, Relaxed);
                self.shared
                    .place(cap)
                    .unwrap_or_else(|| AlignedBuf::new(cap))
                    .with_home(home)
            }
        }
    }

    /// A buffer of at least `len` bytes (length 0) if the budget has room now and nobody is
    /// waiting for it, else `None`.
    pub fn try_alloc(&self, len: usize) -> Option<AlignedBuf> {
        let cap = class_cap(len);
        let taken = {
            let mut p = self.shared.lock();
            if !p.waiters.is_empty() {
                return None;
            }
            self.shared.take(&mut p, cap)?
        };
        Some(self.finish(taken, cap))
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

    /// A buffer of at least `len` bytes (length 0), waiting for the budget if needed: for the
    /// next chunk of a started stream or a write. Waiters are served in arrival order, and
    /// before any [`alloc_first`](Self::alloc_first) waiter.
    pub async fn alloc(&self, len: usize) -> AlignedBuf {
        self.alloc_inner(len, false).await
    }

    /// Like [`alloc`](Self::alloc), for the first read of a stream: it waits behind every
    /// started stream's next chunk, so streams that have begun finish first (lower tail
    /// latency than sharing the budget among ever more streams).
    pub async fn alloc_first(&self, len: usize) -> AlignedBuf {
        self.alloc_inner(len, true).await
    }

    async fn alloc_inner(&self, len: usize, first: bool) -> AlignedBuf {
        let s = &self.shared;
        let cap = class_cap(len);
        let id = {
            let mut p = s.lock();
            let may_go = if first {
                p.oldest(true).is_none()
                    && p.oldest(false)
                        .is_none_or(|c| !s.fits_outside_reserve(c.cap))
            } else {
                p.oldest(false).is_none() && s.fits_outside_reserve(cap)
            };
            if may_go && let Some(t) = s.take(&mut p, cap) {
                drop(p);
                return self.finish(t, cap);
            }
            let id = p.next_id;
            p.next_id += 1;
            p.waiters.push_back(Waiter {
                id,
                first,
                cap,
                waker: None,
            });
            id
        };
        s.waits.fetch_add(1, Relaxed);
        let mut queued = Queued { s, id, done: false };
        let taken = std::future::poll_fn(|cx| {
            let mut p = s.lock();
            if p.turn(s, id, first)
                && (first || s.fits_outside_reserve(cap))
                && let Some(t) = s.take(&mut p, cap)
            {
                p.waiters.retain(|w| w.id != id);
                // There may be room for the next ones too.
                let w = p.turn_wakers();
                drop(p);
                wake_all(w);
                return Poll::Ready(t);
            }
            if let Some(w) = p.waiters.iter_mut().find(|w| w.id == id) {
                w.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
        queued.done = true;
        self.finish(taken, cap)
    }
}

/// Removes a cancelled waiter from the queue and passes its turn on.
struct Queued<'a> {
    s: &'a Shared,
    id: u64,
    done: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut p = self.s.lock();
            p.waiters.retain(|w| w.id != self.id);
            let w = p.turn_wakers();
            drop(p);
            wake_all(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anonymous bytes on transparent huge pages in the mapping of this process holding `ptr`
    /// (`AnonHugePages` of its entry in /proc/self/smaps).
    fn huge_bytes_at(ptr: *const u8) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let p = ptr as usize;
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = head.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = a <= p && p < b;
            } else if inside && let Some(v) = line.strip_prefix("AnonHugePages:") {
                let kib: u64 = v.split_whitespace().next().unwrap().parse().unwrap();
                return kib << 10;
            }
        }
        0
    }

    #[test]
    fn pooled_buffers_scattered_over_the_region_make_room_for_a_large_one() {
        let b = IoBudget::new(4 << 20);
        let bufs: Vec<AlignedBuf> = (0..16).map(|_| b.try_alloc(256 << 10).unwrap()).collect();
        assert!(bufs.iter().all(|x| x.in_huge_region()));
        // Pooled in an order that leaves the most recently pooled (the first freed for room)
        // scattered: every other 256 KiB.
        let (even, odd): (Vec<_>, Vec<_>) =
            bufs.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
        drop(even);
        drop(odd);
        let big = b.try_alloc((1 << 20) + 4096).unwrap();
        assert!(
            big.in_huge_region(),
            "the pooled buffers left the region for it"
        );
        assert!(b.usage().charged <= 4 << 20);
    }

    #[test]
    fn large_buffers_sit_on_huge_pages_and_small_ones_on_the_heap() {
        let b = IoBudget::new(8 << 20);
        let mut big = b.try_alloc((1 << 20) + 4096).unwrap();
        let small = b.try_alloc(4096).unwrap();
        assert!(big.in_huge_region(), "a 1 MiB record's buffer");
        assert!(!small.in_huge_region(), "a 4 KiB one");
        big.full_mut().fill(7);
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !thp.contains("[always]") && !thp.contains("[madvise]") {
            println!(
                "SKIPPED: this host has no transparent huge pages ({})",
                thp.trim()
            );
            return;
        }
        assert!(
            huge_bytes_at(big.ptr()) >= 2 << 20,
            "the buffer's region is on huge pages"
        );
        // Given back and taken again: the same bytes, from the pool, zeroed only when new.
        let ptr = big.ptr();
        drop(big);
        let again = b.try_alloc((1 << 20) + 4096).unwrap();
        assert_eq!(again.ptr(), ptr);
        assert!(again.in_huge_region());
    }

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
            // A first read may use the reserve a continuation may not.
            let y = b.alloc_first(512 * 1024).await;
            assert_eq!(b.usage().charged, 832 * 1024);
            assert!(b.try_alloc(256 * 1024).is_none(), "over budget");
            drop(x);
            // Pooled, still charged; a request of another size frees it to make room.
            assert_eq!(b.usage().pooled, 320 * 1024);
            let z = b
                .try_alloc(256 * 1024)
                .expect("room after freeing the pool");
            assert_eq!(b.usage().pooled, 0);
            drop(z);
            let again = b.try_alloc(200 * 1024).expect("pooled 256 KiB reused");
            assert_eq!(again.capacity(), 256 * 1024);
            assert_eq!(b.usage().allocs, 3);
            // A waiter gets memory when `y` is dropped on another thread.
            let t = std::thread::spawn(move || drop(y));
            let w = b.alloc_first(700 * 1024).await;
            t.join().expect("join");
            assert!(b.usage().peak <= 1 << 20);
            drop((w, again));
            // An oversize request takes the whole budget instead of waiting forever.
            let big = b.alloc(3 << 20).await;
            assert_eq!(b.usage().charged, 1 << 20);
            drop(big);
        });
    }

    #[test]
    fn started_streams_cannot_take_the_reserve_of_first_reads() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            use futures_util::FutureExt;
            let b = IoBudget::new(1 << 20);
            // Stalled streams: their chunks fill the budget outside the reserve (768 KiB).
            let held: Vec<_> =
                futures_util::future::join_all((0..3).map(|_| b.alloc(256 * 1024))).await;
            // The next chunk of a started stream waits...
            let mut next = Box::pin(b.alloc(256 * 1024));
            assert!((&mut next).now_or_never().is_none(), "a continuation waits");
            // ...and a new stream's first read, behind it in the queue, does not.
            let first = b.alloc_first(64 * 1024).now_or_never();
            assert!(first.is_some(), "a first read uses the reserve");
            assert!(b.usage().peak <= 1 << 20);
            drop(first);
            // When a stalled chunk comes back, the continuation goes.
            drop(held);
            assert!(next.now_or_never().is_some());
        });
    }
}
