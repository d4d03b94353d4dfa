//! The cache key of a request, shared by the handler and PURGE. The head has been through
//! [`crate::sites::Sites::route_head`], so its Host is the request's normalised authority.

use edgecache_policy::CacheKey;

/// The primary cache key for a request head, or `None` when it has no usable host.
pub fn primary(parts: &http::request::Parts) -> Option<Vec<u8>> {
    CacheKey::from_parts(parts, "http")
        .ok()
        .map(|k| k.as_bytes().to_vec())
}
