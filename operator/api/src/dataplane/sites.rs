//! Many sites: hostnames, each with its own origin pool and cache-policy overrides.
//!
//! `origin.url` alone is the one-site shorthand: with no `sites`, every Host goes to it.

use serde::{Deserialize, Serialize};

use super::{ConfigError, CookiePolicy, HostHeader, err};
use crate::quantity::Duration;

/// One site: the hostnames it answers for and where it fills from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct SiteConfig {
    /// Hostnames, exact (`www.example.com`) or one-label wildcards (`*.example.com`),
    /// lowercase, without a port. At least one.
    pub hosts: Vec<String>,
    /// Answer requests whose Host no site names. At most one site. Without one, such a
    /// request gets 421 Misdirected Request.
    pub default: bool,
    /// The origin pool: `http://` or `https://` URLs with no path, all of one scheme. A
    /// hostname (a Kubernetes Service name too) is resolved by DNS on each new connection.
    pub origins: Vec<String>,
    /// How a request picks an origin: `roundRobin` or `leastConnections`. Default:
    /// `roundRobin`.
    pub balance: Balance,
    /// Health of the pool's origins.
    pub health_check: HealthCheckConfig,
    /// Further origins tried for an idempotent request (GET, HEAD) whose origin could not be
    /// reached or reset the connection before a response head, within a budget of a fifth
    /// of the site's requests. Default: 1.
    pub retries: u32,
    /// TLS to `https://` origins.
    pub origin_tls: OriginTlsConfig,
    /// HTTP/2 to the origin, and only HTTP/2 (ALPN `h2` over TLS, prior knowledge in plain):
    /// one multiplexed connection per origin and worker. Default: false.
    pub origin_http2: bool,
    /// What Host header the origin sees. Default: `preserve`.
    pub host_header: HostHeader,
    /// Cache-policy overrides for this site; unset fields keep the `cache` section's.
    pub cache: SitePolicyConfig,
    /// Compression overrides for this site; unset fields keep the `compression` section's.
    #[serde(skip_serializing_if = "super::CompressionConfig::is_unset")]
    pub compression: super::CompressionConfig,
}

impl Default for SiteConfig {
    fn default() -> Self {
        Self {
            hosts: Vec::new(),
            default: false,
            origins: Vec::new(),
            balance: Balance::default(),
            health_check: HealthCheckConfig::default(),
            retries: 1,
            origin_tls: OriginTlsConfig::default(),
            origin_http2: false,
            host_header: HostHeader::default(),
            cache: SitePolicyConfig::default(),
            compression: super::CompressionConfig::default(),
        }
    }
}

/// How a request picks an origin of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Balance {
    /// Each healthy origin in turn.
    #[default]
    RoundRobin,
    /// The healthy origin with the fewest requests in flight (all workers together).
    LeastConnections,
}

/// Active and passive health checks of a pool's origins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct HealthCheckConfig {
    /// Path requested from each origin every `interval` (active checks; a 2xx or 3xx is
    /// healthy). Default: none: passive checks only.
    pub path: Option<String>,
    /// Time between two active checks of an origin. Default: `5s`.
    pub interval: Duration,
    /// Time an active check may take. Default: `2s`.
    pub timeout: Duration,
    /// Failed checks or failed requests (no connection, a reset before the head) in a row
    /// that take an origin out of the pool. Default: 3.
    pub unhealthy_after: u32,
    /// Passed active checks in a row that put it back; without active checks, an origin
    /// out of the pool is tried again after `interval`. Default: 2.
    pub healthy_after: u32,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        Self {
            path: None,
            interval: Duration::secs(5),
            timeout: Duration::secs(2),
            unhealthy_after: 3,
            healthy_after: 2,
        }
    }
}

/// TLS to the origins of a site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct OriginTlsConfig {
    /// PEM file of the CAs that sign the origins' certificates (a Secret's `ca.crt`).
    /// Default: none: the system's roots (webpki-roots).
    pub ca_file: Option<String>,
    /// The name sent in SNI and checked in the origin's certificate. Default: the origin
    /// URL's host.
    pub server_name: Option<String>,
}

/// A site's cache-policy overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct SitePolicyConfig {
    /// Freshness for cacheable responses that carry none.
    pub default_ttl: Option<Duration>,
    /// Responses with Set-Cookie.
    pub cookie_policy: Option<CookiePolicy>,
    /// Query parameters left out of the cache key and the origin request (e.g. `utm_source`;
    /// a trailing `*` matches a prefix: `utm_*`).
    pub drop_query: Vec<String>,
    /// Sort the query parameters, so `?b=1&a=2` and `?a=2&b=1` are one entry. Default: false.
    pub sort_query: bool,
}

/// The value problems of `sites`, and of `origin.url` against it (beside `sites`, it is the
/// origin of a default site that answers every Host no site names).
pub(super) fn validate(sites: &[SiteConfig], origin_url: &str, errors: &mut Vec<ConfigError>) {
    if sites.is_empty() {
        return;
    }
    let defaults = sites.iter().filter(|s| s.default).count();
    if !origin_url.is_empty() && defaults > 0 {
        errors.push(err(
            "origin.url",
            Some(format!("{origin_url:?}")),
            "beside sites it is the default site's origin, but a site is the default already",
        ));
    }
    if defaults > 1 {
        errors.push(err(
            "sites",
            None,
            format!("{defaults} sites are the default; at most one may be"),
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, s) in sites.iter().enumerate() {
        let at = |f: &str| format!("sites[{i}].{f}");
        super::compression::validate(&s.compression, &at("compression"), errors);
        if s.hosts.is_empty() {
            errors.push(err(&at("hosts"), None, "needs at least one hostname"));
        }
        for (j, h) in s.hosts.iter().enumerate() {
            if let Err(why) = check_host(h) {
                errors.push(err(
                    &format!("sites[{i}].hosts[{j}]"),
                    Some(format!("{h:?}")),
                    why,
                ));
            } else if seen.contains(&h.as_str()) {
                errors.push(err(
                    &format!("sites[{i}].hosts[{j}]"),
                    Some(format!("{h:?}")),
                    "is named by another site too",
                ));
            } else {
                seen.push(h);
            }
        }
        if s.origins.is_empty() {
            errors.push(err(&at("origins"), None, "needs at least one origin URL"));
        }
        let mut schemes = Vec::new();
        for (j, o) in s.origins.iter().enumerate() {
            match super::check_origin_url(o) {
                Ok(()) => schemes.push(o.split_once("://").map_or("", |(s, _)| s)),
                Err(why) => errors.push(err(
                    &format!("sites[{i}].origins[{j}]"),
                    Some(format!("{o:?}")),
                    why,
                )),
            }
        }
        schemes.dedup();
        if schemes.len() > 1 {
            errors.push(err(
                &at("origins"),
                None,
                "mixes http:// and https:// origins",
            ));
        }
        let hc = &s.health_check;
        if let Some(p) = &hc.path
            && !p.starts_with('/')
        {
            errors.push(err(
                &at("healthCheck.path"),
                Some(format!("{p:?}")),
                "must start with /",
            ));
        }
        for (f, d) in [
            ("healthCheck.interval", hc.interval),
            ("healthCheck.timeout", hc.timeout),
        ] {
            if d.get().is_zero() {
                errors.push(err(
                    &at(f),
                    Some(d.to_string()),
                    "must be greater than zero",
                ));
            }
        }
        for (f, n) in [
            ("healthCheck.unhealthyAfter", hc.unhealthy_after),
            ("healthCheck.healthyAfter", hc.healthy_after),
        ] {
            if n == 0 {
                errors.push(err(&at(f), Some("0".into()), "must be at least 1"));
            }
        }
        if s.retries > 8 {
            errors.push(err(
                &at("retries"),
                Some(s.retries.to_string()),
                "must be at most 8",
            ));
        }
        for (j, q) in s.cache.drop_query.iter().enumerate() {
            let name = q.strip_suffix('*').unwrap_or(q);
            if name.is_empty() || name.contains(['&', '=', '*', ' ']) {
                errors.push(err(
                    &format!("sites[{i}].cache.dropQuery[{j}]"),
                    Some(format!("{q:?}")),
                    "must be a query parameter name, with an optional trailing *",
                ));
            }
        }
    }
}

/// A site hostname: lowercase labels, or `*.` and lowercase labels; no port.
pub fn check_host(h: &str) -> Result<(), String> {
    let name = h.strip_prefix("*.").unwrap_or(h);
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(ok_label) {
        return Err("must be a lowercase hostname without a port, or *. and one".into());
    }
    Ok(())
}
