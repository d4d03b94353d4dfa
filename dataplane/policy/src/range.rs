//! Range requests answered from a complete stored response (RFC 9110 14, 13.1.5).
//!
//! One satisfiable range gives 206 with Content-Range. Several satisfiable ranges give the full
//! 200 response (14.2 lets a server ignore Range; a multipart/byteranges body costs more than it
//! saves at an edge, and clients handle the 200). No satisfiable range gives 416 with
//! `Content-Range: bytes */length` (15.5.17). A Range that does not parse, names another unit,
//! comes with a method other than GET, or whose If-Range is false, is ignored (200).

use std::time::Duration;

use http::header::{DATE, ETAG, HeaderValue, IF_RANGE, LAST_MODIFIED, RANGE};
use http::{HeaderMap, Method, StatusCode};

use super::stored::StoredResponse;
use super::syntax::{self, EntityTag};

/// How to answer a request from a stored complete response of `complete_length` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeOutcome {
    /// 200 with the whole body.
    Full,
    /// 206 with bytes `start..=end` and this Content-Range.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte, inclusive.
        end: u64,
        /// `bytes start-end/length`.
        content_range: HeaderValue,
    },
    /// 416 with this Content-Range (`bytes */length`).
    Unsatisfiable {
        /// `bytes */length`.
        content_range: HeaderValue,
    },
}

/// One `range-spec` (14.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-pos "-" [ last-pos ]`.
    Int {
        /// first-pos.
        first: u64,
        /// last-pos.
        last: Option<u64>,
    },
    /// `"-" suffix-length`.
    Suffix(u64),
}

impl RangeSpec {
    /// The inclusive byte range this spec selects in a representation of `len` bytes, if
    /// satisfiable (14.1.1).
    pub fn resolve(self, len: u64) -> Option<(u64, u64)> {
        if len == 0 {
            return None;
        }
        match self {
            RangeSpec::Int { first, last } => {
                let last = last.map_or(len - 1, |l| l.min(len - 1));
                (first < len && first <= last).then_some((first, last))
            }
            RangeSpec::Suffix(0) => None,
            RangeSpec::Suffix(n) => Some((len.saturating_sub(n), len - 1)),
        }
    }
}

/// Parse a `bytes` Range value (14.1.2, 14.2). `None` for another unit or invalid syntax.
pub fn parse(value: &str) -> Option<Vec<RangeSpec>> {
    let (unit, set) = value.trim().split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(s.parse().unwrap_or(u64::MAX))
    };
    let mut specs = Vec::new();
    for spec in syntax::split_list(set) {
        let (first, last) = spec.split_once('-')?;
        let (first, last) = (first.trim(), last.trim());
        let spec = if first.is_empty() {
            RangeSpec::Suffix(num(last)?)
        } else {
            let first = num(first)?;
            let last = if last.is_empty() {
                None
            } else {
                Some(num(last)?)
            };
            if last.is_some_and(|l| l < first) {
                return None;
            }
            RangeSpec::Int { first, last }
        };
        specs.push(spec);
    }
    (!specs.is_empty()).then_some(specs)
}

/// Is the If-Range condition true for `stored` (13.1.5)? An entity tag must match the stored one
/// by strong comparison; a date must equal a strong Last-Modified (one at least a second before
/// Date, 8.8.2.2).
pub fn if_range_holds(value: &str, stored: &HeaderMap) -> bool {
    let value = value.trim();
    if let Some(tag) = EntityTag::parse(value) {
        return stored
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .and_then(EntityTag::parse)
            .is_some_and(|s| s.strong_eq(&tag));
    }
    let (Some(date), Some(lm)) = (
        syntax::http_date(value),
        syntax::date_field(stored, LAST_MODIFIED),
    ) else {
        return false;
    };
    let strong = syntax::date_field(stored, DATE)
        .and_then(|d| d.duration_since(lm).ok())
        .is_some_and(|d| d >= Duration::from_secs(1));
    date == lm && strong
}

/// Answer the Range of a GET from `stored`, whose complete body has `complete_length` bytes.
pub fn evaluate(
    method: &Method,
    request: &HeaderMap,
    stored: &StoredResponse,
    complete_length: u64,
) -> RangeOutcome {
    evaluate_fields(
        method,
        request,
        stored.status(),
        stored.headers(),
        complete_length,
    )
}

/// [`evaluate`] from the stored status and header fields.
pub fn evaluate_fields(
    method: &Method,
    request: &HeaderMap,
    status: StatusCode,
    stored_headers: &HeaderMap,
    complete_length: u64,
) -> RangeOutcome {
    if *method != Method::GET || status != StatusCode::OK {
        return RangeOutcome::Full;
    }
    let mut lines = request.get_all(RANGE).iter();
    let (Some(line), None) = (lines.next(), lines.next()) else {
        return RangeOutcome::Full;
    };
    let Some(specs) = line.to_str().ok().and_then(parse) else {
        return RangeOutcome::Full;
    };
    if let Some(if_range) = request.get(IF_RANGE)
        && !if_range
            .to_str()
            .is_ok_and(|v| if_range_holds(v, stored_headers))
    {
        return RangeOutcome::Full;
    }
    let satisfiable: Vec<(u64, u64)> = specs
        .iter()
        .filter_map(|s| s.resolve(complete_length))
        .collect();
    match satisfiable.as_slice() {
        [] if complete_length == 0 => RangeOutcome::Full,
        [] => RangeOutcome::Unsatisfiable {
            content_range: header(format!("bytes */{complete_length}")),
        },
        [(start, end)] => RangeOutcome::Partial {
            start: *start,
            end: *end,
            content_range: header(format!("bytes {start}-{end}/{complete_length}")),
        },
        _ => RangeOutcome::Full,
    }
}

fn header(s: String) -> HeaderValue {
    // Digits, spaces, '-', '/' and '*' only: always a valid field value.
    HeaderValue::from_str(&s).unwrap_or(HeaderValue::from_static("bytes */0"))
}
