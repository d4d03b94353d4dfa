//! The in-memory index and the per-segment bookkeeping, guarded by one mutex in [`Store`].
//!
//! [`Store`]: super::Store

use std::collections::HashMap;

use bytes::Bytes;

/// Where one object lives: enough to read it with one I/O and to notice it was replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loc {
    pub seg: u32,
    /// The segment's epoch when the record was written; a reclaim bumps it.
    pub epoch: u64,
    /// Record offset in the segment (header start).
    pub off: u64,
    pub header_len: u32,
    pub body_len: u64,
    pub seq: u64,
}

impl Loc {
    pub fn record_len(&self) -> u64 {
        super::record::record_len(u64::from(self.header_len), self.body_len)
    }
}

/// One indexed variant.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub variant: Bytes,
    pub loc: Loc,
    /// The meta blob when it is small enough to keep in RAM.
    pub meta: Option<Bytes>,
    /// The whole body passed its block checksums on a read in this run (see
    /// `StoreConfig::verify_every_read`).
    pub verified: bool,
    /// In-place header rewrites (`update_meta`) started and ended: odd while one is in
    /// progress. See `src/rewrite.rs`.
    pub rewrite: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Seg {
    pub epoch: u64,
    /// Next free offset (only meaningful for the active segment).
    pub write_off: u64,
    /// Writers and tombstone writers currently using this segment: it cannot be reclaimed.
    pub pins: u32,
    /// Keys whose records were published in this epoch (some may have been replaced since).
    pub keys: Vec<(Bytes, Bytes)>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub index: HashMap<Bytes, Vec<Entry>>,
    pub segs: Vec<Seg>,
    pub active: Option<u32>,
    pub next_epoch: u64,
    pub objects: u64,
    pub bytes_used: u64,
    /// Estimated heap bytes of the index (see [`entry_cost`]).
    pub index_bytes: u64,
    /// Variants kept per primary key at most (0: no cap); inserting one more drops the oldest.
    pub max_variants: usize,
    /// Variants [`State::insert`] dropped for the cap since the caller last drained this.
    pub trimmed: Vec<(Bytes, Bytes)>,
    /// Variants dropped for the cap, all told.
    pub variants_trimmed: u64,
}

/// Estimated heap bytes of one index entry beyond its key, variant and meta bytes: hash map
/// slot, the variant list, the entry itself, the segment's key list and allocator overhead.
/// Measured with `examples/store_bench.rs`: 100,000 objects with 12-byte keys and 55-byte meta
/// blobs took 62 MiB of RSS, about 650 bytes per object.
pub const ENTRY_OVERHEAD: u64 = 576;

/// Estimated heap bytes of an index entry.
pub fn entry_cost(primary: &[u8], e: &Entry) -> u64 {
    ENTRY_OVERHEAD
        + primary.len() as u64
        + e.variant.len() as u64
        + e.meta.as_ref().map_or(0, |m| m.len() as u64)
}

impl State {
    /// The entry for (primary, variant), if any.
    pub fn get(&self, primary: &[u8], variant: &[u8]) -> Option<&Entry> {
        self.index
            .get(primary)?
            .iter()
            .find(|e| e.variant == variant)
    }

    /// The entry for (primary, variant) if it is still the record with sequence `seq`.
    pub fn get_mut_at(&mut self, primary: &[u8], variant: &[u8], seq: u64) -> Option<&mut Entry> {
        self.index
            .get_mut(primary)?
            .iter_mut()
            .find(|e| e.variant == variant && e.loc.seq == seq)
    }

    /// Insert or replace; returns the replaced location.
    pub fn insert(&mut self, primary: Bytes, e: Entry) -> Option<Loc> {
        self.objects += 1;
        self.bytes_used += e.loc.record_len();
        self.index_bytes += entry_cost(&primary, &e);
        if let Some(s) = self.segs.get_mut(e.loc.seg as usize) {
            s.keys.push((primary.clone(), e.variant.clone()));
        }
        let plen = primary.len() as u64;
        let key = primary.clone();
        let list = self.index.entry(primary).or_default();
        if let Some(slot) = list.iter_mut().find(|x| x.variant == e.variant) {
            let old = std::mem::replace(slot, e);
            self.objects -= 1;
            self.bytes_used -= old.loc.record_len();
            let old_cost = entry_cost(&[], &old) + plen;
            self.index_bytes = self.index_bytes.saturating_sub(old_cost);
            return Some(old.loc);
        }
        list.push(e);
        // Over the cap: the oldest variants (lowest sequence) go, so a key cannot grow without
        // bound (`Vary: User-Agent` and random agents) and a lookup reads a bounded list.
        let mut dropped = Vec::new();
        while self.max_variants > 0 && list.len() > self.max_variants {
            let Some(i) = list
                .iter()
                .enumerate()
                .min_by_key(|(_, x)| x.loc.seq)
                .map(|(i, _)| i)
            else {
                break;
            };
            dropped.push(list.swap_remove(i));
        }
        for old in dropped {
            self.objects -= 1;
            self.bytes_used -= old.loc.record_len();
            let cost = entry_cost(&[], &old) + plen;
            self.index_bytes = self.index_bytes.saturating_sub(cost);
            self.variants_trimmed += 1;
            self.trimmed.push((key.clone(), old.variant));
        }
        None
    }

    /// Remove (primary, variant) if it is at exactly `seq` (or any seq when `None`).
    pub fn remove(&mut self, primary: &[u8], variant: &[u8], seq: Option<u64>) -> Option<Loc> {
        let list = self.index.get_mut(primary)?;
        let i = list
            .iter()
            .position(|x| x.variant == variant && seq.is_none_or(|s| x.loc.seq == s))?;
        let e = list.swap_remove(i);
        if list.is_empty() {
            self.index.remove(primary);
        }
        self.index_bytes = self.index_bytes.saturating_sub(entry_cost(primary, &e));
        self.objects -= 1;
        self.bytes_used -= e.loc.record_len();
        Some(e.loc)
    }

    /// Pin a segment if it still is at `epoch` (so it cannot be reclaimed while we write to it).
    pub fn pin(&mut self, seg: u32, epoch: u64) -> bool {
        match self.segs.get_mut(seg as usize) {
            Some(s) if s.epoch == epoch => {
                s.pins += 1;
                true
            }
            _ => false,
        }
    }

    pub fn unpin(&mut self, seg: u32) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            s.pins = s.pins.saturating_sub(1);
        }
    }

    /// The FIFO victim: the unpinned, non-active segment with the oldest epoch (empty segments,
    /// epoch 0, first).
    pub fn victim(&self) -> Option<u32> {
        self.segs
            .iter()
            .enumerate()
            .filter(|(i, s)| s.pins == 0 && self.active != Some(*i as u32))
            .min_by_key(|(_, s)| s.epoch)
            .map(|(i, _)| i as u32)
    }

    /// Drop every index entry that lives in `seg` at its current epoch. Returns the dropped keys.
    pub fn drop_segment(&mut self, seg: u32) -> Vec<(Bytes, Bytes)> {
        let Some(s) = self.segs.get_mut(seg as usize) else {
            return Vec::new();
        };
        let epoch = s.epoch;
        let keys = std::mem::take(&mut s.keys);
        let mut dropped = Vec::new();
        for (p, v) in keys {
            let hit = self
                .get(&p, &v)
                .is_some_and(|e| e.loc.seg == seg && e.loc.epoch == epoch);
            if hit {
                self.remove(&p, &v, None);
                dropped.push((p, v));
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(v: &'static [u8], seg: u32, seq: u64) -> Entry {
        Entry {
            variant: Bytes::from_static(v),
            loc: Loc {
                seg,
                epoch: 1,
                off: 4096,
                header_len: 4096,
                body_len: 10,
                seq,
            },
            meta: None,
            verified: false,
            rewrite: 0,
        }
    }

    #[test]
    fn insert_replace_remove_reclaim() {
        let mut s = State {
            segs: (0..2)
                .map(|_| Seg {
                    epoch: 1,
                    ..Seg::default()
                })
                .collect(),
            ..State::default()
        };
        let p = Bytes::from_static(b"k");
        assert!(s.insert(p.clone(), entry(b"a", 0, 1)).is_none());
        assert!(s.insert(p.clone(), entry(b"b", 0, 2)).is_none());
        let old = s.insert(p.clone(), entry(b"a", 1, 3)).unwrap();
        assert_eq!(old.seq, 1);
        assert_eq!((s.objects, s.bytes_used), (2, 2 * 8192));
        // reclaiming segment 0 drops only "b"; "a" moved to segment 1.
        assert_eq!(s.drop_segment(0).len(), 1);
        assert_eq!(s.objects, 1);
        assert!(s.get(b"k", b"a").is_some());
        assert!(s.remove(b"k", b"a", Some(99)).is_none());
        assert!(s.remove(b"k", b"a", Some(3)).is_some());
        assert!(s.index.is_empty());
        assert_eq!((s.objects, s.bytes_used, s.index_bytes), (0, 0, 0));
    }

    #[test]
    fn the_oldest_variant_goes_past_the_cap() {
        let mut s = State {
            segs: vec![Seg {
                epoch: 1,
                ..Seg::default()
            }],
            max_variants: 3,
            ..State::default()
        };
        let p = Bytes::from_static(b"k");
        let names: [&'static [u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
        for (i, v) in names.iter().enumerate() {
            s.insert(p.clone(), entry(v, 0, i as u64 + 1));
        }
        assert_eq!(s.index[&p].len(), 3);
        assert!(s.get(b"k", b"a").is_none() && s.get(b"k", b"b").is_none());
        assert!(s.get(b"k", b"e").is_some());
        assert_eq!(s.objects, 3);
        assert_eq!(s.bytes_used, 3 * 8192);
        assert_eq!(s.variants_trimmed, 2);
        let trimmed: Vec<_> = s.trimmed.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(
            trimmed,
            [Bytes::from_static(b"a"), Bytes::from_static(b"b")]
        );
        // Replacing a variant is not a new one: nothing more goes.
        s.insert(p.clone(), entry(b"d", 0, 9));
        assert_eq!(s.index[&p].len(), 3);
        assert_eq!(s.variants_trimmed, 2);
        // Removing all leaves the counts at zero.
        for v in [b"c", b"d", b"e"] {
            assert!(s.remove(b"k", v, None).is_some());
        }
        assert_eq!((s.objects, s.bytes_used, s.index_bytes), (0, 0, 0));
    }
}
