//! The data plane's requests over HTTP/2 (prior knowledge, a fresh connection each), for the
//! suites that run over both protocols: with `EDGECACHE_TEST_HTTP2=1`, [`super::Dataplane`]'s
//! `get` and `request` go this way. Fields that only HTTP/1.1 has (Connection, Keep-Alive,
//! Transfer-Encoding, TE other than trailers, Upgrade) are left out, as an HTTP/2 client must.

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use super::Resp;

/// Whether this run sends the data plane's requests over HTTP/2.
pub fn on() -> bool {
    std::env::var("EDGECACHE_TEST_HTTP2").is_ok_and(|v| v == "1")
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(send(addr, method, path, headers, body))
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let host = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or("test.example", |(_, v)| *v);
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("http://{host}{path}"));
    for (k, v) in headers {
        let k = k.to_ascii_lowercase();
        let h1_only = [
            "host",
            "connection",
            "keep-alive",
            "transfer-encoding",
            "upgrade",
        ]
        .contains(&k.as_str())
            || (k == "te" && !v.eq_ignore_ascii_case("trailers"));
        if !h1_only {
            b = b.header(k, *v);
        }
    }
    let req = b
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(std::io::Error::other)?;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    let resp = send
        .send_request(req)
        .await
        .map_err(std::io::Error::other)?;
    let (parts, mut incoming) = resp.into_parts();
    if parts.version != http::Version::HTTP_2 {
        return Err(std::io::Error::other(format!(
            "the answer came over {:?}",
            parts.version
        )));
    }
    let mut headers: HashMap<String, String> = HashMap::new();
    for (k, v) in &parts.headers {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        headers
            .entry(k.as_str().to_string())
            .and_modify(|old| {
                old.push_str(", ");
                old.push_str(&v);
            })
            .or_insert(v);
    }
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(frame) = incoming.frame().await {
        match frame {
            Ok(f) => {
                if let Some(d) = f.data_ref() {
                    body.extend_from_slice(d);
                }
            }
            Err(_) => {
                truncated = true;
                break;
            }
        }
    }
    if let Some(len) = headers
        .get("content-length")
        .and_then(|v| v.parse::<usize>().ok())
        && method != "HEAD"
        && parts.status != 304
    {
        truncated |= body.len() < len;
    }
    Ok(Resp {
        status: parts.status.as_u16(),
        headers,
        body,
        truncated,
    })
}
