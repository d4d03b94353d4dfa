//! Who holds the admin listener's connections: at most `per_ip` from one address and `total`
//! in all. A connection past either cap takes the place of the oldest one that has no request
//! in progress (of its own address at the per-address cap, else of the address holding the
//! most), so however many idle connections an address opens, a probe that sends its request
//! gets in; it is refused only when every such connection is busy. The decisions here are pure
//! (no socket); the listener closes the connection a [`Slot`] was taken from.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

const IDLE: u8 = 0;
const BUSY: u8 = 1;
const TAKEN: u8 = 2;

/// One open admin connection.
#[derive(Debug)]
pub struct Slot {
    id: u64,
    ip: IpAddr,
    state: AtomicU8,
    taken: Notify,
}

impl Slot {
    /// A request arrived: the slot is busy until [`Slot::end`]. False when the slot was taken
    /// for another connection (this one is being closed).
    pub fn begin(&self) -> bool {
        (self.state)
            .compare_exchange(IDLE, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The answer is given: idle again.
    pub fn end(&self) {
        let _ = (self.state).compare_exchange(BUSY, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Take the slot if no request is in progress on it; its connection is told to close.
    fn take(&self) -> bool {
        let taken = (self.state)
            .compare_exchange(IDLE, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if taken {
            self.taken.notify_one();
        }
        taken
    }

    /// Resolves once the slot was taken for another connection.
    pub async fn taken(&self) {
        self.taken.notified().await
    }
}

/// What became of a new connection.
#[derive(Debug)]
pub enum Admit {
    /// Served in a slot of its own.
    Open(Arc<Slot>),
    /// Served in the place of an idle connection, now told to close.
    Replaced(Arc<Slot>),
    /// Refused: every connection it could replace is busy.
    Refused,
}

/// The open admin connections.
#[derive(Debug)]
pub struct Slots {
    per_ip: usize,
    total: usize,
    next_id: u64,
    /// Each address's connections, oldest first.
    open: HashMap<IpAddr, Vec<Arc<Slot>>>,
    count: usize,
}

impl Slots {
    pub fn new(per_ip: usize, total: usize) -> Slots {
        Slots {
            per_ip: per_ip.max(1),
            total: total.max(1),
            next_id: 0,
            open: HashMap::new(),
            count: 0,
        }
    }

    /// Open connections.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count
    }

    /// A new connection from `ip`.
    pub fn admit(&mut self, ip: IpAddr) -> Admit {
        let mine = self.open.get(&ip).map_or(0, Vec::len);
        let replaced = mine >= self.per_ip || self.count >= self.total;
        let made_room = if mine >= self.per_ip {
            self.take_oldest_idle(ip)
        } else if self.count >= self.total {
            let mut by_size: Vec<(usize, IpAddr)> =
                self.open.iter().map(|(ip, v)| (v.len(), *ip)).collect();
            by_size.sort_unstable_by(|a, b| b.cmp(a));
            by_size
                .into_iter()
                .any(|(_, other)| self.take_oldest_idle(other))
        } else {
            true
        };
        if !made_room {
            return Admit::Refused;
        }
        self.next_id += 1;
        let slot = Arc::new(Slot {
            id: self.next_id,
            ip,
            state: AtomicU8::new(IDLE),
            taken: Notify::new(),
        });
        self.open.entry(ip).or_default().push(slot.clone());
        self.count += 1;
        if replaced {
            Admit::Replaced(slot)
        } else {
            Admit::Open(slot)
        }
    }

    /// Take the oldest idle slot of `ip`'s, if any.
    fn take_oldest_idle(&mut self, ip: IpAddr) -> bool {
        let Some(list) = self.open.get_mut(&ip) else {
            return false;
        };
        let Some(i) = list.iter().position(|s| s.take()) else {
            return false;
        };
        list.remove(i);
        if list.is_empty() {
            self.open.remove(&ip);
        }
        self.count -= 1;
        true
    }

    /// The connection of `slot` closed (nothing when its slot was taken: it was let go then).
    pub fn close(&mut self, slot: &Slot) {
        let Some(list) = self.open.get_mut(&slot.ip) else {
            return;
        };
        if let Some(i) = list.iter().position(|s| s.id == slot.id) {
            list.remove(i);
            self.count -= 1;
        }
        if list.is_empty() {
            self.open.remove(&slot.ip);
        }
    }
}

/// A log line at most once per interval for an event that may come in floods, with the count
/// of those it stands for.
#[derive(Debug)]
pub struct LogEvery {
    every: Duration,
    last: Option<Instant>,
    pending: u64,
}

impl LogEvery {
    pub fn new(every: Duration) -> LogEvery {
        LogEvery {
            every,
            last: None,
            pending: 0,
        }
    }

    /// One more event at `now`: `Some(events since the last line, this one included)` when a
    /// line is due.
    pub fn note(&mut self, now: Instant) -> Option<u64> {
        self.pending += 1;
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < self.every)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn slot(a: Admit) -> Arc<Slot> {
        match a {
            Admit::Open(s) | Admit::Replaced(s) => s,
            Admit::Refused => panic!("refused"),
        }
    }

    #[test]
    fn past_its_cap_an_address_replaces_its_oldest_idle_connection_or_is_refused() {
        let mut s = Slots::new(2, 10);
        let a1 = slot(s.admit(ip(1)));
        let a2 = slot(s.admit(ip(1)));
        assert!(a1.begin());
        // a1 is busy: a2, the oldest idle one, makes room.
        assert!(matches!(s.admit(ip(1)), Admit::Replaced(_)));
        assert!(!a2.begin(), "a2 was taken");
        assert_eq!(s.len(), 2);
        // Another address is not touched by this one's excess.
        let b1 = slot(s.admit(ip(2)));
        assert!(matches!(s.admit(ip(1)), Admit::Replaced(_)));
        assert!(b1.begin());
        b1.end();
        // Both of ip(1)'s busy: refused.
        let mut s = Slots::new(2, 10);
        let (x, y) = (slot(s.admit(ip(1))), slot(s.admit(ip(1))));
        assert!(x.begin() && y.begin());
        assert!(matches!(s.admit(ip(1)), Admit::Refused));
        x.end();
        assert!(matches!(s.admit(ip(1)), Admit::Replaced(_)));
    }

    #[test]
    fn at_the_total_cap_the_busiest_address_makes_room_and_closed_slots_go() {
        let mut s = Slots::new(3, 4);
        let a: Vec<_> = (0..3).map(|_| slot(s.admit(ip(1)))).collect();
        let b = slot(s.admit(ip(2)));
        // Full: a probe from a third address takes ip(1)'s oldest idle slot.
        assert!(matches!(s.admit(ip(3)), Admit::Replaced(_)));
        assert!(!a[0].begin());
        assert_eq!(s.len(), 4);
        // A closed connection frees its slot; one taken before is not counted twice.
        s.close(&b);
        s.close(&a[0]);
        assert_eq!(s.len(), 3);
        assert!(matches!(s.admit(ip(2)), Admit::Open(_)));
    }

    #[test]
    fn a_flood_of_events_is_one_line_per_interval_with_its_count() {
        let mut l = LogEvery::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(l.note(t0), Some(1));
        for i in 1..1000 {
            assert_eq!(l.note(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(l.note(t0 + Duration::from_secs(10)), Some(1000));
        assert_eq!(l.note(t0 + Duration::from_secs(11)), None);
    }
}
