//! Store counters and the disk read latency histogram (fixed buckets, lock-free).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds (inclusive, microseconds) of the disk read latency buckets; one more bucket
/// counts everything above the last bound.
pub const LATENCY_BOUNDS_US: [u64; 12] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 1_000_000,
];

/// What a disk write was for: the `kind` of [`StoreStats::disk_write_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A record: its body (padded to 4096) and its header, including records abandoned part way.
    Record = 0,
    /// A 4 KiB tombstone header: over an abandoned, replaced, purged or corrupt record, or
    /// sealing the unused tail of a full segment.
    Tombstone = 1,
    /// The 4 KiB segment header written when a segment is reclaimed (once per segment's epoch).
    SegmentHeader = 2,
    /// A record header rewritten in place with new meta (after a 304).
    MetaRewrite = 3,
    /// A record copied, header and body, by reinsertion (`StoreConfig::reinsertion`).
    Reinsert = 4,
}

impl WriteKind {
    pub const ALL: [WriteKind; 5] = [
        Self::Record,
        Self::Tombstone,
        Self::SegmentHeader,
        Self::MetaRewrite,
        Self::Reinsert,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Record => "record",
            Self::Tombstone => "tombstone",
            Self::SegmentHeader => "segment_header",
            Self::MetaRewrite => "meta_rewrite",
            Self::Reinsert => "reinsert",
        }
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub disk_write_bytes: [AtomicU64; WriteKind::ALL.len()],
    pub admitted_body_bytes: AtomicU64,
    pub admission_rejected: AtomicU64,
    pub evictions: AtomicU64,
    pub corrupt_dropped: AtomicU64,
    pub body_checks_skipped: AtomicU64,
    pub write_errors: AtomicU64,
    pub record_writes: AtomicU64,
    pub record_write_ops: AtomicU64,
    pub publishes_invalidated: AtomicU64,
    pub reinserted: AtomicU64,
    pub reinserted_bytes: AtomicU64,
    pub reinserts_refused: AtomicU64,
    pub disk_reads: AtomicU64,
    pub disk_read_bytes: AtomicU64,
    pub lat_buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    pub lat_sum_us: AtomicU64,
}

impl Counters {
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    /// Bytes that reached the disk in a completed write.
    pub fn disk_write(&self, kind: WriteKind, bytes: u64) {
        self.disk_write_bytes[kind as usize].fetch_add(bytes, Relaxed);
    }

    pub fn disk_writes(&self) -> [u64; WriteKind::ALL.len()] {
        WriteKind::ALL.map(|k| self.disk_write_bytes[k as usize].load(Relaxed))
    }

    pub fn disk_read(&self, bytes: usize, took: Duration) {
        self.disk_reads.fetch_add(1, Relaxed);
        self.disk_read_bytes.fetch_add(bytes as u64, Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = LATENCY_BOUNDS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(LATENCY_BOUNDS_US.len());
        self.lat_buckets[i].fetch_add(1, Relaxed);
        self.lat_sum_us.fetch_add(us, Relaxed);
    }

    pub fn histogram(&self) -> LatencyHistogram {
        LatencyHistogram {
            bounds_us: &LATENCY_BOUNDS_US,
            counts: self.lat_buckets.iter().map(|c| c.load(Relaxed)).collect(),
            sum_us: self.lat_sum_us.load(Relaxed),
        }
    }
}

/// A snapshot of the disk read latency histogram, ready for a Prometheus histogram export.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LatencyHistogram {
    /// Bucket upper bounds in microseconds.
    pub bounds_us: &'static [u64],
    /// Per-bucket counts (not cumulative); `counts.len() == bounds_us.len() + 1`, the last one
    /// counting reads slower than the last bound.
    pub counts: Vec<u64>,
    /// Sum of all latencies in microseconds.
    pub sum_us: u64,
}

impl LatencyHistogram {
    /// Total number of reads observed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// A snapshot of the store's state and counters (all zero by default: a store nobody opened,
/// as the data plane's metrics reference shows it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Objects in the disk index.
    pub objects: u64,
    /// Bytes of live records (headers + padded bodies) on disk.
    pub bytes_used: u64,
    /// Bytes of all segment files (never above the configured size).
    pub bytes_capacity: u64,
    /// Objects dropped by segment reclaim (FIFO eviction).
    pub evictions: u64,
    /// Variants dropped for the per-key cap.
    pub variants_trimmed: u64,
    /// Objects the index dropped to stay within its memory bound (`StoreConfig::index_bytes`).
    pub index_evictions: u64,
    /// RAM bytes of the object index now, and the most it may grow to.
    pub index_bytes: u64,
    pub index_bound_bytes: u64,
    /// Records dropped because a checksum failed: torn or corrupt headers found by recovery and
    /// body or header checksum failures at read time.
    pub corrupt_dropped: u64,
    /// Disk reads of a body that skipped its block checksums because the record had passed
    /// them whole earlier in this run (never with `verify_every_read`).
    pub body_checks_skipped: u64,
    /// Objects indexed by the recovery scan at open.
    pub recovered_objects: u64,
    /// Failed disk writes (ENOSPC, EIO, ...).
    pub write_errors: u64,
    /// Record writes queued by fills (whole records, the headers of larger ones, and their
    /// bodies' pieces), and the disk writes they went out in: back to back ones queued
    /// together share one (`src/combine.rs`).
    pub record_writes: u64,
    pub record_write_ops: u64,
    /// Fills not published because their key was invalidated while they ran.
    pub publishes_invalidated: u64,
    /// Objects reinsertion copied ahead of their segment's reclaim, and their body bytes
    /// (`StoreConfig::reinsertion`); copies not published because the object changed, was
    /// purged or was being written meanwhile.
    pub reinserted: u64,
    pub reinserted_bytes: u64,
    pub reinserts_refused: u64,
    pub ram_tier_bytes: u64,
    pub ram_tier_objects: u64,
    /// Disk read operations and their bytes.
    pub disk_reads: u64,
    pub disk_read_bytes: u64,
    pub disk_read_latency: LatencyHistogram,
    /// Bytes written to the disk, by [`WriteKind`] (index with `kind as usize`). Their sum over
    /// `admitted_body_bytes` is the store's write amplification.
    pub disk_write_bytes: [u64; WriteKind::ALL.len()],
    /// Body bytes of the records written whole (header on disk): what admission let in.
    pub admitted_body_bytes: u64,
    /// Fills the admission policy kept off the disk (`StoreConfig::admission`).
    pub admission_rejected: u64,
    /// The resolved engine.
    pub engine: &'static str,
    /// Whether every segment could be opened with O_DIRECT.
    pub direct_io: bool,
    pub segment_size: u64,
    pub segment_count: u32,
    /// I/O buffer budgets of the live workers, summed: the bound, the bytes allocated now (in
    /// use or pooled for reuse), of which pooled, the sum of the workers' peaks, and how many
    /// buffer requests had to wait for the budget.
    pub io_buffer_capacity: u64,
    pub io_buffer_bytes: u64,
    pub io_buffer_pooled: u64,
    pub io_buffer_peak: u64,
    pub io_buffer_waits: u64,
}
