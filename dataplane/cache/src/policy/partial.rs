//! Incomplete responses and combining partial content (RFC 9111 3.3, 3.4; RFC 9110 14.4,
//! 15.3.7.3).
//!
//! [`super::store::storable`] refuses 206 responses and the proxy fills the cache with complete
//! responses ([`super::request::strip_for_fill`]). These functions are the policy for a store that
//! keeps partial objects:
//! * a 206, or a 200 whose body was cut short, may be kept as partial content only with a strong
//!   validator (3.4 combines only responses that "share the same strong validator") and a known
//!   complete length ([`partial_storable`]);
//! * a new 206 is combined with the held ranges only when its validator is the same strong one
//!   and the complete lengths agree ([`combinable`]); the stored fields are then updated as 3.2
//!   says ([`super::validate::freshen`]'s update rule applies);
//! * a request is answered from partial content only when the range it asks for lies wholly
//!   within the held bytes (3.3: "unless ... the request is partial and specifies a range wholly
//!   within the incomplete response"); otherwise it goes forward (`fwd=partial`)
//!   ([`serve_from_partial`]).

use http::header::{CONTENT_RANGE, ETAG, HeaderValue, RANGE};
use http::{HeaderMap, Method, StatusCode};

use super::range::{self, RangeOutcome};
use super::syntax::EntityTag;

/// A `Content-Range` of a 206 (RFC 9110 14.4): `bytes first-last/complete-length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    /// First byte.
    pub first: u64,
    /// Last byte, inclusive.
    pub last: u64,
    /// The complete length, `None` for `*`.
    pub complete_length: Option<u64>,
}

impl ContentRange {
    /// Parse `bytes first-last/length` or `bytes first-last/*`; `None` when invalid (last before
    /// first, last beyond the complete length, another unit, an unsatisfied-range form).
    pub fn parse(value: &str) -> Option<Self> {
        let rest = value.trim().strip_prefix("bytes ")?;
        let (range, length) = rest.split_once('/')?;
        let (first, last) = range.split_once('-')?;
        let num = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        let (first, last) = (num(first)?, num(last)?);
        let complete_length = if length == "*" {
            None
        } else {
            Some(num(length)?)
        };
        let valid = first <= last && complete_length.is_none_or(|len| last < len);
        valid.then_some(Self {
            first,
            last,
            complete_length,
        })
    }
}

/// The byte ranges of a representation held in storage: sorted, disjoint, non-adjacent,
/// inclusive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldRanges(Vec<(u64, u64)>);

impl HeldRanges {
    /// Nothing held.
    pub fn new() -> Self {
        Self::default()
    }

    /// The held ranges.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.0
    }

    /// Add bytes `first..=last`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, first: u64, last: u64) {
        if first > last {
            return;
        }
        let (mut first, mut last) = (first, last);
        let mut kept = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b.saturating_add(1) < first || last.saturating_add(1) < a {
                kept.push((a, b));
            } else {
                first = first.min(a);
                last = last.max(b);
            }
        }
        kept.push((first, last));
        kept.sort_unstable();
        self.0 = kept;
    }

    /// True when bytes `first..=last` are all held.
    pub fn contains(&self, first: u64, last: u64) -> bool {
        self.0.iter().any(|&(a, b)| a <= first && last <= b)
    }

    /// True when all `complete_length` bytes are held: the response is complete (3.3).
    pub fn is_complete(&self, complete_length: u64) -> bool {
        complete_length == 0 || self.contains(0, complete_length - 1)
    }
}

/// The strong entity tag of a response, if it has one.
fn strong_etag(headers: &HeaderMap) -> Option<String> {
    headers
        .get(ETAG)
        .and_then(|v| v.to_str().ok())
        .and_then(EntityTag::parse)
        .filter(|t| !t.weak)
        .map(|t| t.opaque.to_string())
}

/// May this response be kept as partial content (3.3, 3.4)? A 206 with a single byte range and a
/// known complete length, or an incomplete 200 (`received` bytes of `content_length`), with a
/// strong entity tag. Returns the held range and the complete length.
pub fn partial_storable(
    status: StatusCode,
    headers: &HeaderMap,
    received: u64,
) -> Option<(ContentRange, u64)> {
    strong_etag(headers)?;
    match status {
        StatusCode::PARTIAL_CONTENT => {
            let cr = headers
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(ContentRange::parse)?;
            let len = cr.complete_length?;
            Some((cr, len))
        }
        StatusCode::OK => {
            let len: u64 = headers
                .get(http::header::CONTENT_LENGTH)?
                .to_str()
                .ok()?
                .parse()
                .ok()?;
            (received > 0 && received < len).then(|| {
                let held = ContentRange {
                    first: 0,
                    last: received - 1,
                    complete_length: Some(len),
                };
                (held, len)
            })
        }
        _ => None,
    }
}

/// May a new partial response be combined with stored partial content (3.4)? Both carry the same
/// strong entity tag, and the new Content-Range names the same complete length.
pub fn combinable(stored: &HeaderMap, stored_length: u64, new: &HeaderMap) -> bool {
    let (Some(a), Some(b)) = (strong_etag(stored), strong_etag(new)) else {
        return false;
    };
    let same_length = new
        .get(CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(ContentRange::parse)
        .is_some_and(|cr| cr.complete_length == Some(stored_length));
    a == b && same_length
}

/// How a request is answered from partial content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartialOutcome {
    /// Serve this from the held bytes (a 206 or a 416).
    Serve(RangeOutcome),
    /// The held bytes do not cover the request: forward it (Cache-Status `fwd=partial`).
    Forward,
}

/// Answer a GET from partial content: only a single range lying wholly within the held bytes
/// (3.3), or an unsatisfiable range (416, decided from the known complete length).
pub fn serve_from_partial(
    method: &Method,
    request: &HeaderMap,
    stored_headers: &HeaderMap,
    held: &HeldRanges,
    complete_length: u64,
) -> PartialOutcome {
    if *method != Method::GET || !request.contains_key(RANGE) {
        return PartialOutcome::Forward;
    }
    // Evaluate the Range as if the representation were complete, then check the bytes.
    match range::evaluate_fields(
        method,
        request,
        StatusCode::OK,
        stored_headers,
        complete_length,
    ) {
        RangeOutcome::Partial {
            start,
            end,
            content_range,
        } if held.contains(start, end) => PartialOutcome::Serve(RangeOutcome::Partial {
            start,
            end,
            content_range,
        }),
        outcome @ RangeOutcome::Unsatisfiable { .. } => PartialOutcome::Serve(outcome),
        _ => PartialOutcome::Forward,
    }
}

/// The Content-Range value for bytes `first..=last` of `complete_length`.
pub fn content_range(first: u64, last: u64, complete_length: u64) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("bytes {first}-{last}/{complete_length}")).ok()
}
