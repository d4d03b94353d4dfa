//! A minimal HTTP/1.1 client for the data-plane pods' admin endpoints (purges, metrics, the
//! peer list).
//!
//! One connection per call (calls are rare and go to many pods), the whole call bounded by a
//! timeout, and the answer's body bounded in size, so a slow or misbehaving pod can neither
//! stall a reconcile nor make the operator buffer without limit.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The largest answer body read from a pod; a longer one is an error.
pub const MAX_BODY: usize = 4 << 20;

/// Why a call to a pod failed (its answer, whatever the status code, is not an error).
#[derive(Debug, thiserror::Error)]
pub enum PodAdminError {
    /// No TCP connection (refused, unreachable).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The call did not finish in time.
    #[error("no answer from {addr} within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    /// The request could not be built (a bad method or path).
    #[error("bad request to {addr}: {source}")]
    Request {
        addr: SocketAddr,
        #[source]
        source: http::Error,
    },
    /// The HTTP exchange failed (connection reset, malformed answer).
    #[error("HTTP exchange with {addr} failed: {source}")]
    Http {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    /// The answer body was longer than [`MAX_BODY`] or broke off.
    #[error("reading the answer of {addr} failed: {why}")]
    Body { addr: SocketAddr, why: String },
}

impl PodAdminError {
    /// Whether no connection was made or nothing answered in time: what a NetworkPolicy or a
    /// firewall that drops or rejects the admin port looks like (`AdminUnreachable`).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Connect { .. } | Self::Timeout { .. })
    }

    /// A bounded label for metrics and short status messages.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "connect",
            Self::Timeout { .. } => "timeout",
            Self::Request { .. } => "request",
            Self::Http { .. } => "http",
            Self::Body { .. } => "body",
        }
    }
}

/// Send `method path_and_query` to `addr` (with `Authorization: Bearer token` when given) and
/// return the status code and body. The connect, the exchange and reading the body together
/// take at most `timeout`.
pub async fn call(
    method: &str,
    addr: SocketAddr,
    path_and_query: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Bytes), PodAdminError> {
    call_with_body(method, addr, path_and_query, token, Bytes::new(), timeout).await
}

/// [`call`] with a request body (sent with its length).
pub async fn call_with_body(
    method: &str,
    addr: SocketAddr,
    path_and_query: &str,
    token: Option<&str>,
    body: Bytes,
    timeout: Duration,
) -> Result<(u16, Bytes), PodAdminError> {
    let exchange = exchange(method, addr, path_and_query, token, body);
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(PodAdminError::Timeout { addr, timeout }),
    }
}

async fn exchange(
    method: &str,
    addr: SocketAddr,
    path_and_query: &str,
    token: Option<&str>,
    body: Bytes,
) -> Result<(u16, Bytes), PodAdminError> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(http::header::HOST, addr.to_string())
        .header(http::header::USER_AGENT, crate::build::MANAGER);
    if let Some(token) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req
        .body(Full::new(body))
        .map_err(|source| PodAdminError::Request { addr, source })?;
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| PodAdminError::Connect { addr, source })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| PodAdminError::Http { addr, source })?;
    // The connection task ends with the call: the sender is dropped when this function returns.
    let conn = tokio::spawn(conn);
    let result = async {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|source| PodAdminError::Http { addr, source })?;
        let code = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| PodAdminError::Body {
                addr,
                why: e.to_string(),
            })?
            .to_bytes();
        Ok((code, body))
    }
    .await;
    conn.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A one-shot server that answers `answer` and hands back the request head it read.
    async fn serve_once(answer: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.expect("read");
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            s.write_all(answer).await.expect("write");
            String::from_utf8_lossy(&head).into_owned()
        });
        (addr, task)
    }

    #[tokio::test]
    async fn sends_the_token_and_returns_code_and_body() {
        let (addr, head) =
            serve_once(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello")
                .await;
        let (code, body) = call(
            "POST",
            addr,
            "/purge?id=a-0&all",
            Some("sekrit"),
            Duration::from_secs(5),
        )
        .await
        .expect("call");
        assert_eq!((code, &body[..]), (200, &b"hello"[..]));
        let head = head.await.expect("server");
        assert!(
            head.starts_with("POST /purge?id=a-0&all HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: bearer sekrit\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn refused_connection_and_silence_are_errors() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr")
        };
        let err = call("GET", addr, "/metrics", None, Duration::from_secs(5))
            .await
            .expect_err("nothing listens");
        assert_eq!(err.category(), "connect");

        // Accepts, never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _hold = tokio::spawn(async move {
            let conn = listener.accept().await;
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(conn);
        });
        let err = call("GET", addr, "/metrics", None, Duration::from_millis(200))
            .await
            .expect_err("no answer");
        assert_eq!(err.category(), "timeout");
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused() {
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            MAX_BODY + 1
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(head.as_bytes()).await;
            let chunk = vec![b'x'; 64 << 10];
            for _ in 0..(MAX_BODY / chunk.len() + 2) {
                if s.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let err = call("GET", addr, "/metrics", None, Duration::from_secs(10))
            .await
            .expect_err("too long");
        assert_eq!(err.category(), "body");
    }
}
