//! The origin client: one pooled hyper client per worker and site, with connect, first-byte and
//! idle timeouts, and the request rewriting a reverse proxy owes the origin (Host, Via,
//! X-Forwarded-For, no hop-by-hop fields), and the hook that forwards the origin's 1xx responses
//! to the client (src/interim.rs). Each request goes to a member of the site's pool
//! (src/sites/pool.rs), which hears how it went; an idempotent request without content that got
//! no connection, or lost it before a response head, tries another member, within the site's
//! retries and the pool's retry budget.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgecache_observe::request_log::UpstreamNote;
use edgecache_observe::trace::SpanContext;
use edgecache_trace::{Kind, Span};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{HttpConnector, HttpInfo};
use hyper_util::rt::TokioExecutor;

use crate::client_conn::ClientConn;
use crate::error::ProxyError;
pub use crate::hop_by_hop::strip_hop_by_hop;
use crate::interim::InterimForwarder;
use crate::sites::{Balance, HealthRules, HostHeader, Pool};
use crate::transport::Transport;

/// An origin client's settings (the data plane maps its config's `origin:` onto them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `http://host[:port]` of the origin (the peers' client: only its scheme counts).
    pub url: String,
    /// What Host header the origin sees.
    pub host_header: HostHeader,
    /// Time allowed to open a TCP connection to the origin.
    pub connect_timeout: Duration,
    /// Time allowed from sending the request to the origin's response head.
    pub first_byte_timeout: Duration,
    /// Idle pooled connections kept per worker.
    pub max_idle_connections: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            url: String::new(),
            host_header: HostHeader::Preserve,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(30),
            max_idle_connections: 64,
        }
    }
}

pub type OriginBody = BoxBody<Bytes, hyper::Error>;

/// A pooled client for one worker.
pub struct Origin {
    client: Client<HttpsConnector<HttpConnector>, OriginBody>,
    scheme: Scheme,
    pool: Arc<Pool>,
    retries: u32,
    host_header: HostHeader,
    first_byte_timeout: Duration,
    via: HeaderValue,
    /// This client talks to the other nodes (sharding), not to the origin.
    peers: bool,
    /// Each pool member's authority, parsed once, and as a Host value (by member index).
    targets: Vec<Option<Target>>,
}

/// Where a request goes: the authority of its URI, and the same as a Host field value.
#[derive(Clone)]
struct Target {
    authority: Authority,
    host: HeaderValue,
}

impl Target {
    fn parse(authority: &str) -> Option<Target> {
        Some(Target {
            authority: Authority::try_from(authority).ok()?,
            host: HeaderValue::from_str(authority).ok()?,
        })
    }
}

/// The read buffer of an origin connection, which bounds the size of a body chunk.
pub const ORIGIN_READ_BUF: usize = 64 * 1024;

impl Origin {
    /// A client for `cfg.url` alone (the peers' client, which names each request's address).
    pub fn new(cfg: &Settings, cache_name: &str) -> Result<Self, ProxyError> {
        let base: Uri = cfg
            .url
            .parse()
            .map_err(|_| ProxyError::config("origin.url is not a URI"))?;
        let authority = base
            .authority()
            .ok_or_else(|| ProxyError::config("origin.url has no host"))?
            .to_string();
        let rules = HealthRules {
            unhealthy_after: u32::MAX,
            healthy_after: 1,
            retry_after: Duration::from_secs(1),
            active: false,
        };
        let pool = Arc::new(Pool::new(vec![authority], Balance::RoundRobin, rules));
        let transport = Transport {
            https: base.scheme_str() == Some("https"),
            ..Transport::default()
        };
        Self::build(
            cfg,
            cache_name,
            &transport,
            pool,
            0,
            cfg.host_header.clone(),
        )
    }

    /// The client of one site.
    pub fn for_site(
        cfg: &Settings,
        site: &crate::sites::Site,
        cache_name: &str,
    ) -> Result<Self, ProxyError> {
        Self::build(
            cfg,
            cache_name,
            &site.transport,
            site.pool.clone(),
            site.retries,
            site.host_header.clone(),
        )
    }

    fn build(
        cfg: &Settings,
        cache_name: &str,
        transport: &Transport,
        pool: Arc<Pool>,
        retries: u32,
        host_header: HostHeader,
    ) -> Result<Self, ProxyError> {
        let connector = transport.connector(cfg.connect_timeout)?;
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            // A body chunk from the origin is at most this, and pins no more: hyper's default
            // (about 400 KiB) made each fill's queued chunk, and the one its client's
            // connection is writing, that large (see the memory plan's `CONNECTION_BYTES`).
            .http1_max_buf_size(ORIGIN_READ_BUF)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(cfg.max_idle_connections as usize);
        if transport.http2 {
            builder.http2_only(true);
        }
        let client = builder.build(connector);
        let scheme = if transport.https {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        let via = HeaderValue::from_str(&format!("1.1 {cache_name}"))
            .map_err(|_| ProxyError::config("cache.name is not a valid token"))?;
        Ok(Self {
            client,
            scheme,
            retries,
            host_header,
            first_byte_timeout: cfg.first_byte_timeout,
            via,
            peers: false,
            targets: pool
                .members()
                .iter()
                .map(|m| Target::parse(&m.authority))
                .collect(),
            pool,
        })
    }

    /// The same client, for the other nodes: the access log names the address it reaches as
    /// the peer, not the origin.
    pub fn for_peers(self) -> Self {
        Self {
            peers: true,
            ..self
        }
    }

    /// Build the request the origin sees from the client's head.
    pub fn prepare(
        &self,
        parts: &http::request::Parts,
        client_ip: Option<IpAddr>,
        extra: &HeaderMap,
    ) -> Result<http::request::Builder, ProxyError> {
        let i = self.pool.pick(&[]).unwrap_or(0);
        let target = match self.targets.get(i) {
            Some(Some(t)) => t.clone(),
            _ => return Err(ProxyError::config("an origin address is not a host")),
        };
        Ok(self
            .prepare_to(target, parts, client_ip, extra)?
            .extension(Picked(i)))
    }

    /// The same request sent to `authority` instead of the origin URL's (a peer's address).
    pub fn prepare_at(
        &self,
        authority: &str,
        parts: &http::request::Parts,
        client_ip: Option<IpAddr>,
        extra: &HeaderMap,
    ) -> Result<http::request::Builder, ProxyError> {
        let target = Target::parse(authority)
            .ok_or_else(|| ProxyError::config("an origin address is not a host"))?;
        self.prepare_to(target, parts, client_ip, extra)
    }

    fn prepare_to(
        &self,
        target: Target,
        parts: &http::request::Parts,
        client_ip: Option<IpAddr>,
        extra: &HeaderMap,
    ) -> Result<http::request::Builder, ProxyError> {
        let pq = match parts.uri.path_and_query() {
            Some(pq) => pq.clone(),
            None => PathAndQuery::from_static("/"),
        };
        let uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(target.authority)
            .path_and_query(pq)
            .build()
            .map_err(|_| ProxyError::bad_request("request target cannot be forwarded"))?;
        let mut headers = parts.headers.clone();
        strip_hop_by_hop(&mut headers);
        let origin_host = target.host;
        let host = match &self.host_header {
            HostHeader::Preserve => parts
                .headers
                .get(header::HOST)
                .cloned()
                .or_else(|| {
                    parts
                        .uri
                        .authority()
                        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
                })
                .unwrap_or_else(|| origin_host.clone()),
            HostHeader::Origin => origin_host,
            HostHeader::Rewrite(h) => HeaderValue::from_str(h).unwrap_or(origin_host),
        };
        headers.insert(header::HOST, host);
        headers.append(header::VIA, self.via.clone());
        if let Some(ip) = client_ip {
            let prev = parts
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok());
            if let Ok(v) = HeaderValue::from_maybe_shared(forwarded_for(prev, ip)) {
                headers.insert(HeaderName::from_static("x-forwarded-for"), v);
            }
        }
        for (k, v) in extra {
            headers.insert(k.clone(), v.clone());
        }
        let mut b = Request::builder().method(parts.method.clone()).uri(uri);
        if let Some(h) = b.headers_mut() {
            *h = headers;
        }
        // The client's request may receive this one's 1xx responses (see `send`).
        if let Some(conn) = ClientConn::of(parts) {
            b = b.extension(conn.interim.clone());
        }
        // A logged request notes where its fetches went (edgecache_observe::request_log).
        if let Some(note) = parts.extensions.get::<UpstreamNote>() {
            b = b.extension(note.clone());
        }
        // A traced request's fetches are its child spans (`send_once`).
        if edgecache_trace::active()
            && let Some(span) = parts.extensions.get::<SpanContext>()
        {
            b = b.extension(span.clone());
        }
        Ok(b)
    }

    /// Send a request and wait for the response head, within the first-byte timeout.
    ///
    /// A request built by [`Origin::prepare`] from a client's head carries that client
    /// request's [`InterimForwarder`]: its 1xx responses are handed to it (RFC 9110 15.2, "A
    /// proxy MUST forward 1xx responses"), when sent from the client request's own task; sent
    /// from another (a background revalidation), its 1xx are the proxy's own and dropped.
    pub async fn send(
        &self,
        mut req: Request<OriginBody>,
    ) -> Result<(Response<Incoming>, Duration), ProxyError> {
        if let Some(mut interim) = req.extensions_mut().remove::<InterimForwarder>() {
            if !interim.in_own_task() {
                interim = interim.detached();
            }
            hyper::ext::on_informational(&mut req, move |res| {
                interim.push(res.status(), res.headers());
            });
        }
        let note = req.extensions_mut().remove::<UpstreamNote>();
        let trace = edgecache_trace::active()
            .then(|| req.extensions_mut().remove::<SpanContext>())
            .flatten();
        let traced = Traced {
            note: note.as_ref(),
            span: trace.as_ref(),
        };
        let Some(Picked(mut i)) = req.extensions_mut().remove::<Picked>() else {
            // A request to a named address (a peer): no pool to tell.
            return self.send_once(req, traced).await.map_err(|(e, _)| e);
        };
        self.pool.budget().deposit();
        // What a retry needs: only a request without content may be sent again.
        let again = (matches!(req.method(), &http::Method::GET | &http::Method::HEAD)
            && hyper::body::Body::is_end_stream(req.body()))
        .then(|| {
            (
                req.method().clone(),
                req.uri().clone(),
                req.headers().clone(),
            )
        });
        let mut tried = vec![i];
        loop {
            let result = {
                let _waiting = self.pool.begin(i);
                self.send_once(req, traced).await
            };
            match result {
                Ok(ok) => {
                    self.pool.report(i, true, false);
                    return Ok(ok);
                }
                Err((e, retriable)) => {
                    if !retriable {
                        return Err(e);
                    }
                    self.pool.report(i, false, false);
                    let next = match &again {
                        Some(_) if tried.len() <= self.retries as usize => self.pool.pick(&tried),
                        _ => None,
                    };
                    let (Some(next), Some((method, uri, headers))) = (next, &again) else {
                        return Err(e);
                    };
                    if !self.pool.budget().withdraw() {
                        return Err(e);
                    }
                    self.pool.retried();
                    tracing::debug!(
                        from = %self.pool.members()[i].authority,
                        to = %self.pool.members()[next].authority,
                        "origin request failed before a response head ({e}); retrying"
                    );
                    i = next;
                    tried.push(i);
                    let to = &self.pool.members()[i].authority;
                    let host = (self.host_header == HostHeader::Origin).then_some(to.as_str());
                    req = retry_request(method, uri, headers, to, host)?;
                }
            }
        }
    }

    /// One attempt; the error says whether the request may be sent again elsewhere (no
    /// connection, or the connection lost before any of a response).
    async fn send_once(
        &self,
        mut req: Request<OriginBody>,
        traced: Traced<'_>,
    ) -> Result<(Response<Incoming>, Duration), (ProxyError, bool)> {
        let started = Instant::now();
        // A traced request's fetch is a child span, up to the response head; the request
        // carries its traceparent, so the origin's (or the peer's) span is its child.
        let mut span = traced.span.map(|c| self.fetch_span(c, &mut req));
        let result = match tokio::time::timeout(self.first_byte_timeout, self.client.request(req))
            .await
        {
            Err(_) => Err((
                ProxyError::origin_timeout(
                    "the origin sent no response head within the first-byte timeout",
                ),
                false,
            )),
            Ok(Err(e)) => {
                let retriable = retriable(&e);
                Err((ProxyError::from_client(&e), retriable))
            }
            Ok(Ok(resp)) => {
                if let (Some(note), Some(info)) = (traced.note, resp.extensions().get::<HttpInfo>())
                {
                    note.contacted(info.remote_addr(), self.peers);
                }
                Ok((resp, started.elapsed()))
            }
        };
        if let Some(span) = &mut span {
            match &result {
                Ok((resp, _)) => {
                    let status = resp.status().as_u16();
                    span.set("http.response.status_code", i64::from(status));
                    if resp.status().is_server_error() {
                        span.fail(format!("status {status}"));
                    }
                }
                Err((e, _)) => {
                    span.set("error.type", e.kind.as_str());
                    span.fail(e.to_string());
                }
            }
        }
        result
    }

    /// The child span of one fetch (`origin fetch` or `peer fetch`), its traceparent put on
    /// the request.
    fn fetch_span(&self, ctx: &SpanContext, req: &mut Request<OriginBody>) -> Span {
        let name = if self.peers {
            "peer fetch"
        } else {
            "origin fetch"
        };
        let mut span = ctx.child(name, Kind::Client);
        if let Ok(v) = HeaderValue::from_bytes(&span.traceparent()) {
            req.headers_mut()
                .insert(HeaderName::from_static(edgecache_trace::TRACEPARENT), v);
        }
        span.set("http.request.method", req.method().as_str().to_string());
        if let Some(a) = req.uri().authority() {
            span.set("server.address", a.as_str().to_string());
        }
        span.set("url.path", req.uri().path().to_string());
        span
    }
}

/// Whether a request that failed this way may go to another origin (it is sent again only if
/// it has no content): the connection could not be made, or it closed or was reset before a
/// response head came (an origin that went away under a kept-alive connection).
fn retriable(e: &hyper_util::client::legacy::Error) -> bool {
    use std::error::Error;
    if e.is_connect() {
        return true;
    }
    let Some(h) = e.source().and_then(|s| s.downcast_ref::<hyper::Error>()) else {
        return false;
    };
    h.is_incomplete_message()
        || h.source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::BrokenPipe
                )
            })
}

/// What a request's attempts report to: its access-log note and its span, when it has them.
#[derive(Clone, Copy)]
struct Traced<'a> {
    note: Option<&'a UpstreamNote>,
    span: Option<&'a SpanContext>,
}

/// The pool member a request was prepared for, in its extensions.
#[derive(Debug, Clone, Copy)]
struct Picked(usize);

/// A request without content sent again to `authority`.
fn retry_request(
    method: &http::Method,
    uri: &Uri,
    headers: &HeaderMap,
    authority: &str,
    host: Option<&str>,
) -> Result<Request<OriginBody>, ProxyError> {
    let uri = Uri::builder()
        .scheme(uri.scheme_str().unwrap_or("http"))
        .authority(authority)
        .path_and_query(uri.path_and_query().map_or("/", |p| p.as_str()))
        .build()
        .map_err(|_| ProxyError::config("an origin address is not a host"))?;
    let mut req = Request::builder()
        .method(method.clone())
        .uri(uri)
        .body(empty())
        .map_err(|_| ProxyError::config("an origin request cannot be built"))?;
    *req.headers_mut() = headers.clone();
    if let Some(h) = host.and_then(|h| HeaderValue::from_str(h).ok()) {
        req.headers_mut().insert(header::HOST, h);
    }
    Ok(req)
}

/// An empty body for requests without one.
pub fn empty() -> OriginBody {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

/// The X-Forwarded-For value a fill sends: the client's `prev` (if any), then `ip`. Written
/// into one buffer without the formatter (every miss makes one), which the field value takes.
fn forwarded_for(prev: Option<&str>, ip: IpAddr) -> Bytes {
    let mut out = Vec::with_capacity(prev.map_or(0, |p| p.len() + 2) + 15);
    if let Some(p) = prev {
        out.extend_from_slice(p.as_bytes());
        out.extend_from_slice(b", ");
    }
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                let mut digits = [0u8; 20];
                out.extend_from_slice(edgecache_policy::syntax::decimal(
                    u64::from(octet),
                    &mut digits,
                ));
            }
        }
        IpAddr::V6(v6) => out.extend_from_slice(v6.to_string().as_bytes()),
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(host: HostHeader) -> Origin {
        let cfg = Settings {
            url: "http://127.0.0.1:8000".into(),
            host_header: host,
            ..Default::default()
        };
        Origin::new(&cfg, "edgecache").unwrap()
    }

    fn parts(uri: &str, host: &str) -> http::request::Parts {
        let (p, ()) = Request::get(uri)
            .header("host", host)
            .header("x-forwarded-for", "10.0.0.1")
            .body(())
            .unwrap()
            .into_parts();
        p
    }

    #[tokio::test]
    async fn the_origin_request_keeps_or_rewrites_host_and_adds_via_and_xff() {
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        let p = parts("/a?b=1", "www.example");
        let req = origin(HostHeader::Preserve)
            .prepare(&p, Some(ip), &HeaderMap::new())
            .unwrap()
            .body(())
            .unwrap();
        assert_eq!(req.uri(), "http://127.0.0.1:8000/a?b=1");
        assert_eq!(req.headers()["host"], "www.example");
        assert_eq!(req.headers()["via"], "1.1 edgecache");
        assert_eq!(req.headers()["x-forwarded-for"], "10.0.0.1, 127.0.0.9");
        let req = origin(HostHeader::Origin)
            .prepare(&p, None, &HeaderMap::new())
            .unwrap()
            .body(())
            .unwrap();
        assert_eq!(req.headers()["host"], "127.0.0.1:8000");
        let req = origin(HostHeader::Rewrite("cdn.example".into()))
            .prepare(&p, None, &HeaderMap::new())
            .unwrap()
            .body(())
            .unwrap();
        assert_eq!(req.headers()["host"], "cdn.example");
    }

    #[test]
    fn the_origin_request_carries_the_client_requests_interim_forwarder() {
        let slot = crate::interim::InterimSlot::new(Arc::default());
        let mut p = parts("/a", "www.example");
        let req = origin(HostHeader::Preserve)
            .prepare(&p, None, &HeaderMap::new())
            .unwrap()
            .body(())
            .unwrap();
        assert!(req.extensions().get::<InterimForwarder>().is_none());
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (room, _guard) =
            edgecache_edge::send_room::SendRoom::new(std::os::fd::AsRawFd::as_raw_fd(&socket));
        p.extensions.insert(ClientConn {
            info: edgecache_observe::conn_info::ConnInfo::plain(
                edgecache_observe::conn_info::Protocol::Http1,
            ),
            room,
            tls: None,
            interim: slot.begin(http::Version::HTTP_11, false),
        });
        let req = origin(HostHeader::Preserve)
            .prepare(&p, None, &HeaderMap::new())
            .unwrap()
            .body(())
            .unwrap();
        assert!(req.extensions().get::<InterimForwarder>().is_some());
    }

    #[test]
    fn forwarded_for_is_written_as_the_formatter_writes_it() {
        let ips: Vec<IpAddr> = [
            "0.0.0.0",
            "127.0.0.1",
            "10.20.30.40",
            "9.99.100.255",
            "255.255.255.255",
            "::1",
            "2001:db8::8a2e:370:7334",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        for ip in ips {
            assert_eq!(&forwarded_for(None, ip)[..], ip.to_string().as_bytes());
            assert_eq!(
                &forwarded_for(Some("203.0.113.7"), ip)[..],
                format!("203.0.113.7, {ip}").as_bytes()
            );
        }
        for n in 0..=255u8 {
            let ip = IpAddr::from([n, n, 0, 1]);
            assert_eq!(&forwarded_for(None, ip)[..], ip.to_string().as_bytes());
        }
    }
}
