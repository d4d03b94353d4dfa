//! The store's configuration ([`StoreConfig`]) and its default limits. A leaf: the modules
//! that read the configuration import it from here, not from the crate root.

use std::path::PathBuf;

use crate::admission::Admission;
use crate::io::EngineChoice;

/// Unknown-length bodies are buffered in RAM up to this size, then written; larger ones are not
/// stored. 8 MiB bounds the memory one slow chunked response can pin per connection.
pub const UNKNOWN_LENGTH_CAP: u64 = 8 << 20;
/// Default per-worker I/O buffer budget (see [`StoreWorker::with_io_buffer_bytes`](crate::StoreWorker::with_io_buffer_bytes) and
/// [`Store::set_io_buffer_bytes_per_worker`](crate::Store::set_io_buffer_bytes_per_worker)): 32 MiB is 128 chunks of 256 KiB in flight or
/// queued to sockets, well above what the disk needs to reach its bandwidth.
pub const DEFAULT_IO_BUFFER_BYTES: u64 = 32 << 20;
/// Default most disk reads in flight at once, all workers together.
pub const DEFAULT_READS_IN_FLIGHT: u32 = 128;

/// Store configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Cache directory (created if missing).
    pub dir: PathBuf,
    /// Disk budget in bytes (at least 64 MiB; smaller values are raised). The store refuses to
    /// open when its filesystem cannot hold it (see [`space`](crate::space)).
    pub size: u64,
    /// Ignore `size`: take the filesystem's free space plus the store's own files, less a
    /// reserve of 10% of the filesystem or 1 GiB, whichever is larger (see [`space`](crate::space)).
    pub size_auto: bool,
    /// Objects at or above this size are read with O_DIRECT. Default 4 KiB: what
    /// `bench/run.sh` measured (all of its figures ran at 4 KiB; 64 KiB was never benchmarked).
    pub direct_io_threshold: u64,
    /// Largest object stored.
    pub max_object_size: u64,
    /// RAM tier capacity in bytes; 0 disables it.
    pub ram_tier_bytes: u64,
    /// The I/O engine to use (`Auto` probes io_uring).
    pub engine: EngineChoice,
    /// Most disk reads in flight at once, all workers together (at least 1).
    pub reads_in_flight: u32,
    /// Check large bodies against their block checksums on every read; when false, only until
    /// a record's whole body has passed once in this run (see `src/body.rs`).
    pub verify_every_read: bool,
    /// Variants kept per primary key; one more drops the oldest (0: no cap).
    pub max_variants_per_key: usize,
    /// The most RAM the object index may take (the memory plan's share). At it the index
    /// evicts instead of growing (`StoreStats::index_evictions`). 0: room for the disk's
    /// capacity in 4 KiB records (the smallest: a packed small object).
    pub index_bytes: u64,
    /// Which fills are written (see [`admission`](crate::admission)).
    pub admission: Admission,
    /// Give objects read since they were written a second life: copy them ahead of their
    /// segment's reclaim instead of evicting them (see `src/reinsert.rs`).
    pub reinsertion: bool,
}

impl Default for StoreConfig {
    /// 10 GiB in `/var/cache/edgecache`, O_DIRECT reads from 4 KiB, `max_object_size` 64 GiB
    /// (the data plane's default; a record is bounded by its segment all the same, see
    /// [`Store::max_body_len`](crate::Store::max_body_len)), the RAM tier disabled, the I/O engine probed, 32 variants per
    /// key, the index sized for the disk, second-hit admission and reinsertion (what the
    /// replayed workload of `bench/BENCHMARKS.md` chose).
    fn default() -> StoreConfig {
        StoreConfig {
            dir: PathBuf::from("/var/cache/edgecache"),
            size: 10 << 30,
            size_auto: false,
            direct_io_threshold: 4 << 10,
            max_object_size: 64 << 30,
            ram_tier_bytes: 0,
            engine: EngineChoice::Auto,
            reads_in_flight: DEFAULT_READS_IN_FLIGHT,
            verify_every_read: false,
            max_variants_per_key: 32,
            index_bytes: 0,
            admission: Admission::default(),
            reinsertion: true,
        }
    }
}
