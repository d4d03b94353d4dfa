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
//!     // Hit: look up the candidates (no disk read), open the newest (its header says whose
//!     // and which variant it is), stream its verified body.
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
//! A log of records over a fixed set of pre-allocated segment files, a compact in-memory index
//! (12 bytes a slot, about 15 per object, whatever the key, headers or Vary: see
//! `src/index.rs`), a RAM tier for small hot objects, and FIFO eviction of whole segments.
//!
//! # The index
//! Keys, variant keys and meta live only in the record headers on disk. The index keeps per
//! object a 24-bit tag of the primary key's hash (xxh3 seeded with the store's nonce), a
//! 7-bit tag of the variant key, the record's block and length, its segment's epoch low byte
//! and a `verified` bit. [`Store::lookup`] returns the live entries with the key's tag,
//! newest first (by reservation order), as candidates, with no disk read; a key it does not
//! know is a miss that reads nothing. [`StoreWorker::open`] reads the record and checks its
//! header's primary key, so a tag collision costs one extra read and never serves another
//! key's object. Variants with equal tags, and keys with equal tags in one window, look the
//! same to the index: the newer replaces the older (an object lost early, never a wrong one
//! served), and a purge by key or variant may drop such a neighbour too. A record's identity
//! is its location (segment, epoch, offset). The index grows by doublings up to
//! `StoreConfig::index_bytes` (the memory plan's share); at that bound it evicts instead
//! (`StoreStats::index_evictions`, `index_bytes`, `index_bound_bytes`).
//!
//! # Layout
//! The cache directory holds `store.super` (nonce and layout) and `seg-NNNN.dat` segment files,
//! sized by [`layout::Layout::plan`] (64 MiB segments, 8 to 256 of them, never more than the
//! configured size in total). Changing the size (hence the layout) starts an empty cache.
//! Each segment starts with a 4 KiB segment header (magic, store nonce, *epoch*, crc32c) and then
//! holds records written as a log. A record is `[header][body]`: a large one with both
//! 4096-aligned, a small one (at most one 256 KiB staging buffer) *packed*, its body right after
//! its header and the two padded to 4096 together; see [`record`] for the format. Per-64
//! KiB-block crc32c checksums of the body sit in the header.
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
//!   visible when it is inserted into the index right after. A new key's body that fits the
//!   staging buffer (256 KiB) goes out with its header in one write instead (one I/O per small
//!   miss); a torn write of it leaves at worst a valid header before a torn body, which the
//!   first read's checksums refuse (the object is a miss). A key the index holds something of
//!   keeps two writes (for a packed record: the blocks after the header's, then the header's
//!   block, whose checksum covers the body bytes in it), so a torn replacement never hides the
//!   older version. A crash before that leaves no valid header; recovery stops there. A writer dropped without `finish` writes a tombstone
//!   header (synchronously, one 4 KiB write) so the chain stays walkable.
//! - A replaced record, a purged one and a corrupt one get a tombstone too, so they cannot come
//!   back at the next start (at most one live header per key on disk).
//! - [`StoreWorker::update_meta`] (after a 304 revalidation) rewrites a record's header in
//!   place, within the meta room reserved in it. That write is not atomic, and readers on any
//!   worker may read the header meanwhile: the store marks the record as being rewritten (a
//!   side table of rewrites in progress and a store-wide generation, see `src/rewrite.rs`), so
//!   a reader that finds the header failing its checksum while a rewrite may have overlapped
//!   its read waits for the rewrite to end and reads again (old or new meta, never a reason to
//!   drop the record), and rewrites of one record run one at a time.
//! - All writes use O_DIRECT (records are aligned), so writing does not fill the page cache.
//!   Objects below `direct_io_threshold` are read through the page cache (buffered), larger ones
//!   with O_DIRECT.
//!
//! # Checksums
//! Every read checks the record header (its crc32c, primary key, epoch and length) and the
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
//! becomes active: its objects are counted as evictions, its epoch is set to the newest (its
//! index entries go stale at once, and leave the index lazily: see `src/index.rs`), one index
//! shard is swept of stale entries, and its segment header is rewritten (synchronously, once
//! per segment) before any record of the new epoch. Readers check the segment's epoch after every read, so a reader
//! racing with a reclaim gets `MissingOrReplaced`, never another object's bytes.
//! FIFO over segments was chosen over LRU because it keeps writes purely sequential (no
//! compaction, no write amplification, no per-object free-space map), makes eviction O(objects
//! in one segment), and is what Traffic Server's cyclone buffer and foyer's FIFO block engine do;
//! hot objects are protected by the RAM tier (CLOCK with frequency-based admission, see
//! `src/ram.rs`) rather than by reordering the disk.
//!
//! # RAM tier
//! Verified objects whose record is at most 256 KiB (a larger one when it is at most a 64th of
//! the tier) enter a byte-bounded RAM tier on a disk hit (once it is full, only when a
//! frequency sketch says they are asked for more often than the entry they would evict:
//! TinyLFU) and leave by CLOCK; see
//! `src/ram.rs`. Objects below `direct_io_threshold` are also read through the page cache,
//! which the kernel may keep.
//!
//! # Reads and buffer memory
//! [`StoreWorker::open`] reads header and body with one I/O when the record is at most 1 MiB +
//! 64 KiB (a 1 MiB object and its header), else one chunk (256 KiB): the header and the body's
//! first whole 64 KiB blocks in it (192 KiB after a 4 KiB header); the rest streams in 256 KiB
//! chunks, one read ahead when the budget and the store's read slots
//! (`StoreConfig::reads_in_flight`) have room (see `src/body.rs`). Every read and write buffer of a worker comes from its
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
//! The index is not in the budget above either: it takes 12 bytes a slot (about 15 per object;
//! `examples/index_scale.rs`, bench/BENCHMARKS.md "Store index at scale") and never more than
//! `StoreConfig::index_bytes`, the memory plan's index share (0: room for the disk's capacity
//! in 4 KiB records, the smallest), so it needs nothing from the RAM tier's share.
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
//!   the socket, which is why chunks are 256 KiB (they stay in L2). The pass runs only on a
//!   record's first whole read in a run, so a record of up to 1 MiB + 64 KiB is read whole:
//!   one read for a 1 MiB hit instead of five (`src/body.rs`, `WHOLE_MAX`).
//! - The rest of a 100 KiB read is the kernel's O_DIRECT path (about 25%: `iomap_dio_rw`,
//!   page pinning, virtio notification) and a few % of index lookup (SipHash, key compares)
//!   and header decoding (three small copies).
//! - Small objects are one buffered read of header and body (8 KiB for a 4 KiB object). (These
//!   figures predate the compact index: a hit now takes one index shard lock for the lookup
//!   and one for the still-current check in `open`, plus the rewrite table's lock.)
//!
//! # Recovery
//! [`Store::open`] takes an exclusive lock on `store.lock` (one process per directory), deletes
//! leftover `*.tmp` files, walks every segment's chain (see `src/recover.rs`), keeps the latest
//! sequence number of each key and tombstones older duplicates. With an index checkpoint
//! (`index.ckpt`, [`Store::checkpoint`]: at a clean stop, and whenever the caller likes while
//! the store runs), it restores the index from it and walks only the segments written since
//! (reclaimed after it, or being written when it was taken), whose records replace the older
//! entries of their objects: after a kill too, and a purge answered before stays purged (see
//! `src/checkpoint.rs`). It never resumes writing into a recovered segment: the first write
//! reclaims a fresh one. Nothing is fsynced on the hot path:
//! a killed process loses nothing that was published (completed writes are in the kernel); a
//! power loss may lose recent records, replacements and invalidations (a tombstone lost), and
//! a body that did not reach the disk before its header fails its block checksums at read time
//! and is dropped, never served. The syncs: a reclaimed segment's new header (fdatasync, before
//! any record of its epoch: lost, the segment would come back at its old epoch, its next
//! reclaim would reuse the lost one, and the records written under it before the crash would
//! be valid again), and a purge's tombstones ([`Store::purge`], before it returns; the proxy's
//! purge rules are fsynced on their own). `io::crash` and
//! `tests/store_crash_sim.rs` check these promises at every write of a workload.
//!
//! # Errors
//! ENOSPC or EIO on a write fails that write (counted in `write_errors`), the record is never
//! published, and the store keeps serving reads and accepting later writes.
//!
//! # Known limits
//! - A record must fit in one segment: the store keeps no body larger than about a segment
//!   (64 MiB by default, see [`layout`]) whatever `max_object_size` says
//!   ([`Store::max_body_len`]). The proxy keeps larger objects as slices, each an ordinary
//!   record under a key of its own (`dataplane/serve/src/slices.rs`), so this bounds a slice,
//!   not an object.
//! - A record torn by a crash (its header, or a meta rewrite of it, half written) is lost at
//!   restart; the records after it in its segment are found (`store_crash_sim`).
//! - After a start from a checkpoint, the entry of an object purged since (in a segment not
//!   scanned) stays in the index, and in `objects`, until it is opened: a miss then, and the
//!   entry goes. The scan after a kill covers the segments reclaimed since the checkpoint:
//!   write checkpoints as the store runs ([`Store::checkpoint_due`]) to bound it.
//! - A meta rewrite whose future is dropped mid-write ends its in-progress mark at the drop
//!   while its write may still land; a reader whose two reads of the header both overlap that
//!   late write still drops the record as corrupt (see `src/rewrite.rs`).
//! - The synchronous writes (segment header on reclaim, tombstones on abort, purge and
//!   corruption) block the calling worker for one 4 KiB write each.
//! - Index tags: variants of one key whose 7-bit tags collide replace each other (a key with
//!   ten variants has such a pair about one time in three), and so do two keys whose 24-bit
//!   tags collide in one index window (rare); a purge by key or variant may remove such a
//!   neighbour. An object lost, never a wrong one served.
//! - Below its bound, the index still drops a few objects early (about 3 in 10,000 measured):
//!   an insert into two full windows of a shard under 7/8 load evicts their oldest rather than
//!   doubling the shard. They are counted in `index_evictions`.
//! - Block numbers are 32-bit: a store of more than 16 TiB is not supported.

mod accessed;
pub mod admission;
mod align;
mod body;
mod checkpoint;
mod combine;
mod config;
mod dir;
pub mod error;
mod frequency;
mod growing;
mod identity;
pub mod index;
mod indexing;
pub mod io;
pub mod layout;
mod log;
mod marks;
pub mod metrics;
mod object;
pub(crate) mod ram;
pub mod record;
pub(crate) mod recover;
mod reinsert;
mod reinsert_wake;
mod rewrite;
mod rewrite_table;
pub mod space;
pub(crate) mod state;
mod store;
mod worker;
mod writer;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use edgecache_host::Share;
use tokio::sync::OwnedSemaphorePermit;

pub use crate::io::{EngineChoice, EngineKind, probe_uring};
pub use admission::Admission;
pub use body::{Source, StoredObject};
pub use config::{
    DEFAULT_IO_BUFFER_BYTES, DEFAULT_READS_IN_FLIGHT, StoreConfig, UNKNOWN_LENGTH_CAP,
};
pub use error::StoreError;
pub use growing::Growing;
pub use layout::Layout;
pub use metrics::{LatencyHistogram, StoreStats, WriteKind};
pub use object::{DiskLocation, ObjectRef};
pub use ram::Parsed;
pub use store::Store;
pub use worker::StoreWorker;
pub use writer::ObjectWriter;

use crate::io::crash::CrashDisk;
use crate::io::file::{SegFile, open_segment};
use crate::io::threads::{POOL_THREADS, ThreadPool};
use dir::{LOCK_FILE, claim, load_or_init_superblock, remove_temp_files, seg_path};
use index::Index;
use marks::{Marks, Writing};
use metrics::Counters;
use ram::RamTier;
use record::RecordHeader;
use state::{Loc, State};

/// RAM a store of `capacity` bytes keeps outside its index and RAM tier, fixed at open: the
/// second-hit doorkeeper's filter (up to 16 MiB) and, with reinsertion, one bit per 4 KiB of
/// disk. The data plane's memory plan takes it from the RAM tier.
pub fn side_table_bytes(capacity: u64, admission: Admission, reinsertion: bool) -> u64 {
    let filter = match admission {
        Admission::SecondHit => admission::filter_bytes(capacity),
        Admission::All => 0,
    };
    filter
        + if reinsertion {
            accessed::bytes_for(capacity)
        } else {
            0
        }
}

impl Store {
    /// Open (or create) the store: resolve the engine, lay out segments, recover the index.
    pub fn open(cfg: StoreConfig) -> Result<Arc<Store>, StoreError> {
        Store::open_journaled(cfg, None)
    }

    /// [`Store::open`], with every segment write journaled in `journal` when there is one
    /// (`io::crash`, for crash tests).
    pub(crate) fn open_journaled(
        cfg: StoreConfig,
        journal: Option<Arc<crate::io::crash::Journal>>,
    ) -> Result<Arc<Store>, StoreError> {
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
        if let Some(j) = &journal {
            crate::io::crash::CrashDisk::snapshot_base(
                j,
                &cfg.dir,
                layout.segment_count,
                layout.segment_size,
            )?;
        }

        let mut st = State::new(layout.segment_count);
        let mut corrupt = 0;
        let mut max_seq = 0;
        let mut found = Vec::new();
        let id = checkpoint::Identity {
            nonce,
            layout,
            index_bytes: cfg.index_bytes,
        };
        // A checkpoint: its index, and the segments to scan (the log written since); else
        // every segment.
        let (restored, rescan) = match restore(&cfg.dir, id, &files) {
            Some((ck, rescan)) => {
                for (seg, &epoch) in st.segs.iter_mut().zip(&ck.epochs) {
                    seg.epoch = epoch;
                }
                max_seq = ck.max_seq;
                (Some(ck.index), rescan)
            }
            None => (None, vec![true; files.len()]),
        };
        for (i, f) in files.iter().enumerate().filter(|(i, _)| rescan[*i]) {
            let scan = recover::scan_segment(&f.direct, i as u32, layout.segment_size, nonce)?;
            corrupt += scan.corrupt;
            max_seq = max_seq.max(scan.max_seq);
            st.segs[i].epoch = scan.epoch;
            for r in scan.records {
                found.push((i as u32, scan.epoch, r));
            }
        }
        st.next_epoch = st.segs.iter().map(|s| s.epoch).max().unwrap_or(0) + 1;
        let epochs = st.segs.iter().map(|s| AtomicU64::new(s.epoch)).collect();
        // Both engines read large records through the pool (`io::READ_PIECE`).
        let pool = ThreadPool::start(Arc::clone(&files), POOL_THREADS)?;
        let read_slots = Arc::new(tokio::sync::Semaphore::new(
            cfg.reads_in_flight.max(1) as usize
        ));
        let from_checkpoint = restored.is_some();
        let index = restored.unwrap_or_else(|| new_index(layout, cfg.index_bytes));
        let doorkeeper = (cfg.admission == Admission::SecondHit)
            .then(|| admission::Doorkeeper::new(layout.capacity()));
        let cfg_reinsertion = cfg.reinsertion;
        let mut store = Store {
            doorkeeper,
            ram: RamTier::new(cfg.ram_tier_bytes),
            cfg,
            layout,
            nonce,
            engine,
            files,
            pool,
            state: Mutex::new(st),
            index,
            rewrites: Mutex::new(rewrite_table::Rewrites::default()),
            #[cfg(test)]
            key_hash_override: std::sync::OnceLock::new(),
            epochs,
            seq: AtomicU64::new(max_seq + 1),
            counters: Counters::default(),
            read_slots,
            recovered: 0,
            from_checkpoint: false,
            replayed: 0,
            checkpointing: Mutex::new(()),
            reclaims: AtomicU64::new(0),
            reclaims_at_checkpoint: AtomicU64::new(0),
            io_buffer_bytes: AtomicU64::new(DEFAULT_IO_BUFFER_BYTES),
            sync_block: Mutex::new(crate::io::AlignedBuf::new(4096)),
            budgets: Mutex::new(Vec::new()),
            marks: Marks::new(),
            writing: Writing::new(),
            accessed: accessed::Accessed::new(&layout, cfg_reinsertion),
            reinserter: cfg_reinsertion.then(|| Arc::new(reinsert_wake::Wake::default())),
            rewrites_done: tokio::sync::Notify::new(),
            unknown_length: Arc::new(Share::default()),
            _lock: lock,
            journal,
        };
        if from_checkpoint {
            // The entries of the scanned segments come from the scan.
            store.drop_segments(&rescan);
            store.restore_accounting();
            store.replayed = rescan.iter().filter(|&&r| r).count() as u32;
        }
        store.recover(found, from_checkpoint);
        store.from_checkpoint = from_checkpoint;
        store
            .counters
            .corrupt_dropped
            .fetch_add(corrupt, Ordering::Relaxed);
        let recovered = store.recovered;
        let layout = store.layout;
        tracing::info!(
            dir = %store.cfg.dir.display(),
            engine = engine.as_str(),
            segments = layout.segment_count,
            segment_size = layout.segment_size,
            recovered,
            corrupt,
            from_checkpoint = store.from_checkpoint,
            "store opened"
        );
        let store = Arc::new(store);
        reinsert::start(&store)?;
        Ok(store)
    }

    /// Index the records found by the recovery scan: of each primary and variant key the
    /// latest sequence wins, the older ones are tombstoned; the winners go in in sequence
    /// order, and another object with the same index tags never replaces one (see `identity`).
    /// Variants over the cap and entries past the index's bound are dropped from the index only
    /// (they come back, and go again, at the next start). `over_checkpoint`: the index holds a
    /// checkpoint's entries of the segments not scanned; a winner replaces the entry of the
    /// same object there when its sequence is newer (one header read per entry with its tags),
    /// and loses to a newer one.
    fn recover(&mut self, mut found: Vec<(u32, u64, recover::Found)>, over_checkpoint: bool) {
        let loc_of = |(seg, epoch, r): &(u32, u64, recover::Found)| Loc {
            seg: *seg,
            epoch: *epoch,
            off: r.off,
            header_len: r.header.header_len,
            body_len: r.header.body_len,
            seq: r.header.seq,
        };
        found.sort_by(|(_, _, a), (_, _, b)| {
            let (a, b) = (&a.header, &b.header);
            (&a.primary, &a.variant, a.seq).cmp(&(&b.primary, &b.variant, b.seq))
        });
        let mut losers = Vec::new();
        let mut winners = Vec::with_capacity(found.len());
        let mut rest = found.into_iter().peekable();
        while let Some(f) = rest.next() {
            let newer = rest.peek().is_some_and(|n| {
                (&n.2.header.primary, &n.2.header.variant)
                    == (&f.2.header.primary, &f.2.header.variant)
            });
            if newer {
                losers.push(loc_of(&f));
            } else {
                winners.push(f);
            }
        }
        winners.sort_by_key(|(_, _, r)| r.header.seq);
        let recovered = {
            let mut st = self.lock();
            for f in winners {
                let loc = loc_of(&f);
                let h = f.2.header;
                let vtag = self.variant_tag(&h.variant);
                if over_checkpoint && !self.supersede(&mut st, &h, vtag, &mut losers) {
                    losers.push(loc);
                    continue;
                }
                self.index_insert(&mut st, &h.primary, vtag, &loc, false, &|_| false);
            }
            st.variants_trimmed = 0;
            st.objects()
        };
        self.recovered = recovered;
        for old in &losers {
            self.write_tombstone_sync(old);
        }
    }

    /// Before a scanned record `h` goes into an index restored from a checkpoint: the live
    /// entries with its tags whose header names the same object are removed (to `losers`)
    /// when older, and those whose header is a tombstone too; `false` when one is newer (then
    /// `h` loses).
    fn supersede(&self, st: &mut State, h: &RecordHeader, vtag: u8, losers: &mut Vec<Loc>) -> bool {
        for f in self.found(&h.primary) {
            if f.vtag != vtag {
                continue;
            }
            let loc = self.loc_of(f.rec);
            let Some(old) = self.read_header_sync(&loc) else {
                continue;
            };
            if old.is_dead() && old.epoch == loc.epoch {
                // Tombstoned since the checkpoint (replaced or purged).
                self.index_remove(st, &h.primary, Some(&loc));
                continue;
            }
            if old.is_dead()
                || old.epoch != loc.epoch
                || old.primary != h.primary
                || old.variant != h.variant
            {
                continue;
            }
            if old.seq > h.seq {
                return false;
            }
            for l in self.index_remove(st, &h.primary, Some(&loc)) {
                losers.push(Loc {
                    header_len: old.header_len,
                    body_len: old.body_len,
                    seq: old.seq,
                    ..l
                });
            }
        }
        true
    }

    /// The header at `loc`, read synchronously (at open).
    fn read_header_sync(&self, loc: &Loc) -> Option<RecordHeader> {
        let f = &self.files.get(loc.seg as usize)?.direct;
        let mut buf = crate::io::AlignedBuf::new(4096);
        crate::io::file::pread(f, &mut buf, loc.off).ok()?;
        if let Ok((hl, used)) = record::peek(buf.as_slice())
            && used > 4096
        {
            buf = crate::io::AlignedBuf::new(hl as usize);
            crate::io::file::pread(f, &mut buf, loc.off).ok()?;
        }
        record::decode(buf.as_slice(), self.nonce).ok()
    }

    /// Write the restart checkpoint (see `checkpoint`): at a clean stop (once every worker
    /// stopped), and from time to time while the store runs (writers go on meanwhile; the
    /// next start scans what they wrote since). Its size.
    pub fn checkpoint(&self) -> Result<u64, StoreError> {
        let _one = match self.checkpointing.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let busy = |st: &State| -> Vec<u32> {
            (0..st.segs.len() as u32)
                .filter(|&i| st.active == Some(i) || st.segs[i as usize].pins > 0)
                .collect()
        };
        let (before, busy_before) = {
            let st = self.lock();
            self.reclaims_at_checkpoint
                .store(self.reclaims.load(Ordering::Relaxed), Ordering::Relaxed);
            (
                st.segs.iter().map(|s| s.epoch).collect::<Vec<u64>>(),
                busy(&st),
            )
        };
        let id = checkpoint::Identity {
            nonce: self.nonce,
            layout: self.layout,
            index_bytes: self.cfg.index_bytes,
        };
        let max_seq = self.seq.load(Ordering::Acquire).saturating_sub(1);
        let len = checkpoint::write(&self.cfg.dir, id, max_seq, &self.index, || {
            let st = self.lock();
            let epochs: Vec<u64> = st.segs.iter().map(|s| s.epoch).collect();
            let mut replay = busy_before;
            replay.extend(busy(&st));
            replay.extend(
                (0..epochs.len() as u32).filter(|&i| epochs[i as usize] != before[i as usize]),
            );
            replay.sort_unstable();
            replay.dedup();
            checkpoint::LogState { epochs, replay }
        })?;
        if let Some(j) = self.journal() {
            let path = self.cfg.dir.join(checkpoint::CKPT_FILE);
            j.file(checkpoint::CKPT_FILE, fs::read(path)?);
        }
        Ok(len)
    }

    /// Whether a checkpoint is due: this run reclaimed a sixteenth of the segments (at least
    /// four) since the last one began, so a start after a kill now would scan that many
    /// segments and more after it. The caller (the data plane, from a thread that may block
    /// while the index is written) polls it and calls [`Store::checkpoint`].
    pub fn checkpoint_due(&self) -> bool {
        let since = self.reclaims.load(Ordering::Relaxed)
            - self.reclaims_at_checkpoint.load(Ordering::Relaxed);
        since >= u64::from(self.layout.segment_count / 16).max(4)
    }

    /// How many segments this start scanned after restoring a checkpoint (the log written
    /// since it); 0 after a full scan.
    pub fn replayed_segments(&self) -> u32 {
        self.replayed
    }

    /// Whether this start restored the index from a checkpoint (else it scanned the segments).
    pub fn restored_from_checkpoint(&self) -> bool {
        self.from_checkpoint
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

    /// The bytes of unknown-length bodies buffered by all writers now, and their bound (default
    /// unbounded; the memory plan's with [`Share::set_bound`]). A writer that would take it past
    /// the bound fails with [`StoreError::MemoryBound`]: the body is proxied, not stored.
    pub fn unknown_length_bodies(&self) -> &Arc<Share> {
        &self.unknown_length
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

    /// The candidates for a primary key, newest first: its stored variants (and, rarely,
    /// another key's object whose hash tag collides). No disk read: a key the index does not
    /// know is an empty list. Open one ([`StoreWorker::open`]) to learn its variant key and
    /// meta.
    pub fn lookup(&self, primary: &[u8]) -> Vec<ObjectRef> {
        self.found(primary)
            .into_iter()
            .map(|f| self.ref_of(primary, f))
            .collect()
    }

    /// Purge every variant of a primary key; returns how many were removed. Each removal writes
    /// a tombstone header synchronously (one 4 KiB write) so the object does not come back at
    /// the next start, after a kill too; a power loss may still lose the tombstone (see
    /// [`Store::purge`]). By the key's hash: another key whose hash tag collides in the index
    /// loses its objects too (rare; an object lost, never a wrong one served).
    /// A fill of the key in flight must not publish what it fetched before this either.
    pub fn remove(&self, primary: &[u8]) -> usize {
        self.remove_key(primary, false)
    }

    /// [`Store::remove`], durable: the segments holding the tombstones are fdatasynced before
    /// it returns, so the purge outlives a power loss too. For purges (an operator's word);
    /// an invalidation by an unsafe method uses `remove`, which no kill undoes.
    pub fn purge(&self, primary: &[u8]) -> usize {
        self.remove_key(primary, true)
    }

    fn remove_key(&self, primary: &[u8], durable: bool) -> usize {
        let locs = {
            let mut st = self.lock();
            // Bumped under the state lock, where publish checks it.
            self.marks.bump(primary);
            let removed = self.index_remove(&mut st, primary, None);
            let n = removed.len();
            let pinned: Vec<Loc> = removed
                .into_iter()
                .filter(|l| st.pin(l.seg, l.epoch))
                .collect();
            (n, pinned)
        };
        self.tombstone_pinned(&locs.1, durable);
        if durable && let Some(r) = &self.reinserter {
            r.wait_for_copies(primary);
        }
        locs.0
    }

    /// The key's invalidation mark now: take it before the origin request of a fill and give it
    /// to the writer ([`ObjectWriter::publish_only_if_unchanged`]), so an invalidation that lands
    /// while the fetch runs cannot be undone by its publish.
    pub fn invalidation_mark(&self, primary: &[u8]) -> u64 {
        self.marks.get(primary)
    }

    /// Purge one object (a looked-up or opened ref: exactly that record, by its location);
    /// `false` when it was no longer indexed.
    pub fn remove_object(&self, r: &ObjectRef) -> bool {
        let loc = {
            let mut st = self.lock();
            let removed = self.index_remove(&mut st, &r.primary, Some(&r.loc));
            removed.into_iter().find(|l| st.pin(l.seg, l.epoch))
        };
        let found = loc.is_some();
        if let Some(loc) = loc {
            self.tombstone_pinned(&[loc], false);
        }
        found
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
        let (objects, bytes_used, variants_trimmed, index_evictions) = {
            let st = self.lock();
            (
                st.objects(),
                st.bytes_used(),
                st.variants_trimmed,
                st.index_evictions,
            )
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
            index_evictions,
            index_bytes: self.index.bytes(),
            index_bound_bytes: self.index.max_bytes(),
            corrupt_dropped: c.corrupt_dropped.load(Ordering::Relaxed),
            body_checks_skipped: c.body_checks_skipped.load(Ordering::Relaxed),
            recovered_objects: self.recovered,
            write_errors: c.write_errors.load(Ordering::Relaxed),
            record_writes: c.record_writes.load(Ordering::Relaxed),
            record_write_ops: c.record_write_ops.load(Ordering::Relaxed),
            publishes_invalidated: c.publishes_invalidated.load(Ordering::Relaxed),
            reinserted: c.reinserted.load(Ordering::Relaxed),
            reinserted_bytes: c.reinserted_bytes.load(Ordering::Relaxed),
            reinserts_refused: c.reinserts_refused.load(Ordering::Relaxed),
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
            io_buffer_pooled: io.pooled,
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

    /// RAM bytes of the object index now (12 a slot, about 15 per object; its slots, all but
    /// 64 shard headers).
    pub fn index_bytes(&self) -> u64 {
        self.index.bytes()
    }

    /// RAM bytes of the admission filter and the reinsertion bits (fixed at open), as
    /// [`side_table_bytes`] plans them.
    pub fn side_table_bytes(&self) -> u64 {
        self.doorkeeper.as_ref().map_or(0, |d| d.bytes()) + self.accessed.bytes()
    }

    /// The most RAM the object index may grow to ([`StoreConfig::index_bytes`]).
    pub fn index_bound_bytes(&self) -> u64 {
        self.index.max_bytes()
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

    /// The crash tests' write journal, when this store records its writes.
    pub(crate) fn journal(&self) -> Option<&Arc<crate::io::crash::Journal>> {
        self.journal.as_ref()
    }

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

    pub(crate) fn pool(&self) -> &Arc<ThreadPool> {
        &self.pool
    }

    pub(crate) fn ram(&self) -> &RamTier {
        &self.ram
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn writing(&self) -> &Writing {
        &self.writing
    }

    pub(crate) fn accessed(&self) -> &accessed::Accessed {
        &self.accessed
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

// Admission of a fill (`StoreConfig::admission`), over the doorkeeper of `admission` (which
// holds no `Store` method, so that the `Store` can hold its doorkeeper).
impl Store {
    /// Whether a fill of (primary, variant) is written, by `StoreConfig::admission`; a fill
    /// that is not is counted (`admission_rejected`). Called before the fill reserves anything.
    pub(crate) fn admits(&self, primary: &[u8], variant: &[u8]) -> bool {
        let Some(dk) = self.doorkeeper() else {
            return true;
        };
        let usage = || {
            let st = self.lock();
            (st.bytes_used(), st.objects())
        };
        let seen = dk.seen_or_add(&admission::fill_key(primary, variant), usage);
        if seen || self.has_room() || !self.lookup(primary).is_empty() {
            return true;
        }
        Counters::inc(&self.counters().admission_rejected);
        false
    }
}

impl Store {
    pub(crate) fn doorkeeper(&self) -> Option<&admission::Doorkeeper> {
        self.doorkeeper.as_ref()
    }

    /// Whether the store holds less than its capacity less two segments: a fill written now
    /// evicts nothing (or next to nothing) that was asked for.
    fn has_room(&self) -> bool {
        let held = self.lock().bytes_used();
        held + 2 * self.layout.segment_size < self.layout.capacity()
    }
}

// Here, not in `io::crash`, so that the I/O layer does not import the store it journals for.
impl CrashDisk {
    /// Open the store of `cfg` with its segment writes journaled here (from the moment it
    /// opens: what is on disk then is the base every crash starts from). One store per disk.
    pub fn open(&self, cfg: StoreConfig) -> Result<Arc<Store>, StoreError> {
        Store::open_journaled(cfg, Some(Arc::clone(&self.journal)))
    }
}

/// The object index for a layout: first sized for the disk's capacity in 64 KiB records,
/// growing to `max_bytes` (0: room for the capacity in 4 KiB records; never below the first
/// size, and a bound below it makes the first size smaller).
/// The checkpoint of this store, if it is whole (see `checkpoint`), and which segments to scan
/// over it: its replay set and every segment whose epoch changed since. Why not is logged.
fn restore(
    dir: &Path,
    id: checkpoint::Identity,
    files: &[SegFile],
) -> Option<(checkpoint::Loaded, Vec<bool>)> {
    let ck = match checkpoint::load(dir, id) {
        Ok(ck) => ck,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(error = %e, "index checkpoint not usable; scanning the segments");
            if let Err(e) = fs::remove_file(dir.join(checkpoint::CKPT_FILE)) {
                tracing::warn!(error = %e, "cannot delete the unusable index checkpoint");
            }
            return None;
        }
    };
    let mut rescan = vec![false; files.len()];
    for &s in &ck.replay {
        rescan[s as usize] = true;
    }
    for (i, f) in files.iter().enumerate() {
        match recover::segment_epoch(&f.direct, i as u32, id.nonce) {
            Ok(e) if ck.epochs.get(i) == Some(&e) => {}
            Ok(_) => rescan[i] = true,
            Err(e) => {
                tracing::warn!(segment = i, error = %e, "cannot read a segment header; scanning the segments");
                return None;
            }
        }
    }
    Some((ck, rescan))
}

fn new_index(layout: Layout, max_bytes: u64) -> Index {
    let cap = layout.capacity();
    // The smallest record is one 4 KiB block (a packed small object): room for a disk of them.
    let max = if max_bytes == 0 {
        index::bytes_for(cap / (64 << 10)) * 16
    } else {
        max_bytes
    };
    let first = (cap / (64 << 10)).min(max / 15);
    Index::new(first, max)
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
