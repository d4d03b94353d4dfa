//! Streaming a response into the store.
//!
//! Known length: the record is reserved at `begin`, body chunks are staged in a 256 KiB aligned
//! buffer (from the worker's [`IoBudget`], smaller for budgets under 2 MiB) and written with
//! O_DIRECT each time it fills, the header goes last at `finish`; a body that never filled the
//! buffer goes out with its header in one write there. A full stage is written by a task of
//! its own, after the one before it (in order, so readers of the growing body advance as each
//! lands), and the writer does not wait while fewer than [`PIECES_IN_FLIGHT`] are: the next
//! chunks go to a new buffer, so an object of up to a megabyte arrives at the origin's pace, not
//! the disk's, and a larger one at the disk's with that much written ahead (a fill holds at most
//! that many buffers of the worker's I/O budget, which its hits share).
//! `finish` waits for the last of them before the header's write, and a failed one fails the
//! writer; a writer dropped aborts those not yet written.
//! Unknown length: chunks are kept in RAM up to [`UNKNOWN_LENGTH_CAP`](super::UNKNOWN_LENGTH_CAP)
//! (and within the bound of [`Store::unknown_length_bodies`], counted as they arrive) and
//! written at `finish`. Checksums are computed as chunks arrive.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use edgecache_host::Charge;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};

use super::combine::{Combiner, written};
use super::growing::Growing;
use super::metrics::{Counters, WriteKind};
use super::record::{self, BLOCK, FIXED, MAX_KEY, MAX_META, RecordHeader};
use super::state::Loc;
use crate::config::UNKNOWN_LENGTH_CAP;
use crate::error::StoreError;
use crate::io::{AlignedBuf, FileId, IoBudget, WorkerIo, align_up, write_all_at};
use crate::state::Reservation;
use crate::store::Store;

/// Size of the staging buffer: one O_DIRECT write per 256 KiB of body.
pub(crate) const STAGE: usize = 256 * 1024;

/// A writer's pieces whose writes may be in flight at once (see the module doc).
pub(crate) const PIECES_IN_FLIGHT: usize = 4;

/// A writer's pieces in flight, and a wake-up as each ends.
#[derive(Default)]
struct Pieces {
    in_flight: Cell<usize>,
    ended: Notify,
}

/// One piece in flight, until dropped (its task ended or was aborted).
struct Piece(Rc<Pieces>);

impl Drop for Piece {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
        self.0.ended.notify_one();
    }
}

/// One piece's write, and what its landing tells the store and the body's readers.
struct PieceWrite {
    combiner: Rc<Combiner>,
    store: Arc<Store>,
    kind: WriteKind,
    file: FileId,
    off: u64,
    buf: AlignedBuf,
    /// Its length on disk (padded to a block).
    padded: u64,
    growing: Option<Arc<Growing>>,
    /// Body bytes readable once it landed, and the checksums of its blocks from `first_block`.
    readable: u64,
    first_block: usize,
    crcs: Vec<u32>,
}

impl PieceWrite {
    /// Wait for the piece `before` it, then write it; `_piece` counts it in flight until then.
    async fn run(
        self,
        before: Option<JoinHandle<io::Result<()>>>,
        _piece: Piece,
    ) -> io::Result<()> {
        if let Some(before) = before {
            before
                .await
                .unwrap_or_else(|_| Err(io::Error::other("an earlier write was aborted")))?;
        }
        let result = self
            .combiner
            .start_write(self.file, self.buf, self.off)
            .await;
        if let Err(e) = written(result.ok()) {
            Counters::inc(&self.store.counters().write_errors);
            tracing::debug!(error = %e, "store write failed");
            return Err(e);
        }
        self.store.counters().disk_write(self.kind, self.padded);
        if let Some(g) = self.growing {
            g.advance_from(self.readable, self.first_block, &self.crcs);
        }
        Ok(())
    }
}

enum Mode {
    Known(u64),
    /// The chunks so far, and their bytes taken from the store's unknown-length share.
    Buffered(Vec<Bytes>, Charge),
}

/// An in-progress store of one response. Dropping it without [`finish`](Self::finish) aborts:
/// nothing is published (a tombstone keeps the reserved space skippable for recovery).
pub struct ObjectWriter {
    store: Arc<Store>,
    /// The worker's engine, with its queue for the record's own writes (`src/combine.rs`).
    combiner: Rc<Combiner>,
    budget: IoBudget,
    primary: Bytes,
    variant: Bytes,
    meta: Bytes,
    mode: Mode,
    limit: u64,
    len: u64,
    crcs: Vec<u32>,
    block_crc: u32,
    block_fill: u64,
    res: Option<Reservation>,
    header_len: u64,
    /// Body bytes handed to stage writes, from the start.
    issued: u64,
    /// The task writing the latest full stage (it waits for the one before it).
    last_stage: Option<JoinHandle<io::Result<()>>>,
    /// The stage writes that may not have ended, to abort if the writer is dropped.
    stage_tasks: Vec<AbortHandle>,
    pieces: Rc<Pieces>,
    stage: Option<AlignedBuf>,
    /// The stage starts with the header's bytes (written at `finish`), the body after them:
    /// a record that fits the stage whole is staged in place, so `finish` encodes its header
    /// in front of the body instead of moving the body to make room.
    head_room: bool,
    failed: bool,
    /// Publish only if the key's invalidation mark still has this value.
    mark: Option<u64>,
    /// Shared with readers that stream the body while it is written.
    growing: Option<Arc<Growing>>,
    /// A reinsertion's copy (`src/reinsert.rs`): publish only in place of this record, while
    /// the index still has it.
    replacing: Option<Loc>,
}

impl std::fmt::Debug for ObjectWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectWriter")
            .field("len", &self.len)
            .field("reserved", &self.res.is_some())
            .finish_non_exhaustive()
    }
}

impl ObjectWriter {
    pub(crate) fn begin(
        store: Arc<Store>,
        combiner: Rc<Combiner>,
        budget: IoBudget,
        primary: Bytes,
        variant: Bytes,
        meta: Bytes,
        content_length: Option<u64>,
    ) -> Result<ObjectWriter, StoreError> {
        if primary.len() > MAX_KEY || variant.len() > MAX_KEY {
            return Err(StoreError::NotStorable("key too long"));
        }
        if meta.len() > MAX_META {
            return Err(StoreError::NotStorable("meta too large"));
        }
        let max = store.config().max_object_size;
        let (mode, limit) = match content_length {
            Some(cl) if cl > max => {
                return Err(StoreError::TooLarge {
                    size: cl,
                    limit: max,
                });
            }
            Some(cl) => (Mode::Known(cl), cl),
            None => (
                Mode::Buffered(
                    Vec::new(),
                    Charge::new(store.unknown_length_bodies().clone()),
                ),
                max.min(UNKNOWN_LENGTH_CAP),
            ),
        };
        store.writing().begin(&primary);
        let mut w = ObjectWriter {
            store,
            combiner,
            budget,
            primary,
            variant,
            meta,
            mode,
            limit,
            len: 0,
            crcs: Vec::new(),
            block_crc: 0,
            block_fill: 0,
            res: None,
            header_len: 0,
            issued: 0,
            last_stage: None,
            stage_tasks: Vec::new(),
            pieces: Rc::default(),
            stage: None,
            head_room: false,
            failed: false,
            mark: None,
            growing: None,
            replacing: None,
        };
        if let Some(cl) = content_length {
            w.reserve(cl)?;
        }
        Ok(w)
    }

    fn io(&self) -> &WorkerIo {
        self.combiner.io()
    }

    /// The staging buffer's size: the body is written in pieces of it.
    fn stage_capacity(&self) -> u64 {
        (self.budget.capacity() / 8).clamp(BLOCK, STAGE as u64)
    }

    /// The staging buffer to take: the whole record when it fits the staging size (so a small
    /// object charges the I/O budget its own few blocks, not a 256 KiB buffer), else the
    /// staging size. Called once the header's length is known (a reservation was made).
    fn stage_size(&self) -> u64 {
        self.record_len().min(self.stage_capacity())
    }

    /// The record's length on disk (header, body and padding), once reserved.
    fn record_len(&self) -> u64 {
        let body = match self.mode {
            Mode::Known(cl) => cl,
            Mode::Buffered(..) => self.len,
        };
        record::record_len(self.header_len, body)
    }

    fn reserve(&mut self, body_len: u64) -> Result<(), StoreError> {
        let (p, v, m) = (self.primary.len(), self.variant.len(), self.meta.len());
        // A record that fits the staging buffer whole is packed: its body shares the header's
        // last block (see `record::packed_header_len`); it is written from that one buffer.
        let packed = record::packed_header_len(p, v, body_len, m);
        let hl = if record::record_len(packed, body_len) <= self.stage_capacity() {
            packed
        } else {
            record::header_len_for(p, v, body_len, m)
        };
        if hl > record::MAX_HEADER_LEN {
            return Err(StoreError::NotStorable("record header too large"));
        }
        let res = self.store.reserve(record::record_len(hl, body_len))?;
        self.header_len = hl;
        self.res = Some(res);
        self.crcs.reserve(record::block_count(body_len) as usize);
        Ok(())
    }

    fn feed_crc(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let take = ((BLOCK - self.block_fill) as usize).min(data.len());
            self.block_crc = crc32c::crc32c_append(self.block_crc, &data[..take]);
            self.block_fill += take as u64;
            data = &data[take..];
            if self.block_fill == BLOCK {
                self.crcs.push(self.block_crc);
                self.block_crc = 0;
                self.block_fill = 0;
            }
        }
    }

    fn fail<T>(&mut self, e: StoreError) -> Result<T, StoreError> {
        self.failed = true;
        Err(e)
    }

    /// Add the next body chunk.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), StoreError> {
        if self.failed {
            return Err(StoreError::NotStorable("writer already failed"));
        }
        let total = self.len + chunk.len() as u64;
        if total > self.limit {
            return match self.mode {
                Mode::Known(cl) => self.fail(StoreError::LengthMismatch {
                    expected: cl,
                    got: total,
                }),
                Mode::Buffered(..) => self.fail(StoreError::TooLarge {
                    size: total,
                    limit: self.limit,
                }),
            };
        }
        if let Mode::Buffered(_, charge) = &mut self.mode
            && !charge.cover(total)
        {
            return self.fail(StoreError::MemoryBound);
        }
        self.len = total;
        self.feed_crc(&chunk);
        match &mut self.mode {
            Mode::Buffered(chunks, _) => {
                chunks.push(chunk);
                Ok(())
            }
            Mode::Known(_) => self.stage_bytes(&chunk).await,
        }
    }

    async fn stage_bytes(&mut self, mut data: &[u8]) -> Result<(), StoreError> {
        while !data.is_empty() {
            let stage = match &mut self.stage {
                Some(s) => s,
                None => {
                    let n = self.stage_size() as usize;
                    let mut buf = self.budget.alloc(n).await;
                    // The whole record fits: its header's bytes go first (see `head_room`).
                    if self.issued == 0 && n as u64 == self.record_len() {
                        buf.set_len(self.header_len as usize);
                        self.head_room = true;
                    }
                    self.stage.insert(buf)
                }
            };
            let n = stage.extend_from(data);
            if n == 0 {
                // Only a body longer than its record could get here (`write` stops those).
                return self.fail(StoreError::NotStorable("body past its record"));
            }
            data = &data[n..];
            // A record staged whole is written at `finish`, even when it fills the stage.
            if stage.len() == stage.capacity() && !self.head_room {
                self.flush_stage().await?;
            }
        }
        Ok(())
    }

    /// Hand the stage to a task that writes it after the stage before (see the module doc);
    /// the next chunks go to a new stage.
    async fn flush_stage(&mut self) -> Result<(), StoreError> {
        let (Some(mut buf), Some(res)) = (self.stage.take(), self.res) else {
            return Ok(());
        };
        if std::mem::take(&mut self.head_room) {
            // Written apart from its header after all (`finish`): the body to the front.
            let (hl, end) = (self.header_len as usize, buf.len());
            buf.full_mut().copy_within(hl..end, 0);
            buf.set_len(end - hl);
        }
        if buf.is_empty() {
            self.stage = Some(buf);
            return Ok(());
        }
        let file = FileId {
            seg: res.seg,
            direct: true,
        };
        let off = res.off + self.header_len + self.issued;
        let first_block = (self.issued / BLOCK) as usize;
        self.issued += buf.len() as u64;
        buf.pad_to_alignment();
        let padded = buf.len() as u64;
        // The body's last block becomes readable only at the publish (see `growing`).
        let readable = self.issued.min(self.len.saturating_sub(1));
        let to_block = ((self.issued / BLOCK) as usize).min(self.crcs.len());
        let crcs = self.crcs[first_block.min(to_block)..to_block].to_vec();
        while self.pieces.in_flight.get() >= PIECES_IN_FLIGHT {
            self.pieces.ended.notified().await;
        }
        self.pieces.in_flight.set(self.pieces.in_flight.get() + 1);
        let piece = Piece(Rc::clone(&self.pieces));
        let write = PieceWrite {
            combiner: Rc::clone(&self.combiner),
            store: self.store.clone(),
            kind: self.kind(),
            file,
            off,
            buf,
            padded,
            growing: self.growing.clone(),
            readable,
            first_block,
            crcs,
        };
        let task = tokio::task::spawn_local(write.run(self.last_stage.take(), piece));
        self.stage_tasks.retain(|t| !t.is_finished());
        self.stage_tasks.push(task.abort_handle());
        self.last_stage = Some(task);
        Ok(())
    }

    /// Wait for every stage write (the body is on disk before its header is written).
    async fn stages_written(&mut self) -> Result<(), StoreError> {
        let Some(last) = self.last_stage.take() else {
            return Ok(());
        };
        let result = last
            .await
            .unwrap_or_else(|_| Err(io::Error::other("a write was aborted")));
        self.stage_tasks.clear();
        match result {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e.into()),
        }
    }

    /// The body as it is written, for readers on any worker
    /// ([`StoreWorker::read_growing`](super::StoreWorker::read_growing)). `None` when the
    /// length is unknown (the body is buffered and written at the end).
    pub fn readable(&mut self) -> Option<Arc<Growing>> {
        let (Mode::Known(cl), Some(res)) = (&self.mode, self.res) else {
            return None;
        };
        let loc = Loc {
            seg: res.seg,
            epoch: res.epoch,
            off: res.off,
            header_len: self.header_len as u32,
            body_len: *cl,
            seq: 0,
        };
        Some(Arc::clone(
            self.growing
                .get_or_insert_with(|| Arc::new(Growing::new(loc))),
        ))
    }

    /// Write what is left and the header, then publish. Fails (and publishes nothing) when the
    /// body length differs from the announced Content-Length or a write fails.
    /// Publish at [`finish`](Self::finish) only if nothing invalidated the key since `mark`
    /// ([`Store::invalidation_mark`], taken before the origin request went out). The check
    /// and the publish are one step under the index lock.
    pub fn publish_only_if_unchanged(&mut self, mark: u64) {
        self.mark = Some(mark);
    }

    /// What this writer's record writes are counted as.
    fn kind(&self) -> WriteKind {
        if self.replacing.is_some() {
            WriteKind::Reinsert
        } else {
            WriteKind::Record
        }
    }

    /// Make this a reinsertion's copy of the record at `orig`: published only while the index
    /// still has `orig` (in its place), counted as reinserted, not admitted.
    pub(crate) fn copy_of(&mut self, orig: Loc) {
        self.replacing = Some(orig);
    }

    pub async fn finish(mut self) -> Result<(), StoreError> {
        if self.failed {
            return Err(StoreError::NotStorable("writer already failed"));
        }
        match &mut self.mode {
            Mode::Known(cl) => {
                if self.len != *cl {
                    let e = StoreError::LengthMismatch {
                        expected: *cl,
                        got: self.len,
                    };
                    return self.fail(e);
                }
            }
            Mode::Buffered(chunks, _) => {
                // The charge goes with the writer: the chunks are held until they are written.
                let chunks = std::mem::take(chunks);
                self.reserve(self.len)?;
                for c in chunks {
                    self.stage_bytes(&c).await?;
                }
            }
        }
        if self.block_fill > 0 {
            self.crcs.push(self.block_crc);
            self.block_fill = 0;
        }
        let Some(res) = self.res else {
            return Err(StoreError::NoSpace);
        };
        // A body still whole in the staging buffer (nothing flushed), with room there for the
        // header in front of it, is written from that buffer with its header: a packed record
        // (`reserve`) always is. For a key the index holds nothing of, in one write: one I/O
        // per small object instead of two. That write torn by a power loss can leave a valid
        // header before a torn body, which then wins the recovery scan and fails its checksums
        // at the first read; a new key is lost then (a miss), where an older version would be
        // lost too. So a key the index holds something of gets its header last: the body (for
        // a packed record, the blocks after the header's) first, then the header's blocks,
        // and a torn replacement never hides the older version. A body not whole in the
        // buffer is flushed, and the buffer given back before waiting for the header's write.
        let hl = self.header_len as usize;
        let packed = record::is_packed(self.header_len);
        let room = if self.head_room { self.header_len } else { 0 };
        let fits = self.stage.as_ref().is_some_and(|s| {
            self.issued == 0
                && s.len() as u64 == room + self.len
                && record::record_len(self.header_len, self.len) as usize <= s.capacity()
        });
        let new_key = self.store.found(&self.primary).is_empty();
        let whole = fits && (packed || new_key);
        let combined = if whole { self.stage.take() } else { None };
        if !whole {
            self.flush_stage().await?;
            self.stage = None;
            self.stages_written().await?;
        }
        let seq = self.store.next_seq();
        let crcs = std::mem::take(&mut self.crcs);
        let used_fixed = FIXED + self.primary.len() + self.variant.len() + 4 * crcs.len();
        let header = RecordHeader {
            flags: 0,
            header_len: self.header_len as u32,
            nonce: self.store.nonce(),
            epoch: res.epoch,
            seq,
            body_len: self.len,
            primary: self.primary.clone(),
            variant: self.variant.clone(),
            crcs,
            meta: self.meta.clone(),
            meta_cap: (self.header_len as usize - used_fixed) as u32,
        };
        let mut buf = match combined {
            Some(mut buf) => {
                if !std::mem::take(&mut self.head_room) {
                    let body = buf.len();
                    buf.full_mut().copy_within(..body, hl);
                    buf.set_len(hl + body);
                }
                header.encode(&mut buf.full_mut()[..hl]);
                buf.pad_to_alignment();
                buf
            }
            None => {
                // Only a packed record with an empty body gets here unpadded.
                let mut buf = self.budget.alloc(hl).await;
                header.encode(buf.full_mut());
                buf.set_len(hl);
                buf.pad_to_alignment();
                buf
            }
        };
        let head = align_up(self.header_len) as usize;
        record::seal(&mut buf.full_mut()[..head], self.header_len);
        let file = FileId {
            seg: res.seg,
            direct: true,
        };
        let mut written = 0;
        if whole && !new_key && buf.len() > head {
            let mut tail = self.budget.alloc(buf.len() - head).await;
            tail.extend_from(&buf.as_slice()[head..]);
            written += tail.len() as u64;
            let r = self
                .combiner
                .write_all_at(file, tail, res.off + head as u64)
                .await;
            if let Err(e) = r {
                Counters::inc(&self.store.counters().write_errors);
                return self.fail(e.into());
            }
            buf.set_len(head);
        }
        written += buf.len() as u64;
        let r = self.combiner.write_all_at(file, buf, res.off).await;
        if let Err(e) = r {
            Counters::inc(&self.store.counters().write_errors);
            return self.fail(e.into());
        }
        let c = self.store.counters();
        c.disk_write(self.kind(), written);
        if self.replacing.is_none() {
            c.admitted_body_bytes
                .fetch_add(self.len, std::sync::atomic::Ordering::Relaxed);
        }
        let loc = Loc {
            seg: res.seg,
            epoch: res.epoch,
            off: res.off,
            header_len: self.header_len as u32,
            body_len: self.len,
            seq,
        };
        // Which entries with our tags are this object (a header read each): before the
        // publish step, so that a writer dropped here still tombstones its record.
        let vtag = self.store.variant_tag(&self.variant);
        let checked = self
            .store
            .check_same(self.io(), &self.budget, &self.primary, &self.variant, vtag)
            .await;
        // Published: from here on, Drop must not tombstone our record.
        self.res = None;
        let stale = self.store.publish(
            &self.primary,
            vtag,
            loc.clone(),
            self.mark,
            self.replacing.as_ref(),
            &checked,
        );
        self.store.unpin(res.seg);
        if let Some(g) = self.growing.take() {
            g.end(true, &header.crcs);
        }
        if self.replacing.is_some() && stale.as_ref().is_none_or(|o| o.id() != loc.id()) {
            let c = self.store.counters();
            Counters::inc(&c.reinserted);
            c.reinserted_bytes
                .fetch_add(self.len, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(old) = stale {
            let mut block = self.budget.alloc(4096).await;
            self.store.encode_tombstone(&old, &mut block);
            let file = FileId {
                seg: old.seg,
                direct: true,
            };
            let (r, _) = write_all_at(self.io(), file, block, old.off).await;
            match r {
                Ok(()) => self.store.counters().disk_write(WriteKind::Tombstone, 4096),
                Err(_) => Counters::inc(&self.store.counters().write_errors),
            }
            if self.replacing.is_some() && old.id() == loc.id() {
                // A copy refused (a purge may be waiting for it, `src/reinsert.rs`): its
                // tombstone is durable before the purge returns.
                self.store.sync_segment_counted(old.seg);
            }
            self.store.unpin(old.seg);
        }
        Ok(())
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        // Stage writes not yet taken from the worker's queue are not made (src/combine.rs).
        for t in &self.stage_tasks {
            t.abort();
        }
        self.store.writing().end(&self.primary);
        if let Some(g) = self.growing.take() {
            g.end(false, &[]);
        }
        if let Some(res) = self.res.take() {
            let body_len = res.len - self.header_len;
            let loc = Loc {
                seg: res.seg,
                epoch: res.epoch,
                off: res.off,
                header_len: self.header_len as u32,
                body_len,
                seq: 0,
            };
            // Our reservation pin is released by tombstone_pinned.
            self.store.tombstone_pinned(&[loc], false);
        }
    }
}
