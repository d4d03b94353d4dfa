//! The RAM tier: a byte-bounded map of small, hot, already verified objects.
//!
//! - Size: the tier counts each entry's key, meta and body bytes plus an estimated overhead,
//!   and keeps the total within its capacity (the disk index has its own bounded share of the
//!   memory plan, `StoreConfig::index_bytes`).
//! - Eligible: records (header + padded body) of at most [`RAM_MAX_RECORD`] (256 KiB), and
//!   larger ones of at most a [`LARGE_SHARE`]th of the tier ([`RamTier::max_record`]). A record
//!   read whole (up to 1 MiB + 64 KiB) is copied in from that read. A larger one is streamed
//!   from disk in chunks and copied in as the verified chunks pass, when a disk hit streams the
//!   whole body (never from a range or a stream dropped part way).
//!   What such copies in progress hold is counted in the tier's bytes from their start
//!   ([`RamTier::reserve`]), at most an eighth of the tier at a time.
//! - Admission: an object enters on a *disk hit*, never on write. A response seen once (the
//!   miss that stored it) stays on disk only; the one-hit wonders that dominate CDN traffic
//!   never take RAM. While the tier has room every disk hit is admitted. Once it is full, the
//!   tier keeps a frequency sketch of its lookups (RAM hits and disk hits,
//!   [`super::frequency`], halved every ten times as many lookups as the tier holds objects)
//!   and admits a record only if it was asked for at least [`ADMIT_MIN_LOOKUPS`] times in the
//!   window and more often than the entry it would evict (TinyLFU). Under skewed traffic the
//!   popular objects win their place and keep it; when reads are spread over a working set
//!   much larger than the tier (uniform ids), the tier stays as it is instead of copying each
//!   object in and evicting another for nothing (bench/BENCHMARKS.md, tuning log).
//! - Eviction: CLOCK (second chance). A hit sets a reference bit under a short lock and moves
//!   nothing; the hand gives referenced entries a second round and evicts unreferenced ones. It
//!   approximates LRU at O(1) per operation and, with the admission rule above, resists scans.
//! - Copies being sent: a RAM hit's body shares the copy's bytes, so a copy evicted while a
//!   client still receives it stays in memory until that send ends. The tier counts each
//!   copy's body from its insert until its last holder drops it ([`RamTier::usage`]), and
//!   keeps what it holds and what such sends still pin within its capacity: slow readers of
//!   evicted copies shrink what the tier admits instead of growing the process. This is what
//!   bounds the memory of RAM hits of large objects, which take no stream slot of their
//!   client's address (they hold no I/O buffer).
//! - Coherence: entries are keyed by the location of the disk record they copy (segment,
//!   epoch, offset: written once) and carry its primary key, variant key, meta and lengths, so
//!   a RAM hit needs no disk read. A lookup only uses an entry for a location the index still
//!   has under the same primary key; purges, replacements, rewrites, index evictions and
//!   segment reclaims remove entries.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::frequency::{FrequencySketch, key_hash};
use super::state::LocId;

/// Largest record kept in RAM whatever the tier's size (256 KiB). 1 MiB records were measured
/// and rejected: zipf gained 40% at first, but copying 1 MiB records in and out made the worker
/// CPU-bound and got slower over a full run (bench/BENCHMARKS.md, tuning log).
pub const RAM_MAX_RECORD: u64 = 256 * 1024;

/// A record larger than [`RAM_MAX_RECORD`] may be kept when it takes at most this fraction of
/// the tier: a popular 1 MiB video segment or download lives in RAM once the tier has 64 MiB,
/// and no single object can empty a tier of small ones.
pub const LARGE_SHARE: u64 = 64;

/// Copies of large records in progress may hold at most this fraction of the tier.
const RESERVED_SHARE: u64 = 8;

type Key = LocId;

/// The caller's parsed form of a record's meta (the data plane's decoded stored response),
/// kept with its RAM copy so that a RAM hit does not parse the meta again. Opaque to the store.
pub type Parsed = Arc<dyn Any + Send + Sync>;

/// What a parsed meta is counted as beyond the meta's own length (its parsed fields, their
/// allocations and the `Arc`).
pub const PARSED_OVERHEAD: u64 = 1024;

/// A record's copy: what a RAM hit returns.
#[derive(Clone)]
pub(crate) struct Copy {
    pub primary: Bytes,
    pub variant: Bytes,
    pub meta: Bytes,
    pub header_len: u32,
    pub seq: u64,
    pub body: Bytes,
    /// Attached by [`RamTier::attach`] after the first RAM hit.
    pub parsed: Option<Parsed>,
}

impl std::fmt::Debug for Copy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Copy")
            .field("meta", &self.meta.len())
            .field("body", &self.body.len())
            .field("seq", &self.seq)
            .field("parsed", &self.parsed.is_some())
            .finish_non_exhaustive()
    }
}

/// The sketch's hash of a record.
fn hash_of(primary: &[u8], id: LocId) -> u64 {
    let mut at = [0u8; 20];
    at[..4].copy_from_slice(&id.seg.to_le_bytes());
    at[4..12].copy_from_slice(&id.epoch.to_le_bytes());
    at[12..].copy_from_slice(&id.off.to_le_bytes());
    key_hash(primary, &at)
}

struct Slot {
    copy: Copy,
    id: u64,
    /// The record's [`hash_of`] (its frequency sketch entry), computed once at insert.
    hash: u64,
    referenced: bool,
    /// What its parsed meta is counted as (0 until one is attached).
    parsed_cost: u64,
}

/// Heap bytes of a slot beyond its key, meta and body bytes: the map slot, the CLOCK ring
/// entry, the `Bytes` headers, allocator rounding and fragmentation under churn. Measured with
/// `examples/store_bench.rs --size 4096 --count 100000 --ram 125829120`: about 5.6 KiB of RSS
/// per 4 KiB object in the tier (its key, meta and body add up to 4.1 KiB).
const SLOT_OVERHEAD: u64 = 1024;

impl Slot {
    fn cost(&self) -> u64 {
        let c = &self.copy;
        (c.meta.len() + c.body.len() + c.primary.len() + c.variant.len()) as u64
            + SLOT_OVERHEAD
            + self.parsed_cost
    }
}

struct Inner {
    /// Keyed by locations the store made: foldhash, not SipHash (no client picks them).
    map: HashMap<Key, Slot, foldhash::fast::RandomState>,
    ring: VecDeque<(Key, u64)>,
    bytes: u64,
    next_id: u64,
    /// Lookups per key in the current window (admission once the tier is full).
    sketch: FrequencySketch,
    /// Bytes of `bytes` held for copies of large records in progress ([`RamTier::reserve`]).
    reserved: u64,
    /// Body bytes of the entries in `map` (counted in `bytes` too).
    resident_bodies: u64,
}

/// Lookups within the sketch's window a record needs before it may replace another in a full
/// tier (TinyLFU admission). With 2, uniform traffic over a working set ten times the tier
/// still copied in a record whenever chance (and the count-min sketch's overestimate) gave it
/// a second lookup, about one disk hit in eight, evicting another for nothing. With 3 (lab,
/// alternating 12 s rounds, bench/BENCHMARKS.md tuning log): 4 KiB uniform 26 µs per hit against
/// 27-28, zipf 47.7-50.8k req/s against 45.9-48.1k; 100 KiB zipf 26.8-28.3k against 25.4-25.5k.
pub const ADMIT_MIN_LOOKUPS: u8 = 3;

/// Ring entries (live or stale) from the CLOCK hand examined for the admission victim.
const VICTIM_SCAN: usize = 32;

impl Inner {
    /// Take out of the counts an entry that left `map`.
    fn forget(&mut self, s: &Slot) {
        self.bytes -= s.cost();
        self.resident_bodies -= s.copy.body.len() as u64;
    }

    /// Count a lookup of `hash`; the window is ten times the tier's object count.
    fn seen(&mut self, hash: u64) {
        let sample = 10 * self.map.len().max(64) as u64;
        self.sketch.increment(hash, sample);
    }

    /// The highest estimated frequency among the entries the CLOCK hand would evict next to
    /// free `need` bytes: the unreferenced live entries among the next few (more for a large
    /// record) until their bytes cover `need`, else the next live one. `None` when empty.
    fn victim_frequency(&self, need: u64) -> Option<u8> {
        let scan = if need > RAM_MAX_RECORD {
            4 * VICTIM_SCAN
        } else {
            VICTIM_SCAN
        };
        let (mut first, mut most, mut freed) = (None, None::<u8>, 0u64);
        for (k, id) in self.ring.iter().take(scan) {
            let Some(s) = self.map.get(k).filter(|s| s.id == *id) else {
                continue;
            };
            let f = self.sketch.estimate(s.hash);
            first.get_or_insert(f);
            if s.referenced {
                continue;
            }
            most = Some(most.map_or(f, |m| m.max(f)));
            freed += s.cost();
            if freed >= need {
                break;
            }
        }
        most.or(first)
    }
}

pub(crate) struct RamTier {
    cap: u64,
    inner: Mutex<Inner>,
    /// Body bytes of every copy the tier made that is still alive: in the tier, or evicted and
    /// still held by a RAM hit's response ([`Counted`]).
    live: Arc<AtomicU64>,
}

/// A copy's body bytes, counted in the tier's `live` from the insert until the last clone
/// (the tier's, or a RAM hit's being sent) is dropped.
struct Counted {
    body: Bytes,
    live: Arc<AtomicU64>,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(self.body.len() as u64, Relaxed);
    }
}

impl RamTier {
    /// A tier of `cap` bytes, its frequency sketch included.
    pub fn new(cap: u64) -> RamTier {
        let mut t = RamTier::for_entries(cap);
        let sketch = t.lock().sketch.bytes() as u64;
        t.cap = cap.saturating_sub(sketch);
        t
    }

    /// A tier whose entries may take `cap` bytes (its sketch comes on top).
    fn for_entries(cap: u64) -> RamTier {
        // Sized for the most records the tier could hold (small ones).
        let items = if cap == 0 {
            0
        } else {
            cap / (4096 + SLOT_OVERHEAD)
        };
        let sketch = FrequencySketch::for_items(items);
        RamTier {
            cap,
            inner: Mutex::new(Inner {
                map: HashMap::default(),
                ring: VecDeque::new(),
                bytes: 0,
                next_id: 0,
                sketch,
                reserved: 0,
                resident_bodies: 0,
            }),
            live: Arc::default(),
        }
    }

    /// What the tier counts against its capacity: its entries (and reservations), plus the
    /// bodies of evicted copies that RAM hits still hold.
    fn held(&self, g: &Inner) -> u64 {
        let pinned = self.live.load(Relaxed).saturating_sub(g.resident_bodies);
        g.bytes.saturating_add(pinned)
    }

    pub fn enabled(&self) -> bool {
        self.cap > 0
    }

    /// The largest record the tier keeps: [`RAM_MAX_RECORD`], or a [`LARGE_SHARE`]th of the
    /// tier when that is more.
    pub fn max_record(&self) -> u64 {
        RAM_MAX_RECORD.max(self.cap / LARGE_SHARE)
    }

    /// Hold `len` bytes of the tier for a copy of a large record in progress (evicting what
    /// that needs, as an insert would); `false` when copies in progress already hold an
    /// eighth of the tier. Give them back with [`RamTier::release`] before inserting the copy.
    pub fn reserve(&self, len: u64) -> bool {
        let cap = self.cap;
        let mut g = self.lock();
        if g.reserved.saturating_add(len) > cap / RESERVED_SHARE {
            return false;
        }
        g.reserved += len;
        g.bytes += len;
        self.evict(&mut g);
        true
    }

    /// Give back bytes held by [`RamTier::reserve`].
    pub fn release(&self, len: u64) {
        let mut g = self.lock();
        let len = len.min(g.reserved);
        g.reserved -= len;
        g.bytes -= len.min(g.bytes);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The copy of the record at `at`, if the tier has it under `primary`.
    pub fn get(&self, primary: &[u8], at: LocId) -> Option<Copy> {
        if !self.enabled() {
            return None;
        }
        let mut g = self.lock();
        let slot = g.map.get_mut(&at)?;
        if slot.copy.primary != primary {
            return None;
        }
        slot.referenced = true;
        let (found, hash) = (slot.copy.clone(), slot.hash);
        g.seen(hash);
        Some(found)
    }

    /// Should a record of `len` bytes found on disk be copied in? Counts the lookup; yes while
    /// the tier has room for it; once it is full, only if the record was asked for at least
    /// [`ADMIT_MIN_LOOKUPS`] times in the window and more often than the entry it would evict.
    pub fn admit(&self, primary: &[u8], at: LocId, len: u64) -> bool {
        if !self.enabled() {
            return false;
        }
        let cap = self.cap;
        let hash = hash_of(primary, at);
        let mut g = self.lock();
        g.seen(hash);
        let cost = len.saturating_add(SLOT_OVERHEAD);
        if cost > cap || len > self.max_record() {
            return false;
        }
        let held = self.held(&g);
        if held.saturating_add(cost) <= cap {
            return true;
        }
        let candidate = g.sketch.estimate(hash);
        let need = (held + cost).saturating_sub(cap);
        candidate >= ADMIT_MIN_LOOKUPS && g.victim_frequency(need).is_none_or(|v| candidate > v)
    }

    /// Insert the copy of the record at `at`.
    pub fn insert(&self, at: LocId, mut copy: Copy) {
        if !self.enabled() {
            return;
        }
        let cap = self.cap;
        let body_len = copy.body.len() as u64;
        self.live.fetch_add(body_len, Relaxed);
        copy.body = Bytes::from_owner(Counted {
            body: copy.body,
            live: Arc::clone(&self.live),
        });
        let hash = hash_of(&copy.primary, at);
        let key = at;
        let mut g = self.lock();
        let id = g.next_id;
        g.next_id += 1;
        let slot = Slot {
            copy,
            id,
            hash,
            referenced: false,
            parsed_cost: 0,
        };
        let cost = slot.cost();
        if cost > cap {
            return;
        }
        if let Some(old) = g.map.remove(&key) {
            g.forget(&old);
        }
        g.bytes += cost;
        g.resident_bodies += body_len;
        g.ring.push_back((key, id));
        g.map.insert(key, slot);
        self.evict(&mut g);
        // Keep the ring from growing without bound with stale ids.
        if g.ring.len() > 2 * g.map.len() + 64 {
            let Inner { map, ring, .. } = &mut *g;
            ring.retain(|(k, id)| matches!(map.get(k), Some(s) if s.id == *id));
        }
    }

    /// CLOCK: evict unreferenced entries (referenced ones get a second round) until the tier
    /// holds at most its capacity ([`RamTier::held`]), or nothing.
    fn evict(&self, g: &mut Inner) {
        while self.held(g) > self.cap {
            let Some((k, id)) = g.ring.pop_front() else {
                break;
            };
            let live = matches!(g.map.get(&k), Some(s) if s.id == id);
            if !live {
                continue;
            }
            let second_chance = g
                .map
                .get_mut(&k)
                .is_some_and(|s| std::mem::take(&mut s.referenced));
            if second_chance {
                g.ring.push_back((k, id));
            } else if let Some(s) = g.map.remove(&k) {
                g.forget(&s);
            }
        }
    }

    /// Keep `parsed`, the caller's parsed form of `meta`, with the copy at `at`, if the copy
    /// has none yet and still holds these very bytes (the same allocation: the caller holds
    /// `meta`, so it cannot have been freed and reused). It counts towards the tier's bytes
    /// (`meta`'s length plus [`PARSED_OVERHEAD`]), which may evict entries.
    pub fn attach(&self, at: LocId, meta: &Bytes, parsed: Parsed) {
        if !self.enabled() {
            return;
        }
        let mut g = self.lock();
        let Some(slot) = g.map.get_mut(&at) else {
            return;
        };
        let c = &mut slot.copy;
        if c.parsed.is_some() || c.meta.as_ptr() != meta.as_ptr() || c.meta.len() != meta.len() {
            return;
        }
        c.parsed = Some(parsed);
        let cost = meta.len() as u64 + PARSED_OVERHEAD;
        slot.parsed_cost = cost;
        g.bytes += cost;
        self.evict(&mut g);
    }

    pub fn remove(&self, at: LocId) {
        if !self.enabled() {
            return;
        }
        let mut g = self.lock();
        if let Some(s) = g.map.remove(&at) {
            g.forget(&s);
        }
    }

    /// Drop the copies of records in segment `seg` (reclaimed: they can no longer be found).
    pub fn drop_segment(&self, seg: u32) {
        if !self.enabled() {
            return;
        }
        let mut g = self.lock();
        let gone: Vec<Slot> = g
            .map
            .extract_if(|k, _| k.seg == seg)
            .map(|(_, s)| s)
            .collect();
        for s in &gone {
            g.forget(s);
        }
    }

    /// (bytes, objects): the bytes count the entries and the evicted copies RAM hits still
    /// hold ([`RamTier::held`]).
    pub fn usage(&self) -> (u64, u64) {
        let g = self.lock();
        (self.held(&g), g.map.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A location per name (and epoch).
    fn at(name: &str, epoch: u64) -> LocId {
        let off = name
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b)));
        LocId { seg: 0, epoch, off }
    }

    fn copy(name: &str, len: usize) -> Copy {
        Copy {
            primary: Bytes::copy_from_slice(name.as_bytes()),
            variant: Bytes::new(),
            meta: Bytes::new(),
            header_len: 4096,
            seq: 1,
            body: Bytes::from(vec![0u8; len]),
            parsed: None,
        }
    }

    fn put(t: &RamTier, name: &str, len: usize) {
        t.insert(at(name, 1), copy(name, len));
    }

    fn has(t: &RamTier, name: &str) -> bool {
        t.get(name.as_bytes(), at(name, 1)).is_some()
    }

    /// A large record replaces many small entries at once: it must be asked for more often than
    /// every one it would evict, not only the first. Copies in progress hold their bytes from
    /// the start, at most an eighth of the tier.
    #[test]
    fn a_large_record_must_beat_every_entry_it_would_evict() {
        let cap = 64 * 1024 * 1024;
        let t = RamTier::for_entries(cap);
        let big = 1 << 20;
        assert_eq!(t.max_record(), big, "a 64th of the tier");
        assert!(
            !t.admit(b"huge", at("huge", 1), big + 1),
            "more than a 64th"
        );
        // Fill the tier with 64 KiB entries; the one the hand reaches second is popular.
        let n = cap as usize / (64 * 1024 + SLOT_OVERHEAD as usize);
        for i in 0..n {
            put(&t, &format!("s{i}"), 64 * 1024);
        }
        for _ in 0..6 {
            t.admit(b"s1", at("s1", 1), 64 * 1024);
        }
        // Seen 4 times: more than the first victim (s0, never looked up), fewer than s1.
        for _ in 0..3 {
            assert!(!t.admit(b"big", at("big", 1), big));
        }
        assert!(
            !t.admit(b"big", at("big", 1), big),
            "s1 would go too and is asked for more often"
        );
        for _ in 0..4 {
            t.admit(b"big", at("big", 1), big);
        }
        assert!(
            t.admit(b"big", at("big", 1), big),
            "now more popular than all"
        );
        // Reservations: counted at once, bounded, given back.
        let before = t.usage().0;
        assert!(t.reserve(4 * big));
        assert!(t.reserve(4 * big));
        assert!(!t.reserve(big), "an eighth of the tier in progress");
        assert!(t.usage().0 <= cap);
        t.release(4 * big);
        t.release(4 * big);
        assert!(
            t.usage().0 < before,
            "what the reservations evicted stays evicted"
        );
        assert!(t.reserve(big));
        t.release(big);
    }

    #[test]
    fn bounded_and_second_chance() {
        let t = RamTier::for_entries(1000 + 5 * SLOT_OVERHEAD);
        for i in 0..10 {
            put(&t, &format!("{i}"), 199);
            // keep "0" hot
            assert!(has(&t, "0"), "hot entry evicted at {i}");
            assert!(t.usage().0 <= 1000 + 5 * SLOT_OVERHEAD);
        }
        assert!(
            t.get(b"0", at("0", 2)).is_none(),
            "another location is a miss"
        );
        assert!(t.get(b"1", at("0", 1)).is_none(), "another key is a miss");
        t.remove(at("0", 1));
        assert!(!has(&t, "0"));
    }

    /// A parsed meta is kept only with the copy that holds the very bytes it was parsed from,
    /// once, and counted in the tier's bytes until the copy goes.
    #[test]
    fn a_parsed_meta_stays_with_its_own_copy_and_is_counted() {
        let t = RamTier::for_entries(1 << 20);
        let mut c = copy("a", 100);
        c.meta = Bytes::from(vec![7u8; 50]);
        let meta = c.meta.clone();
        t.insert(at("a", 1), c);
        let before = t.usage().0;
        // Equal bytes in another allocation: not the copy's meta, nothing kept.
        t.attach(at("a", 1), &Bytes::from(vec![7u8; 50]), Arc::new(1u32));
        assert!(t.get(b"a", at("a", 1)).unwrap().parsed.is_none());
        assert_eq!(t.usage().0, before);
        // The copy's own bytes: kept, returned by later hits, counted.
        let got = t.get(b"a", at("a", 1)).unwrap().meta;
        t.attach(at("a", 1), &got, Arc::new(2u32));
        let parsed = t.get(b"a", at("a", 1)).unwrap().parsed.unwrap();
        assert_eq!(parsed.downcast_ref::<u32>(), Some(&2));
        assert_eq!(t.usage().0, before + 50 + PARSED_OVERHEAD);
        // Only once: a second attach changes nothing.
        t.attach(at("a", 1), &meta, Arc::new(3u32));
        let parsed = t.get(b"a", at("a", 1)).unwrap().parsed.unwrap();
        assert_eq!(parsed.downcast_ref::<u32>(), Some(&2));
        assert_eq!(t.usage().0, before + 50 + PARSED_OVERHEAD);
        // A new copy at the location (a rewritten meta) starts without one; removal frees all.
        let mut c = copy("a", 100);
        c.meta = Bytes::from(vec![8u8; 50]);
        t.insert(at("a", 1), c);
        assert!(t.get(b"a", at("a", 1)).unwrap().parsed.is_none());
        assert_eq!(t.usage().0, before);
        t.remove(at("a", 1));
        assert_eq!(t.usage(), (0, 0));
    }

    fn fill(t: &RamTier, n: usize, prefix: &str) {
        for i in 0..n {
            put(t, &format!("{prefix}{i}"), RAM_MAX_RECORD as usize);
        }
    }

    #[test]
    fn once_full_a_record_must_be_asked_for_more_than_its_victim() {
        let cap = 4 * (RAM_MAX_RECORD + SLOT_OVERHEAD + 64);
        let t = RamTier::for_entries(cap);
        // Room left: admitted on the first disk hit.
        assert!(t.admit(b"a", at("a", 1), RAM_MAX_RECORD));
        fill(&t, 4, "f");
        // Full: a record seen once is not admitted, nor one seen as often as the victim.
        assert!(!t.admit(b"new", at("new", 1), RAM_MAX_RECORD));
        for i in 0..4 {
            for _ in 0..2 {
                has(&t, &format!("f{i}"));
            }
        }
        assert!(
            !t.admit(b"new", at("new", 1), RAM_MAX_RECORD),
            "2 lookups against the victim's 2"
        );
        assert!(t.admit(b"new", at("new", 1), RAM_MAX_RECORD), "3 against 2");
        assert!(
            !t.admit(b"new", at("new", 2), RAM_MAX_RECORD),
            "another record is another record"
        );
        assert!(!RamTier::new(0).admit(b"a", at("a", 1), RAM_MAX_RECORD));
    }

    #[test]
    fn once_full_a_record_needs_the_minimum_lookups_even_against_an_unasked_victim() {
        let cap = 4 * (RAM_MAX_RECORD + SLOT_OVERHEAD + 64);
        let t = RamTier::for_entries(cap);
        fill(&t, 4, "f");
        // The victims were never looked up; each admit call counts one lookup of "new".
        for n in 1..ADMIT_MIN_LOOKUPS {
            assert!(
                !t.admit(b"new", at("new", 1), RAM_MAX_RECORD),
                "{n} lookups are not enough"
            );
        }
        assert!(t.admit(b"new", at("new", 1), RAM_MAX_RECORD));
    }

    #[test]
    fn hot_records_replace_cold_ones_and_stay() {
        // Skewed traffic: 4 hot records asked for all the time win their place from 4 cold
        // ones, and a scan of one-off records never displaces them.
        let cap = 4 * (RAM_MAX_RECORD + SLOT_OVERHEAD + 64);
        let t = RamTier::for_entries(cap);
        fill(&t, 4, "cold");
        for _round in 0..6 {
            for i in 0..4 {
                let key = format!("hot{i}");
                if !has(&t, &key) && t.admit(key.as_bytes(), at(&key, 1), RAM_MAX_RECORD) {
                    put(&t, &key, RAM_MAX_RECORD as usize);
                }
            }
        }
        let hot_held = |t: &RamTier| (0..4).filter(|i| has(t, &format!("hot{i}"))).count();
        assert_eq!(hot_held(&t), 4);
        for i in 0..500 {
            let key = format!("scan{i}");
            for _ in 0..2 {
                if t.admit(key.as_bytes(), at(&key, 1), RAM_MAX_RECORD) {
                    put(&t, &key, RAM_MAX_RECORD as usize);
                }
            }
        }
        assert_eq!(hot_held(&t), 4, "a scan displaced hot records");
    }

    /// A copy taken out of the tier (evicted, purged, replaced) while a RAM hit still sends it
    /// stays counted until the send drops it, and the tier keeps its entries and such copies
    /// together within its capacity.
    #[test]
    fn a_copy_taken_out_while_being_sent_counts_until_it_is_dropped() {
        let len = 100_000;
        let entry = len as u64 + SLOT_OVERHEAD + 1;
        let t = RamTier::for_entries(3 * entry);
        put(&t, "a", len);
        let sending = t.get(b"a", at("a", 1)).expect("a RAM hit").body;
        t.remove(at("a", 1));
        assert_eq!(
            t.usage(),
            (len as u64, 0),
            "out of the tier, still in memory"
        );
        for name in ["b", "c", "d"] {
            put(&t, name, len);
        }
        let (bytes, objects) = t.usage();
        assert_eq!(
            objects, 2,
            "the third entry's room is the copy still being sent"
        );
        assert_eq!(bytes, 2 * entry + len as u64);
        drop(sending);
        assert_eq!(t.usage(), (2 * entry, 2));
        put(&t, "e", len);
        assert_eq!(t.usage(), (3 * entry, 3), "room again");
        // Copies that stay in the tier cost nothing more while they are sent.
        let held: Vec<_> = ["b", "c", "d", "e"]
            .iter()
            .filter_map(|n| t.get(n.as_bytes(), at(n, 1)).map(|c| c.body))
            .collect();
        assert_eq!(held.len(), 3);
        assert_eq!(t.usage(), (3 * entry, 3));
        // Evicted while sent: the newcomer's room waits for the send.
        let all = ["b", "c", "d", "e"];
        for n in all {
            t.remove(at(n, 1));
        }
        assert_eq!(t.usage(), (3 * len as u64, 0));
        put(&t, "f", len);
        assert_eq!(t.usage().1, 0, "no room while three copies are being sent");
        drop(held);
        assert_eq!(t.usage(), (0, 0));
        put(&t, "f", len);
        assert_eq!(t.usage(), (entry, 1));
    }

    #[test]
    fn disabled_when_zero() {
        let t = RamTier::new(0);
        put(&t, "a", 1);
        assert_eq!(t.usage(), (0, 0));
    }
}
