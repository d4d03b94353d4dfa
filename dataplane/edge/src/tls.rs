//! TLS termination with rustls (aws-lc-rs) on the workers' own sockets.
//!
//! One [`Tls`] serves every worker: one rustls `ServerConfig`, so the session-ticket keys (a
//! rotator that takes a new key every 6 hours and accepts the previous one) and the session
//! cache are the same on every worker, and a client resumes on whichever worker the kernel or
//! the steering program gives its next connection. The certificates are chosen per handshake by
//! SNI (src/tls/certs.rs) from the set in force; a thread re-reads the PEM files every
//! [`RELOAD_EVERY`] and swaps in the new set when they changed and load whole (a Kubernetes
//! Secret update, e.g. cert-manager's renewal, replaces the mounted files at once). A bad new
//! file keeps the old set, and says so in the log and in `tls_certificate_reloads_total`.
//! Connections already open keep the session they have.
//!
//! Per worker, at most [`Settings::max_handshakes_per_worker`] handshakes are in progress: the
//! next TLS connection is closed at once (counted) until one finishes, so a flood of half-open
//! handshakes cannot take the worker's CPU from the connections it serves. A handshake not
//! done within [`Settings::handshake_timeout`] is dropped.

mod certs;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{error, info};

pub use certs::{CertSet, PemPair, Resolver};

/// How TLS is terminated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The certificate chains with their keys; the first is the default.
    pub certificates: Vec<PemPair>,
    /// Time a client has to finish its handshake.
    pub handshake_timeout: Duration,
    /// Handshakes in progress per worker at most.
    pub max_handshakes_per_worker: usize,
    /// The oldest TLS version accepted.
    pub min_version: MinVersion,
}

/// The oldest TLS version a listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinVersion {
    V1_2,
    V1_3,
}

/// How often the certificate files are read again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

type Label = [(&'static str, String); 1];

/// TLS counters, under the data plane's prefix.
#[derive(Debug, Default)]
pub struct TlsMetrics {
    /// Handshakes by result: `ok`, `failed`, `timeout`, `refused` (over the per-worker cap).
    pub handshakes: Family<Label, Counter>,
    /// Handshakes that resumed a session (a ticket or the session cache).
    pub resumed: Counter,
    /// Reloads of the certificate files by result: `ok`, `error`.
    pub reloads: Family<Label, Counter>,
    /// The earliest end of validity of the certificates in force, seconds since the epoch.
    pub earliest_not_after: Gauge,
}

impl TlsMetrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let m = Arc::new(Self::default());
        registry.register(
            "tls_handshakes",
            "TLS handshakes by result (ok, failed, timeout, refused over the per-worker cap)",
            m.handshakes.clone(),
        );
        registry.register(
            "tls_resumed",
            "TLS handshakes that resumed a session",
            m.resumed.clone(),
        );
        registry.register(
            "tls_certificate_reloads",
            "Reloads of changed certificate files by result (ok, error: the old set stays)",
            m.reloads.clone(),
        );
        registry.register(
            "tls_certificate_not_after_seconds",
            "The earliest end of validity of the certificates in force (Unix time)",
            m.earliest_not_after.clone(),
        );
        m
    }

    /// Count one handshake that ended as `result`.
    pub fn handshake(&self, result: &'static str) {
        self.handshakes
            .get_or_create(&[("result", result.to_string())])
            .inc();
    }
}

/// What a TLS connection negotiated, put into each of its requests' extensions (in
/// edgecache-upstream's `ClientConn`).
#[derive(Debug, Clone)]
pub struct TlsInfo {
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The protocol ALPN chose (`h2`, `http/1.1`), if any.
    pub alpn: Option<String>,
    /// The name the client asked for.
    pub sni: Option<String>,
    pub resumed: bool,
}

/// TLS for every worker.
pub struct Tls {
    acceptor: TlsAcceptor,
    resolver: Arc<Resolver>,
    pairs: Vec<PemPair>,
    provider: Arc<CryptoProvider>,
    pub handshake_timeout: Duration,
    pub max_handshakes_per_worker: usize,
    pub metrics: Arc<TlsMetrics>,
}

impl Tls {
    /// Load the certificates of `cfg` (every problem is an error naming its file) and build
    /// the server config; `http2` offers `h2` by ALPN.
    pub fn new(cfg: &Settings, http2: bool, metrics: Arc<TlsMetrics>) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let pairs = cfg.certificates.clone();
        let set = CertSet::from_pem(&certs::read_files(&pairs)?, &provider)?;
        log_set(&set, "certificates loaded");
        metrics.earliest_not_after.set(earliest(&set));
        let resolver = Arc::new(Resolver::new(set));
        let versions: &[&'static rustls::SupportedProtocolVersion] = match cfg.min_version {
            MinVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            MinVersion::V1_3 => &[&rustls::version::TLS13],
        };
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        server.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|e| format!("cannot make session-ticket keys: {e}"))?;
        server.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE);
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            resolver,
            pairs,
            provider,
            handshake_timeout: cfg.handshake_timeout,
            max_handshakes_per_worker: cfg.max_handshakes_per_worker,
            metrics,
        })
    }

    /// Re-read the certificate files every [`RELOAD_EVERY`] on a thread of its own, until
    /// the process exits; a changed set that loads whole replaces the one in force.
    pub fn watch_files(self: &Arc<Self>) -> std::io::Result<()> {
        let tls = self.clone();
        std::thread::Builder::new()
            .name("tls-reload".into())
            .spawn(move || {
                let mut last = certs::read_files(&tls.pairs).ok();
                loop {
                    std::thread::sleep(RELOAD_EVERY);
                    let now = match certs::read_files(&tls.pairs) {
                        Ok(now) => now,
                        Err(e) => {
                            // Mid-rotation a file may be missing for a moment: not counted as
                            // a failed reload until it stays so.
                            if last.is_some() {
                                error!("TLS certificates: {e}; keeping the ones in force");
                                tls.metrics.reloads.get_or_create(&err_label()).inc();
                                last = None;
                            }
                            continue;
                        }
                    };
                    if last.as_ref() == Some(&now) {
                        continue;
                    }
                    match CertSet::from_pem(&now, &tls.provider) {
                        Ok(set) => {
                            log_set(&set, "certificates reloaded");
                            tls.metrics.earliest_not_after.set(earliest(&set));
                            tls.resolver.replace(set);
                            tls.metrics
                                .reloads
                                .get_or_create(&[("result", "ok".into())])
                                .inc();
                        }
                        Err(e) => {
                            error!("TLS certificates changed but do not load: {e}; keeping the ones in force");
                            tls.metrics.reloads.get_or_create(&err_label()).inc();
                        }
                    }
                    last = Some(now);
                }
            })
            .map(|_| ())
    }

    /// The handshake of an accepted connection, within the worker's cap and the timeout;
    /// `None` when it was refused or failed (counted).
    pub async fn accept(
        &self,
        stream: TcpStream,
        in_progress: &Rc<Cell<usize>>,
    ) -> Option<(TlsStream<TcpStream>, TlsInfo)> {
        if in_progress.get() >= self.max_handshakes_per_worker {
            self.metrics.handshake("refused");
            return None;
        }
        let _slot = Handshaking::enter(in_progress);
        let stream = match tokio::time::timeout(
            self.handshake_timeout,
            self.acceptor.accept(stream),
        )
        .await
        {
            Err(_) => {
                self.metrics.handshake("timeout");
                return None;
            }
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                self.metrics.handshake("failed");
                return None;
            }
            Ok(Ok(s)) => s,
        };
        self.metrics.handshake("ok");
        let conn = stream.get_ref().1;
        let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        if resumed {
            self.metrics.resumed.inc();
        }
        let info = TlsInfo {
            version: match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "TLSv1.3",
            },
            alpn: conn
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            sni: conn.server_name().map(str::to_string),
            resumed,
        };
        tracing::debug!(
            version = info.version,
            alpn = ?info.alpn,
            sni = ?info.sni,
            resumed = info.resumed,
            "TLS handshake done"
        );
        Some((stream, info))
    }
}

/// Sessions kept for resumption by session ID (TLS 1.2 clients without tickets).
const SESSION_CACHE: usize = 16 * 1024;

fn err_label() -> Label {
    [("result", "error".into())]
}

fn earliest(set: &CertSet) -> i64 {
    set.described()
        .iter()
        .map(|d| d.not_after)
        .min()
        .unwrap_or(0)
}

fn log_set(set: &CertSet, what: &str) {
    for (i, d) in set.described().iter().enumerate() {
        info!(
            index = i,
            default = i == 0,
            names = ?d.names,
            not_after = d.not_after,
            "TLS {what}"
        );
    }
}

/// One handshake in progress on a worker.
struct Handshaking(Rc<Cell<usize>>);

impl Handshaking {
    fn enter(count: &Rc<Cell<usize>>) -> Self {
        count.set(count.get() + 1);
        Self(count.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}
