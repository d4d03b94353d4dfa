//! The response sent to a client from storage: status, header fields and which bytes of the
//! stored body, after the client's own preconditions (RFC 9111 4.3.2), HEAD (RFC 9110 9.3.2) and
//! Range (RFC 9110 14).

use std::time::SystemTime;

use http::header::{CONTENT_LENGTH, CONTENT_RANGE, HeaderValue};
use http::{HeaderMap, Method, StatusCode, request};

use super::conditional::{self, Precondition};
use super::headers;
use super::range::{self, RangeOutcome};
use super::stored::StoredResponse;

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
    let has_body = !matches!(stored.status.as_u16(), 204 | 304);
    if has_body {
        h.insert(CONTENT_LENGTH, HeaderValue::from(body_len));
    }
    if req.method == Method::HEAD {
        return CachedResponse {
            status: stored.status,
            headers: h,
            body: BodyPart::Empty,
        };
    }
    match range::evaluate(&req.method, &req.headers, stored, body_len) {
        RangeOutcome::Full => CachedResponse {
            status: stored.status,
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
