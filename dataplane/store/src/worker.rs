//! A worker thread's handle on the store: opens objects, starts writes, rewrites meta.

use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;

use super::body::{DiskBody, Inner, Source, StoredObject, chunk_for, read_timed, verify_blocks};
use super::growing::{Growing, Readable};
use super::ram::RAM_MAX_RECORD;
use super::record::{self, BLOCK, RecordHeader};
use super::rewrite::{self, Begin, REWRITE_RETRIES, RewriteGuard};
use super::writer::ObjectWriter;
use super::{ObjectRef, Store, StoreError};
use crate::io::threads::ThreadsEngine;
use crate::io::uring::UringEngine;
use crate::io::{EngineKind, FileId, IoBudget, IoBufferUsage, WorkerIo, write_all_at};

/// One per worker thread, created inside that thread's runtime: `tokio_uring::start` for the
/// uring engine, any tokio runtime for the threads engine. Not `Send`.
///
/// Each worker has its own [`IoBudget`]: every read and write buffer of its opens, streams
/// and writers comes from it, so the worker's buffer memory never exceeds it (see
/// [`crate::io::budget`]).
pub struct StoreWorker {
    store: Arc<Store>,
    io: Rc<WorkerIo>,
    budget: IoBudget,
    chunk: u64,
    /// Test hook: this worker's rewrites leave a torn header on disk for a while.
    #[cfg(test)]
    tear: Option<Rc<tests::Tear>>,
}

impl std::fmt::Debug for StoreWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWorker")
            .field("engine", &self.store.engine())
            .finish_non_exhaustive()
    }
}

impl StoreWorker {
    /// A worker with the store's per-worker buffer budget
    /// ([`Store::io_buffer_bytes_per_worker`]).
    pub fn new(store: Arc<Store>) -> Result<StoreWorker, StoreError> {
        let bytes = store.io_buffer_bytes_per_worker();
        StoreWorker::with_io_buffer_bytes(store, bytes)
    }

    /// A worker whose read and write buffers never exceed `bytes` (clamped to at least
    /// [`crate::io::budget::MIN_BUDGET`]).
    pub fn with_io_buffer_bytes(store: Arc<Store>, bytes: u64) -> Result<StoreWorker, StoreError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreError::Engine(
                "StoreWorker::new must run inside the worker's runtime".into(),
            ));
        }
        let io = match store.engine() {
            EngineKind::Uring => WorkerIo::Uring(UringEngine::new(Arc::clone(store.files()))),
            EngineKind::Threads => {
                let pool = store
                    .pool()
                    .ok_or_else(|| StoreError::Engine("thread pool missing".into()))?;
                WorkerIo::Threads(ThreadsEngine::new(Arc::clone(pool)))
            }
        };
        let budget = IoBudget::new(bytes);
        store.register_budget(&budget);
        Ok(StoreWorker {
            store,
            io: Rc::new(io),
            chunk: chunk_for(&budget),
            budget,
            #[cfg(test)]
            tear: None,
        })
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// This worker's buffer budget.
    pub fn io_budget(&self) -> &IoBudget {
        &self.budget
    }

    /// A snapshot of this worker's buffer memory use.
    pub fn io_buffer_usage(&self) -> IoBufferUsage {
        self.budget.usage()
    }

    /// Open a looked-up object: from the RAM tier, or with one read of header and body (the
    /// whole record when its body is at most one chunk (256 KiB), else the header and the
    /// first 192 KiB of body).
    /// The header's checksum, key, sequence and epoch are checked; a key mismatch (slot
    /// reused) or an evicted, purged or replaced object is `MissingOrReplaced`. A small body is
    /// verified here (`Corrupt` on mismatch); a large one as it streams.
    ///
    /// A header rewritten by [`StoreWorker::update_meta`] (on any worker) while it is read
    /// comes back old or new, never as corruption: a read that fails the header checksum
    /// while a rewrite overlapped it waits for the rewrite to end and reads again (see
    /// `src/rewrite.rs`); after `REWRITE_RETRIES` (8) such reads it is `MissingOrReplaced`,
    /// and the record stays.
    pub async fn open(&self, r: &ObjectRef) -> Result<StoredObject, StoreError> {
        let store = &self.store;
        let loc = &r.loc;
        let Some(mut generation) = store.rewrite_gen(&r.primary, &r.variant, loc.seq) else {
            return Err(StoreError::MissingOrReplaced);
        };
        if let Some((meta, body)) = store.ram().get(&r.primary, &r.variant, loc.seq) {
            return Ok(StoredObject {
                meta,
                body_len: body.len() as u64,
                source: Source::Ram,
                inner: Inner::Whole(body),
            });
        }
        let hl = u64::from(loc.header_len);
        let rec_len = loc.record_len();
        // A body of at most one chunk: one read of the whole record. Larger: the header and
        // the first `chunk - 64 KiB` of body, so that the read fits a chunk-sized buffer (one
        // size class for every buffer of a stream) and ends on a checksum block.
        let whole = rec_len <= hl + self.chunk;
        // Only whole reads can be copied into RAM. `admit` counts the lookup in the tier's
        // frequency sketch, so it runs once per disk hit of an eligible record. `Some(reserved)`:
        // copy it in; index memory beyond the plan's index reserve comes out of the RAM tier.
        let to_ram = if whole && rec_len <= RAM_MAX_RECORD {
            let reserved = store.index_overflow();
            store
                .ram()
                .admit(&r.primary, &r.variant, rec_len, reserved)
                .then_some(reserved)
        } else {
            None
        };
        let first = if whole {
            rec_len
        } else {
            hl + self.chunk - BLOCK
        };
        let alloc_len = if whole { first } else { first.max(self.chunk) };
        let direct = loc.body_len >= store.config().direct_io_threshold;
        let file = FileId {
            seg: loc.seg,
            direct,
        };
        let mut overlapped = 0;
        let mut reread = false;
        let (buf, hdr) = loop {
            let buf = self.budget.alloc_first(alloc_len as usize).await;
            let buf = read_timed(&self.io, store, file, buf, first, loc.off, None).await?;
            if !store.epoch_is(loc.seg, loc.epoch) {
                return Err(StoreError::MissingOrReplaced);
            }
            if let Ok(h) = record::decode(&buf.as_slice()[..hl as usize], store.nonce()) {
                break (buf, h);
            }
            drop(buf);
            let Some(now) = store.rewrite_gen(&r.primary, &r.variant, loc.seq) else {
                return Err(StoreError::MissingOrReplaced);
            };
            if now != generation || rewrite::in_progress(generation) {
                // An in-place rewrite overlapped the read: the header may be half written.
                overlapped += 1;
                if overlapped >= REWRITE_RETRIES {
                    return Err(StoreError::MissingOrReplaced);
                }
                generation = store
                    .rewrite_settled(&r.primary, &r.variant, loc.seq)
                    .await
                    .ok_or(StoreError::MissingOrReplaced)?;
            } else if !reread {
                // No rewrite the index knows of; a dropped one's write may still be landing.
                reread = true;
            } else {
                store.drop_corrupt(&r.primary, &r.variant, loc);
                return Err(StoreError::Corrupt("record header checksum"));
            }
        };
        if hdr.is_dead()
            || hdr.primary != r.primary
            || hdr.variant != r.variant
            || hdr.seq != loc.seq
            || hdr.epoch != loc.epoch
            || hdr.body_len != loc.body_len
            || hdr.header_len != loc.header_len
        {
            return Err(StoreError::MissingOrReplaced);
        }
        let data = Bytes::from_owner(buf);
        let trusted = store.trusts_body(r);
        if whole {
            let body = data.slice(hl as usize..(hl + loc.body_len) as usize);
            if !trusted {
                if !verify_blocks(&hdr.crcs, 0, &body) {
                    store.drop_corrupt(&r.primary, &r.variant, loc);
                    return Err(StoreError::Corrupt("body checksum"));
                }
                store.mark_verified(&r.primary, &r.variant, loc.seq);
            }
            if let Some(reserved) = to_ram.filter(|_| !rewrite::in_progress(generation)) {
                store.ram().insert(
                    r.primary.clone(),
                    r.variant.clone(),
                    loc.seq,
                    hdr.meta.clone(),
                    Bytes::copy_from_slice(&body),
                    reserved,
                );
                // A rewrite that started since the read may have ended (and cleared the RAM
                // copy) before this insert: its meta is newer than ours, drop our copy.
                if store.rewrite_gen(&r.primary, &r.variant, loc.seq) != Some(generation) {
                    store.ram().remove(&r.primary, &r.variant);
                }
            }
            return Ok(StoredObject {
                meta: hdr.meta,
                body_len: loc.body_len,
                source: Source::Disk,
                inner: Inner::Whole(body),
            });
        }
        let first_body = data.slice(hl as usize..);
        Ok(StoredObject {
            meta: hdr.meta,
            body_len: loc.body_len,
            source: Source::Disk,
            inner: Inner::Disk(Box::new(DiskBody {
                io: Rc::clone(&self.io),
                budget: self.budget.clone(),
                chunk: self.chunk,
                store: Arc::clone(store),
                primary: r.primary.clone(),
                variant: r.variant.clone(),
                loc: loc.clone(),
                crcs: hdr.crcs,
                trusted,
                verified_to: 0,
                direct,
                first: Some(first_body),
                ahead: None,
            })),
        })
    }

    /// The body (or `range` of it) of an object being written ([`ObjectWriter::readable`]),
    /// as it reaches the disk: read with this worker's I/O and budget, checked against its
    /// block checksums, waiting for the writer when it catches up with it. Ends with an
    /// error when the writer fails before `range` is on disk, a block fails its checksum, or
    /// the segment is reclaimed under a slow reader; never yields unverified bytes.
    pub fn read_growing(
        &self,
        growing: Arc<Growing>,
        range: Option<std::ops::Range<u64>>,
    ) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + 'static {
        let body_len = growing.body_len();
        let r = range.unwrap_or(0..body_len);
        let end = r.end.min(body_len);
        let start = r.start.min(end);
        let reader = GrowingReader {
            store: Arc::clone(&self.store),
            io: Rc::clone(&self.io),
            budget: self.budget.clone(),
            chunk: self.chunk,
            growing,
            pos: start / BLOCK * BLOCK,
            start,
            end,
        };
        futures_util::stream::unfold(Some(reader), |reader| async move {
            let mut reader = reader?;
            match reader.next().await {
                Ok(Some(b)) => Some((Ok(b), Some(reader))),
                Ok(None) => None,
                Err(e) => Some((Err(e), None)),
            }
        })
    }

    /// Start storing a response. `Err` means: do not store, just proxy; `NotAdmitted` when the
    /// admission policy keeps this fill off the disk (`StoreConfig::admission`).
    pub fn begin_write(
        &self,
        primary: Bytes,
        variant: Bytes,
        meta: Bytes,
        content_length: Option<u64>,
    ) -> Result<ObjectWriter, StoreError> {
        if !self.store.admits(&primary, &variant) {
            return Err(StoreError::NotAdmitted);
        }
        ObjectWriter::begin(
            Arc::clone(&self.store),
            Rc::clone(&self.io),
            self.budget.clone(),
            primary,
            variant,
            meta,
            content_length,
        )
    }

    /// Replace the meta blob of a stored object in place (after a 304 revalidation). Fails with
    /// `MetaTooLarge` when it does not fit in the header's reserved space; the caller may then
    /// store the object again.
    ///
    /// The record is marked as being rewritten in the index while the header is written, so
    /// that readers on any worker ([`StoreWorker::open`]) take a half-written header for what
    /// it is, and a second rewrite of the same record waits for this one (see
    /// `src/rewrite.rs`).
    pub async fn update_meta(&self, r: &ObjectRef, meta: Bytes) -> Result<(), StoreError> {
        let store = &self.store;
        let loc = &r.loc;
        loop {
            match store.begin_rewrite(&r.primary, &r.variant, loc) {
                Begin::Started => break,
                Begin::Gone => return Err(StoreError::MissingOrReplaced),
                Begin::Busy => {
                    store
                        .rewrite_settled(&r.primary, &r.variant, loc.seq)
                        .await
                        .ok_or(StoreError::MissingOrReplaced)?;
                }
            }
        }
        let mut guard = RewriteGuard {
            store,
            primary: &r.primary,
            variant: &r.variant,
            loc,
            written: None,
        };
        self.rewrite_header(r, meta.clone()).await?;
        guard.written = Some(meta);
        Ok(())
    }

    async fn rewrite_header(&self, r: &ObjectRef, meta: Bytes) -> Result<(), StoreError> {
        let store = &self.store;
        let loc = &r.loc;
        let hl = u64::from(loc.header_len);
        let file = FileId {
            seg: loc.seg,
            direct: true,
        };
        let buf = self.budget.alloc(hl as usize).await;
        let buf = read_timed(&self.io, store, file, buf, hl, loc.off, None).await?;
        let h = record::decode(buf.as_slice(), store.nonce())
            .map_err(|_| StoreError::Corrupt("record header checksum"))?;
        if h.is_dead() || h.primary != r.primary || h.variant != r.variant || h.seq != loc.seq {
            return Err(StoreError::MissingOrReplaced);
        }
        if meta.len() > h.meta_cap as usize {
            return Err(StoreError::MetaTooLarge {
                need: meta.len(),
                have: h.meta_cap as usize,
            });
        }
        let new = RecordHeader { meta, ..h };
        #[cfg(test)]
        let old = buf.as_slice().to_vec();
        drop(buf);
        let mut out = self.budget.alloc(hl as usize).await;
        new.encode(out.full_mut());
        out.set_len(hl as usize);
        #[cfg(test)]
        if let Some(tear) = &self.tear {
            tear.write_torn(self, file, loc.off, &old, &out).await?;
        }
        let (res, _) = write_all_at(&*self.io, file, out, loc.off).await;
        if let Err(e) = res {
            super::metrics::Counters::inc(&store.counters().write_errors);
            return Err(e.into());
        }
        store
            .counters()
            .disk_write(super::metrics::WriteKind::MetaRewrite, hl);
        Ok(())
    }
}

/// The state of one [`StoreWorker::read_growing`] stream.
struct GrowingReader {
    store: Arc<Store>,
    io: Rc<WorkerIo>,
    budget: IoBudget,
    chunk: u64,
    growing: Arc<Growing>,
    /// The next body offset to read (a block boundary).
    pos: u64,
    start: u64,
    end: u64,
}

impl GrowingReader {
    async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        use std::io::{Error, ErrorKind};
        loop {
            if self.pos >= self.end {
                return Ok(None);
            }
            let (to, crcs) = match self.growing.readable(self.pos).await {
                Readable::End => return Ok(None),
                Readable::Failed => {
                    return Err(Error::other("the fill of this object failed"));
                }
                Readable::Bytes { to, crcs } => (to, crcs),
            };
            let loc = &self.growing.loc;
            let len = self.chunk.min(to - self.pos);
            let buf = self.budget.alloc(self.chunk as usize).await;
            let file = FileId {
                seg: loc.seg,
                direct: true,
            };
            let off = loc.off + u64::from(loc.header_len) + self.pos;
            let read_len = crate::io::align_up(len);
            let buf = read_timed(&self.io, &self.store, file, buf, read_len, off, None).await?;
            if !self.store.epoch_is(loc.seg, loc.epoch) {
                return Err(Error::other(StoreError::MissingOrReplaced));
            }
            let data = Bytes::from_owner(buf);
            // `crcs` start at the block at `self.pos`.
            if !verify_blocks(&crcs, 0, &data[..len as usize]) {
                return Err(Error::new(
                    ErrorKind::InvalidData,
                    "a block being written failed its checksum",
                ));
            }
            let base = self.pos;
            self.pos += len;
            let from = self.start.max(base);
            let upto = self.end.min(base + len);
            if from < upto {
                return Ok(Some(
                    data.slice((from - base) as usize..(upto - base) as usize),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use std::time::Duration;

    use crate::EngineChoice;
    use tokio::sync::Notify;

    use super::*;
    use crate::StoreConfig;
    use crate::io::AlignedBuf;

    /// A rewrite torn half way and held there: what a reader overlapping a slow or non-atomic
    /// header write sees, made to last until the test releases it.
    #[derive(Default)]
    pub(crate) struct Tear {
        /// Notified once the torn header is on disk.
        torn: Notify,
        /// The rewrite writes its whole header once this is notified.
        release: Notify,
    }

    impl Tear {
        /// Write the first half of `new` over `old` at `off`, then wait for the release.
        pub(super) async fn write_torn(
            &self,
            w: &StoreWorker,
            file: FileId,
            off: u64,
            old: &[u8],
            new: &AlignedBuf,
        ) -> Result<(), StoreError> {
            let len = new.len();
            let mut torn = w.budget.alloc(len).await;
            torn.full_mut()[..len / 2].copy_from_slice(&new.as_slice()[..len / 2]);
            torn.full_mut()[len / 2..len].copy_from_slice(&old[len / 2..len]);
            torn.set_len(len);
            write_all_at(&*w.io, file, torn, off).await.0?;
            self.torn.notify_one();
            self.release.notified().await;
            Ok(())
        }
    }

    /// Meta blobs that differ in every byte and span the header's two halves.
    fn meta(c: u8) -> Bytes {
        Bytes::from(vec![c; 3000])
    }

    /// Issue 14: a reader that finds a header half rewritten by `update_meta` (here on another
    /// worker, held torn) waits for the rewrite and returns the new meta; the record is not
    /// dropped as corrupt. Before the fix the reader read twice, failed the checksum twice and
    /// evicted the object.
    fn a_reader_never_drops_a_header_being_rewritten(engine: EngineChoice, ram: u64) {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let store = Store::open(StoreConfig {
            dir: dir.path().to_path_buf(),
            size: 64 << 20,
            ram_tier_bytes: ram,
            engine,
            ..StoreConfig::default()
        })
        .unwrap();
        crate::io::block_on_worker(engine, async {
            let reader = StoreWorker::new(store.clone()).unwrap();
            let mut rewriter = StoreWorker::new(store.clone()).unwrap();
            let tear = Rc::new(Tear::default());
            rewriter.tear = Some(Rc::clone(&tear));
            for body in [&b"small body"[..], &vec![7u8; 300_000]] {
                let key = Bytes::from(format!("/k/{}", body.len()));
                let mut wr = reader
                    .begin_write(
                        key.clone(),
                        Bytes::new(),
                        meta(b'o'),
                        Some(body.len() as u64),
                    )
                    .unwrap();
                wr.write(Bytes::copy_from_slice(body)).await.unwrap();
                wr.finish().await.unwrap();
                let r = store.lookup(&key).remove(0);
                let rw = Rc::new(rewriter);
                let update = {
                    let (rw, r) = (Rc::clone(&rw), r.clone());
                    tokio::task::spawn_local(async move { rw.update_meta(&r, meta(b'n')).await })
                };
                tear.torn.notified().await;
                let open = {
                    let (store, r) = (store.clone(), r.clone());
                    tokio::task::spawn_local(async move {
                        let w = StoreWorker::new(store).unwrap();
                        w.open(&r).await.map(|o| o.meta)
                    })
                };
                // Long enough for an open that does not wait to finish.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let s = store.stats();
                assert_eq!(s.corrupt_dropped, 0, "a reader dropped the record: {s:?}");
                assert_eq!(store.lookup(&key).len(), 1, "the record left the index");
                tear.release.notify_one();
                update.await.unwrap().unwrap();
                // It read the header once the rewrite ended: the new meta.
                assert!(open.await.unwrap().unwrap() == meta(b'n'));
                // From the RAM tier the second time, when there is one: also the new meta.
                for _ in 0..2 {
                    assert!(reader.open(&r).await.unwrap().meta == meta(b'n'));
                }
                assert!(store.lookup(&key)[0].meta == meta(b'n'));
                rewriter = Rc::try_unwrap(rw).ok().unwrap();
            }
            assert_eq!(store.stats().ram_tier_objects, u64::from(ram > 0));
        })
        .unwrap();
    }

    #[test]
    fn uring_reader_never_drops_a_header_being_rewritten() {
        a_reader_never_drops_a_header_being_rewritten(EngineChoice::Uring, 0);
        a_reader_never_drops_a_header_being_rewritten(EngineChoice::Uring, 8 << 20);
    }

    #[test]
    fn threads_reader_never_drops_a_header_being_rewritten() {
        a_reader_never_drops_a_header_being_rewritten(EngineChoice::Threads, 0);
        a_reader_never_drops_a_header_being_rewritten(EngineChoice::Threads, 8 << 20);
    }
}
