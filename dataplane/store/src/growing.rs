//! An object being written, readable while it is written.
//!
//! A writer of known length shares a [`Growing`]: how many body bytes have reached the disk
//! and the checksums of their blocks. A reader on any worker streams those bytes with its own
//! I/O and its own buffer budget ([`StoreWorker::read_growing`](super::StoreWorker::read_growing)),
//! waiting for more as the writer flushes, so a client that reads slowly never holds the
//! writer back, and a request that arrives during a large fill need not wait for its end.
//!
//! The last bytes become readable only once the object is published (or, if the publish was
//! refused, once the whole body is on disk): a reader that has the whole body finds it stored.
//! A reader holds no segment pin: the segment's epoch is checked after every read, as for
//! published objects, so a reclaim racing with a slow reader ends its stream with an error,
//! never with another object's bytes.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use super::record::BLOCK;
use super::state::Loc;

#[derive(Debug, Default)]
struct Progress {
    /// Body bytes `[0, flushed)` are on disk.
    flushed: u64,
    /// The checksums of the blocks wholly within `[0, flushed)` (all of them once complete).
    crcs: Vec<u32>,
    /// `Some(true)`: the whole body is on disk; `Some(false)`: the writer failed or was dropped.
    end: Option<bool>,
}

/// The shared progress of one known-length write.
#[derive(Debug)]
pub struct Growing {
    pub(crate) loc: Loc,
    progress: Mutex<Progress>,
    changed: Notify,
}

/// What a reader may read at a position.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Readable {
    /// Body bytes `[pos, to)` are on disk, with the checksums of their blocks (from the block
    /// at `pos`).
    Bytes { to: u64, crcs: Vec<u32> },
    /// The position is at or past the body's end.
    End,
    /// The writer failed before this position.
    Failed,
}

impl Growing {
    pub(crate) fn new(loc: Loc) -> Growing {
        Growing {
            loc,
            progress: Mutex::new(Progress::default()),
            changed: Notify::new(),
        }
    }

    /// The body length the object will have.
    pub fn body_len(&self) -> u64 {
        self.loc.body_len
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer has `flushed` body bytes on disk; `crcs` are the checksums of every complete
    /// block so far (a prefix grows; only the new ones are copied).
    pub(crate) fn advance(&self, flushed: u64, crcs: &[u32]) {
        self.advance_from(flushed, 0, crcs);
    }

    /// [`advance`](Self::advance) with the checksums of the complete blocks from block
    /// `first` on (a writer whose pieces land in order hands over only its own).
    pub(crate) fn advance_from(&self, flushed: u64, first: usize, crcs: &[u32]) {
        let mut p = self.lock();
        let have = p.crcs.len();
        // Pieces land in order: one past a gap would make bytes readable without checksums.
        let Some(new) = crcs.get(have.checked_sub(first).unwrap_or(usize::MAX)..) else {
            return;
        };
        p.crcs.extend_from_slice(new);
        p.flushed = p.flushed.max(flushed);
        drop(p);
        self.changed.notify_waiters();
    }

    /// The write ended: complete (every byte on disk, `crcs` all the body's checksums) or not.
    pub(crate) fn end(&self, complete: bool, crcs: &[u32]) {
        if complete {
            self.advance(self.loc.body_len, crcs);
        }
        let mut p = self.lock();
        p.end.get_or_insert(complete);
        drop(p);
        self.changed.notify_waiters();
    }

    /// What can be read at `pos` (a block boundary) now, without waiting.
    fn readable_now(&self, pos: u64) -> Option<Readable> {
        let body_len = self.loc.body_len;
        if pos >= body_len {
            return Some(Readable::End);
        }
        let p = self.lock();
        // Whole blocks only, except the body's last one.
        let to = if p.flushed >= body_len {
            body_len
        } else {
            p.flushed / BLOCK * BLOCK
        };
        if to > pos {
            let first = (pos / BLOCK) as usize;
            let last = to.div_ceil(BLOCK) as usize;
            if let Some(crcs) = p.crcs.get(first..last) {
                return Some(Readable::Bytes {
                    to,
                    crcs: crcs.to_vec(),
                });
            }
        }
        // Ended and still nothing here: the writer failed before this position.
        p.end.map(|_| Readable::Failed)
    }

    /// Wait until something can be read at `pos` (a block boundary).
    pub(crate) async fn readable(&self, pos: u64) -> Readable {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.readable_now(pos) {
                return r;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn growing(body_len: u64) -> Growing {
        Growing::new(Loc {
            seg: 0,
            epoch: 1,
            off: 0,
            header_len: 4096,
            body_len,
            seq: 0,
        })
    }

    #[tokio::test]
    async fn only_whole_flushed_blocks_are_readable_until_the_end() {
        let g = growing(3 * BLOCK + 10);
        assert_eq!(g.readable_now(0), None, "nothing flushed yet");
        // A flush that ends inside a block exposes only the blocks before it.
        g.advance(BLOCK + 100, &[1]);
        assert_eq!(
            g.readable_now(0),
            Some(Readable::Bytes {
                to: BLOCK,
                crcs: vec![1]
            })
        );
        assert_eq!(g.readable_now(BLOCK), None);
        g.advance(3 * BLOCK, &[1, 2, 3]);
        assert_eq!(
            g.readable_now(BLOCK),
            Some(Readable::Bytes {
                to: 3 * BLOCK,
                crcs: vec![2, 3]
            })
        );
        assert_eq!(
            g.readable_now(3 * BLOCK),
            None,
            "the last block waits for the end"
        );
        g.end(true, &[1, 2, 3, 4]);
        assert_eq!(
            g.readable_now(3 * BLOCK),
            Some(Readable::Bytes {
                to: 3 * BLOCK + 10,
                crcs: vec![4]
            })
        );
        assert_eq!(g.readable_now(3 * BLOCK + 10), Some(Readable::End));
    }

    #[tokio::test]
    async fn a_failed_write_fails_readers_past_what_reached_the_disk() {
        let g = growing(4 * BLOCK);
        g.advance(2 * BLOCK, &[1, 2]);
        g.end(false, &[]);
        assert!(matches!(g.readable_now(0), Some(Readable::Bytes { .. })));
        assert_eq!(g.readable_now(2 * BLOCK), Some(Readable::Failed));
    }

    #[tokio::test]
    async fn a_waiting_reader_wakes_on_progress() {
        let g = std::sync::Arc::new(growing(2 * BLOCK));
        let reader = {
            let g = g.clone();
            tokio::spawn(async move { g.readable(0).await })
        };
        tokio::task::yield_now().await;
        g.advance(2 * BLOCK, &[7, 8]);
        g.end(true, &[7, 8]);
        let r = reader.await.unwrap();
        assert!(
            matches!(r, Readable::Bytes { to, .. } if to == 2 * BLOCK),
            "{r:?}"
        );
    }
}
