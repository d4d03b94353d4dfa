//! One client connection, plain or TLS, served with HTTP/1.1 or HTTP/2.
//!
//! HTTP/1.1 runs on hyper's HTTP/1 server with the connection's IO wrapped in an
//! [`InterimIo`] so 1xx responses from the origin can be forwarded (edgecache-upstream). HTTP/2
//! (ALPN `h2` over TLS, or a client that opens a plain connection with the HTTP/2 preface) runs
//! on hyper's HTTP/2 server, its streams spawned on the worker's own executor; an origin's 1xx
//! goes out on the request's stream (hyper patched for it: third_party/hyper/PATCHES.md). An
//! HTTP/2 request is given the origin form an HTTP/1.1 one has (`:authority` as Host, the path
//! as target), so the cache key, the Host the origin sees and everything after are the same
//! over both.
//!
//! Under either, the socket reports reads and blocked writes to the connection's clock, whose
//! watchdog enforces the client timeouts (edgecache_edge::conn_timer); on HTTP/2 a read is not the
//! start of a request head (frames arrive at any time), so an idle HTTP/2 connection is
//! closed after the idle timeout, and its streams are bounded by the HTTP/2 limits instead.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use edgecache_api::dataplane::Http2Config;
use edgecache_host::Http2Limits;
use edgecache_observe::conn_info::ConnInfo;
use futures_util::StreamExt;
use futures_util::future::LocalBoxFuture;
use futures_util::stream::FuturesUnordered;
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version, header};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::debug;

use crate::body;
use crate::handler::{self, Ctx};
use crate::interim::{self, InterimForwarder, InterimIo, InterimSlot};
use crate::node::Node;
use edgecache_edge::conn_timer::{self, ConnClock, TimedIo, Timeouts};
use edgecache_edge::send_room::SendRoom;
use edgecache_edge::tls::TlsInfo;
use edgecache_upstream::client_conn::ClientConn;

pub use edgecache_observe::conn_info::Protocol;

/// Serve one connection until it ends, a client limit expires or shutdown finishes it.
/// `fd` is the TCP socket under `stream` (for the send-queue pacing of stored bodies).
#[allow(clippy::too_many_arguments)]
pub async fn serve<S>(
    ctx: Rc<Ctx>,
    node: &Node,
    stream: S,
    fd: RawFd,
    peer: SocketAddr,
    tls: Option<TlsInfo>,
    protocol: Protocol,
    shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let limits = &node.cfg.clients;
    let timeouts = Timeouts {
        header: limits.header_timeout.get(),
        idle: limits.idle_timeout.get(),
        write: limits.write_timeout.get(),
        write_under_pressure: limits
            .write_timeout_under_pressure
            .get()
            .min(limits.write_timeout.get()),
    };
    let clock = match protocol {
        Protocol::Http1 => ConnClock::new(),
        Protocol::Http2 => ConnClock::multiplexed(),
    };
    let slot = InterimSlot::new(ctx.shared.metrics.interim.clone());
    // HTTP/2 response bodies its client takes nothing of (edgecache_edge::conn_timer::h2_stall).
    let streams = match protocol {
        Protocol::Http1 => None,
        Protocol::Http2 => Some(conn_timer::h2_stall::Streams::new(&timeouts)),
    };
    let svc_streams = streams.clone();
    // Stored bodies are paced by the socket's send queue (dataplane/serve/src/paced.rs).
    let (room, room_guard) = SendRoom::new(fd);
    let redirect = redirect_port(node, tls.is_some());
    let conn_info = match &tls {
        Some(t) => ConnInfo {
            protocol,
            tls_version: Some(t.version),
        },
        None => ConnInfo::plain(protocol),
    };
    let svc_ctx = ctx.clone();
    let svc_clock = clock.clone();
    let svc_room = room.clone();
    let svc_slot = slot.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let ctx = svc_ctx.clone();
        let busy = svc_clock.begin_request();
        let slot = svc_slot.clone();
        let streams = svc_streams.clone();
        let room = svc_room.clone();
        let tls = tls.clone();
        async move {
            // Begun in the request's own task (an HTTP/2 stream's is not the connection's),
            // which tells its 1xx from those of a background revalidation (edgecache-upstream).
            let expects = interim::client_awaits_continue(req.version(), req.headers());
            if req.version() == Version::HTTP_2 {
                to_origin_form(&mut req);
            }
            // Only hyper's HTTP/2 server puts a sender in (third_party/hyper/PATCHES.md).
            let interim = match req
                .extensions_mut()
                .remove::<hyper::ext::InformationalSender>()
            {
                Some(sender) => InterimForwarder::for_stream(
                    sender,
                    ctx.shared.metrics.interim.clone(),
                    expects,
                ),
                None => slot.begin(req.version(), expects),
            };
            req.extensions_mut().insert(ClientConn {
                info: conn_info,
                room,
                tls,
                interim: interim.clone(),
            });
            let resp = match redirect {
                // Nodes forward misses to each other over plain HTTP.
                Some(port)
                    if !handler::is_peer_hop(&ctx, req.method(), req.uri(), req.headers()) =>
                {
                    Ok(https_redirect(&req, port))
                }
                // The handler's future is about 15 KiB, and hyper moves the service's future
                // into its connection once per request: boxed, that move is a pointer.
                _ => boxed_in_place(|| handler::handle(ctx, req, peer)).await,
            };
            // No 1xx after this; those queued go out before the final response's head.
            interim.end().await;
            // The connection is busy until the body is written (or dropped).
            resp.map(|r| {
                r.map(|b| {
                    let b = match &streams {
                        Some(s) => s.watch(b),
                        None => b,
                    };
                    body::guarded(b, busy)
                })
            })
        }
    });
    let io = TimedIo::new(TokioIo::new(stream), clock.clone());
    let pressure_ctx = ctx.clone();
    let watchdog = conn_timer::watch(
        clock,
        timeouts,
        // Requests wait for what stalled clients hold: I/O buffers, or disk stream slots.
        move || {
            pressure_ctx.store.io_budget().has_waiters() || pressure_ctx.stream_slots.has_waiters()
        },
        room,
        streams,
    );
    match protocol {
        Protocol::Http1 => {
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .keep_alive(true)
                // The connection clock times heads from their first byte; hyper's own timer
                // would also run while a keep-alive connection is idle.
                .header_read_timeout(None)
                .max_buf_size(64 * 1024)
                .serve_connection(InterimIo::new(io, slot), svc);
            // Declared after `conn`, so dropped before it closes the socket.
            let _room_guard = room_guard;
            let ended = drive(&ctx, peer, conn, watchdog, shutdown, |c| {
                c.graceful_shutdown()
            })
            .await;
            if let Some(status) = ended.as_ref().and_then(refused_status) {
                ctx.shared
                    .metrics
                    .request(crate::metrics::Outcome::Synthetic);
                ctx.requests.refused(peer, conn_info, status);
            }
        }
        Protocol::Http2 => {
            let conn = http2_builder(&node.http2, &node.cfg.http2).serve_connection(io, svc);
            let _room_guard = room_guard;
            let ended = drive(&ctx, peer, conn, watchdog, shutdown, |c| {
                c.graceful_shutdown()
            })
            .await;
            if let Some(e) = ended {
                ctx.shared
                    .metrics
                    .http2_connection_error(http2_error_reason(&e));
            }
        }
    }
}

/// Run `conn` against its watchdog and the worker's shutdown; the error it ended with, if any.
/// The watchdog and the shutdown are polled only when their own wakers fired (a
/// `FuturesUnordered`), not each time the connection's task wakes for its socket: polling them
/// on every wake cost a keep-alive request about as much as routing it.
async fn drive<C, E>(
    ctx: &Rc<Ctx>,
    peer: SocketAddr,
    conn: C,
    watchdog: impl Future<Output = conn_timer::Expiry>,
    mut shutdown: watch::Receiver<bool>,
    graceful: impl FnOnce(Pin<&mut C>),
) -> Option<E>
where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    enum Stop {
        Expired(conn_timer::Expiry),
        Shutdown,
    }
    tokio::pin!(conn);
    let mut stops: FuturesUnordered<LocalBoxFuture<'_, Stop>> = FuturesUnordered::new();
    stops.push(Box::pin(async move { Stop::Expired(watchdog.await) }));
    stops.push(Box::pin(async move {
        // A closed sender is a shutdown too (the worker is going away).
        let _ = shutdown.changed().await;
        Stop::Shutdown
    }));
    let mut graceful = Some(graceful);
    let res = loop {
        tokio::select! {
            biased;
            res = conn.as_mut() => break res,
            Some(stop) = stops.next() => match stop {
                Stop::Expired(expiry) => {
                    debug!(%peer, reason = expiry.as_str(), "closing the connection");
                    ctx.shared.metrics.connection_closed(expiry.as_str());
                    return None;
                }
                Stop::Shutdown => {
                    if let Some(graceful) = graceful.take() {
                        graceful(conn.as_mut());
                    }
                }
            },
        }
    };
    let e = res.err()?;
    debug!(%peer, "connection ended: {e}");
    Some(e)
}

/// The status hyper answered an HTTP/1.1 request with itself, when it could not read its
/// head (its `on_error`: 400, 414 or 431).
fn refused_status(e: &hyper::Error) -> Option<u16> {
    if e.is_parse_too_large() {
        // The two kinds share the predicate; the message tells them apart.
        Some(if e.to_string().contains("URI too long") {
            414
        } else {
            431
        })
    } else if e.is_parse() {
        Some(400)
    } else {
        None
    }
}

/// The `reason` label of an HTTP/2 connection's error: the code of the GOAWAY it ended with
/// (sent or received), `keep_alive_timeout` when its client answered no PING, or `io` when the
/// socket failed.
fn http2_error_reason(e: &hyper::Error) -> &'static str {
    if e.is_timeout() {
        return "keep_alive_timeout";
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(h2) = err.downcast_ref::<h2::Error>() {
            if h2.is_io() {
                return "io";
            }
            return match h2.reason() {
                Some(h2::Reason::ENHANCE_YOUR_CALM) => "enhance_your_calm",
                Some(h2::Reason::PROTOCOL_ERROR) => "protocol_error",
                Some(h2::Reason::COMPRESSION_ERROR) => "compression_error",
                Some(h2::Reason::FRAME_SIZE_ERROR) => "frame_size_error",
                Some(h2::Reason::FLOW_CONTROL_ERROR) => "flow_control_error",
                _ => "other",
            };
        }
        if err.downcast_ref::<std::io::Error>().is_some() {
            return "io";
        }
        source = err.source();
    }
    "other"
}

/// hyper's HTTP/2 server with the limits from the memory plan (`edgecache_host::http2_limits`)
/// and the configured liveness check, its streams on the worker's executor.
fn http2_builder(limits: &Http2Limits, cfg: &Http2Config) -> http2::Builder<LocalExec> {
    let u32_of = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let mut b = http2::Builder::new(LocalExec);
    b.timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(u32_of(limits.max_header_list_size))
        .initial_stream_window_size(u32_of(limits.stream_window))
        .initial_connection_window_size(u32_of(limits.connection_window))
        // A client that answers no PING within the timeout is gone, whatever streams it left
        // open (waiting for an origin, say, with nothing to write that could block).
        .keep_alive_interval(Some(cfg.keep_alive_interval.get()).filter(|d| !d.is_zero()))
        .keep_alive_timeout(cfg.keep_alive_timeout.get())
        .max_pending_accept_reset_streams(cfg.max_pending_resets as usize)
        // Streams the server itself resets for a client's protocol errors before the
        // connection is closed (h2's defence against provoked resets).
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        // What a stream may have queued to send beyond its window: large hits keep the pipe
        // full without each stream buffering much.
        .max_send_buf_size(MAX_SEND_BUF)
        .max_frame_size(MAX_FRAME);
    b
}

/// Streams reset by the server for a client's errors, per connection, before it is closed.
const MAX_LOCAL_ERROR_RESETS: usize = 256;
/// Bytes a stream may queue for sending.
const MAX_SEND_BUF: usize = 256 * 1024;
/// The largest DATA frame sent (the protocol's default is 16 KiB).
const MAX_FRAME: u32 = 64 * 1024;

/// Runs hyper's HTTP/2 stream tasks on the worker's thread, reaping the worker's io_uring
/// completions like the connections do.
#[derive(Clone, Copy, Debug)]
pub struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: Future + 'static,
{
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(crate::reap::reaping(fut));
    }
}

/// An HTTP/2 request in the form of an HTTP/1.1 one: its `:authority` as the Host field
/// (RFC 9113 8.3.1: it takes the place of Host) and its target in origin form.
pub fn to_origin_form(req: &mut Request<Incoming>) {
    let uri = req.uri();
    let host = uri
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if let Some(h) = host {
        req.headers_mut().insert(header::HOST, h);
    }
    if let Ok(u) = path.parse::<Uri>() {
        *req.uri_mut() = u;
    }
}

/// The TLS listener's port when plain requests are to be redirected to HTTPS.
fn redirect_port(node: &Node, is_tls: bool) -> Option<u16> {
    let tls = &node.cfg.tls;
    match (is_tls, tls.redirect_http, tls.listen) {
        (false, true, Some(addr)) => Some(addr.port()),
        _ => None,
    }
}

/// 308 to the same target over HTTPS (RFC 9110 15.4.9: the method and body are kept).
fn https_redirect(req: &Request<Incoming>, port: u16) -> Response<body::Body> {
    // The same authority the handler would route by (edgecache-upstream), without its port.
    let authority = edgecache_policy::Authority::of_head(req.uri(), req.headers(), "http");
    let Ok(authority) = authority else {
        return plain(StatusCode::BAD_REQUEST, "a valid Host field is needed\n");
    };
    let host = authority.host();
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = if port == 443 {
        format!("https://{host}{target}")
    } else {
        format!("https://{host}:{port}{target}")
    };
    let Ok(location) = HeaderValue::from_str(&location) else {
        return plain(StatusCode::BAD_REQUEST, "the Host field is not a host\n");
    };
    let mut resp = plain(StatusCode::PERMANENT_REDIRECT, "");
    resp.headers_mut().insert(header::LOCATION, location);
    resp
}

fn plain(status: StatusCode, text: &'static str) -> Response<body::Body> {
    let mut resp = Response::new(body::full(text));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// The HTTP/2 connection preface a prior-knowledge (h2c) client opens with.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a plain connection opens with, looked at without reading it: the HTTP/2 preface, or
/// anything else (HTTP/1.1); `None` when the client sent nothing within `idle`, or a prefix of
/// the preface not completed within `head` of its first byte, or left.
///
/// A prefix waits for more bytes by the socket's readiness (an edge per arrival), never by
/// polling: a client that sends half a preface and stops costs nothing until its deadline.
pub async fn sniff(stream: &TcpStream, idle: Duration, head: Duration) -> Option<Protocol> {
    let mut deadline = tokio::time::Instant::now() + idle;
    let mut seen = 0;
    let mut buf = [0u8; 24];
    loop {
        // Ready when more than `seen` bytes are queued (or the client left: 0).
        let more = stream.async_io(Interest::READABLE, || {
            let n = peek(stream.as_raw_fd(), &mut buf)?;
            if n != 0 && n <= seen {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let n = match tokio::time::timeout_at(deadline, more).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) | Err(_) => return None,
        };
        if n == 0 {
            return None;
        }
        if buf[..n] != PREFACE[..n] {
            return Some(Protocol::Http1);
        }
        if n == PREFACE.len() {
            return Some(Protocol::Http2);
        }
        // A prefix of the preface: wait for the rest, as long as a request head may take.
        if seen == 0 {
            deadline = deadline.min(tokio::time::Instant::now() + head);
        }
        seen = n;
    }
}

/// The bytes queued on socket `fd`, copied into `buf` and left queued, without waiting.
fn peek(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recv(2) writes at most `buf.len()` bytes into `buf`, which is valid and ours for
    // the call; `fd` is the caller's open socket.
    #[allow(unsafe_code)]
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// `make()`'s value in a box allocated before it is made, so it is made in the box:
/// `Box::pin(make())` makes it on the stack first and then copies every byte of it, as many as
/// the move it was to save.
fn boxed_in_place<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}
