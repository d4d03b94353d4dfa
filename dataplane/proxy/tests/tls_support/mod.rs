//! TLS test support: a CA of the test's own with certificates for the names a test needs (PEM
//! files in the test's directory), and an HTTPS client (rustls, HTTP/1.1 or HTTP/2 by ALPN)
//! that reports what the handshake gave: the version, whether it resumed, the names of the
//! certificate served.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// A certificate authority of the test's own.
pub struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub der: CertificateDer<'static>,
    pub pem: String,
}

impl Ca {
    pub fn new() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "EdgeCache test CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).unwrap();
        Ca {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf certificate for `names`, written as `dir/<stem>.crt` and `dir/<stem>.key`.
    pub fn issue(&self, dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let (cert, key) = self.issue_pem(names);
        let c = dir.join(format!("{stem}.crt"));
        let k = dir.join(format!("{stem}.key"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        (c, k)
    }

    /// A leaf certificate for `names`: the chain (leaf, CA) and the key, as PEM.
    pub fn issue_pem(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (format!("{}{}", cert.pem(), self.pem), key.serialize_pem())
    }
}

/// A client config trusting `ca`, offering `alpn`, resuming sessions it has seen (rustls'
/// default in-memory store, shared by every connection made with this config).
pub fn client_config(ca: &Ca, alpn: &[&str]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(cfg)
}

/// The same, TLS 1.2 only.
pub fn client_config_tls12(ca: &Ca, alpn: &[&str]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS12])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(cfg)
}

/// What a handshake gave.
#[derive(Debug, Clone)]
pub struct Session {
    pub version: String,
    pub alpn: Option<String>,
    pub resumed: bool,
    /// The DNS names of the certificate the server sent.
    pub names: Vec<String>,
}

/// A TLS connection to `addr` for `sni`.
pub async fn connect(
    addr: SocketAddr,
    sni: &str,
    cfg: &Arc<rustls::ClientConfig>,
) -> std::io::Result<(tokio_rustls::client::TlsStream<TcpStream>, Session)> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_string()).map_err(std::io::Error::other)?;
    let tls = tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name, tcp)
        .await?;
    let conn = tls.get_ref().1;
    let names = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|leaf| {
            let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).unwrap();
            cert.subject_alternative_name()
                .ok()
                .flatten()
                .map(|san| {
                    san.value
                        .general_names
                        .iter()
                        .filter_map(|n| match n {
                            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let session = Session {
        version: format!("{:?}", conn.protocol_version().unwrap()),
        alpn: conn
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        names,
    };
    Ok((tls, session))
}

/// A response as received.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl Got {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// A client connection speaking HTTP/1.1 or HTTP/2 over any stream.
pub enum Client {
    H1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

impl Client {
    /// Start the protocol on `io`: HTTP/2 when `h2`.
    pub async fn over<S>(io: S, h2: bool) -> Client
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let io = hyper_util::rt::TokioIo::new(io);
        if h2 {
            let (send, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .unwrap();
            tokio::spawn(conn);
            Client::H2(send)
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Client::H1(send)
        }
    }

    /// GET `path` on `host` with `headers`.
    pub async fn get(&mut self, host: &str, path: &str, headers: &[(&str, &str)]) -> Got {
        let h2 = matches!(self, Client::H2(_));
        let mut b = http::Request::builder().method("GET");
        b = if h2 {
            b.uri(format!("https://{host}{path}"))
        } else {
            b.uri(path).header("host", host)
        };
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Empty::<Bytes>::new()).unwrap();
        let resp = match self {
            Client::H1(s) => {
                s.ready().await.unwrap();
                s.send_request(req).await.unwrap()
            }
            Client::H2(s) => {
                s.ready().await.unwrap();
                s.send_request(req).await.unwrap()
            }
        };
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.unwrap().to_bytes().to_vec();
        Got {
            status: parts.status.as_u16(),
            version: parts.version,
            headers: parts.headers,
            body,
        }
    }
}

/// One GET over a new TLS connection.
pub async fn get_tls(
    addr: SocketAddr,
    sni: &str,
    cfg: &Arc<rustls::ClientConfig>,
    path: &str,
) -> (Got, Session) {
    let (tls, session) = connect(addr, sni, cfg).await.unwrap();
    let h2 = session.alpn.as_deref() == Some("h2");
    let mut c = Client::over(tls, h2).await;
    (c.get(sni, path, &[]).await, session)
}

/// A multi-threaded runtime for a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
