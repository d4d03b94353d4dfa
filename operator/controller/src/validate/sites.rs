//! `spec.sites`: checked and mapped onto the data plane's `sites`, field by field (the names
//! are the same). The data plane's own site rules (hostnames, duplicates, one default, one
//! scheme per pool, health-check values, dropQuery names) are run here on the mapped sites, so
//! both sides apply one set of rules; this module adds what only the spec has: the Host header
//! pair, the CA Secret (mounted whole at [`origin_ca_secret_dir`], its key the data plane's
//! `originTls.caFile`) and the CRD's bounds.

use edgecache_api::dataplane::{
    self, HealthCheckConfig, OriginTlsConfig, SiteConfig, SitePolicyConfig,
};
use edgecache_api::v1alpha1::{CaSecretSpec, EdgeCacheSpec, SiteSpec};

use super::{host_header, is_dns1123_subdomain};

/// Where each origin CA Secret is mounted inside the container, one directory per Secret
/// (`ORIGIN_CA_DIR/SECRETNAME/ca.crt`): a whole Secret volume, not a `subPath`, so a rotated
/// bundle reaches the pod.
pub const ORIGIN_CA_DIR: &str = "/etc/edgecache-origin-ca";
/// Most sites one EdgeCache may have (the CRD's bound, which keeps its CEL rules cheap).
pub const SITES_MAX: usize = 32;
/// Most hostnames, and most origins, one site may list.
pub const SITE_LIST_MAX: usize = 16;
/// Most query parameters one site may drop.
pub const DROP_QUERY_MAX: usize = 64;
/// Most failures or passes in a row a health check may count to.
const HEALTH_COUNT_MAX: u32 = 100;

/// The directory an origin CA Secret is mounted at in the container.
pub fn origin_ca_secret_dir(secret_name: &str) -> String {
    format!("{ORIGIN_CA_DIR}/{secret_name}")
}

/// The bundle's file in the container: the data plane's `originTls.caFile`.
pub fn origin_ca_file(ca: &CaSecretSpec) -> String {
    format!("{}/{}", origin_ca_secret_dir(&ca.name), ca.key)
}

/// The CA Secrets `spec.sites` names, each once, in the order they are first named.
pub fn origin_ca_secrets(spec: &EdgeCacheSpec) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for ca in spec.sites.iter().filter_map(site_ca) {
        if !names.contains(&ca.name.as_str()) {
            names.push(&ca.name);
        }
    }
    names
}

/// The CA Secret a site names, if any.
pub(crate) fn site_ca(site: &SiteSpec) -> Option<&CaSecretSpec> {
    site.origin_tls.as_ref()?.ca_secret.as_ref()
}

/// The data plane's sites for `spec`, reporting every problem through `bad` (field paths
/// below `spec.`).
pub(super) fn sites(spec: &EdgeCacheSpec, bad: &mut impl FnMut(&str, String)) -> Vec<SiteConfig> {
    if spec.sites.len() > SITES_MAX {
        bad(
            "sites",
            format!(
                "may list at most {SITES_MAX} sites (got {})",
                spec.sites.len()
            ),
        );
    }
    let sites: Vec<SiteConfig> = (spec.sites.iter().enumerate())
        .map(|(i, s)| site(&format!("sites[{i}]"), s, bad))
        .collect();
    let origin_url = spec.origin.url.as_deref().unwrap_or_default();
    for e in dataplane::validate_sites(&sites, origin_url) {
        let reason = match &e.value {
            Some(v) => format!("{} (got {v})", e.reason),
            None => e.reason.clone(),
        };
        bad(&e.path, reason);
    }
    sites
}

fn site(at: &str, s: &SiteSpec, bad: &mut impl FnMut(&str, String)) -> SiteConfig {
    for (field, n) in [("hosts", s.hosts.len()), ("origins", s.origins.len())] {
        if n > SITE_LIST_MAX {
            bad(
                &format!("{at}.{field}"),
                format!("may list at most {SITE_LIST_MAX} (got {n})"),
            );
        }
    }
    for (field, n) in [
        ("unhealthyAfter", s.health_check.unhealthy_after),
        ("healthyAfter", s.health_check.healthy_after),
    ] {
        if n > HEALTH_COUNT_MAX {
            bad(
                &format!("{at}.healthCheck.{field}"),
                format!("must be at most {HEALTH_COUNT_MAX} (got {n})"),
            );
        }
    }
    if s.cache.drop_query.len() > DROP_QUERY_MAX {
        bad(
            &format!("{at}.cache.dropQuery"),
            format!(
                "may list at most {DROP_QUERY_MAX} parameters (got {})",
                s.cache.drop_query.len()
            ),
        );
    }
    let host_header = host_header(at, s.host_header, s.host_header_value.as_deref(), bad);
    let tls = s.origin_tls.clone().unwrap_or_default();
    if let Some(ca) = &tls.ca_secret {
        if !is_dns1123_subdomain(&ca.name) {
            bad(
                &format!("{at}.originTls.caSecret.name"),
                format!(
                    "must be a Secret name: a DNS-1123 subdomain (got {:?})",
                    ca.name
                ),
            );
        }
        if !is_secret_key(&ca.key) {
            bad(
                &format!("{at}.originTls.caSecret.key"),
                format!(
                    "must be a Secret key: letters, digits, '-', '_' and '.', not '.' or \
                     starting with '..' (got {:?})",
                    ca.key
                ),
            );
        }
    }
    if let Some(name) = &tls.server_name
        && (name.starts_with("*.") || dataplane::check_host(name).is_err())
    {
        bad(
            &format!("{at}.originTls.serverName"),
            format!("must be a lowercase hostname (got {name:?})"),
        );
    }
    SiteConfig {
        hosts: s.hosts.clone(),
        default: s.default,
        origins: s.origins.clone(),
        balance: s.balance,
        health_check: HealthCheckConfig {
            path: s.health_check.path.clone(),
            interval: s.health_check.interval,
            timeout: s.health_check.timeout,
            unhealthy_after: s.health_check.unhealthy_after,
            healthy_after: s.health_check.healthy_after,
        },
        retries: s.retries,
        origin_tls: OriginTlsConfig {
            ca_file: tls.ca_secret.as_ref().map(origin_ca_file),
            server_name: tls.server_name,
        },
        origin_http2: s.origin_http2,
        host_header,
        compression: s.compression.clone(),
        cache: SitePolicyConfig {
            default_ttl: s.cache.default_ttl,
            cookie_policy: s.cache.cookie_policy,
            drop_query: s.cache.drop_query.clone(),
            sort_query: s.cache.sort_query,
        },
    }
}

/// A Secret (or ConfigMap) key, as the API server checks it: at most 253 of `[-._a-zA-Z0-9]`,
/// not `.` or `..`, not starting with `..`.
fn is_secret_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && k != "."
        && !k.starts_with("..")
}
