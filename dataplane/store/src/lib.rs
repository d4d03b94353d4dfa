//! edgecache-store: the storage engine (a segment log on NVMe, read through io_uring or a thread
//! pool). It knows no HTTP caching rules (those are `edgecache-policy`), no server and no
//! Kubernetes: it keeps bytes under keys.
//!
//! Unsafe code: the workspace denies `unsafe_code`; this crate allows it only on the few items
//! of [`io`] that need it (the 4096-aligned buffer allocation, tokio-uring's buffer traits,
//! borrowing the store's descriptors into tokio-uring, `fallocate`), each with a `// SAFETY:`
//! comment. See the [`io`] module doc.
//!
//! # Using the store from a worker
//! ```no_run
//! # use std::sync::Arc;
//! # use bytes::Bytes;
//! # use futures_util::StreamExt;
//! # use edgecache_store::{Store, StoreConfig, StoreWorker};
//! # fn demo(cfg: StoreConfig) -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<Store> = Store::open(cfg)?; // once, shared by all workers
//! tokio_uring::start(async move {
//!     let w = StoreWorker::new(store.clone())?; // once per worker thread
//!     // Miss: tee the origin body into the store.
//!     let mut wr = w.begin_write(Bytes::from_static(b"GET example.com/a"), Bytes::new(),
//!                                Bytes::from_static(b"meta"), Some(5))?;
//!     wr.write(Bytes::from_static(b"hello")).await?;
//!     wr.finish().await?;
//!     // Hit: look up the variants, open one, stream its verified body.
//!     let r = &store.lookup(b"GET example.com/a")[0];
//!     let obj = w.open(r).await?;
//!     let mut body = std::pin::pin!(obj.body(None));
//!     while let Some(chunk) = body.next().await {
//!         let _bytes = chunk?; // an Err here means: abort the response
//!     }
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })
//! # }
//! ```
//!
//! # The disk store
//! A log of records over a fixed set of pre-allocated segment files, an
//! in-memory index, a RAM tier for small hot objects, and FIFO eviction of whole segments.
//!
//! # Layout
//! The cache directory holds `store.super` (nonce and layout) and `seg-NNNN.dat` segment files,
//! sized by [`layout::Layout::plan`] (64 MiB segments, 8 to 256 of them, never more than the
//! configured size in total). Changing the size (hence the layout) starts an empty cache.
//! Each segment starts with a 4 KiB segment header (magic, store nonce, *epoch*, crc32c) and then
//! holds records written as a log. A record is `[header][body]`, both 4096-aligned; see
//! [`record`] for the format. Per-64 KiB-block crc32c checksums of the body sit in the header.
//!
//! # Writes
//! - [`StoreWorker::begin_write`] reserves the exact record length in the active segment when
//!   the Content-Length is known, and the body streams to disk in 256 KiB aligned O_DIRECT
//!   writes as it arrives. Unknown-length bodies are buffered in RAM up to
//!   [`UNKNOWN_LENGTH_CAP`] (8 MiB), then written at `finish`; larger ones are not stored. All
//!   writers together buffer no more than the bound of [`Store::unknown_length_bodies`] (the
//!   memory plan's); a body that would pass it is not stored (`StoreError::MemoryBound`).
//! - A known-length body can be read while it is written, by any worker
//!   ([`ObjectWriter::readable`], [`StoreWorker::read_growing`]; see `src/growing.rs`):
//!   readers follow the writer's flushes, so a slow reader never holds the writer back.
//! - The header is written **last**: a record becomes valid when its header write completes, and
//!   visible when it is inserted into the index right after. A crash before that leaves no
//!   valid header; recovery stops there. A writer dropped without `finish` writes a tombstone
//!   header (synchronously, one 4 KiB write) so the chain stays walkable.
//! - A replaced record, a purged one and a corrupt one get a tombstone too, so they cannot come
//!   back at the next start (at most one live header per key on disk).
//! - [`StoreWorker::update_meta`] (after a 304 revalidation) rewrites a record's header in
//!   place, within the meta room reserved in it. That write is not atomic, and readers on any
//!   worker may read the header meanwhile: the index marks the record as being rewritten (a
//!   rewrite generation, see `src/rewrite.rs`), so a reader that finds the header failing
//!   its checksum while a rewrite overlapped its read waits for the rewrite to end and reads
//!   again (old or new meta, never a reason to drop the record), and rewrites of one record run
//!   one at a time.
//! - All writes use O_DIRECT (records are aligned), so writing does not fill the page cache.
//!   Objects below `direct_io_threshold` are read through the page cache (buffered), larger ones
//!   with O_DIRECT.
//!
//! # Checksums
//! Every read checks the record header (its crc32c, key, sequence number and epoch) and the
//! segment's epoch. Bodies are checked against their 64 KiB block checksums until a read has
//! passed the whole body once in this run; the index then marks the record verified and later
//! reads of it skip the body checksums (counted as `body_checks_skipped`), unless
//! `StoreConfig::verify_every_read` is set. What the body checksums are for is a record torn by
//! a crash (the disk may persist a header before the body it follows): the first whole read
//! after the start finds it. A record's body never changes while it is indexed (records are
//! written once; a reclaim changes the epoch), so a second check in the same run only guards
//! against the medium changing under it, which the drive's own ECC reports as a read error.
//! Measured (bench/BENCHMARKS.md): the body checksum pass was a fifth of a worker's CPU for
//! 100 KiB disk hits; Traffic Server checks no body by default.
//!
//! # Eviction: FIFO over whole segments
//! When the active segment is full, the segment with the oldest epoch that no writer is using
//! becomes active: all its index entries are dropped (counted as evictions), its epoch is set to
//! the newest, and its segment header is rewritten (synchronously, once per segment) before any
//! record of the new epoch. Readers check the segment's epoch after every read, so a reader
//! racing with a reclaim gets `MissingOrReplaced`, never another object's bytes.
//! FIFO over segments was chosen over LRU because it keeps writes purely sequential (no
//! compaction, no write amplification, no per-object free-space map), makes eviction O(objects
//! in one segment), and is what Traffic Server's cyclone buffer and foyer's FIFO block engine do;
//! hot objects are protected by the RAM tier (CLOCK with frequency-based admission, see
//! `src/ram.rs`) rather than by reordering the disk.
//!
//! # RAM tier
//! Verified objects whose record is at most one read chunk (256 KiB) enter a byte-bounded RAM
//! tier on a disk hit (once it is full, only when a frequency sketch says they are asked for
//! more often than the entry they would evict: TinyLFU) and leave by CLOCK; see
//! `src/ram.rs`. Objects below `direct_io_threshold` are also read through the page cache,
//! which the kernel may keep.
//!
//! # Reads and buffer memory
//! [`StoreWorker::open`] reads header and body with one I/O when the body is at most one chunk
//! (256 KiB), else the header and the first 192 KiB; the rest streams in 256 KiB chunks, one
//! read ahead when the budget and the store's read slots (`StoreConfig::reads_in_flight`) have
//! room (see `src/body.rs`). Every read and write buffer of a worker comes from its
//! [`IoBudget`](crate::io::IoBudget) (`crate::io::budget`): a hard bound on the bytes of
//! aligned buffers it has allocated, in flight, held by a response body not yet written to the
//! socket (a chunk's budget is returned when hyper drops the last `Bytes` of
//! it), or pooled for reuse. Streams wait for the budget instead of allocating: started
//! streams first, then new ones, in arrival order. The default is [`DEFAULT_IO_BUFFER_BYTES`]
//! (32 MiB) per worker; [`Store::set_io_buffer_bytes_per_worker`] or
//! [`StoreWorker::with_io_buffer_bytes`] set it (the memory plan's per-worker I/O buffers).
//! Outside the budget: the store's one 4 KiB block for synchronous writes, the 1 MiB recovery
//! window at open, unknown-length bodies buffered by writers (the caller's `Bytes`, up to
//! [`UNKNOWN_LENGTH_CAP`] each and the bound of [`Store::unknown_length_bodies`] together) and RAM
//! tier copies (bounded by the RAM tier size).
//! A consumer that keeps more than the budget's worth of a stream's chunks alive while
//! polling for more would wait forever; the proxy drops each chunk once hyper has written it.
//!
//! The in-memory index costs about 650 bytes per object plus its keys and in-index meta
//! (measured: 100,000 objects with short keys took 62 MiB). It is not bounded by the budget
//! above: the memory plan reserves room for it ([`Store::set_index_reserve`]), and the RAM tier
//! gives up its own bytes for whatever the index takes beyond that reserve ([`Store::index_bytes`]
//! minus the reserve is subtracted from `ram_tier_bytes`), so index and RAM tier together stay
//! within their shares of the memory plan (within about 10%: allocator fragmentation, see
//! `src/ram.rs`).
//!
//! # CPU per hit: measurements
//! `examples/store_bench.rs` (one worker on a `tokio_uring` runtime pinned to CPU 1, 64 tasks
//! reading random objects and dropping each chunk, objects written first; process CPU time per
//! read, the I/O pool threads included):
//! `taskset -c 1 target/release/examples/store_bench --size S --count N --conc 64 --secs 4`.
//! The test machine was shared (load average 12 to 60), so the figures move by 20% between
//! runs; the CPU per read is steadier than the rates.
//!
//! | change | 1 MiB | 100 KiB | 4 KiB |
//! |---|---:|---:|---:|
//! | before (1 MiB reads, a fresh zeroed buffer per read) | 656-733 µs | 26-41 µs | 3.4-3.8 µs |
//! | pooled buffers, 256 KiB chunks, budget | 268-357 µs | 34-35 µs | 4.0 µs |
//!
//! - Buffer allocation was the largest cost of a 1 MiB hit (perf, cpu-clock samples): 20%
//!   page faults, 6% page-table lock, 5% memset, 5% munmap, from `alloc_zeroed` with 4096
//!   alignment (`posix_memalign`, an `mmap` above glibc's threshold, plus a full `memset`) and
//!   the free. Recycling the buffers (`io/budget.rs`) removes all of it: in the budget test 256
//!   streams of 1 MiB (1,280 reads) made 22 to 41 fresh allocations.
//! - crc32c: the crate uses the SSE 4.2 instruction, three streams in parallel (runtime
//!   detection). It runs at 23 GB/s on cached data but 7 GB/s on data just DMA'd by an O_DIRECT
//!   read (memory bound): about 14 µs per 100 KiB, 31-47% of a 100 KiB read in the store. The
//!   pass is not wasted: it brings the chunk into the cache right before hyper copies it into
//!   the socket, which is why chunks are 256 KiB (they stay in L2) rather than 1 MiB.
//! - The rest of a 100 KiB read is the kernel's O_DIRECT path (about 25%: `iomap_dio_rw`,
//!   page pinning, virtio notification) and a few % of index lookup (SipHash, key compares)
//!   and header decoding (three small copies).
//! - Small objects are one buffered read of header and body (8 KiB for a 4 KiB object), and
//!   the index lock is taken twice per hit (lookup, then the still-current check in `open`,
//!   which also takes the record's rewrite generation), uncontended
//!   with one worker.
//!
//! # Recovery
//! [`Store::open`] takes an exclusive lock on `store.lock` (one process per directory), deletes
//! leftover `*.tmp` files, walks every segment's chain (see `src/recover.rs`), keeps the latest
//! sequence number of each key and tombstones older duplicates. It never resumes writing into a
//! recovered segment: the first write reclaims a fresh one. Nothing is fsynced on the hot path:
//! a killed process loses nothing that was published (completed writes are in the kernel); a
//! power loss may lose recent records, and a body that did not reach the disk before its header
//! fails its block checksums at read time and is dropped, never served.
//!
//! # Errors
//! ENOSPC or EIO on a write fails that write (counted in `write_errors`), the record is never
//! published, and the store keeps serving reads and accepting later writes.
//!
//! # Known limits
//! - A record must fit in one segment: objects larger than about a segment (64 MiB by default,
//!   see [`layout`]) are not stored whatever `max_object_size` says ([`Store::max_body_len`]).
//! - Records written after a torn one in the same segment are lost at restart (only the
//!   segments being written when the process died are affected).
//! - A meta rewrite (`update_meta`) torn by a crash loses that record and the rest of its
//!   segment at restart, like a torn write.
//! - A meta rewrite whose future is dropped mid-write ends its in-progress mark at the drop
//!   while its write may still land; a reader whose two reads of the header both overlap that
//!   late write still drops the record as corrupt (see `src/rewrite.rs`).
//! - The synchronous writes (segment header on reclaim, tombstones on abort, purge and
//!   corruption) block the calling worker for one 4 KiB write each.

pub mod admission;
mod body;
mod dir;
pub mod error;
mod frequency;
mod growing;
pub mod index;
pub mod io;
pub mod layout;
mod log;
mod marks;
pub mod metrics;
pub(crate) mod ram;
pub mod record;
pub(crate) mod recover;
mod rewrite;
pub mod space;
pub(crate) mod state;
mod worker;
mod writer;

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use edgecache_host::Share;
use tokio::sync::OwnedSemaphorePermit;

pub use crate::io::{EngineChoice, EngineKind, probe_uring};
pub use admission::Admission;
pub use body::{Source, StoredObject};
pub use error::StoreError;
pub use growing::Growing;
pub use layout::Layout;
pub use metrics::{LatencyHistogram, StoreStats, WriteKind};
pub use worker::StoreWorker;
pub use writer::ObjectWriter;

use crate::io::file::{SegFile, open_segment};
use crate::io::threads::{POOL_THREADS, ThreadPool};
use dir::{LOCK_FILE, claim, load_or_init_superblock, remove_temp_files, seg_path};
use marks::Marks;
use metrics::Counters;
use ram::RamTier;
use state::{Entry, Loc, Seg, State};

/// Unknown-length bodies are buffered in RAM up to this size, then written; larger ones are not
/// stored. 8 MiB bounds the memory one slow chunked response can pin per connection.
pub const UNKNOWN_LENGTH_CAP: u64 = 8 << 20;
/// Default per-worker I/O buffer budget (see [`StoreWorker::with_io_buffer_bytes`] and
/// [`Store::set_io_buffer_bytes_per_worker`]): 32 MiB is 128 chunks of 256 KiB in flight or
/// queued to sockets, well above what the disk needs to reach its bandwidth.
pub const DEFAULT_IO_BUFFER_BYTES: u64 = 32 << 20;
/// Meta blobs up to this size are kept in the RAM index (returned by `lookup`); larger ones are
/// only in the record header (returned by `open`).
pub const INDEX_META_MAX: usize = 4096;
/// Default most disk reads in flight at once, all workers together.
pub const DEFAULT_READS_IN_FLIGHT: u32 = 128;

/// Store configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Cache directory (created if missing).
    pub dir: PathBuf,
    /// Disk budget in bytes (at least 64 MiB; smaller values are raised). The store refuses to
    /// open when its filesystem cannot hold it (see [`space`]).
    pub size: u64,
    /// Ignore `size`: take the filesystem's free space plus the store's own files, less a
    /// reserve of 10% of the filesystem or 1 GiB, whichever is larger (see [`space`]).
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
    /// Which fills are written (see [`admission`]).
    pub admission: Admission,
}

impl Default for StoreConfig {
    /// 10 GiB in `/var/cache/edgecache`, O_DIRECT reads from 4 KiB, objects up to 1 GiB, the
    /// RAM tier disabled, the I/O engine probed, 32 variants per key.
    fn default() -> StoreConfig {
        StoreConfig {
            dir: PathBuf::from("/var/cache/edgecache"),
            size: 10 << 30,
            size_auto: false,
            direct_io_threshold: 4 << 10,
            max_object_size: 1 << 30,
            ram_tier_bytes: 0,
            engine: EngineChoice::Auto,
            reads_in_flight: DEFAULT_READS_IN_FLIGHT,
            verify_every_read: false,
            max_variants_per_key: 32,
            admission: Admission::default(),
        }
    }
}

/// A stored variant, as returned by [`Store::lookup`].
#[derive(Debug, Clone)]
pub struct ObjectRef {
    pub variant: Bytes,
    pub body_len: u64,
    /// The meta blob, or empty when it is larger than [`INDEX_META_MAX`] (see
    /// [`ObjectRef::meta_in_index`]); [`StoredObject::meta`] always has it.
    pub meta: Bytes,
    pub(crate) primary: Bytes,
    pub(crate) loc: Loc,
    pub(crate) meta_in_index: bool,
    /// The index's `verified` flag at lookup.
    pub(crate) verified: bool,
}

impl ObjectRef {
    /// Whether `meta` holds the meta blob (false when it was too large for the index).
    pub fn meta_in_index(&self) -> bool {
        self.meta_in_index
    }

    pub fn primary(&self) -> &Bytes {
        &self.primary
    }

    /// Where the record lives on disk (for tools and tests).
    pub fn location(&self) -> DiskLocation {
        DiskLocation {
            segment: self.loc.seg,
            offset: self.loc.off,
            header_len: u64::from(self.loc.header_len),
            body_offset: self.loc.off + u64::from(self.loc.header_len),
        }
    }
}

/// A record's place on disk: segment file, header offset and body offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLocation {
    pub segment: u32,
    pub offset: u64,
    pub header_len: u64,
    pub body_offset: u64,
}

/// A space reservation in a segment, pinned until published or aborted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reservation {
    pub seg: u32,
    pub epoch: u64,
    pub off: u64,
    pub len: u64,
}

/// The store. `Send + Sync`; share it as `Arc<Store>` between worker threads.
pub struct Store {
    cfg: StoreConfig,
    layout: Layout,
    nonce: u64,
    engine: EngineKind,
    files: Arc<Vec<SegFile>>,
    pool: Option<Arc<ThreadPool>>,
    state: Mutex<State>,
    /// The epoch of each segment, readable without the lock (readers check it after each read).
    epochs: Vec<AtomicU64>,
    seq: AtomicU64,
    ram: RamTier,
    counters: Counters,
    /// One permit per disk read in flight (`StoreConfig::reads_in_flight`).
    read_slots: Arc<tokio::sync::Semaphore>,
    recovered: u64,
    /// The buffer budget each new [`StoreWorker`] gets.
    io_buffer_bytes: AtomicU64,
    /// Memory set aside for the index outside the RAM tier ([`Store::set_index_reserve`]).
    index_reserve: AtomicU64,
    /// The 4 KiB buffer of the synchronous writes (segment headers, tombstones).
    sync_block: Mutex<crate::io::AlignedBuf>,
    /// The budgets of live workers, for [`StoreStats`].
    budgets: Mutex<Vec<Weak<crate::io::budget::Shared>>>,
    /// Invalidation marks of the keys ([`Store::invalidation_mark`]).
    marks: Marks,
    /// Woken whenever an in-place header rewrite ends (`src/rewrite.rs`).
    rewrites_done: tokio::sync::Notify,
    /// Bytes of unknown-length bodies buffered by writers, and their bound.
    unknown_length: Arc<Share>,
    /// The second-hit doorkeeper (`StoreConfig::admission`).
    doorkeeper: Option<admission::Doorkeeper>,
    /// Holds an exclusive `flock` on `store.lock`: one process per cache directory.
    _lock: fs::File,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.cfg.dir)
            .field("layout", &self.layout)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Open (or create) the store: resolve the engine, lay out segments, recover the index.
    pub fn open(cfg: StoreConfig) -> Result<Arc<Store>, StoreError> {
        let engine = crate::io::resolve(cfg.engine)
            .map_err(|e| StoreError::Engine(format!("io_uring requested but unavailable: {e}")))?;
        fs::create_dir_all(&cfg.dir)?;
        // Before anything is created or deleted in it.
        claim(&cfg.dir)?;
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(cfg.dir.join(LOCK_FILE))?;
        if let Err(e) = lock.try_lock() {
            return Err(match e {
                fs::TryLockError::WouldBlock => StoreError::Locked(cfg.dir.clone()),
                fs::TryLockError::Error(e) => e.into(),
            });
        }
        remove_temp_files(&cfg.dir)?;
        // Refuses a size the filesystem cannot hold; sizes `size_auto` from it.
        let layout = space::plan(&cfg)?;
        let nonce = load_or_init_superblock(&cfg.dir, layout)?;
        let mut files = Vec::with_capacity(layout.segment_count as usize);
        for i in 0..layout.segment_count {
            files.push(open_segment(&seg_path(&cfg.dir, i), layout.segment_size)?);
        }
        let files = Arc::new(files);

        let mut st = State {
            segs: (0..layout.segment_count).map(|_| Seg::default()).collect(),
            max_variants: cfg.max_variants_per_key,
            ..State::default()
        };
        let mut corrupt = 0;
        let mut max_seq = 0;
        let mut found = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let scan = recover::scan_segment(&f.direct, i as u32, layout.segment_size, nonce)?;
            corrupt += scan.corrupt;
            max_seq = max_seq.max(scan.max_seq);
            st.segs[i].epoch = scan.epoch;
            st.next_epoch = st.next_epoch.max(scan.epoch);
            for r in scan.records {
                found.push((i as u32, scan.epoch, r));
            }
        }
        st.next_epoch += 1;
        // Latest sequence wins: insert in sequence order, tombstone the losers.
        found.sort_by_key(|(_, _, r)| r.header.seq);
        let mut losers = Vec::new();
        for (seg, epoch, r) in found {
            let h = r.header;
            let entry = Entry {
                variant: h.variant.clone(),
                meta: recover::meta_for_index(&h, INDEX_META_MAX),
                loc: Loc {
                    seg,
                    epoch,
                    off: r.off,
                    header_len: h.header_len,
                    body_len: h.body_len,
                    seq: h.seq,
                },
                verified: false,
                rewrite: 0,
            };
            if let Some(old) = st.insert(h.primary.clone(), entry) {
                losers.push(old);
            }
        }
        // Variants over the cap were not in RAM: nothing to drop there.
        st.trimmed.clear();
        let recovered = st.objects;
        let epochs = st.segs.iter().map(|s| AtomicU64::new(s.epoch)).collect();
        let pool = match engine {
            EngineKind::Threads => Some(ThreadPool::start(Arc::clone(&files), POOL_THREADS)?),
            EngineKind::Uring => None,
        };
        let read_slots = Arc::new(tokio::sync::Semaphore::new(
            cfg.reads_in_flight.max(1) as usize
        ));
        let doorkeeper = (cfg.admission == Admission::SecondHit)
            .then(|| admission::Doorkeeper::new(layout.capacity()));
        let store = Store {
            doorkeeper,
            ram: RamTier::new(cfg.ram_tier_bytes),
            cfg,
            layout,
            nonce,
            engine,
            files,
            pool,
            state: Mutex::new(st),
            epochs,
            seq: AtomicU64::new(max_seq + 1),
            counters: Counters::default(),
            read_slots,
            recovered,
            io_buffer_bytes: AtomicU64::new(DEFAULT_IO_BUFFER_BYTES),
            index_reserve: AtomicU64::new(0),
            sync_block: Mutex::new(crate::io::AlignedBuf::new(4096)),
            budgets: Mutex::new(Vec::new()),
            marks: Marks::new(),
            rewrites_done: tokio::sync::Notify::new(),
            unknown_length: Arc::new(Share::default()),
            _lock: lock,
        };
        store
            .counters
            .corrupt_dropped
            .fetch_add(corrupt, Ordering::Relaxed);
        for old in &losers {
            store.write_tombstone_sync(old);
        }
        tracing::info!(
            dir = %store.cfg.dir.display(),
            engine = engine.as_str(),
            segments = layout.segment_count,
            segment_size = layout.segment_size,
            recovered,
            corrupt,
            "store opened"
        );
        Ok(Arc::new(store))
    }

    /// The resolved I/O engine.
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// The segment layout in use.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// Set the I/O buffer budget of workers created from now on ([`StoreWorker::new`]): a hard
    /// bound on the bytes of read and write buffers each worker has allocated (in flight, held
    /// by response bodies not yet written to the socket, or pooled for reuse). Default
    /// [`DEFAULT_IO_BUFFER_BYTES`]; values below 1 MiB are raised to 1 MiB.
    pub fn set_io_buffer_bytes_per_worker(&self, bytes: u64) {
        self.io_buffer_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The budget [`StoreWorker::new`] gives a worker.
    pub fn io_buffer_bytes_per_worker(&self) -> u64 {
        self.io_buffer_bytes.load(Ordering::Relaxed)
    }

    /// Memory the plan keeps for the index outside the RAM tier (default 0: the index's
    /// memory all comes out of the RAM tier's share). The RAM tier shrinks only for index bytes
    /// beyond it.
    pub fn set_index_reserve(&self, bytes: u64) {
        self.index_reserve.store(bytes, Ordering::Relaxed);
    }

    /// The bytes of unknown-length bodies buffered by all writers now, and their bound (default
    /// unbounded; the memory plan's with [`Share::set_bound`]). A writer that would take it past
    /// the bound fails with [`StoreError::MemoryBound`]: the body is proxied, not stored.
    pub fn unknown_length_bodies(&self) -> &Arc<Share> {
        &self.unknown_length
    }

    /// Index bytes the RAM tier must leave room for: what the index takes beyond its reserve.
    pub(crate) fn index_overflow(&self) -> u64 {
        self.index_bytes()
            .saturating_sub(self.index_reserve.load(Ordering::Relaxed))
    }

    /// Largest body that can be stored with the given key and meta sizes.
    pub fn max_body_len(&self) -> u64 {
        self.cfg
            .max_object_size
            .min(self.layout.max_record().saturating_sub(4096))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// All stored variants of a primary key.
    pub fn lookup(&self, primary: &[u8]) -> Vec<ObjectRef> {
        let st = self.lock();
        let Some((key, list)) = st.index.get_key_value(primary) else {
            return Vec::new();
        };
        list.iter()
            .map(|e| ObjectRef {
                variant: e.variant.clone(),
                body_len: e.loc.body_len,
                meta_in_index: e.meta.is_some(),
                meta: e.meta.clone().unwrap_or_default(),
                primary: key.clone(),
                loc: e.loc.clone(),
                verified: e.verified,
            })
            .collect()
    }

    /// Purge every variant of a primary key; returns how many were removed. Each removal writes
    /// a tombstone header synchronously (one 4 KiB write) so the object does not come back at
    /// the next start.
    pub fn remove(&self, primary: &[u8]) -> usize {
        let locs = {
            let mut st = self.lock();
            // A fill of this key in flight must not publish what it fetched before this (bumped
            // under the index lock, where publish checks it).
            self.marks.bump(primary);
            let variants: Vec<Bytes> = st
                .index
                .get(primary)
                .map(|l| l.iter().map(|e| e.variant.clone()).collect())
                .unwrap_or_default();
            let mut locs = Vec::new();
            for v in variants {
                if let Some(loc) = st.remove(primary, &v, None) {
                    self.ram.remove(&Bytes::copy_from_slice(primary), &v);
                    if st.pin(loc.seg, loc.epoch) {
                        locs.push(loc);
                    }
                }
            }
            locs
        };
        let n = locs.len();
        self.tombstone_pinned(&locs);
        n
    }

    /// The key's invalidation mark now: take it before the origin request of a fill and give it
    /// to the writer ([`ObjectWriter::publish_only_if_unchanged`]), so an invalidation that lands
    /// while the fetch runs cannot be undone by its publish.
    pub fn invalidation_mark(&self, primary: &[u8]) -> u64 {
        self.marks.get(primary)
    }

    /// Purge one variant.
    pub fn remove_variant(&self, primary: &[u8], variant: &[u8]) -> bool {
        let loc = {
            let mut st = self.lock();
            let Some(loc) = st.remove(primary, variant, None) else {
                return false;
            };
            self.ram.remove(
                &Bytes::copy_from_slice(primary),
                &Bytes::copy_from_slice(variant),
            );
            st.pin(loc.seg, loc.epoch).then_some(loc)
        };
        if let Some(loc) = loc {
            self.tombstone_pinned(&[loc]);
        }
        true
    }

    /// The oldest and the newest epoch of the segments that hold data ((0, 0) when none).
    /// Segments are reclaimed oldest first, so everything written while `newest` was current
    /// is gone once a later call's `oldest` is past it.
    pub fn epoch_span(&self) -> (u64, u64) {
        let st = self.lock();
        let used = st.segs.iter().map(|s| s.epoch).filter(|&e| e > 0);
        (used.clone().min().unwrap_or(0), used.max().unwrap_or(0))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> StoreStats {
        let (objects, bytes_used, variants_trimmed) = {
            let st = self.lock();
            (st.objects, st.bytes_used, st.variants_trimmed)
        };
        let (ram_bytes, ram_objects) = self.ram.usage();
        let io = self.io_buffer_usage();
        let c = &self.counters;
        StoreStats {
            objects,
            bytes_used,
            bytes_capacity: self.layout.capacity(),
            evictions: c.evictions.load(Ordering::Relaxed),
            variants_trimmed,
            corrupt_dropped: c.corrupt_dropped.load(Ordering::Relaxed),
            body_checks_skipped: c.body_checks_skipped.load(Ordering::Relaxed),
            recovered_objects: self.recovered,
            write_errors: c.write_errors.load(Ordering::Relaxed),
            publishes_invalidated: c.publishes_invalidated.load(Ordering::Relaxed),
            ram_tier_bytes: ram_bytes,
            ram_tier_objects: ram_objects,
            disk_reads: c.disk_reads.load(Ordering::Relaxed),
            disk_read_bytes: c.disk_read_bytes.load(Ordering::Relaxed),
            disk_read_latency: c.histogram(),
            disk_write_bytes: c.disk_writes(),
            admitted_body_bytes: c.admitted_body_bytes.load(Ordering::Relaxed),
            admission_rejected: c.admission_rejected.load(Ordering::Relaxed),
            engine: self.engine.as_str(),
            direct_io: self.files.iter().all(|f| f.direct_ok),
            segment_size: self.layout.segment_size,
            segment_count: self.layout.segment_count,
            io_buffer_capacity: io.capacity,
            io_buffer_bytes: io.charged,
            io_buffer_peak: io.peak,
            io_buffer_waits: io.waits,
        }
    }

    /// The I/O buffer use of all live workers, summed (the peak is the sum of their peaks).
    pub fn io_buffer_usage(&self) -> crate::io::IoBufferUsage {
        let mut sum = crate::io::IoBufferUsage {
            capacity: 0,
            charged: 0,
            pooled: 0,
            peak: 0,
            waits: 0,
            allocs: 0,
        };
        let mut list = match self.budgets.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        list.retain(|w| match w.upgrade() {
            Some(b) => {
                let u = b.usage();
                sum.capacity += u.capacity;
                sum.charged += u.charged;
                sum.pooled += u.pooled;
                sum.peak += u.peak;
                sum.waits += u.waits;
                sum.allocs += u.allocs;
                true
            }
            None => false,
        });
        sum
    }

    /// Estimated heap bytes of the in-memory index (about 600 bytes per object plus its keys
    /// and in-index meta). The RAM tier keeps its own size within `ram_tier_bytes` minus what
    /// of this exceeds the index reserve ([`Store::set_index_reserve`]).
    pub fn index_bytes(&self) -> u64 {
        self.lock().index_bytes
    }

    pub(crate) fn register_budget(&self, b: &crate::io::IoBudget) {
        let mut list = match self.budgets.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        list.retain(|w| w.strong_count() > 0);
        list.push(b.downgrade());
    }

    // ---- internals shared by workers, writers and readers ----

    pub(crate) fn epoch_is(&self, seg: u32, epoch: u64) -> bool {
        self.epochs
            .get(seg as usize)
            .is_some_and(|e| e.load(Ordering::Acquire) == epoch)
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn nonce(&self) -> u64 {
        self.nonce
    }

    /// Path of a segment file (for tools and tests).
    pub fn segment_path(&self, seg: u32) -> PathBuf {
        seg_path(&self.cfg.dir, seg)
    }

    pub(crate) fn files(&self) -> &Arc<Vec<SegFile>> {
        &self.files
    }

    pub(crate) fn pool(&self) -> Option<&Arc<ThreadPool>> {
        self.pool.as_ref()
    }

    pub(crate) fn ram(&self) -> &RamTier {
        &self.ram
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A disk read slot, waiting for one (see [`StoreConfig::reads_in_flight`]). `None` only
    /// if the semaphore were closed, which it never is.
    pub(crate) async fn read_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.read_slots).acquire_owned().await.ok()
    }

    /// A disk read slot if one is free now (read-ahead never waits for one).
    pub(crate) fn try_read_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.read_slots).try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn store_is_shareable_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Store>();
        send_sync::<crate::StoreError>();
    }
}
