//! The admin endpoint: `/healthz`, `/readyz`, `/metrics` (Prometheus text), `PURGE` of a
//! URL (`curl -X PURGE -H 'Host: www.example' http://ADMIN/path?query` removes every stored
//! variant of `http://www.example/path?query`), and `POST /purge?...` for purges by prefix,
//! tag or everything, soft or hard (edgecache_purge::purges). When sharding is on, `GET /peers`
//! shows the peer list in force and `PUT /peers` (the peers file's format) replaces it at once:
//! the operator pushes it so, a ConfigMap volume being refreshed only a minute or more later
//! (edgecache_fleet::sharding).
//!
//! Mutating calls need the bearer token of `adminAccess.tokenFile` (src/admin/access.rs). The
//! listener has the client listener's header timeout, caps on open connections per address and
//! in all where a new connection takes the place of an idle one (src/admin/conns.rs: idle
//! connections cannot lock the probes out), one log line per interval for what the caps do, and
//! backs off when accept fails (EMFILE) instead of spinning.

mod access;
mod conns;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgecache_store::Store;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, warn};

pub use access::{Expected, TokenSource};
use access::{Need, Verdict};
use conns::{Admit, LogEvery, Slots};

use crate::clock::Clock;
use crate::key;
use crate::purges::Refused;

/// What the admin endpoint reads.
pub struct Admin {
    pub registry: Registry,
    pub store: Arc<Store>,
    pub ready: Arc<AtomicBool>,
    pub clock: Arc<Clock>,
    pub token: TokenSource,
    /// `/metrics` without the token.
    pub metrics_public: bool,
    /// Time allowed for a request head (and for an idle keep-alive connection).
    pub header_timeout: Duration,
    /// Open connections per client address (`clients.maxAdminConnectionsPerIp`).
    pub max_connections_per_ip: u32,
    /// Purge rules (`POST /purge`).
    pub purges: Arc<crate::purges::Purges>,
    /// This node's name, in purge answers (empty when not set).
    pub node: String,
    /// The sites: a purged URL gets its site's query rules, as the request that stored it did.
    pub sites: Arc<crate::sites::Sites>,
    /// Fills answered while their store write lands: what reads or changes the store waits for
    /// those answered before it (dataplane/serve/src/landing.rs).
    pub landing: Arc<crate::landing::Landing>,
    /// The peer list (`GET` and `PUT /peers`), when sharding is on.
    pub sharding: Option<Arc<crate::sharding::Sharding>>,
}

/// How long a metrics scrape or a purge waits at most for the store writes of fills already
/// answered (a disk whose writes hang does not hang the admin endpoint).
const SETTLE_WITHIN: Duration = Duration::from_secs(1);

/// How often at most a line says what the connection caps did (with how many times).
const CAPS_LOG_EVERY: Duration = Duration::from_secs(10);

type Resp = Response<Full<Bytes>>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

impl Admin {
    /// What a call needs.
    fn need(&self, req: &Request<Incoming>) -> Need {
        match (req.method().as_str(), req.uri().path()) {
            ("GET" | "HEAD", "/metrics") if !self.metrics_public => Need::Token,
            ("GET" | "HEAD", _) => Need::Open,
            // PURGE, the debug hooks and anything else that is not a read.
            _ => Need::Token,
        }
    }

    /// Whether a call reads or changes what is stored: it first waits for the fills answered
    /// before it to land.
    fn settles(&self, req: &Request<Incoming>) -> bool {
        matches!(
            (req.method().as_str(), req.uri().path()),
            ("GET" | "HEAD", "/metrics") | ("PURGE", _) | ("POST", "/purge")
        )
    }

    /// The answer to a call its caller may not make, if it may not.
    fn refusal(&self, req: &Request<Incoming>, peer: SocketAddr) -> Option<Resp> {
        let need = self.need(req);
        // The token file is read only for calls that need it, not for every probe and scrape.
        let expected = match need {
            Need::Open => access::Expected::None,
            Need::Token => self.token.expected(),
        };
        let verdict = access::decide(need, &expected, peer.ip(), req.headers());
        if verdict != Verdict::Allow {
            warn!(
                %peer,
                method = %req.method(),
                path = req.uri().path(),
                verdict = verdict.as_str(),
                "admin call refused"
            );
            return Some(refused(verdict));
        }
        None
    }

    /// The answer to an allowed call.
    fn answer(&self, req: &Request<Incoming>) -> Resp {
        match (req.method().as_str(), req.uri().path()) {
            ("GET", "/healthz") => text(StatusCode::OK, "ok\n"),
            ("GET", "/readyz") => {
                if self.ready.load(Ordering::Acquire) {
                    text(StatusCode::OK, "ready\n")
                } else {
                    text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: the store is opening\n",
                    )
                }
            }
            ("GET", "/metrics") => {
                let mut out = String::new();
                match prometheus_client::encoding::text::encode(&mut out, &self.registry) {
                    Ok(()) => {
                        let mut r = text(StatusCode::OK, out);
                        r.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static(
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            ),
                        );
                        r
                    }
                    Err(e) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("cannot encode metrics: {e}\n"),
                    ),
                }
            }
            ("GET", "/peers") => match &self.sharding {
                Some(s) => text(StatusCode::OK, s.list_text()),
                None => text(StatusCode::NOT_FOUND, "sharding is off: no peer list\n"),
            },
            ("PURGE", _) => self.purge(req),
            ("POST", "/purge") => self.purge_rules(req),
            ("POST", "/debug/clock") if self.clock.adjustable() => {
                let secs = req
                    .uri()
                    .query()
                    .and_then(|q| q.strip_prefix("advance="))
                    .and_then(|n| n.parse().ok());
                match secs {
                    Some(n) if self.clock.advance(n) => {
                        text(StatusCode::OK, format!("clock advanced by {n}s\n"))
                    }
                    _ => text(
                        StatusCode::BAD_REQUEST,
                        "use POST /debug/clock?advance=SECONDS\n",
                    ),
                }
            }
            _ if req.method() == Method::GET => text(
                StatusCode::NOT_FOUND,
                "not found: try /healthz, /readyz, /metrics, /peers or PURGE\n",
            ),
            _ => text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
        }
    }

    fn purge(&self, req: &Request<Incoming>) -> Resp {
        let (mut parts, ()) = clone_head(req).into_parts();
        // A Host no site answers has nothing stored: its key finds nothing.
        if let Err(crate::sites::Unrouted::Authority(e)) = self.sites.route_head(&mut parts, "http")
        {
            return text(StatusCode::BAD_REQUEST, format!("bad PURGE: {e}\n"));
        }
        match key::primary(&parts) {
            Some(k) => {
                let n = self.store.purge(&k);
                let status = if n > 0 {
                    StatusCode::OK
                } else {
                    StatusCode::NOT_FOUND
                };
                text(
                    status,
                    format!("purged {n} object(s) for {}\n", String::from_utf8_lossy(&k)),
                )
            }
            None => text(
                StatusCode::BAD_REQUEST,
                "PURGE needs a Host header and a path\n",
            ),
        }
    }
}

impl Admin {
    /// `POST /purge?id=..&prefix=..&tag=..&url=..&all&soft&at=..` (edgecache_purge::purges): add
    /// purge rules, kept on disk before the answer, a JSON object: `{"id", "node", "rules",
    /// "objects", "repeated"}`.
    fn purge_rules(&self, req: &Request<Incoming>) -> Resp {
        let parsed = crate::purges::parse_query(req.uri().query().unwrap_or(""));
        let mut r = match parsed {
            Ok(r) => r,
            Err(why) => return text(StatusCode::BAD_REQUEST, format!("bad purge: {why}\n")),
        };
        for u in &mut r.urls {
            match self.sites.url_key(u) {
                Ok(key) => *u = key,
                Err(why) => return text(StatusCode::BAD_REQUEST, format!("bad purge: {why}\n")),
            }
        }
        let store = &self.store;
        let applied = self
            .purges
            .apply(&r, self.clock.now(), store.epoch_span(), |url| {
                store.purge(url.as_bytes())
            });
        match applied {
            Ok(a) => {
                #[derive(serde::Serialize)]
                struct Answer<'a> {
                    #[serde(flatten)]
                    applied: &'a crate::purges::Applied,
                    node: &'a str,
                    rules_in_force: usize,
                }
                let body = serde_json::to_string(&Answer {
                    applied: &a,
                    node: &self.node,
                    rules_in_force: self.purges.len(),
                })
                .unwrap_or_default();
                let mut resp = text(StatusCode::OK, body + "\n");
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                resp
            }
            Err(e @ Refused::At(_)) => text(StatusCode::BAD_REQUEST, format!("bad purge: {e}\n")),
            Err(e @ Refused::Full { .. }) => {
                text(StatusCode::INSUFFICIENT_STORAGE, format!("{e}\n"))
            }
            Err(e @ Refused::Io(_)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        }
    }
}

fn refused(verdict: Verdict) -> Resp {
    let body = match verdict {
        Verdict::LoopbackOnly => {
            "unauthorized: no admin token is configured (adminAccess.tokenFile), so this call is \
             accepted from loopback only\n"
        }
        Verdict::TokenUnavailable => "unauthorized: the admin token file cannot be read\n",
        _ => "unauthorized: this call needs `Authorization: Bearer <admin token>`\n",
    };
    let mut r = text(StatusCode::UNAUTHORIZED, body);
    r.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer realm=\"edgecache-admin\""),
    );
    r
}

fn clone_head(req: &Request<Incoming>) -> Request<()> {
    let mut r = Request::new(());
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = req.uri().clone();
    *r.headers_mut() = req.headers().clone();
    r
}

/// Serve the admin endpoint until `shutdown` turns true.
pub async fn serve(listener: TcpListener, admin: Arc<Admin>, mut shutdown: watch::Receiver<bool>) {
    let per_ip = usize::try_from(admin.max_connections_per_ip).unwrap_or(usize::MAX);
    let total = usize::try_from(edgecache_api::dataplane::ADMIN_CONNECTIONS_MAX).unwrap_or(64);
    let slots = Arc::new(Mutex::new(Slots::new(per_ip, total)));
    let mut caps_log = LogEvery::new(CAPS_LOG_EVERY);
    let mut accept_log = LogEvery::new(CAPS_LOG_EVERY);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE, ENFILE, ENOBUFS: the error repeats until something closes;
                        // back off instead of spinning on it.
                        if let Some(n) = accept_log.note(Instant::now()) {
                            warn!(times = n, "admin accept failed: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let admitted = lock(&slots).admit(peer.ip());
                let slot = match admitted {
                    Admit::Open(slot) => slot,
                    Admit::Replaced(slot) => {
                        over_the_caps(&mut caps_log, peer, false, per_ip);
                        slot
                    }
                    Admit::Refused => {
                        over_the_caps(&mut caps_log, peer, true, per_ip);
                        drop(stream);
                        continue;
                    }
                };
                let admin = admin.clone();
                let slots = slots.clone();
                tokio::spawn(async move {
                    let timeout = admin.header_timeout;
                    let held = slot.clone();
                    let svc = service_fn(move |req| {
                        let admin = admin.clone();
                        let slot = held.clone();
                        async move {
                            if !slot.begin() {
                                // Taken for a newer connection an instant ago: this one closes.
                                return Ok::<_, Infallible>(text(
                                    StatusCode::SERVICE_UNAVAILABLE,
                                    "the admin connection was closed to make room\n",
                                ));
                            }
                            let answer = admin.call(req, peer).await;
                            slot.end();
                            Ok(answer)
                        }
                    });
                    let conn = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(timeout)
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        () = slot.taken() => {}
                    }
                    lock(&slots).close(&slot);
                });
            }
            _ = shutdown.changed() => return,
        }
    }
}

impl Admin {
    /// The answer to one call from `peer`. A purge writes and fsyncs the rules file: on the
    /// blocking pool, so the probes on this thread are not held up by the disk.
    async fn call(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Resp {
        if let Some(refused) = self.refusal(&req, peer) {
            return refused;
        }
        if self.settles(&req) {
            self.landing.settled(SETTLE_WITHIN).await;
        }
        if (req.method(), req.uri().path()) == (&Method::PUT, "/peers") {
            return self.put_peers(req).await;
        }
        if (req.method(), req.uri().path()) == (&Method::POST, "/purge") {
            let admin = self.clone();
            return tokio::task::spawn_blocking(move || admin.answer(&req))
                .await
                .unwrap_or_else(|e| {
                    text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("the purge call failed: {e}\n"),
                    )
                });
        }
        self.answer(&req)
    }
}

impl Admin {
    /// `PUT /peers`: the body (the peers file's format, at most [`PUSH_MAX`] bytes) becomes the
    /// peer list in force. 200 `changed` or `unchanged`; 400 naming the line of a mistake; 404
    /// when sharding is off.
    ///
    /// [`PUSH_MAX`]: crate::sharding::PUSH_MAX
    async fn put_peers(&self, req: Request<Incoming>) -> Resp {
        use http_body_util::BodyExt as _;
        let Some(sharding) = &self.sharding else {
            return text(StatusCode::NOT_FOUND, "sharding is off: no peer list\n");
        };
        let body = http_body_util::Limited::new(req.into_body(), crate::sharding::PUSH_MAX);
        let bytes = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the peer list: {e}\n"),
                );
            }
        };
        match sharding.push(&bytes) {
            Ok(true) => text(StatusCode::OK, "changed\n"),
            Ok(false) => text(StatusCode::OK, "unchanged\n"),
            Err(e) => {
                warn!("a pushed peer list was refused: {e}");
                text(StatusCode::BAD_REQUEST, format!("bad peer list: {e}\n"))
            }
        }
    }
}

/// A connection went past the caps: a line at most every [`CAPS_LOG_EVERY`] (an attack opens
/// thousands a second), the rest at debug level.
fn over_the_caps(log: &mut LogEvery, peer: SocketAddr, refused: bool, per_ip: usize) {
    match log.note(Instant::now()) {
        Some(times) => warn!(
            %peer,
            times,
            per_ip,
            "admin connection over the caps (clients.maxAdminConnectionsPerIp, {} in all): the \
             oldest idle one was closed to make room, or the new one refused when none was idle; \
             `times` counts them since the last such line",
            edgecache_api::dataplane::ADMIN_CONNECTIONS_MAX
        ),
        None => debug!(%peer, refused, "admin connection over the caps"),
    }
}

fn lock(slots: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    match slots.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
