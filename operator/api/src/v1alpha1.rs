//! The `EdgeCache` custom resource (edgecache.dev/v1alpha1).
//!
//! One `EdgeCache` is one fleet of data-plane pods: a DaemonSet on the nodes its placement
//! selects (NVMe nodes by default, ADQ nodes too for `queue` steering), each pod caching on the
//! node's NVMe through a hostPath directory. Every field has a schema default except
//! `origin.url` (or, instead of it, `sites`); cross-field rules and the immutable cache path are CEL rules the API server
//! enforces (`x-kubernetes-validations`), so a bad object is refused at `kubectl apply`. The
//! operator re-checks the rest (sizes, URL syntax) before it touches anything.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::dataplane::{
    AccessLogConfig, AccessLogFormat, AdmissionPolicy, Balance, CachePolicyConfig,
    ClientLimitsConfig, CompressionConfig, CookiePolicy, HealthCheckConfig, Http2Config,
    IoEngineKind, ShardingConfig, ShardingMode, SiteConfig, SteeringMode, StorageConfig,
    TlsVersion, TracingConfig,
};
use crate::quantity::{ByteSize, DiskSize, Duration};

/// API group of the resource.
pub const GROUP: &str = "edgecache.dev";
/// API version of this module.
pub const VERSION: &str = "v1alpha1";
/// Node label set by Node Feature Discovery on nodes with a non-rotational disk.
pub const NFD_NONROTATIONAL_LABEL: &str = "feature.node.kubernetes.io/storage-nonrotationaldisk";
/// Node label an admin (or a NodeFeatureRule) sets on NVMe nodes.
pub const NVME_LABEL: &str = "edgecache.dev/nvme";
/// Repository of the data-plane image the operator runs when an EdgeCache names none (tagged
/// with the operator's version).
pub const DATAPLANE_IMAGE_REPOSITORY: &str = "ghcr.io/edgecache/edgecache-dataplane";
/// Node label an admin (or a NodeFeatureRule) sets on nodes with an ADQ-capable NIC.
pub const ADQ_LABEL: &str = "edgecache.dev/adq";

/// The CEL rule (on the root: it reads `metadata.name`) that an EdgeCache's name is a DNS-1035
/// label: its Service, which no other name may take, is called after it.
const NAME_LABEL_RULE: &str = "self.metadata.name.matches('^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$')";
/// Why a name that breaks [`NAME_LABEL_RULE`] is refused.
pub const NAME_NOT_A_LABEL: &str = "must be a DNS-1035 label: at most 63 characters, lowercase letters, digits and '-', that start with a lowercase letter and end with a letter or digit (the EdgeCache's Service takes its name)";
/// The CEL rule that an EdgeCache is not called `default`.
const NAME_NOT_DEFAULT_RULE: &str = "self.metadata.name != 'default'";
/// Why `default` is refused.
pub const NAME_DEFAULT_TAKEN: &str = "must not be default: the EdgeCache's ServiceAccount takes its name, and every namespace already has a ServiceAccount default";

/// Why an EdgeCache may not be called `name` ([`NAME_NOT_A_LABEL`] or [`NAME_DEFAULT_TAKEN`]),
/// or `None`: the same decision as the CRD's CEL rules on `metadata.name`, for objects that
/// reach the operator without the API server's check (`render`, an older CRD).
pub fn name_problem(name: &str) -> Option<&'static str> {
    let b = name.as_bytes();
    let is_label = (1..=63).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if !is_label {
        Some(NAME_NOT_A_LABEL)
    } else if name == "default" {
        Some(NAME_DEFAULT_TAKEN)
    } else {
        None
    }
}

/// An HTTP edge cache running on every selected node.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "edgecache.dev",
    version = "v1alpha1",
    kind = "EdgeCache",
    plural = "edgecaches",
    singular = "edgecache",
    shortname = "ec",
    category = "edgecache-all",
    namespaced,
    status = "EdgeCacheStatus",
    derive = "PartialEq",
    doc = "An HTTP edge cache: one data-plane pod per selected node, caching on the node's NVMe.",
    printcolumn = r#"{"name":"Ready","type":"string","description":"Whether every selected node runs an up-to-date, ready cache pod","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","description":"Nodes whose cache pod is ready, of the nodes the placement matches","jsonPath":".status.nodesReady"}"#,
    printcolumn = r#"{"name":"Sharding","type":"string","description":"Sharding mode in effect","jsonPath":".status.sharding.mode"}"#,
    printcolumn = r#"{"name":"Steering","type":"string","description":"Connection steering mode","jsonPath":".spec.steering.mode"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new(NAME_LABEL_RULE).message(format!("metadata.name {NAME_NOT_A_LABEL}").as_str()),
    validation = Rule::new(NAME_NOT_DEFAULT_RULE).message(format!("metadata.name {NAME_DEFAULT_TAKEN}").as_str())
)]
#[x_kube(validation = Rule::new(
    "self.steering.mode != 'queue' || self.network.hostNetwork"
).message("steering.mode queue needs network.hostNetwork: true (ADQ queues belong to the host NIC)").field_path(".network.hostNetwork"))]
#[x_kube(validation = Rule::new(
    "self.origin.hostHeader == 'rewrite' ? (has(self.origin.hostHeaderValue) && self.origin.hostHeaderValue != '') : !has(self.origin.hostHeaderValue)"
).message("origin.hostHeaderValue is required when origin.hostHeader is rewrite, and allowed only then").field_path(".origin.hostHeaderValue"))]
#[x_kube(validation = Rule::new(
    "self.network.port != self.network.adminPort"
).message("network.port and network.adminPort must differ").field_path(".network.adminPort"))]
#[x_kube(validation = Rule::new(
    "!has(self.tls) || (self.tls.port != self.network.port && self.tls.port != self.network.adminPort)"
).message("tls.port must differ from network.port and network.adminPort").field_path(".tls.port"))]
#[x_kube(validation = Rule::new(
    "!has(self.security.seccompLocalhostProfile) || self.security.mode == 'capabilities'"
).message("security.seccompLocalhostProfile applies only to security.mode capabilities (privileged containers always run Unconfined)").field_path(".security.seccompLocalhostProfile"))]
#[x_kube(validation = Rule::new(
    "!self.steering.required || self.steering.mode != 'off'"
).message("steering.required needs a steering.mode other than off").field_path(".steering.required"))]
#[x_kube(validation = Rule::new(
    "self.storage.hostPath == oldSelf.storage.hostPath"
).message("storage.hostPath is immutable: the cache on every node lives there; create a new EdgeCache to move it").field_path(".storage.hostPath"))]
#[x_kube(validation = Rule::new(
    "!has(self.sharding) || !has(self.sharding.mode) || self.sharding.mode != 'off' || (!has(self.sharding.popularityThreshold) && !has(self.sharding.popularityWindow) && !has(self.sharding.peerTimeout))"
).message("sharding.popularityThreshold, popularityWindow and peerTimeout apply only when sharding.mode is not off").field_path(".sharding.mode"))]
#[x_kube(validation = Rule::new(
    "has(self.origin.url) || (has(self.sites) && size(self.sites) > 0)"
).message("origin.url or sites is required: the origin of every Host, or sites with origins of their own").field_path(".origin.url"))]
#[x_kube(validation = Rule::new(
    "!has(self.origin.url) || !has(self.sites) || self.sites.all(s, !has(s.default) || !s.default)"
).message("beside sites, origin.url is the default site (every Host no site names), so no site may be default: true").field_path(".sites"))]
#[serde(rename_all = "camelCase")]
pub struct EdgeCacheSpec {
    /// The origin this cache fronts: `origin.url` serves every Host, or, beside `sites`, every
    /// Host no site names (then no site may be `default`); its timeouts apply to every site.
    /// `origin.url` may be left out when `sites` is given.
    #[serde(default)]
    pub origin: OriginSpec,
    /// Sites: hostnames, each with an origin pool and cache-policy overrides of its own (at
    /// most 32, each hostname named by one site only, at most one the `default`). A Host no
    /// site names goes to `origin.url`, or to the `default` site, or gets 421 Misdirected
    /// Request. Default: none: every Host goes to `origin.url`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(
        "self.all(s, s.hosts.all(h, self.exists_one(t, h in t.hosts)))"
    ).message("each hostname may be named by one site only"))]
    #[x_kube(validation = Rule::new(
        "self.filter(s, has(s.default) && s.default).size() <= 1"
    ).message("at most one site may be default: true"))]
    pub sites: Vec<SiteSpec>,
    /// Which nodes run a cache pod. Default: NVMe nodes (and ADQ nodes for `queue` steering).
    #[serde(default)]
    pub placement: PlacementSpec,
    /// The disk cache on each node's NVMe.
    #[serde(default)]
    pub storage: StorageSpec,
    /// Memory, CPU and worker threads of each cache pod.
    #[serde(default)]
    pub resources: ResourcesSpec,
    /// How connections are spread over the workers.
    #[serde(default)]
    pub steering: SteeringSpec,
    /// Caching policy overrides. The defaults conform to RFC 9111.
    #[serde(default)]
    pub cache: CacheSpec,
    /// Compression of text for clients that accept gzip, brotli or zstd, done once per object
    /// at its fill and stored (the data plane's `compression`). Default: on for text, scripts,
    /// JSON, XML, SVG and WASM of at least 1KiB; a site's `compression` overrides it.
    #[serde(default, skip_serializing_if = "CompressionConfig::is_unset")]
    pub compression: CompressionConfig,
    /// Ports, host networking and the Service in front of the pods.
    #[serde(default)]
    pub network: NetworkSpec,
    /// TLS termination: a second listener (the container and Service port `https`) with
    /// certificates from Secrets of type `kubernetes.io/tls`. Default: unset, no TLS listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// HTTP/2 to clients: ALPN `h2` on the TLS listener, prior-knowledge h2c on the plain one.
    #[serde(default)]
    pub http2: Http2Spec,
    /// The access log: one line per request on the data plane's stdout.
    #[serde(default)]
    pub access_log: AccessLogSpec,
    /// OpenTelemetry traces of requests (a span per request, child spans for its origin or
    /// peer fetch and its disk read), sent as OTLP/HTTP protobuf. Default: unset, off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingSpec>,
    /// Limits that keep one client from hurting another: timeouts and connection caps.
    #[serde(default)]
    pub clients: ClientsSpec,
    /// Privileges of the cache container.
    #[serde(default)]
    pub security: SecuritySpec,
    /// Whether the nodes hold one cache between them (each key on one owner node) or each node
    /// caches for itself.
    #[serde(default)]
    pub sharding: ShardingSpec,
    /// The data-plane image. Default: unset, which means the data-plane image of the operator's
    /// own release (`ghcr.io/edgecache/edgecache-dataplane:<operator version>`), chosen at every
    /// reconcile: upgrading the operator upgrades the EdgeCaches that name no image. (A schema
    /// default would be stored in each EdgeCache and freeze the image of its creation day.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// When the kubelet pulls the image. Default: `IfNotPresent`.
    #[serde(default)]
    pub image_pull_policy: PullPolicy,
    /// How pods are replaced when the spec changes.
    #[serde(default)]
    pub update_strategy: UpdateStrategySpec,
    /// Data-plane log filter (`error`, `warn`, `info`, `debug`, `trace` or a tracing filter).
    /// Default: `info`.
    #[serde(default = "default_log")]
    #[schemars(length(min = 1))]
    pub log: String,
    /// Stop reconciling this EdgeCache without deleting anything. Default: false.
    #[serde(default)]
    pub paused: bool,
}

fn default_log() -> String {
    "info".into()
}

/// The origin server.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OriginSpec {
    /// `http://host[:port]` or `https://host[:port]` of the origin (an https one is checked
    /// against the Mozilla roots). Required unless `sites` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://[^/?#@ ]+/?$"))]
    pub url: Option<String>,
    /// What Host header the origin sees: the client's (`preserve`), the origin URL's authority
    /// (`origin`) or `hostHeaderValue` (`rewrite`). Default: `preserve`.
    #[serde(default)]
    pub host_header: HostHeaderMode,
    /// The Host header sent when `hostHeader` is `rewrite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_header_value: Option<String>,
    /// Time allowed to open a TCP connection to the origin. Default: `2s`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Duration,
    /// Time allowed from sending the request to the origin's response head. Default: `30s`.
    #[serde(default = "default_30s")]
    pub first_byte_timeout: Duration,
    /// Longest silence allowed while the origin sends a body. Default: `30s`.
    #[serde(default = "default_30s")]
    pub idle_timeout: Duration,
    /// Idle pooled origin connections kept per worker. Default: 64.
    #[serde(default = "default_max_idle")]
    #[schemars(range(max = 10000))]
    pub max_idle_connections: u32,
}

impl Default for OriginSpec {
    fn default() -> Self {
        Self {
            url: None,
            host_header: HostHeaderMode::Preserve,
            host_header_value: None,
            connect_timeout: default_connect_timeout(),
            first_byte_timeout: default_30s(),
            idle_timeout: default_30s(),
            max_idle_connections: default_max_idle(),
        }
    }
}

fn default_connect_timeout() -> Duration {
    Duration::secs(2)
}
fn default_30s() -> Duration {
    Duration::secs(30)
}
fn default_max_idle() -> u32 {
    64
}

/// How the Host header sent to the origin is chosen.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum HostHeaderMode {
    /// Keep the client's Host header.
    #[default]
    Preserve,
    /// Use the origin URL's authority.
    Origin,
    /// Use `origin.hostHeaderValue`.
    Rewrite,
}

/// One site: the hostnames it answers for, its origin pool and its cache-policy overrides
/// (the data plane's `sites[]`, with the same names and defaults).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "self.origins.all(o, o.startsWith('http://')) || self.origins.all(o, o.startsWith('https://'))"
).message("origins must be all http:// or all https://").field_path(".origins"))]
#[x_kube(validation = Rule::new(
    "self.hostHeader == 'rewrite' ? (has(self.hostHeaderValue) && self.hostHeaderValue != '') : !has(self.hostHeaderValue)"
).message("hostHeaderValue is required when hostHeader is rewrite, and allowed only then").field_path(".hostHeaderValue"))]
pub struct SiteSpec {
    /// Hostnames, exact (`www.example.com`) or one-label wildcards (`*.example.com`),
    /// lowercase, without a port; 1 to 16, each once.
    #[schemars(
        length(min = 1, max = 16),
        inner(
            length(min = 1, max = 253),
            regex(
                pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
            )
        )
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub hosts: Vec<String>,
    /// Answer every Host no site names. At most one site, and none beside `origin.url`.
    /// Default: false.
    #[serde(default)]
    pub default: bool,
    /// The origin pool: 1 to 16 `http://host[:port]` or `https://host[:port]` URLs without a
    /// path, all of one scheme. A hostname (a Service's DNS name such as
    /// `http://web.shop.svc.cluster.local:8080` too) is resolved on each new connection.
    #[schemars(
        length(min = 1, max = 16),
        inner(length(max = 2048), regex(pattern = r"^https?://[^/?#@ ]+/?$"))
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub origins: Vec<String>,
    /// How a request picks an origin: `roundRobin` or `leastConnections`. Default:
    /// `roundRobin`.
    #[serde(default)]
    pub balance: Balance,
    /// Active and passive health checks of the pool's origins.
    #[serde(default)]
    pub health_check: HealthCheckSpec,
    /// Further origins tried, 0 to 8, for a GET or HEAD whose origin could not be reached or
    /// reset the connection before a response head (within a budget of a fifth of the site's
    /// requests). Default: 1.
    #[serde(default = "default_retries")]
    #[schemars(range(max = 8))]
    pub retries: u32,
    /// TLS to `https://` origins: the CA bundle they are checked against and the name sent in
    /// SNI. Default: unset: the Mozilla roots, and each origin URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_tls: Option<OriginTlsSpec>,
    /// HTTP/2 to the origins, and only HTTP/2 (ALPN `h2` over TLS, prior knowledge in plain).
    /// Default: false.
    #[serde(default)]
    pub origin_http2: bool,
    /// What Host header the origins see: the client's (`preserve`), the origin URL's authority
    /// (`origin`) or `hostHeaderValue` (`rewrite`). Default: `preserve`.
    #[serde(default)]
    pub host_header: HostHeaderMode,
    /// The Host header sent when `hostHeader` is `rewrite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_header_value: Option<String>,
    /// Cache-policy overrides for this site; unset fields keep `spec.cache`'s.
    #[serde(default)]
    pub cache: SiteCacheSpec,
    /// Compression overrides for this site (`enabled: false` turns it off); unset fields keep
    /// `spec.compression`'s.
    #[serde(default, skip_serializing_if = "CompressionConfig::is_unset")]
    pub compression: CompressionConfig,
}

fn default_retries() -> u32 {
    SiteConfig::default().retries
}

/// Health checks of a site's origins.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckSpec {
    /// Path requested from each origin every `interval` (a 2xx or 3xx is healthy). Default:
    /// unset: passive checks only (failed requests count, and an origin out of the pool gets
    /// one request again after `interval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), regex(pattern = r"^/\S*$"))]
    pub path: Option<String>,
    /// Time between two checks of an origin. Default: `5s`.
    #[serde(default = "default_hc_interval")]
    pub interval: Duration,
    /// Time a check may take. Default: `2s`.
    #[serde(default = "default_hc_timeout")]
    pub timeout: Duration,
    /// Failures in a row (failed checks, requests without a connection or a response head)
    /// that take an origin out of the pool, 1 to 100. Default: 3.
    #[serde(default = "default_unhealthy_after")]
    #[schemars(range(min = 1, max = 100))]
    pub unhealthy_after: u32,
    /// Passed checks in a row that put it back, 1 to 100. Default: 2.
    #[serde(default = "default_healthy_after")]
    #[schemars(range(min = 1, max = 100))]
    pub healthy_after: u32,
}

impl Default for HealthCheckSpec {
    fn default() -> Self {
        let d = HealthCheckConfig::default();
        Self {
            path: d.path,
            interval: d.interval,
            timeout: d.timeout,
            unhealthy_after: d.unhealthy_after,
            healthy_after: d.healthy_after,
        }
    }
}

// The data plane's defaults, so the two cannot drift apart.
fn default_hc_interval() -> Duration {
    HealthCheckConfig::default().interval
}
fn default_hc_timeout() -> Duration {
    HealthCheckConfig::default().timeout
}
fn default_unhealthy_after() -> u32 {
    HealthCheckConfig::default().unhealthy_after
}
fn default_healthy_after() -> u32 {
    HealthCheckConfig::default().healthy_after
}

/// TLS to a site's `https://` origins.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OriginTlsSpec {
    /// A Secret in the EdgeCache's namespace (of any type, e.g. Opaque) holding the PEM bundle
    /// of the CAs that sign the origins' certificates. It is mounted whole, so a rotated
    /// bundle reaches the pods without a restart. Default: unset: the Mozilla roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<CaSecretSpec>,
    /// The name sent in SNI and checked in the origins' certificates. Default: unset: each
    /// origin URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        regex(
            pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
        )
    )]
    pub server_name: Option<String>,
}

/// A key of a Secret holding a PEM CA bundle.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaSecretSpec {
    /// Name of the Secret, in the EdgeCache's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// The key holding the bundle (its file name in the mounted Secret). Default: `ca.crt`.
    #[serde(default = "default_ca_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    #[x_kube(validation = Rule::new(
        "self != '.' && self != '..' && !self.startsWith('..')"
    ).message("must be a Secret key: not '.', '..' or starting with '..'"))]
    pub key: String,
}

/// Default of `originTls.caSecret.key`.
pub const CA_SECRET_KEY_DEFAULT: &str = "ca.crt";

fn default_ca_key() -> String {
    CA_SECRET_KEY_DEFAULT.into()
}

/// A site's cache-policy overrides; unset fields keep `spec.cache`'s.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteCacheSpec {
    /// Freshness for cacheable responses that carry none. Default: unset (`spec.cache`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_ttl: Option<Duration>,
    /// Responses with Set-Cookie: `store`, `no-store-unless-public` or `never-store`.
    /// Default: unset (`spec.cache`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_cookie_policy")]
    pub cookie_policy: Option<CookiePolicy>,
    /// Query parameters left out of the cache key and the origin request (e.g. `utm_source`;
    /// a trailing `*` matches a prefix: `utm_*`), at most 64. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(length(min = 1, max = 256), regex(pattern = r"^[^&=* ]+\*?$"))
    )]
    pub drop_query: Vec<String>,
    /// Sort the query parameters, so `?b=1&a=2` and `?a=2&b=1` are one entry. Default: false.
    #[serde(default)]
    pub sort_query: bool,
}

/// The schema of an optional [`CookiePolicy`], written out: kube's hoisting of `Option<enum>`
/// would replace the field's description with the enum's.
fn optional_cookie_policy(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["store", "no-store-unless-public", "never-store"],
        "nullable": true,
    })
}

/// Which nodes run a cache pod.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// Restrict the default NVMe (and, for `queue` steering, ADQ) node affinity. When true, the
    /// pods get a required node affinity for nodes labelled
    /// `feature.node.kubernetes.io/storage-nonrotationaldisk=true` or `edgecache.dev/nvme=true`,
    /// and also `edgecache.dev/adq=true` when `steering.mode` is `queue`; it is combined (AND)
    /// with any required node affinity given in `affinity`. Default: true.
    #[serde(default = "default_true")]
    pub nvme_nodes_only: bool,
    /// Extra node labels a node must carry (the pod's `nodeSelector`). Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Affinity of the cache pods, merged with the NVMe default above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations of the cache pods. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Priority class of the cache pods (e.g. `system-node-critical`). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

impl Default for PlacementSpec {
    fn default() -> Self {
        Self {
            nvme_nodes_only: true,
            node_selector: BTreeMap::new(),
            affinity: None,
            tolerations: Vec::new(),
            priority_class_name: None,
        }
    }
}

fn default_true() -> bool {
    true
}

/// The disk cache on each node.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Directory on the node (on its NVMe) that holds the cache, mounted into the pod. Created
    /// when missing. Immutable. Default: `/var/cache/edgecache`.
    #[serde(default = "default_host_path")]
    #[schemars(regex(pattern = r"^/[^\x00]*$"), length(max = 4096))]
    pub host_path: String,
    /// Disk budget for cached objects on each node (at least 64MiB), or `auto`: the free space
    /// of the node's filesystem at the pod's start less a tenth of it (at least 1 GiB), so each
    /// node uses its own disk whatever its size. Default: `10GiB`.
    #[serde(default = "default_storage_size")]
    pub size: DiskSize,
    /// Objects at or above this size are read with O_DIRECT; a positive multiple of 4096.
    /// Default: `4KiB`.
    #[serde(default = "default_direct_io")]
    pub direct_io_threshold: ByteSize,
    /// The disk I/O engine: `auto` (io_uring when allowed, else threads), `uring` or `threads`.
    /// Default: `auto`.
    #[serde(default)]
    pub io_engine: IoEngineKind,
    /// Most disk reads in flight at once per pod (the device queue depth the cache asks for;
    /// read-ahead only starts while a slot is free), 1 to 4096. Default: `128`, what an NVMe
    /// drive needs for its bandwidth; lower it for a device that gains nothing from depth.
    #[serde(default = "default_reads_in_flight")]
    #[schemars(range(min = 1, max = 4096))]
    pub reads_in_flight: u32,
    /// Check every disk read of a body against its block checksums. Default: `false`: each
    /// record's body is checked until it has been read whole once since the pod started (that
    /// finds records torn by a crash); later reads trust the disk. Headers, keys and segment
    /// epochs are checked on every read either way.
    #[serde(default)]
    pub verify_every_read: bool,
    /// Which misses are written to the disk: `all`, or `second-hit` (while the store has room
    /// every miss; once it is full a URL's first miss is served, and shared with concurrent
    /// requests, but not written, so one-hit wonders stay off the flash). Default:
    /// `second-hit`.
    #[serde(default)]
    pub admission: AdmissionPolicy,
    /// Give objects read since they were written a second life when their segment's turn for
    /// eviction comes: they are copied to the head of the log (up to half a segment each time)
    /// instead of evicted with it. More disk writes for a higher hit ratio. Default: `true`.
    #[serde(default = "default_reinsertion")]
    pub reinsertion: bool,
    /// Objects larger than this (with a strong validator, no Vary, up to
    /// `cache.maxObjectSize`) are cached as slices of this size: one stored object each,
    /// fetched from the origin with aligned Range requests as clients ask for them. `"0"` turns
    /// slicing off; otherwise 64KiB to 32MiB (a slice is one store record: a store smaller than
    /// 512MiB has segments too small for large slices, and slices nothing then), and at most
    /// `cache.maxObjectSize`. Default: `4MiB`.
    #[serde(default = "default_slice_size")]
    pub slice_size: ByteSize,
}

impl Default for StorageSpec {
    fn default() -> Self {
        Self {
            host_path: default_host_path(),
            size: default_storage_size(),
            direct_io_threshold: default_direct_io(),
            io_engine: IoEngineKind::Auto,
            reads_in_flight: default_reads_in_flight(),
            verify_every_read: false,
            admission: AdmissionPolicy::default(),
            reinsertion: default_reinsertion(),
            slice_size: default_slice_size(),
        }
    }
}

fn default_slice_size() -> ByteSize {
    StorageConfig::default().slice_size
}

fn default_reinsertion() -> bool {
    StorageConfig::default().reinsertion
}

fn default_reads_in_flight() -> u32 {
    crate::dataplane::READS_IN_FLIGHT_DEFAULT
}

fn default_host_path() -> String {
    "/var/cache/edgecache".into()
}
fn default_storage_size() -> DiskSize {
    DiskSize::Size(ByteSize::gib(10))
}
fn default_direct_io() -> ByteSize {
    ByteSize::kib(4)
}

/// Memory, CPU and workers of each cache pod.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesSpec {
    /// Memory limit (and request) of the cache container: the pod's cgroup limit, from which the
    /// data plane sizes its RAM tier. At least 64MiB. Default: `2GiB`.
    #[serde(default = "default_memory")]
    pub memory: ByteSize,
    /// CPU limit (and request) of the cache container, as a Kubernetes quantity (`4`, `500m`).
    /// Whole CPUs give a Guaranteed pod that the static CPU manager pins. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$"))]
    pub cpu: Option<String>,
    /// Worker threads per pod; 0 means one per CPU the pod may run on. Default: 0.
    #[serde(default)]
    #[schemars(range(max = 1024))]
    pub workers: u32,
    /// RAM tier size. Default: unset (planned from the memory limit, after headroom).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_tier: Option<ByteSize>,
    /// Part of the memory limit kept free for buffers and connections, in percent. Default: 25.
    #[serde(default = "default_headroom")]
    #[schemars(range(max = 90))]
    pub headroom_percent: u8,
}

impl Default for ResourcesSpec {
    fn default() -> Self {
        Self {
            memory: default_memory(),
            cpu: None,
            workers: 0,
            ram_tier: None,
            headroom_percent: default_headroom(),
        }
    }
}

fn default_memory() -> ByteSize {
    ByteSize::gib(2)
}
fn default_headroom() -> u8 {
    25
}

/// Connection steering.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SteeringSpec {
    /// `queue` (by NIC receive queue, for ADQ), `cpu`, `hash`, `incoming-cpu` or `off`.
    /// Default: `off`.
    #[serde(default)]
    pub mode: SteeringMode,
    /// Refuse to start a pod whose steering cannot be set up, instead of falling back to `off`.
    /// Default: false (best effort).
    #[serde(default)]
    pub required: bool,
    /// Subtracted from the NIC queue index before it picks a worker: 1 for real NIC drivers,
    /// 0 on veth. Default: 1.
    #[serde(default = "default_queue_offset")]
    #[schemars(range(max = 1))]
    pub queue_offset: u32,
}

impl Default for SteeringSpec {
    fn default() -> Self {
        Self {
            mode: SteeringMode::Off,
            required: false,
            queue_offset: default_queue_offset(),
        }
    }
}

fn default_queue_offset() -> u32 {
    1
}

/// Caching policy overrides.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheSpec {
    /// Freshness for cacheable responses that carry none. Default: unset (no default TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_ttl: Option<Duration>,
    /// Largest object stored; larger responses are proxied without being stored. At most
    /// `storage.size`. Default: `1GiB`, or an eighth of `storage.size` when that is less (a
    /// `512MiB` store keeps objects of up to `64MiB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_object_size: Option<ByteSize>,
    /// Responses with Set-Cookie: `store`, `no-store-unless-public` or `never-store`.
    /// Default: `no-store-unless-public`.
    #[serde(default)]
    pub cookie_policy: CookiePolicy,
    /// Ignore `Cache-Control: no-cache` and `Pragma: no-cache` from clients. Default: false.
    #[serde(default)]
    pub ignore_client_no_cache: bool,
    /// Allow heuristic freshness from Last-Modified. Default: true.
    #[serde(default = "default_true")]
    pub heuristic_freshness: bool,
    /// Name of this cache in Via and Cache-Status headers. Default: `edgecache`.
    #[serde(default = "default_cache_name")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    pub name: String,
    /// Store responses with neither Content-Length nor chunked framing (their end is the
    /// origin closing, which a dropped connection fakes). Default: false: forwarded, not stored.
    #[serde(default)]
    pub store_close_delimited: bool,
    /// Variants (responses selected by Vary) kept per URL; one more drops the oldest, so
    /// `Vary: User-Agent` cannot grow a key without bound. Default: 32.
    #[serde(default = "default_max_variants")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_variants_per_key: u32,
    /// How long requests for a key whose response could not be stored go straight to the
    /// origin, without waiting on one another (hit-for-pass); `0s` turns it off. Default: `10s`.
    #[serde(default = "default_hit_for_pass")]
    pub hit_for_pass: Duration,
    /// Purge rules (EdgeCachePurges, `POST /purge`) each pod keeps in force at most; a purge
    /// past it is refused (507) until older rules go. Default: 10000.
    #[serde(default = "default_max_purge_rules")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_purge_rules: u32,
}

impl Default for CacheSpec {
    fn default() -> Self {
        Self {
            default_ttl: None,
            max_object_size: None,
            cookie_policy: CookiePolicy::NoStoreUnlessPublic,
            ignore_client_no_cache: false,
            heuristic_freshness: true,
            name: default_cache_name(),
            store_close_delimited: false,
            max_variants_per_key: default_max_variants(),
            hit_for_pass: default_hit_for_pass(),
            max_purge_rules: default_max_purge_rules(),
        }
    }
}

/// `cache.maxObjectSize` when it is not set: [`MAX_OBJECT_SIZE_DEFAULT`], or an eighth of
/// `storage.size` when that is less (`auto`: the default; the size is known only at start).
pub fn default_max_object_size(storage: DiskSize) -> ByteSize {
    match storage.size() {
        Some(s) if s.bytes() / 8 < MAX_OBJECT_SIZE_DEFAULT.bytes() => ByteSize::b(s.bytes() / 8),
        _ => MAX_OBJECT_SIZE_DEFAULT,
    }
}

/// `cache.maxObjectSize` when it is not set and `storage.size` is at least 8 times it.
pub const MAX_OBJECT_SIZE_DEFAULT: ByteSize = ByteSize::gib(1);

impl EdgeCacheSpec {
    /// `cache.maxObjectSize` in effect: as set, or derived from `storage.size`
    /// ([`default_max_object_size`]).
    pub fn max_object_size(&self) -> ByteSize {
        self.cache
            .max_object_size
            .unwrap_or_else(|| default_max_object_size(self.storage.size))
    }
}
fn default_max_variants() -> u32 {
    StorageConfig::default().max_variants_per_key
}
fn default_hit_for_pass() -> Duration {
    CachePolicyConfig::default().hit_for_pass
}
fn default_max_purge_rules() -> u32 {
    CachePolicyConfig::default().max_purge_rules
}
fn default_cache_name() -> String {
    "edgecache".into()
}

/// Per-client timeouts and connection caps of the data plane.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientsSpec {
    /// Time allowed for a whole request head, from its first byte. Default: `10s`.
    #[serde(default = "default_header_timeout")]
    pub header_timeout: Duration,
    /// How long an idle keep-alive connection stays open. Default: `60s`.
    #[serde(default = "default_client_idle_timeout")]
    pub idle_timeout: Duration,
    /// A response the client takes no byte of for this long is dropped. Default: `30s`.
    #[serde(default = "default_write_timeout")]
    pub write_timeout: Duration,
    /// The same, shorter, while requests on a worker wait for I/O buffer memory (a stalled
    /// reader holds its response's buffers); `writeTimeout` when that is shorter. Default: `5s`.
    #[serde(default = "default_write_timeout_under_pressure")]
    pub write_timeout_under_pressure: Duration,
    /// Open connections per client address; more are refused. Default: 256.
    #[serde(default = "default_per_ip")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_connections_per_ip: u32,
    /// Open connections per worker; more are refused. 0: derived from the memory limit.
    /// Default: 0.
    #[serde(default)]
    #[schemars(range(max = 1000000))]
    pub max_connections_per_worker: u32,
    /// Large hits one client address may stream from disk at once on a worker; more wait.
    /// 0: work-conserving, from the worker's I/O buffers (every address gets its share at once,
    /// and one address may use them all while no other waits). A number: a hard cap. Default: 0.
    #[serde(default)]
    #[schemars(range(max = 1000000))]
    pub max_disk_streams_per_ip: u32,
    /// Open connections to the admin port per client address; one more takes the place of the
    /// oldest idle one, so idle connections cannot lock out the probes. At most 64 (the admin
    /// port holds 64 in all). Default: 16.
    #[serde(default = "default_admin_per_ip")]
    #[schemars(range(min = 1, max = 64))]
    pub max_admin_connections_per_ip: u32,
}

impl Default for ClientsSpec {
    fn default() -> Self {
        Self {
            header_timeout: default_header_timeout(),
            idle_timeout: default_client_idle_timeout(),
            write_timeout: default_write_timeout(),
            write_timeout_under_pressure: default_write_timeout_under_pressure(),
            max_connections_per_ip: default_per_ip(),
            max_connections_per_worker: 0,
            max_disk_streams_per_ip: 0,
            max_admin_connections_per_ip: default_admin_per_ip(),
        }
    }
}

// The data plane's defaults, so the two cannot drift apart.
fn default_header_timeout() -> Duration {
    ClientLimitsConfig::default().header_timeout
}
fn default_client_idle_timeout() -> Duration {
    ClientLimitsConfig::default().idle_timeout
}
fn default_write_timeout() -> Duration {
    ClientLimitsConfig::default().write_timeout
}
fn default_write_timeout_under_pressure() -> Duration {
    ClientLimitsConfig::default().write_timeout_under_pressure
}
fn default_per_ip() -> u32 {
    ClientLimitsConfig::default().max_connections_per_ip
}
fn default_admin_per_ip() -> u32 {
    ClientLimitsConfig::default().max_admin_connections_per_ip
}

/// Ports and networking.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// Port clients connect to. Default: 8080.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Admin port (`/healthz`, `/readyz`, `/metrics`). Default: 9090.
    #[serde(default = "default_admin_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub admin_port: u16,
    /// Run the pods in the node's network namespace; needed for `queue` steering (ADQ queues are
    /// on the host NIC). Default: false.
    #[serde(default)]
    pub host_network: bool,
    /// Type of the Service in front of the pods. Default: `ClusterIP`.
    #[serde(default)]
    pub service_type: ServiceType,
    /// Where the Service sends traffic from inside the cluster: to any node's cache pod
    /// (`Cluster`) or only to the cache pod on the client's own node (`Local`: no extra hop, and
    /// each node's cache serves its own node's clients; a node without a cache pod drops them).
    /// Default: `Cluster`.
    #[serde(default)]
    pub internal_traffic_policy: TrafficPolicy,
}

/// A Service's internal traffic policy.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, JsonSchema)]
pub enum TrafficPolicy {
    /// Any ready endpoint in the cluster.
    #[default]
    Cluster,
    /// Only endpoints on the client's node.
    Local,
}

impl TrafficPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "Cluster",
            Self::Local => "Local",
        }
    }
}

impl Default for NetworkSpec {
    fn default() -> Self {
        Self {
            port: default_port(),
            admin_port: default_admin_port(),
            host_network: false,
            service_type: ServiceType::ClusterIP,
            internal_traffic_policy: TrafficPolicy::Cluster,
        }
    }
}

fn default_port() -> u16 {
    8080
}
fn default_admin_port() -> u16 {
    9090
}

/// Most certificates one EdgeCache may name.
pub const TLS_CERTIFICATES_MAX: usize = 64;
/// Default of `tls.port`.
pub const TLS_PORT_DEFAULT: u16 = 8443;

/// TLS termination on a second listener.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Port of the TLS listener: the container port and the Service port `https`. It must
    /// differ from `network.port` and `network.adminPort`. Default: 8443.
    #[serde(default = "default_tls_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Secrets of type `kubernetes.io/tls` (keys `tls.crt` and `tls.key`, as cert-manager
    /// writes them) in the EdgeCache's namespace, each named once. The first is the default
    /// certificate (clients without SNI, or with a name no certificate has); the data plane
    /// picks the others by SNI from the names in each certificate. Each Secret is mounted
    /// whole, so a renewed certificate reaches the pods (which reload it) without a restart.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new(
        "self.all(c, self.exists_one(d, d.secretName == c.secretName))"
    ).message("each Secret may be named once"))]
    pub certificates: Vec<TlsCertificateSpec>,
    /// The oldest TLS version accepted: `"1.2"` or `"1.3"` (quoted: unquoted YAML reads a
    /// number). Default: `"1.2"`.
    #[serde(default)]
    pub min_version: TlsVersion,
    /// Answer plain-HTTP requests with a redirect (308) to HTTPS. Default: false.
    #[serde(default)]
    pub redirect_http: bool,
    /// Time a client has to finish its handshake. Default: unset (`10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_timeout: Option<Duration>,
}

fn default_tls_port() -> u16 {
    TLS_PORT_DEFAULT
}

/// One certificate: a Secret of type `kubernetes.io/tls`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsCertificateSpec {
    /// Name of the Secret, in the EdgeCache's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub secret_name: String,
}

/// HTTP/2 to clients. The limits a client is told default to 0: derived from the pod's memory
/// plan, so that its HTTP/2 connections at their worst fit the memory limit.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Http2Spec {
    /// Serve HTTP/2. Default: true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Streams a client may have open at once on a connection, up to 1000000. Default: 0 (from
    /// the memory plan: 4 to 128).
    #[serde(default)]
    #[schemars(range(max = 1000000))]
    pub max_concurrent_streams: u32,
    /// The largest header list (decoded) a client may send: 0, or `1KiB` to `16MiB`. Default: 0
    /// (from the memory plan: `8KiB` to `32KiB`).
    #[serde(default)]
    pub max_header_list_size: ByteSize,
    /// Flow-control window of each stream: 0, or `65535` to `2GiB` - 1 bytes. Default: 0 (the
    /// connection window, at most `1MiB`).
    #[serde(default)]
    pub stream_window: ByteSize,
    /// Flow-control window of a whole connection, the request DATA it may hold: 0, or `65535`
    /// to `2GiB` - 1 bytes. Default: 0 (from the memory plan: `64KiB` to `4MiB`).
    #[serde(default)]
    pub connection_window: ByteSize,
    /// A PING goes to a connection nothing arrived on for this long; `0s`: never.
    /// Default: `20s`.
    #[serde(default = "default_h2_keep_alive_interval")]
    pub keep_alive_interval: Duration,
    /// A connection whose PING is not answered within this is closed. Default: `10s`.
    #[serde(default = "default_h2_keep_alive_timeout")]
    pub keep_alive_timeout: Duration,
}

impl Default for Http2Spec {
    fn default() -> Self {
        let d = Http2Config::default();
        Self {
            enabled: true,
            max_concurrent_streams: d.max_concurrent_streams,
            max_header_list_size: d.max_header_list_size,
            stream_window: d.stream_window,
            connection_window: d.connection_window,
            keep_alive_interval: d.keep_alive_interval,
            keep_alive_timeout: d.keep_alive_timeout,
        }
    }
}

// The data plane's defaults, so the two cannot drift apart.
fn default_h2_keep_alive_interval() -> Duration {
    Http2Config::default().keep_alive_interval
}
fn default_h2_keep_alive_timeout() -> Duration {
    Http2Config::default().keep_alive_timeout
}

/// The access log.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessLogSpec {
    /// `json`, `combined` or `"off"` (quoted: YAML 1.1 reads a bare off as false).
    /// Default: `json`.
    #[serde(default)]
    pub format: AccessLogFormat,
    // Unset rather than a schema default of 1.0, which Helm's copy of the CRD (fromYaml, toYaml)
    // would turn into the integer 1.
    /// The share of requests logged, from 0 to 1. Default: unset (1: every request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub sample: Option<f64>,
}

impl AccessLogSpec {
    /// The share logged: `sample`, or the data plane's default.
    pub fn effective_sample(&self) -> f64 {
        self.sample.unwrap_or(AccessLogConfig::default().sample)
    }
}

/// Traces of the data plane's requests.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracingSpec {
    /// The OTLP/HTTP endpoint (plain HTTP), e.g. `http://otel-collector.observability:4318`
    /// (spans are POSTed to its `/v1/traces`) or `http://host:port/path` (used as is).
    pub endpoint: String,
    /// The share of new traces sampled, from 0 to 1; a request whose `traceparent` says
    /// whether it is sampled follows it. Default: unset (1: every new trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub sample: Option<f64>,
}

impl TracingSpec {
    /// The data plane's `tracing` section of this spec (none: off).
    pub fn config(spec: Option<&TracingSpec>) -> TracingConfig {
        match spec {
            None => TracingConfig::default(),
            Some(t) => TracingConfig {
                endpoint: Some(t.endpoint.clone()),
                sample: t.sample.unwrap_or(TracingConfig::default().sample),
            },
        }
    }
}

/// Kubernetes Service types the operator creates.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, JsonSchema)]
pub enum ServiceType {
    /// A cluster-internal virtual IP.
    #[default]
    ClusterIP,
    /// A port on every node.
    NodePort,
    /// An external load balancer.
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}

/// Sharding the cache across the nodes. The operator keeps the peer list (one line per ready
/// cache pod: its node name and pod IP with the client port) in the ConfigMap `NAME-peers`,
/// mounted into every pod; the pods reload it when it changes, and since it is not part of the
/// config hash a node joining or leaving restarts no pod.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardingSpec {
    /// `consistent`: each key has one owner among the ready nodes, a node that misses a key it
    /// does not own asks the owner, so N nodes hold about N times the distinct objects of one
    /// and the fleet makes one origin fetch per object. `off`: every node caches what its own
    /// clients ask for. Default: unset, which means `consistent`, so sharding is on as soon as
    /// more than one node matches the placement. The operator does not switch the config
    /// between the modes as nodes come and go (a config change restarts every pod): with one
    /// node in the peer list that node owns every key, which is what `off` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_sharding_mode")]
    pub mode: Option<ShardingMode>,
    /// Requests within `popularityWindow` for an object another node owns after which this
    /// node keeps a copy too (one hot object then stops crossing the network on every request);
    /// `0`: never keep a copy. Only when sharding is on. Default: unset (4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000000))]
    pub popularity_threshold: Option<u32>,
    /// The window of `popularityThreshold`. Only when sharding is on. Default: unset (`60s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub popularity_window: Option<Duration>,
    /// Time allowed from a request to the owner node until its response head; past it the node
    /// fetches from the origin itself and marks the owner down for a while. The owner answers a
    /// miss once its origin did, so keep it above the origin's usual first-byte time. Only when
    /// sharding is on. Default: unset (`5s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_timeout: Option<Duration>,
}

/// The schema of an optional [`ShardingMode`], written out: kube's hoisting of `Option<enum>`
/// would replace the field's description with the enum's.
fn optional_sharding_mode(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": [ShardingMode::Off.as_str(), ShardingMode::Consistent.as_str()],
        "nullable": true,
    })
}

impl ShardingSpec {
    /// The mode in effect: `consistent` unless the spec says `off`.
    pub fn effective_mode(&self) -> ShardingMode {
        self.mode.unwrap_or(ShardingMode::Consistent)
    }

    /// The data plane's sharding settings for this spec (without `nodeName` and `peersFile`,
    /// which the pod and the mount supply): the data plane's defaults for the unset knobs.
    pub fn to_config(&self) -> ShardingConfig {
        let d = ShardingConfig::default();
        ShardingConfig {
            mode: self.effective_mode(),
            popularity_threshold: self.popularity_threshold.unwrap_or(d.popularity_threshold),
            popularity_window: self.popularity_window.unwrap_or(d.popularity_window),
            peer_timeout: self.peer_timeout.unwrap_or(d.peer_timeout),
            ..d
        }
    }
}

/// Privileges of the cache container.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecuritySpec {
    /// `privileged` (the default) or `capabilities`: only the capabilities the data plane uses
    /// (BPF for BPF steering, NET_ADMIN, IPC_LOCK, SYS_RESOURCE, and NET_BIND_SERVICE when a port
    /// is below 1024), everything else dropped,
    /// seccomp Unconfined so io_uring works, or the Localhost profile named below.
    #[serde(default)]
    pub mode: SecurityMode,
    /// A seccomp profile on the node (relative to the kubelet's seccomp directory) that allows
    /// io_uring and bpf; only with mode `capabilities`. Default: unset (Unconfined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub seccomp_localhost_profile: Option<String>,
}

/// How the cache container gets its privileges.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SecurityMode {
    /// A privileged container (seccomp Unconfined, every capability).
    #[default]
    Privileged,
    /// An explicit capability list; everything else dropped.
    Capabilities,
}

/// Image pull policy.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, JsonSchema)]
pub enum PullPolicy {
    /// Pull on every pod start.
    Always,
    /// Pull when the node does not have the image.
    #[default]
    IfNotPresent,
    /// Never pull.
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// Pod replacement when the spec changes. The operator always uses a rolling update with
/// `maxSurge: 0`: a node's old pod is gone before its new one starts, so the two never share the
/// node's cache directory and port.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategySpec {
    /// Nodes whose cache may be down at once during a rollout: a count or a percentage
    /// (`10%`). Default: 1.
    // Not nullable (kube marks an optional int-or-string nullable): the API server then drops a
    // `null` and applies the default instead of storing it. A null stored under an older CRD
    // reads as the default.
    #[serde(
        default = "default_max_unavailable",
        deserialize_with = "max_unavailable_or_default"
    )]
    #[schemars(extend("nullable" = false))]
    pub max_unavailable: IntOrString,
}

impl Default for UpdateStrategySpec {
    fn default() -> Self {
        Self {
            max_unavailable: default_max_unavailable(),
        }
    }
}

fn default_max_unavailable() -> IntOrString {
    IntOrString::Int(1)
}

fn max_unavailable_or_default<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<IntOrString, D::Error> {
    Ok(Option::<IntOrString>::deserialize(d)?.unwrap_or_else(default_max_unavailable))
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EdgeCacheStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Nodes that should run a cache pod.
    #[serde(default)]
    pub desired_nodes: i32,
    /// Nodes whose cache pod is ready.
    #[serde(default)]
    pub ready_nodes: i32,
    /// Nodes running a pod of the current spec.
    #[serde(default)]
    pub updated_nodes: i32,
    /// Nodes whose cache pod has been ready for minReadySeconds.
    #[serde(default)]
    pub available_nodes: i32,
    /// `READY/DESIRED` nodes, e.g. `2/3`: the `Nodes` column of `kubectl get ec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_ready: Option<String>,
    /// sha256 of the data-plane config in effect (also on the pod template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Sharding as it is in effect: the mode and the peer list the pods were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<ShardingStatus>,
    /// One entry per cache pod, sorted by node: whether it is ready and, when not, why (the
    /// kubelet's reason and message: an image that cannot be pulled, a crash loop with the last
    /// termination message, a pod the scheduler cannot place). Keyed by pod: while a node's
    /// pod is replaced, its old and new pod are both listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["pod".into()]))]
    pub nodes: Vec<NodeStatus>,
}

/// Sharding as the operator set it up.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardingStatus {
    /// `consistent` or `off`.
    pub mode: String,
    /// Nodes in the peer list (the ready cache pods).
    #[serde(default)]
    pub peers: i32,
}

/// One cache pod, as the operator last saw it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node the pod runs on (its name in the peer list); the pod's name while it is not
    /// scheduled yet.
    pub node: String,
    /// The pod.
    pub pod: String,
    /// Whether the pod is ready (its readiness probe passes).
    pub ready: bool,
    /// Why it is not ready, as one word: `ImagePullBackOff`, `ErrImagePull`,
    /// `CrashLoopBackOff`, `Unschedulable`, `ContainerCreating`, `Terminating`, `NotReady`...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the kubelet or scheduler said (for a crash loop, the last termination message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Restarts of the cache container.
    #[serde(default)]
    pub restarts: i32,
    /// The disk I/O engine the pod runs (`uring` or `threads`), from its `/metrics`, read at
    /// each reconcile of a ready pod. Unset when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_engine: Option<String>,
    /// The connection steering in effect (it may have fallen back to `off`), from `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<String>,
    /// Bytes used in the node's disk store, from `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<i64>,
    /// Objects in the node's disk store, from `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<i64>,
    /// Hits (RAM or disk) over requests looked up in the cache since the pod started, from
    /// `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_ratio: Option<f64>,
}

impl EdgeCacheStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Condition types the operator maintains.
pub mod condition {
    /// Every selected node runs a ready pod of the current spec.
    pub const READY: &str = "Ready";
    /// A rollout is under way.
    pub const PROGRESSING: &str = "Progressing";
    /// Something needs a human: an invalid spec, no matching node, a failing apply.
    pub const DEGRADED: &str = "Degraded";
    /// The operator reaches every ready pod's admin port (metrics, purges); false with reason
    /// `AdminUnreachable` naming the pods it cannot connect to (a NetworkPolicy, a node firewall).
    pub const ADMIN_REACHABLE: &str = "AdminReachable";
}
