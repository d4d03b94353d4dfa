//! The origin client: one pooled hyper client per worker, with connect, first-byte and idle
//! timeouts, and the request rewriting a reverse proxy owes the origin (Host, Via,
//! X-Forwarded-For, no hop-by-hop fields), and the hook that forwards the origin's 1xx responses
//! to the client (src/interim.rs).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgecache_api::dataplane::{HostHeader, OriginConfig};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{HttpConnector, HttpInfo};
use hyper_util::rt::TokioExecutor;

use crate::error::ProxyError;
use crate::interim::InterimForwarder;
use crate::request_log::UpstreamNote;

pub type OriginBody = BoxBody<Bytes, hyper::Error>;

/// A pooled client for one worker.
pub struct Origin {
    client: Client<HttpConnector, OriginBody>,
    base: Uri,
    authority: HeaderValue,
    host_header: HostHeader,
    first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    via: HeaderValue,
    /// This client talks to the other nodes (sharding), not to the origin.
    peers: bool,
}

/// The read buffer of an origin connection, which bounds the size of a body chunk.
pub const ORIGIN_READ_BUF: usize = 64 * 1024;

impl Origin {
    pub fn new(cfg: &OriginConfig, cache_name: &str) -> Result<Self, ProxyError> {
        let base: Uri = cfg
            .url
            .parse()
            .map_err(|_| ProxyError::config("origin.url is not a URI"))?;
        let authority = base
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .ok_or_else(|| ProxyError::config("origin.url has no host"))?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(cfg.connect_timeout.get()));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            // A body chunk from the origin is at most this, and pins no more: hyper's default
            // (about 400 KiB) made each fill's queued chunk, and the one its client's
            // connection is writing, that large (see the memory plan's `CONNECTION_BYTES`).
            .http1_max_buf_size(ORIGIN_READ_BUF)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(cfg.max_idle_connections as usize)
            .build(connector);
        let via = HeaderValue::from_str(&format!("1.1 {cache_name}"))
            .map_err(|_| ProxyError::config("cache.name is not a valid token"))?;
        Ok(Self {
            client,
            base,
            authority,
            host_header: cfg.host_header.clone(),
            first_byte_timeout: cfg.first_byte_timeout.get(),
            idle_timeout: cfg.idle_timeout.get(),
            via,
            peers: false,
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

    /// How long a request coalesced on another's fetch waits for its response head: that
    /// fetch's own first-byte timeout (connect included), and a second for the leader to pass
    /// the head on.
    pub fn head_deadline(&self) -> Duration {
        self.first_byte_timeout + Duration::from_secs(1)
    }

    /// Build the request the origin sees from the client's head.
    pub fn prepare(
        &self,
        parts: &http::request::Parts,
        client_ip: Option<IpAddr>,
        extra: &HeaderMap,
    ) -> Result<http::request::Builder, ProxyError> {
        let authority = self
            .base
            .authority()
            .map(|a| a.as_str())
            .unwrap_or_default();
        self.prepare_at(authority, parts, client_ip, extra)
    }

    /// The same request sent to `authority` instead of the origin URL's (a peer's address).
    pub fn prepare_at(
        &self,
        authority: &str,
        parts: &http::request::Parts,
        client_ip: Option<IpAddr>,
        extra: &HeaderMap,
    ) -> Result<http::request::Builder, ProxyError> {
        let pq = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let uri = Uri::builder()
            .scheme(self.base.scheme_str().unwrap_or("http"))
            .authority(authority)
            .path_and_query(pq)
            .build()
            .map_err(|_| ProxyError::bad_request("request target cannot be forwarded"))?;
        let mut headers = parts.headers.clone();
        strip_hop_by_hop(&mut headers);
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
                .unwrap_or_else(|| self.authority.clone()),
            HostHeader::Origin => self.authority.clone(),
            HostHeader::Rewrite(h) => {
                HeaderValue::from_str(h).unwrap_or_else(|_| self.authority.clone())
            }
        };
        headers.insert(header::HOST, host);
        headers.append(header::VIA, self.via.clone());
        if let Some(ip) = client_ip {
            let xff = match parts
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
            {
                Some(prev) => format!("{prev}, {ip}"),
                None => ip.to_string(),
            };
            if let Ok(v) = HeaderValue::from_str(&xff) {
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
        if let Some(interim) = parts.extensions.get::<InterimForwarder>() {
            b = b.extension(interim.clone());
        }
        // A logged request notes where its fetches went (src/request_log.rs).
        if let Some(note) = parts.extensions.get::<UpstreamNote>() {
            b = b.extension(note.clone());
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
        let started = Instant::now();
        match tokio::time::timeout(self.first_byte_timeout, self.client.request(req)).await {
            Err(_) => Err(ProxyError::origin_timeout(
                "the origin sent no response head within the first-byte timeout",
            )),
            Ok(Err(e)) => Err(ProxyError::from_client(&e)),
            Ok(Ok(resp)) => {
                if let (Some(note), Some(info)) = (note, resp.extensions().get::<HttpInfo>()) {
                    note.contacted(info.remote_addr(), self.peers);
                }
                Ok((resp, started.elapsed()))
            }
        }
    }
}

/// An empty body for requests without one.
pub fn empty() -> OriginBody {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

/// Hop-by-hop fields (RFC 9110 7.6.1), and every field the Connection header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        HeaderName::from_static("proxy-connection"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_listed_fields_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h["x-kept"], "yes");
    }

    fn origin(host: HostHeader) -> Origin {
        let cfg = OriginConfig {
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
        let slot = crate::interim::InterimSlot::new(crate::metrics::Metrics::register(
            &mut prometheus_client::registry::Registry::default(),
        ));
        let mut p = parts("/a", "www.example");
        let req = origin(HostHeader::Preserve)
            .prepare(&p, None, &HeaderMap::new())
            .unwrap()
            .body(())
            .unwrap();
        assert!(req.extensions().get::<InterimForwarder>().is_none());
        p.extensions
            .insert(slot.begin(http::Version::HTTP_11, false));
        let req = origin(HostHeader::Preserve)
            .prepare(&p, None, &HeaderMap::new())
            .unwrap()
            .body(())
            .unwrap();
        assert!(req.extensions().get::<InterimForwarder>().is_some());
    }
}
