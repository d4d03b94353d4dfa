//! Freshness (RFC 9111 4.2): the freshness lifetime (4.2.1, 4.2.2), the current age (4.2.3) and
//! whether a stored response is fresh (4.2).

use std::time::{Duration, SystemTime};

use http::header::{AGE, CACHE_CONTROL, DATE, EXPIRES, HeaderName, LAST_MODIFIED};
use http::{HeaderMap, StatusCode};

use super::cache_control::{CDN_CACHE_CONTROL, Delta, EDGECACHE_CACHE_CONTROL, ResponseDirectives};
use super::config::PolicyConfig;
use super::syntax::{self, DELTA_SECONDS_MAX};

/// Which rule gave the freshness lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifetimeSource {
    /// `s-maxage` (shared caches, 4.2.1).
    SMaxAge,
    /// `max-age`.
    MaxAge,
    /// `Expires` minus `Date`.
    Expires,
    /// The operator's default TTL, used like a heuristic (4.2.2).
    DefaultTtl,
    /// A fraction of the time since Last-Modified (4.2.2).
    Heuristic,
    /// Nothing: the response is stale as soon as it is received.
    None,
}

impl LifetimeSource {
    /// For logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LifetimeSource::SMaxAge => "s-maxage",
            LifetimeSource::MaxAge => "max-age",
            LifetimeSource::Expires => "expires",
            LifetimeSource::DefaultTtl => "default-ttl",
            LifetimeSource::Heuristic => "heuristic",
            LifetimeSource::None => "none",
        }
    }

    /// True for s-maxage, max-age and Expires (an "explicit expiration time", 4.2.1).
    pub fn is_explicit(self) -> bool {
        matches!(
            self,
            LifetimeSource::SMaxAge | LifetimeSource::MaxAge | LifetimeSource::Expires
        )
    }
}

/// A freshness lifetime in seconds and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// Seconds, at most 2^31.
    pub secs: u64,
    /// The rule that gave it.
    pub source: LifetimeSource,
}

/// Status codes that are heuristically cacheable (RFC 9110 15.1).
pub fn heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// True when a heuristic (or the default TTL) may give this response a lifetime (4.2.2: only
/// heuristically cacheable status codes, or responses marked `public`).
pub fn heuristic_allowed(status: StatusCode, directives: &ResponseDirectives) -> bool {
    heuristically_cacheable(status) || directives.cc.public
}

/// The date the origin generated the response (RFC 9110 6.6.1), or the time it was received when
/// Date is absent or invalid.
pub fn date_value(headers: &HeaderMap, response_time: SystemTime) -> SystemTime {
    syntax::date_field(headers, DATE).unwrap_or(response_time)
}

/// Every field [`Basis::of`] reads: a basis read from a response holds for the same response
/// with other fields added or removed.
pub const BASIS_FIELDS: [HeaderName; 7] = [
    EDGECACHE_CACHE_CONTROL,
    CDN_CACHE_CONTROL,
    CACHE_CONTROL,
    DATE,
    EXPIRES,
    LAST_MODIFIED,
    AGE,
];

/// What freshness needs of a response's fields (its directives, Date, Expires, Last-Modified
/// and Age), read once: a stored response keeps it, so a hit parses none of them again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Basis {
    /// The response directives (RFC 9213 2.2 selection).
    pub directives: ResponseDirectives,
    /// [`date_value`].
    pub date_value: SystemTime,
    /// Expires when it is present and counts (`None`: absent or not used; `Some(None)`: present
    /// but invalid, which means already expired, 5.3).
    pub expires: Option<Option<SystemTime>>,
    /// Last-Modified, when valid.
    pub last_modified: Option<SystemTime>,
    /// [`age_value`].
    pub age_value: u64,
}

impl Basis {
    /// Read the fields of a response received at `response_time`.
    pub fn of(headers: &HeaderMap, response_time: SystemTime) -> Self {
        let directives = ResponseDirectives::of(headers);
        let expires = (directives.uses_expires() && headers.contains_key(EXPIRES))
            .then(|| syntax::date_field(headers, EXPIRES));
        Self {
            date_value: date_value(headers, response_time),
            expires,
            last_modified: syntax::date_field(headers, LAST_MODIFIED),
            age_value: age_value(headers),
            directives,
        }
    }

    /// `freshness_lifetime` (4.2.1) for a shared cache: s-maxage, then max-age, then Expires
    /// minus Date, then a heuristic (4.2.2) where one is allowed. Invalid values give 0 (stale).
    pub fn lifetime(&self, status: StatusCode, cfg: &PolicyConfig) -> Lifetime {
        let cc = &self.directives.cc;
        let explicit = |d: Delta, source| Lifetime {
            secs: d.seconds().unwrap_or(0),
            source,
        };
        if let Some(d) = cc.s_maxage {
            return explicit(d, LifetimeSource::SMaxAge);
        }
        if let Some(d) = cc.max_age {
            return explicit(d, LifetimeSource::MaxAge);
        }
        if let Some(expires) = self.expires {
            // 5.3: an invalid Expires (e.g. "0") means already expired.
            let secs = match expires {
                Some(expires) => expires
                    .duration_since(self.date_value)
                    .map_or(0, |d| d.as_secs().min(DELTA_SECONDS_MAX)),
                None => 0,
            };
            return Lifetime {
                secs,
                source: LifetimeSource::Expires,
            };
        }
        let none = Lifetime {
            secs: 0,
            source: LifetimeSource::None,
        };
        if !heuristic_allowed(status, &self.directives) {
            return none;
        }
        if let Some(ttl) = cfg.default_ttl {
            return Lifetime {
                secs: ttl.as_secs().min(DELTA_SECONDS_MAX),
                source: LifetimeSource::DefaultTtl,
            };
        }
        if !cfg.heuristic_freshness {
            return none;
        }
        let Some(last_modified) = self.last_modified else {
            return none;
        };
        let since = self
            .date_value
            .duration_since(last_modified)
            .unwrap_or(Duration::ZERO);
        let secs = (since
            .as_secs()
            .saturating_mul(u64::from(cfg.heuristic_percent))
            / 100)
            .min(cfg.heuristic_max.as_secs())
            .min(DELTA_SECONDS_MAX);
        Lifetime {
            secs,
            source: LifetimeSource::Heuristic,
        }
    }

    /// `corrected_initial_age` (4.2.3): the age when the response was received.
    pub fn corrected_initial_age(
        &self,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Duration {
        let apparent_age = since(response_time, self.date_value);
        let response_delay = since(response_time, request_time);
        let corrected_age_value =
            Duration::from_secs(self.age_value).saturating_add(response_delay);
        apparent_age.max(corrected_age_value)
    }
}

fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

/// `age_value` (4.2.3): the first member of Age (5.1: "SHOULD use the first member"), or 0
/// when absent or invalid (5.1: "a cache SHOULD ignore the field").
pub fn age_value(headers: &HeaderMap) -> u64 {
    headers
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| syntax::split_list(v).next())
        .and_then(syntax::delta_seconds)
        .unwrap_or(0)
}

/// `current_age` (4.2.3), computed exactly as the RFC writes it:
/// `corrected_initial_age + resident_time`.
pub fn current_age(
    headers: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
    now: SystemTime,
) -> Duration {
    Basis::of(headers, response_time)
        .corrected_initial_age(request_time, response_time)
        .saturating_add(since(now, response_time))
}

/// The freshness of a response at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// The freshness lifetime.
    pub lifetime: Lifetime,
    /// The current age.
    pub age: Duration,
}

impl Freshness {
    /// `response_is_fresh = (freshness_lifetime > current_age)` (4.2).
    pub fn is_fresh(&self) -> bool {
        Duration::from_secs(self.lifetime.secs) > self.age
    }

    /// Whole seconds of age, as the Age field carries it (5.1), at most 2^31.
    pub fn age_secs(&self) -> u64 {
        self.age.as_secs().min(DELTA_SECONDS_MAX)
    }

    /// Remaining freshness in seconds, negative once stale (RFC 9211 `ttl`).
    pub fn ttl(&self) -> i64 {
        let lifetime = i64::try_from(self.lifetime.secs).unwrap_or(i64::MAX);
        let age = i64::try_from(self.age_secs()).unwrap_or(i64::MAX);
        lifetime - age
    }

    /// How long the response has been stale (zero while fresh).
    pub fn staleness(&self) -> Duration {
        self.age
            .saturating_sub(Duration::from_secs(self.lifetime.secs))
    }

    /// Remaining freshness (zero once stale).
    pub fn remaining(&self) -> Duration {
        Duration::from_secs(self.lifetime.secs).saturating_sub(self.age)
    }
}
