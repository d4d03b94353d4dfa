//! The metadata of a stored response (RFC 9111 3.1) and its compact binary form.
//!
//! The store keeps the blob from [`StoredResponse::encode`] next to the body and does not look
//! inside it. Header fields are kept as received, minus those a cache must not store (3.1):
//! `Connection` and the fields it lists, the hop-by-hop fields of RFC 9110 7.6.1, the
//! proxy-specific authentication fields, and the fields named by a qualified `private` or
//! `no-cache`. HTTP gives no meaning to the relative order of different field names (RFC 9110
//! 5.3); lines of one field keep their order.
//!
//! Encoding (all integers big-endian):
//!
//! ```text
//! "ECSR" version:u8=1 status:u16
//! request_time(secs:u64 nanos:u32) response_time(secs:u64 nanos:u32)
//! nheaders:u16 { name_len:u16 name value_len:u32 value }*
//! nvary:u16 { name_len:u16 name present:u8 [value_len:u32 value] }*
//! ```

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONNECTION, DATE, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode, request, response};

use super::cache_control::{ResponseDirectives, TARGET_LIST};
use super::config::PolicyConfig;
use super::freshness::{BASIS_FIELDS, Basis, Freshness};
use super::syntax;
use super::vary_key::{Vary, VaryKey};

const MAGIC: &[u8; 4] = b"ECSR";
const VERSION: u8 = 1;

/// Fields RFC 9110 7.6.1 names as connection-specific, and the proxy authentication fields
/// RFC 9111 3.1 says are not stored.
const NOT_STORED: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
    "proxy-authentication-info",
    "proxy-authorization",
];

/// True for a field that is never stored nor forwarded from storage.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    NOT_STORED.contains(&name.as_str())
}

/// A stored response without its body. Its fields are read-only: what freshness and Vary need
/// of them is read once, when it is made (a hit parses none of them again); a changed response
/// (a freshening 304) is a new one ([`StoredResponse::from_parts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    status: StatusCode,
    headers: HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
    vary: VaryKey,
    /// Stale from this instant on whatever its freshness lifetime says: set by the cache for a
    /// soft purge (the next request revalidates; RFC 5861 stale-* still count from here).
    /// Not part of the stored blob: the cache sets it after [`StoredResponse::decode`].
    pub expired_at: Option<SystemTime>,
    /// Read from `headers` when made.
    basis: Basis,
    /// Its Vary, read from `headers` when made.
    selecting: Vary,
    /// `headers` without the fields never sent to clients (the targeted cache-control fields,
    /// and hop-by-hop ones a blob of another build may hold), when it has any.
    client: Option<HeaderMap>,
}

impl StoredResponse {
    /// The metadata to store for `resp`, the answer to `req` (times as in 4.2.3).
    pub fn new(
        req: &request::Parts,
        resp: &response::Parts,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Self {
        Self::from_fields(
            &req.headers,
            resp.status,
            &resp.headers,
            request_time,
            response_time,
        )
    }

    /// As [`StoredResponse::new`], from the bare fields.
    pub fn from_fields(
        request_headers: &HeaderMap,
        status: StatusCode,
        response_headers: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Self {
        let basis = Basis::of(response_headers, response_time);
        Self::from_received(
            request_headers,
            status,
            response_headers,
            request_time,
            response_time,
            basis,
        )
    }

    /// As [`StoredResponse::from_fields`], with the received fields already read: `basis` is
    /// [`Basis::of`] `response_headers` at `response_time`. A miss reads them once, for
    /// [`storable_with`](crate::storable::storable_with) and for this.
    pub fn from_received(
        request_headers: &HeaderMap,
        status: StatusCode,
        response_headers: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
        basis: Basis,
    ) -> Self {
        debug_assert_eq!(basis, Basis::of(response_headers, response_time));
        let vary = match Vary::of(response_headers) {
            Vary::Fields(names) => VaryKey::for_request(&names, request_headers),
            Vary::None | Vary::Any => VaryKey::default(),
        };
        let (mut headers, kept) = stored_fields(response_headers, &basis.directives);
        // RFC 9110 6.6.1: a recipient with a clock that caches a response without Date appends
        // one with the time it was received.
        let dated = headers.contains_key(DATE);
        if !dated && let Some(date) = syntax::http_date_value(response_time) {
            headers.insert(DATE, date);
        }
        // What was read of the fields received holds for the fields stored unless storing
        // left out one that it reads, or added Date.
        let basis = if kept && dated {
            debug_assert_eq!(basis, Basis::of(&headers, response_time));
            basis
        } else {
            Basis::of(&headers, response_time)
        };
        Self::with_basis(status, headers, request_time, response_time, vary, basis)
    }

    /// A stored response of these parts as they are (`headers` already the stored fields).
    pub fn from_parts(
        status: StatusCode,
        headers: HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
        vary: VaryKey,
    ) -> Self {
        let basis = Basis::of(&headers, response_time);
        Self::with_basis(status, headers, request_time, response_time, vary, basis)
    }

    fn with_basis(
        status: StatusCode,
        headers: HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
        vary: VaryKey,
        basis: Basis,
    ) -> Self {
        let mut headers = headers;
        let mut client = not_for_clients(&headers);
        // A response to a client adds up to three fields (Age, Content-Length, Cache-Status,
        // headers::for_client): room for them in the index of the map it is cloned from, so
        // the clone does not grow (rehash) its index on every hit.
        client.as_mut().unwrap_or(&mut headers).reserve(3);
        Self {
            basis,
            selecting: Vary::of(&headers),
            client,
            status,
            headers,
            request_time,
            response_time,
            vary,
            expired_at: None,
        }
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stored header fields (see the module docs for what is left out).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// When the request that fetched it was sent (`request_time`, RFC 9111 4.2.3).
    pub fn request_time(&self) -> SystemTime {
        self.request_time
    }

    /// When the response was received (`response_time`).
    pub fn response_time(&self) -> SystemTime {
        self.response_time
    }

    /// The stored fields that may be sent to a client: [`StoredResponse::headers`] without the
    /// targeted cache-control fields (RFC 9213 2.2: this cache does not forward them) and
    /// hop-by-hop fields (never stored; this guards blobs written by other builds).
    pub fn client_fields(&self) -> &HeaderMap {
        self.client.as_ref().unwrap_or(&self.headers)
    }

    /// The normalized values of the request fields named by Vary (4.1).
    pub fn vary(&self) -> &VaryKey {
        &self.vary
    }

    /// Its Vary field, read.
    pub fn selecting(&self) -> &Vary {
        &self.selecting
    }

    /// The response directives this cache obeys (RFC 9213 2.2 selection).
    pub fn directives(&self) -> &ResponseDirectives {
        &self.basis.directives
    }

    /// What freshness needs of its fields, read when it was made.
    pub fn basis(&self) -> &Basis {
        &self.basis
    }

    /// The date the origin generated it (RFC 9110 6.6.1), or when it was received.
    pub fn date_value(&self) -> SystemTime {
        self.basis.date_value
    }

    /// `current_age` (4.2.3) at `now`.
    pub fn current_age(&self, now: SystemTime) -> Duration {
        self.basis
            .corrected_initial_age(self.request_time, self.response_time)
            .saturating_add(
                now.duration_since(self.response_time)
                    .unwrap_or(Duration::ZERO),
            )
    }

    /// Freshness at `now`.
    pub fn freshness(&self, now: SystemTime, cfg: &PolicyConfig) -> Freshness {
        let mut f = Freshness {
            lifetime: self.basis.lifetime(self.status, cfg),
            age: self.current_age(now),
        };
        if let Some(at) = self.expired_at {
            // Its lifetime ends at the age it had then: stale since `at`, by `now - at`.
            let age_then = self.current_age(at);
            f.lifetime.secs = f.lifetime.secs.min(age_then.as_secs());
        }
        f
    }

    /// Whether this response may be selected for a request with these header fields (4.1).
    pub fn matches(&self, request_headers: &HeaderMap) -> bool {
        match &self.selecting {
            Vary::Any => false,
            Vary::None => true,
            Vary::Fields(names) => {
                // The stored key must name the same fields the stored Vary does; a 304 that
                // changed Vary leaves them out of step, and then nothing matches.
                names.len() == self.vary.0.len()
                    && names.iter().zip(&self.vary.0).all(|(a, (b, _))| a == b)
                    && self.vary.matches(request_headers)
            }
        }
    }

    /// The binary form kept by the store.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64 + self.headers.len() * 48);
        b.put_slice(MAGIC);
        b.put_u8(VERSION);
        b.put_u16(self.status.as_u16());
        put_time(&mut b, self.request_time);
        put_time(&mut b, self.response_time);
        let headers: Vec<_> = self
            .headers
            .iter()
            .filter(|(n, v)| n.as_str().len() <= usize::from(u16::MAX) && len32(v.len()).is_some())
            .take(usize::from(u16::MAX))
            .collect();
        b.put_u16(count16(headers.len()));
        for (name, value) in headers {
            put_name(&mut b, name);
            b.put_u32(len32(value.len()).unwrap_or(0));
            b.put_slice(value.as_bytes());
        }
        let vary: Vec<_> = self.vary.0.iter().take(usize::from(u16::MAX)).collect();
        b.put_u16(count16(vary.len()));
        for (name, value) in vary {
            put_name(&mut b, name);
            match value
                .as_deref()
                .and_then(|v| len32(v.len()).map(|l| (l, v)))
            {
                Some((len, v)) => {
                    b.put_u8(1);
                    b.put_u32(len);
                    b.put_slice(v);
                }
                None => b.put_u8(0),
            }
        }
        b.freeze()
    }

    /// Parse the binary form. Never panics, whatever the input.
    pub fn decode(input: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(input);
        if r.take(4)? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let status = StatusCode::from_u16(r.u16()?).map_err(|_| DecodeError::BadStatus)?;
        let request_time = r.time()?;
        let response_time = r.time()?;
        let mut headers = HeaderMap::new();
        for _ in 0..r.u16()? {
            let name = r.name()?;
            let len = r.u32()?;
            let value = HeaderValue::from_bytes(r.take(len as usize)?)
                .map_err(|_| DecodeError::BadHeaderValue)?;
            headers.append(name, value);
        }
        let mut vary = Vec::new();
        for _ in 0..r.u16()? {
            let name = r.name()?;
            let value = match r.u8()? {
                0 => None,
                1 => {
                    let len = r.u32()?;
                    Some(r.take(len as usize)?.to_vec())
                }
                _ => return Err(DecodeError::BadVary),
            };
            vary.push((name, value));
        }
        if !r.0.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        Ok(Self::from_parts(
            status,
            headers,
            request_time,
            response_time,
            VaryKey(vary),
        ))
    }
}

/// `headers` without the fields a client is never sent (hop-by-hop, targeted cache-control, the
/// cache's compression mark), or `None` when it has none of them.
fn not_for_clients(headers: &HeaderMap) -> Option<HeaderMap> {
    let dropped = |n: &HeaderName| {
        is_hop_by_hop(n) || TARGET_LIST.contains(n) || *n == super::encoding::CODED
    };
    if !headers.keys().any(dropped) {
        return None;
    }
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !dropped(name) {
            out.append(name.clone(), value.clone());
        }
    }
    Some(out)
}

/// The fields of a received response that may be stored (3.1).
pub fn storable_fields(received: &HeaderMap) -> HeaderMap {
    stored_fields(received, &ResponseDirectives::of(received)).0
}

/// [`storable_fields`] with `received`'s directives already read, and whether every field
/// [`Basis::of`] reads was kept ([`BASIS_FIELDS`]).
fn stored_fields(received: &HeaderMap, directives: &ResponseDirectives) -> (HeaderMap, bool) {
    let mut excluded: Vec<HeaderName> = Vec::new();
    for line in received.get_all(CONNECTION) {
        if let Ok(s) = line.to_str() {
            excluded.extend(syntax::field_names(s));
        }
    }
    if let Some(private) = &directives.cc.private {
        excluded.extend_from_slice(private.fields());
    }
    if let Some(no_cache) = &directives.cc.no_cache {
        excluded.extend_from_slice(no_cache.fields());
    }
    let mut out = HeaderMap::with_capacity(received.len());
    let mut kept = true;
    for (name, value) in received {
        if !is_hop_by_hop(name) && !excluded.contains(name) {
            out.append(name.clone(), value.clone());
        } else if BASIS_FIELDS.contains(name) {
            kept = false;
        }
    }
    (out, kept)
}

fn len32(n: usize) -> Option<u32> {
    u32::try_from(n).ok()
}

fn count16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

fn put_name(b: &mut BytesMut, name: &HeaderName) {
    let s = name.as_str().as_bytes();
    b.put_u16(count16(s.len()));
    b.put_slice(&s[..usize::from(count16(s.len()))]);
}

fn put_time(b: &mut BytesMut, t: SystemTime) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    b.put_u64(d.as_secs());
    b.put_u32(d.subsec_nanos());
}

/// Why a blob is not a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// It ended early.
    Truncated,
    /// It does not start with the magic bytes.
    BadMagic,
    /// A format version this build does not read.
    UnsupportedVersion(u8),
    /// The status code is outside 100..=999.
    BadStatus,
    /// A time out of range.
    BadTime,
    /// A field name that is not a token.
    BadHeaderName,
    /// A field value with forbidden bytes.
    BadHeaderValue,
    /// A malformed Vary entry.
    BadVary,
    /// Bytes after the last record.
    TrailingBytes,
}

impl DecodeError {
    /// For logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeError::Truncated => "truncated",
            DecodeError::BadMagic => "bad-magic",
            DecodeError::UnsupportedVersion(_) => "unsupported-version",
            DecodeError::BadStatus => "bad-status",
            DecodeError::BadTime => "bad-time",
            DecodeError::BadHeaderName => "bad-header-name",
            DecodeError::BadHeaderValue => "bad-header-value",
            DecodeError::BadVary => "bad-vary",
            DecodeError::TrailingBytes => "trailing-bytes",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::UnsupportedVersion(v) => write!(f, "unsupported-version {v}"),
            other => f.write_str(other.as_str()),
        }
    }
}

impl std::error::Error for DecodeError {}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn time(&mut self) -> Result<SystemTime, DecodeError> {
        let secs = self.u64()?;
        let nanos = self.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(DecodeError::BadTime);
        }
        UNIX_EPOCH
            .checked_add(Duration::new(secs, nanos))
            .ok_or(DecodeError::BadTime)
    }

    fn name(&mut self) -> Result<HeaderName, DecodeError> {
        let len = self.u16()?;
        HeaderName::from_bytes(self.take(usize::from(len))?).map_err(|_| DecodeError::BadHeaderName)
    }
}
