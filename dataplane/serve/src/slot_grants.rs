//! Who gets a disk stream slot of a worker, and when: the bookkeeping alone, no I/O and no
//! waiting (src/stream_slots.rs waits).
//!
//! Work-conserving: one address may hold every slot of the pool while no stream of another
//! address waits for one, and is held to a fair part of it only when others want slots.
//! - Every address gets its guaranteed `share` at once, however many slots others hold: a
//!   newcomer never waits behind another address's streams, stalled or not.
//! - Past its share an address takes a slot at once only while the pool has one free and no
//!   stream waits; otherwise it waits.
//! - A slot freed goes to the waiting address that holds the fewest (the earliest of its
//!   streams), while the pool has one free: under contention the pool ends up split evenly
//!   among the addresses that want it.
//!
//! With a hard cap (`hard`) no address ever holds more than its share, whatever is free.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use crate::client_caps::canonical;

/// How many slots an address gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Slots an address always gets at once (its cap when `hard`).
    pub share: usize,
    /// Slots of the worker that addresses past their share may borrow while nobody waits.
    pub pool: usize,
    /// No borrowing: `share` is each address's cap.
    pub hard: bool,
}

impl Limits {
    /// At most `cap` slots an address, never more.
    pub fn hard(cap: usize) -> Self {
        let cap = cap.max(1);
        Self {
            share: cap,
            pool: cap,
            hard: true,
        }
    }

    /// `share` an address at once, up to `pool` (at least `share`) while nobody waits.
    pub fn work_conserving(share: usize, pool: usize) -> Self {
        let share = share.max(1);
        Self {
            share,
            pool: pool.max(share),
            hard: false,
        }
    }
}

/// One waiting stream.
pub type Ticket = u64;

/// The answer to a stream that asks for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// It holds a slot now.
    Now,
    /// It waits; [`Grants::release`] names the ticket when the slot is its.
    Wait(Ticket),
}

/// The slots of one worker: who holds how many, who waits.
#[derive(Debug)]
pub struct Grants {
    limits: Limits,
    /// Slots held per address (addresses holding none are not kept).
    held: HashMap<IpAddr, usize>,
    in_use: usize,
    /// Waiting streams in the order they came.
    waiting: VecDeque<(Ticket, IpAddr)>,
    next: Ticket,
}

impl Grants {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            held: HashMap::new(),
            in_use: 0,
            waiting: VecDeque::new(),
            next: 0,
        }
    }

    /// A slot for a stream of `ip` now, or its place in the queue.
    pub fn take(&mut self, ip: IpAddr) -> Take {
        let ip = canonical(ip);
        if self.try_take(ip) {
            return Take::Now;
        }
        let t = self.next;
        self.next += 1;
        self.waiting.push_back((t, ip));
        Take::Wait(t)
    }

    /// A slot for a stream of `ip` if it may have one now (it never queues).
    pub fn try_take(&mut self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let held = self.held(ip);
        let borrow = !self.limits.hard && self.in_use < self.limits.pool && self.waiting.is_empty();
        if held < self.limits.share || borrow {
            self.hold(ip);
            true
        } else {
            false
        }
    }

    /// A waiting stream gave up: it leaves the queue (`false` if it was not in it).
    pub fn cancel(&mut self, t: Ticket) -> bool {
        match self.waiting.iter().position(|(w, _)| *w == t) {
            Some(i) => {
                self.waiting.remove(i);
                true
            }
            None => false,
        }
    }

    /// A stream of `ip` ended and freed its slot: the waiting streams that hold a slot now.
    pub fn release(&mut self, ip: IpAddr) -> Vec<Ticket> {
        let ip = canonical(ip);
        if let Some(n) = self.held.get_mut(&ip) {
            *n -= 1;
            self.in_use -= 1;
            if *n == 0 {
                self.held.remove(&ip);
            }
        }
        let mut granted = Vec::new();
        // The waiter of the address holding the fewest goes first; if it may not have a slot,
        // no waiter may (an address holding more is no more entitled).
        while let Some(i) = self.neediest() {
            let (t, ip) = self.waiting[i];
            let may = self.held(ip) < self.limits.share
                || (!self.limits.hard && self.in_use < self.limits.pool);
            if !may {
                break;
            }
            self.waiting.remove(i);
            self.hold(ip);
            granted.push(t);
        }
        granted
    }

    /// Slots held now, all addresses.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Streams waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Slots `ip` holds now.
    pub fn held(&self, ip: IpAddr) -> usize {
        self.held.get(&canonical(ip)).copied().unwrap_or(0)
    }

    fn hold(&mut self, ip: IpAddr) {
        *self.held.entry(ip).or_insert(0) += 1;
        self.in_use += 1;
    }

    /// The index of the first waiter of the waiting address that holds the fewest slots.
    fn neediest(&self) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (i, (_, ip)) in self.waiting.iter().enumerate() {
            let held = self.held(*ip);
            if best.is_none_or(|(_, b)| held < b) {
                best = Some((i, held));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Addresses holding slots now.
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_alone_takes_the_whole_pool_then_waits() {
        let mut g = Grants::new(Limits::work_conserving(2, 8));
        let a = ip("10.0.0.1");
        for _ in 0..8 {
            assert_eq!(g.take(a), Take::Now);
        }
        assert_eq!(
            g.held(a),
            8,
            "past its share of 2 while nobody else wants a slot"
        );
        assert!(matches!(g.take(a), Take::Wait(_)), "the pool is full");
        assert!(!g.try_take(a));
        assert_eq!(g.waiting(), 1);
        assert_eq!(g.release(a).len(), 1, "its own waiter gets the slot freed");
        assert_eq!((g.in_use(), g.waiting()), (8, 0));
    }

    /// Share 2, pool 8, all 8 held by `a`; `b` holds none.
    fn pool_taken_by_one_address() -> (Grants, IpAddr, IpAddr) {
        let mut g = Grants::new(Limits::work_conserving(2, 8));
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        for _ in 0..8 {
            assert_eq!(g.take(a), Take::Now);
        }
        (g, a, b)
    }

    #[test]
    fn a_newcomer_gets_its_share_at_once_even_from_a_full_pool() {
        let (mut g, _, b) = pool_taken_by_one_address();
        assert_eq!(g.take(b), Take::Now);
        assert_eq!(g.take(b), Take::Now);
        assert_eq!(g.in_use(), 10, "the share is guaranteed beyond the pool");
        assert!(
            matches!(g.take(b), Take::Wait(_)),
            "past its share it waits"
        );
    }

    #[test]
    fn under_contention_freed_slots_go_to_the_address_holding_fewest_until_even() {
        let (mut g, a, b) = pool_taken_by_one_address();
        let wa: Vec<_> = (0..10).map(|_| g.take(a)).collect();
        let wb: Vec<_> = (0..10).map(|_| g.take(b)).collect();
        assert_eq!(wb.iter().filter(|t| **t == Take::Now).count(), 2);
        assert!(wa.iter().all(|t| matches!(t, Take::Wait(_))));
        // While others wait, an address past its share does not borrow even a free slot.
        let c = ip("10.0.0.3");
        assert!(g.try_take(c) && g.try_take(c) && !g.try_take(c));
        g.release(c);
        g.release(c);
        // a's streams end one by one: the first two only bring the pool back to its size
        // (b's share was given beyond it), then every slot a frees goes to b until they are even.
        let mut to_b = 0;
        while g.held(a) > g.held(b) {
            for t in g.release(a) {
                assert!(
                    wb.contains(&Take::Wait(t)),
                    "a slot freed went to a while b held fewer"
                );
                to_b += 1;
            }
        }
        assert_eq!((g.held(a), g.held(b)), (4, 4), "the pool is split evenly");
        assert_eq!(to_b, 2);
        // Even now: a slot a frees goes to a's own waiter (a then holds fewer than b).
        let back = g.release(a);
        assert_eq!(back.len(), 1);
        assert!(wa.contains(&Take::Wait(back[0])));
        assert_eq!((g.held(a), g.held(b), g.in_use()), (4, 4, 8));
    }

    #[test]
    fn a_hard_cap_never_borrows() {
        let mut g = Grants::new(Limits::hard(1));
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        assert_eq!(g.take(a), Take::Now);
        let Take::Wait(t) = g.take(a) else {
            panic!("one stream an address")
        };
        assert_eq!(g.take(b), Take::Now, "another address is not affected");
        assert_eq!(g.release(b), Vec::<Ticket>::new(), "b's slot is not a's");
        assert_eq!(g.release(a), vec![t]);
        assert_eq!(g.held(a), 1);
    }

    #[test]
    fn a_cancelled_wait_leaves_the_queue_and_idle_addresses_are_forgotten() {
        let mut g = Grants::new(Limits::work_conserving(1, 1));
        let a = ip("10.0.0.1");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        g.take(a);
        let Take::Wait(t) = g.take(mapped) else {
            panic!("the same address, mapped")
        };
        assert!(g.cancel(t));
        assert!(!g.cancel(t));
        assert_eq!(g.release(a), Vec::<Ticket>::new());
        assert_eq!((g.in_use(), g.waiting(), g.addresses()), (0, 0, 0));
    }
}
