//! What a request asks of the cache, before any lookup.

use http::HeaderMap;
use http::header::{ACCEPT_ENCODING, HeaderName, HeaderValue};
use http::header::{IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, RANGE, UPGRADE};
use http::{Method, request};

use super::config::PolicyConfig;
use super::status::{CacheStatus, Fwd};

/// How the proxy handles a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// GET or HEAD: look the key up ([`super::serve::decide`]); a HEAD is answered from a stored
    /// GET response (RFC 9111 3, 4).
    Cacheable,
    /// An unsafe method (or one whose safety is unknown): forward it, and invalidate on a
    /// non-error response (4.4, [`super::invalidate::targets`]).
    Unsafe,
    /// Forward without looking up or storing.
    Bypass(BypassReason),
}

impl RequestClass {
    /// For logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestClass::Cacheable => "cacheable",
            RequestClass::Unsafe => "unsafe",
            RequestClass::Bypass(r) => r.as_str(),
        }
    }

    /// The Cache-Status member of a request that is forwarded without lookup (RFC 9211 2.2:
    /// `fwd=method` when the method requires it, else `fwd=bypass` with the reason as detail);
    /// `None` for [`RequestClass::Cacheable`].
    pub fn cache_status(self, name: &str) -> Option<CacheStatus> {
        match self {
            RequestClass::Cacheable => None,
            RequestClass::Unsafe | RequestClass::Bypass(BypassReason::Method) => {
                Some(CacheStatus::forward(name, Fwd::Method))
            }
            RequestClass::Bypass(r) => {
                Some(CacheStatus::forward(name, Fwd::Bypass).detail(r.as_str()))
            }
        }
    }
}

/// Why a request bypasses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BypassReason {
    /// A safe method other than GET and HEAD (OPTIONS, TRACE): never answered from storage.
    Method,
    /// CONNECT: a tunnel, not a resource.
    Connect,
    /// A protocol upgrade (e.g. WebSocket).
    Upgrade,
}

impl BypassReason {
    /// For logs, metrics and Cache-Status `detail`.
    pub fn as_str(self) -> &'static str {
        match self {
            BypassReason::Method => "method",
            BypassReason::Connect => "connect",
            BypassReason::Upgrade => "upgrade",
        }
    }
}

/// Safe methods (RFC 9110 9.2.1).
pub fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// Classify a request. `cfg` is accepted so operator switches can join later; none applies today.
pub fn classify(req: &request::Parts, _cfg: &PolicyConfig) -> RequestClass {
    match req.method {
        Method::CONNECT => RequestClass::Bypass(BypassReason::Connect),
        Method::GET | Method::HEAD if req.headers.contains_key(UPGRADE) => {
            RequestClass::Bypass(BypassReason::Upgrade)
        }
        Method::GET | Method::HEAD => RequestClass::Cacheable,
        ref m if is_safe(m) => RequestClass::Bypass(BypassReason::Method),
        _ => RequestClass::Unsafe,
    }
}

/// Prepare the header fields of a cacheable GET forwarded on a miss (and of a revalidation,
/// before adding [`super::validate::conditional_headers`]) so the origin sends the
/// complete, storable response: Range and If-Range are removed (this cache does not store 206,
/// RFC 9111 3.3), and so are the client's If-None-Match and If-Modified-Since (a 304 to the
/// client's validators cannot fill the cache). [`super::respond::from_cache`] then answers the
/// client's range and preconditions from the stored response (RFC 9111 4.3.2, RFC 9110 14.2
/// allow both). If-Match and If-Unmodified-Since are kept: only the origin evaluates them.
///
/// Accept-Encoding becomes its bucket ([`super::encoding::negotiate`]: `zstd`, `br`, `gzip`,
/// or `identity` for everything else), the value a response that varies on it is stored
/// under ([`super::vary::normalize`]): the origin chooses among the codings the bucket names,
/// so every client of a bucket may be sent what it chose, and an object has at most four
/// such variants whatever the clients send.
pub fn strip_for_fill(headers: &mut HeaderMap) {
    const STRIPPED: [HeaderName; 4] = [RANGE, IF_RANGE, IF_NONE_MATCH, IF_MODIFIED_SINCE];
    let bucket = super::encoding::negotiate(headers, &super::encoding::PREFERENCE);
    // Already the bucket, in one field line: left as it is.
    let mut lines = headers.get_all(ACCEPT_ENCODING).iter();
    let normal = lines
        .next()
        .is_some_and(|v| v.as_bytes() == bucket.as_str().as_bytes())
        && lines.next().is_none();
    if !normal {
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static(bucket.as_str()));
    }
    // Most requests have none of them: one pass over the names, not four removals.
    if !headers.keys().any(|n| STRIPPED.contains(n)) {
        return;
    }
    for name in STRIPPED {
        headers.remove(name);
    }
}
