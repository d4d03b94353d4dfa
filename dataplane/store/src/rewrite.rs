//! In-place header rewrites ([`StoreWorker::update_meta`]) and the readers that race them.
//!
//! A rewrite writes a record's header again at the same offset. The write is not atomic (a
//! header of more than 4 KiB is several blocks, and a buffered read can see a page half
//! replaced), so a read of the header overlapping it may see a mixture that fails the header
//! checksum. Every index entry has a rewrite generation ([`Entry::rewrite`]), bumped under the
//! index lock when a rewrite starts (odd: in progress) and when it ends (even), whether its
//! write completed, failed, or its future was dropped. A reader takes the generation before
//! its read (in the same lock as its "still current" check) and, only when the header fails
//! its checksum, once more after it: an odd or changed generation means a rewrite overlapped
//! the read, so the header is not corrupt; the reader waits for the rewrite to end and reads
//! again, and never drops the record for it. The same generation means no rewrite overlapped
//! it: the checksum failure is the disk's. Rewrites of one record are serialized (a second one
//! waits for the first), so the index's meta and the header's end up the same. A reader that
//! copies a record into the RAM tier does so only when no rewrite was in progress at its start,
//! and drops its copy again when the generation moved meanwhile: the rewrite's end may have
//! cleared the tier before the copy went in, and the copy would keep the old meta.
//!
//! A rewrite whose future is dropped while its write is in flight ends its mark at the drop,
//! and the write may still land after it; a reader overlapping that late write would see an
//! unchanged generation. So a reader reads once more before it calls a header corrupt, as it
//! did before the generation existed; only that late write racing both reads is left.
//!
//! This works across workers: the index and the [`Notify`] that wakes waiters are the
//! [`Store`]'s, shared by every worker thread. The hot path costs nothing more: the generation
//! comes with the lock `open` took anyway; the second look happens only on a checksum failure.
//!
//! [`StoreWorker::update_meta`]: super::StoreWorker::update_meta
//! [`Entry::rewrite`]: super::state::Entry::rewrite
//! [`Notify`]: tokio::sync::Notify

use std::pin::pin;

use bytes::Bytes;

use super::state::{Loc, entry_cost};
use super::{INDEX_META_MAX, Store};

/// Reads of one open that may find the header mid-rewrite before it gives up with
/// `MissingOrReplaced` (the caller then fetches the object; nothing is dropped). Each waits
/// for the rewrite it overlapped to end, so only a record rewritten back to back this many
/// times during one open gets there.
pub(crate) const REWRITE_RETRIES: u32 = 8;

/// Whether a rewrite generation says a rewrite is in progress.
pub(crate) fn in_progress(generation: u64) -> bool {
    generation % 2 == 1
}

/// What [`Store::begin_rewrite`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Begin {
    /// The rewrite is marked in progress and the segment pinned; end it with
    /// [`Store::end_rewrite`] (see [`RewriteGuard`]).
    Started,
    /// Another rewrite of this record is in progress.
    Busy,
    /// The record is no longer indexed at this sequence, or its segment was reclaimed.
    Gone,
}

impl Store {
    /// The rewrite generation of (primary, variant) if the index still points at the record
    /// with sequence `seq`; `None` when it was evicted, purged or replaced.
    pub(crate) fn rewrite_gen(&self, primary: &[u8], variant: &[u8], seq: u64) -> Option<u64> {
        self.lock()
            .get(primary, variant)
            .filter(|e| e.loc.seq == seq)
            .map(|e| e.rewrite)
    }

    /// Wait until no rewrite of the record is in progress; its generation then, or `None`
    /// when it is no longer indexed.
    pub(crate) async fn rewrite_settled(
        &self,
        primary: &[u8],
        variant: &[u8],
        seq: u64,
    ) -> Option<u64> {
        loop {
            // Registered before the look, so an end between the look and the wait wakes it.
            let mut ended = pin!(self.rewrites_done.notified());
            ended.as_mut().enable();
            let g = self.rewrite_gen(primary, variant, seq)?;
            if !in_progress(g) {
                return Some(g);
            }
            ended.await;
        }
    }

    /// Mark a rewrite of the record at `loc` in progress and pin its segment, unless another
    /// rewrite of it is in progress or it is gone.
    pub(crate) fn begin_rewrite(&self, primary: &[u8], variant: &[u8], loc: &Loc) -> Begin {
        let mut st = self.lock();
        match st.get(primary, variant).filter(|e| e.loc.seq == loc.seq) {
            None => return Begin::Gone,
            Some(e) if in_progress(e.rewrite) => return Begin::Busy,
            Some(_) => {}
        }
        if !st.pin(loc.seg, loc.epoch) {
            return Begin::Gone;
        }
        if let Some(e) = st.get_mut_at(primary, variant, loc.seq) {
            e.rewrite += 1;
        }
        Begin::Started
    }

    /// End a rewrite begun with [`Store::begin_rewrite`]: unpin, mark it ended, and with
    /// `Some(meta)` (its header write completed) put the new meta into the index. The RAM tier
    /// copy goes either way (a reader that copied in the old header meanwhile drops its copy
    /// itself, see `StoreWorker::open`). Wakes the readers and rewriters waiting for it.
    pub(crate) fn end_rewrite(
        &self,
        primary: &Bytes,
        variant: &Bytes,
        loc: &Loc,
        meta: Option<Bytes>,
    ) {
        {
            let mut st = self.lock();
            st.unpin(loc.seg);
            let mut cost = None;
            if let Some(e) = st.get_mut_at(primary, variant, loc.seq) {
                e.rewrite += 1;
                if let Some(m) = meta {
                    let before = entry_cost(primary, e);
                    e.meta = (m.len() <= INDEX_META_MAX).then_some(m);
                    cost = Some((before, entry_cost(primary, e)));
                }
            }
            if let Some((before, after)) = cost {
                st.index_bytes = st.index_bytes.saturating_sub(before) + after;
            }
        }
        self.ram.remove(primary, variant);
        self.rewrites_done.notify_waiters();
    }
}

/// A rewrite in progress: ends it when dropped, also when the rewriting future is dropped
/// mid-write, so that no record stays marked (and its readers waiting) for ever.
pub(crate) struct RewriteGuard<'a> {
    pub store: &'a Store,
    pub primary: &'a Bytes,
    pub variant: &'a Bytes,
    pub loc: &'a Loc,
    /// Set once the new header is on disk: the meta the index takes at the end.
    pub written: Option<Bytes>,
}

impl Drop for RewriteGuard<'_> {
    fn drop(&mut self) {
        let meta = self.written.take();
        self.store
            .end_rewrite(self.primary, self.variant, self.loc, meta);
    }
}
