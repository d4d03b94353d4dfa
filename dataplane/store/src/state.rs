//! Per-segment bookkeeping, guarded by one mutex in [`Store`], and where a record lives
//! ([`Loc`]): the data the store's index operations (`indexing`), the log and the readers
//! share. A record's identity is its location (segment, epoch, offset), never its sequence
//! number.
//!
//! [`Store`]: crate::Store

/// Where one object lives. `seg`, `epoch` and `off` are its identity and what the index gives;
/// `header_len`, `body_len` and `seq` come from its header (0 until it was read).
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
        crate::record::record_len(u64::from(self.header_len), self.body_len)
    }

    /// The record's identity.
    pub fn id(&self) -> LocId {
        LocId {
            seg: self.seg,
            epoch: self.epoch,
            off: self.off,
        }
    }
}

/// A record's identity: its place in the log. Within an epoch an offset is written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LocId {
    pub seg: u32,
    pub epoch: u64,
    pub off: u64,
}

/// A space reservation in a segment, pinned until published or aborted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reservation {
    pub seg: u32,
    pub epoch: u64,
    pub off: u64,
    pub len: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Seg {
    pub epoch: u64,
    /// Next free offset (only meaningful for the active segment).
    pub write_off: u64,
    /// Writers and tombstone writers currently using this segment: it cannot be reclaimed.
    pub pins: u32,
    /// Indexed objects in this segment at this epoch, and their bytes (as the index counts
    /// them: whole 4 KiB blocks).
    pub objects: u64,
    pub bytes: u64,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub segs: Vec<Seg>,
    pub active: Option<u32>,
    pub next_epoch: u64,
    /// The index shard the next reclaim sweeps.
    pub sweep: usize,
    /// Variants dropped for the cap, all told.
    pub variants_trimmed: u64,
    /// Objects the index dropped at its memory bound, all told.
    pub index_evictions: u64,
    /// The segments' `bytes`, summed.
    bytes: u64,
}

impl State {
    /// The state of a store of `segments` empty segments.
    pub fn new(segments: u32) -> State {
        State {
            segs: (0..segments).map(|_| Seg::default()).collect(),
            ..State::default()
        }
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

    pub fn objects(&self) -> u64 {
        self.segs.iter().map(|s| s.objects).sum()
    }

    pub fn bytes_used(&self) -> u64 {
        debug_assert_eq!(self.bytes, self.segs.iter().map(|s| s.bytes).sum::<u64>());
        self.bytes
    }

    pub(crate) fn add(&mut self, seg: u32, bytes: u64) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            s.objects += 1;
            s.bytes += bytes;
            self.bytes += bytes;
        }
    }

    pub(crate) fn sub(&mut self, seg: u32, bytes: u64) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            let taken = s.bytes.min(bytes);
            s.objects = s.objects.saturating_sub(1);
            s.bytes -= taken;
            self.bytes -= taken;
        }
    }

    /// Forget a reclaimed segment's objects (their index entries went stale with its epoch);
    /// returns how many there were.
    pub fn drop_segment(&mut self, seg: u32) -> u64 {
        let Some(s) = self.segs.get_mut(seg as usize) else {
            return 0;
        };
        self.bytes -= std::mem::take(&mut s.bytes);
        std::mem::take(&mut s.objects)
    }
}
