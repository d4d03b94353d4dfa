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
//! A stored body that fails after its response has started (a block that fails its checksum)
//! is finished from the origin when it can be done safely ([`Continuation`]): the rest of the
//! range is asked for with If-Range bound to the stored representation ([`if_range_validator`]:
//! a strong entity tag, or a strong Last-Modified), and only a 206 of exactly those bytes of
//! that representation ([`Continuation::accepts`]) finishes the response. The repaired bytes are
//! not stored.
//!
//! Held bytes are one contiguous range per stored response: a new 206 that does not touch the
//! held range replaces it (the newest response wins, 4.3.4's rule for stored responses).

use std::time::Duration;

use http::header::{
    CONTENT_LENGTH, CONTENT_RANGE, DATE, ETAG, HeaderValue, IF_RANGE, LAST_MODIFIED, RANGE,
};
use http::{HeaderMap, Method, StatusCode};

use super::range::{self, RangeOutcome};
use super::syntax::{self, EntityTag};

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
    (content_length(headers)? == cr.last - cr.first + 1).then_some(cr)
}

pub use super::syntax::content_length;

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

/// How long before the stored Date a Last-Modified must lie to be a strong validator (RFC 9110
/// 8.8.2.2: "at least 60 seconds before the Date value").
const STRONG_LAST_MODIFIED: Duration = Duration::from_secs(60);

/// The validator that may bind an If-Range to the representation of a stored response (RFC 9110
/// 13.1.5): its entity tag when that is strong; with no entity tag at all, its Last-Modified when
/// that is strong by 8.8.2.2 (the stored Date is at least 60 seconds later; a Date this cache
/// added on receipt counts as the origin's). `None` for a weak or malformed entity tag, or a
/// Last-Modified that is missing or too close to Date: no range of this representation can be
/// asked for safely.
pub fn if_range_validator(stored: &HeaderMap) -> Option<HeaderValue> {
    if let Some(etag) = stored.get(ETAG) {
        let tag = etag.to_str().ok().and_then(EntityTag::parse)?;
        return if tag.weak {
            None
        } else {
            HeaderValue::from_str(tag.opaque).ok()
        };
    }
    let modified = syntax::date_field(stored, LAST_MODIFIED)?;
    let date = syntax::date_field(stored, DATE)?;
    let strong = modified
        .checked_add(STRONG_LAST_MODIFIED)
        .is_some_and(|t| t <= date);
    strong.then(|| stored.get(LAST_MODIFIED).cloned()).flatten()
}

/// A request for the rest of a response being served from storage, bound to the stored
/// representation with If-Range: used when the stored body fails after the response has started
/// (the client already has the head and the bytes before), so that only a 206 of the same
/// representation may finish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// The bytes asked for, inclusive, as offsets in the representation.
    pub first: u64,
    /// The last byte, inclusive.
    pub last: u64,
    /// The representation's complete length.
    pub complete_length: u64,
    /// The If-Range value ([`if_range_validator`]).
    pub validator: HeaderValue,
}

impl Continuation {
    /// The continuation of bytes `from..to` (end exclusive) of the body of a stored response with
    /// `status` and `headers`, whose body holds `body_len` bytes: a complete 200 (body offsets are
    /// the representation's), or partial content (a 206 that [`stored_range`] accepts; its body
    /// starts at the held range's first byte). `None` when nothing is left to ask for, the range
    /// lies outside the body, the response is anything else, or it has no validator that may bind
    /// an If-Range.
    pub fn of(
        status: StatusCode,
        headers: &HeaderMap,
        body_len: u64,
        from: u64,
        to: u64,
    ) -> Option<Self> {
        if from >= to || to > body_len {
            return None;
        }
        let (base, complete_length) = match status {
            StatusCode::OK => (0, body_len),
            StatusCode::PARTIAL_CONTENT => {
                let held = stored_range(headers)?;
                (held.first, held.complete_length?)
            }
            _ => return None,
        };
        let (first, last) = (base.checked_add(from)?, base.checked_add(to - 1)?);
        if last >= complete_length {
            return None;
        }
        Some(Self {
            first,
            last,
            complete_length,
            validator: if_range_validator(headers)?,
        })
    }

    /// The number of bytes asked for.
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    /// Never true: a continuation asks for one byte at least.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The fields to send with the request (with a fill's other fields, the client's
    /// conditionals and Range removed): `Range: bytes=first-last` and `If-Range`.
    pub fn request_fields(&self) -> Option<HeaderMap> {
        let mut h = HeaderMap::new();
        let range = HeaderValue::from_str(&format!("bytes={}-{}", self.first, self.last)).ok()?;
        h.insert(RANGE, range);
        h.insert(IF_RANGE, self.validator.clone());
        Some(h)
    }

    /// Does a response with `status` and `headers` continue the stored response whose fields
    /// are `stored`? Only a 206 with one Content-Range of exactly the bytes asked for and the
    /// stored complete length, a Content-Length (when present) of that size, and validators that
    /// name the stored representation: an entity tag (when present) the same strong tag as
    /// the stored one, a Last-Modified (when both have one) the same date. A 200 (If-Range
    /// found another representation) or anything else does not.
    pub fn accepts(&self, stored: &HeaderMap, status: StatusCode, headers: &HeaderMap) -> bool {
        if status != StatusCode::PARTIAL_CONTENT {
            return false;
        }
        let mut ranges = headers.get_all(CONTENT_RANGE).iter();
        let range = match (ranges.next(), ranges.next()) {
            (Some(v), None) => v.to_str().ok().and_then(ContentRange::parse),
            _ => None,
        };
        let exact = range
            == Some(ContentRange {
                first: self.first,
                last: self.last,
                complete_length: Some(self.complete_length),
            });
        let length_ok = length_is(headers, self.len());
        let etag_ok = match (headers.get(ETAG), strong_etag(stored)) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(_), Some(old)) => strong_etag(headers).is_some_and(|new| new == old),
        };
        let modified_ok = same_last_modified(stored, headers);
        exact && length_ok && etag_ok && modified_ok
    }

    /// Does a whole 200 carry the bytes asked for, of the stored representation? Many origins
    /// (dynamic ones, simple servers) ignore Range and answer the whole body. It carries them
    /// when it names the same representation by a strong entity tag, the same as the stored
    /// one (a strong tag promises the same bytes, RFC 9110 8.8.3), its Content-Length (when
    /// present) is the stored complete length, it has no Content-Range, and its Last-Modified
    /// (when both have one) is the same date. Its body is then read from byte [`Self::first`]
    /// for [`Self::len`] bytes. Without a strong tag to compare, a 200 may be another
    /// representation of the same length: it does not carry them.
    pub fn whole_carries(
        &self,
        stored: &HeaderMap,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> bool {
        if status != StatusCode::OK || headers.contains_key(CONTENT_RANGE) {
            return false;
        }
        let same_tag = match (strong_etag(headers), strong_etag(stored)) {
            (Some(new), Some(old)) => new == old,
            _ => false,
        };
        let length_ok = length_is(headers, self.complete_length);
        let modified_ok = same_last_modified(stored, headers);
        same_tag && length_ok && modified_ok
    }
}

/// A Content-Length, when present, of `len` bytes.
fn length_is(headers: &HeaderMap, len: u64) -> bool {
    headers
        .get(CONTENT_LENGTH)
        .is_none_or(|v| v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) == Some(len))
}

/// A Last-Modified, when both have one, the same date.
fn same_last_modified(stored: &HeaderMap, headers: &HeaderMap) -> bool {
    match (
        syntax::date_field(headers, LAST_MODIFIED),
        syntax::date_field(stored, LAST_MODIFIED),
    ) {
        (Some(new), Some(old)) => new == old,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const LM: &str = "Thu, 01 Jan 2026 00:00:00 GMT";

    #[test]
    fn if_range_binds_a_strong_etag_or_a_strong_last_modified_only() {
        let v = |pairs: &[(&'static str, &str)]| if_range_validator(&fields(pairs));
        assert_eq!(v(&[("etag", "\"a1\"")]).unwrap(), "\"a1\"");
        // A strong tag wins over a Last-Modified.
        let both = [("etag", "\"a1\""), ("last-modified", LM)];
        assert_eq!(v(&both).unwrap(), "\"a1\"");
        // A weak or malformed tag: no date either (13.1.5: a date only with no entity tag).
        let weak = [
            ("etag", "W/\"a1\""),
            ("last-modified", LM),
            ("date", "Fri, 02 Jan 2026 00:00:00 GMT"),
        ];
        assert_eq!(v(&weak), None);
        assert_eq!(v(&[("etag", "a1")]), None);
        // Last-Modified at least 60 s before Date is strong (8.8.2.2); closer, or without a
        // Date, it is weak.
        let date = |d: &'static str| [("last-modified", LM), ("date", d)];
        assert_eq!(v(&date("Thu, 01 Jan 2026 00:01:00 GMT")).unwrap(), LM);
        assert_eq!(v(&date("Thu, 01 Jan 2026 00:00:59 GMT")), None);
        assert_eq!(v(&date(LM)), None);
        assert_eq!(v(&[("last-modified", LM)]), None);
        assert_eq!(v(&[("last-modified", "yesterday"), ("date", LM)]), None);
        assert_eq!(v(&[]), None);
    }

    #[test]
    fn a_continuation_asks_for_the_rest_of_the_representation() {
        let stored = fields(&[("etag", "\"a1\""), ("content-length", "1000")]);
        let c = Continuation::of(StatusCode::OK, &stored, 1000, 256, 1000).unwrap();
        assert_eq!((c.first, c.last, c.complete_length), (256, 999, 1000));
        assert_eq!(c.len(), 744);
        let h = c.request_fields().unwrap();
        assert_eq!(h[RANGE], "bytes=256-999");
        assert_eq!(h[IF_RANGE], "\"a1\"");
        // A client's range 100..=499 of which 300 bytes were sent.
        let c = Continuation::of(StatusCode::OK, &stored, 1000, 400, 500).unwrap();
        assert_eq!((c.first, c.last), (400, 499));
        // Held partial content 200-699 of 1000: body offsets shift by its first byte.
        let held = fields(&[
            ("etag", "\"a1\""),
            ("content-range", "bytes 200-699/1000"),
            ("content-length", "500"),
        ]);
        let c = Continuation::of(StatusCode::PARTIAL_CONTENT, &held, 500, 100, 500).unwrap();
        assert_eq!((c.first, c.last, c.complete_length), (300, 699, 1000));
        // Nothing left, outside the body, another status, no strong validator.
        assert_eq!(
            Continuation::of(StatusCode::OK, &stored, 1000, 1000, 1000),
            None
        );
        assert_eq!(
            Continuation::of(StatusCode::OK, &stored, 1000, 10, 1001),
            None
        );
        assert_eq!(
            Continuation::of(StatusCode::NOT_FOUND, &stored, 1000, 0, 10),
            None
        );
        let weak = fields(&[("etag", "W/\"a1\"")]);
        assert_eq!(Continuation::of(StatusCode::OK, &weak, 1000, 0, 10), None);
    }

    #[test]
    fn only_a_206_of_exactly_that_range_and_representation_continues_it() {
        let stored = fields(&[("etag", "\"a1\""), ("last-modified", LM)]);
        let c = Continuation::of(StatusCode::OK, &stored, 1000, 256, 1000).unwrap();
        let ok = [
            ("etag", "\"a1\""),
            ("content-range", "bytes 256-999/1000"),
            ("content-length", "744"),
        ];
        let accepts =
            |status, pairs: &[(&'static str, &str)]| c.accepts(&stored, status, &fields(pairs));
        assert!(accepts(StatusCode::PARTIAL_CONTENT, &ok));
        // No entity tag or Content-Length in the 206: the range and If-Range bind it.
        assert!(accepts(
            StatusCode::PARTIAL_CONTENT,
            &[("content-range", "bytes 256-999/1000")]
        ));
        // If-Range failed: the whole new representation.
        assert!(!accepts(StatusCode::OK, &ok));
        for (name, value) in [
            ("etag", "\"a2\""),
            ("etag", "W/\"a1\""),
            ("content-range", "bytes 256-998/1000"),
            ("content-range", "bytes 0-999/1000"),
            ("content-range", "bytes 256-999/2000"),
            ("content-range", "bytes 256-999/*"),
            ("content-length", "743"),
            ("last-modified", "Fri, 02 Jan 2026 00:00:00 GMT"),
        ] {
            let mut h = fields(&ok);
            h.insert(name, HeaderValue::from_static(value));
            assert!(
                !c.accepts(&stored, StatusCode::PARTIAL_CONTENT, &h),
                "{name}: {value}"
            );
        }
        let mut two = fields(&ok);
        two.append(
            CONTENT_RANGE,
            HeaderValue::from_static("bytes 256-999/1000"),
        );
        assert!(!c.accepts(&stored, StatusCode::PARTIAL_CONTENT, &two));
        assert!(!accepts(StatusCode::PARTIAL_CONTENT, &[("etag", "\"a1\"")]));
        // A stored response bound by its Last-Modified: a 206 with an entity tag it lacked is
        // another representation.
        let by_date = fields(&[
            ("last-modified", LM),
            ("date", "Fri, 02 Jan 2026 00:00:00 GMT"),
        ]);
        let c = Continuation::of(StatusCode::OK, &by_date, 1000, 256, 1000).unwrap();
        assert_eq!(c.validator, LM);
        let range = ("content-range", "bytes 256-999/1000");
        assert!(c.accepts(
            &by_date,
            StatusCode::PARTIAL_CONTENT,
            &fields(&[range, ("last-modified", LM)])
        ));
        assert!(!c.accepts(
            &by_date,
            StatusCode::PARTIAL_CONTENT,
            &fields(&[range, ("etag", "\"a1\"")])
        ));
    }

    #[test]
    fn a_whole_200_of_the_same_strong_representation_carries_the_bytes() {
        let stored = fields(&[("etag", "\"a1\""), ("last-modified", LM)]);
        let c = Continuation::of(StatusCode::OK, &stored, 1000, 256, 1000).unwrap();
        let ok = [("etag", "\"a1\""), ("content-length", "1000")];
        let carries = |status, pairs: &[(&'static str, &str)]| {
            c.whole_carries(&stored, status, &fields(pairs))
        };
        assert!(carries(StatusCode::OK, &ok));
        assert!(carries(StatusCode::OK, &[("etag", "\"a1\"")]), "chunked");
        assert!(!carries(StatusCode::PARTIAL_CONTENT, &ok));
        assert!(
            !carries(StatusCode::OK, &[("content-length", "1000")]),
            "no tag"
        );
        for (name, value) in [
            ("etag", "\"a2\""),
            ("etag", "W/\"a1\""),
            ("content-length", "999"),
            ("content-range", "bytes 0-999/1000"),
            ("last-modified", "Fri, 02 Jan 2026 00:00:00 GMT"),
        ] {
            let mut h = fields(&ok);
            h.insert(name, HeaderValue::from_static(value));
            assert!(
                !c.whole_carries(&stored, StatusCode::OK, &h),
                "{name}: {value}"
            );
        }
        // Stored without a strong tag (bound by its date): a 200 cannot be shown to be it.
        let by_date = fields(&[
            ("last-modified", LM),
            ("date", "Fri, 02 Jan 2026 00:00:00 GMT"),
        ]);
        let c = Continuation::of(StatusCode::OK, &by_date, 1000, 256, 1000).unwrap();
        assert!(!c.whole_carries(&by_date, StatusCode::OK, &fields(&[("last-modified", LM)])));
    }
}
