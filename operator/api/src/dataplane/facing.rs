//! The client-facing side of the data-plane config: TLS termination, HTTP/2 and the access log.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{ConfigError, err};
use crate::quantity::{ByteSize, Duration};

/// TLS termination. Off unless `listen` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct TlsConfig {
    /// Where TLS clients connect, e.g. `0.0.0.0:8443`. Default: none (no TLS listener).
    pub listen: Option<SocketAddr>,
    /// Certificate chains with their private keys, PEM files, reloaded when they change. A
    /// client's SNI picks the certificate whose names match it; the first is the default, for
    /// clients without SNI or with a name no certificate carries. At least one when `listen`
    /// is set.
    pub certificates: Vec<CertificateFiles>,
    /// Time a client has to finish its handshake. Default: `10s`.
    pub handshake_timeout: Duration,
    /// Handshakes in progress per worker at most; further TLS connections are closed at once
    /// (counted) until one finishes. Default: 512.
    pub max_handshakes_per_worker: u32,
    /// The oldest TLS version accepted: `1.2` or `1.3`. Default: `1.2`.
    pub min_version: TlsVersion,
    /// Answer requests on the plain listener with a redirect (308) to HTTPS. Default: false.
    pub redirect_http: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            listen: None,
            certificates: Vec::new(),
            handshake_timeout: Duration::secs(10),
            max_handshakes_per_worker: 512,
            min_version: TlsVersion::V1_2,
            redirect_http: false,
        }
    }
}

/// One certificate chain and its key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct CertificateFiles {
    /// The certificate chain, leaf first (a Secret's `tls.crt`).
    pub cert: String,
    /// The private key: PKCS#8, PKCS#1 or SEC1 (a Secret's `tls.key`).
    pub key: String,
}

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum TlsVersion {
    #[default]
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl TlsVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::V1_2 => "1.2",
            TlsVersion::V1_3 => "1.3",
        }
    }
}

/// HTTP/2 to clients: ALPN `h2` on the TLS listener, and prior-knowledge h2c on the plain one.
///
/// The limits a client is told default to 0: derived from the memory plan, so that a worker's
/// HTTP/2 connections at their worst (windows of request DATA, streams with their header lists
/// and handler state) fit its connection budget (the data plane's log line `http2 limits`
/// says which). A value set here is kept, and each connection is charged what it allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct Http2Config {
    /// Serve HTTP/2. Default: true.
    pub enabled: bool,
    /// Streams a client may have open at once on a connection. Default: 0 (from the memory
    /// plan: 4 to 128).
    pub max_concurrent_streams: u32,
    /// The largest header list (decoded) a client may send. Default: 0 (from the memory plan:
    /// `8KiB` to `32KiB`).
    pub max_header_list_size: ByteSize,
    /// Flow-control window of each stream, so one large response keeps the pipe full.
    /// Default: 0 (the connection window, at most `1MiB`).
    pub stream_window: ByteSize,
    /// Flow-control window of a whole connection: the request DATA it may hold. Default: 0
    /// (from the memory plan: `64KiB` to `4MiB`).
    pub connection_window: ByteSize,
    /// Streams a client may reset before the server answers them, before the connection is
    /// closed (the rapid-reset flood). Default: 32.
    pub max_pending_resets: u32,
    /// A PING goes to a connection nothing arrived on for this long; 0s: never. Default: `20s`.
    pub keep_alive_interval: Duration,
    /// A connection whose PING is not answered within this is closed, with its streams.
    /// Default: `10s`.
    pub keep_alive_timeout: Duration,
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            enabled: true,
            max_concurrent_streams: 0,
            max_header_list_size: ByteSize(0),
            stream_window: ByteSize(0),
            connection_window: ByteSize(0),
            max_pending_resets: 32,
            keep_alive_interval: Duration::secs(20),
            keep_alive_timeout: Duration::secs(10),
        }
    }
}

/// One structured line per request, to stdout (fields: docs/observability.md, "Access log").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct AccessLogConfig {
    /// `json`, `combined` or `off`. Default: `json`.
    pub format: AccessLogFormat,
    /// The share of requests logged, from 0 to 1. Default: 1 (every request).
    pub sample: f64,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        Self {
            format: AccessLogFormat::Json,
            sample: 1.0,
        }
    }
}

/// OpenTelemetry traces (docs/observability.md, "Traces"): a span per request, with child
/// spans for its origin or peer fetch and its disk read, sent as OTLP/HTTP protobuf. The
/// `traceparent` of a request is followed and sent on to the origin and the peers. Default: off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct TracingConfig {
    /// The OTLP/HTTP endpoint (plain HTTP): `http://host:port` (spans are POSTed to its
    /// `/v1/traces`, e.g. a collector's port 4318) or `http://host:port/path` (used as is).
    /// Default: unset, tracing off.
    pub endpoint: Option<String>,
    /// The share of new traces sampled, from 0 to 1; a request whose `traceparent` says
    /// whether it is sampled follows it (parent-based). Default: 1.
    pub sample: f64,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            sample: 1.0,
        }
    }
}

/// An OTLP/HTTP endpoint must be `http://host[:port][/path]`.
pub fn check_otlp_endpoint(url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err("must start with http:// (OTLP/HTTP, no TLS)".into());
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if path.contains([' ', '#', '?']) || path.bytes().any(|b| b.is_ascii_control()) {
        return Err("must be http://host[:port][/path]".into());
    }
    super::check_origin_url(&format!("http://{authority}"))
}

/// How access-log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AccessLogFormat {
    /// One JSON object a line.
    #[default]
    Json,
    /// The combined log format, with EdgeCache's fields appended.
    Combined,
    /// No access log.
    Off,
}

impl AccessLogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessLogFormat::Json => "json",
            AccessLogFormat::Combined => "combined",
            AccessLogFormat::Off => "off",
        }
    }
}

/// The value problems of the client-facing sections.
pub(super) fn validate(
    tls: &TlsConfig,
    http2: &Http2Config,
    log: &AccessLogConfig,
    tracing: &TracingConfig,
    errors: &mut Vec<ConfigError>,
) {
    if tls.listen.is_some() && tls.certificates.is_empty() {
        errors.push(err(
            "tls.certificates",
            None,
            "a TLS listener needs at least one certificate",
        ));
    }
    if tls.listen.is_none() && tls.redirect_http {
        errors.push(err(
            "tls.redirectHttp",
            Some("true".into()),
            "redirecting to HTTPS needs a TLS listener (tls.listen)",
        ));
    }
    for (i, c) in tls.certificates.iter().enumerate() {
        for (field, path) in [("cert", &c.cert), ("key", &c.key)] {
            if path.is_empty() {
                errors.push(err(
                    &format!("tls.certificates[{i}].{field}"),
                    None,
                    "must name a PEM file",
                ));
            }
        }
    }
    if tls.handshake_timeout.get().is_zero() {
        errors.push(err(
            "tls.handshakeTimeout",
            Some(tls.handshake_timeout.to_string()),
            "must be greater than zero",
        ));
    }
    if tls.max_handshakes_per_worker == 0 {
        errors.push(err(
            "tls.maxHandshakesPerWorker",
            Some("0".into()),
            "must be at least 1",
        ));
    }
    // 0: from the memory plan. HTTP/2's limits: a window is at most 2^31-1 and at least the
    // protocol's 65,535 default.
    for (path, size) in [
        ("http2.streamWindow", http2.stream_window),
        ("http2.connectionWindow", http2.connection_window),
    ] {
        if size.0 != 0 && (size.0 < 65_535 || size.0 > (1 << 31) - 1) {
            errors.push(err(
                path,
                Some(size.to_string()),
                "must be 0 (from the memory plan) or between 65535 bytes and 2GiB - 1",
            ));
        }
    }
    let list = http2.max_header_list_size.0;
    if list != 0 && !(1024..=(1 << 24)).contains(&list) {
        errors.push(err(
            "http2.maxHeaderListSize",
            Some(http2.max_header_list_size.to_string()),
            "must be 0 (from the memory plan) or between 1KiB and 16MiB",
        ));
    }
    if http2.max_concurrent_streams > 1_000_000 {
        errors.push(err(
            "http2.maxConcurrentStreams",
            Some(http2.max_concurrent_streams.to_string()),
            "must be 0 (from the memory plan) or at most 1000000",
        ));
    }
    if !http2.keep_alive_interval.get().is_zero() && http2.keep_alive_timeout.get().is_zero() {
        errors.push(err(
            "http2.keepAliveTimeout",
            Some(http2.keep_alive_timeout.to_string()),
            "must be greater than zero while http2.keepAliveInterval is on",
        ));
    }
    if !(0.0..=1.0).contains(&log.sample) || log.sample.is_nan() {
        errors.push(err(
            "accessLog.sample",
            Some(log.sample.to_string()),
            "must be between 0 and 1",
        ));
    }
    if !(0.0..=1.0).contains(&tracing.sample) || tracing.sample.is_nan() {
        errors.push(err(
            "tracing.sample",
            Some(tracing.sample.to_string()),
            "must be between 0 and 1",
        ));
    }
    if let Some(url) = &tracing.endpoint
        && let Err(why) = check_otlp_endpoint(url)
    {
        errors.push(err("tracing.endpoint", Some(format!("{url:?}")), why));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DataplaneConfig, parse};

    #[test]
    fn tls_is_off_and_http2_and_the_access_log_on_by_default() {
        let cfg = parse("origin: {url: \"http://o:80\"}").expect("valid");
        assert_eq!(cfg.tls.listen, None);
        assert!(cfg.http2.enabled);
        assert_eq!(cfg.access_log.format, super::AccessLogFormat::Json);
        assert_eq!(
            cfg,
            DataplaneConfig {
                origin: cfg.origin.clone(),
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_tls_section_round_trips_and_its_mistakes_are_reported() {
        let yaml = "origin: {url: \"http://o:80\"}\n\
                    tls:\n  listen: 0.0.0.0:8443\n  minVersion: \"1.3\"\n  certificates:\n  \
                    - {cert: /tls/a/tls.crt, key: /tls/a/tls.key}\n\
                    accessLog: {format: combined, sample: 0.5}\n";
        let cfg = parse(yaml).expect("valid");
        assert_eq!(cfg.tls.min_version, super::TlsVersion::V1_3);
        assert_eq!(cfg.tls.certificates[0].key, "/tls/a/tls.key");
        assert_eq!(
            parse(&super::super::to_yaml(&cfg)).expect("round trip"),
            cfg
        );

        let bad = "origin: {url: \"http://o:80\"}\n\
                   tls: {listen: 0.0.0.0:8443, redirectHttp: true, handshakeTimeout: 0s}\n\
                   http2: {streamWindow: 1KiB, maxConcurrentStreams: 2000000, keepAliveTimeout: 0s}\n\
                   accessLog: {sample: 2}\n";
        let errors = parse(bad).expect_err("invalid").0;
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        for want in [
            "tls.certificates",
            "tls.handshakeTimeout",
            "http2.maxConcurrentStreams",
            "http2.streamWindow",
            "http2.keepAliveTimeout",
            "accessLog.sample",
        ] {
            assert!(paths.contains(&want), "{want} missing from {paths:?}");
        }
        assert!(!paths.contains(&"tls.redirectHttp"), "{paths:?}");
    }

    #[test]
    fn tracing_is_off_by_default_and_its_mistakes_are_reported() {
        let base = "origin: {url: \"http://o:80\"}\n";
        let cfg = parse(base).expect("valid");
        assert_eq!(cfg.tracing.endpoint, None);
        let yaml = format!("{base}tracing: {{endpoint: \"http://otel:4318\", sample: 0.1}}\n");
        let cfg = parse(&yaml).expect("valid");
        assert_eq!(cfg.tracing.endpoint.as_deref(), Some("http://otel:4318"));
        assert_eq!(cfg.tracing.sample, 0.1);
        assert_eq!(
            parse(&super::super::to_yaml(&cfg)).expect("round trip"),
            cfg
        );
        let v6 = format!("{base}tracing: {{endpoint: \"http://[::1]:4318/v1/traces\"}}\n");
        assert!(parse(&v6).is_ok());
        for bad in [
            "tracing: {endpoint: \"https://otel:4318\"}",
            "tracing: {endpoint: \"otel:4318\"}",
            "tracing: {endpoint: \"http://otel:0\"}",
            "tracing: {endpoint: \"http://u@otel:4318\"}",
            "tracing: {endpoint: \"http://otel:4318/a b\"}",
            "tracing: {sample: 1.5}",
        ] {
            let errors = parse(&format!("{base}{bad}\n")).expect_err(bad).0;
            assert!(
                !errors.is_empty() && errors.iter().all(|e| e.path.starts_with("tracing.")),
                "{bad}: {errors:?}"
            );
        }
    }
}
