//! In-place header rewrites ([`StoreWorker::update_meta`]) and the readers that race them.
//!
//! A rewrite writes a record's header again at the same offset. The write is not atomic (a
//! header of more than 4 KiB is several blocks, and a buffered read can see a page half
//! replaced), so a read of the header overlapping it may see a mixture that fails the header
//! checksum. The index has 12 bytes an object and no room for a per-record generation, so the
//! store keeps a side table of the rewrites in progress ([`Rewrites`], keyed by location, as
//! large as the rewrites in flight) and one store-wide counter bumped under its lock when any
//! rewrite starts and when it ends, whether its write completed, failed, or its future was
//! dropped. A reader's *generation* is (that counter, whether its record is in the table): it
//! takes it before its read and, only when the header fails its checksum, once more after it.
//! An in-progress or changed generation means a rewrite may have overlapped the read
//! (conservative: another record's rewrite changes the counter too, and costs a retry read), so
//! the header is not called corrupt; the reader waits for its record's rewrite to end and reads
//! again, and never drops the record for it. The same generation means no rewrite overlapped
//! it: the checksum failure is the disk's. Rewrites of one record are serialized (a second one
//! waits for the first). A reader that copies a record into the RAM tier does so only when no
//! rewrite of it was in progress at its start, and drops its copy again when the generation
//! moved meanwhile: the rewrite's end may have cleared the tier before the copy went in, and
//! the copy would keep the old meta.
//!
//! A rewrite whose future is dropped while its write is in flight ends its mark at the drop,
//! and the write may still land after it; a reader overlapping that late write would see an
//! unchanged generation. So a reader reads once more before it calls a header corrupt, as it
//! did before the generation existed; only that late write racing both reads is left.
//!
//! This works across workers: the table and the [`Notify`] that wakes waiters are the
//! [`Store`]'s, shared by every worker thread. The hot path costs one short lock of the table
//! per open; the second look happens only on a checksum failure.
//!
//! [`StoreWorker::update_meta`]: super::StoreWorker::update_meta
//! [`Notify`]: tokio::sync::Notify

use std::pin::pin;

use crate::ram::Copy as RamCopy;
use crate::rewrite_table::Rewrites;
use crate::state::Loc;
use crate::store::Store;

/// Reads of one open that may find the header mid-rewrite before it gives up with
/// `MissingOrReplaced` (the caller then fetches the object; nothing is dropped). Each waits
/// for the rewrite it overlapped to end, so only a record rewritten back to back this many
/// times during one open gets there.
pub(crate) const REWRITE_RETRIES: u32 = 8;

/// What a reader compares before and after its read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generation {
    counter: u64,
    in_progress: bool,
}

impl Generation {
    /// A rewrite of the record was in progress.
    pub fn in_progress(self) -> bool {
        self.in_progress
    }
}

/// What [`Store::begin_rewrite`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Begin {
    /// The rewrite is marked in progress and the segment pinned; end it with
    /// [`Store::end_rewrite`] (see [`RewriteGuard`]).
    Started,
    /// Another rewrite of this record is in progress.
    Busy,
    /// The record is no longer indexed at this location, or its segment was reclaimed.
    Gone,
}

impl Store {
    fn rewrites(&self) -> std::sync::MutexGuard<'_, Rewrites> {
        match self.rewrites.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The rewrite generation of the record at `loc` if the index still has it under
    /// `primary`; `None` when it was evicted, purged or replaced.
    pub(crate) fn rewrite_gen(&self, primary: &[u8], loc: &Loc) -> Option<Generation> {
        self.indexed(primary, loc)?;
        let r = self.rewrites();
        Some(Generation {
            counter: r.counter,
            in_progress: r.in_progress.contains(&loc.id()),
        })
    }

    /// Put `copy`, read from the record at `loc` at rewrite generation `generation`, into the
    /// RAM tier unless a rewrite has moved the record on since; `true` when it stays there.
    /// A rewrite may also start, and end (clearing the RAM copy), between the look before the
    /// insert and the insert itself: the look after it takes such a copy out again.
    pub(crate) fn insert_ram_copy(
        &self,
        primary: &[u8],
        loc: &Loc,
        generation: Generation,
        copy: RamCopy,
    ) -> bool {
        if generation.in_progress() || self.rewrite_gen(primary, loc) != Some(generation) {
            return false;
        }
        self.ram().insert(loc.id(), copy);
        if self.rewrite_gen(primary, loc) != Some(generation) {
            self.ram().remove(loc.id());
            return false;
        }
        true
    }

    /// Wait until no rewrite of the record is in progress; its generation then, or `None`
    /// when it is no longer indexed.
    pub(crate) async fn rewrite_settled(&self, primary: &[u8], loc: &Loc) -> Option<Generation> {
        loop {
            // Registered before the look, so an end between the look and the wait wakes it.
            let mut ended = pin!(self.rewrites_done.notified());
            ended.as_mut().enable();
            let g = self.rewrite_gen(primary, loc)?;
            if !g.in_progress() {
                return Some(g);
            }
            ended.await;
        }
    }

    /// Mark a rewrite of the record at `loc` in progress and pin its segment, unless another
    /// rewrite of it is in progress or it is gone.
    pub(crate) fn begin_rewrite(&self, primary: &[u8], loc: &Loc) -> Begin {
        let mut st = self.lock();
        if self.indexed(primary, loc).is_none() {
            return Begin::Gone;
        }
        let mut r = self.rewrites();
        if r.in_progress.contains(&loc.id()) {
            return Begin::Busy;
        }
        if !st.pin(loc.seg, loc.epoch) {
            return Begin::Gone;
        }
        r.in_progress.insert(loc.id());
        r.counter += 1;
        Begin::Started
    }

    /// End a rewrite begun with [`Store::begin_rewrite`]: unpin and mark it ended. The RAM
    /// tier copy goes either way (a reader that copied in the old header meanwhile drops its
    /// copy itself, see `StoreWorker::open`). Wakes the readers and rewriters waiting for it.
    pub(crate) fn end_rewrite(&self, loc: &Loc) {
        {
            let mut st = self.lock();
            st.unpin(loc.seg);
            let mut r = self.rewrites();
            r.in_progress.remove(&loc.id());
            r.counter += 1;
        }
        self.ram.remove(loc.id());
        self.rewrites_done.notify_waiters();
    }
}

/// A rewrite in progress: ends it when dropped, also when the rewriting future is dropped
/// mid-write, so that no record stays marked (and its readers waiting) for ever.
pub(crate) struct RewriteGuard<'a> {
    pub store: &'a Store,
    pub loc: &'a Loc,
}

impl Drop for RewriteGuard<'_> {
    fn drop(&mut self) {
        self.store.end_rewrite(self.loc);
    }
}
