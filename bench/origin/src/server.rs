//! The HTTP server.

use crate::files::{self, Files};
use crate::pattern::{MAX_SIZE, Pattern, parse_size};
use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, Empty, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// Chunk size for streamed bodies (chunked, cut, slow, and large objects).
const STREAM_CHUNK: u64 = 64 * 1024;
/// Bodies up to this size are built in one piece; larger ones are streamed.
const FULL_BODY_MAX: u64 = 4 << 20;

/// Options of an origin server.
#[derive(Debug, Clone)]
pub struct OriginOptions {
    /// `max-age` of the default `Cache-Control: public, max-age=N`.
    pub max_age: u64,
    /// Runtime worker threads (1 = a current-thread runtime).
    pub threads: usize,
    /// Delay before every response head, in addition to `?delay_ms=`.
    pub delay: Duration,
    /// The `Last-Modified` of every object (also the base for If-Modified-Since).
    pub last_modified: SystemTime,
    /// Log each request at debug level.
    pub log_requests: bool,
    /// Serve this directory's files under `/files/<relative path>` (read at start).
    pub files_dir: Option<PathBuf>,
}

impl Default for OriginOptions {
    fn default() -> Self {
        OriginOptions {
            max_age: 3600,
            threads: 2,
            delay: Duration::ZERO,
            // 2026-01-01T00:00:00Z: fixed, so validators are stable across restarts.
            last_modified: UNIX_EPOCH + Duration::from_secs(1_767_225_600),
            log_requests: false,
            files_dir: None,
        }
    }
}

const SHARDS: usize = 16;

/// Request counters, shared by all connections.
#[derive(Default)]
pub(crate) struct Stats {
    requests: AtomicU64,
    body_bytes: AtomicU64,
    not_modified: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    paths: [Mutex<HashMap<String, u64>>; SHARDS],
}

fn shard_of(key: &str) -> usize {
    let mut h: u32 = 2_166_136_261;
    for b in key.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    h as usize % SHARDS
}

impl Stats {
    fn count(&self, key: &str) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut m = match self.paths[shard_of(key)].lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        match m.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                m.insert(key.to_owned(), 1);
            }
        }
    }

    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub(crate) fn requests_for(&self, key: &str) -> u64 {
        let m = match self.paths[shard_of(key)].lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        m.get(key).copied().unwrap_or(0)
    }

    pub(crate) fn body_bytes(&self) -> u64 {
        self.body_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn max_in_flight(&self) -> u64 {
        self.max_in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn reset(&self) {
        for s in &self.paths {
            match s.lock() {
                Ok(mut m) => m.clear(),
                Err(p) => p.into_inner().clear(),
            }
        }
        self.requests.store(0, Ordering::Relaxed);
        self.body_bytes.store(0, Ordering::Relaxed);
        self.not_modified.store(0, Ordering::Relaxed);
        self.max_in_flight
            .store(self.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Every counted request target and its count.
    pub(crate) fn snapshot(&self) -> HashMap<String, u64> {
        let mut all = HashMap::new();
        for s in &self.paths {
            let m = match s.lock() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            all.extend(m.iter().map(|(k, v)| (k.clone(), *v)));
        }
        all
    }

    fn json(&self, path_query: Option<&str>, dump: bool) -> String {
        let snap = self.snapshot();
        let max_per = snap.values().copied().max().unwrap_or(0);
        let mut v = serde_json::json!({
            "requests": self.requests(),
            "body_bytes": self.body_bytes(),
            "not_modified": self.not_modified.load(Ordering::Relaxed),
            "distinct_paths": snap.len(),
            "max_per_path": max_per,
            "in_flight": self.in_flight.load(Ordering::Relaxed),
            "max_in_flight": self.max_in_flight(),
        });
        if let Some(p) = path_query {
            v["path"] = serde_json::Value::from(p);
            v["path_requests"] = serde_json::Value::from(snap.get(p).copied().unwrap_or(0));
        }
        if dump {
            v["paths"] = serde_json::to_value(&snap).unwrap_or_default();
        }
        v.to_string()
    }
}

/// Decrements the in-flight gauge when the response (head and body) is done.
struct InFlight(Arc<Stats>);

impl InFlight {
    fn new(st: &Arc<Stats>) -> InFlight {
        let now = st.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        st.max_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(st.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Shared {
    opts: OriginOptions,
    files: Files,
    stats: Arc<Stats>,
    last_modified_http: String,
}

/// A running origin. Shuts down (and joins its thread) when dropped.
pub struct OriginHandle {
    addr: SocketAddr,
    stats: Arc<Stats>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl OriginHandle {
    /// Bind `addr` (port 0 picks a free port) and serve on a thread of its own
    /// with its own tokio runtime. Usable from sync and async code alike.
    pub fn start(addr: SocketAddr, opts: OriginOptions) -> io::Result<OriginHandle> {
        let listener = bind(addr)?;
        let local = listener.local_addr()?;
        let stats = Arc::new(Stats::default());
        let files = match &opts.files_dir {
            Some(d) => {
                let f = Files::load(d)?;
                tracing::info!(dir = %d.display(), files = f.len(), "serving files under /files/");
                f
            }
            None => Files::default(),
        };
        let shared = Arc::new(Shared {
            files,
            last_modified_http: httpdate::fmt_http_date(opts.last_modified),
            opts,
            stats: stats.clone(),
        });
        let (tx, rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let thread = thread::Builder::new()
            .name(format!("origin-{}", local.port()))
            .spawn(move || {
                let threads = shared.opts.threads.max(1);
                let rt = if threads == 1 {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                } else {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(threads)
                        .thread_name("origin-worker")
                        .enable_all()
                        .build()
                };
                let rt = match rt {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let l = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    accept_loop(l, shared, rx).await;
                });
                rt.shutdown_background();
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("origin thread exited during startup")),
        }
        Ok(OriginHandle {
            addr: local,
            stats,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Total counted requests (everything except `/__*`).
    pub fn requests(&self) -> u64 {
        self.stats.requests()
    }

    /// Requests for one request target, as received: path plus `?query` if any
    /// (`/obj/4k/1`, `/obj/4k/1?cut=10`).
    pub fn requests_for(&self, path_and_query: &str) -> u64 {
        self.stats.requests_for(path_and_query)
    }

    /// Body bytes of all counted responses (full object sizes, also for HEAD/cut).
    pub fn body_bytes(&self) -> u64 {
        self.stats.body_bytes()
    }

    /// Requests in progress now (a response whose body is not yet finished or dropped).
    pub fn in_flight(&self) -> u64 {
        self.stats.in_flight()
    }

    /// Highest number of requests in progress at the same time since the last reset.
    pub fn max_in_flight(&self) -> u64 {
        self.stats.max_in_flight()
    }

    /// Every counted request target with its count.
    pub fn counts(&self) -> HashMap<String, u64> {
        self.stats.snapshot()
    }

    /// Reset all counters.
    pub fn reset(&self) {
        self.stats.reset()
    }

    /// Stop serving and wait for the server thread to end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for OriginHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Start an origin (see [`OriginHandle::start`]); async flavour for async tests.
pub async fn spawn(addr: SocketAddr, opts: OriginOptions) -> io::Result<OriginHandle> {
    OriginHandle::start(addr, opts)
}

/// Start an origin from sync code (see [`OriginHandle::start`]).
pub fn spawn_blocking(addr: SocketAddr, opts: OriginOptions) -> io::Result<OriginHandle> {
    OriginHandle::start(addr, opts)
}

fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

async fn accept_loop(
    l: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => break,
            r = l.accept() => match r {
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| {
                            let shared = shared.clone();
                            async move { Ok::<_, Infallible>(handle(req, shared).await) }
                        });
                        let _ = http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(s), svc)
                            .await;
                    });
                }
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// Query parameters understood on `/obj/...`.
#[derive(Default, Debug)]
struct Query {
    /// None: default; Some(None): omit the header; Some(Some(v)): this value.
    cc: Option<Option<String>>,
    delay_ms: u64,
    chunked: bool,
    status: Option<u16>,
    cut: Option<u64>,
    slow_ms: u64,
    headers: Vec<(String, String)>,
    /// Answer with `x-origin-host`: the Host header this request carried.
    echo_host: bool,
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> Result<Query, String> {
    let mut out = Query::default();
    let Some(q) = q else { return Ok(out) };
    for kv in q.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = percent_decode(v);
        let num = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("bad value for {k}: {v:?}"))
        };
        match k {
            "cc" => {
                out.cc = Some(if v.is_empty() || v == "none" {
                    None
                } else {
                    Some(v)
                });
            }
            "delay_ms" => out.delay_ms = num(&v)?,
            "chunked" => out.chunked = v != "0" && v != "false",
            "status" => {
                let s = num(&v)?;
                if !(100..=999).contains(&s) || (100..200).contains(&s) {
                    return Err(format!("bad status {s}"));
                }
                out.status = Some(s as u16);
            }
            "cut" => out.cut = Some(parse_size(&v).ok_or_else(|| format!("bad cut {v:?}"))?),
            "slow_ms" => out.slow_ms = num(&v)?,
            "echo_host" => out.echo_host = v != "0" && v != "false",
            "hdr" => {
                let (n, val) = v
                    .split_once(':')
                    .ok_or_else(|| format!("hdr must be Name:Value, got {v:?}"))?;
                out.headers
                    .push((n.trim().to_owned(), val.trim().to_owned()));
            }
            _ => {} // unknown parameters are ignored (cache busters etc.)
        }
    }
    Ok(out)
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let body: Bytes = body.into();
    let mut r = Response::new(Full::new(body).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    r
}

fn etag_of(size: u64, id: &str) -> String {
    format!("\"{size:x}-{id}\"")
}

fn etag_matches(inm: &str, etag: &str) -> bool {
    inm.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let path = req.uri().path();
    match path {
        "/__stats" => {
            let q = req.uri().query().unwrap_or("");
            let mut which = None;
            let mut dump = false;
            for kv in q.split('&') {
                match kv.split_once('=') {
                    Some(("path", p)) => which = Some(percent_decode(p)),
                    Some(("paths", v)) => dump = v != "0",
                    _ => {}
                }
            }
            let mut r = text(StatusCode::OK, shared.stats.json(which.as_deref(), dump));
            r.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            r.headers_mut()
                .insert("cache-control", HeaderValue::from_static("no-store"));
            return r;
        }
        "/__reset" => {
            if req.method() != Method::POST {
                return text(StatusCode::METHOD_NOT_ALLOWED, "POST /__reset\n");
            }
            shared.stats.reset();
            return text(StatusCode::OK, "ok\n");
        }
        "/__health" => return text(StatusCode::OK, "ok\n"),
        _ => {}
    }

    let target = req
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or(path);
    shared.stats.count(target);
    let guard = InFlight::new(&shared.stats);
    if shared.opts.log_requests {
        tracing::debug!(method = %req.method(), target, "request");
    }

    if path.starts_with(files::PREFIX) {
        return file_response(&req, &shared, guard);
    }
    let Some(rest) = path.strip_prefix("/obj/") else {
        return text(StatusCode::NOT_FOUND, "not found: use /obj/<size>/<id>\n");
    };
    let Some((size_s, id)) = rest.split_once('/') else {
        return text(StatusCode::NOT_FOUND, "not found: use /obj/<size>/<id>\n");
    };
    let Some(size) = parse_size(size_s).filter(|s| *s <= MAX_SIZE) else {
        return text(StatusCode::BAD_REQUEST, format!("bad size {size_s:?}\n"));
    };
    if !valid_id(id) {
        return text(StatusCode::BAD_REQUEST, format!("bad id {id:?}\n"));
    }
    let q = match parse_query(req.uri().query()) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    let head_only = match *req.method() {
        Method::GET => false,
        Method::HEAD => true,
        // An unsafe method succeeds (and changes nothing): caches invalidate the URI on it.
        Method::POST | Method::PUT | Method::DELETE => {
            drop(guard);
            return text(StatusCode::OK, "accepted\n");
        }
        _ => return text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD\n"),
    };

    let delay = shared.opts.delay + Duration::from_millis(q.delay_ms);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }

    let etag = etag_of(size, id);
    let cache_control = match &q.cc {
        None => Some(format!("public, max-age={}", shared.opts.max_age)),
        Some(v) => v.clone(),
    };

    let mut status = q
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);

    // Conditional requests (only for what would otherwise be a 200).
    if status == StatusCode::OK {
        let h = req.headers();
        let not_modified = if let Some(inm) = h.get("if-none-match") {
            inm.to_str()
                .map(|v| etag_matches(v, &etag))
                .unwrap_or(false)
        } else if let Some(ims) = h.get("if-modified-since") {
            ims.to_str()
                .ok()
                .and_then(|v| httpdate::parse_http_date(v).ok())
                .map(|t| shared.opts.last_modified <= t)
                .unwrap_or(false)
        } else {
            false
        };
        if not_modified {
            status = StatusCode::NOT_MODIFIED;
            shared.stats.not_modified.fetch_add(1, Ordering::Relaxed);
        }
    }

    let no_body =
        head_only || status == StatusCode::NOT_MODIFIED || status == StatusCode::NO_CONTENT;
    let pattern = Pattern::new(size, id);
    let body: Body = if no_body {
        drop(guard);
        Empty::new().map_err(|e| match e {}).boxed()
    } else {
        shared.stats.body_bytes.fetch_add(size, Ordering::Relaxed);
        let limit = q.cut.map(|c| c.min(size)).unwrap_or(size);
        let cut = q.cut.is_some_and(|c| c < size);
        if !q.chunked && !cut && q.slow_ms == 0 && size <= FULL_BODY_MAX {
            drop(guard);
            Full::new(pattern.range(0, size))
                .map_err(|e| match e {})
                .boxed()
        } else {
            stream_body(pattern, limit, cut, Duration::from_millis(q.slow_ms), guard)
        }
    };

    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    if status != StatusCode::NOT_MODIFIED && status != StatusCode::NO_CONTENT && !q.chunked {
        h.insert("content-length", HeaderValue::from(size));
    }
    if status != StatusCode::NOT_MODIFIED {
        h.insert(
            "content-type",
            HeaderValue::from_static("application/octet-stream"),
        );
    }
    if let Some(cc) = cache_control.and_then(|v| HeaderValue::from_str(&v).ok()) {
        h.insert("cache-control", cc);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert("etag", v);
    }
    if let Ok(v) = HeaderValue::from_str(&shared.last_modified_http) {
        h.insert("last-modified", v);
    }
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(SystemTime::now())) {
        h.insert("date", v);
    }
    if q.echo_host {
        let host = req.headers().get_all("host").iter().cloned();
        for v in host {
            h.append("x-origin-host", v);
        }
    }
    for (n, v) in &q.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.append(n, v);
        }
    }
    resp
}

/// `/files/...` (`--dir`): the file as it is on disk, with a strong ETag; If-None-Match gets
/// a 304.
fn file_response(req: &Request<Incoming>, shared: &Shared, guard: InFlight) -> Response<Body> {
    drop(guard);
    let Some(f) = shared.files.get(req.uri().path()) else {
        return text(StatusCode::NOT_FOUND, "no such file\n");
    };
    let head_only = match *req.method() {
        Method::GET => false,
        Method::HEAD => true,
        _ => return text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD\n"),
    };
    let not_modified = req
        .headers()
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| etag_matches(v, &f.etag));
    let mut resp = if not_modified || head_only {
        if not_modified {
            shared.stats.not_modified.fetch_add(1, Ordering::Relaxed);
        }
        Response::new(Empty::new().map_err(|e| match e {}).boxed())
    } else {
        shared
            .stats
            .body_bytes
            .fetch_add(f.body.len() as u64, Ordering::Relaxed);
        Response::new(Full::new(f.body.clone()).map_err(|e| match e {}).boxed())
    };
    if not_modified {
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let h = resp.headers_mut();
    if !not_modified {
        h.insert("content-length", HeaderValue::from(f.body.len()));
        h.insert("content-type", HeaderValue::from_static(f.content_type));
    }
    let cc = format!("public, max-age={}", shared.opts.max_age);
    for (name, value) in [
        ("cache-control", cc.as_str()),
        ("etag", f.etag.as_str()),
        ("last-modified", shared.last_modified_http.as_str()),
        ("date", httpdate::fmt_http_date(SystemTime::now()).as_str()),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    }
    resp
}

#[derive(Debug)]
struct CutError;

impl std::fmt::Display for CutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("response cut on purpose (?cut=)")
    }
}

impl std::error::Error for CutError {}

fn stream_body(p: Pattern, limit: u64, cut: bool, slow: Duration, guard: InFlight) -> Body {
    struct St {
        p: Pattern,
        off: u64,
        limit: u64,
        cut: bool,
        slow: Duration,
        done: bool,
        _guard: InFlight,
    }
    let st = St {
        p,
        off: 0,
        limit,
        cut,
        slow,
        done: false,
        _guard: guard,
    };
    let s = stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        if st.off >= st.limit {
            st.done = true;
            if st.cut {
                // Let hyper flush the head and the bytes sent so far: it flushes
                // when the body is pending, and drops its buffer on an error.
                tokio::time::sleep(Duration::from_millis(20)).await;
                return Some((Err(Box::new(CutError) as BoxError), st));
            }
            return None;
        }
        if !st.slow.is_zero() && st.off > 0 {
            tokio::time::sleep(st.slow).await;
        }
        let end = (st.off + STREAM_CHUNK).min(st.limit);
        let data = st.p.range(st.off, end);
        st.off = end;
        Some((Ok(Frame::data(data)), st))
    });
    BodyExt::boxed(StreamBody::new(s))
}
