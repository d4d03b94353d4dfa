//! Invalidation marks: one counter per slot of key hashes. A removal (purge, or an unsafe
//! method's invalidation) bumps its key's slot while it holds the index lock; a fill reads the
//! mark, without any lock, before its origin request goes out, and the store publishes the
//! fill only if the mark is unchanged, checked under the index lock with the publish. Two keys
//! sharing a slot only cost a fill not stored when the other is invalidated during it; the
//! table is 32 KiB whatever the key count.

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots of the table.
pub(crate) const SLOTS: usize = 4096;

pub(crate) struct Marks(Box<[AtomicU64]>);

impl Marks {
    pub fn new() -> Self {
        Self((0..SLOTS).map(|_| AtomicU64::new(0)).collect())
    }

    fn slot(&self, primary: &[u8]) -> &AtomicU64 {
        let h = super::frequency::key_hash(primary, b"");
        &self.0[(h % SLOTS as u64) as usize]
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
