//! May a stored response answer this request? (RFC 9111 4, 4.2.4, 5.2.1, 5.2.2; RFC 5861)
//!
//! 4: a stored response is used without contacting the origin only when the URI and method
//! match, the Vary fields match (4.1), it does not carry `no-cache` (5.2.2.4) unless validated,
//! and it is fresh (4.2), or allowably stale (4.2.4). Request directives narrow this: `no-cache`,
//! `max-age`, `min-fresh` ask for validation, `max-stale` accepts staleness, `only-if-cached`
//! turns every trip to the origin into a 504 (5.2.1).

use std::time::{Duration, SystemTime};

use http::header::{AUTHORIZATION, HeaderMap, IF_MATCH, IF_UNMODIFIED_SINCE};
use http::{Method, StatusCode, request};

use super::cache_control::{CacheControl, MaxStale, Scope, request_directives};
use super::config::PolicyConfig;
use super::freshness::Freshness;
use super::status::{CacheStatus, Fwd};
use super::storable::allows_authorized;
use super::stored::StoredResponse;
use super::validate::conditional_headers;

/// Why a decision was taken; `as_str` is a bounded label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Fresh (4.2).
    Fresh,
    /// Stale, and the client's `max-stale` accepts it (5.2.1.2).
    MaxStale,
    /// Stale within `stale-while-revalidate` (RFC 5861 3).
    StaleWhileRevalidate,
    /// Stale (4.2.4).
    Stale,
    /// The response's unqualified `no-cache` (5.2.2.4).
    ResponseNoCache,
    /// The request's `no-cache`, or `Pragma: no-cache` (5.2.1.4, 5.4).
    RequestNoCache,
    /// Older than the request's `max-age` (5.2.1.1).
    RequestMaxAge,
    /// Fresh for less than the request's `min-fresh` (5.2.1.3).
    RequestMinFresh,
    /// The request has Authorization and the stored response does not allow sharing (3.5).
    Authorization,
    /// If-Match or If-Unmodified-Since: only the origin evaluates them (4.3.2).
    OriginPrecondition,
    /// Not GET or HEAD.
    Method,
    /// No stored response for the URI.
    UriMiss,
    /// Stored responses exist but Vary selects none (4.1).
    VaryMiss,
    /// `only-if-cached` and nothing usable (5.2.1.7).
    OnlyIfCached,
}

impl Reason {
    /// For logs, metrics and Cache-Status `detail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Fresh => "fresh",
            Reason::MaxStale => "max-stale",
            Reason::StaleWhileRevalidate => "stale-while-revalidate",
            Reason::Stale => "stale",
            Reason::ResponseNoCache => "response-no-cache",
            Reason::RequestNoCache => "request-no-cache",
            Reason::RequestMaxAge => "request-max-age",
            Reason::RequestMinFresh => "request-min-fresh",
            Reason::Authorization => "authorization",
            Reason::OriginPrecondition => "origin-precondition",
            Reason::Method => "method",
            Reason::UriMiss => "uri-miss",
            Reason::VaryMiss => "vary-miss",
            Reason::OnlyIfCached => "only-if-cached",
        }
    }

    /// The Cache-Status `fwd` value of a request forwarded for this reason (RFC 9211 2.2).
    pub fn fwd(self) -> Fwd {
        match self {
            Reason::Method => Fwd::Method,
            Reason::UriMiss => Fwd::UriMiss,
            Reason::VaryMiss => Fwd::VaryMiss,
            Reason::Stale
            | Reason::ResponseNoCache
            | Reason::MaxStale
            | Reason::StaleWhileRevalidate => Fwd::Stale,
            Reason::RequestNoCache
            | Reason::RequestMaxAge
            | Reason::RequestMinFresh
            | Reason::Authorization
            | Reason::OriginPrecondition
            | Reason::Fresh => Fwd::Request,
            Reason::OnlyIfCached => Fwd::Miss,
        }
    }
}

/// What to do with a request for which a stored response was selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeDecision {
    /// Serve the stored response: fresh ([`Reason::Fresh`]), or stale with the client's
    /// `max-stale` ([`Reason::MaxStale`]).
    Serve {
        /// Freshness at decision time.
        freshness: Freshness,
        /// Why.
        reason: Reason,
    },
    /// Serve the stale response now and revalidate it in the background with these
    /// precondition fields (RFC 5861 3). Every request inside the window gets this decision; the
    /// proxy keeps one background revalidation per key in flight (its request coalescing).
    ServeStale {
        /// Freshness at decision time.
        freshness: Freshness,
        /// If-None-Match / If-Modified-Since for the background request.
        conditional: HeaderMap,
    },
    /// Send the request forward (after [`super::request::strip_for_fill`]) with these
    /// precondition fields added (empty: unconditional); on 304,
    /// [`super::validate::freshen`] and serve; on another final response, that response
    /// answers and may replace the stored one (4.3.3). On a 5xx or an unreachable origin, serve
    /// the stale response only if [`stale_if_error`] allows it at that moment (`stale_if_error`
    /// here is its value at decision time); otherwise send the origin's error, or 504 when it is
    /// unreachable (5.2.2.2: "MUST generate an error response ... SHOULD be 504").
    Revalidate {
        /// Freshness at decision time.
        freshness: Freshness,
        /// If-None-Match / If-Modified-Since.
        conditional: HeaderMap,
        /// Why.
        reason: Reason,
        /// Whether an error from the origin may be answered with this stale response.
        stale_if_error: bool,
    },
    /// The stored response cannot be used: forward as a miss.
    Forward {
        /// Why.
        reason: Reason,
    },
    /// `only-if-cached` and nothing usable: answer 504 Gateway Timeout (5.2.1.7).
    GatewayTimeout,
}

impl ServeDecision {
    /// For logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            ServeDecision::Serve { .. } => "hit",
            ServeDecision::ServeStale { .. } => "stale-while-revalidate",
            ServeDecision::Revalidate { .. } => "revalidate",
            ServeDecision::Forward { .. } => "forward",
            ServeDecision::GatewayTimeout => "only-if-cached",
        }
    }

    /// The Cache-Status member for this decision. For [`ServeDecision::Revalidate`] and
    /// [`ServeDecision::Forward`], add `fwd_status` and `stored` once the origin answered.
    pub fn cache_status(&self, name: &str) -> CacheStatus {
        match self {
            ServeDecision::Serve { freshness, .. }
            | ServeDecision::ServeStale { freshness, .. } => {
                CacheStatus::hit(name).ttl(freshness.ttl())
            }
            ServeDecision::Revalidate { reason, .. } | ServeDecision::Forward { reason } => {
                CacheStatus::forward(name, reason.fwd())
            }
            ServeDecision::GatewayTimeout => {
                CacheStatus::none(name).detail(Reason::OnlyIfCached.as_str())
            }
        }
    }
}

/// The request directives, with the operator's `ignore_client_no_cache`.
pub fn effective_request_directives(headers: &HeaderMap, cfg: &PolicyConfig) -> CacheControl {
    let mut rcc = request_directives(headers);
    if cfg.ignore_client_no_cache {
        rcc.no_cache = None;
    }
    rcc
}

/// No stored response for the URI: forward, or 504 under `only-if-cached` (5.2.1.7).
pub fn miss(req: &request::Parts) -> ServeDecision {
    if request_directives(&req.headers).only_if_cached {
        ServeDecision::GatewayTimeout
    } else {
        ServeDecision::Forward {
            reason: Reason::UriMiss,
        }
    }
}

/// Stored responses for the URI, but [`super::vary::select`] chose none.
pub fn vary_miss(req: &request::Parts) -> ServeDecision {
    if request_directives(&req.headers).only_if_cached {
        ServeDecision::GatewayTimeout
    } else {
        ServeDecision::Forward {
            reason: Reason::VaryMiss,
        }
    }
}

/// Decide how `stored` (selected for `req`) may answer it at `now`.
pub fn decide(
    req: &request::Parts,
    stored: &StoredResponse,
    now: SystemTime,
    cfg: &PolicyConfig,
) -> ServeDecision {
    let rcc = effective_request_directives(&req.headers, cfg);
    let forward = |reason| {
        if rcc.only_if_cached {
            ServeDecision::GatewayTimeout
        } else {
            ServeDecision::Forward { reason }
        }
    };
    if req.method != Method::GET && req.method != Method::HEAD {
        return forward(Reason::Method);
    }
    if !stored.matches(&req.headers) {
        return forward(Reason::VaryMiss);
    }
    if req.headers.contains_key(IF_MATCH) || req.headers.contains_key(IF_UNMODIFIED_SINCE) {
        return forward(Reason::OriginPrecondition);
    }
    let freshness = stored.freshness(now, cfg);
    let cc = &stored.directives().cc;
    let revalidate = |reason, stale_if_error| {
        if rcc.only_if_cached {
            ServeDecision::GatewayTimeout
        } else {
            ServeDecision::Revalidate {
                freshness,
                conditional: conditional_headers(stored),
                reason,
                stale_if_error,
            }
        }
    };
    if req.headers.contains_key(AUTHORIZATION) && !allows_authorized(cc) {
        return revalidate(Reason::Authorization, false);
    }
    if cc.no_cache == Some(Scope::All) {
        return revalidate(Reason::ResponseNoCache, false);
    }
    if rcc.no_cache.is_some() {
        return revalidate(Reason::RequestNoCache, false);
    }
    if let Some(max_age) = rcc.max_age {
        // An invalid request max-age is read as 0: the restrictive reading.
        if freshness.age_secs() > max_age.seconds().unwrap_or(0) {
            let reason = if freshness.is_fresh() {
                Reason::RequestMaxAge
            } else {
                Reason::Stale
            };
            return revalidate(reason, false);
        }
    }
    if freshness.is_fresh() {
        if let Some(min_fresh) = rcc.min_fresh.and_then(|d| d.seconds())
            && freshness.remaining() < Duration::from_secs(min_fresh)
        {
            return revalidate(Reason::RequestMinFresh, false);
        }
        return ServeDecision::Serve {
            freshness,
            reason: Reason::Fresh,
        };
    }
    // Stale (4.2.4): only where neither the response forbids it nor the client wants freshness.
    let staleness = freshness.staleness();
    if !cc.forbids_stale() && rcc.min_fresh.is_none() {
        let accepted_by_client = match rcc.max_stale {
            Some(MaxStale::Any) => true,
            Some(MaxStale::Seconds(s)) => staleness <= Duration::from_secs(s),
            None => false,
        };
        if accepted_by_client {
            return ServeDecision::Serve {
                freshness,
                reason: Reason::MaxStale,
            };
        }
        if let Some(swr) = cc.stale_while_revalidate.and_then(|d| d.seconds())
            && staleness <= Duration::from_secs(swr)
        {
            return ServeDecision::ServeStale {
                freshness,
                conditional: conditional_headers(stored),
            };
        }
    }
    revalidate(
        Reason::Stale,
        stale_if_error(&req.headers, stored, now, cfg),
    )
}

/// Statuses that count as an error for `stale-if-error` (RFC 5861 4: 500, 502, 503, 504); an
/// unreachable origin counts too (the proxy decides that without a status).
pub fn is_error_for_stale(status: StatusCode) -> bool {
    matches!(status.as_u16(), 500 | 502 | 503 | 504)
}

/// May `stored` answer the request at `now` because the origin failed (RFC 5861 4)? Yes when
/// the staleness is within the response's or the request's `stale-if-error`, or the request's
/// `max-stale`, and the response does not forbid serving stale (must-revalidate,
/// proxy-revalidate, s-maxage, no-cache: RFC 9111 4.2.4).
pub fn stale_if_error(
    request_headers: &HeaderMap,
    stored: &StoredResponse,
    now: SystemTime,
    cfg: &PolicyConfig,
) -> bool {
    let cc = &stored.directives().cc;
    if cc.forbids_stale() {
        return false;
    }
    let staleness = stored.freshness(now, cfg).staleness();
    let rcc = request_directives(request_headers);
    let within = |d: Option<super::cache_control::Delta>| {
        d.and_then(|d| d.seconds())
            .is_some_and(|s| staleness <= Duration::from_secs(s))
    };
    within(cc.stale_if_error)
        || within(rcc.stale_if_error)
        || match rcc.max_stale {
            Some(MaxStale::Any) => true,
            Some(MaxStale::Seconds(s)) => staleness <= Duration::from_secs(s),
            None => false,
        }
}
