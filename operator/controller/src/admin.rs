//! The admin endpoint: `/metrics` (Prometheus text), `/healthz` (the process runs) and
//! `/readyz` (the EdgeCache cache has synced).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// Answer one admin request.
pub fn respond(path: &str, metrics: &Metrics, ready: bool) -> Response<Full<Bytes>> {
    let (code, ctype, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" if ready => (StatusCode::OK, "text/plain", "ready\n".to_string()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "cache not synced\n".to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ctype),
    );
    resp
}

/// Serve the admin endpoint on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<crate::context::Context>,
    ready: Arc<AtomicBool>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "admin accept failed");
                continue;
            }
        };
        let ctx = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let resp = respond(req.uri().path(), &ctx.metrics, ready.load(Ordering::SeqCst));
                async move { Ok::<_, Infallible>(resp) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                debug!(%peer, error = %e, "admin connection ended");
            }
        });
    }
}

/// Bind the admin address. The IPv6 wildcard `[::]` (the default: a dual-stack socket, for
/// IPv4, IPv6 and dual-stack clusters alike) falls back to `0.0.0.0` on a node without IPv6,
/// where it cannot be bound (issue 35 defect 6: `0.0.0.0` alone never answered an IPv6 probe).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Err(e) if addr.ip() == std::net::Ipv6Addr::UNSPECIFIED => {
            let v4 = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port()));
            TcpListener::bind(v4).await.map_err(|_| e)
        }
        bound => bound,
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::metrics::{ReasonLabels, WriteLabels};

    /// The default `[::]` takes IPv4 clients too (a dual-stack socket), and IPv6 ones where the
    /// machine has IPv6.
    #[tokio::test]
    async fn the_ipv6_wildcard_takes_ipv4_and_ipv6_clients() {
        let l = bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = l.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                let _ = l.accept().await;
            }
        });
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("an IPv4 client reaches [::]");
        if has_ipv6() {
            tokio::net::TcpStream::connect(("::1", port))
                .await
                .expect("an IPv6 client reaches [::]");
        }
        accept.abort();
    }

    fn has_ipv6() -> bool {
        std::net::TcpListener::bind("[::1]:0").is_ok()
    }

    async fn body(resp: Response<Full<Bytes>>) -> String {
        let b = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn routes() {
        let m = Metrics::default();
        {
            let _t = m.start_reconcile();
        }
        m.failure("apply");
        m.child_writes
            .get_or_create(&WriteLabels {
                kind: "DaemonSet",
                change: "created",
            })
            .inc();
        let resp = respond("/metrics", &m, true);
        assert_eq!(resp.status(), StatusCode::OK);
        let text = body(resp).await;
        for want in [
            "edgecache_operator_reconciles_total 1",
            "edgecache_operator_reconcile_failures_total{reason=\"apply\"} 1",
            "edgecache_operator_reconcile_duration_seconds_count 1",
            "edgecache_operator_child_writes_total{kind=\"DaemonSet\",change=\"created\"} 1",
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
        assert_eq!(
            m.failures
                .get_or_create(&ReasonLabels { reason: "apply" })
                .get(),
            1
        );
        assert_eq!(respond("/healthz", &m, false).status(), StatusCode::OK);
        assert_eq!(
            respond("/readyz", &m, false).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(respond("/readyz", &m, true).status(), StatusCode::OK);
        assert_eq!(respond("/nope", &m, true).status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let fake = edgecache_fakeapi::FakeApiServer::new();
        let ctx = Arc::new(crate::context::Context::new(fake.client()));
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ready = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn(serve(listener, ctx, ready));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.ends_with("ready\n"), "{out}");
        task.abort();
    }
}
