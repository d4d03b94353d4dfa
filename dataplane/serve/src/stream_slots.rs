//! Disk streams per client address on one worker. A large hit streamed from disk holds some of
//! the worker's I/O buffers until its client has taken them, so one address with many
//! connections that stop reading could hold them all, and every other client's large hits
//! would wait for its connections to time out. Each stream takes a slot first; who gets one is
//! src/slot_grants.rs (work-conserving: one address may use the whole pool while nobody else
//! waits, and every address gets its share at once). A stream without a slot waits here,
//! holding no buffer meanwhile.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::task::{Poll, Waker};

use prometheus_client::metrics::gauge::Gauge;

use crate::slot_grants::{Grants, Limits, Take, Ticket};

/// The slots of one worker.
#[derive(Debug)]
pub struct StreamSlots {
    table: Rc<Table>,
}

/// Streams holding a slot and streams waiting for one, all workers together.
#[derive(Debug, Clone, Default)]
pub struct SlotGauges {
    pub active: Gauge,
    pub waiting: Gauge,
}

#[derive(Debug)]
struct Table {
    grants: RefCell<Grants>,
    /// Waiting streams: granted yet, and the waker of the one not granted.
    waits: RefCell<HashMap<Ticket, Wait>>,
    gauges: SlotGauges,
    /// What this worker added to the gauges.
    shown: Cell<(i64, i64)>,
}

#[derive(Debug, Default)]
struct Wait {
    granted: bool,
    waker: Option<Waker>,
}

/// One large disk stream of an address; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    table: Rc<Table>,
    ip: IpAddr,
}

impl StreamSlots {
    pub fn new(limits: Limits, gauges: SlotGauges) -> Self {
        Self {
            table: Rc::new(Table {
                grants: RefCell::new(Grants::new(limits)),
                waits: RefCell::default(),
                gauges,
                shown: Cell::new((0, 0)),
            }),
        }
    }

    /// A slot of `ip`, at once when the policy gives one, else once a slot freed is its.
    pub async fn acquire(&self, ip: IpAddr) -> Slot {
        let taken = self.table.grants.borrow_mut().take(ip);
        let ticket = match taken {
            Take::Now => {
                self.table.show();
                return self.slot(ip);
            }
            Take::Wait(t) => t,
        };
        self.table
            .waits
            .borrow_mut()
            .insert(ticket, Wait::default());
        self.table.show();
        // Given up (dropped) before the slot is taken, the wait leaves the queue, or gives
        // back the slot it was granted meanwhile.
        let mut guard = WaitGuard {
            table: &self.table,
            ticket,
            ip,
            done: false,
        };
        std::future::poll_fn(|cx| {
            let mut waits = self.table.waits.borrow_mut();
            match waits.get_mut(&ticket) {
                Some(w) if !w.granted => {
                    w.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            }
        })
        .await;
        self.table.waits.borrow_mut().remove(&ticket);
        guard.done = true;
        self.slot(ip)
    }

    /// A slot of `ip` if the policy gives one now (never waits).
    pub fn try_acquire(&self, ip: IpAddr) -> Option<Slot> {
        let taken = self.table.grants.borrow_mut().try_take(ip);
        self.table.show();
        taken.then(|| self.slot(ip))
    }

    /// Whether a stream waits for a slot now (a stalled reader's slot is wanted: the
    /// connection timers then drop it sooner, edgecache_edge::conn_timer).
    pub fn has_waiters(&self) -> bool {
        self.table.grants.borrow().waiting() > 0
    }

    fn slot(&self, ip: IpAddr) -> Slot {
        Slot {
            table: self.table.clone(),
            ip,
        }
    }
}

impl Table {
    /// Free a slot of `ip` and wake the streams it goes to.
    fn release(&self, ip: IpAddr) {
        let granted = self.grants.borrow_mut().release(ip);
        let mut wakers = Vec::new();
        {
            let mut waits = self.waits.borrow_mut();
            for t in granted {
                if let Some(w) = waits.get_mut(&t) {
                    w.granted = true;
                    wakers.extend(w.waker.take());
                }
            }
        }
        self.show();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Bring the gauges to this worker's counts.
    fn show(&self) {
        let (active, waiting) = {
            let g = self.grants.borrow();
            (g.in_use() as i64, g.waiting() as i64)
        };
        let (a0, w0) = self.shown.replace((active, waiting));
        self.gauges.active.inc_by(active - a0);
        self.gauges.waiting.inc_by(waiting - w0);
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let (a, w) = self.shown.get();
        self.gauges.active.dec_by(a);
        self.gauges.waiting.dec_by(w);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.release(self.ip);
    }
}

/// A wait in progress; see [`StreamSlots::acquire`].
struct WaitGuard<'a> {
    table: &'a Rc<Table>,
    ticket: Ticket,
    ip: IpAddr,
    done: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let wait = self.table.waits.borrow_mut().remove(&self.ticket);
        if wait.is_some_and(|w| w.granted) {
            self.table.release(self.ip);
        } else {
            self.table.grants.borrow_mut().cancel(self.ticket);
            self.table.show();
        }
    }
}

/// The limits for a worker whose I/O budget is `budget` bytes, read in chunks of `chunk`:
/// `configured` (`clients.maxDiskStreamsPerIp`) is a hard cap per address; 0 is
/// work-conserving: each address is guaranteed half the budget at two chunks a stream (the one
/// the socket is taking and the next: 32 for 32 MiB), and one address may use the whole pool,
/// a stream for each chunk of the budget (128 for 32 MiB), while nobody else waits.
pub fn limits(configured: u32, budget: u64, chunk: u64) -> Limits {
    match configured {
        0 => {
            let chunk = chunk.max(1);
            let share = budget / 2 / (2 * chunk);
            Limits::work_conserving(share as usize, (budget / chunk) as usize)
        }
        n => Limits::hard(n as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Whether `f` is still pending after one poll.
    async fn pending<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
        let mut f = f;
        std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx).is_pending())).await
    }

    #[tokio::test]
    async fn a_freed_slot_wakes_the_stream_it_goes_to_and_a_dropped_wait_gives_its_place_back() {
        let gauges = SlotGauges::default();
        let slots = StreamSlots::new(Limits::work_conserving(1, 2), gauges.clone());
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let s1 = slots.acquire(a).await;
        let s2 = slots.acquire(a).await;
        assert_eq!(gauges.active.get(), 2, "a borrowed the pool's second slot");
        assert!(!slots.has_waiters());
        {
            let third = tokio::time::timeout(Duration::from_millis(20), slots.acquire(a));
            tokio::pin!(third);
            assert!(pending(third.as_mut()).await);
            assert!(slots.has_waiters(), "a third stream of one address waits");
            assert_eq!(gauges.waiting.get(), 1);
            assert!(third.await.is_err());
        }
        assert!(!slots.has_waiters(), "a wait given up is no longer counted");
        assert_eq!(gauges.waiting.get(), 0);
        {
            let b1 = slots.acquire(b).await;
            let later = slots.acquire(a);
            tokio::pin!(later);
            assert!(pending(later.as_mut()).await);
            drop(s1);
            assert!(
                pending(later.as_mut()).await,
                "the pool is over-full by b's share"
            );
            drop(s2);
            let s3 = later.await;
            assert_eq!(gauges.active.get(), 2);
            // Granted but dropped before it ran: the slot goes back.
            let mut granted = Box::pin(slots.acquire(b));
            assert!(pending(granted.as_mut()).await);
            drop(s3);
            drop(granted);
            assert_eq!(gauges.active.get(), 1, "b's first slot only");
            assert_eq!(gauges.waiting.get(), 0);
            drop(b1);
            assert!(slots.try_acquire(a).is_some());
        }
        drop(slots);
        assert_eq!((gauges.active.get(), gauges.waiting.get()), (0, 0));
    }

    #[test]
    fn zero_is_work_conserving_from_the_budget_and_a_number_a_hard_cap() {
        let chunk = 256 << 10;
        assert_eq!(limits(0, 32 << 20, chunk), Limits::work_conserving(32, 128));
        assert_eq!(limits(0, 1 << 20, chunk), Limits::work_conserving(1, 4));
        assert_eq!(limits(7, 32 << 20, chunk), Limits::hard(7));
    }
}
