//! Header fields of responses sent to clients (RFC 9111 4, 5.1; RFC 9213 2.2; RFC 9110 15.4.5).

use std::time::SystemTime;

use http::HeaderMap;
use http::header::{
    AGE, CACHE_CONTROL, CONTENT_LOCATION, DATE, ETAG, EXPIRES, HeaderValue, LAST_MODIFIED, VARY,
};

use super::cache_control::TARGET_LIST;
use super::stored::StoredResponse;

/// Remove the targeted cache-control fields meant for this cache (RFC 9213 2.2 allows a cache
/// to forward them; this one does not, so they never reach clients). Use on every response sent
/// downstream, including misses forwarded from the origin.
pub fn strip_targeted(headers: &mut HeaderMap) {
    // Most responses have none: one pass over the names, not a removal per listed field.
    if !headers.keys().any(|n| TARGET_LIST.contains(n)) {
        return;
    }
    for name in &TARGET_LIST {
        headers.remove(name);
    }
}

/// The header fields of a response served from storage at `now`: the stored fields as received
/// (Date preserved), without the targeted fields, with `Age` set to the current age (4: "a cache
/// MUST generate an Age header field ... replacing any present").
pub fn for_client(stored: &StoredResponse, now: SystemTime) -> HeaderMap {
    let mut headers = stored.client_fields().clone();
    // Room for what the response adds (Age, Content-Length, Cache-Status): one allocation.
    headers.reserve(3);
    set_age(&mut headers, stored, now);
    headers
}

/// The fields of a 304 sent to a client from storage (RFC 9110 15.4.5: the fields a 200 would
/// have carried among Content-Location, Date, ETag, Vary, Cache-Control and Expires; and
/// Last-Modified, useful for the client's cache), plus Age.
pub fn not_modified(stored: &StoredResponse, now: SystemTime) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in [
        CACHE_CONTROL,
        CONTENT_LOCATION,
        DATE,
        ETAG,
        EXPIRES,
        VARY,
        LAST_MODIFIED,
    ] {
        for v in stored.headers().get_all(&name) {
            headers.append(name.clone(), v.clone());
        }
    }
    set_age(&mut headers, stored, now);
    headers
}

fn set_age(headers: &mut HeaderMap, stored: &StoredResponse, now: SystemTime) {
    let secs = stored
        .current_age(now)
        .as_secs()
        .min(super::syntax::DELTA_SECONDS_MAX);
    headers.insert(AGE, age_value(secs));
}

/// Ages below this are written from a table made once (most hits are of young objects): no
/// allocation, and no reference count shared between workers, per response.
const AGE_TABLE: u64 = 4096;

/// The Age field value of `secs`.
fn age_value(secs: u64) -> HeaderValue {
    static TABLE: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    if secs >= AGE_TABLE {
        return HeaderValue::from(secs);
    }
    let table = TABLE.get_or_init(|| {
        (0..AGE_TABLE)
            .map(|n| {
                // Leaked once per process: the values are 'static, so a clone is a copy of a
                // pointer and a length.
                let text: &'static str = Box::leak(n.to_string().into_boxed_str());
                HeaderValue::from_static(text)
            })
            .collect()
    });
    table
        .get(secs as usize)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from(secs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn ages_from_the_table_are_the_ages_written_out() {
        for secs in [
            0,
            1,
            9,
            10,
            99,
            100,
            4094,
            4095,
            4096,
            4097,
            86_400,
            u64::from(u32::MAX),
        ] {
            assert_eq!(age_value(secs), HeaderValue::from(secs), "{secs}");
            assert_eq!(age_value(secs).to_str().unwrap(), secs.to_string());
        }
    }
}
