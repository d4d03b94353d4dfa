//! How a fill's bytes reach the client whose request caused it, without the fill waiting on it.
//!
//! The fill pushes chunks into a queue of at most [`FEED_BYTES`]. A client that falls that far
//! behind is switched to a copy the fill keeps anyway, and reads the rest from there at its own
//! pace: the in-memory tail of a coalesced fetch ([`Rest::Flight`]), or the stored object
//! being written ([`Rest::Store`]). Only a response nobody else can read (not stored, not kept)
//! makes the fill wait for its client, and such a fill then serves no one else. A client that
//! stops reading altogether is dropped by the connection's write-progress timeout.
//!
//! All queues together hold no more than the memory plan's bound for them
//! (`memory_bytes{part="fill_client_queues"}`): a queue that would take the total past it counts
//! as full (its client is switched, or the fill waits for it), except that one chunk always fits
//! an empty queue (so the total may pass the bound by one chunk per fill, and fills are bounded
//! by the connection cap).

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use edgecache_host::{Share, fits};
use edgecache_store::Growing;
use futures_util::{Stream, StreamExt};
use tokio::sync::{Notify, mpsc};

use crate::coalesce::{Flight, Missing};

/// Bytes queued for one client at most before it is switched to a kept copy (or, with none,
/// before the fill waits for it).
pub(super) const FEED_BYTES: usize = 256 << 10;

/// Where a client that fell behind reads the rest of its body.
pub(super) enum Rest {
    /// The fetch's chunks kept in memory, from this chunk on.
    Flight { flight: Arc<Flight>, index: usize },
    /// The object being written to the store, from this body offset on.
    Store { growing: Arc<Growing>, offset: u64 },
}

enum Item {
    Data(Bytes),
    Fail(io::Error),
    Rest(Rest),
}

/// The bytes queued in one feed, counted in the fill client queues' share; what is still queued
/// when both ends are gone is given back.
struct Queued {
    bytes: Cell<usize>,
    share: Arc<Share>,
}

impl Queued {
    fn add(&self, n: usize) {
        self.bytes.set(self.bytes.get() + n);
        self.share.take(n as u64);
    }

    fn sub(&self, n: usize) {
        let n = n.min(self.bytes.get());
        self.bytes.set(self.bytes.get() - n);
        self.share.give_back(n as u64);
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.share.give_back(self.bytes.get() as u64);
    }
}

/// The fill's end of a feed.
pub(super) struct FeedTx {
    tx: mpsc::UnboundedSender<Item>,
    queued: Rc<Queued>,
    drained: Rc<Notify>,
}

/// A feed: the fill's end, and the client's body stream, which reads a [`Rest`] with this
/// worker's store when the fill switches it.
pub(super) fn feed(
    ctx: Rc<super::Ctx>,
) -> (FeedTx, impl Stream<Item = io::Result<Bytes>> + 'static) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Rc::new(Queued {
        bytes: Cell::new(0),
        share: ctx.shared.metrics.memory.fill_client_queues.clone(),
    });
    let drained = Rc::new(Notify::new());
    let fill_end = FeedTx {
        tx,
        queued: queued.clone(),
        drained: drained.clone(),
    };
    let queue = futures_util::stream::unfold(rx, move |mut rx| {
        let (queued, drained) = (queued.clone(), drained.clone());
        async move {
            let item = rx.recv().await?;
            if let Item::Data(c) = &item {
                queued.sub(c.len());
                drained.notify_one();
            }
            Some((item, rx))
        }
    });
    let body = queue
        .map(
            move |item| -> futures_util::stream::LocalBoxStream<'static, _> {
                match item {
                    Item::Data(c) => futures_util::stream::once(async move { Ok(c) }).boxed_local(),
                    Item::Fail(e) => {
                        futures_util::stream::once(async move { Err(e) }).boxed_local()
                    }
                    // Past what the flight kept, the fill feeds this client again (below).
                    Item::Rest(Rest::Flight { flight, index }) => {
                        flight_chunks(flight, index, NotKept::Resume)
                    }
                    Item::Rest(Rest::Store { growing, offset }) => {
                        let end = growing.body_len();
                        ctx.store
                            .read_growing(growing, Some(offset..end))
                            .boxed_local()
                    }
                }
            },
        )
        .flatten();
    (fill_end, body)
}

/// What a reader of a flight does at a chunk the flight did not keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotKept {
    /// The body ends with an error (a waiter: it has no other source).
    Fail,
    /// This stream ends, and the client's feed goes on from there: the fill feeds a client it
    /// switched to the flight again once the flight stops keeping chunks.
    Resume,
}

/// The chunks of `flight` from `index` on, as they become available.
pub(super) fn flight_chunks(
    flight: Arc<Flight>,
    index: usize,
    not_kept: NotKept,
) -> futures_util::stream::LocalBoxStream<'static, io::Result<Bytes>> {
    futures_util::stream::unfold(Some((flight, index)), move |state| async move {
        let (flight, i) = state?;
        match flight.chunk(i).await {
            Ok(Some(c)) => Some((Ok(c), Some((flight, i + 1)))),
            Ok(None) => None,
            Err(Missing::NotKept) if not_kept == NotKept::Resume => None,
            Err(_) => Some((Err(io::Error::other("the origin fetch failed")), None)),
        }
    })
    .boxed_local()
}

impl FeedTx {
    /// Whether `len` more bytes fit the queue and the share of all queues (a chunk always fits
    /// an empty queue).
    pub fn has_room(&self, len: usize) -> bool {
        let q = self.queued.bytes.get();
        let share = &self.queued.share;
        q == 0 || (q + len <= FEED_BYTES && fits(share.held(), len as u64, share.bound()))
    }

    /// Queue a chunk whether or not it fits; false when the client went away.
    pub fn push(&self, chunk: Bytes) -> bool {
        self.queued.add(chunk.len());
        self.tx.send(Item::Data(chunk)).is_ok()
    }

    /// Queue a chunk once it fits; false when the client went away.
    pub async fn push_when_room(&self, chunk: Bytes) -> bool {
        while !self.has_room(chunk.len()) {
            tokio::select! {
                _ = self.drained.notified() => {}
                _ = self.tx.closed() => return false,
            }
        }
        self.push(chunk)
    }

    /// The client reads the rest from `rest`, after what is queued. What is pushed after
    /// this reaches it once `rest` ends (see [`NotKept::Resume`]).
    pub fn switch(&self, rest: Rest) {
        let _ = self.tx.send(Item::Rest(rest));
    }

    /// The body ends with an error after what is queued (the client sees a truncated body).
    pub fn fail(self, e: io::Error) {
        let _ = self.tx.send(Item::Fail(e));
    }
}
