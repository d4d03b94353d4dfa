//! May this response be stored? (RFC 9111 3, 3.5; RFC 9110 15.1)
//!
//! A shared cache stores a response to a request only when (RFC 9111 3):
//! * the request method is understood (GET; HEAD responses only update, see
//!   [`super::validate::freshen_with_head`]),
//! * the status code is final (never a 1xx),
//! * for 206, 304 or `must-understand`, the cache understands the status code (a 206 is kept as
//!   partial content when it holds one byte range of known complete length, see
//!   [`super::partial::stored_range`]; a 304 only updates),
//! * `no-store` is absent (ignored under `must-understand` with an understood status, 5.2.2.3),
//!   in the response and in the request (5.2.1.5),
//! * unqualified `private` is absent (5.2.2.7),
//! * a request with Authorization has a response with `public`, `s-maxage` or `must-revalidate`
//!   (3.5),
//! * the response has explicit freshness (`max-age`, `s-maxage`, Expires), `public`, or a
//!   heuristically cacheable status code.
//!
//! On top of the RFC: `Vary: *` is not stored (it can never be selected, 4.1), and the
//! operator's cookie policy applies to responses with Set-Cookie.

use std::time::{Duration, SystemTime};

use http::header::{AUTHORIZATION, SET_COOKIE};
use http::{Method, StatusCode, request, response};

use super::cache_control::{CacheControl, ResponseDirectives, request_directives};
use super::config::{CookiePolicy, PolicyConfig};
use super::freshness::{self, Lifetime};
use super::vary::Vary;

/// A storable response, with its freshness lifetime when it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storable {
    /// The freshness lifetime (4.2.1).
    pub lifetime: Lifetime,
}

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoStoreReason {
    /// An interim 1xx response.
    Interim,
    /// The request method is not GET.
    Method,
    /// A 206 this cache cannot keep as partial content (several ranges, unknown complete length,
    /// a Content-Length that does not match its Content-Range).
    PartialContent,
    /// 304 Not Modified: it updates a stored response but is not one.
    NotModified,
    /// `no-store` in the request.
    RequestNoStore,
    /// `no-store` in the response.
    NoStore,
    /// `must-understand` with a status code this cache does not understand.
    MustUnderstand,
    /// Unqualified `private`.
    Private,
    /// The request had Authorization and the response does not allow sharing it.
    Authorization,
    /// Set-Cookie and the operator's cookie policy.
    SetCookie,
    /// `Vary: *`.
    VaryAny,
    /// No explicit freshness, not `public`, and a status code that is not heuristically
    /// cacheable.
    NotCacheable,
    /// Neither Content-Length nor chunked framing: the body ends when the origin closes, so a
    /// dropped connection would look complete (RFC 9112 6.3, item 8). Stored only when
    /// configured.
    CloseDelimited,
}

impl NoStoreReason {
    /// For logs, metrics and Cache-Status `detail`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoStoreReason::Interim => "interim",
            NoStoreReason::Method => "method",
            NoStoreReason::PartialContent => "partial-content",
            NoStoreReason::NotModified => "not-modified",
            NoStoreReason::RequestNoStore => "request-no-store",
            NoStoreReason::NoStore => "no-store",
            NoStoreReason::MustUnderstand => "must-understand",
            NoStoreReason::Private => "private",
            NoStoreReason::Authorization => "authorization",
            NoStoreReason::SetCookie => "set-cookie",
            NoStoreReason::VaryAny => "vary-star",
            NoStoreReason::NotCacheable => "not-cacheable",
            NoStoreReason::CloseDelimited => "close-delimited",
        }
    }
}

/// Status codes whose semantics this cache implements for storage (RFC 9110 15): the final
/// codes it can replay from a stored response (206 as partial content, 3.3).
pub fn understood_status(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200..=206 | 300..=303 | 307 | 308 | 400..=406 | 408..=417 | 421 | 422 | 426 | 451 | 500..=505
    )
}

/// True when a response to a request with Authorization may be stored by a shared cache (3.5).
pub fn allows_authorized(cc: &CacheControl) -> bool {
    cc.public || cc.s_maxage.is_some() || cc.must_revalidate
}

/// Decide whether `resp`, the answer to `req` received at `now`, may be stored.
pub fn storable(
    req: &request::Parts,
    resp: &response::Parts,
    now: SystemTime,
    cfg: &PolicyConfig,
) -> Result<Storable, NoStoreReason> {
    storable_with(req, resp, &freshness::Basis::of(&resp.headers, now), cfg)
}

/// [`storable`] with `resp`'s fields already read: `basis` is [`freshness::Basis::of`] its
/// headers at the time it was received.
pub fn storable_with(
    req: &request::Parts,
    resp: &response::Parts,
    basis: &freshness::Basis,
    cfg: &PolicyConfig,
) -> Result<Storable, NoStoreReason> {
    let status = resp.status;
    if status.is_informational() {
        return Err(NoStoreReason::Interim);
    }
    if req.method != Method::GET {
        return Err(NoStoreReason::Method);
    }
    let directives = &basis.directives;
    let cc = &directives.cc;
    if cc.must_understand && !understood_status(status) {
        return Err(NoStoreReason::MustUnderstand);
    }
    if status == StatusCode::PARTIAL_CONTENT
        && super::partial::stored_range(&resp.headers).is_none()
    {
        return Err(NoStoreReason::PartialContent);
    }
    if status == StatusCode::NOT_MODIFIED {
        return Err(NoStoreReason::NotModified);
    }
    if request_directives(&req.headers).no_store {
        return Err(NoStoreReason::RequestNoStore);
    }
    // 5.2.2.3: must-understand with an understood status code overrides no-store.
    if cc.no_store && !cc.must_understand {
        return Err(NoStoreReason::NoStore);
    }
    if cc.private == Some(super::cache_control::Scope::All) {
        return Err(NoStoreReason::Private);
    }
    if req.headers.contains_key(AUTHORIZATION) && !allows_authorized(cc) {
        return Err(NoStoreReason::Authorization);
    }
    if Vary::of(&resp.headers) == Vary::Any {
        return Err(NoStoreReason::VaryAny);
    }
    if resp.headers.contains_key(SET_COOKIE) && !cookie_allowed(cc, cfg.cookie_policy) {
        return Err(NoStoreReason::SetCookie);
    }
    let explicit = cc.max_age.is_some() || cc.s_maxage.is_some() || basis.expires.is_some();
    if !explicit && !freshness::heuristic_allowed(status, directives) {
        return Err(NoStoreReason::NotCacheable);
    }
    let lifetime = basis.lifetime(status, cfg);
    Ok(Storable { lifetime })
}

/// Longest hit-for-pass a response's own max-age can ask for.
pub const PASS_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Hit-for-pass: how long to remember that the response for a key cannot be stored, so later
/// requests for it go straight to the origin instead of queueing behind a fetch whose result
/// they cannot share. `None` when the reason says nothing of later responses (it came from the
/// request: its method, no-store, Authorization) or hit-for-pass is off (`default` zero). The
/// time is `default`, or the response's max-age when it is `private` or `no-store` (it tells
/// how long that answer holds), at most [`PASS_MAX`].
pub fn pass_for(
    reason: NoStoreReason,
    resp: &response::Parts,
    default: Duration,
) -> Option<Duration> {
    use NoStoreReason as R;
    if default.is_zero() {
        return None;
    }
    match reason {
        R::NoStore
        | R::Private
        | R::SetCookie
        | R::VaryAny
        | R::NotCacheable
        | R::MustUnderstand
        | R::CloseDelimited => {}
        R::Interim
        | R::Method
        | R::PartialContent
        | R::NotModified
        | R::RequestNoStore
        | R::Authorization => return None,
    }
    let cc = ResponseDirectives::of(&resp.headers).cc;
    let own = (cc.no_store || cc.private.is_some())
        .then(|| cc.max_age.and_then(|d| d.seconds()))
        .flatten();
    Some(own.map_or(default, |s| Duration::from_secs(s).min(PASS_MAX)))
}

/// [`storable_with`] for a response as it arrived on the wire, where its framing is known: one
/// whose end is the origin closing the connection is refused unless configured.
pub fn storable_as_received(
    req: &request::Parts,
    resp: &response::Parts,
    basis: &freshness::Basis,
    cfg: &PolicyConfig,
) -> Result<Storable, NoStoreReason> {
    let verdict = storable_with(req, resp, basis, cfg)?;
    if !cfg.store_close_delimited && close_delimited(resp.status, &resp.headers) {
        return Err(NoStoreReason::CloseDelimited);
    }
    Ok(verdict)
}

/// Whether a response to a GET is framed by the connection's close alone (RFC 9112 6.3): it has
/// a body (not 204 or 304), no Transfer-Encoding and no Content-Length.
pub fn close_delimited(status: StatusCode, headers: &http::HeaderMap) -> bool {
    status != StatusCode::NO_CONTENT
        && status != StatusCode::NOT_MODIFIED
        && !status.is_informational()
        && !headers.contains_key(http::header::TRANSFER_ENCODING)
        && !headers.contains_key(http::header::CONTENT_LENGTH)
}

/// The cookie policy. A Set-Cookie that a qualified `private` or `no-cache` keeps out of storage
/// (3.1) never reaches another client, so it does not prevent storing.
fn cookie_allowed(cc: &CacheControl, policy: CookiePolicy) -> bool {
    let stripped = |scope: &Option<super::cache_control::Scope>| {
        scope
            .as_ref()
            .is_some_and(|s| s.fields().contains(&SET_COOKIE))
    };
    if stripped(&cc.private) || stripped(&cc.no_cache) {
        return true;
    }
    match policy {
        CookiePolicy::Store => true,
        CookiePolicy::NoStoreUnlessPublic => cc.public,
        CookiePolicy::NeverStore => false,
    }
}
