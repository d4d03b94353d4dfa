//! Many sites on one cache: each request's Host picks a site (edgecache_edge::hosts); the site
//! gives its origin pool (src/sites/pool.rs), its cache-policy overrides and its query rules
//! (src/sites/query.rs). A Host no site names gets 421 Misdirected Request, unless a site is
//! the default. `origin.url` alone is one site for every Host; beside `sites`, it is the
//! default site.
//!
//! The sites and their pools' health are shared by every worker; each worker has its own
//! pooled client per site (src/origin.rs). Active health checks run on the admin runtime
//! ([`run_health_checks`]).

mod pool;
mod query;

use std::sync::Arc;
use std::time::Duration;

use edgecache_edge::hosts::HostTable;
use edgecache_policy::{Authority, AuthorityError, PolicyConfig};
use http::HeaderValue;
use tracing::{info, warn};

pub use pool::{Balance, HealthRules, Pool};
pub use query::QueryRules;

/// The sites' settings (the data plane maps its config's `sites:` and `origin:` onto them).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub sites: Vec<SiteSettings>,
    /// The site of `origin.url` alone: every Host's without `sites`, the default beside them.
    pub shorthand: Option<SiteSettings>,
}

/// One site's settings.
#[derive(Debug, Clone)]
pub struct SiteSettings {
    /// Its hostnames; the first names the site.
    pub hosts: Vec<String>,
    /// It answers every Host no site names.
    pub default: bool,
    /// Its origins' URLs.
    pub origins: Vec<String>,
    pub balance: Balance,
    pub health_check: HealthCheck,
    /// Further origins an idempotent request may try.
    pub retries: u32,
    pub origin_tls: OriginTls,
    /// HTTP/2 to the origins.
    pub origin_http2: bool,
    pub host_header: HostHeader,
    /// Its cache policy: the cache's, with the site's own overrides.
    pub policy: PolicyConfig,
    /// The cache's own compression of its responses; `None`: off.
    pub compression: Option<edgecache_policy::encoding::CompressionConfig>,
    pub query: QueryRules,
}

/// A site's health checks: active ones when `path` is set, every `interval` within `timeout`.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    pub path: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub unhealthy_after: u32,
    pub healthy_after: u32,
}

/// How a site's origins are reached over TLS.
#[derive(Debug, Clone, Default)]
pub struct OriginTls {
    /// A PEM file of the CAs trusted for the origins' certificates (read when the site is made).
    pub ca_file: Option<String>,
    /// The name sent in SNI and checked in the certificate, instead of the URL's host.
    pub server_name: Option<String>,
}

/// The Host header sent to the origin.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HostHeader {
    /// Keep the client's Host header.
    #[default]
    Preserve,
    /// Use the origin URL's authority.
    Origin,
    /// Use this exact value.
    Rewrite(String),
}

/// One site.
#[derive(Debug)]
pub struct Site {
    /// For logs and metrics: its first hostname, or `default`.
    pub name: String,
    /// The same, as the request histograms' `site` label (one copy for the process's life:
    /// the sites are made once, at the start).
    pub label: &'static str,
    /// The origins' scheme (`http` or `https`), and how they are reached.
    pub scheme: String,
    pub transport: crate::transport::Transport,
    pub pool: Arc<Pool>,
    pub host_header: HostHeader,
    pub policy: PolicyConfig,
    /// The cache's own compression of this site's responses; `None`: off.
    pub compression: Option<edgecache_policy::encoding::CompressionConfig>,
    pub query: QueryRules,
    /// Further origins an idempotent request may try.
    pub retries: u32,
    /// Active health checks: the path, every interval, within the timeout.
    pub health: Option<(String, Duration, Duration)>,
}

/// The site a request was routed to, in its extensions (its `index` is its place in
/// [`Sites::list`]); the request log reads it.
pub use edgecache_observe::request_log::SiteId;

/// Every site, and which Host goes where.
#[derive(Debug)]
pub struct Sites {
    pub list: Vec<Arc<Site>>,
    table: HostTable,
}

impl Sites {
    /// The sites of a validated config.
    pub fn from_config(cfg: &Settings) -> Result<Self, String> {
        let mut list = Vec::new();
        let mut table = HostTable::default();
        for (i, s) in cfg.sites.iter().enumerate() {
            list.push(Arc::new(site(s, s.hosts[0].clone())?));
            table.add(i, &s.hosts, s.default);
        }
        if let Some(shorthand) = &cfg.shorthand {
            let i = list.len();
            list.push(Arc::new(site(shorthand, "default".into())?));
            if cfg.sites.is_empty() {
                table = HostTable::catch_all(i);
            } else {
                table.add(i, &[], true);
            }
        }
        if list.is_empty() {
            return Err("no origin: set origin.url or sites".into());
        }
        for s in &list {
            let origins: Vec<&str> = s
                .pool
                .members()
                .iter()
                .map(|m| m.authority.as_str())
                .collect();
            info!(site = %s.name, ?origins, "site");
        }
        Ok(Self { list, table })
    }

    /// The site of a normalised host ([`Authority::host`]), if any answers it.
    pub fn route(&self, host: &str) -> Option<usize> {
        self.table.route(host)
    }

    /// The one place a request's authority is read (src/authority.rs has the parser): the head
    /// is made canonical (its target in origin form, its one Host field the normalised
    /// authority, the [`Authority`] and the [`SiteId`] in its extensions) and its site's query
    /// rules are applied to its target. Everything downstream (the cache key, the origin's
    /// Host, purges, the access log, metric labels) reads what this leaves, never the raw
    /// fields. `scheme` is the listener's (`http` or `https`): its default port is no port.
    pub fn route_head(
        &self,
        parts: &mut http::request::Parts,
        scheme: &str,
    ) -> Result<usize, Unrouted> {
        let authority = Authority::of_request(parts, scheme).map_err(Unrouted::Authority)?;
        // Most clients send the normal form already: then the field stays as it is.
        let normal = parts
            .headers
            .get(http::header::HOST)
            .is_some_and(|h| h.as_bytes() == authority.as_str().as_bytes());
        if !normal && let Ok(host) = HeaderValue::from_str(authority.as_str()) {
            parts.headers.insert(http::header::HOST, host);
        }
        let site = self.route(authority.host());
        parts.extensions.insert(authority);
        let site = site.ok_or(Unrouted::NoSite)?;
        parts.extensions.insert(SiteId {
            index: site,
            label: self.list[site].label,
        });
        let rules = &self.list[site].query;
        let pq = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let with_query = !rules.is_empty() && pq.contains('?');
        // An absolute-form target has given its authority: origin form from here on. (`*` and
        // a CONNECT's authority-form are left as they came: they are never keyed.)
        if parts.uri.scheme().is_some() || with_query {
            let target = if with_query {
                rules.apply_to_target(pq)
            } else {
                pq.to_string()
            };
            if let Ok(u) = target.parse() {
                parts.uri = u;
            }
        }
        Ok(site)
    }

    /// The cache key of an absolute URL (`http://host/path?query`, as purge rules name
    /// objects): its authority normalised and its site's query rules applied, as a request
    /// for it is keyed. A URL no site answers keys as such (nothing is stored under it); one
    /// that is no absolute URL with a valid authority is an error.
    pub fn url_key(&self, url: &str) -> Result<String, String> {
        let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| format!("{url:?} is not an absolute URL"))?
            .to_ascii_lowercase();
        let (mut parts, ()) = http::Request::get(uri)
            .body(())
            .map_err(|e| format!("{url:?}: {e}"))?
            .into_parts();
        match self.route_head(&mut parts, &scheme) {
            Ok(_) | Err(Unrouted::NoSite) => {}
            Err(Unrouted::Authority(e)) => return Err(format!("{url:?}: {e}")),
        }
        crate::key::primary(&parts)
            .and_then(|k| String::from_utf8(k).ok())
            .ok_or_else(|| format!("{url:?} has no cache key"))
    }
}

/// Why a request head has no site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrouted {
    /// Its authority is missing or malformed: a 400.
    Authority(AuthorityError),
    /// No site answers its host: a 421.
    NoSite,
}

fn site(s: &SiteSettings, name: String) -> Result<Site, String> {
    let mut scheme = "http".to_string();
    let mut authorities = Vec::new();
    for url in &s.origins {
        let uri: http::Uri = url.parse().map_err(|_| format!("{url}: not a URL"))?;
        scheme = uri.scheme_str().unwrap_or("http").to_string();
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{url}: no host"))?
            .as_str()
            .to_string();
        authorities.push(authority);
    }
    let hc = &s.health_check;
    let rules = HealthRules {
        unhealthy_after: hc.unhealthy_after,
        healthy_after: hc.healthy_after,
        retry_after: hc.interval,
        active: hc.path.is_some(),
    };
    let ca_pem = match &s.origin_tls.ca_file {
        Some(f) => Some(std::fs::read(f).map_err(|e| format!("originTls.caFile {f}: {e}"))?),
        None => None,
    };
    let transport = crate::transport::Transport {
        https: scheme == "https",
        ca_pem,
        server_name: s.origin_tls.server_name.clone(),
        http2: s.origin_http2,
    };
    Ok(Site {
        label: Box::leak(name.clone().into_boxed_str()),
        name,
        scheme,
        transport,
        pool: Arc::new(Pool::new(authorities, s.balance, rules)),
        host_header: s.host_header.clone(),
        policy: s.policy.clone(),
        compression: s.compression.clone(),
        query: s.query.clone(),
        retries: s.retries,
        health: hc.path.clone().map(|p| (p, hc.interval, hc.timeout)),
    })
}

/// Check every member of every site that has an active health check, each at its interval,
/// until `shutdown`; results go to the pools every worker reads.
pub async fn run_health_checks(
    sites: Arc<Sites>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for site in sites.list.iter().filter(|s| s.health.is_some()) {
        // The site's own transport (TLS, its CA and server name, HTTP/2), as its requests use:
        // a check over plain HTTP to an HTTPS origin would fail for a live origin.
        let Some((_, _, within)) = site.health else {
            continue;
        };
        let connector = match site.transport.connector(within) {
            Ok(c) => c,
            Err(e) => {
                warn!(site = %site.name, "no health checks: {e}");
                continue;
            }
        };
        let mut builder =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
        builder.pool_max_idle_per_host(1);
        if site.transport.http2 {
            builder.http2_only(true);
        }
        let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
            builder.build(connector);
        for i in 0..site.pool.members().len() {
            let (site, client) = (site.clone(), client.clone());
            tasks.spawn(async move {
                let Some((path, every, within)) = site.health.clone() else {
                    return;
                };
                let authority = site.pool.members()[i].authority.clone();
                let url = format!("{}://{authority}{path}", site.scheme);
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let Ok(req) = http::Request::get(&url)
                        .header(http::header::USER_AGENT, "edgecache-health-check")
                        .body(http_body_util::Empty::new())
                    else {
                        return;
                    };
                    let ok = match tokio::time::timeout(within, client.request(req)).await {
                        Ok(Ok(r)) => r.status().is_success() || r.status().is_redirection(),
                        _ => false,
                    };
                    let was = site.pool.is_healthy(i);
                    site.pool.report(i, ok, true);
                    let now = site.pool.is_healthy(i);
                    if was != now {
                        if now {
                            info!(site = %site.name, origin = %authority, "origin back in the pool");
                        } else {
                            warn!(site = %site.name, origin = %authority, "origin out of the pool: health check failed");
                        }
                    }
                }
            });
        }
    }
    let _ = shutdown.changed().await;
    tasks.abort_all();
}

/// `origin_up{site,origin}` (1 while the origin is in its site's pool) and
/// `origin_retries_total{site}`, read from the pools at scrape time.
#[derive(Debug)]
pub struct SitesCollector(pub Arc<Sites>);

impl prometheus_client::collector::Collector for SitesCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let mut up = encoder.encode_descriptor(
            "origin_up",
            "1 while the origin is in its site's pool (health checks, failed requests)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for site in &self.0.list {
            for (i, m) in site.pool.members().iter().enumerate() {
                let g = ConstGauge::new(i64::from(site.pool.is_healthy(i)));
                g.encode(up.encode_family(&[
                    ("site", site.name.as_str()),
                    ("origin", m.authority.as_str()),
                ])?)?;
            }
        }
        let mut retries = encoder.encode_descriptor(
            "origin_retries",
            "Origin requests sent again to another origin of the pool",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for site in &self.0.list {
            let c = ConstCounter::new(site.pool.retries());
            c.encode(retries.encode_family(&[("site", site.name.as_str())])?)?;
        }
        Ok(())
    }
}
