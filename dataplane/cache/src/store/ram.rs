//! The RAM tier: a byte-bounded map of small, hot, already verified objects.
//!
//! - Size: the tier counts each entry's key, meta and body bytes plus an estimated overhead,
//!   and keeps the total within its capacity minus the disk index's estimated memory (the
//!   index grows with the number of objects on disk, about 650 bytes each), so that index and
//!   tier together stay within the RAM tier's share of the memory plan.
//! - Eligible: records (header + padded body) of at most [`RAM_MAX_RECORD`] (64 KiB). Larger
//!   objects are read with O_DIRECT anyway and cost little CPU per byte.
//! - Admission: an object enters on a *disk hit*, never on write. A response seen once (the
//!   miss that stored it) stays on disk only; the one-hit wonders that dominate CDN traffic
//!   never take RAM. This is the job S3-FIFO's small probationary queue does, without a ghost
//!   queue. Once the tier is full, a disk hit admits an object only if the same object had a
//!   disk hit before within the current window ([`RamTier::admit`], a doorkeeper bitmap as in
//!   TinyLFU, cleared after twice as many first hits as the tier holds objects): when most
//!   reads are of objects that will not be read again soon (a working set much larger than the
//!   tier, read uniformly), copying each one in and evicting another cost more CPU than the
//!   reads it saved (bench/BENCHMARKS.md, tuning log).
//! - Eviction: CLOCK (second chance). A hit sets a reference bit under a short lock and moves
//!   nothing; the hand gives referenced entries a second round and evicts unreferenced ones. It
//!   approximates LRU at O(1) per operation and, with the admission rule above, resists scans.
//! - Coherence: entries are keyed by (primary, variant) and carry the sequence number of the
//!   disk record they copy; a lookup only uses an entry whose sequence matches the index, and
//!   purges, replacements and segment reclaims remove entries.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;

/// Largest record kept in RAM.
pub const RAM_MAX_RECORD: u64 = 64 * 1024;

type Key = (Bytes, Bytes);

struct Slot {
    seq: u64,
    id: u64,
    meta: Bytes,
    body: Bytes,
    referenced: bool,
}

/// Heap bytes of a slot beyond its key, meta and body bytes: the map slot, the CLOCK ring
/// entry, the `Bytes` headers, allocator rounding and fragmentation under churn. Measured with
/// `examples/store_bench.rs --size 4096 --count 100000 --ram 125829120`: about 5.6 KiB of RSS
/// per 4 KiB object in the tier (its key, meta and body add up to 4.1 KiB).
const SLOT_OVERHEAD: u64 = 1024;

impl Slot {
    fn cost(&self, key: &Key) -> u64 {
        (self.meta.len() + self.body.len() + key.0.len() + key.1.len()) as u64 + SLOT_OVERHEAD
    }
}

#[derive(Default)]
struct Inner {
    map: HashMap<Key, Slot>,
    ring: VecDeque<(Key, u64)>,
    bytes: u64,
    next_id: u64,
    /// The doorkeeper: one bit per hashed key seen by a disk hit in this window (allocated the
    /// first time the tier is full).
    door: Vec<u64>,
    door_set: usize,
}

/// Bits in the doorkeeper (128 KiB).
const DOOR_BITS: u64 = 1 << 20;

fn door_bit(primary: &[u8], variant: &[u8]) -> (usize, u64) {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(primary);
    h.write_u8(0xff);
    h.write(variant);
    let x = h.finish() % DOOR_BITS;
    ((x / 64) as usize, 1u64 << (x % 64))
}

pub(crate) struct RamTier {
    cap: u64,
    inner: Mutex<Inner>,
}

impl RamTier {
    pub fn new(cap: u64) -> RamTier {
        RamTier {
            cap,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.cap > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The (meta, body) stored for this record, if the tier holds exactly that version.
    pub fn get(&self, primary: &Bytes, variant: &Bytes, seq: u64) -> Option<(Bytes, Bytes)> {
        if !self.enabled() {
            return None;
        }
        let mut g = self.lock();
        let slot = g.map.get_mut(&(primary.clone(), variant.clone()))?;
        if slot.seq != seq {
            return None;
        }
        slot.referenced = true;
        Some((slot.meta.clone(), slot.body.clone()))
    }

    /// Should a record just read from disk be copied in? Yes while the tier has room for one
    /// more of the largest records; once it is full, only on the record's second disk hit within
    /// the doorkeeper's window. `reserved` as for [`RamTier::insert`].
    pub fn admit(&self, primary: &[u8], variant: &[u8], reserved: u64) -> bool {
        if !self.enabled() {
            return false;
        }
        let cap = self.cap.saturating_sub(reserved);
        let mut g = self.lock();
        if g.bytes.saturating_add(RAM_MAX_RECORD + SLOT_OVERHEAD) <= cap {
            return true;
        }
        let (word, mask) = door_bit(primary, variant);
        if g.door.is_empty() {
            g.door = vec![0; (DOOR_BITS / 64) as usize];
        }
        if g.door[word] & mask != 0 {
            return true;
        }
        g.door[word] |= mask;
        g.door_set += 1;
        if g.door_set > 2 * g.map.len().max(1024) {
            g.door.fill(0);
            g.door_set = 0;
        }
        false
    }

    /// Insert an object. `reserved` bytes of the capacity are taken by something else (the
    /// disk index, which grows with the number of objects): the tier keeps its own bytes within
    /// `capacity - reserved`.
    pub fn insert(
        &self,
        primary: Bytes,
        variant: Bytes,
        seq: u64,
        meta: Bytes,
        body: Bytes,
        reserved: u64,
    ) {
        if !self.enabled() {
            return;
        }
        let cap = self.cap.saturating_sub(reserved);
        let key = (primary, variant);
        let mut g = self.lock();
        let id = g.next_id;
        g.next_id += 1;
        let slot = Slot {
            seq,
            id,
            meta,
            body,
            referenced: false,
        };
        let cost = slot.cost(&key);
        if cost > cap {
            drop(g);
            self.shrink_to(cap);
            return;
        }
        if let Some(old) = g.map.remove(&key) {
            g.bytes -= old.cost(&key);
        }
        g.bytes += cost;
        g.ring.push_back((key.clone(), id));
        g.map.insert(key, slot);
        Self::evict(&mut g, cap);
        // Keep the ring from growing without bound with stale ids.
        if g.ring.len() > 2 * g.map.len() + 64 {
            let Inner { map, ring, .. } = &mut *g;
            ring.retain(|(k, id)| matches!(map.get(k), Some(s) if s.id == *id));
        }
    }

    fn shrink_to(&self, cap: u64) {
        let mut g = self.lock();
        Self::evict(&mut g, cap);
    }

    /// CLOCK: evict unreferenced entries (referenced ones get a second round) until the tier
    /// holds at most `cap` bytes.
    fn evict(g: &mut Inner, cap: u64) {
        while g.bytes > cap {
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
                g.bytes -= s.cost(&k);
            }
        }
    }

    pub fn remove(&self, primary: &Bytes, variant: &Bytes) {
        if !self.enabled() {
            return;
        }
        let key = (primary.clone(), variant.clone());
        let mut g = self.lock();
        if let Some(s) = g.map.remove(&key) {
            g.bytes -= s.cost(&key);
        }
    }

    /// (bytes, objects)
    pub fn usage(&self) -> (u64, u64) {
        let g = self.lock();
        (g.bytes, g.map.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn bounded_and_second_chance() {
        let t = RamTier::new(1000 + 5 * SLOT_OVERHEAD);
        for i in 0..10 {
            t.insert(
                k(&format!("{i}")),
                Bytes::new(),
                1,
                Bytes::new(),
                Bytes::from(vec![0u8; 199]),
                0,
            );
            // keep "0" hot
            assert!(
                t.get(&k("0"), &Bytes::new(), 1).is_some(),
                "hot entry evicted at {i}"
            );
            assert!(t.usage().0 <= 1000 + 5 * SLOT_OVERHEAD);
        }
        assert!(
            t.get(&k("0"), &Bytes::new(), 2).is_none(),
            "other seq is a miss"
        );
        t.remove(&k("0"), &Bytes::new());
        assert!(t.get(&k("0"), &Bytes::new(), 1).is_none());
    }

    #[test]
    fn reserved_bytes_shrink_the_tier() {
        let t = RamTier::new(1000 + 4 * SLOT_OVERHEAD);
        for i in 0..4 {
            let body = Bytes::from(vec![0u8; 199]);
            t.insert(k(&format!("{i}")), Bytes::new(), 1, Bytes::new(), body, 0);
        }
        assert_eq!(t.usage().1, 4);
        // The index grew to 600 bytes: the tier keeps within the rest.
        t.insert(k("x"), Bytes::new(), 1, Bytes::new(), Bytes::new(), 600);
        assert!(t.usage().0 <= 400 + 4 * SLOT_OVERHEAD, "{:?}", t.usage());
        assert!(t.usage().1 < 4, "{:?}", t.usage());
        // Larger than what is left: not admitted, and the tier shrinks to it anyway.
        t.insert(
            k("big"),
            Bytes::new(),
            1,
            Bytes::new(),
            Bytes::from(vec![0u8; 500]),
            900 + 4 * SLOT_OVERHEAD,
        );
        assert!(t.usage().0 <= 100, "{:?}", t.usage());
    }

    #[test]
    fn once_full_a_record_needs_a_second_disk_hit_in_the_window() {
        let cap = 4 * (RAM_MAX_RECORD + SLOT_OVERHEAD);
        let t = RamTier::new(cap);
        // Room left: admitted on the first disk hit.
        assert!(t.admit(b"a", b"", 0));
        for i in 0..8 {
            let body = Bytes::from(vec![0u8; RAM_MAX_RECORD as usize]);
            t.insert(k(&format!("f{i}")), Bytes::new(), 1, Bytes::new(), body, 0);
        }
        // Full: the first disk hit is only remembered, the second admits.
        assert!(!t.admit(b"new", b"", 0));
        assert!(t.admit(b"new", b"", 0));
        assert!(
            !t.admit(b"new", b"v2", 0),
            "another variant is another record"
        );
        // The window closes after twice the tier's object count (at least 1024) first hits.
        assert!(!t.admit(b"old", b"", 0));
        for i in 0..2100 {
            t.admit(format!("scan{i}").as_bytes(), b"", 0);
        }
        assert!(!t.admit(b"old", b"", 0), "forgotten after the window");
        assert!(!RamTier::new(0).admit(b"a", b"", 0));
    }

    #[test]
    fn disabled_when_zero() {
        let t = RamTier::new(0);
        t.insert(
            k("a"),
            Bytes::new(),
            1,
            Bytes::new(),
            Bytes::from_static(b"x"),
            0,
        );
        assert_eq!(t.usage(), (0, 0));
    }
}
