//! The store's index operations: the mapping between the compact index's records ([`Rec`])
//! and places on disk ([`Loc`]), and the inserts and removals that keep the per-segment
//! accounting ([`State`]) with them.
//!
//! The objects themselves are in [`crate::index::Index`] (sharded, under its own locks, 12
//! bytes a slot). Lock order: the state mutex, then an index shard; never the other way.
//! A record's identity is its location (segment, epoch, offset), never its sequence number.

use std::sync::atomic::Ordering;

use crate::index::{self, Displaced, Found, MAX_BLOCKS, Rec};
use crate::object::ObjectRef;
use crate::state::{Loc, State};
use crate::store::Store;

/// 4 KiB: the unit of the index's block numbers and lengths.
const PAGE: u64 = 4096;

/// What [`Store::index_insert`] displaced, as locations.
#[derive(Debug, Default)]
pub(crate) struct Inserted {
    /// The record with the same key and variant tags (live).
    pub replaced: Option<Loc>,
}

impl Store {
    /// The index hash of a primary key.
    pub(crate) fn key_hash(&self, primary: &[u8]) -> u64 {
        #[cfg(test)]
        if let Some(f) = self.key_hash_override.get() {
            return f(primary);
        }
        index::key_hash(self.nonce, primary)
    }

    /// The index tag of a variant key (see [`index::variant_tag`]).
    pub fn variant_tag(&self, variant: &[u8]) -> u8 {
        index::variant_tag(self.nonce, variant)
    }

    fn block_of(&self, seg: u32, off: u64) -> u32 {
        ((u64::from(seg) * self.layout.segment_size + off) / PAGE) as u32
    }

    /// (segment, offset) of an index record.
    fn place_of(&self, rec: Rec) -> (u32, u64) {
        let at = u64::from(rec.block) * PAGE;
        (
            (at / self.layout.segment_size) as u32,
            at % self.layout.segment_size,
        )
    }

    fn epoch_of(&self, seg: u32) -> u64 {
        self.epochs
            .get(seg as usize)
            .map_or(u64::MAX, |e| e.load(Ordering::Acquire))
    }

    /// An index record for a record at `loc` (its length from `loc`'s header fields).
    pub(crate) fn rec_at(&self, loc: &Loc, verified: bool) -> Rec {
        Rec {
            block: self.block_of(loc.seg, loc.off),
            blocks: (loc.record_len() / PAGE).min(u64::from(MAX_BLOCKS)) as u32,
            epoch_lo: loc.epoch as u8,
            verified,
        }
    }

    /// Bytes an index record stands for (whole blocks; a lower bound for saturated lengths).
    fn rec_bytes(rec: Rec) -> u64 {
        u64::from(rec.blocks) * PAGE
    }

    /// The location of an index record, in its segment's current epoch. The header fields are
    /// what the index knows: a 4 KiB header and the rest as body, enough for a tombstone (of a
    /// saturated length the tombstone covers the first 256 MiB, and recovery steps over the
    /// rest 4 KiB at a time: no header of that epoch starts there).
    pub(crate) fn loc_of(&self, rec: Rec) -> Loc {
        let (seg, off) = self.place_of(rec);
        Loc {
            seg,
            epoch: self.epoch_of(seg),
            off,
            header_len: PAGE as u32,
            body_len: Self::rec_bytes(rec).saturating_sub(PAGE),
            seq: 0,
        }
    }

    /// Whether an index record is current: its segment's epoch still has its low byte.
    pub(crate) fn live(&self, rec: Rec) -> bool {
        let (seg, _) = self.place_of(rec);
        self.epochs
            .get(seg as usize)
            .is_some_and(|e| e.load(Ordering::Acquire) as u8 == rec.epoch_lo)
    }

    /// The order of records (larger is newer): their reservation order.
    pub(crate) fn age(&self, rec: Rec) -> u64 {
        let (seg, off) = self.place_of(rec);
        (self.epoch_of(seg) << 32) | (off / PAGE)
    }

    /// Whether the index has the record at `loc` for `primary` and the variant tag `vtag`.
    pub(crate) fn indexes(&self, primary: &[u8], vtag: u8, loc: &Loc) -> bool {
        let want = self.rec_at(loc, false);
        self.found(primary)
            .iter()
            .any(|f| f.vtag == vtag && f.rec.block == want.block && f.rec.epoch_lo == want.epoch_lo)
    }

    /// The live index entries of a primary key, newest first.
    pub(crate) fn found(&self, primary: &[u8]) -> Vec<Found> {
        let h = self.key_hash(primary);
        let mut found = self.index.lookup(h, &|r| self.live(r));
        found.sort_by_key(|f| std::cmp::Reverse(self.age(f.rec)));
        found
    }

    /// An unopened reference to an index entry.
    pub(crate) fn ref_of(&self, primary: &[u8], f: Found) -> ObjectRef {
        let loc = self.loc_of(f.rec);
        ObjectRef {
            variant_tag: f.vtag,
            record_len: Self::rec_bytes(f.rec),
            variant: bytes::Bytes::new(),
            meta: bytes::Bytes::new(),
            primary: bytes::Bytes::copy_from_slice(primary),
            loc: Loc {
                header_len: 0,
                body_len: 0,
                ..loc
            },
            verified: f.rec.verified,
            complete: false,
        }
    }

    /// Whether the index still has the record at `loc` under `primary` (and its segment is at
    /// `loc`'s epoch); its `verified` flag when it has.
    pub(crate) fn indexed(&self, primary: &[u8], loc: &Loc) -> Option<bool> {
        if self.epoch_of(loc.seg) != loc.epoch {
            return None;
        }
        let block = self.block_of(loc.seg, loc.off);
        self.index
            .lookup(self.key_hash(primary), &|r| self.live(r))
            .into_iter()
            .find(|f| f.rec.block == block)
            .map(|f| f.rec.verified)
    }

    /// Insert the record at `loc` (its segment pinned or the store private) as variant `vtag`
    /// of `primary`, and account for what it displaced: the replaced record (an entry with
    /// the tags that `same` says is the same object; returned, to tombstone), variants over
    /// the cap and entries evicted at the index's bound (counted).
    pub(crate) fn index_insert(
        &self,
        st: &mut State,
        primary: &[u8],
        vtag: u8,
        loc: &Loc,
        verified: bool,
        same: &dyn Fn(Rec) -> bool,
    ) -> Inserted {
        let h = self.key_hash(primary);
        let rec = self.rec_at(loc, verified);
        let d: Displaced = self.index.insert_checked(
            h,
            vtag,
            rec,
            self.cfg.max_variants_per_key,
            &|r| self.live(r),
            &|r| self.age(r),
            same,
        );
        st.add(loc.seg, Self::rec_bytes(rec));
        for t in &d.trimmed {
            st.variants_trimmed += 1;
            self.forget(st, *t);
        }
        for e in &d.evicted {
            st.index_evictions += 1;
            self.forget(st, *e);
        }
        let replaced = d.replaced.map(|r| {
            let l = self.loc_of(r);
            st.sub(l.seg, Self::rec_bytes(r));
            self.ram.remove(l.id());
            l
        });
        Inserted { replaced }
    }

    /// Drop a restored index's entries in the segments marked in `segs` (and stale ones).
    pub(crate) fn drop_segments(&self, segs: &[bool]) {
        for i in 0..index::SHARDS {
            self.index.sweep(i, &|r| {
                let (seg, _) = self.place_of(r);
                !segs.get(seg as usize).copied().unwrap_or(true) && self.live(r)
            });
        }
    }

    /// Count a restored index's live entries into the segments' accounting (a start from a
    /// checkpoint); sets the recovered count.
    pub(crate) fn restore_accounting(&mut self) {
        // A shard's entries at a time (not the whole index's: a start must not need a second
        // copy of it), gathered under that shard's lock, counted under the state's.
        let mut recs = Vec::new();
        for shard in 0..index::SHARDS {
            recs.clear();
            self.index.for_each_in(shard, |r| recs.push(r));
            let mut st = self.lock();
            for &r in recs.iter().filter(|&&r| self.live(r)) {
                let (seg, _) = self.place_of(r);
                st.add(seg, Self::rec_bytes(r));
            }
        }
        let st = self.lock();
        let n = st.objects();
        drop(st);
        self.recovered = n;
    }

    /// Account for a live entry that left the index.
    fn forget(&self, st: &mut State, rec: Rec) -> Loc {
        let l = self.loc_of(rec);
        st.sub(l.seg, Self::rec_bytes(rec));
        self.ram.remove(l.id());
        l
    }

    /// Remove the entries of `primary`, or only the one at `at`; returns the live ones removed.
    /// A key whose tag collides with `primary`'s may lose an entry too (an object lost, never a
    /// wrong one served).
    pub(crate) fn index_remove(
        &self,
        st: &mut State,
        primary: &[u8],
        at: Option<&Loc>,
    ) -> Vec<Loc> {
        let h = self.key_hash(primary);
        if at.is_some_and(|l| self.epoch_of(l.seg) != l.epoch) {
            return Vec::new();
        }
        let block = at.map(|l| self.block_of(l.seg, l.off));
        self.index
            .remove(h, None, block)
            .into_iter()
            .filter(|r| self.live(*r))
            .map(|r| self.forget(st, r))
            .collect()
    }

    /// Mark the record at `loc` verified, if the index still has it.
    pub(crate) fn index_set_verified(&self, primary: &[u8], loc: &Loc) {
        if self.epoch_of(loc.seg) == loc.epoch {
            let block = self.block_of(loc.seg, loc.off);
            self.index.set_verified(self.key_hash(primary), block);
        }
    }

    /// Drop the stale entries of the next index shard (one per reclaim, so every entry is
    /// looked at long before its segment's epoch low byte comes round again).
    pub(crate) fn sweep_next(&self, st: &mut State) {
        self.index.sweep(st.sweep, &|r| self.live(r));
        st.sweep = st.sweep.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use std::sync::Arc;

    use bytes::Bytes;
    use futures_util::StreamExt;

    use crate::{EngineChoice, Store, StoreConfig, StoreWorker};

    fn store(dir: &std::path::Path) -> Arc<Store> {
        let s = Store::open(StoreConfig {
            dir: dir.to_path_buf(),
            size: 64 << 20,
            engine: EngineChoice::Threads,
            // The plain FIFO log: these tests count reclaims.
            admission: crate::Admission::All,
            reinsertion: false,
            ..StoreConfig::default()
        })
        .unwrap();
        // Every key hashes the same: their index tags collide.
        s.key_hash_override.set(|_| 0x0123_4567_89ab_cdef).unwrap();
        s
    }

    async fn put(w: &StoreWorker, key: &str, variant: &[u8], body: &[u8]) {
        let mut wr = w
            .begin_write(
                Bytes::copy_from_slice(key.as_bytes()),
                Bytes::copy_from_slice(variant),
                Bytes::copy_from_slice(key.as_bytes()),
                Some(body.len() as u64),
            )
            .unwrap();
        wr.write(Bytes::copy_from_slice(body)).await.unwrap();
        wr.finish().await.unwrap();
    }

    /// The body of the first candidate of `key` that opens, as the proxy's select does.
    async fn get(w: &StoreWorker, key: &str) -> Option<Vec<u8>> {
        for r in w.store().lookup(key.as_bytes()) {
            let Ok(obj) = w.open(&r).await else {
                continue;
            };
            assert_eq!(obj.meta, key.as_bytes(), "another key's object opened");
            let mut body = std::pin::pin!(obj.body(None));
            let mut out = Vec::new();
            while let Some(c) = body.next().await {
                out.extend_from_slice(&c.unwrap());
            }
            return Some(out);
        }
        None
    }

    /// Objects and bytes follow inserts, replacements, variants over the cap, purges and
    /// segment reclaims (whose objects are counted as evictions).
    #[test]
    fn counts_follow_replacements_trims_purges_and_reclaims() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let s = Store::open(StoreConfig {
            dir: dir.path().to_path_buf(),
            size: 64 << 20,
            engine: EngineChoice::Threads,
            max_variants_per_key: 2,
            admission: crate::Admission::All,
            reinsertion: false,
            ..StoreConfig::default()
        })
        .unwrap();
        let seg = s.layout().segment_size;
        // Three variant keys with distinct tags.
        let mut vs: Vec<Vec<u8>> = Vec::new();
        for i in 0.. {
            let v = format!("v{i}").into_bytes();
            if vs.iter().all(|o| s.variant_tag(o) != s.variant_tag(&v)) {
                vs.push(v);
            }
            if vs.len() == 3 {
                break;
            }
        }
        let counts = |s: &Store| {
            let st = s.stats();
            (st.objects, st.bytes_used, st.variants_trimmed, st.evictions)
        };
        crate::io::block_on_worker(EngineChoice::Threads, async {
            let w = StoreWorker::new(s.clone()).unwrap();
            // Small records are packed: header and body in one 4 KiB block.
            put(&w, "/a", &vs[0], b"one").await;
            assert_eq!(counts(&s), (1, 4096, 0, 0));
            put(&w, "/a", &vs[0], b"two").await;
            assert_eq!(counts(&s), (1, 4096, 0, 0), "a replacement");
            put(&w, "/a", &vs[1], b"x").await;
            put(&w, "/a", &vs[2], b"y").await;
            assert_eq!(counts(&s), (2, 2 * 4096, 1, 0), "over the cap");
            assert_eq!(s.remove(b"/a"), 2);
            assert_eq!(counts(&s), (0, 0, 1, 0));
            // Fill every segment once and then some: the first is reclaimed.
            let body = vec![0u8; (seg / 4) as usize];
            let mut n = 0u64;
            while s.stats().evictions == 0 {
                put(&w, &format!("/f{n}"), b"", &body).await;
                n += 1;
            }
            let (objects, bytes, _, evictions) = counts(&s);
            assert_eq!(objects + evictions, n, "every object indexed or evicted");
            assert_eq!(bytes, objects * (4096 + seg / 4));
        })
        .unwrap();
    }

    /// Two keys whose index hashes are equal: each gets its own body, never the other's. With
    /// distinct variant tags both are kept, and a lookup costs at most one extra read (the
    /// other key's header); with equal ones too (the publish reads the other's header).
    #[test]
    fn colliding_keys_never_get_each_others_bodies() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let s = store(dir.path());
        // Two variant keys with different tags.
        let va = b"v-a".to_vec();
        let vb = (0..)
            .map(|i| format!("v-b{i}").into_bytes())
            .find(|v| s.variant_tag(v) != s.variant_tag(&va))
            .unwrap();
        crate::io::block_on_worker(EngineChoice::Threads, async {
            let w = StoreWorker::new(s.clone()).unwrap();
            put(&w, "/a", &va, b"body of a").await;
            put(&w, "/b", &vb, b"body of b").await;
            assert_eq!(s.lookup(b"/a").len(), 2, "both are candidates of each");
            for _ in 0..2 {
                let reads = s.stats().disk_reads;
                assert_eq!(get(&w, "/a").await.unwrap(), b"body of a");
                assert!(s.stats().disk_reads - reads <= 2, "one extra read at most");
                assert_eq!(get(&w, "/b").await.unwrap(), b"body of b");
            }
            // Purging /a's object leaves /b.
            for r in s.lookup(b"/a") {
                if w.open(&r).await.is_ok() {
                    assert!(s.remove_object(&r));
                }
            }
            assert!(get(&w, "/a").await.is_none());
            assert_eq!(get(&w, "/b").await.unwrap(), b"body of b");
            // Equal variant tags as well: the publish reads the other's header, and both stay.
            put(&w, "/c", b"", b"body of c").await;
            put(&w, "/d", b"", b"body of d").await;
            assert_eq!(get(&w, "/c").await.unwrap(), b"body of c");
            assert_eq!(get(&w, "/d").await.unwrap(), b"body of d");
            assert_eq!(get(&w, "/b").await.unwrap(), b"body of b");
            assert_eq!(s.stats().objects, 3);
            // A second /c replaces only /c.
            put(&w, "/c", b"", b"body of c2").await;
            assert_eq!(get(&w, "/c").await.unwrap(), b"body of c2");
            assert_eq!(get(&w, "/d").await.unwrap(), b"body of d");
            assert_eq!(s.stats().objects, 3);
        })
        .unwrap();
    }
}
