//! What operators look at, request by request: the access log (one line per request to
//! stdout, JSON or the combined format, a sampled share of requests) and the request histograms
//! of /metrics (`request_duration_seconds` and `request_first_byte_seconds`, by cache outcome,
//! status class and site), for every request. The `site` label is the name of the site the
//! request was routed to (the [`SiteId`] the data plane's router puts in its extensions), or
//! [`UNROUTED`]: a bounded set, whatever hosts the clients send.
//!
//! A request is an [`Exchange`] from the handler's first look at its head
//! ([`WorkerLog::begin`]) to the end of its body. [`Exchange::respond`] notes the response
//! head as it goes to hyper (the time to first byte, the status, the outcome the response's
//! Cache-Status gives, src/request_log/outcome.rs) and wraps the body so the bytes it yields
//! are counted. When the body ends, fails or is dropped (a client gone mid-body) the request
//! is observed and its line queued: an aborted response logs the bytes that went out. A request
//! whose handler is dropped before a response head (its connection went) is logged with
//! status 499, as nginx does, and no time to first byte.
//!
//! Lines are formatted on the worker (src/request_log/format.rs) and go through a queue bounded
//! in bytes to one writer thread (src/line_queue.rs): a worker never waits for stdout,
//! and a line that does not fit is dropped and counted (`access_log_dropped_total`).

mod format;
mod outcome;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use edgecache_trace::Share;
use http::header;
use http::{Method, Response, request};
use http_body::Frame;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tracing::{info, warn};

use crate::conn_info::{self, ConnInfo};

pub use outcome::CacheOutcome;

/// A response body as the data plane's workers hand it to hyper: boxed and `!Send` (the same
/// type as the data plane's `body::Body`).
pub type Body = Pin<Box<dyn http_body::Body<Data = Bytes, Error = io::Error>>>;

/// What the access log writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object a line.
    Json,
    /// The combined log format, with EdgeCache's fields appended.
    Combined,
    /// No access log (the request histograms are kept all the same).
    Off,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Combined => "combined",
            Format::Off => "off",
        }
    }
}

/// How the access log is kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub format: Format,
    /// The share of requests logged, from 0 to 1.
    pub sample: f64,
}

/// The labels of the request histograms: `cache` (the outcome the response's Cache-Status
/// gives: hit, stale, revalidated, miss, pass, error, synthetic, none), `status` (`2xx`..) and
/// `site` ([`SiteId`]). All static, so an observation allocates nothing.
pub type RequestLabels = [(&'static str, &'static str); 3];

/// The request histograms' family type.
pub type RequestHistograms = Family<RequestLabels, Histogram, fn() -> Histogram>;

/// Buckets of the request histograms, in seconds: 0.5 ms to 10 s.
pub const REQUEST_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A new request histogram (the constructor of [`RequestHistograms`]).
pub fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

/// The metrics the request log keeps: handles on families the data plane registered.
#[derive(Debug, Clone)]
pub struct RequestMetrics {
    /// `request_duration_seconds`
    pub request_duration: RequestHistograms,
    /// `request_first_byte_seconds`
    pub request_first_byte: RequestHistograms,
    /// `served_bytes_total`
    pub served_bytes: Family<RequestLabels, Counter>,
    /// `access_log_lines_total`
    pub access_log_lines: Counter,
    /// `access_log_dropped_total{reason}`
    pub access_log_dropped: Family<[(&'static str, String); 1], Counter>,
    /// `http2_streams_total{result}`
    pub http2_streams: Family<[(&'static str, String); 1], Counter>,
}

impl RequestMetrics {
    /// The counter of access-log lines dropped for `reason`.
    pub fn access_log_dropped(&self, reason: &'static str) -> Counter {
        self.access_log_dropped
            .get_or_create(&[("reason", reason.to_string())])
            .clone()
    }

    /// The counter of HTTP/2 streams that ended as `result` (`completed`, `cancelled`).
    pub fn http2_streams(&self, result: &'static str) -> Counter {
        self.http2_streams
            .get_or_create(&[("result", result.to_string())])
            .clone()
    }
}

/// The site a request was routed to, in its extensions: the data plane's router puts it there,
/// the request log reads its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteId {
    /// Its place in the data plane's list of sites.
    pub index: usize,
    /// Its name, as metric labels carry it.
    pub label: &'static str,
}

/// The request log of the process, shared by the workers.
#[derive(Debug)]
pub struct RequestLog {
    format: Format,
    /// The share of requests written.
    sampling: Share,
    /// `None` when the access log is off (or stdout could not be duplicated).
    queue: Option<crate::line_queue::Queue>,
    metrics: RequestMetrics,
    /// `Some` when tracing is on (src/trace.rs has the spans of a request).
    tracer: Option<Arc<edgecache_trace::Tracer>>,
    /// This cache's name as its Cache-Status member starts.
    member_name: String,
    seed: u64,
}

impl RequestLog {
    /// Start the access log as `cfg` says (its writer thread unless it is off) and keep the
    /// request histograms in `metrics`. `cache_name` is `cache.name`. With a `tracer`,
    /// each sampled request is a span too.
    pub fn start(
        cfg: &Settings,
        cache_name: &str,
        metrics: RequestMetrics,
        tracer: Option<Arc<edgecache_trace::Tracer>>,
    ) -> Self {
        let mut format = cfg.format;
        let mut queue = None;
        let sampling = Share::of(cfg.sample);
        if format != Format::Off && sampling != Share::None {
            let started = std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .and_then(|fd| {
                    crate::line_queue::Queue::start(
                        "access-log",
                        std::fs::File::from(fd),
                        crate::line_queue::QUEUE_BYTES,
                        crate::line_queue::Counters {
                            lines: metrics.access_log_lines.clone(),
                            queue_full: metrics.access_log_dropped("queue_full"),
                            write_errors: metrics.access_log_dropped("write_error"),
                        },
                    )
                });
            match started {
                Ok(q) => {
                    info!(
                        format = format.as_str(),
                        sample = cfg.sample,
                        "access log to stdout"
                    );
                    queue = Some(q);
                }
                Err(e) => {
                    warn!("access log off: cannot start its writer on stdout: {e}");
                    format = Format::Off;
                }
            }
        }
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        Self {
            format,
            sampling,
            queue,
            metrics,
            tracer,
            member_name: edgecache_policy::status::CacheStatus::none(cache_name).to_string(),
            seed,
        }
    }

    /// Wait (at most `timeout`) until the lines queued so far are written (at shutdown).
    pub fn flush(&self, timeout: Duration) {
        if let Some(q) = &self.queue
            && !q.flush(timeout)
        {
            warn!("access log: stdout did not take the last lines within {timeout:?}");
        }
    }
}

/// The `site` label of a request no site took (a bad or unknown host, an unreadable head).
pub const UNROUTED: &str = "unknown";

/// Seeds of the workers' draws, one apart each.
static WORKERS: AtomicU64 = AtomicU64::new(0);

/// The handles of one label set: duration, time to first byte, body bytes sent.
type Handles = (Histogram, Histogram, Counter);

/// One worker's handle on the request log. It keeps its own copies of the site labels and
/// histogram handles it has used, so a request takes no lock the workers share.
#[derive(Debug)]
pub struct WorkerLog {
    shared: Arc<RequestLog>,
    /// The state of this worker's draws (splitmix64).
    draw: Cell<u64>,
    /// By outcome, status class and site (its label's address: each name is kept once).
    /// Keyed by label sets of the process's own (foldhash, not SipHash: no client picks them).
    handles:
        RefCell<HashMap<(CacheOutcome, &'static str, usize), Handles, foldhash::fast::RandomState>>,
    /// `http2_streams_total{result="completed"}` and `{result="cancelled"}`, once used.
    h2_streams: RefCell<Option<(Counter, Counter)>>,
}

impl WorkerLog {
    pub fn new(shared: Arc<RequestLog>) -> Rc<Self> {
        let n = WORKERS.fetch_add(1, Ordering::Relaxed);
        let draw = Cell::new(mix64(shared.seed ^ n.wrapping_mul(GOLDEN)));
        Rc::new(Self {
            shared,
            draw,
            handles: RefCell::default(),
            h2_streams: RefCell::default(),
        })
    }

    /// An HTTP/2 stream ended, whole or not.
    fn stream_ended(&self, completed: bool) {
        let mut c = self.h2_streams.borrow_mut();
        let (done, cancelled) = c.get_or_insert_with(|| {
            let m = &self.shared.metrics;
            (m.http2_streams("completed"), m.http2_streams("cancelled"))
        });
        if completed {
            done.inc()
        } else {
            cancelled.inc()
        };
    }

    /// The histograms of one label set.
    fn histograms(&self, cache: CacheOutcome, status: &'static str, site: &'static str) -> Handles {
        let key = (cache, status, site.as_ptr() as usize);
        if let Some(h) = self.handles.borrow().get(&key) {
            return h.clone();
        }
        let labels = [
            ("cache", cache.as_str()),
            ("status", status),
            ("site", site),
        ];
        let m = &self.shared.metrics;
        let h = (
            m.request_duration.get_or_create(&labels).clone(),
            m.request_first_byte.get_or_create(&labels).clone(),
            m.served_bytes.get_or_create(&labels).clone(),
        );
        self.handles.borrow_mut().insert(key, h.clone());
        h
    }

    /// Whether this request is in the access log: a draw of its own, random-looking and fixed
    /// once made, against the configured share.
    fn sampled(&self) -> bool {
        self.shared.queue.is_some()
            && self.shared.sampling.admits(|| {
                let s = self.draw.get().wrapping_add(GOLDEN);
                self.draw.set(s);
                mix64(s)
            })
    }

    /// A request whose head the handler has just read, on a connection that is `conn` (`None`
    /// when unknown). When it is logged, an [`UpstreamNote`] goes into its extensions for the
    /// origin client to fill in.
    pub fn begin(
        self: &Rc<Self>,
        parts: &mut request::Parts,
        client: SocketAddr,
        conn: Option<ConnInfo>,
    ) -> Exchange {
        // What the router (the data plane's sites) left: the normalised authority and the site
        // (none for a request refused before it had either).
        let host = parts
            .extensions
            .get::<edgecache_policy::Authority>()
            .map_or("", |a| a.as_str());
        let site = parts
            .extensions
            .get::<SiteId>()
            .map_or(UNROUTED, |s| s.label);
        let line = self.sampled().then(|| {
            let text = |name| {
                parts
                    .headers
                    .get(name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            };
            Box::new(RequestLine {
                time: SystemTime::now(),
                client,
                method: Some(parts.method.clone()),
                host: host.to_string(),
                target: parts
                    .uri
                    .path_and_query()
                    .map_or_else(|| parts.uri.to_string(), |p| p.as_str().to_string()),
                protocol: conn_info::protocol_name(conn.as_ref(), parts.version),
                tls: conn.and_then(|c| c.tls_version),
                user_agent: text(header::USER_AGENT),
                referer: text(header::REFERER),
                note: UpstreamNote::default(),
                cache_status: None,
            })
        });
        if let Some(l) = &line {
            parts.extensions.insert(l.note.clone());
        }
        let head_only = parts.method == Method::HEAD;
        let h2 = parts.version == http::Version::HTTP_2;
        let mut rec = Record::new(self.clone(), site, line, head_only, h2);
        // Off (the default), a request's whole cost of tracing is this branch.
        if let Some(tracer) = &self.shared.tracer {
            rec.span = crate::trace::request_span(tracer, parts, site);
        }
        Exchange { rec: Some(rec) }
    }

    /// A request hyper answered itself, `status`, because it could not read its head (400 for
    /// a malformed one, 414 or 431 for one too long): logged with `-` for what it did not read,
    /// and observed with cache outcome `none` and the site [`UNROUTED`].
    pub fn refused(self: &Rc<Self>, client: SocketAddr, conn: ConnInfo, status: u16) {
        let line = self.sampled().then(|| {
            Box::new(RequestLine {
                time: SystemTime::now(),
                client,
                method: None,
                host: String::new(),
                target: "-".into(),
                protocol: conn_info::protocol_name(Some(&conn), http::Version::HTTP_11),
                tls: conn.tls_version,
                user_agent: None,
                referer: None,
                note: UpstreamNote::default(),
                cache_status: None,
            })
        });
        let mut rec = Record::new(self.clone(), UNROUTED, line, true, false);
        rec.status = status;
        rec.ttfb = Some(Duration::ZERO);
        rec.ended = Some(rec.start);
        rec.completed = true;
        // Observed and logged as it goes.
        drop(rec);
    }
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's finalizer (the peer ring's hash uses it too): a draw from the state.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where a logged request's fetches went, filled in by the origin client (the data plane's
/// `origin` module) from
/// the connection it used. It rides in the request's extensions, and is copied onto the
/// requests sent for it to the origin or a peer; a request the proxy sends on its own (a
/// background revalidation) must not carry it.
#[derive(Debug, Clone, Default)]
pub struct UpstreamNote {
    /// The origin's address and the owner node's.
    addrs: Arc<Mutex<(Option<SocketAddr>, Option<SocketAddr>)>>,
}

impl UpstreamNote {
    /// The request reached `addr`: the origin, or the key's owner (`peer`).
    pub fn contacted(&self, addr: SocketAddr, peer: bool) {
        let mut a = self.addrs.lock().unwrap_or_else(|p| p.into_inner());
        if peer {
            a.1 = Some(addr);
        } else {
            a.0 = Some(addr);
        }
    }

    fn get(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        *self.addrs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a logged request said about itself.
#[derive(Debug)]
struct RequestLine {
    time: SystemTime,
    client: SocketAddr,
    /// `None` for a request refused before its head was read whole (logged as `-`).
    method: Option<Method>,
    host: String,
    target: String,
    protocol: &'static str,
    tls: Option<&'static str>,
    user_agent: Option<String>,
    referer: Option<String>,
    note: UpstreamNote,
    /// This cache's Cache-Status member, from the response.
    cache_status: Option<String>,
}

/// One request on its way: observed and logged when dropped.
pub struct Exchange {
    rec: Option<Record>,
}

impl Exchange {
    /// The response head is ready for hyper: note it, and count its body as it goes out.
    pub fn respond(mut self, resp: Response<Body>) -> Response<Body> {
        let Some(mut rec) = self.rec.take() else {
            return resp;
        };
        rec.ttfb = Some(rec.start.elapsed());
        rec.status = resp.status().as_u16();
        rec.head_only |= matches!(rec.status, 100..=199 | 204 | 304);
        rec.length = resp
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let member = outcome::own_member(resp.headers(), &rec.log.shared.member_name);
        rec.cache = outcome::classify(member);
        if let Some(line) = &mut rec.line {
            line.cache_status = member.map(str::to_string);
        }
        resp.map(|inner| -> Body { Box::pin(Counted { inner, rec }) })
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if let Some(rec) = &mut self.rec {
            // Dropped before a response head: the client went away.
            rec.status = 499;
            rec.ended = Some(Instant::now());
        }
    }
}

/// Everything known of a request so far; observed and logged when dropped.
struct Record {
    log: Rc<WorkerLog>,
    start: Instant,
    site: &'static str,
    /// `Some` when the request is in the access log.
    line: Option<Box<RequestLine>>,
    /// HEAD, or a status without a body: nothing to send after the head.
    head_only: bool,
    /// An HTTP/2 stream: counted in `http2_streams_total`.
    h2: bool,
    status: u16,
    cache: CacheOutcome,
    ttfb: Option<Duration>,
    bytes: u64,
    /// The response's Content-Length: hyper stops polling a body once that much went out.
    length: Option<u64>,
    /// When the body ended, failed or was dropped.
    ended: Option<Instant>,
    completed: bool,
    /// The request's span, when it is traced.
    span: Option<Box<edgecache_trace::Span>>,
}

impl Record {
    /// A request whose head was read now: no response yet.
    fn new(
        log: Rc<WorkerLog>,
        site: &'static str,
        line: Option<Box<RequestLine>>,
        head_only: bool,
        h2: bool,
    ) -> Self {
        Record {
            log,
            start: Instant::now(),
            site,
            line,
            head_only,
            h2,
            status: 0,
            cache: CacheOutcome::None,
            ttfb: None,
            bytes: 0,
            length: None,
            ended: None,
            completed: false,
            span: None,
        }
    }

    /// The whole body went out (as far as the body knows).
    fn whole(&self) -> bool {
        self.head_only || self.length == Some(self.bytes)
    }

    fn end(&mut self, completed: bool) {
        if self.ended.is_none() {
            self.ended = Some(Instant::now());
            self.completed = completed;
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(mut span) = self.span.take() {
            crate::trace::end_request(
                &mut span,
                self.status,
                self.cache.as_str(),
                self.bytes,
                self.completed,
                self.ended,
            );
        }
        let total = self.ended.unwrap_or_else(Instant::now) - self.start;
        let (duration, first_byte, served) =
            self.log
                .histograms(self.cache, status_class(self.status), self.site);
        duration.observe(total.as_secs_f64());
        served.inc_by(self.bytes);
        if let Some(t) = self.ttfb {
            first_byte.observe(t.as_secs_f64());
        }
        if self.h2 {
            self.log.stream_ended(self.completed);
        }
        let shared = &self.log.shared;
        let (Some(r), Some(queue)) = (self.line.take(), &shared.queue) else {
            return;
        };
        let (origin, peer) = r.note.get();
        let line = format::Line {
            time: r.time,
            client: r.client,
            method: r.method.as_ref().map_or("-", Method::as_str),
            host: &r.host,
            target: &r.target,
            protocol: r.protocol,
            tls: r.tls,
            status: self.status,
            bytes: self.bytes,
            cache: self.cache.as_str(),
            cache_status: r.cache_status.as_deref(),
            ttfb: self.ttfb,
            total,
            origin,
            peer,
            completed: self.completed,
            user_agent: r.user_agent.as_deref(),
            referer: r.referer.as_deref(),
        };
        let mut out = String::with_capacity(512);
        match shared.format {
            Format::Combined => format::combined(&line, &mut out),
            _ => format::json(&line, &mut out),
        }
        queue.push(out);
    }
}

/// The status class label: `1xx` to `5xx`.
fn status_class(status: u16) -> &'static str {
    match status / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        5 => "5xx",
        _ => "other",
    }
}

/// A response body that counts the bytes it yields into its request's record.
struct Counted {
    inner: Body,
    rec: Record,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        let polled = this.inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.rec.bytes += d.len() as u64;
                }
                if this.inner.is_end_stream() || this.rec.whole() {
                    this.rec.end(true);
                }
            }
            Poll::Ready(Some(Err(_))) => this.rec.end(false),
            Poll::Ready(None) => this.rec.end(true),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        // hyper drops a body it has written whole without polling it to its end, and never
        // polls one it must not send (HEAD, 304).
        let whole = self.rec.whole() || self.inner.is_end_stream();
        self.rec.end(whole);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draws_spread_over_the_share() {
        let share = Share::of(0.25);
        let mut s = 12345u64;
        let n = 100_000;
        let hits = (0..n)
            .filter(|_| {
                share.admits(|| {
                    s = s.wrapping_add(GOLDEN);
                    mix64(s)
                })
            })
            .count();
        let share = hits as f64 / n as f64;
        assert!((0.24..0.26).contains(&share), "{share}");
    }

    #[test]
    fn status_classes() {
        for (s, c) in [
            (101, "1xx"),
            (200, "2xx"),
            (304, "3xx"),
            (499, "4xx"),
            (503, "5xx"),
        ] {
            assert_eq!(status_class(s), c);
        }
    }
}
