//! Invalidation marks: one counter per slot of key hashes. A removal (purge, or an unsafe
//! method's invalidation) bumps its key's slot while it holds the index lock; a fill reads the
//! mark, without any lock, before its origin request goes out, and the store publishes the
//! fill only if the mark is unchanged, checked under the index lock with the publish. Two keys
//! sharing a slot only cost a fill not stored when the other is invalidated during it; the
//! table is 32 KiB whatever the key count. [`Writing`] counts the writers in flight by the
//! same slots.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Slots of the table.
pub(crate) const SLOTS: usize = 4096;

pub(crate) struct Marks(Box<[AtomicU64]>);

/// The slot of `primary`'s key hash, shared by the tables here.
pub(crate) fn slot_of(primary: &[u8]) -> usize {
    (super::frequency::key_hash(primary, b"") % SLOTS as u64) as usize
}

impl Marks {
    pub fn new() -> Self {
        Self((0..SLOTS).map(|_| AtomicU64::new(0)).collect())
    }

    fn slot(&self, primary: &[u8]) -> &AtomicU64 {
        &self.0[slot_of(primary)]
    }

    /// The mark of `primary` now.
    pub fn get(&self, primary: &[u8]) -> u64 {
        self.slot(primary).load(Ordering::Acquire)
    }

    /// `primary` was invalidated.
    pub fn bump(&self, primary: &[u8]) {
        self.slot(primary).fetch_add(1, Ordering::Release);
    }
}

/// Writers in flight per slot of key hashes: a reinsertion (`src/reinsert.rs`) copies no key
/// another writer is storing, since a copy reserved after that writer would win over it by
/// reservation order and keep the older response. A shared slot only costs a copy not made.
pub(crate) struct Writing(Box<[AtomicU32]>);

impl Writing {
    pub fn new() -> Self {
        Self((0..SLOTS).map(|_| AtomicU32::new(0)).collect())
    }

    pub fn begin(&self, primary: &[u8]) {
        self.0[slot_of(primary)].fetch_add(1, Ordering::AcqRel);
    }

    pub fn end(&self, primary: &[u8]) {
        self.0[slot_of(primary)].fetch_sub(1, Ordering::AcqRel);
    }

    /// Writers of `primary`'s slot now.
    pub fn count(&self, primary: &[u8]) -> u32 {
        self.0[slot_of(primary)].load(Ordering::Acquire)
    }
}
