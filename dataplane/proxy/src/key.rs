//! The cache key of a request, shared by the handler and PURGE.

use edgecache_policy::CacheKey;
use http::HeaderValue;
use http::header::HOST;

/// The primary cache key for a request head, or `None` when it has no usable host.
pub fn primary(parts: &http::request::Parts) -> Option<Vec<u8>> {
    CacheKey::from_parts(parts, "http")
        .ok()
        .map(|k| k.as_bytes().to_vec())
}

/// RFC 9112 3.2.2: with an absolute-form target, the target's authority (without userinfo)
/// replaces Host, so the key, the Host the origin sees and everything else use one authority.
/// Call after the key was built (which refuses two Host fields).
pub fn one_authority(parts: &mut http::request::Parts) {
    let Some(authority) = parts.uri.authority() else {
        return;
    };
    let host = authority
        .as_str()
        .rsplit_once('@')
        .map_or(authority.as_str(), |(_, h)| h);
    if let Ok(v) = HeaderValue::from_str(host) {
        parts.headers.insert(HOST, v);
    }
}
