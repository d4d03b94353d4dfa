//! The tracer: the sampling decision, the bounded queue of finished spans, and the one exporter
//! thread that takes them in batches (up to [`BATCH`] spans, or what came within [`LINGER`]
//! of the first) and POSTs each batch to the collector as OTLP/HTTP protobuf
//! (`Content-Type: application/x-protobuf`) over a plain-HTTP connection of its own. A batch
//! the collector does not take (no connection, a non-2xx answer) is dropped and counted; the
//! exporter does not retry, so a collector that is down costs nothing but those spans.

use std::borrow::Cow;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tracing::{info, warn};

use crate::otlp;
use crate::share::Share;
use crate::span::{Kind, Record, Settings, Span, SpanData, TraceParent, draw, new_trace_id};

/// Spans in one POST, at most.
pub const BATCH: usize = 512;
/// How long the exporter waits for more spans after the first of a batch.
pub const LINGER: Duration = Duration::from_millis(200);
/// Connecting to the collector, and each read or write of a POST, at most.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the tracer counts.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Spans the collector took (`trace_spans_exported_total`).
    pub exported: Counter,
    /// Spans dropped because the queue was full (`trace_spans_dropped_total{reason="queue_full"}`).
    pub queue_full: Counter,
    /// Spans of batches the collector did not take (`{reason="export_failed"}`).
    pub export_failed: Counter,
}

/// Where spans are POSTed: `http://host[:port][/path]` (no path: `/v1/traces`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host as connected to (an IPv6 literal without its brackets).
    pub host: String,
    pub port: u16,
    /// The Host field's value.
    pub authority: String,
    pub path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or("must start with http:// (OTLP/HTTP without TLS)")?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty()
            || authority.contains(['@', ' ', '?', '#'])
            || path.contains([' ', '#'])
            || path.bytes().any(|b| b.is_ascii_control())
        {
            return Err("must be http://host[:port][/path]".into());
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => match v6.split_once(']') {
                Some((h, "")) => (h, None),
                Some((h, p)) => (h, Some(p.strip_prefix(':').ok_or("bad port")?)),
                None => return Err("has an unclosed IPv6 bracket".into()),
            },
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        if host.is_empty() {
            return Err("has no host".into());
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("has an invalid port `{p}`"))?,
        };
        let path = match path {
            "" | "/" => "/v1/traces".to_string(),
            p => p.to_string(),
        };
        Ok(Endpoint {
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            path,
        })
    }
}

/// Why tracing could not start.
#[derive(Debug)]
pub enum StartError {
    Endpoint(String),
    Thread(io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Endpoint(e) => write!(f, "tracing endpoint: {e}"),
            StartError::Thread(e) => write!(f, "cannot start the trace exporter: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

enum Msg {
    Span(SpanData),
    /// Answered once every span queued before it was sent (or given up on).
    Flush(SyncSender<()>),
}

impl Record for Tracer {
    fn record(&self, span: SpanData) {
        Tracer::record(self, span);
    }
}

/// A process's tracer: spans go into its queue, its exporter thread sends them.
#[derive(Debug)]
pub struct Tracer {
    /// The share of new traces sampled.
    ratio: Share,
    tx: SyncSender<Msg>,
    counters: Counters,
}

impl Tracer {
    /// The tracer `settings` ask for, its exporter thread started; `None` when tracing is off
    /// (no endpoint).
    pub fn start(
        settings: &Settings,
        counters: Counters,
    ) -> Result<Option<Arc<Tracer>>, StartError> {
        let Some(url) = &settings.endpoint else {
            return Ok(None);
        };
        let endpoint = Endpoint::parse(url).map_err(StartError::Endpoint)?;
        let (tx, rx) = mpsc::sync_channel(settings.queue_spans.max(1));
        let exporter = Exporter {
            endpoint,
            resource: settings.resource.clone(),
            counters: counters.clone(),
            warned: None,
        };
        std::thread::Builder::new()
            .name("trace-export".into())
            .spawn(move || exporter.run(rx))
            .map_err(StartError::Thread)?;
        crate::span::activate();
        info!(endpoint = %url, sample = settings.sample, "tracing to OTLP/HTTP");
        Ok(Some(Arc::new(Tracer {
            ratio: Share::of(settings.sample),
            tx,
            counters,
        })))
    }

    /// The head sampling decision for work that came with `traceparent` (its value, if any):
    /// the span to start for it, or `None` when it is not sampled. A valid `traceparent`
    /// decides by its sampled flag and the span becomes its child; without one (or with one
    /// that is not valid) a new trace starts, sampled at the configured ratio.
    pub fn sample(
        self: &Arc<Self>,
        traceparent: Option<&[u8]>,
        name: impl Into<Cow<'static, str>>,
        kind: Kind,
    ) -> Option<Span> {
        match traceparent.and_then(TraceParent::parse) {
            Some(tp) if tp.sampled => Some(Span::new(
                self.clone(),
                tp.trace_id,
                Some(tp.span_id),
                name,
                kind,
            )),
            Some(_) => None,
            None => {
                let d = draw();
                self.ratio
                    .admits(|| d)
                    .then(|| Span::new(self.clone(), new_trace_id(d), None, name, kind))
            }
        }
    }

    /// Queue a finished span, or drop and count it when the queue is full. Never waits.
    pub(crate) fn record(&self, span: SpanData) {
        match self.tx.try_send(Msg::Span(span)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.counters.queue_full.inc();
            }
            Err(TrySendError::Disconnected(_)) => {
                self.counters.export_failed.inc();
            }
        }
    }

    /// Wait (at most `timeout`) until the spans queued so far are sent (at shutdown, and tests).
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, wait) = mpsc::sync_channel(1);
        let deadline = Instant::now() + timeout;
        let mut msg = Msg::Flush(done);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return false,
            }
        }
        wait.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

struct Exporter {
    endpoint: Endpoint,
    resource: Vec<(String, String)>,
    counters: Counters,
    /// When the last failure was logged (one warning a minute at most).
    warned: Option<Instant>,
}

impl Exporter {
    fn run(mut self, rx: Receiver<Msg>) {
        let mut batch: Vec<SpanData> = Vec::new();
        let mut deadline = Instant::now();
        loop {
            let msg = if batch.is_empty() {
                rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            };
            match msg {
                Ok(Msg::Span(s)) => {
                    if batch.is_empty() {
                        deadline = Instant::now() + LINGER;
                    }
                    batch.push(s);
                    if batch.len() >= BATCH {
                        self.send(&mut batch);
                    }
                }
                Ok(Msg::Flush(done)) => {
                    self.send(&mut batch);
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => self.send(&mut batch),
                Err(RecvTimeoutError::Disconnected) => {
                    self.send(&mut batch);
                    return;
                }
            }
        }
    }

    fn send(&mut self, batch: &mut Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let body = otlp::encode(&self.resource, batch);
        let n = batch.len() as u64;
        batch.clear();
        match post(&self.endpoint, &body) {
            Ok(()) => {
                self.counters.exported.inc_by(n);
            }
            Err(e) => {
                self.counters.export_failed.inc_by(n);
                if self
                    .warned
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
                {
                    self.warned = Some(Instant::now());
                    warn!(
                        "trace export to http://{}{} failed, {n} spans dropped: {e}",
                        self.endpoint.authority, self.endpoint.path
                    );
                }
            }
        }
    }
}

/// One POST on a connection of its own; Ok when the collector answered 2xx.
fn post(ep: &Endpoint, body: &[u8]) -> io::Result<()> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host has no address");
    let mut conn = None;
    for addr in (ep.host.as_str(), ep.port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, IO_TIMEOUT) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut conn = conn.ok_or(last)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let _ = conn.set_nodelay(true);
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        ep.path,
        ep.authority,
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    // The status line is all that is read: "HTTP/1.1 200 ..."
    let mut got = Vec::with_capacity(64);
    let mut buf = [0u8; 512];
    while !got.contains(&b'\n') && got.len() < 4096 {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let status = got
        .split(|b| *b == b' ')
        .nth(1)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(200..=299) => Ok(()),
        Some(s) => Err(io::Error::other(format!("the collector answered {s}"))),
        None => Err(io::Error::other("no HTTP response")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://collector:4318").expect("valid");
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("collector", 4318, "/v1/traces")
        );
        let e = Endpoint::parse("http://[::1]:4318/otlp/v1/traces").expect("valid");
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("::1", 4318, "/otlp/v1/traces")
        );
        assert_eq!(Endpoint::parse("http://c/").map(|e| e.port), Ok(80));
        for bad in [
            "https://c:4318",
            "c:4318",
            "http://",
            "http://c:0",
            "http://u@c",
            "http://c:x",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
