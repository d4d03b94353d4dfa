//! Forwarding 1xx interim responses from the origin to the client (RFC 9110 15.2: "A proxy MUST
//! forward 1xx responses unless the proxy itself requested the generation of the 1xx
//! response"), e.g. 103 Early Hints with its Link fields, while the final response is still
//! awaited. Interim responses are never stored (`policy::storable::storable` refuses them).
//!
//! Why this module exists: hyper's client hands each 1xx to a callback
//! (`hyper::ext::on_informational`), but hyper's HTTP/1 server has no API to send one (it only
//! writes its own `100 Continue` when a request body with `Expect: 100-continue` is read). So
//! the data plane writes interim responses beside hyper, on the connection's socket:
//!
//! * [`InterimIo`] wraps the connection's IO given to `http1::Builder::serve_connection` and
//!   shares an [`InterimSlot`] with the requests of that connection. It writes the slot's
//!   pending bytes to the socket only where they cannot split one of hyper's messages: in
//!   `poll_flush`, which hyper calls only once its own write buffer is empty (hyper's
//!   dispatcher flushes on every turn, also while the service future is still pending), or in
//!   `poll_write` once such a flush happened and hyper has not written since. A partly written
//!   interim response is always finished before any of hyper's bytes.
//! * Per request, `serve_connection` calls [`InterimSlot::begin`], which hands out an
//!   [`InterimForwarder`] put into the request's extensions (in its
//!   [`crate::client_conn::ClientConn`]). `Origin::prepare` copies it onto
//!   the origin request and `Origin::send` registers the callback that calls
//!   [`InterimForwarder::push`]; the callback runs in the origin connection's task and wakes
//!   the client connection's task, whose next flush writes the bytes. A request sent from
//!   another task than the client request's own (a stale-while-revalidate background
//!   revalidation) is the proxy's own: its forwarder is [`InterimForwarder::detached`] and
//!   drops every 1xx.
//! * When the handler has the final response, [`InterimForwarder::end`] closes the request
//!   (later 1xx, from a fill or a background revalidation that outlives it, are dropped) and
//!   waits until what was queued is on the wire, so the final response's head follows it.
//!   While a request is open, hyper has nothing of a later response in its buffer, and
//!   everything of an earlier one is already complete in it (hyper reads the next request
//!   head only once the previous response is fully encoded), so "hyper's buffer is empty" is
//!   always a message boundary.
//!
//! Over HTTP/2, a request's interim responses go out on its own stream instead: hyper's HTTP/2
//! server is patched (third_party/hyper/PATCHES.md) to put an `InformationalSender` in each
//! request's extensions, and [`InterimForwarder::for_stream`] queues HEADERS frames on it, which
//! hyper writes before the final response's. Per request at most [`PENDING_MAX`] bytes of
//! fields (counted as HTTP/2 counts a field list), held in the same share of the memory plan
//! until the request ends; more are dropped.
//!
//! Which 1xx go out is `policy::interim::action`: none to an HTTP/1.0 client, no 101, and a
//! 100 Continue only to a client whose `Expect: 100-continue` hyper does not answer itself
//! (see [`client_awaits_continue`]).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use edgecache_host::Share;
use edgecache_policy::interim::{self, InterimAction};
use http::header::{self, HeaderMap};
use http::{StatusCode, Version};
use hyper::rt::{Read, ReadBufCursor, Write};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tracing::debug;

/// The metric handles interim responses are counted in, registered by the data plane: its
/// `interim_responses_total{action}`, and the interim queues' share of its memory plan
/// (`memory_bytes{part="interim_queues"}`).
#[derive(Debug, Clone, Default)]
pub struct InterimMetrics {
    pub responses: Family<[(&'static str, String); 1], Counter>,
    pub queues: Arc<Share>,
}

impl InterimMetrics {
    /// One 1xx from the origin, forwarded or dropped.
    pub fn interim(&self, action: InterimAction) {
        self.responses
            .get_or_create(&[("action", action.as_str().to_string())])
            .inc();
    }
}

/// One client connection's queue of interim responses, shared by its IO and its requests.
pub struct InterimSlot {
    state: Mutex<State>,
    metrics: Arc<InterimMetrics>,
}

struct State {
    /// The sequence number of the connection's latest request.
    seq: u64,
    /// Whether that request still accepts interim responses (no final response yet).
    open: bool,
    /// Serialized interim responses not yet (completely) on the wire.
    pending: Vec<u8>,
    /// How much of `pending` is already written: once non-zero, the rest goes out before any
    /// of hyper's bytes.
    written: usize,
    /// hyper's write buffer is empty (it called `poll_flush`) and it has not written since:
    /// nothing of hyper's is half written, so an interim response may go out now.
    boundary: bool,
    /// The client connection's task, to wake when bytes are queued.
    io_waker: Option<Waker>,
    /// The request waiting in `end` for `pending` to be written.
    drained: Option<Waker>,
    /// The IO failed or is gone: nothing will be written any more.
    closed: bool,
    /// The interim queues' share of the memory plan, which `pending` is counted in.
    share: Arc<Share>,
}

impl State {
    /// Empty `pending`, giving its bytes (and its allocation) back.
    fn clear_pending(&mut self) {
        self.share.give_back(self.pending.len() as u64);
        self.pending = Vec::new();
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.share.give_back(self.pending.len() as u64);
    }
}

impl InterimSlot {
    pub fn new(metrics: Arc<InterimMetrics>) -> Arc<Self> {
        let state = State {
            seq: 0,
            open: false,
            pending: Vec::new(),
            written: 0,
            boundary: false,
            io_waker: None,
            drained: None,
            closed: false,
            share: metrics.queues.clone(),
        };
        Arc::new(Self {
            state: Mutex::new(state),
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new request on this connection: interim responses for it may be queued until its
    /// forwarder's [`InterimForwarder::end`]. `client` is the client's HTTP version;
    /// `expects_continue` is [`client_awaits_continue`] of its head. Call it from the
    /// connection's task (the request's own task, see [`InterimForwarder::in_own_task`]).
    pub fn begin(self: &Arc<Self>, client: Version, expects_continue: bool) -> InterimForwarder {
        let mut st = self.lock();
        st.seq = st.seq.wrapping_add(1);
        st.open = true;
        if st.written == 0 {
            // Leftovers of a request that never ended (cannot happen while the connection
            // lives, as `end` waits for them): never let them precede this request's response.
            st.clear_pending();
        }
        InterimForwarder {
            sink: Sink::Socket {
                slot: self.clone(),
                seq: st.seq,
            },
            metrics: self.metrics.clone(),
            client,
            expects_continue,
            task: tokio::task::try_id(),
            detached: false,
        }
    }
}

/// Whether a client's `Expect: 100-continue` is left for the origin to answer. hyper's server
/// answers it itself, with its own 100 Continue, as soon as the content of an HTTP/1.1 request
/// is read (which forwarding it does), so a 100 from the origin would be a second one: only a
/// request declaring no content (for which hyper ignores the expectation) gets the origin's.
pub fn client_awaits_continue(version: Version, headers: &HeaderMap) -> bool {
    let expects = headers
        .get_all(header::EXPECT)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    // Most requests expect nothing: their framing fields need no lookup.
    if !expects {
        return false;
    }
    let has_content = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    // hyper's HTTP/2 server never answers an expectation: the origin's 100 is the only one.
    !(has_content && version == Version::HTTP_11)
}

/// One request's right to send interim responses to its client; travels in the request's
/// extensions (and its clones') to the origin client.
#[derive(Clone)]
pub struct InterimForwarder {
    sink: Sink,
    metrics: Arc<InterimMetrics>,
    client: Version,
    expects_continue: bool,
    task: Option<tokio::task::Id>,
    /// Attached to a request the proxy sent on its own: every 1xx is dropped.
    detached: bool,
}

/// Where a request's interim responses go.
#[derive(Clone)]
enum Sink {
    /// HTTP/1.1: bytes written beside hyper's on the connection's socket ([`InterimIo`]).
    Socket { slot: Arc<InterimSlot>, seq: u64 },
    /// HTTP/2: HEADERS frames on the request's own stream, written by hyper's HTTP/2 server
    /// (the `InformationalSender` of third_party/hyper/PATCHES.md).
    Stream(Arc<StreamSink>),
}

/// One HTTP/2 request's interim responses: hyper's sender, and the bytes queued for it, held
/// in the interim queues' share of the memory plan until the request ends.
struct StreamSink {
    sender: hyper::ext::InformationalSender,
    state: Mutex<StreamState>,
    share: Arc<Share>,
}

struct StreamState {
    open: bool,
    held: u64,
}

impl StreamSink {
    fn lock(&self) -> MutexGuard<'_, StreamState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn queue(&self, status: StatusCode, headers: &HeaderMap) -> (InterimAction, &'static str) {
        let mut st = self.lock();
        if !st.open || !self.sender.is_open() {
            return (InterimAction::Drop, "the final response was sent");
        }
        let fields = downstream_fields(headers);
        // The size HTTP/2 counts a field list by (RFC 9113 6.5.2): name, value and 32 each.
        let size = 32
            + fields
                .iter()
                .map(|(k, v)| (k.as_str().len() + v.len() + 32) as u64)
                .sum::<u64>();
        if st.held + size > PENDING_MAX as u64 || !self.share.try_take(size) {
            return (
                InterimAction::Drop,
                "the client has not taken the earlier ones",
            );
        }
        st.held += size;
        let mut res = http::Response::new(());
        *res.status_mut() = status;
        *res.headers_mut() = fields;
        match self.sender.send(res) {
            Ok(()) => (InterimAction::Forward, ""),
            Err(_) => (InterimAction::Drop, "the final response was sent"),
        }
    }

    fn end(&self) {
        let mut st = self.lock();
        st.open = false;
        self.share.give_back(std::mem::take(&mut st.held));
    }
}

impl Drop for StreamSink {
    fn drop(&mut self) {
        let held = std::mem::take(&mut self.lock().held);
        self.share.give_back(held);
    }
}

impl std::fmt::Debug for InterimForwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let protocol = match self.sink {
            Sink::Socket { .. } => "http/1.1",
            Sink::Stream(_) => "h2",
        };
        f.debug_struct("InterimForwarder")
            .field("sink", &protocol)
            .field("client", &self.client)
            .field("expects_continue", &self.expects_continue)
            .field("detached", &self.detached)
            .finish_non_exhaustive()
    }
}

impl InterimForwarder {
    /// An HTTP/2 request's forwarder: its 1xx go out on its stream through hyper's `sender`
    /// (from the request's extensions). Call it from the request's own task.
    pub fn for_stream(
        sender: hyper::ext::InformationalSender,
        metrics: Arc<InterimMetrics>,
        expects_continue: bool,
    ) -> Self {
        let sink = StreamSink {
            sender,
            state: Mutex::new(StreamState {
                open: true,
                held: 0,
            }),
            share: metrics.queues.clone(),
        };
        InterimForwarder {
            sink: Sink::Stream(Arc::new(sink)),
            metrics,
            client: Version::HTTP_2,
            expects_continue,
            task: tokio::task::try_id(),
            detached: false,
        }
    }

    /// Whether the current task is the request's own. A request sent to the origin from
    /// another task (a stale-while-revalidate background revalidation) is the proxy's own: its
    /// 1xx are not the client's (RFC 9110 15.2, "unless the proxy itself requested" it).
    pub fn in_own_task(&self) -> bool {
        self.task.is_some() && self.task == tokio::task::try_id()
    }

    /// This forwarder for a request the proxy sent on its own: it drops (and counts) every 1xx.
    pub fn detached(mut self) -> Self {
        self.detached = true;
        self
    }

    /// An interim response from the origin (called from the origin connection's task): queue
    /// it for the client when the policy says so and the request is still waiting for its
    /// final response.
    pub fn push(&self, status: StatusCode, headers: &HeaderMap) -> InterimAction {
        let (action, why) = if self.detached {
            (InterimAction::Drop, "the proxy's own request")
        } else {
            match interim::action(status, self.client, self.expects_continue) {
                InterimAction::Drop => (InterimAction::Drop, "policy"),
                InterimAction::Forward => match &self.sink {
                    Sink::Socket { slot, seq } => queue(slot, *seq, status, headers),
                    Sink::Stream(stream) => stream.queue(status, headers),
                },
            }
        };
        self.metrics.interim(action);
        debug!(
            status = status.as_u16(),
            client = ?self.client,
            action = action.as_str(),
            why,
            "interim response from the origin"
        );
        action
    }

    /// The final response is ready: close the request for interim responses and wait until
    /// those queued are written (or the connection failed), so the final head follows them.
    /// (Over HTTP/2, hyper writes what is queued on the stream before the final HEADERS.)
    pub async fn end(self) {
        let (slot, seq) = match &self.sink {
            Sink::Socket { slot, seq } => (slot, *seq),
            Sink::Stream(stream) => return stream.end(),
        };
        {
            let mut st = slot.lock();
            if st.seq == seq {
                st.open = false;
            }
        }
        poll_fn(|cx| {
            let mut st = slot.lock();
            if st.seq != seq || st.closed || st.pending.is_empty() {
                return Poll::Ready(());
            }
            set_waker(&mut st.drained, cx);
            Poll::Pending
        })
        .await;
    }
}

/// Queue an interim response on an HTTP/1.1 connection's socket, for its request `seq`.
fn queue(
    slot: &InterimSlot,
    seq: u64,
    status: StatusCode,
    headers: &HeaderMap,
) -> (InterimAction, &'static str) {
    let waker = {
        let mut st = slot.lock();
        if st.closed {
            return (InterimAction::Drop, "the client connection is gone");
        }
        if st.seq != seq || !st.open {
            return (InterimAction::Drop, "the final response was sent");
        }
        let before = st.pending.len();
        encode(status, headers, &mut st.pending);
        let added = (st.pending.len() - before) as u64;
        if st.pending.len() > PENDING_MAX || !st.share.try_take(added) {
            // A client that does not read, and an origin that keeps sending 1xx: keep what
            // is queued within its bounds (the connection's, and all connections' share of
            // the memory plan) and drop this one.
            st.pending.truncate(before);
            return (
                InterimAction::Drop,
                "the client has not taken the earlier ones",
            );
        }
        st.io_waker.clone()
    };
    wake(waker);
    (InterimAction::Forward, "")
}

fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

/// Bytes of interim responses queued per connection at most; more are dropped until the client
/// takes what is queued. All connections together queue no more than the memory plan's bound
/// for interim queues (`memory_bytes{part="interim_queues"}`); past it, new ones are dropped.
pub const PENDING_MAX: usize = 16 * 1024;

/// An interim response's fields fit to go downstream: no hop-by-hop fields, no fields
/// targeted at this cache, no Content-Length (RFC 9110 8.6: never in a 1xx).
fn downstream_fields(headers: &HeaderMap) -> HeaderMap {
    let mut fields = headers.clone();
    crate::hop_by_hop::strip_hop_by_hop(&mut fields);
    edgecache_policy::headers::strip_targeted(&mut fields);
    fields.remove(header::CONTENT_LENGTH);
    fields
}

/// `HTTP/1.1 <code> <reason>` and the [`downstream_fields`].
fn encode(status: StatusCode, headers: &HeaderMap, out: &mut Vec<u8>) {
    let fields = downstream_fields(headers);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A client connection's IO with the interim responses of its requests written in between
/// hyper's messages (see the module documentation).
pub struct InterimIo<T> {
    inner: T,
    slot: Arc<InterimSlot>,
}

impl<T> InterimIo<T> {
    pub fn new(inner: T, slot: Arc<InterimSlot>) -> Self {
        Self { inner, slot }
    }
}

impl<T: Write + Unpin> InterimIo<T> {
    /// Write what is pending when that cannot split one of hyper's messages. `flushing`: hyper
    /// called `poll_flush`, so its write buffer is empty.
    fn drain(&mut self, cx: &mut Context<'_>, flushing: bool) -> Poll<io::Result<()>> {
        let mut st = self.slot.lock();
        set_waker(&mut st.io_waker, cx);
        if flushing {
            st.boundary = true;
        }
        if st.pending.is_empty() || (st.written == 0 && !st.boundary) {
            return Poll::Ready(Ok(()));
        }
        while st.written < st.pending.len() {
            let from = st.written;
            match Pin::new(&mut self.inner).poll_write(cx, &st.pending[from..]) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => {
                    let waker = fail(&mut st);
                    drop(st);
                    wake(waker);
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => st.written += n,
                Poll::Ready(Err(e)) => {
                    let waker = fail(&mut st);
                    drop(st);
                    wake(waker);
                    return Poll::Ready(Err(e));
                }
            }
        }
        st.clear_pending();
        st.written = 0;
        let waker = st.drained.take();
        drop(st);
        wake(waker);
        Poll::Ready(Ok(()))
    }

    /// hyper wrote bytes of its own: until its next flush it may be in the middle of a message.
    fn hyper_wrote(&self, n: usize) {
        if n > 0 {
            self.slot.lock().boundary = false;
        }
    }
}

fn fail(st: &mut State) -> Option<Waker> {
    st.closed = true;
    st.clear_pending();
    st.written = 0;
    st.drained.take()
}

fn wake(waker: Option<Waker>) {
    if let Some(w) = waker {
        w.wake();
    }
}

impl<T> Drop for InterimIo<T> {
    fn drop(&mut self) {
        let waker = fail(&mut self.slot.lock());
        wake(waker);
    }
}

impl<T: Read + Unpin> Read for InterimIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for InterimIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx, false))?;
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &res {
            this.hyper_wrote(*n);
        }
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx, false))?;
        let res = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &res {
            this.hyper_wrote(*n);
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx, true))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use http::HeaderValue;

    /// A socket that takes `budget` more bytes, then is not writable.
    #[derive(Default)]
    struct Sink {
        out: Vec<u8>,
        budget: usize,
    }

    impl Write for Sink {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let n = buf.len().min(this.budget);
            if n == 0 && !buf.is_empty() {
                return Poll::Pending;
            }
            this.budget -= n;
            this.out.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn slot() -> Arc<InterimSlot> {
        InterimSlot::new(Arc::default())
    }

    fn io(slot: &Arc<InterimSlot>, budget: usize) -> InterimIo<Sink> {
        InterimIo::new(
            Sink {
                out: Vec::new(),
                budget,
            },
            slot.clone(),
        )
    }

    fn cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    fn write(io: &mut InterimIo<Sink>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(io).poll_write(&mut cx(), bytes)
    }

    fn flush(io: &mut InterimIo<Sink>) -> Poll<io::Result<()>> {
        Pin::new(io).poll_flush(&mut cx())
    }

    fn hints() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::LINK,
            HeaderValue::from_static("</style.css>; rel=preload"),
        );
        h
    }

    const HINTS: &[u8] = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n";

    #[test]
    fn an_interim_response_waits_for_hypers_buffer_to_empty() {
        let slot = slot();
        let mut io = io(&slot, usize::MAX);
        let f = slot.begin(Version::HTTP_11, false);
        // hyper is still writing the previous response when the 103 arrives.
        assert!(matches!(
            write(&mut io, b"<end of previous"),
            Poll::Ready(Ok(16))
        ));
        assert_eq!(
            f.push(StatusCode::EARLY_HINTS, &hints()),
            InterimAction::Forward
        );
        assert!(matches!(write(&mut io, b" response>"), Poll::Ready(Ok(10))));
        assert_eq!(io.inner.out, b"<end of previous response>");
        // hyper's buffer is empty: the 103 goes out.
        assert!(flush(&mut io).is_ready());
        let mut want = b"<end of previous response>".to_vec();
        want.extend_from_slice(HINTS);
        assert_eq!(io.inner.out, want);
        // The final head follows it.
        assert!(f.end().now_or_never().is_some());
        assert!(matches!(
            write(&mut io, b"HTTP/1.1 200 OK"),
            Poll::Ready(Ok(15))
        ));
        want.extend_from_slice(b"HTTP/1.1 200 OK");
        assert_eq!(io.inner.out, want);
    }

    #[test]
    fn all_connections_queue_within_the_interim_share() {
        let metrics = Arc::new(InterimMetrics::default());
        let share = metrics.queues.clone();
        share.set_bound(HINTS.len() as u64 * 3);
        let (a, b) = (InterimSlot::new(metrics.clone()), InterimSlot::new(metrics));
        let (fa, fb) = (
            a.begin(Version::HTTP_11, false),
            b.begin(Version::HTTP_11, false),
        );
        let push = |f: &InterimForwarder| f.push(StatusCode::EARLY_HINTS, &hints());
        assert_eq!(push(&fa), InterimAction::Forward);
        assert_eq!(push(&fa), InterimAction::Forward);
        assert_eq!(push(&fb), InterimAction::Forward);
        assert_eq!(push(&fb), InterimAction::Drop, "the share is full");
        assert_eq!(share.held(), HINTS.len() as u64 * 3);
        // Written out: given back, and there is room again.
        let mut io = io(&a, usize::MAX);
        assert!(flush(&mut io).is_ready());
        assert_eq!(share.held(), HINTS.len() as u64);
        assert_eq!(push(&fb), InterimAction::Forward);
        drop((fa, fb, io));
        drop((a, b));
        assert_eq!(share.held(), 0, "a connection gone gives its queue back");
    }

    #[test]
    fn interim_responses_a_client_does_not_take_are_bounded() {
        let slot = slot();
        let mut io = io(&slot, 0);
        let f = slot.begin(Version::HTTP_11, false);
        let mut forwarded = 0;
        for _ in 0..10_000 {
            if f.push(StatusCode::EARLY_HINTS, &hints()) == InterimAction::Forward {
                forwarded += 1;
            }
        }
        assert_eq!(forwarded, PENDING_MAX / HINTS.len(), "then dropped");
        assert!(slot.lock().pending.len() <= PENDING_MAX);
        assert!(flush(&mut io).is_pending(), "nothing taken");
        // Once the client reads, what was queued goes out whole, in order.
        io.inner.budget = usize::MAX;
        assert!(flush(&mut io).is_ready());
        assert_eq!(io.inner.out.len(), forwarded * HINTS.len());
        assert!(io.inner.out.starts_with(HINTS));
    }

    #[test]
    fn a_partly_written_interim_response_is_finished_before_hypers_next_bytes() {
        let slot = slot();
        let mut io = io(&slot, 10);
        let f = slot.begin(Version::HTTP_11, false);
        f.push(StatusCode::EARLY_HINTS, &hints());
        assert!(flush(&mut io).is_pending(), "the socket took 10 bytes only");
        assert_eq!(io.inner.out, &HINTS[..10]);
        // The request ends: it waits until the 103 is on the wire.
        let mut end = Box::pin(f.end());
        assert!(end.as_mut().poll(&mut cx()).is_pending());
        io.inner.budget = usize::MAX;
        assert!(matches!(
            write(&mut io, b"HTTP/1.1 100 Continue\r\n\r\n"),
            Poll::Ready(Ok(25))
        ));
        let mut want = HINTS.to_vec();
        want.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(io.inner.out, want);
        assert!(end.as_mut().poll(&mut cx()).is_ready());
    }

    #[test]
    fn interim_responses_after_the_final_response_or_for_another_request_are_dropped() {
        let slot = slot();
        let mut io = io(&slot, usize::MAX);
        assert!(flush(&mut io).is_ready());
        let first = slot.begin(Version::HTTP_11, false);
        assert!(first.clone().end().now_or_never().is_some());
        assert_eq!(
            first.push(StatusCode::EARLY_HINTS, &hints()),
            InterimAction::Drop
        );
        let second = slot.begin(Version::HTTP_11, false);
        assert_eq!(
            first.push(StatusCode::EARLY_HINTS, &hints()),
            InterimAction::Drop
        );
        assert_eq!(
            second.push(StatusCode::CONTINUE, &HeaderMap::new()),
            InterimAction::Drop
        );
        assert_eq!(
            second.push(StatusCode::SWITCHING_PROTOCOLS, &HeaderMap::new()),
            InterimAction::Drop
        );
        let old_client = slot.begin(Version::HTTP_10, false);
        assert_eq!(
            old_client.push(StatusCode::EARLY_HINTS, &hints()),
            InterimAction::Drop
        );
        assert!(flush(&mut io).is_ready());
        assert!(
            io.inner.out.is_empty(),
            "{:?}",
            String::from_utf8_lossy(&io.inner.out)
        );
        let expecting = slot.begin(Version::HTTP_11, true);
        assert_eq!(
            expecting.push(StatusCode::CONTINUE, &HeaderMap::new()),
            InterimAction::Forward
        );
        assert!(flush(&mut io).is_ready());
        assert_eq!(io.inner.out, b"HTTP/1.1 100 Continue\r\n\r\n");
    }

    #[test]
    fn a_closed_connection_releases_a_request_waiting_for_its_interim_responses() {
        let slot = slot();
        let io = io(&slot, 0);
        let f = slot.begin(Version::HTTP_11, false);
        f.push(StatusCode::EARLY_HINTS, &hints());
        let mut end = Box::pin(f.clone().end());
        assert!(end.as_mut().poll(&mut cx()).is_pending());
        drop(io);
        assert!(end.as_mut().poll(&mut cx()).is_ready());
        let f = slot.begin(Version::HTTP_11, false);
        assert_eq!(
            f.push(StatusCode::EARLY_HINTS, &hints()),
            InterimAction::Drop
        );
    }

    #[test]
    fn interim_fields_go_downstream_without_hop_by_hop_fields_or_content_length() {
        let mut h = hints();
        h.insert(header::CONNECTION, HeaderValue::from_static("x-hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        h.append(
            header::LINK,
            HeaderValue::from_static("</app.js>; rel=preload"),
        );
        let mut out = Vec::new();
        encode(StatusCode::EARLY_HINTS, &h, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\
             link: </app.js>; rel=preload\r\n\r\n"
        );
        let mut out = Vec::new();
        encode(
            StatusCode::from_u16(199).unwrap(),
            &HeaderMap::new(),
            &mut out,
        );
        assert_eq!(out, b"HTTP/1.1 199 \r\n\r\n");
    }

    #[test]
    fn a_100_continue_is_the_origins_to_send_only_when_hyper_does_not_send_its_own() {
        let h = |fields: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in fields {
                m.append(
                    header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        let v11 = Version::HTTP_11;
        assert!(!client_awaits_continue(v11, &h(&[])));
        assert!(!client_awaits_continue(
            v11,
            &h(&[("expect", "100-continue"), ("content-length", "5")])
        ));
        assert!(!client_awaits_continue(
            v11,
            &h(&[("expect", "100-Continue"), ("transfer-encoding", "chunked")])
        ));
        assert!(client_awaits_continue(
            v11,
            &h(&[("expect", "100-continue"), ("content-length", "0")])
        ));
        assert!(client_awaits_continue(
            v11,
            &h(&[("expect", "100-continue")])
        ));
        // hyper's HTTP/2 server never answers: with content too, the origin's 100 is awaited.
        assert!(client_awaits_continue(
            Version::HTTP_2,
            &h(&[("expect", "100-continue"), ("content-length", "5")])
        ));
    }

    #[tokio::test]
    async fn a_request_sent_from_another_task_is_the_proxys_own() {
        let slot = slot();
        let f = tokio::spawn(async move {
            let f = slot.begin(Version::HTTP_11, false);
            assert!(f.in_own_task());
            f
        })
        .await
        .unwrap();
        assert!(!f.in_own_task(), "outside any task");
        let g = f.clone();
        let other = tokio::spawn(async move { g.in_own_task() }).await.unwrap();
        assert!(!other, "in another task");
        assert_eq!(
            f.detached().push(StatusCode::EARLY_HINTS, &hints()),
            InterimAction::Drop
        );
    }
}
