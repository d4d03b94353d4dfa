//! Validation (RFC 9111 4.3): the conditional request sent to revalidate a stored response
//! (4.3.1), freshening it with a 304 (4.3.3, 4.3.4, 3.2) and updating it from a HEAD response
//! (4.3.5).

use std::time::SystemTime;

use http::header::{
    AGE, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, DATE, ETAG, HeaderName,
    IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, TRANSFER_ENCODING,
};
use http::{HeaderMap, StatusCode, response};

use super::encoding;
use super::stored::{StoredResponse, storable_fields};
use super::syntax::{self, EntityTag};

/// Fields a 304 or HEAD response does not update (3.2): Content-Length ("MUST NOT"), and the
/// fields whose change would make the stored body inconsistent with its metadata.
const NOT_UPDATED: [HeaderName; 4] = [
    CONTENT_LENGTH,
    CONTENT_ENCODING,
    CONTENT_RANGE,
    TRANSFER_ENCODING,
];

/// The precondition fields for revalidating `stored` (4.3.1): If-None-Match with its entity tag
/// ("MUST send the relevant entity tags"), and If-Modified-Since with its Last-Modified. Empty
/// when the stored response has no validator: the request is then unconditional.
///
/// A response the cache compressed is revalidated with the origin's validators
/// ([`encoding::origin_view`]): the origin never saw the cache's ETag.
pub fn conditional_headers(stored: &StoredResponse) -> HeaderMap {
    let mut h = HeaderMap::new();
    let origin = encoding::origin_view(stored.headers());
    if let Some(etag) = origin.get(ETAG)
        && etag.to_str().ok().and_then(EntityTag::parse).is_some()
    {
        h.insert(IF_NONE_MATCH, etag.clone());
    }
    if let Some(lm) = origin.get(LAST_MODIFIED)
        && stored.basis().last_modified.is_some()
    {
        h.insert(IF_MODIFIED_SINCE, lm.clone());
    }
    h
}

/// The result of a 304 for a stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshen {
    /// The 304 selects the stored response: here it is with updated fields and times.
    Updated(Box<StoredResponse>),
    /// The 304 carries a validator the stored response lacks (4.3.4: "MUST NOT use the new
    /// response to update"): fetch the response again without conditions.
    Mismatch,
}

/// Does the validator in `new` select `stored` (4.3.4)? A strong entity tag selects responses
/// with the same strong tag; a weak one those with the same opaque tag; otherwise Last-Modified
/// must be equal. A 304 without any validator selects the response it answered (deviation: 4.3.4
/// asks for the stored response to lack validators too, but the request carried this response's
/// validators, so the 304 answers for it).
pub fn selects(stored: &HeaderMap, new: &HeaderMap) -> bool {
    let tag = |h: &HeaderMap| h.get(ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(new_tag) = tag(new) {
        let Some(new_tag) = EntityTag::parse(&new_tag).map(|t| (t.weak, t.opaque.to_owned()))
        else {
            return false;
        };
        let stored_tag = tag(stored);
        let Some(old) = stored_tag.as_deref().and_then(EntityTag::parse) else {
            return false;
        };
        return if new_tag.0 {
            old.opaque == new_tag.1
        } else {
            !old.weak && old.opaque == new_tag.1
        };
    }
    if let Some(new_lm) = syntax::date_field(new, LAST_MODIFIED) {
        return syntax::date_field(stored, LAST_MODIFIED) == Some(new_lm);
    }
    true
}

/// Freshen `stored` with a 304 received at `response_time` for a request sent at
/// `request_time` (4.3.4, 3.2).
pub fn freshen(
    stored: &StoredResponse,
    not_modified: &response::Parts,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Freshen {
    if not_modified.status != StatusCode::NOT_MODIFIED
        || !selects(
            &encoding::origin_view(stored.headers()),
            &not_modified.headers,
        )
    {
        return Freshen::Mismatch;
    }
    Freshen::Updated(Box::new(update(
        stored,
        &not_modified.headers,
        request_time,
        response_time,
    )))
}

/// The outcome of a HEAD response for a stored GET response (4.3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadUpdate {
    /// Validators and Content-Length agree: the stored response with updated fields.
    Updated(Box<StoredResponse>),
    /// They differ: the stored response is to be considered stale (the proxy drops it or
    /// revalidates it before the next use).
    Stale,
    /// Not a 200: nothing to do.
    Ignored,
}

/// Update `stored` from a 200 response to HEAD (4.3.5).
pub fn freshen_with_head(
    stored: &StoredResponse,
    head: &response::Parts,
    request_time: SystemTime,
    response_time: SystemTime,
) -> HeadUpdate {
    if head.status != StatusCode::OK {
        return HeadUpdate::Ignored;
    }
    // A response the cache compressed is compared as the origin sent it: its Content-Length is
    // the cache's representation's, which the origin's cannot confirm.
    let origin = encoding::origin_view(stored.headers());
    let coded = encoding::coded(stored.headers()).is_some();
    let same = |name: HeaderName| match head.headers.get(&name) {
        None => true,
        Some(_) if coded && name == CONTENT_LENGTH => true,
        Some(v) => origin.get(&name) == Some(v),
    };
    if same(ETAG) && same(LAST_MODIFIED) && same(CONTENT_LENGTH) {
        HeadUpdate::Updated(Box::new(update(
            stored,
            &head.headers,
            request_time,
            response_time,
        )))
    } else {
        HeadUpdate::Stale
    }
}

/// 3.2: add each received field to the stored response, replacing stored values, except the
/// ones that are not stored at all (3.1) and [`NOT_UPDATED`].
fn update(
    stored: &StoredResponse,
    received: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
) -> StoredResponse {
    // The origin's fields for a response the cache compressed: its validators in the cache's
    // form, as the stored ones are.
    let fields = match encoding::coded(stored.headers()) {
        Some(coding) => storable_fields(&encoding::received_for_coded(received, coding)),
        None => storable_fields(received),
    };
    let mut headers = stored.headers().clone();
    for name in fields.keys() {
        if NOT_UPDATED.contains(name) {
            continue;
        }
        headers.remove(name);
        for v in fields.get_all(name) {
            headers.append(name.clone(), v.clone());
        }
    }
    // A compressed representation varies on Accept-Encoding whatever Vary the origin sends.
    if encoding::coded(&headers).is_some() {
        encoding::vary_on_accept_encoding(&mut headers);
    }
    // Age and Date describe the exchange that brought them: after this exchange, an Age the
    // new response lacks would be counted again, and a missing Date is the receipt time
    // (RFC 9110 6.6.1).
    if !fields.contains_key(AGE) {
        headers.remove(AGE);
    }
    if !fields.contains_key(DATE) {
        headers.remove(DATE);
        if let Some(date) = syntax::http_date_value(response_time) {
            headers.insert(DATE, date);
        }
    }
    StoredResponse::from_parts(
        stored.status(),
        headers,
        request_time,
        response_time,
        stored.vary().clone(),
    )
}
