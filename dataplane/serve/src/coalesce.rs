//! Request coalescing: concurrent misses for one key make one origin fetch. The first request
//! (the leader) fetches; the others (waiters) are served from the same fetch as it arrives,
//! whichever worker thread they are on.
//!
//! The leader publishes the response head, then every body chunk, into a shared [`Flight`]. A
//! waiter replays the chunks it has not seen and waits for more. Chunks are kept only while
//! someone holds the flight and only up to [`TAIL_LIMIT`] bytes: a larger object being stored
//! is streamed to waiters from the store as it is written (`Head::growing`); one that is not
//! stored is not shared (waiters fetch on their own). So the coalescing buffer never holds
//! more than a bounded amount of memory per key, and all tails together no more than the memory
//! plan's bound for them (the [`Share`] of `memory_bytes{part="coalescing_tails"}`): a body of
//! known length takes its bytes before its head is published ([`Flight::reserve`]; refused, it
//! is not tailed: waiters stream it from the store or fetch on their own), one of unknown length
//! as its chunks arrive (refused, the rest is not kept), and the leader's client that falls
//! behind reads from the tail only once the bytes for the rest are taken ([`Flight::keep_for`]),
//! so a tail it reads is never cut short by the bound. A chunk is handed out once the next one has
//! arrived, and the last one once the fetch is complete.
//!
//! A fill being stored answers its client and its waiters before its store write lands (the
//! disk is not on their path), and keeps its flight in the table until the write has landed: a
//! request that comes to a complete flight waits for that ([`Flight::landed`]) and then looks
//! the store up. So a client that has the whole body finds it stored (unless its write failed),
//! and never causes a second origin fetch for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use edgecache_host::{Charge, Share};
use edgecache_policy::StoredResponse;
use edgecache_store::Growing;
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
    /// Whether the chunks are kept in memory (up to [`TAIL_LIMIT`]) for the leader's own
    /// client to fall back on: `tail`, or a shareable body of unknown length.
    pub keep: bool,
    /// The stored copy being written, for waiters to stream from (a large known-length body).
    pub growing: Option<Arc<Growing>>,
    /// The response is cached as slices (its manifest is stored): waiters read the slices.
    pub sliced: bool,
}

/// Why a flight has no chunk to give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The fetch failed.
    Failed,
    /// The chunk arrived but was not kept (past the limit).
    NotKept,
}

/// How a fetch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The whole body arrived.
    Complete,
    /// The origin failed or cut the body short.
    Failed,
}

#[derive(Debug)]
struct State {
    head: Option<Head>,
    chunks: Vec<Bytes>,
    /// Bytes in `chunks`.
    kept: u64,
    /// Bytes taken for the tail from the coalescing tails' share (at least `kept`).
    charge: Charge,
    /// The body length reserved up front ([`Flight::reserve`]), when it is known.
    reserved: Option<u64>,
    /// More than [`TAIL_LIMIT`] arrived: chunks past it are not kept.
    overflowed: bool,
    end: Option<End>,
    /// The leader left the table: what it stored (if anything) is published.
    retired: bool,
}

/// One origin fetch in progress.
#[derive(Debug)]
pub struct Flight {
    state: Mutex<State>,
    changed: Notify,
}

impl Flight {
    /// A flight whose tail takes its bytes from `tails`.
    pub fn new(tails: Arc<Share>) -> Self {
        Flight {
            state: Mutex::new(State {
                head: None,
                chunks: Vec::new(),
                kept: 0,
                charge: Charge::new(tails),
                reserved: None,
                overflowed: false,
                end: None,
                retired: false,
            }),
            changed: Notify::new(),
        }
    }

    /// Take the bytes of a tail of `len` (a known length, at most [`TAIL_LIMIT`]) before the
    /// head says it is tailed; false when the tails' share has no room for it.
    pub fn reserve(&self, len: u64) -> bool {
        let mut s = self.lock();
        let ok = s.charge.cover(len);
        if ok {
            s.reserved = Some(len);
        }
        ok
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_head(&self, head: Head) {
        self.lock().head = Some(head);
        self.changed.notify_waiters();
    }

    /// Keep a chunk for the flight's readers; false when it is not kept (not a kept flight,
    /// or past [`TAIL_LIMIT`] or the memory plan's bound: nothing after it is kept either).
    pub fn push(&self, chunk: Bytes) -> bool {
        let mut s = self.lock();
        if !s.head.as_ref().is_some_and(|h| h.keep) || s.overflowed {
            return false;
        }
        let kept = s.kept + chunk.len() as u64;
        if kept > TAIL_LIMIT || !s.charge.cover(kept) {
            s.overflowed = true;
            // Nobody reads past here: what is not kept is given back.
            let held = s.kept;
            s.charge.set(held);
        } else {
            s.kept += chunk.len() as u64;
            s.chunks.push(chunk);
        }
        let kept = !s.overflowed;
        drop(s);
        self.changed.notify_waiters();
        kept
    }

    /// Whether a reader may follow the tail from the chunk at `index` on: every chunk so far
    /// was kept, and the bytes of the rest (the reserved length, else up to [`TAIL_LIMIT`]) are
    /// taken now, so the bound never cuts it short.
    pub fn keep_for(&self, index: usize) -> bool {
        let mut s = self.lock();
        let all = s.reserved.unwrap_or(TAIL_LIMIT);
        s.head.as_ref().is_some_and(|h| h.keep)
            && !s.overflowed
            && index <= s.chunks.len()
            && s.charge.cover(all)
    }

    pub fn finish(&self, end: End) {
        let mut s = self.lock();
        s.end = Some(end);
        drop(s);
        self.changed.notify_waiters();
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

    /// Wait for the chunk at `index`: `Ok(Some(chunk))` once the next chunk has arrived (or
    /// was not kept) or the fetch is complete, `Ok(None)` past the last one, `Err` when the
    /// fetch failed or the chunk was not kept (past [`TAIL_LIMIT`]).
    pub async fn chunk(&self, index: usize) -> Result<Option<Bytes>, Missing> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.lock();
                let settled =
                    index + 1 < s.chunks.len() || s.overflowed || s.end == Some(End::Complete);
                match (s.chunks.get(index), s.end) {
                    (Some(c), _) if settled => return Ok(Some(c.clone())),
                    (None, _) if s.overflowed => return Err(Missing::NotKept),
                    (None, Some(End::Complete)) => return Ok(None),
                    (_, Some(_)) => return Err(Missing::Failed),
                    _ => {}
                }
            }
            notified.await;
        }
    }

    /// Whether the whole body has arrived.
    pub fn complete(&self) -> bool {
        self.lock().end == Some(End::Complete)
    }

    /// Wait until the fetch has ended and its leader has left the table: its store write has
    /// landed (published, or failed) by then.
    pub async fn landed(&self) -> End {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.lock();
                if let (Some(end), true) = (s.end, s.retired) {
                    return end;
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
    /// The bytes all tails hold, and their bound (unbounded by default).
    tails: Arc<Share>,
}

/// Keys remembered for hit-for-pass at most; past it, expired entries go, and new ones are not
/// remembered until there is room (the cost of forgetting one is one coalesced wait).
pub const PASS_ENTRIES_MAX: usize = 65_536;

impl Coalescer {
    /// Tails take their bytes from `tails`.
    pub fn new(tails: Arc<Share>) -> Self {
        Coalescer {
            tails,
            ..Coalescer::default()
        }
    }

    pub fn join(self: &Arc<Self>, key: &[u8]) -> Role {
        let mut map = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = map.get(key) {
            return Role::Waiter(f.clone());
        }
        let flight = Arc::new(Flight::new(self.tails.clone()));
        map.insert(key.to_vec(), flight.clone());
        Role::Leader(LeaderGuard {
            table: self.clone(),
            key: key.to_vec(),
            flight,
        })
    }

    /// The fetch for `key` whose body is complete and whose store write is landing, if any
    /// (see the module's notes).
    pub fn landing(&self, key: &[u8]) -> Option<Arc<Flight>> {
        let map = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).filter(|f| f.complete()).cloned()
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

    /// A successful unsafe request changed the resource at `key`: new requests must not join
    /// a fetch in progress for it (it may carry the old state; the store's invalidation mark
    /// keeps it from being published).
    pub fn invalidate(&self, key: &[u8]) {
        self.flights
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
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
        drop(map);
        self.flight.lock().retired = true;
        self.flight.changed.notify_waiters();
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
            keep: tail,
            growing: None,
            sliced: false,
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
    async fn a_complete_flight_has_landed_once_its_leader_leaves() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!()
        };
        let f = guard.flight.clone();
        f.set_head(head(true));
        f.finish(End::Complete);
        assert!(f.complete());
        let early = tokio::time::timeout(std::time::Duration::from_millis(20), f.landed());
        assert!(
            early.await.is_err(),
            "complete, but its write has not landed"
        );
        assert!(
            matches!(c.join(b"k"), Role::Waiter(_)),
            "joined until it has landed"
        );
        guard.retire();
        assert_eq!(f.landed().await, End::Complete);
        assert!(matches!(c.join(b"k"), Role::Leader(_)));
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
    async fn an_invalidated_flight_is_no_longer_joined() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!()
        };
        c.invalidate(b"k");
        let Role::Leader(_second) = c.join(b"k") else {
            panic!("a new request leads a new fetch")
        };
        drop(guard);
        assert!(
            matches!(c.join(b"k"), Role::Waiter(_)),
            "the old leader's guard does not remove the new flight"
        );
    }

    #[tokio::test]
    async fn a_chunk_is_handed_out_once_the_next_arrives_or_the_fetch_completes() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!()
        };
        let f = guard.flight.clone();
        f.set_head(head(true));
        f.push(Bytes::from_static(b"a"));
        let pending = tokio::time::timeout(std::time::Duration::from_millis(20), f.chunk(0));
        assert!(pending.await.is_err(), "the latest chunk is held back");
        f.push(Bytes::from_static(b"b"));
        assert_eq!(f.chunk(0).await, Ok(Some(Bytes::from_static(b"a"))));
        f.finish(End::Complete);
        assert_eq!(f.chunk(1).await, Ok(Some(Bytes::from_static(b"b"))));
        assert_eq!(f.chunk(2).await, Ok(None));
    }

    #[tokio::test]
    async fn chunks_past_the_tail_limit_are_not_kept_and_their_readers_fail() {
        let c = Arc::new(Coalescer::default());
        let Role::Leader(guard) = c.join(b"k") else {
            panic!()
        };
        let f = guard.flight.clone();
        f.set_head(head(true));
        let half = Bytes::from(vec![0u8; (TAIL_LIMIT / 2) as usize]);
        f.push(half.clone());
        f.push(half.clone());
        assert!(f.keep_for(2));
        f.push(Bytes::from_static(b"one too many"));
        assert!(!f.keep_for(2), "past the limit nothing more is kept");
        assert!(f.lock().kept <= TAIL_LIMIT);
        f.finish(End::Complete);
        assert!(f.chunk(1).await.is_ok());
        assert_eq!(
            f.chunk(2).await,
            Err(Missing::NotKept),
            "never a body that looks complete"
        );
    }

    #[tokio::test]
    async fn tails_stay_within_their_share() {
        let share = Arc::new(Share::new(100));
        let c = Arc::new(Coalescer::new(share.clone()));
        let leader = |key: &[u8]| match c.join(key) {
            Role::Leader(g) => g,
            Role::Waiter(_) => panic!("leads"),
        };
        // A known length takes its bytes up front; the next one finds no room.
        let a = leader(b"a");
        assert!(a.flight.reserve(60));
        let b = leader(b"b");
        assert!(!b.flight.reserve(60), "no room: not tailed");
        assert_eq!(share.held(), 60);
        // Unknown length: chunks are kept while they fit, then nothing more.
        b.flight.set_head(head(true));
        b.flight.push(Bytes::from(vec![0u8; 30]));
        assert_eq!(share.held(), 90);
        b.flight.push(Bytes::from(vec![0u8; 30]));
        assert!(!b.flight.keep_for(1), "past the share: not kept");
        assert_eq!(share.held(), 90, "what is kept stays held");
        // A reader of an unknown-length tail is let in only with the rest taken.
        let d = leader(b"d");
        d.flight.set_head(head(true));
        assert!(!d.flight.keep_for(0), "no room for the rest of it");
        // Bytes go back when the flight goes, whoever held it last.
        let kept = b.flight.clone();
        drop(b);
        assert_eq!(share.held(), 90, "a reader still holds the tail");
        drop(kept);
        assert_eq!(share.held(), 60);
        drop(a);
        assert_eq!(share.held(), 0);
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
