//! A worker thread's handle on the store: opens objects, starts writes, rewrites meta.

use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;

use super::body::{
    DiskBody, Inner, RamFill, Source, StoredObject, chunk_for, read_timed, verify_blocks, whole_for,
};
use super::combine::Combiner;
use super::growing::{Growing, Readable};
use super::index::MAX_BLOCKS;
use super::ram::{Copy as RamCopy, Parsed};
use super::record::{self, BLOCK, RecordHeader};
use super::rewrite::{Begin, REWRITE_RETRIES, RewriteGuard};
use super::state::Loc;
use super::writer::{ObjectWriter, STAGE};
use crate::error::StoreError;
use crate::io::threads::ThreadsEngine;
use crate::io::uring::UringEngine;
use crate::io::{EngineKind, FileId, IoBudget, IoBufferUsage, WorkerIo, write_all_at};
use crate::object::ObjectRef;
use crate::store::Store;

/// One per worker thread, created inside that thread's runtime: `tokio_uring::start` for the
/// uring engine, any tokio runtime for the threads engine. Not `Send`.
///
/// Each worker has its own [`IoBudget`]: every read and write buffer of its opens, streams
/// and writers comes from it, so the worker's buffer memory never exceeds it (see
/// [`crate::io::budget`]).
pub struct StoreWorker {
    store: Arc<Store>,
    io: Rc<WorkerIo>,
    combiner: Rc<Combiner>,
    budget: IoBudget,
    chunk: u64,
    /// The largest record read whole (`body::whole_for`).
    whole: u64,
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

/// A record read whole for a copy ([`StoreWorker::read_record_at`], for `reinsert`).
pub(crate) struct ReadRecord {
    pub header: RecordHeader,
    pub body: Bytes,
    pub loc: Loc,
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
        let pool = ThreadsEngine::new(Arc::clone(store.pool()));
        let io = match store.engine() {
            EngineKind::Uring => WorkerIo::Uring(UringEngine::new(Arc::clone(store.files()), pool)),
            EngineKind::Threads => WorkerIo::Threads(pool),
        };
        let io = match (store.journal(), io) {
            (Some(j), WorkerIo::Uring(inner)) => WorkerIo::CrashUring(crate::io::crash::CrashIo {
                inner,
                journal: Arc::clone(j),
            }),
            (Some(j), WorkerIo::Threads(inner)) => {
                WorkerIo::CrashThreads(crate::io::crash::CrashIo {
                    inner,
                    journal: Arc::clone(j),
                })
            }
            (_, io) => io,
        };
        let budget = IoBudget::new(bytes);
        store.register_budget(&budget);
        let io = Rc::new(io);
        Ok(StoreWorker {
            combiner: Combiner::new(Arc::clone(&store), Rc::clone(&io)),
            store,
            io,
            chunk: chunk_for(&budget),
            whole: whole_for(&budget),
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

    /// The size of this worker's reads of large bodies (256 KiB; less for a budget under
    /// 2 MiB): what one stream of a large body holds of the budget at a time.
    pub fn read_chunk(&self) -> u64 {
        self.chunk
    }

    /// A snapshot of this worker's buffer memory use.
    pub fn io_buffer_usage(&self) -> IoBufferUsage {
        self.budget.usage()
    }

    /// Keep `parsed`, the caller's parsed form of `obj.meta`, with `obj`'s RAM copy, so later
    /// RAM hits return it as [`StoredObject::parsed`]. Nothing for an object with no RAM copy.
    pub fn keep_parsed(&self, obj: &StoredObject, parsed: Parsed) {
        if obj.in_ram && obj.parsed.is_none() {
            self.store
                .ram()
                .attach(obj.object_ref.loc.id(), &obj.meta, parsed);
        }
    }

    /// Open a looked-up object: from the RAM tier, or with one read of header and body (the
    /// whole record when it is at most 1 MiB + 64 KiB (less for a budget under 8.5 MiB), else
    /// the first chunk (256 KiB): the header and as much body as fills it in whole 64 KiB
    /// blocks; a header longer than that is read again whole). The header's checksum, primary
    /// key, epoch and length are checked: another key's record (an index tag collision) or an
    /// evicted, purged or replaced object is `MissingOrReplaced` (the caller tries its next
    /// candidate). A small body is verified here (`Corrupt` on mismatch); a large one as it
    /// streams. The returned object carries the complete ref ([`StoredObject::object_ref`]).
    ///
    /// A header rewritten by [`StoreWorker::update_meta`] (on any worker) while it is read
    /// comes back old or new, never as corruption: a read that fails the header checksum
    /// while a rewrite may have overlapped it waits for the rewrite to end and reads again (see
    /// `src/rewrite.rs`); after `REWRITE_RETRIES` (8) such reads it is `MissingOrReplaced`,
    /// and the record stays.
    pub async fn open(&self, r: &ObjectRef) -> Result<StoredObject, StoreError> {
        match self.open_ram(r) {
            Some(obj) => Ok(obj),
            None => self.open_disk(r).await,
        }
    }

    /// [`open`](Self::open) when `r`'s record has a copy in the RAM tier (no disk read, no
    /// wait), else `None`.
    ///
    /// A RAM copy is there only while its record is indexed: every path that takes a record
    /// out of the index (purge, replacement, eviction, corruption, segment reclaim) or rewrites
    /// its header takes the copy out too, and the tier finds a copy by its record's place in
    /// the log (epoch included) and primary key. So a RAM hit needs no second index lookup.
    pub fn open_ram(&self, r: &ObjectRef) -> Option<StoredObject> {
        let loc = &r.loc;
        let c = self.store.ram().get(&r.primary, loc.id())?;
        self.store.accessed().touch(loc.seg, loc.off);
        let body_len = c.body.len() as u64;
        let object_ref = complete(r, c.variant, c.meta.clone(), c.header_len, body_len, c.seq);
        Some(StoredObject {
            meta: c.meta,
            body_len,
            source: Source::Ram,
            object_ref,
            parsed: c.parsed,
            in_ram: true,
            inner: Inner::Whole(c.body),
        })
    }

    /// [`open`](Self::open) from the disk, whether or not the RAM tier has a copy: for a caller
    /// that tried [`open_ram`](Self::open_ram) already.
    pub async fn open_disk(&self, r: &ObjectRef) -> Result<StoredObject, StoreError> {
        let store = &self.store;
        let loc = &r.loc;
        store.accessed().touch(loc.seg, loc.off);
        let Some(mut generation) = store.rewrite_gen(&r.primary, loc) else {
            return Err(StoreError::MissingOrReplaced);
        };
        let rec_len = r.record_len;
        // The index's length is exact below its saturation (256 MiB), a lower bound above.
        let exact = rec_len < u64::from(MAX_BLOCKS) * 4096;
        // At most `whole` (a 1 MiB object's record): one read of the whole record. Larger: one
        // chunk-sized read (one size class for every buffer of a stream) of the header and the
        // first body blocks. A record of at most one staging buffer (every packed one) is read
        // whole whatever this worker's budget: a packed body does not start at a block boundary.
        let whole = exact && rec_len <= self.whole.max(STAGE as u64);
        // A whole read is copied into RAM here; a larger record as its verified chunks stream
        // (`body::RamFill`). `admit` (which also bounds the record's size) counts the lookup in
        // the tier's frequency sketch, so it runs once per disk hit.
        let to_ram = exact && store.ram().admit(&r.primary, loc.id(), rec_len);
        let mut want = if whole { rec_len } else { self.chunk };
        let direct = rec_len >= store.config().direct_io_threshold;
        let file = FileId {
            seg: loc.seg,
            direct,
        };
        let mut overlapped = 0;
        let mut reread = false;
        let (buf, hdr) = loop {
            let buf = self.budget.alloc_first(want as usize).await;
            let buf = read_timed(&self.io, store, file, buf, want, loc.off, None).await?;
            if !store.epoch_is(loc.seg, loc.epoch) {
                return Err(StoreError::MissingOrReplaced);
            }
            let bytes = &buf.as_slice()[..want as usize];
            if let Ok((hl, used)) = record::peek(bytes)
                && used as u64 > want
            {
                // A header longer than the first read: read it whole.
                want = crate::io::align_up(hl);
                continue;
            }
            if let Ok(h) = record::decode(bytes, store.nonce()) {
                break (buf, h);
            }
            drop(buf);
            let Some(now) = store.rewrite_gen(&r.primary, loc) else {
                return Err(StoreError::MissingOrReplaced);
            };
            if now != generation || generation.in_progress() {
                // An in-place rewrite may have overlapped the read: the header may be half
                // written.
                overlapped += 1;
                if overlapped >= REWRITE_RETRIES {
                    return Err(StoreError::MissingOrReplaced);
                }
                generation = store
                    .rewrite_settled(&r.primary, loc)
                    .await
                    .ok_or(StoreError::MissingOrReplaced)?;
            } else if !reread {
                // No rewrite the store knows of; a dropped one's write may still be landing.
                reread = true;
            } else {
                store.drop_corrupt(&r.primary, &index_loc(r));
                return Err(StoreError::Corrupt("record header checksum"));
            }
        };
        let hl = u64::from(hdr.header_len);
        let real_len = record::record_len(hl, hdr.body_len);
        let len_ok = if exact {
            real_len == rec_len
        } else {
            real_len >= rec_len
        };
        if hdr.is_dead() && hdr.epoch == loc.epoch {
            store.forget_dead(&r.primary, loc);
        }
        if hdr.is_dead() || hdr.primary != r.primary || hdr.epoch != loc.epoch || !len_ok {
            return Err(StoreError::MissingOrReplaced);
        }
        let body_len = hdr.body_len;
        let object_ref = complete(
            r,
            hdr.variant.clone(),
            hdr.meta.clone(),
            hdr.header_len,
            body_len,
            hdr.seq,
        );
        let full = object_ref.loc.clone();
        let data = Bytes::from_owner(buf);
        let trusted = store.trusts_body(r);
        if whole {
            let body = data.slice(hl as usize..(hl + body_len) as usize);
            if !trusted {
                if !verify_blocks(&hdr.crcs, 0, &body) {
                    store.drop_corrupt(&r.primary, &full);
                    return Err(StoreError::Corrupt("body checksum"));
                }
                store.mark_verified(&r.primary, &full);
            }
            let in_ram = to_ram
                && !generation.in_progress()
                && store.insert_ram_copy(
                    &r.primary,
                    loc,
                    generation,
                    RamCopy {
                        primary: r.primary.clone(),
                        variant: hdr.variant,
                        meta: hdr.meta.clone(),
                        header_len: hdr.header_len,
                        seq: hdr.seq,
                        body: Bytes::copy_from_slice(&body),
                        parsed: None,
                    },
                );
            return Ok(StoredObject {
                meta: hdr.meta,
                body_len,
                source: Source::Disk,
                object_ref,
                parsed: None,
                in_ram,
                inner: Inner::Whole(body),
            });
        }
        // The body bytes of the first read, in whole checksum blocks (or to the body's end).
        let avail = (data.len() as u64).saturating_sub(hl).min(body_len);
        let keep = if avail < body_len {
            avail / BLOCK * BLOCK
        } else {
            avail
        };
        let first_body = data.slice(hl as usize..(hl + keep) as usize);
        let ram_fill = (to_ram && !generation.in_progress()).then(|| {
            RamFill::new(
                store,
                RamCopy {
                    primary: r.primary.clone(),
                    variant: hdr.variant.clone(),
                    meta: hdr.meta.clone(),
                    header_len: hdr.header_len,
                    seq: hdr.seq,
                    body: Bytes::new(),
                    parsed: None,
                },
                body_len,
                generation,
            )
        });
        Ok(StoredObject {
            meta: hdr.meta,
            body_len,
            source: Source::Disk,
            object_ref,
            parsed: None,
            in_ram: false,
            inner: Inner::Disk(Box::new(DiskBody {
                io: Rc::clone(&self.io),
                budget: self.budget.clone(),
                chunk: self.chunk,
                store: Arc::clone(store),
                primary: r.primary.clone(),
                loc: full,
                crcs: hdr.crcs,
                trusted,
                verified_to: 0,
                direct,
                first: Some(first_body),
                ahead: None,
                ram_fill,
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

    /// The record whose header is at `off` of `seg` at `epoch`, read whole and checked (its
    /// header, its epoch, its block checksums), when it is live and fits one read chunk; `None`
    /// otherwise. For reinsertion (`src/reinsert.rs`).
    pub(crate) async fn read_record_at(
        &self,
        seg: u32,
        epoch: u64,
        off: u64,
    ) -> Result<Option<ReadRecord>, StoreError> {
        let store = &self.store;
        let file = FileId { seg, direct: true };
        let mut want = (64 << 10).min(self.chunk);
        loop {
            let buf = self.budget.alloc(want as usize).await;
            let buf = read_timed(&self.io, store, file, buf, want, off, None).await?;
            if !store.epoch_is(seg, epoch) {
                return Ok(None);
            }
            let Ok(h) = record::decode(buf.as_slice(), store.nonce()) else {
                return Ok(None);
            };
            let hl = u64::from(h.header_len);
            let len = record::record_len(hl, h.body_len);
            if h.is_dead() || h.epoch != epoch || len > self.chunk {
                return Ok(None);
            }
            if len > want {
                want = len;
                continue;
            }
            let body = &buf.as_slice()[hl as usize..(hl + h.body_len) as usize];
            if !verify_blocks(&h.crcs, 0, body) {
                return Ok(None);
            }
            let body = Bytes::copy_from_slice(body);
            let loc = Loc {
                seg,
                epoch,
                off,
                header_len: h.header_len,
                body_len: h.body_len,
                seq: h.seq,
            };
            return Ok(Some(ReadRecord {
                header: h,
                body,
                loc,
            }));
        }
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
        self.writer(primary, variant, meta, content_length)
    }

    /// A writer without admission: for [`StoreWorker::begin_write`] once admitted, and for a
    /// reinsertion's copy (the object is stored already).
    pub(crate) fn writer(
        &self,
        primary: Bytes,
        variant: Bytes,
        meta: Bytes,
        content_length: Option<u64>,
    ) -> Result<ObjectWriter, StoreError> {
        ObjectWriter::begin(
            Arc::clone(&self.store),
            Rc::clone(&self.combiner),
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
    /// The record is marked as being rewritten while the header is written, so that readers
    /// on any worker ([`StoreWorker::open`]) take a half-written header for what it is, and a
    /// second rewrite of the same record waits for this one (see `src/rewrite.rs`).
    pub async fn update_meta(&self, r: &ObjectRef, meta: Bytes) -> Result<(), StoreError> {
        let store = &self.store;
        let loc = &r.loc;
        loop {
            match store.begin_rewrite(&r.primary, loc) {
                Begin::Started => break,
                Begin::Gone => return Err(StoreError::MissingOrReplaced),
                Begin::Busy => {
                    store
                        .rewrite_settled(&r.primary, loc)
                        .await
                        .ok_or(StoreError::MissingOrReplaced)?;
                }
            }
        }
        let _guard = RewriteGuard { store, loc };
        self.rewrite_header(r, meta).await
    }

    async fn rewrite_header(&self, r: &ObjectRef, meta: Bytes) -> Result<(), StoreError> {
        let store = &self.store;
        let loc = &r.loc;
        let file = FileId {
            seg: loc.seg,
            direct: true,
        };
        // The whole header: its length from the ref when complete, else from its first block.
        // A packed header's last block holds the body's first bytes too: read and write whole
        // blocks.
        let mut want = if r.complete {
            crate::io::align_up(u64::from(loc.header_len))
        } else {
            4096
        };
        let buf = loop {
            let buf = self.budget.alloc(want as usize).await;
            let buf = read_timed(&self.io, store, file, buf, want, loc.off, None).await?;
            match record::peek(buf.as_slice()) {
                Ok((hl, _)) if hl > want => want = crate::io::align_up(hl),
                _ => break buf,
            }
        };
        let h = record::decode(buf.as_slice(), store.nonce())
            .map_err(|_| StoreError::Corrupt("record header checksum"))?;
        let hl = u64::from(h.header_len);
        let same = !h.is_dead()
            && h.primary == r.primary
            && h.epoch == loc.epoch
            && hl <= want
            && (!r.complete || (h.variant == r.variant && h.seq == loc.seq));
        if !same {
            return Err(StoreError::MissingOrReplaced);
        }
        if meta.len() > h.meta_cap as usize {
            return Err(StoreError::MetaTooLarge {
                need: meta.len(),
                have: h.meta_cap as usize,
            });
        }
        let new = RecordHeader { meta, ..h };
        let blocks = crate::io::align_up(hl) as usize;
        let mut out = self.budget.alloc(blocks).await;
        out.extend_from(&buf.as_slice()[..blocks]);
        #[cfg(test)]
        let old = buf.as_slice().to_vec();
        drop(buf);
        new.encode(&mut out.full_mut()[..hl as usize]);
        record::seal(&mut out.full_mut()[..blocks], hl);
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
            .disk_write(super::metrics::WriteKind::MetaRewrite, blocks as u64);
        Ok(())
    }
}

/// `r` completed with its header's fields.
fn complete(
    r: &ObjectRef,
    variant: Bytes,
    meta: Bytes,
    header_len: u32,
    body_len: u64,
    seq: u64,
) -> ObjectRef {
    ObjectRef {
        variant,
        meta,
        loc: Loc {
            header_len,
            body_len,
            seq,
            ..r.loc.clone()
        },
        complete: true,
        ..r.clone()
    }
}

/// `r`'s location with the lengths the index knows (a 4 KiB header, the rest as body): enough
/// to tombstone it when its header cannot be read.
fn index_loc(r: &ObjectRef) -> Loc {
    Loc {
        header_len: 4096,
        body_len: r.record_len.saturating_sub(4096),
        seq: 0,
        ..r.loc.clone()
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
            let file = FileId {
                seg: loc.seg,
                direct: true,
            };
            // A packed record's body does not start at a block boundary: read from the block
            // that holds `pos`.
            let at = loc.off + u64::from(loc.header_len) + self.pos;
            let lead = at % 4096;
            let read_len = crate::io::align_up(lead + len);
            let buf = self.budget.alloc(self.chunk.max(read_len) as usize).await;
            let buf =
                read_timed(&self.io, &self.store, file, buf, read_len, at - lead, None).await?;
            if !self.store.epoch_is(loc.seg, loc.epoch) {
                return Err(Error::other(StoreError::MissingOrReplaced));
            }
            let data = Bytes::from_owner(buf).slice(lead as usize..);
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
                let fresh = store.lookup(&key).remove(0);
                assert!(reader.open(&fresh).await.unwrap().meta == meta(b'n'));
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
