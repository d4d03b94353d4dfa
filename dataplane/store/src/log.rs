//! Appending to the log: reservations, segment reclaim (FIFO eviction), publishing, tombstones.

use std::sync::atomic::Ordering;

use super::identity::Checked;
use super::layout::SEGMENT_HEADER;
use super::metrics::{Counters, WriteKind};
use super::record::{self, RecordHeader};
use super::state::{Loc, Seg};
use crate::error::StoreError;
use crate::io::AlignedBuf;
use crate::io::file::pwrite_all;
use crate::object::ObjectRef;
use crate::state::Reservation;
use crate::store::Store;

impl Store {
    /// Reserve `len` bytes (a multiple of 4096) for a record. Reclaims the oldest segment when
    /// the active one is full.
    pub(crate) fn reserve(&self, len: u64) -> Result<Reservation, StoreError> {
        if len > self.layout.max_record() {
            return Err(StoreError::TooLarge {
                size: len,
                limit: self.layout.max_record(),
            });
        }
        let mut st = self.lock();
        if let Some(a) = st.active {
            let s = &mut st.segs[a as usize];
            if s.write_off + len <= self.layout.segment_size {
                let r = Reservation {
                    seg: a,
                    epoch: s.epoch,
                    off: s.write_off,
                    len,
                };
                s.write_off += len;
                s.pins += 1;
                return Ok(r);
            }
        }
        let Some(v) = st.victim() else {
            return Err(StoreError::NoSpace);
        };
        if let Some(a) = st.active.take() {
            self.seal(a, &st.segs[a as usize]);
        }
        // Its index entries go stale with the epoch (and leave the index lazily).
        let dropped = st.drop_segment(v);
        self.ram.drop_segment(v);
        self.counters
            .evictions
            .fetch_add(dropped, Ordering::Relaxed);
        let epoch = st.next_epoch;
        st.next_epoch += 1;
        // Readers of the old epoch notice from here on.
        st.segs[v as usize].epoch = epoch;
        self.epochs[v as usize].store(epoch, Ordering::Release);
        self.sweep_next(&mut st);
        self.accessed.clear_segment(v);
        st.active = None;
        // Durable before any record of the epoch is written: a segment header lost while
        // records of its epoch persist (a drive's cache flushes in any order) would bring the
        // segment back at its old epoch, the next start would reuse the lost epoch for the
        // next reclaim, and those records would be valid again at the start after (a purged
        // object back). Once per reclaim, so cheap.
        let written = self.with_sync_block(|hdr| {
            record::encode_segment(hdr.full_mut(), self.nonce, epoch, v);
            hdr.set_len(4096);
            self.write_sync(v, hdr, 0)?;
            self.sync_segment(v)
        });
        if let Err(e) = written {
            Counters::inc(&self.counters.write_errors);
            return Err(e.into());
        }
        self.counters.disk_write(WriteKind::SegmentHeader, 4096);
        self.reclaims.fetch_add(1, Ordering::Relaxed);
        st.active = Some(v);
        let s = &mut st.segs[v as usize];
        s.write_off = SEGMENT_HEADER + len;
        s.pins += 1;
        // The next segment in line: its records still asked for get copied before it goes.
        if let Some(r) = &self.reinserter {
            r.wake();
        }
        Ok(Reservation {
            seg: v,
            epoch,
            off: SEGMENT_HEADER,
            len,
        })
    }

    /// Mark the unused tail of a full segment with one tombstone covering it, so recovery
    /// jumps over it instead of scanning it.
    fn seal(&self, seg: u32, s: &Seg) {
        let tail = self.layout.segment_size.saturating_sub(s.write_off);
        if tail < 4096 || s.write_off <= SEGMENT_HEADER {
            return;
        }
        let loc = Loc {
            seg,
            epoch: s.epoch,
            off: s.write_off,
            header_len: 4096,
            body_len: tail - 4096,
            seq: 0,
        };
        self.write_tombstone_sync(&loc);
    }

    pub(crate) fn unpin(&self, seg: u32) {
        self.lock().unpin(seg);
    }

    /// Publish a record whose header is on disk. Returns the location to tombstone: the
    /// replaced record (pinned), or this very record when a newer one (by reservation order)
    /// won meanwhile. With `mark`, a key invalidated since then is not published either (this
    /// record is returned to tombstone): the response predates the invalidation. With
    /// `replacing` (a reinsertion's copy), only while the index still has that record. `checked`
    /// says which entries with the record's tags are the same object ([`Store::check_same`]).
    pub(crate) fn publish(
        &self,
        primary: &[u8],
        vtag: u8,
        loc: Loc,
        mark: Option<u64>,
        replacing: Option<&Loc>,
        checked: &Checked,
    ) -> Option<Loc> {
        let mut st = self.lock();
        if !st.pin(loc.seg, loc.epoch) {
            return None;
        }
        if mark.is_some_and(|m| m != self.marks.get(primary)) {
            Counters::inc(&self.counters().publishes_invalidated);
            return Some(loc);
        }
        if let Some(orig) = replacing
            && !self.indexes(primary, vtag, orig)
        {
            Counters::inc(&self.counters().reinserts_refused);
            return Some(loc);
        }
        let age = self.age(self.rec_at(&loc, false));
        let newer = self
            .found(primary)
            .iter()
            .any(|f| f.vtag == vtag && checked.same(f.rec) && self.age(f.rec) > age);
        if newer {
            return Some(loc);
        }
        st.unpin(loc.seg);
        let old = self
            .index_insert(&mut st, primary, vtag, &loc, false, &|r| checked.same(r))
            .replaced?;
        st.pin(old.seg, old.epoch).then_some(old)
    }

    /// Drop a record that failed a checksum, count it, and tombstone it.
    pub(crate) fn drop_corrupt(&self, primary: &[u8], loc: &Loc) {
        Counters::inc(&self.counters.corrupt_dropped);
        tracing::warn!(seg = loc.seg, off = loc.off, "corrupt record dropped");
        self.ram.remove(loc.id());
        let pinned = {
            let mut st = self.lock();
            !self.index_remove(&mut st, primary, Some(loc)).is_empty() && st.pin(loc.seg, loc.epoch)
        };
        if pinned {
            self.tombstone_pinned(std::slice::from_ref(loc), false);
        }
    }

    /// Drop the index entry of a record whose header is a tombstone (purged after the
    /// checkpoint the index was restored from).
    pub(crate) fn forget_dead(&self, primary: &[u8], loc: &Loc) {
        let mut st = self.lock();
        self.index_remove(&mut st, primary, Some(loc));
    }

    /// Record that the whole body of the record at `loc` passed its block checksums.
    pub(crate) fn mark_verified(&self, primary: &[u8], loc: &Loc) {
        self.index_set_verified(primary, loc);
    }

    /// Whether a read of `r`'s body may skip the block checksums (and count that it does):
    /// its whole body passed them earlier in this run and `verify_every_read` is off.
    pub(crate) fn trusts_body(&self, r: &ObjectRef) -> bool {
        let trust = r.verified && !self.config().verify_every_read;
        if trust {
            Counters::inc(&self.counters.body_checks_skipped);
        }
        trust
    }

    /// Fill `buf` with the 4 KiB tombstone of a record.
    pub(crate) fn encode_tombstone(&self, loc: &Loc, buf: &mut AlignedBuf) {
        buf.clear();
        // In blocks of its own whatever the record's header was (a packed one's checksum would
        // cover body bytes the tombstone does not write): the same record length.
        let len = loc.record_len();
        RecordHeader::dead(
            self.nonce,
            loc.epoch,
            loc.seq,
            4096,
            len.saturating_sub(4096),
        )
        .encode(&mut buf.full_mut()[..4096]);
        buf.set_len(4096);
    }

    /// Run `f` with the store's one 4 KiB block for synchronous writes (segment headers and
    /// tombstones), so they allocate nothing. Never take the state lock inside `f`.
    fn with_sync_block<R>(&self, f: impl FnOnce(&mut AlignedBuf) -> R) -> R {
        let mut g = match self.sync_block.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Write a tombstone over a record's header (segment must be pinned or the store private).
    pub(super) fn write_tombstone_sync(&self, loc: &Loc) {
        let written = self.with_sync_block(|buf| {
            self.encode_tombstone(loc, buf);
            self.write_sync(loc.seg, buf, loc.off)
        });
        match written {
            Ok(()) => self.counters.disk_write(WriteKind::Tombstone, 4096),
            Err(e) => {
                Counters::inc(&self.counters.write_errors);
                tracing::warn!(error = %e, "tombstone write failed");
            }
        }
    }

    /// A synchronous write of `buf` at `off` in segment `seg` (O_DIRECT descriptor),
    /// journaled for crash tests when the store records its writes.
    fn write_sync(&self, seg: u32, buf: &AlignedBuf, off: u64) -> std::io::Result<()> {
        let Some(f) = self.files.get(seg as usize) else {
            return Ok(());
        };
        pwrite_all(&f.direct, buf, off)?;
        if let Some(j) = self.journal() {
            j.record(seg, off, buf.as_slice());
        }
        Ok(())
    }

    /// [`Store::sync_segment`], a failure counted and logged.
    pub(crate) fn sync_segment_counted(&self, seg: u32) {
        if let Err(e) = self.sync_segment(seg) {
            Counters::inc(&self.counters.write_errors);
            tracing::warn!(error = %e, seg, "cannot sync a segment");
        }
    }

    /// fdatasync a segment file (journaled as a durability point for crash tests).
    fn sync_segment(&self, seg: u32) -> std::io::Result<()> {
        if let Some(f) = self.files.get(seg as usize) {
            f.direct.sync_data()?;
            if let Some(j) = self.journal() {
                j.synced(seg);
            }
        }
        Ok(())
    }

    /// Tombstone pinned records synchronously, then unpin them. `durable`: fdatasync their
    /// segments before (a purge that outlives a power loss).
    pub(crate) fn tombstone_pinned(&self, locs: &[Loc], durable: bool) {
        for loc in locs {
            self.write_tombstone_sync(loc);
        }
        if durable {
            let mut segs: Vec<u32> = locs.iter().map(|l| l.seg).collect();
            segs.sort_unstable();
            segs.dedup();
            for seg in segs {
                self.sync_segment_counted(seg);
            }
        }
        let mut st = self.lock();
        for loc in locs {
            st.unpin(loc.seg);
        }
    }
}
