//! The response sent to a client from storage: status, header fields and which bytes of the
//! stored body, after the client's own preconditions (RFC 9111 4.3.2), HEAD (RFC 9110 9.3.2) and
//! Range (RFC 9110 14).

use std::time::SystemTime;

use http::header::{CONTENT_LENGTH, CONTENT_RANGE, HeaderValue};
use http::{HeaderMap, Method, StatusCode, request};

use super::conditional::{self, Precondition};
use super::headers;
use super::partial::{self, HeldRanges, PartialOutcome};
use super::range::{self, RangeOutcome};
use super::stored::StoredResponse;
use super::syntax;

/// Which part of the stored body to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyPart {
    /// No body (304, 416, HEAD).
    Empty,
    /// The whole body.
    Full,
    /// Bytes `start..=end`.
    Range {
        /// First byte.
        start: u64,
        /// Last byte, inclusive.
        end: u64,
    },
}

/// A response built from storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedResponse {
    /// The status code.
    pub status: StatusCode,
    /// The header fields (Age set; Cache-Status is the proxy's to add).
    pub headers: HeaderMap,
    /// The body bytes to send.
    pub body: BodyPart,
}

/// Build the response to `req` from `stored`, whose complete body has `body_len` bytes, at
/// `now`. Call it after [`super::serve::decide`] allowed serving (or after a freshening 304).
pub fn from_cache(
    req: &request::Parts,
    stored: &StoredResponse,
    body_len: u64,
    now: SystemTime,
) -> CachedResponse {
    if conditional::evaluate(&req.method, &req.headers, stored) == Precondition::NotModified {
        return CachedResponse {
            status: StatusCode::NOT_MODIFIED,
            headers: headers::not_modified(stored, now),
            body: BodyPart::Empty,
        };
    }
    let mut h = headers::for_client(stored, now);
    let has_body = !matches!(stored.status().as_u16(), 204 | 304);
    if has_body {
        h.insert(CONTENT_LENGTH, syntax::decimal_value(body_len));
    }
    if req.method == Method::HEAD {
        return CachedResponse {
            status: stored.status(),
            headers: h,
            body: BodyPart::Empty,
        };
    }
    match range::evaluate(&req.method, &req.headers, stored, body_len) {
        RangeOutcome::Full => CachedResponse {
            status: stored.status(),
            headers: h,
            body: if has_body {
                BodyPart::Full
            } else {
                BodyPart::Empty
            },
        },
        RangeOutcome::Partial {
            start,
            end,
            content_range,
        } => {
            h.insert(CONTENT_RANGE, content_range);
            h.insert(CONTENT_LENGTH, HeaderValue::from(end - start + 1));
            CachedResponse {
                status: StatusCode::PARTIAL_CONTENT,
                headers: h,
                body: BodyPart::Range { start, end },
            }
        }
        RangeOutcome::Unsatisfiable { content_range } => {
            h.insert(CONTENT_RANGE, content_range);
            h.insert(CONTENT_LENGTH, HeaderValue::from(0u64));
            CachedResponse {
                status: StatusCode::RANGE_NOT_SATISFIABLE,
                headers: h,
                body: BodyPart::Empty,
            }
        }
    }
}

/// Build the response to `req` from `stored`, a partial response (a stored 206 holding one
/// byte range, [`partial::stored_range`]), at `now`; `None` when it cannot answer and the
/// request goes forward (RFC 9111 3.3: only "a range wholly within the incomplete response").
/// The body part is in the stored body's coordinates (its first byte is the held range's
/// first byte).
pub fn from_partial(
    req: &request::Parts,
    stored: &StoredResponse,
    now: SystemTime,
) -> Option<CachedResponse> {
    let held = partial::stored_range(stored.headers())?;
    let complete_length = held.complete_length?;
    if req.method != Method::GET {
        return None;
    }
    // Validators describe the selected representation, whose bytes are held in part: a match
    // is a 304 all the same (RFC 9110 13.1.2, 13.1.3).
    if conditional::evaluate(&req.method, &req.headers, stored) == Precondition::NotModified {
        return Some(CachedResponse {
            status: StatusCode::NOT_MODIFIED,
            headers: headers::not_modified(stored, now),
            body: BodyPart::Empty,
        });
    }
    let mut ranges = HeldRanges::new();
    ranges.insert(held.first, held.last);
    let outcome = partial::serve_from_partial(
        &req.method,
        &req.headers,
        stored.headers(),
        &ranges,
        complete_length,
    );
    let mut h = headers::for_client(stored, now);
    match outcome {
        PartialOutcome::Forward | PartialOutcome::Serve(RangeOutcome::Full) => None,
        PartialOutcome::Serve(RangeOutcome::Partial {
            start,
            end,
            content_range,
        }) => {
            h.insert(CONTENT_RANGE, content_range);
            h.insert(CONTENT_LENGTH, HeaderValue::from(end - start + 1));
            Some(CachedResponse {
                status: StatusCode::PARTIAL_CONTENT,
                headers: h,
                body: BodyPart::Range {
                    start: start - held.first,
                    end: end - held.first,
                },
            })
        }
        PartialOutcome::Serve(RangeOutcome::Unsatisfiable { content_range }) => {
            h.insert(CONTENT_RANGE, content_range);
            h.insert(CONTENT_LENGTH, HeaderValue::from(0u64));
            Some(CachedResponse {
                status: StatusCode::RANGE_NOT_SATISFIABLE,
                headers: h,
                body: BodyPart::Empty,
            })
        }
    }
}
