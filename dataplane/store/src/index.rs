//! The compact index: 12 bytes of RAM per object, whatever its key, headers or Vary.
//!
//! Keys, variant keys and response headers live only in the record header on disk, where every
//! read checks them; the index keeps, per object, a 24-bit *tag* from the primary key's hash, a
//! 7-bit tag of the variant key, where the record is (a store-wide 4 KiB block number), how
//! long it is (in 4 KiB blocks up to 256 MiB, so a small hit is still one read of header and
//! body), the low
//! byte of its segment's epoch and a `verified` bit. The idea is Traffic Server's directory
//! (a tag, an approximate size, an offset; a tag collision is settled by the key in the
//! object's header on disk).
//!
//! # Layout
//! [`SHARDS`] shards, each behind its own lock, picked by hash bits 40..46: workers on different
//! keys rarely meet, and a shard's growth rehashes 1/64 of the index. A shard is a number of
//! buckets of [`BUCKET`] slots (any number: a key's home bucket is its low 32 hash bits scaled
//! to it), the tags in one array (a lookup compares 32 tags in 64 bytes) and the 10-byte
//! records in another. A key has two home buckets (two hashes: the emptier takes an insert,
//! which keeps the load high without long probes) and lives in the [`WINDOW`] buckets from
//! one of them, so a lookup compares the 32 tags of two windows.
//!
//! # Growth and its bound
//! A shard is sized for 4/5 load and doubles when it is 15/16 full (or 7/8 full and both windows
//! an insert may use are full), up to the bound set by the memory plan ([`Index::new`]'s
//! `max_bytes`); past that, or below 7/8, an insert into full windows evicts (a stale entry first, else the window's oldest
//! record) instead of growing, and the caller counts it. Doubling needs
//! the next bit of the home bucket's range reduction, which the index does not keep whole: each
//! slot keeps the next [`EXT_BITS`] bits of it as they were at its insert, and a doubling
//! consumes one, so a shard grows at most `EXT_BITS` times past its first size (64x). Each
//! slot also keeps which home it used and its offset in the window, so a doubling finds it.
//!
//! # Stale entries
//! Reclaiming a segment bumps its epoch: its entries become stale at once (their `epoch_lo` no
//! longer matches, which the caller's `live` check says) and are dropped lazily: by inserts
//! that need their slot, by doublings, and by [`Index::sweep`], which the store runs on one
//! shard per reclaim so every entry is looked at long before its segment's epoch low byte
//! wraps. A stale entry that still looked live would only cost a read: the record header's full
//! epoch is checked on every read.
//!
//! # Collisions
//! A lookup returns every live entry of the window whose tag matches: 32 slots against a 24-bit
//! tag, so a miss finds a false candidate about once in 500,000 lookups (one read that finds
//! another key in the header). Two objects with equal tags and equal variant tags in one window
//! look the same to [`Index::insert`], which replaces the older: an object lost early, never a
//! wrong one served.

use std::sync::{Mutex, MutexGuard};

/// Shards, each with its own lock.
pub const SHARDS: usize = 64;
/// Slots per bucket.
pub const BUCKET: usize = 8;
/// Buckets a key may live in from each of its two home buckets on.
pub const WINDOW: usize = 2;
/// Slots a lookup compares: two windows.
const PROBE: usize = 2 * WINDOW * BUCKET;
const _: () = assert!(WINDOW == 2, "probe() dedupes two-bucket windows");
/// Hash bits kept per slot for doublings.
pub const EXT_BITS: u32 = 6;
/// RAM bytes per slot: a 2-byte tag and a 10-byte record.
pub const SLOT_BYTES: u64 = 12;
/// The most blocks a record length records; longer records read their header first.
pub const MAX_BLOCKS: u32 = (1 << 16) - 1;
/// Smallest shard: 16 buckets (128 slots).
const MIN_BUCKETS: usize = 16;

/// Where a record is and what the index knows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rec {
    /// Store-wide 4 KiB block of the record's header.
    pub block: u32,
    /// Record length in 4 KiB blocks, [`MAX_BLOCKS`] at most (a saturated value means "at
    /// least").
    pub blocks: u32,
    /// The low byte of its segment's epoch when it was written.
    pub epoch_lo: u8,
    /// Its whole body passed its block checksums in this run.
    pub verified: bool,
}

/// A live entry found by [`Index::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub vtag: u8,
    pub rec: Rec,
}

/// What an insert displaced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Displaced {
    /// The entry with the same tags (the same object, as far as the index can tell).
    pub replaced: Option<Rec>,
    /// Variants of the key over the per-key cap (its oldest).
    pub trimmed: Vec<Rec>,
    /// Entries that made room: the oldest of a full window when the shard is at its bound.
    pub evicted: Vec<Rec>,
}

/// The hash of a primary key (xxh3 with the store's seed: its nonce, random per store, so
/// nobody outside can aim keys at one window).
pub fn key_hash(seed: u64, primary: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(primary, seed)
}

/// The 7-bit tag of a variant key (an empty variant key, no Vary, is 0).
pub fn variant_tag(seed: u64, variant: &[u8]) -> u8 {
    if variant.is_empty() {
        0
    } else {
        1 + (xxhash_rust::xxh3::xxh3_64_with_seed(variant, !seed) % 127) as u8
    }
}

/// The 24-bit tag: hash bits 48..64 in the tag array, 32..40 in the record (the shard is bits
/// 40..46, the home bucket and the doubling bits the low ones).
fn tag_of(h: u64) -> (u16, u8) {
    (((h >> 48) as u16).max(1), (h >> 32) as u8)
}

fn shard_of(h: u64) -> usize {
    ((h >> 40) as usize) & (SHARDS - 1)
}

/// 10 bytes: block (4), blocks (2), epoch_lo (1), vtag (7 bits) and verified (1), ext (6 bits),
/// the home choice (1) and the window offset (1), the tag's low byte (1).
#[derive(Debug, Clone, Copy, Default)]
struct Packed([u8; 10]);

impl Packed {
    fn new(rec: Rec, vtag: u8, ext: u8, place: usize, tag_lo: u8) -> Packed {
        let mut p = [0u8; 10];
        p[0..4].copy_from_slice(&rec.block.to_le_bytes());
        p[4..6].copy_from_slice(&(rec.blocks.min(MAX_BLOCKS) as u16).to_le_bytes());
        p[6] = rec.epoch_lo;
        p[7] = (vtag & 0x7f) | (u8::from(rec.verified) << 7);
        p[8] = (ext & 0x3f) | (((place & 3) as u8) << 6);
        p[9] = tag_lo;
        Packed(p)
    }
    fn rec(self) -> Rec {
        let p = self.0;
        Rec {
            block: u32::from_le_bytes([p[0], p[1], p[2], p[3]]),
            blocks: u32::from(u16::from_le_bytes([p[4], p[5]])),
            epoch_lo: p[6],
            verified: p[7] & 0x80 != 0,
        }
    }
    fn vtag(self) -> u8 {
        self.0[7] & 0x7f
    }
    fn ext(self) -> u8 {
        self.0[8] & 0x3f
    }
    /// Choice (bit 1) and window offset (bit 0).
    fn place(self) -> usize {
        usize::from(self.0[8] >> 6)
    }
    fn tag_lo(self) -> u8 {
        self.0[9]
    }
    fn set_verified(&mut self) {
        self.0[7] |= 0x80;
    }
}

/// The slots a key may be in.
struct Probe {
    slots: [usize; PROBE],
    n: usize,
}

impl IntoIterator for Probe {
    type Item = usize;
    type IntoIter = std::iter::Take<std::array::IntoIter<usize, PROBE>>;
    fn into_iter(self) -> Self::IntoIter {
        self.slots.into_iter().take(self.n)
    }
}

struct Shard {
    /// Buckets (any count: a key's home is its hash scaled to it, not masked).
    nb: usize,
    /// Doublings still allowed (the memory bound; at most `EXT_BITS`).
    doublings: u32,
    /// 0: empty.
    tags: Vec<u16>,
    recs: Vec<Packed>,
    used: usize,
}

impl Shard {
    fn new(nb: usize, doublings: u32) -> Shard {
        let slots = nb * BUCKET;
        Shard {
            nb,
            doublings,
            tags: vec![0; slots],
            recs: vec![Packed::default(); slots],
            used: 0,
        }
    }

    fn slots(&self) -> usize {
        self.tags.len()
    }

    /// The low 32 bits of `h` (choice 0) or of `h` remixed (choice 1).
    fn reduced(h: u64, choice: usize) -> u32 {
        if choice == 0 {
            h as u32
        } else {
            (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32
        }
    }

    /// Home bucket of `h` for `choice`: Lemire's range reduction, any bucket count.
    fn home(&self, h: u64, choice: usize) -> usize {
        ((u64::from(Shard::reduced(h, choice)) * self.nb as u64) >> 32) as usize
    }

    /// The bits that pick the home bucket when the shard doubles: the top of the range
    /// reduction's remainder (doubling makes home `2 * home` or `2 * home + 1` by its first
    /// bit, and shifts it).
    fn ext_of(&self, h: u64, choice: usize) -> u8 {
        ((u64::from(Shard::reduced(h, choice)) * self.nb as u64) as u32 >> (32 - EXT_BITS)) as u8
    }

    /// Slot `j` (0..WINDOW * BUCKET) of the window starting at bucket `home`.
    fn slot(&self, home: usize, j: usize) -> usize {
        self.wrap(home + j / BUCKET) * BUCKET + j % BUCKET
    }

    /// The slots of both of `h`'s windows, choice 0's first; where the windows overlap, the
    /// shared slots once (`n` of the array are used).
    fn probe(&self, h: u64) -> Probe {
        let homes = [self.home(h, 0), self.home(h, 1)];
        let first = [homes[0], self.wrap(homes[0] + 1)];
        let mut p = Probe {
            slots: [0; PROBE],
            n: 0,
        };
        for (c, &home) in homes.iter().enumerate() {
            let mut b = home;
            for _ in 0..WINDOW {
                if c == 0 || !first.contains(&b) {
                    for j in 0..BUCKET {
                        p.slots[p.n] = b * BUCKET + j;
                        p.n += 1;
                    }
                }
                b = self.wrap(b + 1);
            }
        }
        p
    }

    /// `b` for a bucket number at most `nb` past the end.
    fn wrap(&self, b: usize) -> usize {
        if b >= self.nb { b - self.nb } else { b }
    }

    fn free_in(&self, home: usize) -> usize {
        (0..WINDOW * BUCKET)
            .filter(|&j| self.tags[self.slot(home, j)] == 0)
            .count()
    }

    /// Put it in the window of `choice` from `home`.
    fn place_at(
        &mut self,
        home: usize,
        choice: usize,
        tag: (u16, u8),
        rec: Rec,
        vtag: u8,
        ext: u8,
    ) -> bool {
        for j in 0..WINDOW * BUCKET {
            let i = self.slot(home, j);
            if self.tags[i] == 0 {
                self.tags[i] = tag.0;
                self.recs[i] = Packed::new(rec, vtag, ext, (choice << 1) | (j / BUCKET), tag.1);
                self.used += 1;
                return true;
            }
        }
        false
    }

    /// Put it in the emptier of its two windows.
    fn place(&mut self, h: u64, tag: (u16, u8), rec: Rec, vtag: u8) -> bool {
        let homes = [self.home(h, 0), self.home(h, 1)];
        let c = usize::from(self.free_in(homes[1]) > self.free_in(homes[0]));
        let ext = self.ext_of(h, c);
        self.place_at(homes[c], c, tag, rec, vtag, ext)
    }

    fn is(&self, i: usize, tag: (u16, u8)) -> bool {
        self.tags[i] == tag.0 && self.recs[i].tag_lo() == tag.1
    }

    fn clear(&mut self, i: usize) {
        self.tags[i] = 0;
        self.used -= 1;
    }

    /// Double, dropping stale entries; `false` when at the bound. Returns the entries that
    /// found no room (none in practice: the table has twice the room), for the caller's
    /// counts.
    fn grow(&mut self, live: &dyn Fn(Rec) -> bool, lost: &mut Vec<Rec>) -> bool {
        if self.doublings == 0 {
            return false;
        }
        let mut next = Shard::new(self.nb * 2, self.doublings - 1);
        let nb = self.nb;
        for i in 0..self.slots() {
            let tag = self.tags[i];
            if tag == 0 {
                continue;
            }
            let p = self.recs[i];
            let rec = p.rec();
            if !live(rec) {
                continue;
            }
            let (choice, woff) = (p.place() >> 1, p.place() & 1);
            let home = (i / BUCKET + nb - woff) % nb;
            let top = p.ext() >> (EXT_BITS - 1);
            let new_home = 2 * home + usize::from(top);
            let ext = (p.ext() << 1) & ((1 << EXT_BITS) - 1);
            if !next.place_at(new_home, choice, (tag, p.tag_lo()), rec, p.vtag(), ext) {
                lost.push(rec);
            }
        }
        *self = next;
        true
    }

    /// Drop the entries `live` rejects; returns how many.
    fn sweep(&mut self, live: &dyn Fn(Rec) -> bool) -> usize {
        let mut n = 0;
        for i in 0..self.slots() {
            if self.tags[i] != 0 && !live(self.recs[i].rec()) {
                self.clear(i);
                n += 1;
            }
        }
        n
    }
}

/// The index: [`SHARDS`] shards of open-addressed buckets.
pub struct Index {
    shards: Box<[Mutex<Shard>]>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("len", &self.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// Buckets of a shard with room for `objects / SHARDS` objects at 4/5 load (15 bytes per
/// object when full, and room for shards that get more than their share).
fn buckets_for(objects: u64) -> usize {
    let per_shard = objects.div_ceil(SHARDS as u64);
    ((per_shard * 5 / 4).div_ceil(BUCKET as u64) as usize).max(MIN_BUCKETS)
}

/// RAM bytes of an index sized for `objects` at 4/5 load (what [`Index::new`] allocates for
/// `first_objects`).
pub fn bytes_for(objects: u64) -> u64 {
    (SHARDS * buckets_for(objects) * BUCKET) as u64 * SLOT_BYTES
}

impl Index {
    /// An index that starts with room for `first_objects` and grows, doubling, to at most
    /// `max_bytes` of slots (never below the first size), [`EXT_BITS`] doublings at most.
    pub fn new(first_objects: u64, max_bytes: u64) -> Index {
        let first = buckets_for(first_objects);
        let max_buckets = (max_bytes / SHARDS as u64 / SLOT_BYTES / BUCKET as u64) as usize;
        let mut doublings = 0;
        while doublings < EXT_BITS && first << (doublings + 1) <= max_buckets {
            doublings += 1;
        }
        Index {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard::new(first, doublings)))
                .collect(),
        }
    }

    fn shard(&self, h: u64) -> MutexGuard<'_, Shard> {
        match self.shards[shard_of(h)].lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The live entries whose tag is `h`'s (the variants of one key, and rare false
    /// candidates).
    pub fn lookup(&self, h: u64, live: &dyn Fn(Rec) -> bool) -> Vec<Found> {
        let tag = tag_of(h);
        let s = self.shard(h);
        let mut out = Vec::new();
        for i in s.probe(h) {
            if s.is(i, tag) {
                let p = s.recs[i];
                let rec = p.rec();
                if live(rec) {
                    out.push(Found {
                        vtag: p.vtag(),
                        rec,
                    });
                }
            }
        }
        out
    }

    /// Insert `rec` as the variant `vtag` of `h`. An entry with the same tags is replaced; past
    /// `max_variants` live entries of the key (0: no cap) the oldest by `age` goes; with the
    /// window full and the shard at its bound, a stale entry or else the window's oldest
    /// makes room. `age` orders records (larger is newer); `live` says an entry is current.
    pub fn insert(
        &self,
        h: u64,
        vtag: u8,
        rec: Rec,
        max_variants: usize,
        live: &dyn Fn(Rec) -> bool,
        age: &dyn Fn(Rec) -> u64,
    ) -> Displaced {
        self.insert_checked(h, vtag, rec, max_variants, live, age, &|_| true)
    }

    /// [`Index::insert`], but an entry with the same tags is replaced only if `same` says it
    /// holds the same object (the caller read its header): tags are 24 + 7 bits, so two
    /// variants of a key share theirs one time in 128. Other entries with the tags stay.
    #[allow(clippy::too_many_arguments)]
    pub fn insert_checked(
        &self,
        h: u64,
        vtag: u8,
        rec: Rec,
        max_variants: usize,
        live: &dyn Fn(Rec) -> bool,
        age: &dyn Fn(Rec) -> u64,
        same: &dyn Fn(Rec) -> bool,
    ) -> Displaced {
        let tag = tag_of(h);
        let mut s = self.shard(h);
        let mut out = Displaced::default();
        // Same object: replace in place. Stale entries in the window are freed on the way.
        let mut variants: Vec<usize> = Vec::new();
        for i in s.probe(h) {
            if s.tags[i] == 0 {
                continue;
            }
            let p = s.recs[i];
            if !live(p.rec()) {
                s.clear(i);
                continue;
            }
            if s.is(i, tag) {
                if p.vtag() == vtag && out.replaced.is_none() && same(p.rec()) {
                    out.replaced = Some(p.rec());
                    s.recs[i] = Packed::new(rec, vtag, p.ext(), p.place(), tag.1);
                } else {
                    variants.push(i);
                }
            }
        }
        if out.replaced.is_some() {
            return out;
        }
        // The variant cap: the oldest of this key's variants go.
        if max_variants > 0 {
            while variants.len() + 1 > max_variants {
                let Some((pos, &i)) = variants
                    .iter()
                    .enumerate()
                    .min_by_key(|&(_, &i)| age(s.recs[i].rec()))
                else {
                    break;
                };
                out.trimmed.push(s.recs[i].rec());
                s.clear(i);
                variants.swap_remove(pos);
            }
        }
        // Grow at 15/16 load, or at 7/8 when both windows are full, while the bound allows.
        let mut lost = Vec::new();
        if (s.used + 1) * 16 > s.slots() * 15 {
            s.grow(live, &mut lost);
        }
        loop {
            if s.place(h, tag, rec, vtag) {
                out.evicted.extend(lost);
                return out;
            }
            // Full windows in a shard under 7/8 load are a cluster, not a full table: their
            // oldest goes rather than doubling the whole shard.
            if (s.used + 1) * 8 <= s.slots() * 7 || !s.grow(live, &mut lost) {
                break;
            }
        }
        out.evicted.extend(lost);
        // Both windows full at the bound: the oldest record in them goes.
        let victim = s.probe(h).into_iter().min_by_key(|&i| age(s.recs[i].rec()));
        if let Some(i) = victim {
            out.evicted.push(s.recs[i].rec());
            s.clear(i);
        }
        s.place(h, tag, rec, vtag);
        out
    }

    /// Remove the entries of `h` with variant tag `vtag` (any when `None`) and, when given,
    /// exactly at `block`; returns the removed records (live or not).
    pub fn remove(&self, h: u64, vtag: Option<u8>, block: Option<u32>) -> Vec<Rec> {
        let tag = tag_of(h);
        let mut s = self.shard(h);
        let mut out = Vec::new();
        for i in s.probe(h) {
            if !s.is(i, tag) {
                continue;
            }
            let p = s.recs[i];
            let rec = p.rec();
            if vtag.is_none_or(|v| v == p.vtag()) && block.is_none_or(|b| b == rec.block) {
                out.push(rec);
                s.clear(i);
            }
        }
        out
    }

    /// Mark the entry of `h` at `block` verified; `false` when it is gone.
    pub fn set_verified(&self, h: u64, block: u32) -> bool {
        let tag = tag_of(h);
        let mut s = self.shard(h);
        for i in s.probe(h) {
            if s.is(i, tag) && s.recs[i].rec().block == block {
                s.recs[i].set_verified();
                return true;
            }
        }
        false
    }

    /// Drop the stale entries of shard `i % SHARDS`; returns how many.
    pub fn sweep(&self, i: usize, live: &dyn Fn(Rec) -> bool) -> usize {
        let mut s = match self.shards[i % SHARDS].lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        s.sweep(live)
    }

    /// Occupied slots (live or stale).
    pub fn len(&self) -> u64 {
        self.each(|s| s.used as u64)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// RAM bytes of the slots (the index's whole heap, but for 64 shard headers).
    pub fn bytes(&self) -> u64 {
        self.each(|s| s.slots() as u64 * SLOT_BYTES)
    }

    /// The most bytes it may grow to.
    pub fn max_bytes(&self) -> u64 {
        self.each(|s| ((s.nb as u64) << s.doublings) * BUCKET as u64 * SLOT_BYTES)
    }

    fn each(&self, f: impl Fn(&Shard) -> u64) -> u64 {
        self.shards
            .iter()
            .map(|m| match m.lock() {
                Ok(g) => f(&g),
                Err(p) => f(&p.into_inner()),
            })
            .sum()
    }
}

mod persist;
#[cfg(test)]
mod tests;
