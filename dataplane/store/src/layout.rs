//! Sizing the segment files: a pure function of the configured budget.
//!
//! - The budget is at least 64 MiB (smaller values are raised to it).
//! - Segments are 64 MiB by default. There are at least 8 (so FIFO eviction drops at most 1/8 of
//!   the cache at once: small budgets get smaller segments) and at most 256 (so the store keeps
//!   at most 512 descriptors open: large budgets get larger segments).
//! - Segment sizes are multiples of 1 MiB; `count * size <= budget`, so pre-allocated files never
//!   exceed the budget (plus one 36-byte superblock file).
//! - A record must fit in one segment (after the 4 KiB segment header), so the largest stored
//!   object is `min(max_object_size, segment_size - 4 KiB - its header)`.

/// Smallest budget.
pub const MIN_BUDGET: u64 = 64 << 20;
/// Default segment size.
pub const DEFAULT_SEGMENT: u64 = 64 << 20;
pub const MIN_SEGMENTS: u64 = 8;
pub const MAX_SEGMENTS: u64 = 256;
const MIB: u64 = 1 << 20;
/// The segment header occupies the first block of every segment.
pub const SEGMENT_HEADER: u64 = 4096;

/// The planned layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub segment_size: u64,
    pub segment_count: u32,
}

impl Layout {
    /// Plan segments for a disk budget in bytes.
    pub fn plan(budget: u64) -> Layout {
        let budget = budget.max(MIN_BUDGET);
        let mut seg = DEFAULT_SEGMENT.max(budget.div_ceil(MAX_SEGMENTS).div_ceil(MIB) * MIB);
        seg = seg.min((budget / MIN_SEGMENTS) / MIB * MIB);
        let count = (budget / seg).min(MAX_SEGMENTS);
        Layout {
            segment_size: seg,
            segment_count: count as u32,
        }
    }

    /// Bytes of all segment files.
    pub fn capacity(&self) -> u64 {
        self.segment_size * u64::from(self.segment_count)
    }

    /// The most a record (header + padded body) may take.
    pub fn max_record(&self) -> u64 {
        self.segment_size - SEGMENT_HEADER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        let gib = 1u64 << 30;
        for (budget, seg_mib, count) in [
            (0, 8, 8),
            (64 * MIB, 8, 8),
            (100 * MIB, 12, 8),
            (128 * MIB, 16, 8),
            (512 * MIB, 64, 8),
            (10 * gib, 64, 160),
            (16 * gib, 64, 256),
            (1024 * gib, 4096, 256),
        ] {
            let l = Layout::plan(budget);
            assert_eq!(
                (l.segment_size / MIB, l.segment_count),
                (seg_mib, count),
                "{budget}"
            );
            assert!(l.capacity() <= budget.max(MIN_BUDGET));
        }
    }

    #[test]
    fn never_over_budget() {
        let mut b = MIN_BUDGET;
        while b < (1u64 << 42) {
            let l = Layout::plan(b);
            assert!(
                l.capacity() <= b && l.segment_count as u64 >= MIN_SEGMENTS,
                "{b}"
            );
            assert!(l.segment_count as u64 <= MAX_SEGMENTS);
            b = b * 13 / 10 + 12345;
        }
    }
}
