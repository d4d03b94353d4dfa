//! Step 1 of the pipeline, pure: check an `EdgeCache` and derive the data-plane config from it.
//!
//! The CRD's schema and CEL rules already refuse most bad objects at `kubectl apply`; this step
//! re-checks them (an older CRD, or `render` on a file that never met an API server) and adds the
//! checks CEL cannot express well (byte-size arithmetic, the origin URL syntax, the data-plane
//! config's own rules). Every problem is reported, each naming its field.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use edgecache_api::dataplane::{
    self, AccessLogConfig, CachePolicyConfig, CertificateFiles, ClientLimitsConfig,
    DataplaneConfig, HostHeader, Http2Config, MemoryConfig, OriginConfig, ShardingConfig,
    ShardingMode, StorageConfig, TlsConfig, WorkersConfig,
};
use edgecache_api::v1alpha1::{
    EdgeCache, EdgeCacheSpec, HostHeaderMode, SecurityMode, TLS_CERTIFICATES_MAX, TracingSpec,
};
use edgecache_api::{ByteSize, SteeringMode};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub mod host_path;
mod sites;

pub use host_path::AllowedHostPaths;
pub(crate) use sites::site_ca;
pub use sites::{ORIGIN_CA_DIR, origin_ca_file, origin_ca_secret_dir, origin_ca_secrets};

/// Where the cache directory is mounted inside the container (the data plane's `storage.dir`).
pub const CONTAINER_CACHE_DIR: &str = "/var/cache/edgecache";
/// Where the peers ConfigMap is mounted inside the container (a directory of its own, not a
/// `subPath`: the kubelet updates only whole ConfigMap volumes).
pub const PEERS_DIR: &str = "/etc/edgecache-peers";
/// Key of the peer list in the peers ConfigMap (and its file name in [`PEERS_DIR`]).
pub const PEERS_KEY: &str = "peers";
/// Where each TLS Secret is mounted inside the container, one directory per Secret
/// (`TLS_DIR/SECRETNAME/tls.crt`): a whole Secret volume, not a `subPath`, so the kubelet's
/// atomic update of a renewed certificate reaches the pod. Not below [`crate::build::CONFIG_DIR`]:
/// a mount point inside the read-only ConfigMap volume cannot be created.
pub const TLS_DIR: &str = "/etc/edgecache-tls";
/// The certificate chain's key in a `kubernetes.io/tls` Secret (and its file name).
pub const TLS_CERT_KEY: &str = "tls.crt";
/// The private key's key in a `kubernetes.io/tls` Secret (and its file name).
pub const TLS_KEY_KEY: &str = "tls.key";
/// Stands in for the node name when the operator checks the config against the data plane's
/// rules: the real one comes from each pod's `EDGECACHE_NODE_NAME`.
const NODE_NAME_STAND_IN: &str = "node";
/// Smallest `storage.sliceSize` other than 0 (off): smaller slices cost a record each for
/// little more than their headers.
const SLICE_SIZE_MIN: ByteSize = ByteSize::kib(64);
/// Largest `storage.sliceSize`: a slice is one store record, and half a default (64 MiB)
/// segment leaves room for its header.
const SLICE_SIZE_MAX: ByteSize = ByteSize::mib(32);

/// One problem in a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path from the object root, e.g. `spec.storage.size`.
    pub field: String,
    /// Why it is wrong (with the offending value when useful).
    pub reason: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Why an `EdgeCache` cannot be reconciled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The object lacks a name or namespace (never true for objects from the API server).
    #[error("the EdgeCache has no {0}")]
    MissingMetadata(&'static str),
    /// One or more spec fields are invalid.
    #[error("invalid spec: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    InvalidSpec(Vec<FieldError>),
}

/// What the operator was installed to allow (the same for every EdgeCache).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Node directories a `storage.hostPath` may be equal to or below.
    pub allowed_host_paths: AllowedHostPaths,
    /// The data-plane image of an EdgeCache that names none; `None`: [`default_image`].
    pub dataplane_image: Option<String>,
    /// Secrets (in each EdgeCache's namespace) the data-plane pods pull their image with.
    pub image_pull_secrets: Vec<String>,
    /// The operator's own pods, which call the data-plane pods' admin port; when known, each
    /// EdgeCache gets a NetworkPolicy that lets them (`build::network_policy`).
    pub admin_clients: Option<AdminClients>,
}

/// Where the operator's pods run and the labels that select them, and address ranges that may
/// reach the admin port too (the nodes' subnet, for the API server's pod proxy and a node's
/// own processes; a Prometheus outside the cluster).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AdminClients {
    pub namespace: String,
    pub pod_labels: BTreeMap<String, String>,
    /// CIDRs, each checked by [`check_cidr`].
    pub cidrs: Vec<String>,
}

/// Whether `cidr` is `ADDRESS/PREFIX` with a prefix the address family allows.
pub fn check_cidr(cidr: &str) -> Result<(), String> {
    let bad = || format!("{cidr:?} is not a CIDR like 10.0.0.0/24 or fd00::/64");
    let (ip, prefix) = cidr.split_once('/').ok_or_else(bad)?;
    let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err(bad());
    }
    Ok(())
}

/// An `EdgeCache` that passed validation, with the data-plane config derived from it.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedEdgeCache {
    pub name: String,
    pub namespace: String,
    /// Unset when rendering a manifest offline; then children carry no owner reference.
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub spec: EdgeCacheSpec,
    /// `spec.storage.hostPath`, normalized (see [`host_path::normalize`]).
    pub host_path: String,
    /// The config the data plane reads, as the ConfigMap will carry it.
    pub dataplane: DataplaneConfig,
    /// `spec.image`, else the install's [`Policy::dataplane_image`], else [`default_image`].
    pub image: String,
    /// The install's [`Policy::image_pull_secrets`].
    pub image_pull_secrets: Vec<String>,
    /// The install's [`Policy::admin_clients`].
    pub admin_clients: Option<AdminClients>,
}

impl ValidatedEdgeCache {
    /// The same EdgeCache with its serving listeners (`listen`, `tls.listen`) on the wildcard
    /// address of the cluster's family as its Service shows it (`spec.ipFamilies`, which the
    /// API server sets): `[::]` when the Service's first family is IPv6 (an IPv6-only or
    /// IPv6-first cluster; the socket is dual-stack and the data plane counts IPv4 clients by
    /// their IPv4 address), else `0.0.0.0` as before, so an IPv4 node without IPv6 keeps a
    /// listener it can bind (issue 35 defect 6). No Service yet: `0.0.0.0`, and the next
    /// reconcile (the Service is watched) moves it.
    pub fn serving_on(mut self, service_ip_families: &[String]) -> Self {
        let ip = listen_ip(service_ip_families);
        self.dataplane.listen.set_ip(ip);
        if let Some(l) = self.dataplane.tls.listen.as_mut() {
            l.set_ip(ip);
        }
        self
    }
}

/// The wildcard address to listen on for a Service of `ip_families`.
pub fn listen_ip(ip_families: &[String]) -> std::net::IpAddr {
    match ip_families.first().map(String::as_str) {
        Some("IPv6") => std::net::Ipv6Addr::UNSPECIFIED.into(),
        _ => std::net::Ipv4Addr::UNSPECIFIED.into(),
    }
}

/// The data-plane image of this operator's release: `EDGECACHE_DATAPLANE_IMAGE` at build time
/// (an image built for a private registry), else the public repository tagged with the
/// operator's version. What an EdgeCache that names no image runs.
pub fn default_image() -> String {
    match option_env!("EDGECACHE_DATAPLANE_IMAGE") {
        Some(image) if !image.is_empty() => image.to_string(),
        _ => format!(
            "{}:{}",
            edgecache_api::v1alpha1::DATAPLANE_IMAGE_REPOSITORY,
            env!("CARGO_PKG_VERSION")
        ),
    }
}

/// Check `ec` against its own rules and the operator's `policy`, and derive its data-plane config.
pub fn validate(ec: &EdgeCache, policy: &Policy) -> Result<ValidatedEdgeCache, Error> {
    let name = ec
        .metadata
        .name
        .clone()
        .ok_or(Error::MissingMetadata("name"))?;
    let namespace = ec
        .metadata
        .namespace
        .clone()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let spec = &ec.spec;
    let mut errors = Vec::new();
    // Before any child is made: the children take this name (the CRD's CEL rules say the same).
    if let Some(why) = edgecache_api::v1alpha1::name_problem(&name) {
        errors.push(FieldError {
            field: "metadata.name".into(),
            reason: format!("{name:?} {why}"),
        });
    }
    let mut bad = |field: &str, reason: String| {
        errors.push(FieldError {
            field: format!("spec.{field}"),
            reason,
        })
    };

    match &spec.origin.url {
        Some(url) => {
            if let Err(why) = dataplane::check_origin_url(url) {
                bad("origin.url", format!("{why} (got {url:?})"));
            }
        }
        None if spec.sites.is_empty() => bad(
            "origin.url",
            "is required unless spec.sites is given (e.g. http://origin.example:8080)".into(),
        ),
        None => {}
    }
    let host_header = host_header(
        "origin",
        spec.origin.host_header,
        spec.origin.host_header_value.as_deref(),
        &mut bad,
    );
    let sites = sites::sites(spec, &mut bad);

    let host_path = match host_path::normalize(&spec.storage.host_path) {
        Ok(p) if policy.allowed_host_paths.allows(&p) => p,
        Ok(p) => {
            bad(
                "storage.hostPath",
                format!(
                    "{p} is outside the host paths this operator allows, {} (set at install: \
                     chart value dataplane.allowedHostPaths)",
                    policy.allowed_host_paths
                ),
            );
            p
        }
        Err(why) => {
            bad("storage.hostPath", why);
            spec.storage.host_path.clone()
        }
    };
    if spec
        .storage
        .size
        .size()
        .is_some_and(|s| s < ByteSize::mib(64))
    {
        bad(
            "storage.size",
            format!("must be at least 64MiB (got {})", spec.storage.size),
        );
    }
    let t = spec.storage.direct_io_threshold.bytes();
    if t == 0 || !t.is_multiple_of(4096) {
        bad(
            "storage.directIoThreshold",
            format!(
                "must be a positive multiple of 4096 (got {})",
                spec.storage.direct_io_threshold
            ),
        );
    }
    if !(1..=dataplane::READS_IN_FLIGHT_MAX).contains(&spec.storage.reads_in_flight) {
        bad(
            "storage.readsInFlight",
            format!(
                "{} (got {})",
                dataplane::READS_IN_FLIGHT_RULE,
                spec.storage.reads_in_flight
            ),
        );
    }
    let max_object = spec.max_object_size();
    if max_object.bytes() == 0 || !spec.storage.size.may_hold(max_object) {
        bad(
            "cache.maxObjectSize",
            format!(
                "must be positive and at most storage.size {} (got {max_object}; unset, it is \
                 {} or an eighth of storage.size when that is less)",
                spec.storage.size,
                edgecache_api::v1alpha1::MAX_OBJECT_SIZE_DEFAULT
            ),
        );
    }
    let slice = spec.storage.slice_size;
    if slice.bytes() != 0
        && (slice < SLICE_SIZE_MIN || slice > SLICE_SIZE_MAX || slice > max_object)
    {
        bad(
            "storage.sliceSize",
            format!(
                "must be 0 (off) or {SLICE_SIZE_MIN} to {SLICE_SIZE_MAX}, and at most \
                 cache.maxObjectSize {max_object} (got {slice})"
            ),
        );
    }
    if spec.resources.memory < ByteSize::mib(64) {
        bad(
            "resources.memory",
            format!("must be at least 64MiB (got {})", spec.resources.memory),
        );
    }
    if let Some(ram) = spec.resources.ram_tier
        && ram >= spec.resources.memory
    {
        bad(
            "resources.ramTier",
            format!(
                "must be below resources.memory {} (got {ram})",
                spec.resources.memory
            ),
        );
    }
    if let Some(cpu) = &spec.resources.cpu
        && !is_cpu_quantity(cpu)
    {
        bad(
            "resources.cpu",
            format!("must be a CPU quantity such as 4, 1.5 or 500m (got {cpu:?})"),
        );
    }
    if spec.network.port == 0 || spec.network.admin_port == 0 {
        bad("network.port", "ports must be between 1 and 65535".into());
    }
    if spec.network.port == spec.network.admin_port {
        bad(
            "network.adminPort",
            format!("must differ from network.port {}", spec.network.port),
        );
    }
    if spec.steering.mode == SteeringMode::Queue && !spec.network.host_network {
        bad(
            "network.hostNetwork",
            "must be true for steering.mode queue (ADQ queues belong to the host NIC)".into(),
        );
    }
    if spec.steering.required && spec.steering.mode == SteeringMode::Off {
        bad(
            "steering.required",
            "needs a steering.mode other than off".into(),
        );
    }
    if spec.security.seccomp_localhost_profile.is_some()
        && spec.security.mode != SecurityMode::Capabilities
    {
        bad(
            "security.seccompLocalhostProfile",
            "applies only to security.mode capabilities (privileged containers run Unconfined)"
                .into(),
        );
    }
    if spec.image.as_deref().is_some_and(|i| i.trim().is_empty()) {
        bad("image", "must not be empty".into());
    }
    if let Some(tls) = &spec.tls {
        if tls.certificates.is_empty() {
            bad(
                "tls.certificates",
                "needs at least one certificate (a Secret of type kubernetes.io/tls) when \
                 spec.tls is set"
                    .into(),
            );
        }
        if tls.certificates.len() > TLS_CERTIFICATES_MAX {
            bad(
                "tls.certificates",
                format!(
                    "may name at most {TLS_CERTIFICATES_MAX} Secrets (got {})",
                    tls.certificates.len()
                ),
            );
        }
        let mut seen: Vec<&str> = Vec::new();
        for (i, c) in tls.certificates.iter().enumerate() {
            let field = format!("tls.certificates[{i}].secretName");
            let name = c.secret_name.as_str();
            if !is_dns1123_subdomain(name) {
                bad(
                    &field,
                    format!(
                        "must be a Secret name: a DNS-1123 subdomain of at most 253 lower-case \
                         letters, digits, '-' and '.', starting and ending with a letter or \
                         digit (got {name:?})"
                    ),
                );
            } else if let Some(j) = seen.iter().position(|s| *s == name) {
                bad(
                    &field,
                    format!("names Secret {name} again (tls.certificates[{j}] names it)"),
                );
            }
            seen.push(name);
        }
        if tls.port == 0 {
            bad("tls.port", "must be between 1 and 65535".into());
        } else if tls.port == spec.network.port {
            bad(
                "tls.port",
                format!("must differ from network.port {}", spec.network.port),
            );
        } else if tls.port == spec.network.admin_port {
            bad(
                "tls.port",
                format!(
                    "must differ from network.adminPort {}",
                    spec.network.admin_port
                ),
            );
        }
        if let Some(t) = tls.handshake_timeout
            && t.get().is_zero()
        {
            bad(
                "tls.handshakeTimeout",
                format!("must be greater than zero (got {t})"),
            );
        }
    }
    // NaN is in no range, so it is refused too.
    if let Some(sample) = spec.access_log.sample
        && !(0.0..=1.0).contains(&sample)
    {
        bad(
            "accessLog.sample",
            format!("must be between 0 and 1 (got {sample})"),
        );
    }
    if let Some(t) = &spec.tracing {
        if let Err(why) = dataplane::check_otlp_endpoint(&t.endpoint) {
            bad("tracing.endpoint", format!("{why} (got {:?})", t.endpoint));
        }
        if let Some(sample) = t.sample
            && !(0.0..=1.0).contains(&sample)
        {
            bad(
                "tracing.sample",
                format!("must be between 0 and 1 (got {sample})"),
            );
        }
    }
    let sharding_knobs = spec.sharding.popularity_threshold.is_some()
        || spec.sharding.popularity_window.is_some()
        || spec.sharding.peer_timeout.is_some();
    if spec.sharding.mode == Some(ShardingMode::Off) && sharding_knobs {
        bad(
            "sharding.mode",
            "is off, so sharding.popularityThreshold, popularityWindow and peerTimeout do not apply"
                .into(),
        );
    }
    match &spec.update_strategy.max_unavailable {
        IntOrString::Int(n) if *n < 1 => bad(
            "updateStrategy.maxUnavailable",
            format!("must be at least 1 (got {n})"),
        ),
        IntOrString::String(s) if !is_percent(s) => bad(
            "updateStrategy.maxUnavailable",
            format!("must be a count or a percentage from 1% to 100% (got {s:?})"),
        ),
        _ => {}
    }

    let cfg = DataplaneConfig {
        listen: SocketAddr::from(([0, 0, 0, 0], spec.network.port)),
        admin: SocketAddr::from(([0, 0, 0, 0], spec.network.admin_port)),
        origin: OriginConfig {
            url: spec.origin.url.clone().unwrap_or_default(),
            host_header,
            connect_timeout: spec.origin.connect_timeout,
            first_byte_timeout: spec.origin.first_byte_timeout,
            idle_timeout: spec.origin.idle_timeout,
            max_idle_connections: spec.origin.max_idle_connections,
        },
        storage: StorageConfig {
            dir: CONTAINER_CACHE_DIR.into(),
            size: spec.storage.size,
            direct_io_threshold: spec.storage.direct_io_threshold,
            io_engine: spec.storage.io_engine,
            max_object_size: spec.max_object_size(),
            slice_size: spec.storage.slice_size,
            reads_in_flight: spec.storage.reads_in_flight,
            verify_every_read: spec.storage.verify_every_read,
            max_variants_per_key: spec.cache.max_variants_per_key,
            admission: spec.storage.admission,
            reinsertion: spec.storage.reinsertion,
        },
        memory: MemoryConfig {
            limit: Some(spec.resources.memory),
            ram_tier: spec.resources.ram_tier,
            headroom_percent: spec.resources.headroom_percent,
        },
        workers: WorkersConfig {
            count: spec.resources.workers,
            steering: spec.steering.mode,
            steering_required: spec.steering.required,
            queue_offset: spec.steering.queue_offset,
        },
        cache: CachePolicyConfig {
            default_ttl: spec.cache.default_ttl,
            ignore_client_no_cache: spec.cache.ignore_client_no_cache,
            cookie_policy: spec.cache.cookie_policy,
            heuristic_freshness: spec.cache.heuristic_freshness,
            name: spec.cache.name.clone(),
            store_close_delimited: spec.cache.store_close_delimited,
            hit_for_pass: spec.cache.hit_for_pass,
            max_purge_rules: spec.cache.max_purge_rules,
        },
        clients: ClientLimitsConfig {
            header_timeout: spec.clients.header_timeout,
            idle_timeout: spec.clients.idle_timeout,
            write_timeout: spec.clients.write_timeout,
            write_timeout_under_pressure: spec.clients.write_timeout_under_pressure,
            max_connections_per_ip: spec.clients.max_connections_per_ip,
            max_connections_per_worker: spec.clients.max_connections_per_worker,
            max_disk_streams_per_ip: spec.clients.max_disk_streams_per_ip,
            max_admin_connections_per_ip: spec.clients.max_admin_connections_per_ip,
        },
        tls: tls_config(spec),
        // Its values are checked by the data plane's own rules, below.
        http2: Http2Config {
            enabled: spec.http2.enabled,
            max_concurrent_streams: spec.http2.max_concurrent_streams,
            max_header_list_size: spec.http2.max_header_list_size,
            stream_window: spec.http2.stream_window,
            connection_window: spec.http2.connection_window,
            keep_alive_interval: spec.http2.keep_alive_interval,
            keep_alive_timeout: spec.http2.keep_alive_timeout,
            ..Http2Config::default()
        },
        access_log: AccessLogConfig {
            format: spec.access_log.format,
            sample: spec.access_log.effective_sample(),
        },
        tracing: TracingSpec::config(spec.tracing.as_ref()),
        compression: spec.compression.clone(),
        sharding: sharding_config(spec),
        sites,
        log: spec.log.clone(),
        ..DataplaneConfig::default()
    };
    // The data plane's own rules, so the pods never refuse the config the operator wrote.
    // Problems already reported above under their spec names are not repeated.
    if errors.is_empty()
        && let Err(e) = dataplane::validate(&with_stand_in_node_name(&cfg))
    {
        for e in e.0 {
            errors.push(FieldError {
                field: format!("spec (data-plane config {})", e.path),
                reason: e.to_string(),
            });
        }
    }
    if !errors.is_empty() {
        return Err(Error::InvalidSpec(errors));
    }
    Ok(ValidatedEdgeCache {
        name,
        namespace,
        uid: ec.metadata.uid.clone(),
        generation: ec.metadata.generation,
        spec: spec.clone(),
        host_path,
        dataplane: cfg,
        image: spec
            .image
            .clone()
            .or_else(|| policy.dataplane_image.clone())
            .unwrap_or_else(default_image),
        image_pull_secrets: policy.image_pull_secrets.clone(),
        admin_clients: policy.admin_clients.clone(),
    })
}

/// The Host header the origins of `at` (`origin`, `sites[0]`) see: the spec's mode, with
/// `hostHeaderValue` exactly when the mode is `rewrite`.
fn host_header(
    at: &str,
    mode: HostHeaderMode,
    value: Option<&str>,
    bad: &mut impl FnMut(&str, String),
) -> HostHeader {
    let field = format!("{at}.hostHeaderValue");
    match (mode, value) {
        (HostHeaderMode::Rewrite, Some(v)) if !v.is_empty() => HostHeader::Rewrite(v.into()),
        (HostHeaderMode::Rewrite, _) => {
            bad(
                &field,
                format!("is required when {at}.hostHeader is rewrite"),
            );
            HostHeader::Preserve
        }
        (_, Some(_)) => {
            bad(
                &field,
                format!("is allowed only when {at}.hostHeader is rewrite"),
            );
            HostHeader::Preserve
        }
        (HostHeaderMode::Preserve, None) => HostHeader::Preserve,
        (HostHeaderMode::Origin, None) => HostHeader::Origin,
    }
}

/// The data plane's sharding section: the mode and knobs of the spec, the peers file where the
/// peers ConfigMap is mounted, the peer key where the admin Secret is; no `nodeName` (every pod
/// has its own, from the downward API).
fn sharding_config(spec: &EdgeCacheSpec) -> ShardingConfig {
    let mut s = spec.sharding.to_config();
    if s.mode == ShardingMode::Consistent {
        s.peers_file = Some(format!("{PEERS_DIR}/{PEERS_KEY}"));
        s.peer_key_file = Some(format!(
            "{}/{}",
            crate::build::ADMIN_TOKEN_DIR,
            crate::build::PEER_KEY_KEY
        ));
    }
    s
}

/// The data plane's `tls` section: off without `spec.tls`; otherwise a listener on `tls.port`
/// and, in the spec's order (the first is the default certificate), the PEM files of each
/// Secret where its volume is mounted ([`tls_secret_dir`]).
fn tls_config(spec: &EdgeCacheSpec) -> TlsConfig {
    let d = TlsConfig::default();
    let Some(tls) = &spec.tls else {
        return d;
    };
    TlsConfig {
        listen: Some(SocketAddr::from(([0, 0, 0, 0], tls.port))),
        certificates: tls
            .certificates
            .iter()
            .map(|c| {
                let dir = tls_secret_dir(&c.secret_name);
                CertificateFiles {
                    cert: format!("{dir}/{TLS_CERT_KEY}"),
                    key: format!("{dir}/{TLS_KEY_KEY}"),
                }
            })
            .collect(),
        handshake_timeout: tls.handshake_timeout.unwrap_or(d.handshake_timeout),
        min_version: tls.min_version,
        redirect_http: tls.redirect_http,
        ..d
    }
}

/// The directory a TLS Secret is mounted at in the container.
pub fn tls_secret_dir(secret_name: &str) -> String {
    format!("{TLS_DIR}/{secret_name}")
}

/// A DNS-1123 subdomain (what a Secret's name must be): at most 253 characters, dot-separated
/// labels of lower-case letters, digits and '-', each starting and ending with a letter or digit.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        l.bytes().next().is_some_and(alnum)
            && l.bytes().last().is_some_and(alnum)
            && l.bytes().all(|b| alnum(b) || b == b'-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label)
}

/// Read a ConfigMap's `config.yaml` as a pod on `node` does (`EDGECACHE_NODE_NAME` applied
/// before the data plane's checks).
pub fn parse_as_pod(yaml: &str, node: &str) -> Result<DataplaneConfig, dataplane::ConfigErrors> {
    let (mut cfg, shape) = dataplane::parse_shape(yaml)?;
    cfg.sharding.node_name = Some(node.into());
    dataplane::check(cfg, shape)
}

/// `cfg` as a pod sees it once `EDGECACHE_NODE_NAME` is applied.
fn with_stand_in_node_name(cfg: &DataplaneConfig) -> DataplaneConfig {
    let mut cfg = cfg.clone();
    if cfg.sharding.mode == ShardingMode::Consistent {
        cfg.sharding.node_name = Some(NODE_NAME_STAND_IN.into());
    }
    cfg
}

fn is_cpu_quantity(s: &str) -> bool {
    if let Some(m) = s.strip_suffix('m') {
        return !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()) && m != "0";
    }
    let mut parts = s.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let frac = parts.next();
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        && s.parse::<f64>().is_ok_and(|v| v > 0.0)
}

fn is_percent(s: &str) -> bool {
    s.strip_suffix('%')
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| (1..=100).contains(&n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TWO_SITES, minimal_edgecache, sites_edgecache};

    #[test]
    fn tracing_mistakes_are_refused_by_their_spec_names() {
        assert_eq!(
            errors("tracing:\n  endpoint: https://otel:4318\n  sample: 2\n"),
            ["spec.tracing.endpoint", "spec.tracing.sample"]
        );
        let m = message("tracing:\n  endpoint: otel:4318\n");
        assert!(m.contains("must start with http://"), "{m}");
    }

    /// The whole error text of an invalid spec.
    fn message(yaml: &str) -> String {
        validate(&minimal_edgecache(yaml), &Policy::default())
            .unwrap_err()
            .to_string()
    }

    fn errors(yaml: &str) -> Vec<String> {
        match validate(&minimal_edgecache(yaml), &Policy::default()) {
            Err(Error::InvalidSpec(e)) => e.into_iter().map(|e| e.field).collect(),
            other => panic!("expected InvalidSpec, got {other:?}"),
        }
    }

    /// Defect 4 of issue 35: `default` took the namespace's `default` ServiceAccount, and a name
    /// starting with a digit, holding a dot or longer than 63 characters failed at its Service
    /// after other children were made. Such a name is an invalid spec before anything is applied.
    #[test]
    fn names_the_children_cannot_take_are_refused_up_front() {
        let named = |name: &str| {
            let mut ec = minimal_edgecache("");
            ec.metadata.name = Some(name.to_string());
            validate(&ec, &Policy::default())
        };
        for name in ["web", "a", "web-2", &format!("a{}", "b".repeat(62))] {
            assert!(named(name).is_ok(), "{name}");
        }
        for (name, why) in [
            ("default", "ServiceAccount"),
            ("2web", "start with a lowercase letter"),
            ("web.example", "start with a lowercase letter"),
            ("web-", "start with a lowercase letter"),
            ("Web", "start with a lowercase letter"),
            (&format!("a{}", "b".repeat(63)), "at most 63"),
        ] {
            match named(name) {
                Err(Error::InvalidSpec(e)) => {
                    assert_eq!(e.len(), 1, "{name}: {e:?}");
                    assert_eq!(e[0].field, "metadata.name", "{name}");
                    assert!(e[0].reason.contains(why), "{name}: {}", e[0].reason);
                    assert!(e[0].reason.contains(name), "{name}: {}", e[0].reason);
                }
                other => panic!("{name}: expected InvalidSpec, got {other:?}"),
            }
        }
    }

    #[test]
    fn sharding_knobs_need_sharding_on_and_peer_timeout_must_be_positive() {
        assert_eq!(
            errors("sharding:\n  mode: off\n  popularityThreshold: 2\n"),
            ["spec.sharding.mode"]
        );
        assert_eq!(
            errors("sharding:\n  peerTimeout: 0s\n"),
            ["spec (data-plane config sharding.peerTimeout)"]
        );
        // The config passes the data plane's rules although it names no node.
        let v = validate(&minimal_edgecache(""), &Policy::default()).unwrap();
        assert_eq!(v.dataplane.sharding.node_name, None);
        assert!(
            dataplane::validate(&v.dataplane).is_err(),
            "the pod's name is needed"
        );
        assert!(dataplane::validate(&with_stand_in_node_name(&v.dataplane)).is_ok());
    }

    #[test]
    fn storage_size_auto_reaches_the_data_plane_and_skips_the_size_checks() {
        let v = validate(
            &minimal_edgecache("storage:\n  size: auto\ncache:\n  maxObjectSize: 64GiB\n"),
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(v.dataplane.storage.size, edgecache_api::DiskSize::Auto);
        assert_eq!(v.dataplane.storage.max_object_size, ByteSize::gib(64));
        assert!(dataplane::validate(&with_stand_in_node_name(&v.dataplane)).is_ok());
    }

    #[test]
    fn minimal_spec_gets_the_documented_defaults() {
        let v = validate(&minimal_edgecache(""), &Policy::default()).unwrap();
        assert_eq!(v.name, "web");
        assert_eq!(v.namespace, "edge");
        let c = &v.dataplane;
        assert_eq!(c.origin.url, "http://origin.edge.svc:8080");
        assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(c.admin.to_string(), "0.0.0.0:9090");
        assert_eq!(c.storage.dir, "/var/cache/edgecache");
        assert_eq!(c.storage.size, ByteSize::gib(10).into());
        assert_eq!(c.storage.reads_in_flight, 128);
        assert!(!c.storage.verify_every_read);
        assert_eq!(c.memory.limit, Some(ByteSize::gib(2)));
        assert_eq!(c.workers.steering, SteeringMode::Off);
        assert_eq!(c.origin.host_header, HostHeader::Preserve);
        assert!(!c.cache.store_close_delimited);
        assert_eq!(c.cache.hit_for_pass.to_string(), "10s");
        assert_eq!(c.storage.max_variants_per_key, 32);
        assert_eq!(c.clients.header_timeout.to_string(), "10s");
        assert_eq!(c.clients.idle_timeout.to_string(), "1m");
        assert_eq!(c.clients.write_timeout.to_string(), "30s");
        assert_eq!(c.clients.max_connections_per_ip, 256);
        assert_eq!(c.clients.max_connections_per_worker, 0);
        assert_eq!(c.clients.max_admin_connections_per_ip, 16);
        assert_eq!(c.cache.max_purge_rules, 10_000);
    }

    #[test]
    fn client_limits_and_close_delimited_storage_reach_the_dataplane_config() {
        let v = validate(&minimal_edgecache(
            "cache:\n  storeCloseDelimited: true\n  hitForPass: 0s\n  maxVariantsPerKey: 8\n  maxPurgeRules: 50\nclients:\n  headerTimeout: 5s\n  idleTimeout: 2m\n  writeTimeout: 15s\n  writeTimeoutUnderPressure: 3s\n  maxConnectionsPerIp: 64\n  maxConnectionsPerWorker: 5000\n  maxDiskStreamsPerIp: 7\n  maxAdminConnectionsPerIp: 4\n",
        ), &Policy::default())
        .unwrap();
        let c = &v.dataplane;
        assert!(c.cache.store_close_delimited);
        assert!(c.cache.hit_for_pass.get().is_zero());
        assert_eq!(c.storage.max_variants_per_key, 8);
        assert_eq!(c.clients.header_timeout.to_string(), "5s");
        assert_eq!(c.clients.idle_timeout.to_string(), "2m");
        assert_eq!(c.clients.write_timeout.to_string(), "15s");
        assert_eq!(c.clients.write_timeout_under_pressure.to_string(), "3s");
        assert_eq!(c.clients.max_connections_per_ip, 64);
        assert_eq!(c.clients.max_connections_per_worker, 5000);
        assert_eq!(c.clients.max_disk_streams_per_ip, 7);
        assert_eq!(c.clients.max_admin_connections_per_ip, 4);
        assert_eq!(c.cache.max_purge_rules, 50);
        // The data plane's own rules apply: a zero timeout is refused, by its spec name.
        let e = validate(
            &minimal_edgecache("clients:\n  headerTimeout: 0s\n"),
            &Policy::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("clients.headerTimeout"), "{e}");
    }

    #[test]
    fn spec_fields_reach_the_dataplane_config() {
        let v = validate(&minimal_edgecache(
            "origin:\n  url: http://o:81\n  hostHeader: rewrite\n  hostHeaderValue: www.example\n  connectTimeout: 500ms\nstorage:\n  hostPath: /mnt/nvme0/ec\n  size: 500GiB\n  directIoThreshold: 128KiB\n  ioEngine: threads\n  readsInFlight: 32\n  verifyEveryRead: true\nresources:\n  memory: 8Gi\n  workers: 6\n  ramTier: 4GiB\n  headroomPercent: 20\nsteering:\n  mode: queue\n  required: true\n  queueOffset: 0\nnetwork:\n  hostNetwork: true\n  port: 80\n  adminPort: 9901\ncache:\n  defaultTtl: 5m\n  maxObjectSize: 2GiB\n  cookiePolicy: never-store\n  name: edge-1\nlog: debug\n",
        ), &Policy::default())
        .unwrap();
        let c = &v.dataplane;
        assert_eq!(
            c.origin.host_header,
            HostHeader::Rewrite("www.example".into())
        );
        assert_eq!(c.origin.connect_timeout.to_string(), "500ms");
        // The container path stays fixed; the host path is only the volume's source.
        assert_eq!(c.storage.dir, CONTAINER_CACHE_DIR);
        assert_eq!(c.storage.size, ByteSize::gib(500).into());
        assert_eq!(c.storage.direct_io_threshold, ByteSize::kib(128));
        assert_eq!(c.storage.io_engine.as_str(), "threads");
        assert_eq!(c.storage.max_object_size, ByteSize::gib(2));
        assert_eq!(c.storage.reads_in_flight, 32);
        assert!(c.storage.verify_every_read);
        assert_eq!(c.memory.limit, Some(ByteSize::gib(8)));
        assert_eq!(c.memory.ram_tier, Some(ByteSize::gib(4)));
        assert_eq!(c.memory.headroom_percent, 20);
        assert_eq!(c.workers.count, 6);
        assert_eq!(c.workers.steering, SteeringMode::Queue);
        assert!(c.workers.steering_required);
        assert_eq!(c.workers.queue_offset, 0);
        assert_eq!(c.listen.port(), 80);
        assert_eq!(c.admin.port(), 9901);
        assert_eq!(
            c.cache.default_ttl.map(|d| d.to_string()).as_deref(),
            Some("5m")
        );
        assert_eq!(c.cache.name, "edge-1");
        assert_eq!(c.log, "debug");
        // And the config is one the data plane accepts.
        parse_as_pod(&dataplane::to_yaml(c), "node-a").unwrap();
    }

    #[test]
    fn every_invalid_field_is_named() {
        let fields = errors(
            "origin:\n  url: ftp://o\nstorage:\n  hostPath: /var/../etc\n  size: 1MiB\n  directIoThreshold: 1000\n  readsInFlight: 0\nresources:\n  memory: 1MiB\n  cpu: lots\nsteering:\n  mode: queue\nnetwork:\n  port: 9090\nupdateStrategy:\n  maxUnavailable: 0\n",
        );
        assert_eq!(
            fields,
            [
                "spec.origin.url",
                "spec.storage.hostPath",
                "spec.storage.size",
                "spec.storage.directIoThreshold",
                "spec.storage.readsInFlight",
                // maxObjectSize unset: an eighth of the 1MiB, 128KiB, below the 4MiB slices.
                "spec.storage.sliceSize",
                "spec.resources.memory",
                "spec.resources.cpu",
                "spec.network.adminPort",
                "spec.network.hostNetwork",
                "spec.updateStrategy.maxUnavailable",
            ]
        );
    }

    #[test]
    fn storage_reinsertion_reaches_the_data_plane_config() {
        let on = validate(
            &minimal_edgecache("storage:\n  reinsertion: true\n"),
            &Policy::default(),
        )
        .unwrap();
        assert!(on.dataplane.storage.reinsertion);
        let default = validate(&minimal_edgecache(""), &Policy::default()).unwrap();
        assert_eq!(
            default.dataplane.storage.reinsertion,
            StorageConfig::default().reinsertion
        );
    }

    /// Issue 35: the default maxObjectSize (1GiB) exceeded a small storage.size, and an
    /// EdgeCache that set neither more than that was refused. Unset, it is now an eighth of a
    /// storage.size below 8GiB; set above storage.size, it is refused saying what the default is.
    #[test]
    fn max_object_size_unset_is_an_eighth_of_a_small_store() {
        let max_object = |yaml: &str| {
            validate(&minimal_edgecache(yaml), &Policy::default())
                .unwrap()
                .dataplane
                .storage
                .max_object_size
        };
        for (size, want) in [
            ("512MiB", ByteSize::mib(64)),
            ("4GiB", ByteSize::mib(512)),
            ("8GiB", ByteSize::gib(1)),
            ("10GiB", ByteSize::gib(1)),
            ("auto", ByteSize::gib(1)),
        ] {
            assert_eq!(
                max_object(&format!("storage:\n  size: {size}\n")),
                want,
                "{size}"
            );
        }
        assert_eq!(
            max_object("storage:\n  size: 512MiB\ncache:\n  maxObjectSize: 256MiB\n"),
            ByteSize::mib(256),
            "as set"
        );
        let err = message("storage:\n  size: 512MiB\ncache:\n  maxObjectSize: 1GiB\n");
        assert!(
            err.contains(
                "spec.cache.maxObjectSize: must be positive and at most storage.size 512MiB (got \
                 1GiB; unset, it is 1GiB or an eighth of storage.size when that is less)"
            ),
            "{err}"
        );
    }

    #[test]
    fn slice_size_is_off_or_64kib_to_32mib_and_at_most_max_object_size() {
        for ok in ["\"0\"", "64KiB", "4MiB", "32MiB"] {
            let yaml = format!("storage:\n  sliceSize: {ok}\n");
            assert!(
                validate(&minimal_edgecache(&yaml), &Policy::default()).is_ok(),
                "{ok}"
            );
        }
        for bad in ["1", "63KiB", "33MiB", "1GiB"] {
            assert_eq!(
                errors(&format!("storage:\n  sliceSize: {bad}\n")),
                ["spec.storage.sliceSize"],
                "{bad}"
            );
        }
        // Slices larger than the largest object stored would never be cut.
        assert_eq!(
            errors("storage:\n  sliceSize: 16MiB\ncache:\n  maxObjectSize: 8MiB\n"),
            ["spec.storage.sliceSize"]
        );
        let err = message("storage:\n  sliceSize: 1KiB\n");
        assert!(
            err.contains(
                "spec.storage.sliceSize: must be 0 (off) or 64KiB to 32MiB, and at most cache.maxObjectSize 1GiB (got 1KiB)"
            ),
            "{err}"
        );
    }

    #[test]
    fn the_message_names_field_and_value() {
        let text = message("storage:\n  size: 1MiB\n");
        assert!(
            text.contains("spec.storage.size: must be at least 64MiB (got 1MiB)"),
            "{text}"
        );
    }

    #[test]
    fn cross_field_rules() {
        assert_eq!(
            errors("origin:\n  url: http://o\n  hostHeader: rewrite\n"),
            ["spec.origin.hostHeaderValue"]
        );
        assert_eq!(
            errors("steering:\n  required: true\n"),
            ["spec.steering.required"]
        );
        assert_eq!(
            errors("security:\n  seccompLocalhostProfile: x.json\n"),
            ["spec.security.seccompLocalhostProfile"]
        );
        assert_eq!(
            errors("resources:\n  memory: 1GiB\n  ramTier: 1GiB\n"),
            ["spec.resources.ramTier"]
        );
        assert_eq!(
            errors("updateStrategy:\n  maxUnavailable: 150%\n"),
            ["spec.updateStrategy.maxUnavailable"]
        );
    }

    #[test]
    fn host_paths_outside_the_allow_list_are_refused() {
        for refused in [
            "/etc",
            "/var/lib/kubelet",
            "/",
            "/mntx",
            "/mnt/../etc",
            "mnt/x",
        ] {
            let yaml = format!("storage:\n  hostPath: {refused:?}\n");
            assert_eq!(errors(&yaml), ["spec.storage.hostPath"], "{refused}");
        }
        let err = message("storage:\n  hostPath: /etc\n");
        assert!(
            err.contains(
                "spec.storage.hostPath: /etc is outside the host paths this operator allows, \
                 [/var/cache/edgecache, /mnt]"
            ),
            "{err}"
        );
    }

    #[test]
    fn allowed_host_paths_are_normalized_and_configurable() {
        let v = validate(
            &minimal_edgecache("storage:\n  hostPath: /mnt//nvme0/./ec/\n"),
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(v.host_path, "/mnt/nvme0/ec");
        let policy = Policy {
            allowed_host_paths: AllowedHostPaths::new(&["/data"]).unwrap(),
            ..Policy::default()
        };
        let ec = minimal_edgecache("storage:\n  hostPath: /data/cache\n");
        assert_eq!(validate(&ec, &policy).unwrap().host_path, "/data/cache");
        // The default path is refused by an allow-list without it.
        assert!(validate(&minimal_edgecache(""), &policy).is_err());
    }

    #[test]
    fn tls_mistakes_are_named_by_field() {
        let certs = "certificates:\n  - secretName: web-tls\n";
        assert_eq!(
            errors("tls:\n  certificates: []\n"),
            ["spec.tls.certificates"]
        );
        assert_eq!(
            errors(
                "tls:\n  certificates:\n  - secretName: Web_TLS\n  - secretName: a.b\n  - secretName: a.b\n"
            ),
            [
                "spec.tls.certificates[0].secretName",
                "spec.tls.certificates[2].secretName"
            ]
        );
        for (yaml, field) in [
            (format!("tls:\n  port: 8080\n  {certs}"), "spec.tls.port"),
            (format!("tls:\n  port: 9090\n  {certs}"), "spec.tls.port"),
            (format!("tls:\n  port: 0\n  {certs}"), "spec.tls.port"),
            (
                format!("tls:\n  handshakeTimeout: 0s\n  {certs}"),
                "spec.tls.handshakeTimeout",
            ),
            // The data plane's own rules decide HTTP/2's limits (0: from its memory plan).
            (
                "http2:\n  maxConcurrentStreams: 2000000\n".to_string(),
                "spec (data-plane config http2.maxConcurrentStreams)",
            ),
            (
                "http2:\n  connectionWindow: 1KiB\n".to_string(),
                "spec (data-plane config http2.connectionWindow)",
            ),
            (
                "accessLog:\n  sample: 1.5\n".to_string(),
                "spec.accessLog.sample",
            ),
            (
                "accessLog:\n  sample: -0.1\n".to_string(),
                "spec.accessLog.sample",
            ),
            (
                "accessLog:\n  sample: .nan\n".to_string(),
                "spec.accessLog.sample",
            ),
        ] {
            assert_eq!(errors(&yaml), [field], "{yaml}");
        }
        let text = validate(
            &minimal_edgecache(
                "tls:\n  port: 9090\n  certificates:\n  - secretName: a\n  - secretName: a\n",
            ),
            &Policy::default(),
        )
        .unwrap_err()
        .to_string();
        for want in [
            "spec.tls.certificates[1].secretName: names Secret a again (tls.certificates[0] names it)",
            "spec.tls.port: must differ from network.adminPort 9090",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        // More certificates than the CRD allows.
        let many: String = (0..=TLS_CERTIFICATES_MAX)
            .map(|i| format!("  - secretName: s{i}\n"))
            .collect();
        assert_eq!(
            errors(&format!("tls:\n  certificates:\n{many}")),
            ["spec.tls.certificates"]
        );
    }

    #[test]
    fn a_valid_tls_spec_is_one_the_data_plane_accepts() {
        let v = validate(
            &minimal_edgecache(
                "tls:\n  redirectHttp: true\n  minVersion: \"1.3\"\n  certificates:\n  - secretName: web-tls\n",
            ),
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(
            v.dataplane.tls.listen.map(|a| a.port()),
            Some(edgecache_api::v1alpha1::TLS_PORT_DEFAULT)
        );
        parse_as_pod(&dataplane::to_yaml(&v.dataplane), "node-a").unwrap();
    }

    #[test]
    fn secret_names_are_dns_1123_subdomains() {
        for ok in ["a", "web-tls", "api.example.com", "1-2", &"a".repeat(253)] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "web_tls",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }

    fn site_errors(yaml: &str) -> Vec<String> {
        match validate(&sites_edgecache(yaml), &Policy::default()) {
            Err(Error::InvalidSpec(e)) => e.into_iter().map(|e| e.to_string()).collect(),
            other => panic!("expected InvalidSpec, got {other:?}"),
        }
    }

    #[test]
    fn sites_alone_need_no_origin_url_and_pass_the_data_planes_rules() {
        let v = validate(&sites_edgecache(TWO_SITES), &Policy::default()).unwrap();
        assert_eq!(v.dataplane.origin.url, "");
        assert_eq!(v.dataplane.sites.len(), 2);
        parse_as_pod(&dataplane::to_yaml(&v.dataplane), "node-a").unwrap();
        // One site the default, without origin.url.
        let v = validate(
            &sites_edgecache(
                "sites:\n- hosts: [a.example]\n  default: true\n  origins: [http://a:80]\n",
            ),
            &Policy::default(),
        )
        .unwrap();
        assert!(v.dataplane.sites[0].default);
    }

    #[test]
    fn neither_origin_url_nor_sites_is_refused() {
        assert_eq!(
            site_errors(""),
            [
                "spec.origin.url: is required unless spec.sites is given (e.g. http://origin.example:8080)"
            ]
        );
    }

    #[test]
    fn site_mistakes_are_named_by_their_spec_field() {
        let site = |hosts: &str, origins: &str| format!("- hosts: {hosts}\n  origins: {origins}\n");
        for (yaml, want) in [
            (
                format!("sites:\n{}{}", site("[a.example]", "[http://a]"), site("['*.b.example', a.example]", "[http://b]")),
                "spec.sites[1].hosts[1]: is named by another site too (got \"a.example\")".to_string(),
            ),
            (
                format!("sites:\n{}", site("[a.example, a.example]", "[http://a]")),
                "spec.sites[0].hosts[1]: is named by another site too (got \"a.example\")".to_string(),
            ),
            (
                format!("sites:\n{}", site("[A.example]", "[http://a]")),
                "spec.sites[0].hosts[0]: must be a lowercase hostname without a port, or *. and one (got \"A.example\")".to_string(),
            ),
            (
                format!("sites:\n{}", site("[a.example]", "[http://a/shop]")),
                "spec.sites[0].origins[0]: must be http://host[:port] with no path, query or credentials (got \"http://a/shop\")".to_string(),
            ),
            (
                format!("sites:\n{}", site("[a.example]", "[http://a, https://b]")),
                "spec.sites[0].origins: mixes http:// and https:// origins".to_string(),
            ),
            (
                format!("sites:\n{}", site("[]", "[]")),
                "spec.sites[0].hosts: needs at least one hostname".to_string(),
            ),
            (
                format!("sites:\n{}  retries: 9\n", site("[a.example]", "[http://a]")),
                "spec.sites[0].retries: must be at most 8 (got 9)".to_string(),
            ),
            (
                format!("sites:\n{}  hostHeader: rewrite\n", site("[a.example]", "[http://a]")),
                "spec.sites[0].hostHeaderValue: is required when sites[0].hostHeader is rewrite".to_string(),
            ),
            (
                format!("sites:\n{}  healthCheck: {{interval: 0s}}\n", site("[a.example]", "[http://a]")),
                "spec.sites[0].healthCheck.interval: must be greater than zero (got 0ms)".to_string(),
            ),
            (
                format!("sites:\n{}  originTls: {{caSecret: {{name: Img_CA, key: ../x}}}}\n", site("[a.example]", "[https://a]")),
                "spec.sites[0].originTls.caSecret.name: must be a Secret name: a DNS-1123 subdomain (got \"Img_CA\")".to_string(),
            ),
        ] {
            let got = site_errors(&yaml);
            assert!(got.contains(&want), "{want} in {got:?}\n{yaml}");
        }
        let key = site_errors(&format!(
            "sites:\n{}  originTls: {{caSecret: {{name: img-ca, key: ..data}}, serverName: '*.a'}}\n",
            site("[a.example]", "[https://a]")
        ));
        assert_eq!(key.len(), 2, "{key:?}");
        assert!(key[0].starts_with("spec.sites[0].originTls.caSecret.key: must be a Secret key"));
        assert!(
            key[1].starts_with("spec.sites[0].originTls.serverName: must be a lowercase hostname")
        );
    }

    #[test]
    fn at_most_one_default_and_none_beside_origin_url() {
        let two = "sites:\n- hosts: [a.example]\n  default: true\n  origins: [http://a]\n- hosts: [b.example]\n  default: true\n  origins: [http://b]\n";
        assert_eq!(
            site_errors(two),
            ["spec.sites: 2 sites are the default; at most one may be"]
        );
        // minimal_edgecache keeps origin.url: the default site already.
        let one = "sites:\n- hosts: [a.example]\n  default: true\n  origins: [http://a]\n";
        assert_eq!(errors(one), ["spec.origin.url"],);
        let text = validate(&minimal_edgecache(one), &Policy::default())
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("spec.origin.url: beside sites it is the default site's origin, but a site is the default already"),
            "{text}"
        );
    }

    #[test]
    fn cpu_quantities() {
        for ok in ["1", "4", "1.5", "500m", "0.5"] {
            assert!(is_cpu_quantity(ok), "{ok}");
        }
        for bad in ["", "0", "m", "0m", "1.", ".5", "1c", "-1"] {
            assert!(!is_cpu_quantity(bad), "{bad}");
        }
    }
}
