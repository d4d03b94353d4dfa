//! Traces and spans as they are made: the W3C `traceparent` ([`TraceParent`]), identifiers,
//! [`Span`]s and what they record ([`SpanData`]); a finished span goes to a [`Record`] (the
//! tracer's queue, src/export.rs), so nothing here depends on the exporter.

use std::borrow::Cow;
use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Whether a tracer was started in this process: the one branch code that looks for a span in
/// a request's extensions takes first, so that with tracing off (the default) it costs no lookup.
pub fn active() -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::Relaxed)
}

static ACTIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn activate() {
    ACTIVE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The field's name.
pub const TRACEPARENT: &str = "traceparent";

/// The longest `traceparent` value read. Version 00 is 55 bytes; a later version may append
/// fields, of which this reads none.
pub const TRACEPARENT_MAX: usize = 256;

/// How a process traces.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Where spans go: an OTLP/HTTP endpoint, `http://host:port` (spans are POSTed to its
    /// `/v1/traces`) or `http://host:port/path` (used as is). `None`: tracing is off.
    pub endpoint: Option<String>,
    /// The share of new traces sampled, from 0 to 1 (a request whose `traceparent` says
    /// whether it is sampled follows it).
    pub sample: f64,
    /// The resource's attributes: `service.name` and the like.
    pub resource: Vec<(String, String)>,
    /// Spans waiting for the exporter, at most.
    pub queue_spans: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            endpoint: None,
            sample: 1.0,
            resource: Vec::new(),
            queue_spans: 8192,
        }
    }
}

/// A trace's id and one of its spans' ids: what `traceparent` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl TraceParent {
    /// A `traceparent` value, or `None` when it is not one (W3C Trace Context, level 1:
    /// lower-case hex, no all-zero id, version `ff` invalid, a later version's extra fields
    /// after a `-` ignored).
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        if value.len() < 55 || value.len() > TRACEPARENT_MAX {
            return None;
        }
        let version = hex_byte(&value[0..2])?;
        if version == 0xff || (version == 0 && value.len() != 55) {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        if value.len() > 55 && value[55] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, b) in span_id.iter_mut().enumerate() {
            *b = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&value[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The value: version 00, sampled or not.
    pub fn to_bytes(&self) -> [u8; 55] {
        let mut out = [b'-'; 55];
        out[0] = b'0';
        out[1] = b'0';
        put_hex(&mut out[3..35], &self.trace_id);
        put_hex(&mut out[36..52], &self.span_id);
        out[53] = b'0';
        out[54] = if self.sampled { b'1' } else { b'0' };
        out
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    Some(hex_digit(two[0])? << 4 | hex_digit(two[1])?)
}

fn put_hex(out: &mut [u8], bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 15)];
    }
}

/// Lower-case hex of an id (tests and logs).
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    put_hex(&mut out, bytes);
    String::from_utf8(out).unwrap_or_default()
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

thread_local! {
    /// This thread's draws (splitmix64), seeded from the OS's randomness (std's hasher keys).
    static DRAWS: Cell<u64> = Cell::new({
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::process::id().into());
        h.finish()
    });
}

/// A random-looking u64 of this thread's.
pub(crate) fn draw() -> u64 {
    DRAWS.with(|s| {
        let v = s.get().wrapping_add(GOLDEN);
        s.set(v);
        mix64(v)
    })
}

fn new_span_id() -> [u8; 8] {
    loop {
        let v = draw();
        if v != 0 {
            return v.to_be_bytes();
        }
    }
}

pub(crate) fn new_trace_id(low: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&draw().to_be_bytes());
    id[8..].copy_from_slice(&low.max(1).to_be_bytes());
    id
}

/// What a span is, as OTLP numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Cow<'static, str>),
    Int(i64),
    Bool(bool),
}

impl From<&'static str> for Value {
    fn from(s: &'static str) -> Self {
        Value::Str(Cow::Borrowed(s))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(Cow::Owned(s))
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// A finished span, as the exporter takes it.
#[derive(Debug, Clone)]
pub struct SpanData {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: Cow<'static, str>,
    pub kind: Kind,
    /// Nanoseconds since the Unix epoch.
    pub start: u64,
    pub end: u64,
    pub attributes: Vec<(&'static str, Value)>,
    /// The span's status is an error, with this message.
    pub error: Option<String>,
}

/// Where a finished span goes: the tracer's queue ([`crate::Tracer`] implements it), so a span
/// needs nothing of the exporter.
pub(crate) trait Record: Send + Sync + std::fmt::Debug {
    /// Queue `span` for export, or drop and count it when the queue is full.
    fn record(&self, span: SpanData);
}

/// A span on its way: recorded (queued for the exporter) when dropped. A span dropped before
/// [`Span::end`] ends then.
#[derive(Debug)]
pub struct Span {
    tracer: Arc<dyn Record>,
    data: SpanData,
    started: Instant,
    ended: bool,
}

impl Span {
    pub(crate) fn new(
        tracer: Arc<dyn Record>,
        trace_id: [u8; 16],
        parent: Option<[u8; 8]>,
        name: impl Into<Cow<'static, str>>,
        kind: Kind,
    ) -> Span {
        let start = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Span {
            tracer,
            data: SpanData {
                trace_id,
                span_id: new_span_id(),
                parent,
                name: name.into(),
                kind,
                start,
                end: start,
                attributes: Vec::new(),
                error: None,
            },
            started: Instant::now(),
            ended: false,
        }
    }

    /// Its place in the trace, for its children and for a `traceparent` sent on.
    pub fn context(&self) -> SpanContext {
        SpanContext {
            tracer: self.tracer.clone(),
            trace_id: self.data.trace_id,
            span_id: self.data.span_id,
        }
    }

    /// The `traceparent` of a request this span sends.
    pub fn traceparent(&self) -> [u8; 55] {
        TraceParent {
            trace_id: self.data.trace_id,
            span_id: self.data.span_id,
            sampled: true,
        }
        .to_bytes()
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.data.attributes.push((key, value.into()));
    }

    pub fn set_name(&mut self, name: impl Into<Cow<'static, str>>) {
        self.data.name = name.into();
    }

    /// Its status is an error.
    pub fn fail(&mut self, message: impl Into<String>) {
        self.data.error = Some(message.into());
    }

    /// It ended now (a later call changes nothing).
    pub fn end(&mut self) {
        self.end_at(Instant::now());
    }

    /// It ended at `at` (a later call changes nothing).
    pub fn end_at(&mut self, at: Instant) {
        if !self.ended {
            self.ended = true;
            let d = at.saturating_duration_since(self.started);
            self.data.end = self
                .data
                .start
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        }
    }

    pub fn trace_id(&self) -> [u8; 16] {
        self.data.trace_id
    }

    pub fn span_id(&self) -> [u8; 8] {
        self.data.span_id
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.end();
        let data = std::mem::replace(
            &mut self.data,
            SpanData {
                trace_id: [0; 16],
                span_id: [0; 8],
                parent: None,
                name: Cow::Borrowed(""),
                kind: Kind::Internal,
                start: 0,
                end: 0,
                attributes: Vec::new(),
                error: None,
            },
        );
        self.tracer.record(data);
    }
}

/// A sampled span's place in its trace: what its children need (it rides in a request's
/// extensions, so the origin client and the store reads find it).
#[derive(Debug, Clone)]
pub struct SpanContext {
    tracer: Arc<dyn Record>,
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl SpanContext {
    /// A child span, started now.
    pub fn child(&self, name: impl Into<Cow<'static, str>>, kind: Kind) -> Span {
        Span::new(
            self.tracer.clone(),
            self.trace_id,
            Some(self.span_id),
            name,
            kind,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_round_trip() {
        let tp = TraceParent::parse(GOOD).expect("valid");
        assert!(tp.sampled);
        assert_eq!(hex(&tp.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&tp.span_id), "00f067aa0ba902b7");
        assert_eq!(&tp.to_bytes()[..], GOOD);
        let unsampled =
            TraceParent::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .expect("valid");
        assert!(!unsampled.sampled);
    }

    #[test]
    fn malformed_traceparents_are_none() {
        let bad: &[&[u8]] = &[
            b"",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ];
        for b in bad {
            assert_eq!(
                TraceParent::parse(b),
                None,
                "{}",
                String::from_utf8_lossy(b)
            );
        }
        let long = [b'a'; 10_000];
        assert_eq!(TraceParent::parse(&long), None);
        // A later version may add fields.
        assert!(
            TraceParent::parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more")
                .is_some()
        );
    }

    #[test]
    fn ids_differ() {
        let a = new_trace_id(draw());
        let b = new_trace_id(draw());
        assert_ne!(a, b);
        assert_ne!(new_span_id(), new_span_id());
    }
}
