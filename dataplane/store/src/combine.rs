//! Records finished in the same scheduling round of a worker, back to back in one segment, go
//! to the disk as one write.
//!
//! A small object's record is written whole when its fill ends ([`ObjectWriter::finish`]).
//! Under many fills at once, their records lie back to back in the active segment (reserved in
//! turn) and end in the same rounds. Written one by one, each is its own io_uring request, its
//! own O_DIRECT write through the filesystem (on a new segment, an extent conversion each) and
//! its own completion. Queued here instead, the records finished in one round go out sorted by
//! offset, each run of consecutive ones as one vectored write of their buffers (no copy).
//!
//! Nothing about durability changes: every writer waits for the write that holds its record
//! and gets that write's result, so a record is on disk before its writer publishes it, as
//! before, and a writer that writes its body before its header still does (it queues the
//! header only once the body's write has returned). A run whose write fails or comes up short
//! is written again record by record, each writer getting its own result.
//!
//! A writer dropped while its record is queued (its task cancelled) takes the record out of
//! the batch: its reservation is tombstoned, and the record never lands after the tombstone.
//!
//! A large object's body goes through the same queue, a staging buffer at a time, without its
//! writer waiting ([`Combiner::start_write`]); the writer collects the results before it
//! queues the header.
//!
//! The flush is a task of the worker's `LocalSet` (every worker runtime has one:
//! `tokio_uring::start`, [`crate::io::block_on_worker`]); it yields once before taking the
//! queue, so the writers woken in the same round queue first.
//!
//! [`ObjectWriter::finish`]: crate::ObjectWriter::finish

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::oneshot;

use crate::io::{AlignedBuf, FileId, WorkerIo, write_all_at};
use crate::metrics::Counters;
use crate::store::Store;

/// At most this many records in one write (well under the kernel's IOV_MAX of 1024).
pub(crate) const MAX_RUN_RECORDS: usize = 64;
/// At most this many bytes in one write.
pub(crate) const MAX_RUN_BYTES: u64 = 1 << 20;

struct Queued {
    file: FileId,
    off: u64,
    buf: AlignedBuf,
    done: oneshot::Sender<io::Result<()>>,
}

/// The result of a write queued by [`Combiner::start_write`], as its receiver got it (`None`:
/// the queue went away with its worker).
pub(crate) fn written(result: Option<io::Result<()>>) -> io::Result<()> {
    result.unwrap_or_else(|| Err(io::Error::other("record write abandoned (worker stopping)")))
}

/// One worker's queue of record writes (see the module doc).
pub(crate) struct Combiner {
    store: Arc<Store>,
    io: Rc<WorkerIo>,
    queue: RefCell<Vec<Queued>>,
    flush_pending: Cell<bool>,
}

impl Combiner {
    pub(crate) fn new(store: Arc<Store>, io: Rc<WorkerIo>) -> Rc<Combiner> {
        Rc::new(Combiner {
            store,
            io,
            queue: RefCell::new(Vec::new()),
            flush_pending: Cell::new(false),
        })
    }

    /// The worker's engine.
    pub(crate) fn io(&self) -> &WorkerIo {
        &self.io
    }

    /// Write all of `buf` at `off` of `file`, possibly in one write with other records queued
    /// in this round; returns once that write has returned.
    pub(crate) async fn write_all_at(
        self: &Rc<Self>,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
    ) -> io::Result<()> {
        written(self.start_write(file, buf, off).await.ok())
    }

    /// Queue the write of all of `buf` at `off` of `file` and return at once: the receiver
    /// gets its result ([`written`]). Dropping the receiver before the write is taken from the
    /// queue takes it out.
    pub(crate) fn start_write(
        self: &Rc<Self>,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
    ) -> oneshot::Receiver<io::Result<()>> {
        let (done, result) = oneshot::channel();
        self.queue.borrow_mut().push(Queued {
            file,
            off,
            buf,
            done,
        });
        if !self.flush_pending.replace(true) {
            let me = Rc::clone(self);
            tokio::task::spawn_local(async move { me.flush().await });
        }
        result
    }

    async fn flush(self: Rc<Self>) {
        tokio::task::yield_now().await;
        let mut queued = std::mem::take(&mut *self.queue.borrow_mut());
        self.flush_pending.set(false);
        // A writer dropped while queued (its task cancelled) has tombstoned its reservation:
        // its record must not land on disk after that.
        queued.retain(|q| !q.done.is_closed());
        let writes = runs(queued).into_iter().map(|run| self.write_run(run));
        futures_util::future::join_all(writes).await;
    }

    async fn write_run(&self, run: Vec<Queued>) {
        let c = self.store.counters();
        c.record_writes.fetch_add(run.len() as u64, Relaxed);
        let (file, off) = (run[0].file, run[0].off);
        let (mut bufs, dones): (Vec<_>, Vec<_>) = run.into_iter().map(|q| (q.buf, q.done)).unzip();
        if bufs.len() > 1 {
            let want: usize = bufs.iter().map(AlignedBuf::len).sum();
            // One `writev` on io_uring; the other engines write a run buffer by buffer.
            let ops = if self.io.writes_vectored() {
                1
            } else {
                bufs.len()
            };
            c.record_write_ops.fetch_add(ops as u64, Relaxed);
            let (r, back) = self.io.write_vectored_at(file, bufs, off).await;
            if matches!(r, Ok(n) if n == want) {
                for d in dones {
                    let _ = d.send(Ok(()));
                }
                return;
            }
            bufs = back;
        }
        // One record, or a run whose write failed or came up short: each record on its own,
        // for its own result.
        let mut at = off;
        for (buf, done) in bufs.into_iter().zip(dones) {
            let len = buf.len() as u64;
            Counters::inc(&c.record_write_ops);
            let (r, _) = write_all_at(&*self.io, file, buf, at).await;
            let _ = done.send(r);
            at += len;
        }
    }
}

/// The queued writes sorted and cut into runs: consecutive offsets of one file, within
/// [`MAX_RUN_RECORDS`] and [`MAX_RUN_BYTES`].
fn runs(mut queued: Vec<Queued>) -> Vec<Vec<Queued>> {
    queued.sort_by_key(|q| (q.file.seg, q.file.direct, q.off));
    let mut out: Vec<Vec<Queued>> = Vec::new();
    let mut end = 0;
    let mut bytes = 0;
    for q in queued {
        let len = q.buf.len() as u64;
        let joins = out.last().is_some_and(|run| {
            run[0].file == q.file
                && end == q.off
                && run.len() < MAX_RUN_RECORDS
                && bytes + len <= MAX_RUN_BYTES
        });
        end = q.off + len;
        if joins {
            bytes += len;
            if let Some(run) = out.last_mut() {
                run.push(q);
            }
        } else {
            bytes = len;
            out.push(vec![q]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(seg: u32, off: u64, len: usize) -> Queued {
        let mut buf = AlignedBuf::new(len);
        buf.set_len(len);
        Queued {
            file: FileId { seg, direct: true },
            off,
            buf,
            done: oneshot::channel().0,
        }
    }

    fn shape(runs: &[Vec<Queued>]) -> Vec<Vec<(u32, u64)>> {
        runs.iter()
            .map(|r| r.iter().map(|q| (q.file.seg, q.off)).collect())
            .collect()
    }

    #[test]
    fn consecutive_records_of_one_segment_make_one_run() {
        // Finished out of order, with a gap (a record still being filled) and another segment.
        let q = vec![
            queued(1, 8192, 4096),
            queued(1, 0, 8192),
            queued(2, 12288, 4096),
            queued(1, 12288, 4096),
            queued(1, 20480, 4096),
            queued(2, 16384, 8192),
        ];
        assert_eq!(
            shape(&runs(q)),
            vec![
                vec![(1, 0), (1, 8192), (1, 12288)],
                vec![(1, 20480)],
                vec![(2, 12288), (2, 16384)],
            ]
        );
    }

    #[test]
    fn a_run_stops_at_its_bounds() {
        let q = (0..MAX_RUN_RECORDS as u64 + 3)
            .map(|i| queued(0, i * 4096, 4096))
            .collect();
        let r = runs(q);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].len(), MAX_RUN_RECORDS);
        let big = 256 << 10;
        let q = (0..6).map(|i| queued(0, i * big as u64, big)).collect();
        let r = runs(q);
        assert_eq!(
            r.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![4, 2],
            "1 MiB per write at most"
        );
    }
}
