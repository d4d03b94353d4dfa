//! The cache key of a request, shared by the handler and PURGE.

use edgecache_cache::policy::CacheKey;

/// The primary cache key for a request head, or `None` when it has no usable host.
pub fn primary(parts: &http::request::Parts) -> Option<Vec<u8>> {
    CacheKey::from_parts(parts, "http")
        .ok()
        .map(|k| k.as_bytes().to_vec())
}
