//! The [`Store`] itself: the parts every worker shares (configuration, segment files, the
//! per-segment state, the index, the side tables, counters). Only the struct lives here, below
//! the modules that work on it: its public operations are in the crate root (`lib.rs`), the
//! rest in the module of each part of the work (`indexing`, `log`, `identity`, `rewrite`,
//! `reinsert`, ...).

use std::fs;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

use edgecache_host::Share;

use crate::accessed::Accessed;
use crate::admission::Doorkeeper;
use crate::config::StoreConfig;
use crate::index::Index;
use crate::io::EngineKind;
use crate::io::file::SegFile;
use crate::io::threads::ThreadPool;
use crate::layout::Layout;
use crate::marks::{Marks, Writing};
use crate::metrics::Counters;
use crate::ram::RamTier;
use crate::reinsert_wake::Wake;
use crate::rewrite_table::Rewrites;
use crate::state::State;

/// The store. `Send + Sync`; share it as `Arc<Store>` between worker threads.
pub struct Store {
    pub(crate) cfg: StoreConfig,
    pub(crate) layout: Layout,
    pub(crate) nonce: u64,
    pub(crate) engine: EngineKind,
    pub(crate) files: Arc<Vec<SegFile>>,
    pub(crate) pool: Arc<ThreadPool>,
    pub(crate) state: Mutex<State>,
    /// The objects: 12 bytes a slot, sharded under its own locks (`src/index.rs`).
    pub(crate) index: Index,
    /// In-place header rewrites in progress (`src/rewrite.rs`).
    pub(crate) rewrites: Mutex<Rewrites>,
    /// Test hook: the key hash, to force collisions.
    #[cfg(test)]
    pub(crate) key_hash_override: std::sync::OnceLock<fn(&[u8]) -> u64>,
    /// The epoch of each segment, readable without the lock (readers check it after each read).
    pub(crate) epochs: Vec<AtomicU64>,
    pub(crate) seq: AtomicU64,
    pub(crate) ram: RamTier,
    pub(crate) counters: Counters,
    /// One permit per disk read in flight (`StoreConfig::reads_in_flight`).
    pub(crate) read_slots: Arc<tokio::sync::Semaphore>,
    pub(crate) recovered: u64,
    /// The index came from a checkpoint, not a scan.
    pub(crate) from_checkpoint: bool,
    /// Segments scanned after the checkpoint's restore (the log written since it).
    pub(crate) replayed: u32,
    /// One checkpoint written at a time.
    pub(crate) checkpointing: Mutex<()>,
    /// Segment reclaims in this run, and their number when the last checkpoint started.
    pub(crate) reclaims: AtomicU64,
    pub(crate) reclaims_at_checkpoint: AtomicU64,
    /// The buffer budget each new [`StoreWorker`](crate::StoreWorker) gets.
    pub(crate) io_buffer_bytes: AtomicU64,
    /// The 4 KiB buffer of the synchronous writes (segment headers, tombstones).
    pub(crate) sync_block: Mutex<crate::io::AlignedBuf>,
    /// The budgets of live workers, for [`StoreStats`](crate::StoreStats).
    pub(crate) budgets: Mutex<Vec<Weak<crate::io::budget::Shared>>>,
    /// Invalidation marks of the keys ([`Store::invalidation_mark`]).
    pub(crate) marks: Marks,
    /// Writers in flight by key slot, and which records were read since written; the
    /// reinsertion pass's thread when `StoreConfig::reinsertion` is on (`src/reinsert.rs`).
    pub(crate) writing: Writing,
    pub(crate) accessed: Accessed,
    pub(crate) reinserter: Option<Arc<Wake>>,
    /// Woken whenever an in-place header rewrite ends (`src/rewrite.rs`).
    pub(crate) rewrites_done: tokio::sync::Notify,
    /// Bytes of unknown-length bodies buffered by writers, and their bound.
    pub(crate) unknown_length: Arc<Share>,
    /// The second-hit doorkeeper (`StoreConfig::admission`).
    pub(crate) doorkeeper: Option<Doorkeeper>,
    /// Holds an exclusive `flock` on `store.lock`: one process per cache directory.
    pub(crate) _lock: fs::File,
    /// Where segment writes are journaled, for crash tests (`io::crash`).
    pub(crate) journal: Option<Arc<crate::io::crash::Journal>>,
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
