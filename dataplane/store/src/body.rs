//! An opened object and its body stream, verified block by block as it is read.
//!
//! Large bodies are read in chunks of [`CHUNK`] (256 KiB; O_DIRECT at or above the threshold),
//! one chunk ahead when the worker's buffer budget and the store's read slots have room: the
//! read of chunk k+1 is started (as a task of the worker's `LocalSet`) before chunk k is handed
//! to the caller, so the disk works while the client receives. Every read holds one of the
//! store's read slots (`StoreConfig::reads_in_flight`) until it completes. Every chunk buffer
//! comes from the worker's [`IoBudget`] and is charged to it until the caller drops the last
//! `Bytes` of it (see [`crate::io::budget`]). The segment's epoch is checked after every read,
//! before any byte is yielded, and every chunk is checked against its 64 KiB block checksums
//! until the record's whole body has passed them once in this run (see "Checksums" in
//! the crate doc).

use std::future::Future;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::OwnedSemaphorePermit;

use super::ram::Copy as RamCopy;
use super::record::BLOCK;
use super::rewrite::Generation;
use super::state::Loc;
use crate::io::{AlignedBuf, FileId, IoBudget, IoEngine, WorkerIo, align_up};
use crate::store::Store;

/// Body read granularity (a multiple of the 64 KiB checksum block). 256 KiB reads reach the
/// disk's bandwidth at a moderate queue depth (fio: 128 KiB random reads give more MB/s than
/// 1 MiB ones on the test disk), and a 256 KiB chunk stays in L2 between its checksum pass and
/// the copy to the socket.
pub(crate) const CHUNK: u64 = 256 << 10;

/// The largest record read whole, header and body in one read: 17 checksum blocks, the record
/// of a 1 MiB object. In 256 KiB chunks a 1 MiB hit took five reads; in one it takes a quarter
/// less CPU (463 to 351 µs a hit, Traffic Server 536 in the same rounds: bench/BENCHMARKS.md,
/// "1 MiB hits in one read"). Larger records still stream in [`CHUNK`]s, so a stream of a large
/// object holds what it did, and the stream slots and the hardening built on them stand.
pub(crate) const WHOLE_MAX: u64 = (1 << 20) + (64 << 10);

/// The chunk size for a budget: [`CHUNK`], smaller for budgets under 2 MiB, so that several
/// streams always fit.
pub(crate) fn chunk_for(budget: &IoBudget) -> u64 {
    eighth_of(budget, CHUNK)
}

/// The largest record read whole for a budget: [`WHOLE_MAX`], smaller for budgets under
/// 8.5 MiB (never less than its chunk).
pub(crate) fn whole_for(budget: &IoBudget) -> u64 {
    eighth_of(budget, WHOLE_MAX)
}

/// An eighth of the budget in whole 64 KiB blocks, between one block and `max`.
fn eighth_of(budget: &IoBudget, max: u64) -> u64 {
    (budget.capacity() / 8 / BLOCK * BLOCK).clamp(BLOCK, max)
}

/// Where an opened object's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Ram,
    Disk,
}

/// An opened object: meta from its header, body ready to stream.
pub struct StoredObject {
    pub meta: Bytes,
    pub body_len: u64,
    pub source: Source,
    /// The complete ref (variant key, meta and lengths from the header): for
    /// `StoreWorker::update_meta`, revalidation and fills without another read.
    pub object_ref: crate::object::ObjectRef,
    /// From the RAM tier: the caller's parsed form of `meta`, when one was kept with the copy
    /// ([`super::StoreWorker::keep_parsed`]).
    pub parsed: Option<super::ram::Parsed>,
    /// Its RAM copy holds `meta` (a RAM hit, or a disk hit that copied the record in).
    pub(crate) in_ram: bool,
    pub(crate) inner: Inner,
}

impl std::fmt::Debug for StoredObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredObject")
            .field("body_len", &self.body_len)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

pub(crate) enum Inner {
    /// The whole body, already verified.
    Whole(Bytes),
    /// A large body streamed from disk.
    Disk(Box<DiskBody>),
}

pub(crate) struct DiskBody {
    pub io: Rc<WorkerIo>,
    pub budget: IoBudget,
    /// Read size (see [`chunk_for`]).
    pub chunk: u64,
    pub store: Arc<Store>,
    pub primary: Bytes,
    pub loc: Loc,
    pub crcs: Vec<u32>,
    /// The whole body passed its checksums earlier in this run: skip them (see
    /// `Store::trusts_body`).
    pub trusted: bool,
    /// Body bytes `[0, verified_to)` passed their checksums in this stream; at `body_len` the
    /// record is marked verified.
    pub verified_to: u64,
    pub direct: bool,
    /// Body bytes `[0, first.len())` from the first read (whole blocks, not yet verified).
    pub first: Option<Bytes>,
    /// The read of the next chunk, submitted before the current one is handed out.
    pub ahead: Option<(u64, Ahead)>,
    /// The RAM tier admitted the record: its copy, made as the verified chunks pass.
    pub ram_fill: Option<RamFill>,
}

/// The RAM copy of a large record, made from a disk hit's verified chunks as they stream (see
/// "Eligible" in `src/ram.rs`). Made only for a stream of the whole body: its bytes are held in
/// the tier ([`RamTier::reserve`](super::ram::RamTier::reserve)) when such a stream starts, never
/// for a range, and given back when it is dropped, whether it was inserted or not. Inserted only
/// when the whole body passed, in order, and the record was neither replaced nor rewritten
/// meanwhile.
pub(crate) struct RamFill {
    store: Arc<Store>,
    copy: RamCopy,
    body: BytesMut,
    body_len: u64,
    generation: Generation,
    reserved: bool,
}

impl RamFill {
    /// A copy to make of a `body_len`-byte body: nothing is held until [`RamFill::reserve`].
    pub(crate) fn new(
        store: &Arc<Store>,
        copy: RamCopy,
        body_len: u64,
        generation: Generation,
    ) -> RamFill {
        RamFill {
            store: Arc::clone(store),
            copy,
            body: BytesMut::new(),
            body_len,
            generation,
            reserved: false,
        }
    }

    /// Hold the copy's bytes in the tier, and its buffer; `false` when copies in progress
    /// already hold their share of the tier.
    fn reserve(&mut self) -> bool {
        let Ok(len) = usize::try_from(self.body_len) else {
            return false;
        };
        if !self.store.ram().reserve(self.body_len) {
            return false;
        }
        self.reserved = true;
        self.body = BytesMut::with_capacity(len);
        true
    }

    /// Add verified body bytes `data` that start at body offset `base`; `false` when they do
    /// not continue the copy (a range, or a stream that skipped), which ends it.
    fn extend(&mut self, base: u64, data: &[u8]) -> bool {
        if base != self.body.len() as u64 {
            return false;
        }
        self.body.extend_from_slice(data);
        true
    }

    fn complete(&self) -> bool {
        self.body.len() as u64 == self.body_len
    }

    /// Insert the finished copy of the record at `loc`.
    fn insert(mut self, primary: &[u8], loc: &Loc) {
        let store = Arc::clone(&self.store);
        let generation = self.generation;
        let mut copy = self.copy.clone();
        copy.body = std::mem::take(&mut self.body).freeze();
        // Its reservation goes back first, so the insert evicts only what the copy needs.
        drop(self);
        store.insert_ram_copy(primary, loc, generation, copy);
    }
}

impl Drop for RamFill {
    fn drop(&mut self) {
        if self.reserved {
            self.store.ram().release(self.body_len);
        }
    }
}

type ReadFuture = Pin<Box<dyn Future<Output = io::Result<AlignedBuf>>>>;

/// A read started ahead of need (depth 1), so the disk works while the client receives. It runs
/// as its own task on the worker's `LocalSet`, so it completes, gives its read slot back and is
/// timed when the disk answers, not when the client gets round to the next chunk.
pub(crate) type Ahead = tokio::task::JoinHandle<io::Result<AlignedBuf>>;

impl DiskBody {
    fn chunk_len(&self, pos: u64) -> u64 {
        self.chunk.min(align_up(self.loc.body_len) - pos)
    }

    /// The read of the chunk at `pos`; `slot` as for [`read_timed`].
    fn chunk_read(
        &self,
        pos: u64,
        buf: AlignedBuf,
        slot: Option<OwnedSemaphorePermit>,
    ) -> ReadFuture {
        let len = self.chunk_len(pos);
        let off = self.loc.off + u64::from(self.loc.header_len) + pos;
        let file = FileId {
            seg: self.loc.seg,
            direct: self.direct,
        };
        let io = Rc::clone(&self.io);
        let store = Arc::clone(&self.store);
        Box::pin(async move { read_timed(&io, &store, file, buf, len, off, slot).await })
    }

    /// Start reading the chunk at `pos` if a read slot and the budget's spare room are free
    /// now (never waits).
    fn prefetch(&mut self, pos: u64) {
        let Some(slot) = self.store.try_read_slot() else {
            return;
        };
        let Some(buf) = self.budget.try_alloc_spare(self.chunk as usize) else {
            return;
        };
        let read = self.chunk_read(pos, buf, Some(slot));
        self.ahead = Some((pos, tokio::task::spawn_local(read)));
    }

    async fn take_chunk(&mut self, pos: u64) -> io::Result<AlignedBuf> {
        match self.ahead.take() {
            Some((p, read)) if p == pos => read.await.map_err(io::Error::other)?,
            _ => {
                // Always a whole chunk's buffer, even for a short tail: one size class, so
                // every returned chunk buffer can be reused as is.
                let buf = self.budget.alloc(self.chunk as usize).await;
                self.chunk_read(pos, buf, None).await
            }
        }
    }
}

/// One read of `len` bytes into `buf` (from the worker's budget) through a worker's engine,
/// holding one of the store's read slots (`slot`, taken by a read-ahead; else it waits for one),
/// counted and timed (from the slot to the completion).
pub(crate) async fn read_timed(
    io: &WorkerIo,
    store: &Store,
    file: FileId,
    buf: AlignedBuf,
    len: u64,
    off: u64,
    slot: Option<OwnedSemaphorePermit>,
) -> io::Result<AlignedBuf> {
    let _slot = match slot {
        Some(s) => Some(s),
        None => store.read_slot().await,
    };
    let t = Instant::now();
    let (res, buf) = io.read_at(file, buf, off, len as usize).await;
    let n = res?;
    store.counters().disk_read(n, t.elapsed());
    if (n as u64) < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short read: {n} of {len} bytes"),
        ));
    }
    Ok(buf)
}

/// Verify the checksums of body bytes `data`, which start at body offset `base` (block aligned).
pub(crate) fn verify_blocks(crcs: &[u32], base: u64, data: &[u8]) -> bool {
    let first = (base / BLOCK) as usize;
    data.chunks(BLOCK as usize)
        .enumerate()
        .all(|(i, b)| crcs.get(first + i) == Some(&crc32c::crc32c(b)))
}

struct StreamState {
    inner: Inner,
    pos: u64,
    start: u64,
    end: u64,
    done: bool,
}

impl StoredObject {
    /// The body bytes of `range` (clamped as [`StoredObject::body`] clamps it) when all of
    /// them are in memory and verified already: a copy in the RAM tier, or a small record read
    /// whole. Nothing can fail after the response's head then, and there is no stream to poll.
    /// `None` for a body that streams from disk.
    pub fn in_memory(&self, range: Option<Range<u64>>) -> Option<Bytes> {
        let Inner::Whole(b) = &self.inner else {
            return None;
        };
        let r = range.unwrap_or(0..self.body_len);
        let end = r.end.min(self.body_len);
        let start = r.start.min(end);
        Some(b.slice(start as usize..end as usize))
    }

    /// The body (or `range` of it, clamped to the body) as a stream of verified chunks. A
    /// checksum mismatch ends the stream with an `InvalidData` error (and drops the object);
    /// an eviction racing with the read ends it with an error too. Never yields unverified bytes.
    pub fn body(
        self,
        range: Option<Range<u64>>,
    ) -> impl Stream<Item = io::Result<Bytes>> + 'static {
        let r = range.unwrap_or(0..self.body_len);
        let end = r.end.min(self.body_len);
        let start = r.start.min(end);
        let mut inner = self.inner;
        if let Inner::Disk(d) = &mut inner {
            // Copied into RAM only from a stream of the whole body.
            let whole = start == 0 && end == self.body_len;
            if d.ram_fill.as_mut().is_some_and(|f| !(whole && f.reserve())) {
                d.ram_fill = None;
            }
        }
        let st = StreamState {
            inner,
            pos: start / BLOCK * BLOCK,
            start,
            end,
            done: start >= end,
        };
        futures_util::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            match step(&mut st).await {
                Ok(Some(b)) => Some((Ok(b), st)),
                Ok(None) => None,
                Err(e) => {
                    st.done = true;
                    Some((Err(e), st))
                }
            }
        })
    }
}

async fn step(st: &mut StreamState) -> io::Result<Option<Bytes>> {
    let d = match &mut st.inner {
        Inner::Whole(b) => {
            st.done = true;
            return Ok(Some(b.slice(st.start as usize..st.end as usize)));
        }
        Inner::Disk(d) => d,
    };
    loop {
        if st.pos >= st.end {
            st.done = true;
            return Ok(None);
        }
        let body_len = d.loc.body_len;
        let (base, data) = match d.first.take() {
            Some(f) if st.pos < f.len() as u64 => (0, f),
            _ => (st.pos, Bytes::from_owner(d.take_chunk(st.pos).await?)),
        };
        if !d.store.epoch_is(d.loc.seg, d.loc.epoch) {
            return Err(io::Error::other(
                crate::error::StoreError::MissingOrReplaced,
            ));
        }
        let valid = (data.len() as u64).min(body_len - base);
        // Submit the next read first, so the disk works while this chunk is checked.
        if base + valid < st.end {
            d.prefetch(base + valid);
        }
        if !d.trusted {
            if !verify_blocks(&d.crcs, base, &data[..valid as usize]) {
                d.ahead = None;
                d.store.drop_corrupt(&d.primary, &d.loc);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "stored body failed its checksum",
                ));
            }
            if base == d.verified_to {
                d.verified_to = base + valid;
                if d.verified_to == body_len {
                    d.store.mark_verified(&d.primary, &d.loc);
                }
            }
        }
        if let Some(fill) = d.ram_fill.as_mut() {
            if !fill.extend(base, &data[..valid as usize]) {
                d.ram_fill = None;
            } else if fill.complete()
                && let Some(fill) = d.ram_fill.take()
            {
                fill.insert(&d.primary, &d.loc);
            }
        }
        st.pos = base + valid;
        let from = st.start.max(base);
        let to = st.end.min(base + valid);
        if from < to {
            return Ok(Some(
                data.slice((from - base) as usize..(to - base) as usize),
            ));
        }
    }
}
