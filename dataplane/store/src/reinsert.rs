//! Reinsertion: a second life for objects still asked for when their segment's turn for
//! reclaim comes (`StoreConfig::reinsertion`). FIFO eviction over whole segments drops every
//! object of the oldest segment, hot or not; with reinsertion, the records read since they were
//! written (`src/accessed.rs`) are copied to the head of the log first, as CacheLib's Navy does
//! with its hits-based reinsertion. A copy starts unread, so an object survives the next
//! round only if it is asked for again.
//!
//! # When
//! Each reclaim wakes the store's reinsertion thread, which takes the segment next in line (the
//! oldest): its read bits are taken, and each such record that fits one read chunk is read,
//! checked against its block checksums and written again through the ordinary writer, up to
//! half a segment of copies per pass (so at least half of every reclaimed segment is room for
//! new objects). The pass runs at the writers' pace, on its own thread and runtime, while the
//! active segment fills; a record whose segment is reclaimed first is simply evicted.
//!
//! # Never an older response, never a purge undone
//! A copy is published only in place of its original: while the index still has that very
//! record (`Store::publish` with `replacing`). So a copy of an object that was replaced, purged
//! or evicted meanwhile is tombstoned instead. It is not made for a key with another writer in
//! flight (`marks::Writing`): that writer may have reserved its record before the copy, and the
//! copy, newer by reservation order, would win over the newer response. It is published only
//! if the key's invalidation mark is unchanged since before the read. And a durable purge
//! ([`Store::purge`]) of a key whose copy is in flight waits for that copy to end: published
//! (then the purge's own removal found and tombstoned it) or refused with its tombstone synced,
//! so no copy comes back after a power loss that the purge outlived.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::StoreError;
use crate::io::{EngineChoice, EngineKind};
use crate::reinsert_wake::Wake;
use crate::store::Store;
use crate::worker::StoreWorker;

/// How long the thread sleeps between looks at whether its store is still open.
const IDLE: Duration = Duration::from_millis(200);
/// The pass's I/O buffer budget: one record at a time, read whole (a budget of 8 read chunks
/// gives the full 256 KiB chunk) and staged by its writer.
const PASS_BUFFERS: u64 = 2 << 20;

/// Start the store's reinsertion thread when reinsertion is on. It holds the store weakly and
/// ends within [`IDLE`] of the store's last handle going.
pub(crate) fn start(store: &Arc<Store>) -> Result<(), StoreError> {
    let Some(wake) = store.reinserter.clone() else {
        return Ok(());
    };
    let weak = Arc::downgrade(store);
    let engine = match store.engine() {
        EngineKind::Uring => EngineChoice::Uring,
        EngineKind::Threads => EngineChoice::Threads,
    };
    std::thread::Builder::new()
        .name("edgecache-reinsert".into())
        .spawn(move || run(&weak, &wake, engine))?;
    Ok(())
}

fn run(store: &Weak<Store>, wake: &Wake, engine: EngineChoice) {
    let mut last = None;
    loop {
        // Upgraded only for a look: a closed store's directory lock is not held up by this.
        if !wake.wait(IDLE) {
            if store.strong_count() == 0 {
                return;
            }
            continue;
        }
        let Some(store) = store.upgrade() else {
            return;
        };
        {
            let at = store.reclaims.load(Ordering::Acquire);
            look(&store, engine, &mut last);
            wake.done_at.store(at, Ordering::Release);
        }
    }
}

/// One look at the segment next in line (`last`: the one looked at before, by its epoch).
fn look(store: &Arc<Store>, engine: EngineChoice, last: &mut Option<(u32, u64)>) {
    let Some(next) = store.next_victim() else {
        return;
    };
    if *last == Some(next) {
        return;
    }
    *last = Some(next);
    let (seg, epoch) = next;
    let offs = store.accessed().take_segment(seg);
    if offs.is_empty() {
        return;
    }
    let pass = pass(Arc::clone(store), seg, epoch, offs);
    if let Err(e) = crate::io::block_on_worker(engine, pass) {
        tracing::warn!(error = %e, "reinsertion pass could not start");
    }
}

/// Copy the read records of `seg` at `epoch` (header offsets `offs`), up to half a segment.
async fn pass(store: Arc<Store>, seg: u32, epoch: u64, offs: Vec<u64>) {
    let w = match StoreWorker::with_io_buffer_bytes(Arc::clone(&store), PASS_BUFFERS) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "reinsertion pass without a worker");
            return;
        }
    };
    let budget = store.layout().segment_size / 2;
    let mut copied = 0;
    for off in offs {
        if copied >= budget || !store.epoch_is(seg, epoch) {
            break;
        }
        match w.reinsert(seg, epoch, off).await {
            Ok(Some(n)) => copied += n,
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, seg, off, "record not reinserted"),
        }
    }
}

impl Store {
    /// Whether the reinsertion pass has looked at the segment in line after every reclaim so
    /// far (always with reinsertion off). For tools and tests that replay a trace faster than
    /// a disk would let the pass keep up.
    pub fn reinsertion_caught_up(&self) -> bool {
        self.reinserter.as_ref().is_none_or(|w| {
            w.done_at.load(Ordering::Acquire) >= self.reclaims.load(Ordering::Acquire)
        })
    }

    /// The segment the next reclaim takes, and its epoch (`None`: none holds data).
    fn next_victim(&self) -> Option<(u32, u64)> {
        let st = self.lock();
        let v = st.victim()?;
        let epoch = st.segs[v as usize].epoch;
        (epoch > 0).then_some((v, epoch))
    }
}

impl StoreWorker {
    /// Copy the record whose header is at `off` of `seg` (at `epoch`) to the head of the log,
    /// when it fits one read chunk, passes its checksums, is still the index's and no other
    /// writer of its key is in flight (see the module doc). The record bytes copied, `None`
    /// when it was not.
    pub(crate) async fn reinsert(
        &self,
        seg: u32,
        epoch: u64,
        off: u64,
    ) -> Result<Option<u64>, StoreError> {
        let store = Arc::clone(self.store());
        let Some(rec) = self.read_record_at(seg, epoch, off).await? else {
            return Ok(None);
        };
        let (h, body, loc) = (rec.header, rec.body, rec.loc);
        let vtag = store.variant_tag(&h.variant);
        if !store.indexes(&h.primary, vtag, &loc) || store.writing().count(&h.primary) > 0 {
            return Ok(None);
        }
        let Some(wake) = store.reinserter.clone() else {
            return Ok(None);
        };
        let _copying = wake.copying(&h.primary);
        let mark = store.invalidation_mark(&h.primary);
        let mut w = self.writer(
            h.primary.clone(),
            h.variant,
            h.meta,
            Some(body.len() as u64),
        )?;
        if store.writing().count(&h.primary) > 1 {
            // Another writer began before our reservation: its response may be newer.
            return Ok(None);
        }
        w.publish_only_if_unchanged(mark);
        w.copy_of(loc.clone());
        w.write(body).await?;
        w.finish().await?;
        Ok(Some(loc.record_len()))
    }
}
