//! Which records were read since they were written: one bit per 4 KiB block of the disk, set
//! at the block of a record's header by every hit ([`StoreWorker::open`], disk or RAM tier), and
//! taken by the reinsertion pass (`src/reinsert.rs`) when the record's segment is next in line
//! for reclaim. Lock-free (an atomic OR per hit); an eighth of a byte of RAM per 4 KiB of disk
//! (256 KiB for 8 GiB), allocated only when reinsertion is on.
//!
//! [`StoreWorker::open`]: super::StoreWorker::open

use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::Layout;

const PAGE: u64 = 4096;

pub(crate) struct Accessed {
    words: Box<[AtomicU64]>,
    /// Blocks per segment.
    per_seg: u64,
}

/// Bytes of the bits for a store of `capacity` bytes.
pub fn bytes_for(capacity: u64) -> u64 {
    (capacity / PAGE).div_ceil(64) * 8
}

impl Accessed {
    /// Bits for every block of `layout` (none when `on` is false: every call is a no-op).
    pub fn new(layout: &Layout, on: bool) -> Accessed {
        let per_seg = layout.segment_size / PAGE;
        let blocks = if on {
            per_seg * u64::from(layout.segment_count)
        } else {
            0
        };
        Accessed {
            words: (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            per_seg,
        }
    }

    /// RAM bytes of the bits.
    pub fn bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    fn bit(&self, seg: u32, off: u64) -> Option<(&AtomicU64, u64)> {
        let b = u64::from(seg) * self.per_seg + off / PAGE;
        let w = self.words.get((b / 64) as usize)?;
        Some((w, 1 << (b % 64)))
    }

    /// The record whose header is at `off` of `seg` was read.
    pub fn touch(&self, seg: u32, off: u64) {
        if let Some((w, m)) = self.bit(seg, off)
            && w.load(Ordering::Relaxed) & m == 0
        {
            w.fetch_or(m, Ordering::Relaxed);
        }
    }

    /// The offsets in `seg` whose bits are set, in order; their bits are cleared.
    pub fn take_segment(&self, seg: u32) -> Vec<u64> {
        let mut offs = Vec::new();
        let first = u64::from(seg) * self.per_seg;
        for b in (first..first + self.per_seg).step_by(64) {
            let Some(w) = self.words.get((b / 64) as usize) else {
                break;
            };
            let mut bits = w.swap(0, Ordering::Relaxed);
            while bits != 0 {
                let i = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                offs.push((b + i - first) * PAGE);
            }
        }
        offs
    }

    /// Forget every bit of `seg` (reclaimed: its records are gone). Under the reclaim's lock:
    /// no list is built.
    pub fn clear_segment(&self, seg: u32) {
        let first = (u64::from(seg) * self.per_seg / 64) as usize;
        let words = self.per_seg.div_ceil(64) as usize;
        for w in self.words.iter().skip(first).take(words) {
            w.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touched_headers_come_back_once_per_segment() {
        let layout = Layout::plan(64 << 20);
        let a = Accessed::new(&layout, true);
        a.touch(1, 0);
        a.touch(1, 4096 * 70);
        a.touch(1, 4096 * 70);
        a.touch(2, 8192);
        assert_eq!(a.take_segment(1), vec![0, 4096 * 70]);
        assert!(a.take_segment(1).is_empty(), "taken bits are cleared");
        assert_eq!(a.take_segment(2), vec![8192]);
        a.touch(3, 4096);
        a.clear_segment(3);
        assert!(
            a.take_segment(3).is_empty(),
            "a reclaimed segment forgets its bits"
        );
        let off = Accessed::new(&layout, false);
        off.touch(1, 0);
        assert!(off.take_segment(1).is_empty());
    }
}
