//! HTTP caching policy: pure functions of (request, stored response, `now`, config).
//!
//! Nothing here does I/O, reads a clock or awaits: every function that depends on time takes
//! `now: SystemTime`, so the proxy passes its clock and tests pass a fixed one. (One exception:
//! an obsolete rfc850-date's two-digit year is placed against the system clock's year, see
//! [`syntax::http_date`].) Each module
//! implements one part of RFC 9111 (with RFC 5861, RFC 9213, RFC 9211 and RFC 9110 where they
//! apply) and cites the sections it follows; outcomes are enums with `as_str()` for logs,
//! metrics and Cache-Status `detail`.
//!
//! | step | call |
//! |---|---|
//! | config | [`PolicyConfig`] (its `Default` conforms to RFC 9111; the binary maps its config file onto it) |
//! | classify | [`request::classify`]`(&parts, &cfg) -> RequestClass` |
//! | authority | [`Authority::of_request`]`(&parts, scheme) -> Result<Authority, AuthorityError>`: the one parser of the request's host |
//! | key | [`CacheKey::from_parts`]`(&parts, "http") -> Result<CacheKey, KeyError>` |
//! | select a variant | [`vary::select`]`(&parts, &candidates) -> Option<&StoredResponse>` |
//! | nothing stored | [`serve::miss`]`(&parts)` / [`serve::vary_miss`]`(&parts) -> ServeDecision` |
//! | decide | [`serve::decide`]`(&parts, &stored, now, &cfg) -> ServeDecision` |
//! | forward a cacheable miss or a revalidation | [`request::strip_for_fill`]`(&mut headers)` (+ `conditional` of the decision) |
//! | answer from storage | [`respond::from_cache`]`(&parts, &stored, body_len, now) -> CachedResponse` |
//! | after a miss | [`storable::storable`]`(&req, &resp, now, &cfg) -> Result<Storable, NoStoreReason>`, then [`StoredResponse::new`]`(&req, &resp, request_time, response_time)`; reading the fields once: [`freshness::Basis::of`], [`storable::storable_with`], [`StoredResponse::from_received`] |
//! | forward downstream | [`headers::strip_targeted`]`(&mut headers)` on every origin response |
//! | revalidation answered | 304: [`validate::freshen`]; error: [`serve::stale_if_error`]; HEAD: [`validate::freshen_with_head`] |
//! | unsafe method answered | [`invalidate::targets`]`(&req, status, &headers, "http") -> Vec<CacheKey>` |
//! | 1xx from the origin | [`interim::action`]`(status, client_version, client_expects_continue)` |
//! | Cache-Status | [`ServeDecision::cache_status`](serve::ServeDecision::cache_status), [`status::CacheStatus`] |
//! | a single-range GET nothing complete answers | [`partial::forwards_range`]: forward its Range; a 206 is kept when [`partial::stored_range`] accepts it |
//! | answer from partial content | [`respond::from_partial`]`(&parts, &stored, now) -> Option<CachedResponse>` |
//! | a stored body that fails mid-response | [`partial::Continuation::of`] (Range + If-Range), then [`partial::Continuation::accepts`] on the origin's answer |
//! | a 206 that continues held bytes | [`partial::combinable`], [`partial::combine`], [`partial::combined_fields`] |
//! | the blob the store keeps | [`StoredResponse::encode`] / [`StoredResponse::decode`] |
//! | the cache's own compression | [`encoding::negotiate`]`(&headers, offered) -> Coding` (the Vary bucket), [`encoding::eligible`]`(status, &headers, &cfg)`, [`encoding::etag_for`] |
//!
//! # Miss, hit and revalidation, as the proxy sees them
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use edgecache_policy::{self as policy, CacheKey, PolicyConfig, StoredResponse};
//! use edgecache_policy::request::RequestClass;
//! use edgecache_policy::serve::ServeDecision;
//! use edgecache_policy::status::CacheStatus;
//! use edgecache_policy::validate::Freshen;
//!
//! let cfg = PolicyConfig::default();
//! let request = || {
//!     http::Request::get("/logo.png").header("host", "example.com").body(()).unwrap().into_parts().0
//! };
//! let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
//!
//! // 1. Miss: classify, key, nothing stored, forward.
//! let req = request();
//! assert_eq!(policy::request::classify(&req, &cfg), RequestClass::Cacheable);
//! let key = CacheKey::from_parts(&req, "http").unwrap();
//! assert_eq!(key.as_str(), "http://example.com/logo.png");
//! let decision = policy::serve::miss(&req);
//! assert!(matches!(decision, ServeDecision::Forward { .. }));
//! // ... the origin answers (request sent at t0, response received at t0) ...
//! let origin = http::Response::builder()
//!     .header("cache-control", "max-age=60")
//!     .header("etag", "\"v1\"")
//!     .body(()).unwrap().into_parts().0;
//! let stored = match policy::storable::storable(&req, &origin, t0, &cfg) {
//!     Ok(_) => Some(StoredResponse::new(&req, &origin, t0, t0)),
//!     Err(reason) => { let _ = reason.as_str(); None }
//! };
//! let status = decision.cache_status(&cfg.name).stored(stored.is_some());
//! assert_eq!(status.to_string(), "edgecache; fwd=uri-miss; stored");
//! let blob = stored.unwrap().encode(); // the store keeps this next to the body
//!
//! // 2. Hit, 10 s later.
//! let stored = StoredResponse::decode(&blob).unwrap();
//! let req = request();
//! let now = t0 + Duration::from_secs(10);
//! let decision = policy::serve::decide(&req, &stored, now, &cfg);
//! assert!(matches!(decision, ServeDecision::Serve { .. }));
//! let response = policy::respond::from_cache(&req, &stored, 1234, now);
//! assert_eq!(response.headers["age"], "10");
//! assert_eq!(decision.cache_status(&cfg.name).to_string(), "edgecache; hit; ttl=50");
//!
//! // 3. Stale after 60 s: revalidate with the stored validators; the origin says 304.
//! let now = t0 + Duration::from_secs(100);
//! let ServeDecision::Revalidate { conditional, reason, .. } =
//!     policy::serve::decide(&req, &stored, now, &cfg)
//! else { unreachable!() };
//! assert_eq!(conditional["if-none-match"], "\"v1\"");
//! let not_modified = http::Response::builder()
//!     .status(304)
//!     .header("etag", "\"v1\"")
//!     .body(()).unwrap().into_parts().0;
//! let Freshen::Updated(stored) = policy::validate::freshen(&stored, &not_modified, now, now)
//! else { unreachable!() };
//! let status = CacheStatus::forward(&cfg.name, reason.fwd()).fwd_status(304);
//! assert_eq!(status.to_string(), "edgecache; fwd=stale; fwd-status=304");
//! assert!(matches!(policy::serve::decide(&req, &stored, now, &cfg), ServeDecision::Serve { .. }));
//! ```
//!
//! # Deliberate choices (each explained where it is implemented)
//!
//! * Duplicate directives keep the first occurrence (4.2.1 allows it); `no-cache` and `private`
//!   merge to the most restrictive. An invalid request `max-age` reads as 0.
//! * Qualified `private` and `no-cache` are honoured by not storing the listed fields (3.1); the
//!   rest of the response is stored and served without validation.
//! * `EdgeCache-Cache-Control`, then `CDN-Cache-Control`, replace Cache-Control and Expires for
//!   this cache (RFC 9213 2.2) and are never forwarded downstream. Response `Pragma` is ignored.
//! * The operator's default TTL acts as a heuristic (4.2.2): only without explicit freshness,
//!   only for heuristically cacheable codes or `public`, and before the Last-Modified heuristic.
//! * A request with Authorization is answered from a stored response only if that response
//!   allows sharing (`public`, `s-maxage`, `must-revalidate`, 3.5); otherwise it is revalidated.
//! * Fills are whole ([`request::strip_for_fill`]) except a GET with one byte range that nothing
//!   complete answers: its Range goes to the origin and a 206 is kept as partial content (one
//!   contiguous range per stored response), combined with a following 206 of the same strong
//!   validator, and stored as a complete 200 once whole ([`partial`]). Several ranges get a full
//!   200 rather than multipart/byteranges (RFC 9110 14.2 allows it).
//! * A 304 without validators freshens the response it revalidated (see [`validate::selects`]).

pub mod authority;
pub mod cache_control;
pub mod conditional;
pub mod config;
pub mod encoding;
pub mod freshness;
pub mod headers;
pub mod interim;
pub mod invalidate;
pub mod key;
pub mod partial;
pub mod range;
pub mod request;
pub mod respond;
pub mod serve;
pub mod status;
pub mod storable;
pub mod stored;
pub mod syntax;
pub mod validate;
pub mod vary;
mod vary_key;

pub use authority::{Authority, AuthorityError};
pub use config::{CookiePolicy, PolicyConfig};
pub use key::CacheKey;
pub use stored::StoredResponse;
