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

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use edgecache_host::{Share, fits};
use edgecache_store::Growing;
use futures_util::stream::LocalBoxStream;
use futures_util::{Stream, StreamExt};

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

/// One feed's queue, shared by its two ends on the worker's thread. The fill and its client
/// run on the same worker, so a plain queue and two wakers do (no channel, no locks).
struct Queue {
    items: VecDeque<Item>,
    /// Data bytes queued, counted in the fill client queues' share; what is still queued when
    /// both ends are gone is given back.
    bytes: usize,
    share: Arc<Share>,
    /// The client's body stream, waiting for an item.
    reader: Option<Waker>,
    /// The fill, waiting for room (or for the client to go).
    writer: Option<Waker>,
    fill_gone: bool,
    client_gone: bool,
}

/// Wake a waker taken out of the queue, after its borrow ended.
fn wake(w: Option<Waker>) {
    if let Some(w) = w {
        w.wake();
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.share.give_back(self.bytes as u64);
    }
}

/// The fill's end of a feed.
pub(super) struct FeedTx {
    queue: Rc<RefCell<Queue>>,
}

/// The client's end: its body stream, which reads a [`Rest`] with this worker's store when the
/// fill switches it.
struct FeedRx {
    queue: Rc<RefCell<Queue>>,
    ctx: Rc<super::Ctx>,
    /// The [`Rest`] being read, before the queue goes on.
    rest: Option<LocalBoxStream<'static, io::Result<Bytes>>>,
}

/// A feed: the fill's end, and the client's body stream.
pub(super) fn feed(
    ctx: Rc<super::Ctx>,
) -> (FeedTx, impl Stream<Item = io::Result<Bytes>> + 'static) {
    let queue = Rc::new(RefCell::new(Queue {
        items: VecDeque::new(),
        bytes: 0,
        share: ctx.shared.metrics.memory.fill_client_queues.clone(),
        reader: None,
        writer: None,
        fill_gone: false,
        client_gone: false,
    }));
    let rx = FeedRx {
        queue: queue.clone(),
        ctx,
        rest: None,
    };
    (FeedTx { queue }, rx)
}

impl FeedRx {
    fn open(&self, rest: Rest) -> LocalBoxStream<'static, io::Result<Bytes>> {
        match rest {
            // Past what the flight kept, the fill feeds this client again (below).
            Rest::Flight { flight, index } => flight_chunks(flight, index, NotKept::Resume),
            Rest::Store { growing, offset } => {
                let end = growing.body_len();
                self.ctx
                    .store
                    .read_growing(growing, Some(offset..end))
                    .boxed_local()
            }
        }
    }
}

impl Stream for FeedRx {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(rest) = self.rest.as_mut() {
                match rest.as_mut().poll_next(cx) {
                    Poll::Ready(None) => self.rest = None,
                    other => return other,
                }
            }
            let item = {
                let mut q = self.queue.borrow_mut();
                match q.items.pop_front() {
                    Some(item) => item,
                    None if q.fill_gone => return Poll::Ready(None),
                    None => {
                        q.reader = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                }
            };
            match item {
                Item::Data(c) => {
                    let mut q = self.queue.borrow_mut();
                    let n = c.len().min(q.bytes);
                    q.bytes -= n;
                    q.share.give_back(n as u64);
                    let w = q.writer.take();
                    drop(q);
                    wake(w);
                    return Poll::Ready(Some(Ok(c)));
                }
                Item::Fail(e) => return Poll::Ready(Some(Err(e))),
                Item::Rest(rest) => self.rest = Some(self.open(rest)),
            }
        }
    }
}

impl Drop for FeedRx {
    fn drop(&mut self) {
        let w = {
            let mut q = self.queue.borrow_mut();
            q.client_gone = true;
            q.writer.take()
        };
        wake(w);
    }
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
        let q = self.queue.borrow();
        q.bytes == 0
            || (q.bytes + len <= FEED_BYTES && fits(q.share.held(), len as u64, q.share.bound()))
    }

    /// Queue an item; false when the client went away.
    fn send(&self, item: Item) -> bool {
        let mut q = self.queue.borrow_mut();
        if q.client_gone {
            return false;
        }
        if let Item::Data(c) = &item {
            q.bytes += c.len();
            q.share.take(c.len() as u64);
        }
        q.items.push_back(item);
        let w = q.reader.take();
        drop(q);
        wake(w);
        true
    }

    /// Queue a chunk whether or not it fits; false when the client went away.
    pub fn push(&self, chunk: Bytes) -> bool {
        self.send(Item::Data(chunk))
    }

    /// Queue a chunk once it fits; false when the client went away.
    pub async fn push_when_room(&self, chunk: Bytes) -> bool {
        let len = chunk.len();
        std::future::poll_fn(|cx| {
            if self.queue.borrow().client_gone || self.has_room(len) {
                return Poll::Ready(());
            }
            self.queue.borrow_mut().writer = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        self.push(chunk)
    }

    /// The client reads the rest from `rest`, after what is queued. What is pushed after
    /// this reaches it once `rest` ends (see [`NotKept::Resume`]).
    pub fn switch(&self, rest: Rest) {
        self.send(Item::Rest(rest));
    }

    /// The body ends with an error after what is queued (the client sees a truncated body).
    pub fn fail(self, e: io::Error) {
        self.send(Item::Fail(e));
    }
}

impl Drop for FeedTx {
    fn drop(&mut self) {
        let w = {
            let mut q = self.queue.borrow_mut();
            q.fill_gone = true;
            q.reader.take()
        };
        wake(w);
    }
}
