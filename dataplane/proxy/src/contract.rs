//! The operator contract (`edgecache_api::dataplane`, the config file the operator writes) mapped
//! onto the library crates' own config types: the policy, the store, the access log and TLS know
//! no deployment schema.

use std::path::PathBuf;
use std::time::Duration;

use edgecache_api::DiskSize;
use edgecache_api::dataplane::{
    self, AccessLogConfig, AccessLogFormat, AdmissionPolicy, CachePolicyConfig, CookiePolicy,
    DataplaneConfig, HostHeader, IoEngineKind, OriginConfig, ShardingConfig, ShardingMode,
    SiteConfig, StorageConfig, TlsConfig, TlsVersion,
};
use edgecache_edge::tls;
use edgecache_fleet::sharding;
use edgecache_observe::request_log;
use edgecache_policy::{PolicyConfig, encoding};
use edgecache_store::{Admission, EngineChoice, StoreConfig};
use edgecache_upstream::origin;
use edgecache_upstream::sites::{self, QueryRules};

/// What the memory plan reads of `memory:` (edgecache_host::MemorySettings).
pub fn memory(c: &dataplane::MemoryConfig) -> edgecache_host::MemorySettings {
    edgecache_host::MemorySettings {
        limit: c.limit.map(|l| l.bytes()),
        ram_tier: c.ram_tier.map(|r| r.bytes()),
        headroom_percent: c.headroom_percent,
    }
}

/// The HTTP/2 limits `http2:` sets, 0 where they are to be derived (edgecache_host::Http2Settings).
pub fn http2(c: &dataplane::Http2Config) -> edgecache_host::Http2Settings {
    edgecache_host::Http2Settings {
        max_concurrent_streams: c.max_concurrent_streams,
        max_header_list_size: c.max_header_list_size.bytes(),
        stream_window: c.stream_window.bytes(),
        connection_window: c.connection_window.bytes(),
    }
}

/// What the request pipeline reads of the config (edgecache_serve::shared::Settings).
pub fn serve_settings(cfg: &DataplaneConfig) -> edgecache_serve::shared::Settings {
    edgecache_serve::shared::Settings {
        max_object_size: cfg.storage.max_object_size.bytes(),
        slice_size: cfg.storage.slice_size.bytes(),
        origin_idle_timeout: cfg.origin.idle_timeout.get(),
        origin_first_byte_timeout: cfg.origin.first_byte_timeout.get(),
        max_disk_streams_per_ip: cfg.clients.max_disk_streams_per_ip,
    }
}

/// A site's compression: its `compression` over the top level's (`over`), unset fields at
/// `policy::encoding`'s defaults; `None` when it is turned off.
pub fn compression(
    site: &dataplane::CompressionConfig,
    top: &dataplane::CompressionConfig,
) -> Option<encoding::CompressionConfig> {
    let c = site.over(top);
    if c.enabled == Some(false) {
        return None;
    }
    let defaults = encoding::CompressionConfig::default();
    Some(encoding::CompressionConfig {
        types: c.types.unwrap_or(defaults.types),
        min_size: c.min_size.map_or(defaults.min_size, |s| s.bytes()),
        levels: encoding::Levels {
            gzip: c.levels.gzip.unwrap_or(defaults.levels.gzip),
            br: c.levels.br.unwrap_or(defaults.levels.br),
            zstd: c.levels.zstd.unwrap_or(defaults.levels.zstd),
        },
    })
}

/// The policy settings of `cache:`.
pub fn policy_config(c: &CachePolicyConfig) -> PolicyConfig {
    PolicyConfig {
        default_ttl: c.default_ttl.map(|d| d.get()),
        ignore_client_no_cache: c.ignore_client_no_cache,
        cookie_policy: cookie_policy(c.cookie_policy),
        heuristic_freshness: c.heuristic_freshness,
        heuristic_percent: 10,
        heuristic_max: Duration::from_secs(24 * 60 * 60),
        name: c.name.clone(),
        store_close_delimited: c.store_close_delimited,
        hit_for_pass: c.hit_for_pass.get(),
    }
}

/// A cookie policy of `cache.cookiePolicy` or a site's.
pub fn cookie_policy(c: CookiePolicy) -> edgecache_policy::CookiePolicy {
    match c {
        CookiePolicy::Store => edgecache_policy::CookiePolicy::Store,
        CookiePolicy::NoStoreUnlessPublic => edgecache_policy::CookiePolicy::NoStoreUnlessPublic,
        CookiePolicy::NeverStore => edgecache_policy::CookiePolicy::NeverStore,
    }
}

/// The sites of `sites:`, and the default site `origin.url` alone makes.
pub fn sites(cfg: &DataplaneConfig) -> sites::Settings {
    let shorthand = (!cfg.origin.url.is_empty()).then(|| SiteConfig {
        hosts: Vec::new(),
        default: true,
        origins: vec![cfg.origin.url.clone()],
        host_header: cfg.origin.host_header.clone(),
        ..SiteConfig::default()
    });
    sites::Settings {
        sites: cfg.sites.iter().map(|s| site(cfg, s)).collect(),
        shorthand: shorthand.map(|s| site(cfg, &s)),
    }
}

/// One site: its cache policy is `cache:`'s with the site's overrides, its compression
/// `compression:`'s with the site's.
fn site(cfg: &DataplaneConfig, s: &SiteConfig) -> sites::SiteSettings {
    let mut policy = policy_config(&cfg.cache);
    if let Some(ttl) = s.cache.default_ttl {
        policy.default_ttl = Some(ttl.get());
    }
    if let Some(c) = s.cache.cookie_policy {
        policy.cookie_policy = cookie_policy(c);
    }
    let hc = &s.health_check;
    sites::SiteSettings {
        hosts: s.hosts.clone(),
        default: s.default,
        origins: s.origins.clone(),
        balance: match s.balance {
            dataplane::Balance::RoundRobin => sites::Balance::RoundRobin,
            dataplane::Balance::LeastConnections => sites::Balance::LeastConnections,
        },
        health_check: sites::HealthCheck {
            path: hc.path.clone(),
            interval: hc.interval.get(),
            timeout: hc.timeout.get(),
            unhealthy_after: hc.unhealthy_after,
            healthy_after: hc.healthy_after,
        },
        retries: s.retries,
        origin_tls: sites::OriginTls {
            ca_file: s.origin_tls.ca_file.clone(),
            server_name: s.origin_tls.server_name.clone(),
        },
        origin_http2: s.origin_http2,
        host_header: host_header(&s.host_header),
        policy,
        compression: compression(&s.compression, &cfg.compression),
        query: QueryRules {
            drop: s.cache.drop_query.clone(),
            sort: s.cache.sort_query,
        },
    }
}

/// The Host header of `origin.hostHeader` or a site's.
pub fn host_header(h: &HostHeader) -> sites::HostHeader {
    match h {
        HostHeader::Preserve => sites::HostHeader::Preserve,
        HostHeader::Origin => sites::HostHeader::Origin,
        HostHeader::Rewrite(v) => sites::HostHeader::Rewrite(v.clone()),
    }
}

/// The origin client's settings of `origin:` (its URL and Host header are the default site's).
pub fn origin(c: &OriginConfig) -> origin::Settings {
    origin::Settings {
        url: c.url.clone(),
        host_header: host_header(&c.host_header),
        connect_timeout: c.connect_timeout.get(),
        first_byte_timeout: c.first_byte_timeout.get(),
        max_idle_connections: c.max_idle_connections,
    }
}

/// Sharding's settings of `sharding:`; `None` when it is off (or, which validation refuses, has
/// no name or file).
pub fn sharding(c: &ShardingConfig) -> Option<sharding::Settings> {
    if c.mode != ShardingMode::Consistent {
        return None;
    }
    Some(sharding::Settings {
        node: c.node_name.clone()?,
        peers_file: PathBuf::from(c.peers_file.as_ref()?),
        popularity_threshold: c.popularity_threshold,
        popularity_window: c.popularity_window.get(),
        peer_connect_timeout: c.peer_connect_timeout.get(),
        peer_timeout: c.peer_timeout.get(),
        peer_key_file: c.peer_key_file.as_ref().map(PathBuf::from),
    })
}

/// The I/O engine of `storage.ioEngine`.
pub fn engine_choice(k: IoEngineKind) -> EngineChoice {
    match k {
        IoEngineKind::Auto => EngineChoice::Auto,
        IoEngineKind::Uring => EngineChoice::Uring,
        IoEngineKind::Threads => EngineChoice::Threads,
    }
}

/// The store settings of `storage:`; the RAM tier's size and the index's bound come from the
/// memory plan.
pub fn store_config(s: &StorageConfig, ram_tier_bytes: u64, index_bytes: u64) -> StoreConfig {
    StoreConfig {
        dir: PathBuf::from(&s.dir),
        size: s.size.size().map_or(0, |s| s.bytes()),
        size_auto: s.size == DiskSize::Auto,
        direct_io_threshold: s.direct_io_threshold.bytes(),
        max_object_size: s.max_object_size.bytes(),
        ram_tier_bytes,
        engine: engine_choice(s.io_engine),
        reads_in_flight: s.reads_in_flight,
        verify_every_read: s.verify_every_read,
        max_variants_per_key: s.max_variants_per_key as usize,
        index_bytes,
        admission: admission(s.admission),
        reinsertion: s.reinsertion,
    }
}

/// The admission policy of `storage.admission`.
pub fn admission(a: AdmissionPolicy) -> Admission {
    match a {
        AdmissionPolicy::All => Admission::All,
        AdmissionPolicy::SecondHit => Admission::SecondHit,
    }
}

/// The access log of `accessLog`.
pub fn access_log(c: &AccessLogConfig) -> request_log::Settings {
    request_log::Settings {
        format: match c.format {
            AccessLogFormat::Json => request_log::Format::Json,
            AccessLogFormat::Combined => request_log::Format::Combined,
            AccessLogFormat::Off => request_log::Format::Off,
        },
        sample: c.sample,
    }
}

/// The tracer of `tracing`: spans carry the resource `service.name` `edgecache-dataplane`,
/// `service.instance.id` (the node's name, `sharding.nodeName`, when it has one) and
/// `edgecache.cache.name` (`cache.name`).
pub fn tracing(cfg: &DataplaneConfig) -> edgecache_trace::Settings {
    let mut resource = vec![
        (
            "service.name".to_string(),
            "edgecache-dataplane".to_string(),
        ),
        ("edgecache.cache.name".to_string(), cfg.cache.name.clone()),
    ];
    if let Some(node) = &cfg.sharding.node_name {
        resource.push(("service.instance.id".to_string(), node.clone()));
    }
    edgecache_trace::Settings {
        endpoint: cfg.tracing.endpoint.clone(),
        sample: cfg.tracing.sample,
        resource,
        ..edgecache_trace::Settings::default()
    }
}

/// TLS termination of `tls`.
pub fn tls(c: &TlsConfig) -> tls::Settings {
    tls::Settings {
        certificates: c
            .certificates
            .iter()
            .map(|p| tls::PemPair {
                cert: PathBuf::from(&p.cert),
                key: PathBuf::from(&p.key),
            })
            .collect(),
        handshake_timeout: c.handshake_timeout.get(),
        max_handshakes_per_worker: c.max_handshakes_per_worker as usize,
        min_version: match c.min_version {
            TlsVersion::V1_2 => tls::MinVersion::V1_2,
            TlsVersion::V1_3 => tls::MinVersion::V1_3,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's defaults are the libraries' defaults, so a config file that says nothing
    /// and a library user who says nothing get the same cache.
    #[test]
    fn contract_defaults_are_the_library_defaults() {
        assert_eq!(
            policy_config(&CachePolicyConfig::default()),
            PolicyConfig::default()
        );
        assert_eq!(
            store_config(&StorageConfig::default(), 0, 0),
            StoreConfig::default()
        );
        assert_eq!(
            origin(&OriginConfig::default()),
            origin::Settings::default()
        );
    }

    #[test]
    fn every_engine_maps_to_its_namesake() {
        assert_eq!(engine_choice(IoEngineKind::Uring), EngineChoice::Uring);
        assert_eq!(engine_choice(IoEngineKind::Threads), EngineChoice::Threads);
        assert_eq!(engine_choice(IoEngineKind::Auto), EngineChoice::Auto);
    }

    #[test]
    fn every_access_log_format_maps_to_its_namesake() {
        for format in [
            AccessLogFormat::Json,
            AccessLogFormat::Combined,
            AccessLogFormat::Off,
        ] {
            let c = AccessLogConfig {
                format,
                ..AccessLogConfig::default()
            };
            assert_eq!(access_log(&c).format.as_str(), format.as_str());
        }
    }

    #[test]
    fn every_admission_policy_maps_to_its_namesake() {
        for a in [AdmissionPolicy::All, AdmissionPolicy::SecondHit] {
            assert_eq!(admission(a).as_str(), a.as_str());
        }
    }
}
