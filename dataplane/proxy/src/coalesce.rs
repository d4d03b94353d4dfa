//! Request coalescing: concurrent misses for one key make one origin fetch. The first request
//! (the leader) fetches; the others (waiters) are served from the same fetch as it arrives,
//! whichever worker thread they are on.
//!
//! The leader publishes the response head, then every body chunk, into a shared [`Flight`]. A
//! waiter replays the chunks it has not seen and waits for more. Chunks are kept only while the
//! fetch runs and only up to [`TAIL_LIMIT`] bytes: for a larger object waiters wait for the fetch
//! to finish and then read the stored copy (or fetch on their own if it was not stored), so the
//! coalescing buffer never holds more than a bounded amount of memory per key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use edgecache_cache::policy::StoredResponse;
use tokio::sync::Notify;

/// Bodies up to this size are replayed to waiters from memory while they arrive.
pub const TAIL_LIMIT: u64 = 8 << 20;

/// The response head the leader got.
#[derive(Debug, Clone)]
pub struct Head {
    /// The response as it would be stored (selected with the leader's request headers).
    pub stored: StoredResponse,
    /// Whether waiters may share this response at all (it is storable, so shareable).
    pub shareable: bool,
    /// Whether waiters can tail the body from memory (shareable and small enough).
    pub tail: bool,
}

/// How a fetch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The whole body arrived.
    Complete,
    /// The origin failed or cut the body short.
    Failed,
}

#[derive(Debug, Default)]
struct State {
    head: Option<Head>,
    chunks: Vec<Bytes>,
    end: Option<End>,
    /// An unsafe request invalidated the key while this fetch ran: its response may predate
    /// the change, so it must not be published (RFC 9111 4.4).
    invalidated: bool,
}

/// One origin fetch in progress.
#[derive(Debug, Default)]
pub struct Flight {
    state: Mutex<State>,
    changed: Notify,
}

impl Flight {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_head(&self, head: Head) {
        self.lock().head = Some(head);
        self.changed.notify_waiters();
    }

    pub fn push(&self, chunk: Bytes) {
        let mut s = self.lock();
        if s.head.as_ref().is_some_and(|h| h.tail) {
            s.chunks.push(chunk);
            drop(s);
            self.changed.notify_waiters();
        }
    }

    pub fn finish(&self, end: End) {
        let mut s = self.lock();
        s.end = Some(end);
        drop(s);
        self.changed.notify_waiters();
    }

    /// Whether the key was invalidated while this fetch ran (see [`Coalescer::invalidate`]).
    pub fn invalidated(&self) -> bool {
        self.lock().invalidated
    }

    /// Wait for the head (or for the fetch to end without one).
    pub async fn head(&self) -> Option<Head> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.lock();
                if let Some(h) = &s.head {
                    return Some(h.clone());
                }
                if s.end.is_some() {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Wait for the chunk at `index`: `Ok(Some(chunk))`, `Ok(None)` at a complete end,
    /// `Err(())` when the fetch failed.
    pub async fn chunk(&self, index: usize) -> Result<Option<Bytes>, ()> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.lock();
                if let Some(c) = s.chunks.get(index) {
                    return Ok(Some(c.clone()));
                }
                match s.end {
                    Some(End::Complete) => return Ok(None),
                    Some(End::Failed) => return Err(()),
                    None => {}
                }
            }
            notified.await;
        }
    }

    /// Wait until the fetch has ended.
    pub async fn ended(&self) -> End {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(end) = self.lock().end {
                return end;
            }
            notified.await;
        }
    }
}

/// The role a request gets for its key.
pub enum Role {
    /// Fetch from the origin and publish into the flight; drop the guard when done.
    Leader(LeaderGuard),
    /// Another request is fetching: follow its flight.
    Waiter(Arc<Flight>),
}

/// The table of fetches in progress, shared by all workers, and the keys in hit-for-pass.
#[derive(Debug, Default)]
pub struct Coalescer {
    flights: Mutex<HashMap<Vec<u8>, Arc<Flight>>>,
    passes: Mutex<HashMap<Vec<u8>, Instant>>,
}

/// Keys remembered for hit-for-pass at most; past it, expired entries go, and new ones are not
/// remembered until there is room (the cost of forgetting one is one coalesced wait).
pub const PASS_ENTRIES_MAX: usize = 65_536;

impl Coalescer {
    pub fn join(self: &Arc<Self>, key: &[u8]) -> Role {
        let mut map = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = map.get(key) {
            return Role::Waiter(f.clone());
        }
        let flight = Arc::new(Flight::default());
        map.insert(key.to_vec(), flight.clone());
        Role::Leader(LeaderGuard {
            table: self.clone(),
            key: key.to_vec(),
            flight,
        })
    }

    /// Requests for `key` go to the origin on their own until `until` (hit-for-pass).
    pub fn pass_until(&self, key: &[u8], until: Instant) {
        let mut passes = self.passes.lock().unwrap_or_else(|p| p.into_inner());
        if passes.len() >= PASS_ENTRIES_MAX && !passes.contains_key(key) {
            let now = Instant::now();
            passes.retain(|_, t| *t > now);
            if passes.len() >= PASS_ENTRIES_MAX {
                return;
            }
        }
        passes.insert(key.to_vec(), until);
    }

    /// Whether `key` is in hit-for-pass now (an expired entry is dropped).
    pub fn passes(&self, key: &[u8]) -> bool {
        let mut passes = self.passes.lock().unwrap_or_else(|p| p.into_inner());
        match passes.get(key) {
            Some(t) if *t > Instant::now() => true,
            Some(_) => {
                passes.remove(key);
                false
            }
            None => false,
        }
    }

    /// A successful unsafe request changed the resource at `key`: a fetch in progress for it
    /// must not be stored (it may carry the old state), and new requests must not join it.
    pub fn invalidate(&self, key: &[u8]) {
        let flight = self
            .flights
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some(f) = flight {
            f.lock().invalidated = true;
        }
        // What the origin says of it next is new: no pass either.
        self.passes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.flights.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Held by the leader; removes the flight from the table when dropped, and marks it failed if
/// the leader never finished it (so waiters never hang).
pub struct LeaderGuard {
    table: Arc<Coalescer>,
    key: Vec<u8>,
    pub flight: Arc<Flight>,
}

impl LeaderGuard {
    /// Stop new requests from joining (e.g. once the object is stored and servable as a hit).
    pub fn retire(&self) {
        let mut map = self.table.flights.lock().unwrap_or_else(|p| p.into_inner());
        if map
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
        {
            map.remove(&self.key);
        }
    }
}

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        self.retire();
        if self.flight.lock().end.is_none() {
            self.flight.finish(End::Failed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(tail: bool) -> Head {
        let now = std::time::SystemTime::now();
        let stored = StoredResponse::from_fields(
            &http::HeaderMap::new(),
            http::StatusCode::OK,
            &http::HeaderMap::new(),
            now,
            now,
        );
        Head {
            stored,
            shareable: true,
            tail,
        }
    }

    #[tokio::test]
    async fn waiters_follow_the_leader_across_threads() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!("first is leader")
        };
        let Role::Waiter(f) = c.join(b"k") else {
            panic!("second waits")
        };
        let waiter = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                assert!(f.head().await.is_some());
                let mut body = Vec::new();
                let mut i = 0;
                while let Some(c) = f.chunk(i).await.unwrap() {
                    body.extend_from_slice(&c);
                    i += 1;
                }
                body
            })
        });
        guard.flight.set_head(head(true));
        guard.flight.push(Bytes::from_static(b"hello "));
        guard.flight.push(Bytes::from_static(b"world"));
        guard.flight.finish(End::Complete);
        drop(guard);
        assert_eq!(waiter.join().unwrap(), b"hello world");
        assert_eq!(c.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_leader_that_vanishes_fails_its_waiters() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!()
        };
        let Role::Waiter(f) = c.join(b"k") else {
            panic!()
        };
        drop(guard);
        assert!(f.head().await.is_none());
        assert_eq!(f.ended().await, End::Failed);
        assert!(
            matches!(c.join(b"k"), Role::Leader(_)),
            "a new request leads again"
        );
    }

    #[tokio::test]
    async fn an_invalidated_flight_is_marked_and_no_longer_joined() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!()
        };
        c.invalidate(b"k");
        assert!(guard.flight.invalidated());
        let Role::Leader(second) = c.join(b"k") else {
            panic!("a new request leads a new fetch")
        };
        assert!(!second.flight.invalidated());
        drop(guard);
        assert!(
            matches!(c.join(b"k"), Role::Waiter(_)),
            "the old leader's guard does not remove the new flight"
        );
    }

    #[tokio::test]
    async fn large_bodies_are_not_kept_for_waiters() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!()
        };
        guard.flight.set_head(head(false));
        guard.flight.push(Bytes::from_static(b"x"));
        assert!(guard.flight.lock().chunks.is_empty());
    }
}
