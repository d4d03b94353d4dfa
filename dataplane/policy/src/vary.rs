//! Vary (RFC 9111 4.1): the secondary cache key.
//!
//! A stored response records, for each field its Vary names, the value the request it answered
//! carried (normalized). A later request matches when its normalized values are equal. Two values
//! are normalized the ways 4.1 allows: whitespace around list elements and parameters removed,
//! several field lines combined, and values lowercased for fields whose values are
//! case-insensitive (Accept, Accept-Charset, Accept-Language). Order of list elements is kept:
//! it can carry preference. A field absent from a request only matches a field absent from the
//! other (4.1). Accept-Encoding is compared by its bucket (`zstd`, `br`, `gzip`, or identity as
//! if absent: [`super::encoding::negotiate`]), which is also all a fill tells the origin of it
//! ([`super::request::strip_for_fill`]).

use http::request;

use super::stored::StoredResponse;

pub use super::vary_key::{Vary, VaryKey, normalize};

/// Choose among the stored responses for a URI the one that may answer `request` (4.1): those
/// whose Vary values match, and of several the most recent by Date (then by receipt time).
pub fn select<'a>(
    request: &request::Parts,
    candidates: &'a [StoredResponse],
) -> Option<&'a StoredResponse> {
    candidates
        .iter()
        .filter(|s| s.matches(&request.headers))
        .max_by_key(|s| (s.date_value(), s.response_time()))
}

/// Whether two stored responses are variants of each other that a new one should replace (it
/// answered a request with the same secondary key).
pub fn same_variant(a: &StoredResponse, b: &StoredResponse) -> bool {
    a.vary() == b.vary()
}
