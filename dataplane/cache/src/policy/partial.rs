//! Incomplete responses and combining partial content (RFC 9111 3.3, 3.4; RFC 9110 14.4,
//! 15.3.7.3).
//!
//! How the cache uses partial content:
//! * a GET with a single byte range that nothing complete answers is sent to the origin with its
//!   Range and If-Range ([`forwards_range`]): an edge should not pull a whole large object to
//!   serve a few bytes of it. A 200 answer is stored whole and the range cut from it; a 206
//!   answer is relayed as received and stored as partial content when [`stored_range`] accepts
//!   it (one byte range, a known complete length, a Content-Length that matches the range:
//!   anything else could make the cache serve torn bytes);
//! * a request is answered from partial content only when the range it asks for lies wholly
//!   within the held bytes (3.3: "unless ... the request is partial and specifies a range wholly
//!   within the incomplete response") ([`serve_from_partial`]); otherwise it goes forward
//!   (`fwd=partial`): with its Range, or whole when it has none (the 200 then replaces the
//!   partial content);
//! * a new 206 is combined with the held bytes only when both carry the same strong validator
//!   and complete length ([`combinable`], 3.4: "share the same strong validator") and the two
//!   ranges overlap or touch ([`combine`]); the stored fields are the new response's (3.4: "the
//!   stored response's header fields are updated as in 3.2"). When the union is the whole
//!   representation it is stored as a complete 200 ([`combined_fields`]).
//!
//! Held bytes are one contiguous range per stored response: a new 206 that does not touch the
//! held range replaces it (the newest response wins, 4.3.4's rule for stored responses).

use http::header::{CONTENT_LENGTH, CONTENT_RANGE, ETAG, HeaderValue, RANGE};
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

/// Should a GET with this Range go to the origin with its Range (instead of fetching the whole
/// representation)? Only for exactly one byte range; several ranges are answered with the whole
/// 200 anyway ([`super::range`]).
pub fn forwards_range(method: &Method, request: &HeaderMap) -> bool {
    *method == Method::GET
        && request
            .get(RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(range::parse)
            .is_some_and(|specs| specs.len() == 1)
}

/// The byte range a 206 holds, when it may be stored as partial content (3.3): one
/// `Content-Range` with a known complete length, and a Content-Length equal to the range's size
/// (the store checks the body against the Content-Length, so a 206 that disagrees with itself is
/// never kept). `None` for anything else, including multipart/byteranges (no Content-Range).
pub fn stored_range(headers: &HeaderMap) -> Option<ContentRange> {
    let mut values = headers.get_all(CONTENT_RANGE).iter();
    let cr = values.next()?.to_str().ok().and_then(ContentRange::parse)?;
    if values.next().is_some() {
        return None;
    }
    cr.complete_length?;
    let cl: u64 = headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (cl == cr.last - cr.first + 1).then_some(cr)
}

/// Where the bytes of a combined response come from: the new 206's body, with held bytes
/// before and after it. Ranges are inclusive and absolute (offsets in the representation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Combined {
    /// The range the combined response holds.
    pub union: ContentRange,
    /// Held bytes that come before the new ones.
    pub before: Option<(u64, u64)>,
    /// Held bytes that come after the new ones.
    pub after: Option<(u64, u64)>,
}

impl Combined {
    /// True when the union is the whole representation (3.3: the response "has been made
    /// complete").
    pub fn complete(&self) -> bool {
        self.union.first == 0 && self.union.complete_length == Some(self.union.last + 1)
    }
}

/// Combine held bytes with a new range of the same representation (3.4). `None` when the
/// complete lengths differ or the ranges neither overlap nor touch (nothing contiguous to keep).
pub fn combine(held: ContentRange, new: ContentRange) -> Option<Combined> {
    if held.complete_length != new.complete_length || held.complete_length.is_none() {
        return None;
    }
    let touches =
        held.first <= new.last.saturating_add(1) && new.first <= held.last.saturating_add(1);
    if !touches {
        return None;
    }
    let union = ContentRange {
        first: held.first.min(new.first),
        last: held.last.max(new.last),
        complete_length: new.complete_length,
    };
    Some(Combined {
        union,
        before: (held.first < new.first).then(|| (held.first, new.first - 1)),
        after: (held.last > new.last).then(|| (new.last + 1, held.last)),
    })
}

/// The status and header fields to store for a combined response: the new 206's fields with
/// Content-Range and Content-Length describing the union, or a 200 without Content-Range when the
/// union is complete.
pub fn combined_fields(new: &HeaderMap, combined: &Combined) -> Option<(StatusCode, HeaderMap)> {
    let mut h = new.clone();
    let u = combined.union;
    if combined.complete() {
        h.remove(CONTENT_RANGE);
        h.insert(CONTENT_LENGTH, HeaderValue::from(u.last + 1));
        Some((StatusCode::OK, h))
    } else {
        h.insert(
            CONTENT_RANGE,
            content_range(u.first, u.last, u.complete_length?)?,
        );
        h.insert(CONTENT_LENGTH, HeaderValue::from(u.last - u.first + 1));
        Some((StatusCode::PARTIAL_CONTENT, h))
    }
}
