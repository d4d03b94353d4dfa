//! One HTTP/1.1 call to a data-plane pod's admin endpoint (`/metrics`, a purge): a fresh
//! connection to the pod IP, the admin token as a bearer token, one deadline for the whole
//! exchange. The data plane never calls the operator; this is the only way the operator talks to
//! a running pod.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a call to a pod's admin endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}: no answer within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    #[error("{addr}: {source}")]
    Http {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("{addr}: bad request {path_and_query:?}: {source}")]
    Request {
        addr: SocketAddr,
        path_and_query: String,
        #[source]
        source: http::Error,
    },
}

/// `method path_and_query` on `addr`; the status code and the whole body.
pub async fn call(
    method: Method,
    addr: SocketAddr,
    path_and_query: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Bytes), Error> {
    tokio::time::timeout(timeout, exchange(method, addr, path_and_query, token))
        .await
        .unwrap_or(Err(Error::Timeout { addr, timeout }))
}

async fn exchange(
    method: Method,
    addr: SocketAddr,
    path_and_query: &str,
    token: Option<&str>,
) -> Result<(u16, Bytes), Error> {
    let mut req = Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(header::HOST, addr.to_string());
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|source| Error::Request {
            addr,
            path_and_query: path_and_query.to_string(),
            source,
        })?;
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| Error::Connect { addr, source })?;
    let http = |source| Error::Http { addr, source };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    // The connection is driven until the response is read, then dropped with it.
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(req).await.map_err(http)?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(http)?.to_bytes();
    driver.abort();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_get_with_the_token_and_the_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
                .await
                .unwrap();
            head
        });
        let (status, body) = call(
            Method::GET,
            addr,
            "/metrics",
            Some("t0k"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!((status, &body[..]), (200, &b"hello"[..]));
        let head = server.await.unwrap().to_lowercase();
        assert!(head.starts_with("get /metrics http/1.1"), "{head}");
        assert!(head.contains("authorization: bearer t0k"), "{head}");
    }

    #[tokio::test]
    async fn a_silent_pod_times_out_and_a_closed_port_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let err = call(Method::GET, addr, "/", None, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        drop(listener);
        let err = call(Method::GET, addr, "/", None, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Connect { .. }), "{err}");
    }
}
