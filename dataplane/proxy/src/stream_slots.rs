//! Disk streams per client address on one worker. A large hit streamed from disk holds some of
//! the worker's I/O buffers until its client has taken them, so one address with many
//! connections that stop reading could hold them all, and every other client's large hits
//! would wait for its connections to time out. Each address may stream at most `max` large hits
//! from disk at once on a worker; its further ones wait for a slot, holding no buffer meanwhile,
//! and other addresses are not affected.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::client_caps::canonical;

/// The slots of one worker.
#[derive(Debug)]
pub struct StreamSlots {
    max: usize,
    per_ip: std::cell::RefCell<HashMap<IpAddr, Arc<Semaphore>>>,
    /// Streams waiting for a slot now: pressure, as waiting for I/O buffers is.
    waiting: std::rc::Rc<std::cell::Cell<usize>>,
}

/// One large disk stream of an address; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl StreamSlots {
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            per_ip: Default::default(),
            waiting: Default::default(),
        }
    }

    fn semaphore(&self, ip: IpAddr) -> Arc<Semaphore> {
        let ip = canonical(ip);
        let mut map = self.per_ip.borrow_mut();
        // Addresses with no stream and no waiter are forgotten.
        if map.len() > 1024 {
            map.retain(|_, s| Arc::strong_count(s) > 1);
        }
        map.entry(ip)
            .or_insert_with(|| Arc::new(Semaphore::new(self.max)))
            .clone()
    }

    /// Wait for a slot of `ip` (at once when it has fewer than `max` streams). `None` only if
    /// the slot's semaphore were closed, which this table never does.
    pub async fn acquire(&self, ip: IpAddr) -> Option<Slot> {
        let sem = self.semaphore(ip);
        if let Ok(permit) = sem.clone().try_acquire_owned() {
            return Some(Slot { _permit: permit });
        }
        let _waiting = Waiting::new(&self.waiting);
        let permit = sem.acquire_owned().await.ok()?;
        Some(Slot { _permit: permit })
    }

    /// Whether a stream waits for a slot now (a stalled reader's slot is wanted: the
    /// connection timers then drop it sooner, src/conn_timer.rs).
    pub fn has_waiters(&self) -> bool {
        self.waiting.get() > 0
    }

    /// A slot of `ip` if one is free now (never waits).
    pub fn try_acquire(&self, ip: IpAddr) -> Option<Slot> {
        let sem = self.semaphore(ip);
        let permit = sem.try_acquire_owned().ok()?;
        Some(Slot { _permit: permit })
    }

    /// Addresses remembered now.
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.per_ip.borrow().len()
    }
}

/// Counts one waiter until dropped (also when its wait is cancelled).
struct Waiting(std::rc::Rc<std::cell::Cell<usize>>);

impl Waiting {
    fn new(n: &std::rc::Rc<std::cell::Cell<usize>>) -> Self {
        n.set(n.get() + 1);
        Self(n.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// The default cap for a worker whose I/O budget is `budget` bytes: streams of one address hold
/// at most half of it, at two chunks (256 KiB) each (the one the socket is taking and the next).
pub fn default_max(budget: u64) -> usize {
    (budget / 2 / (2 * (256 << 10))).max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_waits_past_its_cap_and_others_do_not() {
        let slots = StreamSlots::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = slots.acquire(a).await;
        let _s2 = slots.acquire(a).await;
        assert!(!slots.has_waiters());
        {
            let third =
                tokio::time::timeout(std::time::Duration::from_millis(20), slots.acquire(a));
            tokio::pin!(third);
            let pending = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(third.as_mut().poll(cx).is_pending())
            });
            assert!(pending.await);
            assert!(slots.has_waiters(), "a third stream of one address waits");
            assert!(third.await.is_err());
        }
        assert!(!slots.has_waiters(), "a wait given up is no longer counted");
        let _other = slots.acquire(b).await;
        drop(s1);
        let _s3 = slots.acquire(a).await;
        assert_eq!(slots.addresses(), 2);
        assert_eq!(default_max(32 << 20), 32);
        assert_eq!(default_max(1 << 20), 1);
    }
}
