//! The data-plane config: what the operator renders into the ConfigMap and what
//! `edgecache-dataplane serve` reads. This file is the contract between the two; both binaries
//! depend on it and a round-trip test guards it.
//!
//! YAML keys are camelCase. Every field has a default, so an empty document is a valid config
//! except for the origin URL, which has none. Unknown fields are errors (see [`parse`]).

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::quantity::{ByteSize, DiskSize, Duration};

mod compression;
mod facing;
mod shape;
mod sites;

pub use compression::{CompressionConfig, CompressionLevels, LEVEL_RANGES};
pub use facing::{
    AccessLogConfig, AccessLogFormat, CertificateFiles, Http2Config, TlsConfig, TlsVersion,
    TracingConfig, check_otlp_endpoint,
};
pub use sites::{
    Balance, HealthCheckConfig, OriginTlsConfig, SiteConfig, SitePolicyConfig, check_host,
};

/// The version of this config format. Bumped only on incompatible changes.
pub const CONFIG_VERSION: u32 = 1;
/// Open connections the admin listener holds in all (`clients.maxAdminConnectionsPerIp` is at
/// most this).
pub const ADMIN_CONNECTIONS_MAX: u32 = 64;
/// Most purge rules `cache.maxPurgeRules` may allow in force (each is a line of the rules file,
/// written whole at every purge, and an entry of the index every lookup reads).
pub const PURGE_RULES_MAX: u32 = 1_000_000;

/// The whole data-plane config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct DataplaneConfig {
    /// Format version. Default: 1 (the only one).
    pub version: u32,
    /// Where clients connect. Default: `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// TLS termination on a second listener. Default: off.
    pub tls: TlsConfig,
    /// HTTP/2 to clients (ALPN `h2` over TLS, prior-knowledge h2c in plain). Default: on.
    pub http2: Http2Config,
    /// One line per request to stdout. Default: JSON, every request.
    pub access_log: AccessLogConfig,
    /// OpenTelemetry traces of requests, sent as OTLP/HTTP. Default: off.
    pub tracing: TracingConfig,
    /// Admin endpoint (`/healthz`, `/readyz`, `/metrics`, PURGE). Default: `0.0.0.0:9090`.
    pub admin: SocketAddr,
    /// Who may call the admin endpoint's mutating calls (PURGE, debug hooks).
    pub admin_access: AdminAccessConfig,
    /// Limits that keep one client from hurting another: timeouts and connection caps.
    pub clients: ClientLimitsConfig,
    /// The origin this cache fronts: `origin.url` is the one-site shorthand (every Host, or,
    /// beside `sites`, every Host no site names), and its timeouts apply to every site.
    pub origin: OriginConfig,
    /// Sites: hostnames each with its own origin pool and policy overrides. Default: none.
    pub sites: Vec<SiteConfig>,
    /// The disk store on the node's NVMe.
    pub storage: StorageConfig,
    /// Memory sizing. By default everything is derived from the cgroup memory limit.
    pub memory: MemoryConfig,
    /// Worker threads and connection steering.
    pub workers: WorkersConfig,
    /// Caching policy overrides. The defaults conform to RFC 9111.
    pub cache: CachePolicyConfig,
    /// Compression for clients that accept gzip, brotli or zstd, of every site (a site's
    /// `compression` overrides it field by field). Default: on for the compressible types.
    pub compression: CompressionConfig,
    /// Sharding the cache across the EdgeCache's nodes. Default: off.
    pub sharding: ShardingConfig,
    /// How long SIGTERM waits for in-flight responses before exiting. Default: `30s`.
    pub shutdown_grace: Duration,
    /// Log filter (`error`, `warn`, `info`, `debug`, `trace`, or a tracing filter). Default: `info`.
    pub log: String,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        Self {
            version: CONFIG_VERSION,
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            tls: TlsConfig::default(),
            http2: Http2Config::default(),
            access_log: AccessLogConfig::default(),
            tracing: TracingConfig::default(),
            admin: SocketAddr::from(([0, 0, 0, 0], 9090)),
            admin_access: AdminAccessConfig::default(),
            clients: ClientLimitsConfig::default(),
            origin: OriginConfig::default(),
            sites: Vec::new(),
            storage: StorageConfig::default(),
            memory: MemoryConfig::default(),
            workers: WorkersConfig::default(),
            cache: CachePolicyConfig::default(),
            compression: CompressionConfig::default(),
            sharding: ShardingConfig::default(),
            shutdown_grace: Duration::secs(30),
            log: "info".into(),
        }
    }
}

/// Access to the admin endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct AdminAccessConfig {
    /// A file holding the bearer token that PURGE and every other mutating admin call need
    /// (`Authorization: Bearer TOKEN`); surrounding whitespace is trimmed and the file is read
    /// again on every such call, so a rotated Secret takes effect at once. Default: unset, and
    /// then mutating calls are accepted from loopback peers only.
    pub token_file: Option<String>,
    /// `/metrics` readable without the token. Default: true.
    pub metrics_public: bool,
}

impl Default for AdminAccessConfig {
    fn default() -> Self {
        Self {
            token_file: None,
            metrics_public: true,
        }
    }
}

/// Per-client timeouts and connection caps, on the client listener and the admin listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct ClientLimitsConfig {
    /// Time allowed for a whole request head, from its first byte. Default: `10s`.
    pub header_timeout: Duration,
    /// How long an idle keep-alive connection is kept open. Default: `60s`.
    pub idle_timeout: Duration,
    /// Longest time a response may make no progress into a client's socket before the
    /// connection is dropped. Default: `30s`.
    pub write_timeout: Duration,
    /// The same, shorter, while requests on the worker wait for I/O buffer memory (a stalled
    /// reader holds its response's buffers); `writeTimeout` when that is shorter. Default: `5s`.
    pub write_timeout_under_pressure: Duration,
    /// Open connections per client IP address, all workers together; more are refused.
    /// Default: 256.
    pub max_connections_per_ip: u32,
    /// Open connections per worker; more are refused. Default: 0, derived from the memory plan.
    pub max_connections_per_worker: u32,
    /// Large hits one client address may stream from disk at once on a worker. Default: 0,
    /// work-conserving, from the worker's I/O buffers: every address gets its share at once
    /// (half the buffers at two 256 KiB chunks a stream: 32 for 32 MiB), and one address may
    /// take the whole pool (a stream for each chunk: 128 for 32 MiB) while no stream of another
    /// address waits; when others wait, a slot freed goes to the waiting address that holds the
    /// fewest, and addresses past their share wait. A number: a hard cap per address, kept even
    /// when nobody else wants the disk. Hits from the RAM tier take no stream.
    pub max_disk_streams_per_ip: u32,
    /// Open connections to the admin listener per client address (1 to 64; the listener holds
    /// 64 in all). A connection past this, or past the 64, takes the place of the oldest one
    /// with no request in progress (its address's, or the busiest address's), so idle
    /// connections cannot lock probes out; it is refused only when none is idle. Default: 16.
    pub max_admin_connections_per_ip: u32,
}

impl Default for ClientLimitsConfig {
    fn default() -> Self {
        Self {
            header_timeout: Duration::secs(10),
            idle_timeout: Duration::secs(60),
            write_timeout: Duration::secs(30),
            write_timeout_under_pressure: Duration::secs(5),
            max_connections_per_ip: 256,
            max_connections_per_worker: 0,
            max_disk_streams_per_ip: 0,
            max_admin_connections_per_ip: 16,
        }
    }
}

/// The origin server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct OriginConfig {
    /// `http://host[:port]` of the origin. Required; no default.
    pub url: String,
    /// What Host header the origin sees. Default: `preserve` (the client's Host).
    pub host_header: HostHeader,
    /// Time allowed to open a TCP connection to the origin. Default: `2s`.
    pub connect_timeout: Duration,
    /// Time allowed from sending the request to the origin's response head. Default: `30s`.
    pub first_byte_timeout: Duration,
    /// Longest silence allowed while the origin sends a body. Default: `30s`.
    pub idle_timeout: Duration,
    /// Idle pooled connections kept per worker. Default: 64.
    pub max_idle_connections: u32,
}

impl Default for OriginConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            host_header: HostHeader::Preserve,
            connect_timeout: Duration::secs(2),
            first_byte_timeout: Duration::secs(30),
            idle_timeout: Duration::secs(30),
            max_idle_connections: 64,
        }
    }
}

/// The Host header sent to the origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum HostHeader {
    /// Keep the client's Host header.
    #[default]
    Preserve,
    /// Use the origin URL's authority.
    Origin,
    /// Use this exact value.
    Rewrite(String),
}

/// Which disk I/O engine reads and writes the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum IoEngineKind {
    /// io_uring when the kernel and seccomp allow it, else the thread pool.
    #[default]
    Auto,
    /// io_uring only; refuse to start without it.
    Uring,
    /// A pool of threads doing pread/pwrite (nginx's `aio threads`).
    Threads,
}

impl IoEngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Uring => "uring",
            Self::Threads => "threads",
        }
    }
}

/// Which misses are written to the disk (`storage.admission`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionPolicy {
    /// Every storable miss.
    All,
    /// While the store has room (it holds less than its capacity less two segments), every
    /// storable miss; once it is full, a miss whose URL was missed recently (a bounded Bloom
    /// filter of the misses of about two cache lifetimes): a URL's first miss is then served,
    /// and shared with concurrent requests, but not written, so one-hit wonders stay off the
    /// flash; one more miss for every URL that does come back.
    #[default]
    SecondHit,
}

impl AdmissionPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::SecondHit => "second-hit",
        }
    }
}

/// The disk store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct StorageConfig {
    /// Directory of the cache on the node's NVMe. Default: `/var/cache/edgecache`.
    pub dir: String,
    /// Disk budget for cached objects, or `auto`: the filesystem's free space at start less a
    /// tenth of the filesystem (at least 1 GiB). Default: `10GiB`.
    pub size: DiskSize,
    /// Objects at or above this size are read with O_DIRECT (nginx's `directio`). Default: `4KiB`
    /// (every hit of 4 KiB or more reads the disk, not the page cache: what the benchmarks ran).
    pub direct_io_threshold: ByteSize,
    /// The I/O engine. Default: `auto`.
    pub io_engine: IoEngineKind,
    /// Largest object stored; larger responses are proxied without being stored. Objects
    /// larger than `sliceSize` are stored as slices, so this may exceed a store segment and the
    /// disk budget (a larger object is proxied). Default: `64GiB`.
    pub max_object_size: ByteSize,
    /// Objects larger than this are cached as slices of this size (one stored object each,
    /// fetched from the origin with aligned Range requests as they are asked for); smaller
    /// ones are stored whole. `0` turns slicing off. At most a store record (about a segment,
    /// 64 MiB); a larger value turns slicing off too. Default: `4MiB`.
    pub slice_size: ByteSize,
    /// Most disk reads in flight at once, all workers together (the device queue depth the
    /// cache asks for; read-ahead only starts while a slot is free). Default: 128, what an NVMe
    /// drive needs for its bandwidth; lower it for a device that gains nothing from depth.
    pub reads_in_flight: u32,
    /// Check a large body against its block checksums on every disk read. Default: `false`:
    /// each record is checked on its first whole read after the start (which finds records torn
    /// by a crash), and later reads of it in the same run trust the disk (whose own ECC covers
    /// the medium), like Traffic Server, which checks nothing by default. Headers, keys and
    /// segment epochs are checked on every read either way.
    pub verify_every_read: bool,
    /// Variants (responses selected by Vary) kept per URL, 1 to 1024; one more drops the
    /// oldest. Default: 32.
    pub max_variants_per_key: u32,
    /// Which misses are written to the disk: `all`, or `second-hit` (once the store is full, a
    /// URL's first miss is served but not written; see `AdmissionPolicy`). Default:
    /// `second-hit`.
    pub admission: AdmissionPolicy,
    /// Give objects read since they were written a second life when their segment's turn for
    /// eviction comes: they are copied to the head of the log (up to half a segment each time)
    /// instead of evicted with it. More disk writes for a higher hit ratio. Default: `true`.
    pub reinsertion: bool,
}

/// Default of `storage.readsInFlight` (data-plane config and EdgeCache spec).
pub const READS_IN_FLIGHT_DEFAULT: u32 = 128;
/// Largest `storage.readsInFlight` accepted (the smallest is 1).
pub const READS_IN_FLIGHT_MAX: u32 = 4096;
/// The rule a bad `storage.readsInFlight` breaks, as both validators say it.
pub const READS_IN_FLIGHT_RULE: &str = "must be between 1 and 4096";

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            dir: "/var/cache/edgecache".into(),
            size: DiskSize::Size(ByteSize::gib(10)),
            direct_io_threshold: ByteSize::kib(4),
            io_engine: IoEngineKind::Auto,
            max_object_size: ByteSize::gib(64),
            slice_size: ByteSize::mib(4),
            reads_in_flight: READS_IN_FLIGHT_DEFAULT,
            verify_every_read: false,
            max_variants_per_key: 32,
            admission: AdmissionPolicy::SecondHit,
            reinsertion: true,
        }
    }
}

/// Memory sizing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryConfig {
    /// Use this limit instead of the cgroup's. Default: unset (read the cgroup limit).
    pub limit: Option<ByteSize>,
    /// RAM tier size. Default: unset (planned from the limit, after headroom).
    pub ram_tier: Option<ByteSize>,
    /// Part of the limit kept free for buffers, connections and the allocator. Default: 25 (%).
    pub headroom_percent: u8,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            limit: None,
            ram_tier: None,
            headroom_percent: 25,
        }
    }
}

/// How connections are spread over workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum SteeringMode {
    /// By the NIC receive queue (`skb->queue_mapping`), for Intel ADQ. Needs CAP_BPF.
    Queue,
    /// By the CPU that handled the SYN (SK_REUSEPORT program). Needs CAP_BPF.
    Cpu,
    /// By the kernel's flow hash through a REUSEPORT_SOCKARRAY. Needs CAP_BPF.
    Hash,
    /// SO_INCOMING_CPU on each listener; no BPF, no privilege.
    IncomingCpu,
    /// The kernel's default SO_REUSEPORT hash.
    #[default]
    Off,
}

impl SteeringMode {
    pub const ALL: [SteeringMode; 5] = [
        Self::Queue,
        Self::Cpu,
        Self::Hash,
        Self::IncomingCpu,
        Self::Off,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Cpu => "cpu",
            Self::Hash => "hash",
            Self::IncomingCpu => "incoming-cpu",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for SteeringMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SteeringMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown steering mode `{s}` (expected queue, cpu, hash, incoming-cpu or off)"
                )
            })
    }
}

/// Workers and steering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct WorkersConfig {
    /// Worker threads, each pinned to one CPU. Default: 0 = one per CPU the process may run on.
    pub count: u32,
    /// Steering mode. Default: `off`.
    pub steering: SteeringMode,
    /// Refuse to start when the steering mode cannot be set up. Default: false (fall back to `off`).
    pub steering_required: bool,
    /// Subtracted from `skb->queue_mapping` before it picks a worker; real NIC drivers record
    /// queue + 1, so 1 there, 0 on veth. Default: 1.
    pub queue_offset: u32,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        Self {
            count: 0,
            steering: SteeringMode::Off,
            steering_required: false,
            queue_offset: 1,
        }
    }
}

/// What to do with responses that carry Set-Cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum CookiePolicy {
    /// Store them as any other response (RFC 9111 allows it); Set-Cookie is stored and replayed.
    Store,
    /// Do not store responses that set cookies, unless they are explicitly `public`.
    #[default]
    NoStoreUnlessPublic,
    /// Never store responses that set cookies.
    NeverStore,
}

/// Caching policy overrides. The defaults conform to RFC 9111.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct CachePolicyConfig {
    /// Freshness for cacheable responses that carry none. Default: unset (no default TTL).
    pub default_ttl: Option<Duration>,
    /// Ignore `Cache-Control: no-cache` and `Pragma: no-cache` from clients. Default: false.
    pub ignore_client_no_cache: bool,
    /// Responses with Set-Cookie. Default: `no-store-unless-public`.
    pub cookie_policy: CookiePolicy,
    /// Allow heuristic freshness (a fraction of the time since Last-Modified). Default: true.
    pub heuristic_freshness: bool,
    /// Name of this cache in Via and Cache-Status. Default: `edgecache`.
    pub name: String,
    /// Store responses with neither Content-Length nor chunked framing, whose end is the
    /// origin closing the connection (a dropped connection looks the same). Default: false:
    /// they are forwarded as they come and not stored.
    pub store_close_delimited: bool,
    /// How long later requests for a key whose response could not be stored (no-store,
    /// private, not cacheable...) go straight to the origin instead of waiting on one another's
    /// fetch; a `private` or `no-store` response's own max-age takes precedence. `0s`: off.
    /// Default: `10s`.
    pub hit_for_pass: Duration,
    /// Purge rules (`POST /purge` on the admin port, EdgeCachePurges) in force at most; a purge
    /// that would add more is refused with 507 until older rules go (each goes once the store
    /// has reclaimed what was stored before it). 1 to 1,000,000. Default: 10000.
    pub max_purge_rules: u32,
}

impl Default for CachePolicyConfig {
    fn default() -> Self {
        Self {
            default_ttl: None,
            ignore_client_no_cache: false,
            cookie_policy: CookiePolicy::NoStoreUnlessPublic,
            heuristic_freshness: true,
            name: "edgecache".into(),
            store_close_delimited: false,
            hit_for_pass: Duration::secs(10),
            max_purge_rules: 10_000,
        }
    }
}

/// Whether the nodes of an EdgeCache share one cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum ShardingMode {
    /// Every node caches what its own clients ask for.
    #[default]
    Off,
    /// Each key has one owner among the nodes (rendezvous hash of the node names): a node that
    /// does not own a missed key asks its owner, which fills it from the origin.
    Consistent,
}

impl ShardingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Consistent => "consistent",
        }
    }
}

/// Sharding: the nodes of an EdgeCache hold one cache between them, each key on its owner, so
/// N nodes hold about N times the distinct objects of one and the fleet makes one origin fetch
/// per object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct ShardingConfig {
    /// `off` or `consistent`. Default: `off`.
    pub mode: ShardingMode,
    /// This node's name in the peers file. It differs from pod to pod, so the operator leaves it
    /// out of the shared ConfigMap and each pod gets it from `serve --node-name` or the
    /// `EDGECACHE_NODE_NAME` environment variable (the downward API's `spec.nodeName`).
    /// Required with `consistent`. Default: unset.
    pub node_name: Option<String>,
    /// The peers file: one `NAME ADDRESS` a line (the node's name and its data-plane
    /// `IP:PORT`, this node among them), blank lines and `#` comments allowed. Read again when
    /// it changes (a ConfigMap update, an atomic replace); a file with a mistake is refused and
    /// the previous list kept. Required with `consistent`. Default: unset.
    pub peers_file: Option<String>,
    /// Requests for an object another node owns, within `popularityWindow`, after which this
    /// node keeps a copy of it too (so one hot object does not send every request across the
    /// network). `0`: never keep a copy. Default: 4.
    pub popularity_threshold: u32,
    /// The window of `popularityThreshold`. Default: `60s`.
    pub popularity_window: Duration,
    /// Time allowed to connect to a peer. Default: `500ms`.
    pub peer_connect_timeout: Duration,
    /// Time allowed from sending a request to a peer until its response head; past it the
    /// node fetches from the origin itself and marks the peer down. A peer answers a miss once
    /// its origin did, so keep it above the origin's usual first-byte time. Default: `5s`.
    pub peer_timeout: Duration,
    /// A file holding the key the nodes of one EdgeCache share (the operator mounts it from a
    /// Secret; at least 32 bytes). Every hop to an owner then carries an HMAC-SHA256 of the hop
    /// under it, with a timestamp, and a request whose hop header has no valid one is served as
    /// any client's (the header removed): a client cannot pose as a peer. Unset: hop headers
    /// are trusted as they come, fit only for a cache no client reaches directly. Default:
    /// unset.
    pub peer_key_file: Option<String>,
}

impl Default for ShardingConfig {
    fn default() -> Self {
        Self {
            mode: ShardingMode::Off,
            node_name: None,
            peers_file: None,
            popularity_threshold: 4,
            popularity_window: Duration::secs(60),
            peer_connect_timeout: Duration::millis(500),
            peer_timeout: Duration::secs(5),
            peer_key_file: None,
        }
    }
}

/// A socket address as the data plane's address flags (`--listen`, `--admin`, `--tls-listen`)
/// take it: `IP:PORT`, an IPv6 address in brackets (`[fd00::5]:9090`) or not (`fd00::5:9090`,
/// split at the last colon). The second form is what the operator's `--admin $(POD_IP):PORT`
/// expands to in a pod whose IP is IPv6 (Kubernetes substitutes the bare address), so one pod
/// template serves IPv4 and IPv6 clusters alike (issue 35 defect 6).
pub fn parse_socket_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let bad = || format!("{s:?} is not IP:PORT (e.g. 0.0.0.0:8080, [::]:8080 or fd00::5:9090)");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let ip: std::net::Ipv6Addr = host.parse().map_err(|_| bad())?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok(SocketAddr::from((ip, port)))
}

/// Whether `name` can name a node in a peers file: 1 to 253 visible ASCII characters, no `#`.
pub fn check_node_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 253
        || !name.bytes().all(|b| b.is_ascii_graphic() && b != b'#')
    {
        return Err("must be 1 to 253 visible ASCII characters other than `#`".into());
    }
    Ok(())
}

/// One problem found in a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Field path, e.g. `storage.size`.
    pub path: String,
    /// The offending value as written, when there is one.
    pub value: Option<String>,
    /// Why it is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}: {} (got {v})", self.path, self.reason),
            None => write!(f, "{}: {}", self.path, self.reason),
        }
    }
}

/// Every problem found in a config: unknown fields and fields of the wrong type in document
/// order, then invalid values in field order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(f, "{n} error{} in config:", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

fn err(path: &str, value: Option<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        value,
        reason: reason.into(),
    }
}

/// Parse and validate a YAML config, reporting every unknown field, every field of the wrong
/// type and every invalid value in one go.
pub fn parse(yaml: &str) -> Result<DataplaneConfig, ConfigErrors> {
    let (cfg, shape) = parse_shape(yaml)?;
    check(cfg, shape)
}

/// Read a YAML config as far as its shape allows, for a caller that overlays more settings
/// (command-line flags) before [`check`]: the config built from its fields of the right type
/// (the others keep their defaults), and a problem for every unknown field and every field of
/// the wrong type, in document order. Values are not judged. An error when the document as a
/// whole cannot be read (not YAML, or not a mapping).
pub fn parse_shape(yaml: &str) -> Result<(DataplaneConfig, Vec<ConfigError>), ConfigErrors> {
    shape::read(yaml)
}

/// [`validate`] `cfg`, reporting its invalid values after the `shape` problems from
/// [`parse_shape`], except for a field those already report.
pub fn check(
    cfg: DataplaneConfig,
    shape: Vec<ConfigError>,
) -> Result<DataplaneConfig, ConfigErrors> {
    let mut errors = shape;
    if let Err(values) = validate(&cfg) {
        let fresh: Vec<ConfigError> = (values.0.into_iter())
            .filter(|v| !errors.iter().any(|s| shape::related(&v.path, &s.path)))
            .collect();
        errors.extend(fresh);
    }
    if errors.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The value problems of `sites` alone, and of `origin_url` beside them (the part of
/// [`validate`] an `EdgeCache`'s `spec.sites` maps onto field by field: the paths, such as
/// `sites[0].hosts[1]`, are the spec's too).
pub fn validate_sites(sites: &[SiteConfig], origin_url: &str) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    sites::validate(sites, origin_url, &mut errors);
    errors
}

/// Check the values of a config that has the right shape; every problem is reported.
pub fn validate(cfg: &DataplaneConfig) -> Result<(), ConfigErrors> {
    let mut errors = Vec::new();
    facing::validate(
        &cfg.tls,
        &cfg.http2,
        &cfg.access_log,
        &cfg.tracing,
        &mut errors,
    );
    if cfg.version != CONFIG_VERSION {
        errors.push(err(
            "version",
            Some(cfg.version.to_string()),
            format!("only version {CONFIG_VERSION} is supported"),
        ));
    }
    sites::validate(&cfg.sites, &cfg.origin.url, &mut errors);
    compression::validate(&cfg.compression, "compression", &mut errors);
    // Beside sites the origin URL may be left out.
    if (!cfg.origin.url.is_empty() || cfg.sites.is_empty())
        && let Err(why) = check_origin_url(&cfg.origin.url)
    {
        errors.push(err(
            "origin.url",
            Some(format!("{:?}", cfg.origin.url)),
            why,
        ));
    }
    if let HostHeader::Rewrite(h) = &cfg.origin.host_header
        && (h.is_empty()
            || h.bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b == b'/'))
    {
        errors.push(err(
            "origin.hostHeader.rewrite",
            Some(format!("{h:?}")),
            "must be a host name with an optional port",
        ));
    }
    for (path, d) in [
        ("origin.connectTimeout", cfg.origin.connect_timeout),
        ("origin.firstByteTimeout", cfg.origin.first_byte_timeout),
        ("origin.idleTimeout", cfg.origin.idle_timeout),
        ("clients.headerTimeout", cfg.clients.header_timeout),
        ("clients.idleTimeout", cfg.clients.idle_timeout),
        ("clients.writeTimeout", cfg.clients.write_timeout),
        (
            "clients.writeTimeoutUnderPressure",
            cfg.clients.write_timeout_under_pressure,
        ),
    ] {
        if d.get().is_zero() {
            errors.push(err(path, Some(d.to_string()), "must be greater than zero"));
        }
    }

    if cfg.clients.max_connections_per_ip == 0 {
        errors.push(err(
            "clients.maxConnectionsPerIp",
            Some("0".into()),
            "must be at least 1",
        ));
    }
    if !(1..=ADMIN_CONNECTIONS_MAX).contains(&cfg.clients.max_admin_connections_per_ip) {
        errors.push(err(
            "clients.maxAdminConnectionsPerIp",
            Some(cfg.clients.max_admin_connections_per_ip.to_string()),
            format!(
                "must be 1 to {ADMIN_CONNECTIONS_MAX} (the admin listener holds \
                 {ADMIN_CONNECTIONS_MAX} connections in all)"
            ),
        ));
    }
    if !(1..=PURGE_RULES_MAX).contains(&cfg.cache.max_purge_rules) {
        errors.push(err(
            "cache.maxPurgeRules",
            Some(cfg.cache.max_purge_rules.to_string()),
            format!("must be 1 to {PURGE_RULES_MAX}"),
        ));
    }
    if cfg
        .admin_access
        .token_file
        .as_deref()
        .is_some_and(|f| !f.starts_with('/'))
    {
        errors.push(err(
            "adminAccess.tokenFile",
            cfg.admin_access
                .token_file
                .as_ref()
                .map(|f| format!("{f:?}")),
            "must be an absolute path",
        ));
    }
    if cfg.listen == cfg.admin {
        errors.push(err(
            "admin",
            Some(cfg.admin.to_string()),
            "must differ from `listen`",
        ));
    }
    if cfg.storage.dir.is_empty() || !cfg.storage.dir.starts_with('/') {
        errors.push(err(
            "storage.dir",
            Some(format!("{:?}", cfg.storage.dir)),
            "must be an absolute path",
        ));
    }
    if cfg
        .storage
        .size
        .size()
        .is_some_and(|s| s < ByteSize::mib(64))
    {
        errors.push(err(
            "storage.size",
            Some(cfg.storage.size.to_string()),
            "must be at least 64MiB",
        ));
    }
    let t = cfg.storage.direct_io_threshold.bytes();
    if t == 0 || !t.is_multiple_of(4096) {
        errors.push(err(
            "storage.directIoThreshold",
            Some(cfg.storage.direct_io_threshold.to_string()),
            "must be a positive multiple of 4096",
        ));
    }
    // Not bounded by storage.size: an object larger than the disk budget is proxied.
    if cfg.storage.max_object_size.bytes() == 0 {
        errors.push(err(
            "storage.maxObjectSize",
            Some(cfg.storage.max_object_size.to_string()),
            "must be positive",
        ));
    }
    if !(1..=READS_IN_FLIGHT_MAX).contains(&cfg.storage.reads_in_flight) {
        errors.push(err(
            "storage.readsInFlight",
            Some(cfg.storage.reads_in_flight.to_string()),
            READS_IN_FLIGHT_RULE,
        ));
    }
    if !(1..=1024).contains(&cfg.storage.max_variants_per_key) {
        errors.push(err(
            "storage.maxVariantsPerKey",
            Some(cfg.storage.max_variants_per_key.to_string()),
            "must be 1 to 1024",
        ));
    }
    if let Some(l) = cfg.memory.limit
        && l < ByteSize::mib(32)
    {
        errors.push(err(
            "memory.limit",
            Some(l.to_string()),
            "must be at least 32MiB",
        ));
    }
    if cfg.memory.headroom_percent > 90 {
        errors.push(err(
            "memory.headroomPercent",
            Some(cfg.memory.headroom_percent.to_string()),
            "must be at most 90",
        ));
    }
    if cfg.workers.count > 1024 {
        errors.push(err(
            "workers.count",
            Some(cfg.workers.count.to_string()),
            "must be at most 1024 (0 means one per CPU)",
        ));
    }
    if cfg.workers.queue_offset > 1 {
        errors.push(err(
            "workers.queueOffset",
            Some(cfg.workers.queue_offset.to_string()),
            "must be 0 (veth, loopback) or 1 (NIC drivers)",
        ));
    }
    if cfg.cache.name.is_empty()
        || !cfg
            .cache
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        errors.push(err(
            "cache.name",
            Some(format!("{:?}", cfg.cache.name)),
            "must be a token of letters, digits, `-`, `_` or `.`",
        ));
    }
    validate_sharding(&cfg.sharding, &mut errors);
    if cfg.log.trim().is_empty() {
        errors.push(err(
            "log",
            Some(format!("{:?}", cfg.log)),
            "must not be empty",
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

fn validate_sharding(s: &ShardingConfig, errors: &mut Vec<ConfigError>) {
    let on = s.mode == ShardingMode::Consistent;
    match &s.node_name {
        None if on => errors.push(err(
            "sharding.nodeName",
            None,
            "is required when sharding.mode is consistent (or --node-name, EDGECACHE_NODE_NAME)",
        )),
        Some(n) => {
            if let Err(why) = check_node_name(n) {
                errors.push(err("sharding.nodeName", Some(format!("{n:?}")), why));
            }
        }
        None => {}
    }
    match &s.peers_file {
        None if on => errors.push(err(
            "sharding.peersFile",
            None,
            "is required when sharding.mode is consistent (or --peers)",
        )),
        Some(f) if !f.starts_with('/') => errors.push(err(
            "sharding.peersFile",
            Some(format!("{f:?}")),
            "must be an absolute path",
        )),
        _ => {}
    }
    for (path, d) in [
        ("sharding.popularityWindow", s.popularity_window),
        ("sharding.peerConnectTimeout", s.peer_connect_timeout),
        ("sharding.peerTimeout", s.peer_timeout),
    ] {
        if d.get().is_zero() {
            errors.push(err(path, Some(d.to_string()), "must be greater than zero"));
        }
    }
}

/// An origin URL must be `http://host[:port][/]` or `https://host[:port][/]`.
pub fn check_origin_url(url: &str) -> Result<(), String> {
    if url.is_empty() {
        return Err("is required (e.g. http://origin.example:8080)".into());
    }
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err("must start with http:// or https://".into());
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err("must be http://host[:port] with no path, query or credentials".into());
    }
    let (host, port) = match authority.strip_prefix('[') {
        // An IPv6 literal: [addr] or [addr]:port.
        Some(v6) => {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err("has an unclosed IPv6 bracket".into());
            };
            match after {
                "" => (addr, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (addr, Some(port)),
                    None => return Err("must be http://host[:port]".into()),
                },
            }
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("has no host".into());
    }
    if let Some(port) = port
        && !port.parse::<u16>().is_ok_and(|p| p > 0)
    {
        return Err(format!("has an invalid port `{port}`"));
    }
    Ok(())
}

/// Serialize a config to the YAML the data plane reads.
pub fn to_yaml(cfg: &DataplaneConfig) -> String {
    yaml_serde::to_string(cfg).unwrap_or_else(|e| format!("# cannot serialize config: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> DataplaneConfig {
        DataplaneConfig {
            origin: OriginConfig {
                url: "http://127.0.0.1:8000".into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn address_flags_take_ipv6_with_or_without_brackets() {
        let ok = |s: &str| parse_socket_addr(s).unwrap().to_string();
        assert_eq!(ok("10.0.0.7:9090"), "10.0.0.7:9090");
        assert_eq!(ok("[fd00::5]:9090"), "[fd00::5]:9090");
        // `$(POD_IP):9090` in a pod whose IP is IPv6.
        assert_eq!(ok("fd00::5:9090"), "[fd00::5]:9090");
        assert_eq!(ok("2001:db8:0:1::a:8080"), "[2001:db8:0:1::a]:8080");
        assert_eq!(ok("[::]:8080"), "[::]:8080");
        for bad in [
            "fd00::5",
            "10.0.0.7",
            "10.0.0.7:99999",
            "here:80",
            ":80",
            "",
        ] {
            assert!(parse_socket_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn minimal_document_gets_defaults() {
        let cfg = parse("origin:\n  url: http://origin:80\n").unwrap();
        assert_eq!(cfg.storage.size, DiskSize::Size(ByteSize::gib(10)));
        assert_eq!(cfg.workers.steering, SteeringMode::Off);
        assert_eq!(cfg.origin.url, "http://origin:80");
    }

    #[test]
    fn round_trip_through_yaml() {
        let mut cfg = valid();
        cfg.storage.size = ByteSize::gib(3).into();
        cfg.workers.steering = SteeringMode::IncomingCpu;
        cfg.origin.host_header = HostHeader::Rewrite("www.example".into());
        cfg.cache.default_ttl = Some(Duration::secs(60));
        cfg.memory.limit = Some(ByteSize::mib(256));
        let text = to_yaml(&cfg);
        assert_eq!(parse(&text).unwrap(), cfg, "{text}");
    }

    #[test]
    fn every_unknown_field_is_reported_with_its_path() {
        let e = parse("origin:\n  url: http://o\n  tls: true\nstorage:\n  sizee: 1GiB\nfoo: 1\n")
            .unwrap_err();
        let paths: Vec<_> = e.0.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["origin.tls", "storage.sizee", "foo"], "{e}");
        assert!(e.0.iter().all(|e| e.reason == "unknown field"));
    }

    #[test]
    fn the_storage_size_may_be_auto() {
        let cfg = parse("origin:\n  url: http://o\nstorage:\n  size: auto\n").unwrap();
        assert_eq!(cfg.storage.size, DiskSize::Auto);
        assert_eq!(parse(&to_yaml(&cfg)).unwrap(), cfg, "round trip");
        // Nothing to compare the largest object with: any positive one is accepted.
        let cfg =
            parse("origin:\n  url: http://o\nstorage:\n  size: auto\n  maxObjectSize: 64GiB\n")
                .unwrap();
        assert_eq!(cfg.storage.max_object_size, ByteSize::gib(64));
    }

    #[test]
    fn type_error_names_path_and_value() {
        let e = parse("origin:\n  url: http://o\nstorage:\n  size: lots\n").unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(
            e.0[0].to_string(),
            "storage.size: must be a size like 10GiB or 500MiB, or auto (got lots)"
        );
    }

    #[test]
    fn every_kind_of_mistake_is_reported_in_one_run_each_once() {
        // An unknown field, a wrong type inside a known section, a bad variant, a negative
        // size and a bad value (the CLI test has the issue's own example).
        let yaml = "origin:\n  url: http://o:80\nstorage:\n  sizee: 1GiB\n  ioEngine: fast\nclients:\n  maxConnectionsPerIp: many\nmemory:\n  limit: -1\nworkers:\n  queueOffset: 7\n";
        let e = parse(yaml).unwrap_err();
        let lines: Vec<String> = e.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "storage.sizee: unknown field",
                "storage.ioEngine: must be one of auto, uring, threads (got fast)",
                "clients.maxConnectionsPerIp: must be a whole number (got many)",
                "memory.limit: must be a size like 10GiB or 500MiB (got -1)",
                "workers.queueOffset: must be 0 (veth, loopback) or 1 (NIC drivers) (got 7)",
            ],
            "{e}"
        );
    }

    #[test]
    fn type_errors_are_in_the_users_words() {
        for (yaml, want) in [
            (
                "memory:\n  limit: -5",
                "memory.limit: must be a size like 10GiB or 500MiB (got -5)",
            ),
            (
                "cache:\n  hitForPass: soon",
                "cache.hitForPass: must be a duration like 30s, 500ms or 5m (got soon)",
            ),
            (
                "workers:\n  count: -1",
                "workers.count: must be a whole number (got -1)",
            ),
            (
                "memory:\n  headroomPercent: 300",
                "memory.headroomPercent: must be a whole number from 0 to 255 (got 300)",
            ),
            (
                "storage:\n  verifyEveryRead: yes",
                "storage.verifyEveryRead: must be true or false (got yes)",
            ),
            (
                "storage:\n  ioEngine: fast",
                "storage.ioEngine: must be one of auto, uring, threads (got fast)",
            ),
            (
                "storage:\n  admission: third-hit",
                "storage.admission: must be one of all, second-hit (got third-hit)",
            ),
            (
                "listen: 8080",
                "listen: must be an address like 0.0.0.0:8080 (got 8080)",
            ),
            (
                "listen: here",
                "listen: must be an address like 0.0.0.0:8080 (got here)",
            ),
            (
                "workers: 4",
                "workers: must be a mapping of its fields (got 4)",
            ),
            (
                "workers:\n  steering: 5",
                "workers.steering: must be one of queue, cpu, hash, incoming-cpu, off (got 5)",
            ),
            (
                "cache:\n  cookiePolicy: [a]",
                "cache.cookiePolicy: must be one of store, no-store-unless-public, never-store (got a list)",
            ),
            (
                "storage:\n  dir: [a]",
                "storage.dir: must be text (got a list)",
            ),
            (
                "storage:\n  size:",
                "storage.size: must be a size like 10GiB or 500MiB, or auto (got nothing)",
            ),
            (
                "origin:\n  hostHeader: bogus",
                "origin.hostHeader: must be one of preserve, origin, rewrite (got bogus)",
            ),
            (
                "origin:\n  hostHeader: !rewrite [a]",
                "origin.hostHeader.rewrite: must be text (got a list)",
            ),
            (
                "origin:\n  hostHeader: !bogus a",
                "origin.hostHeader: must be one of preserve, origin, rewrite (got !bogus a)",
            ),
            (
                "workers:\n  steering: !queue 1",
                "workers.steering.queue: must be the name alone, with no value (got 1)",
            ),
        ] {
            let e = parse(&format!("{yaml}\n")).unwrap_err();
            let lines: Vec<String> = e.0.iter().map(ToString::to_string).collect();
            assert_eq!(
                lines,
                [
                    want,
                    "origin.url: is required (e.g. http://origin.example:8080) (got \"\")"
                ],
                "{yaml}"
            );
        }
    }

    #[test]
    fn numbers_and_booleans_are_text_where_text_is_expected() {
        let cfg = parse("origin:\n  url: http://o\n  hostHeader: !rewrite 8080\ncache:\n  name: 2024\nlog: true\n")
            .unwrap();
        assert_eq!(cfg.origin.host_header, HostHeader::Rewrite("8080".into()));
        assert_eq!(cfg.cache.name, "2024");
        assert_eq!(cfg.log, "true");
    }

    #[test]
    fn a_field_with_a_type_error_is_not_judged_again_as_a_value() {
        // The bad URL is reported as a type error, not again as "origin.url is required".
        let e = parse("origin:\n  url: [a, b]\n").unwrap_err();
        let paths: Vec<_> = e.0.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["origin.url"], "{e}");
    }

    #[test]
    fn a_document_that_is_not_a_mapping_is_one_error() {
        let e = parse("- a\n- b\n").unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].path, "(document)");
        let e = parse("origin: [\n").unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].path, "(document)");
    }

    #[test]
    fn a_write_timeout_shorter_than_the_one_under_pressure_is_valid() {
        let ok = parse("origin:\n  url: http://o:80\nclients:\n  writeTimeout: 1s\n").unwrap();
        assert_eq!(ok.clients.write_timeout_under_pressure.to_string(), "5s");
        let e = parse("origin:\n  url: http://o:80\nclients:\n  writeTimeoutUnderPressure: 0s\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("clients.writeTimeoutUnderPressure: must be greater than zero"),
            "{e}"
        );
    }

    #[test]
    fn admin_connection_and_purge_rule_caps_have_defaults_and_bounds() {
        let c = parse("origin:\n  url: http://o:80\n").unwrap();
        assert_eq!(c.clients.max_admin_connections_per_ip, 16);
        assert_eq!(c.cache.max_purge_rules, 10_000);
        let c = parse(
            "origin:\n  url: http://o:80\nclients:\n  maxAdminConnectionsPerIp: 64\ncache:\n  maxPurgeRules: 1\n",
        )
        .unwrap();
        assert_eq!(c.clients.max_admin_connections_per_ip, 64);
        assert_eq!(c.cache.max_purge_rules, 1);
        let e = parse(
            "origin:\n  url: http://o:80\nclients:\n  maxAdminConnectionsPerIp: 65\ncache:\n  maxPurgeRules: 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("clients.maxAdminConnectionsPerIp: must be 1 to 64")
                && e.contains("cache.maxPurgeRules: must be 1 to 1000000 (got 0)"),
            "{e}"
        );
    }

    #[test]
    fn every_invalid_value_is_reported() {
        let yaml = "origin:\n  url: ftp://o\n  connectTimeout: 0s\nstorage:\n  dir: relative\n  size: 1MiB\n  directIoThreshold: 1000\nworkers:\n  queueOffset: 7\n";
        let e = parse(yaml).unwrap_err();
        let paths: Vec<_> = e.0.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "origin.url",
                "origin.connectTimeout",
                "storage.dir",
                "storage.size",
                "storage.directIoThreshold",
                "workers.queueOffset"
            ],
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("storage.size: must be at least 64MiB (got 1MiB)"),
            "{text}"
        );
    }

    #[test]
    fn origin_urls() {
        for ok in [
            "http://a",
            "http://a:80",
            "http://a.b.c:8080/",
            "http://127.0.0.1:8000",
            "http://[::1]:80",
            "http://[::1]",
            "https://a",
            "https://a.b:8443",
        ] {
            assert_eq!(check_origin_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a:80",
            "ftp://a",
            "https://a/b",
            "http://",
            "http://a/b",
            "http://a:0",
            "http://a:99999",
            "http://u@a",
            "http://:80",
        ] {
            assert!(check_origin_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sharding_is_off_by_default_and_round_trips() {
        let cfg = parse("origin:\n  url: http://o:80\n").unwrap();
        assert_eq!(cfg.sharding, ShardingConfig::default());
        assert_eq!(cfg.sharding.mode, ShardingMode::Off);
        let mut cfg = valid();
        cfg.sharding = ShardingConfig {
            mode: ShardingMode::Consistent,
            node_name: Some("node-a".into()),
            peers_file: Some("/etc/edgecache/peers/peers".into()),
            popularity_threshold: 2,
            popularity_window: Duration::secs(30),
            peer_connect_timeout: Duration::millis(250),
            peer_timeout: Duration::secs(2),
            peer_key_file: Some("/etc/edgecache/peer-key/key".into()),
        };
        let text = to_yaml(&cfg);
        assert_eq!(parse(&text).unwrap(), cfg, "{text}");
    }

    #[test]
    fn sharding_mistakes_are_reported_with_their_paths() {
        for (yaml, want) in [
            (
                "mode: consistent\n  peerTimeout: 0s",
                [
                    "sharding.nodeName: is required when sharding.mode is consistent (or --node-name, EDGECACHE_NODE_NAME)",
                    "sharding.peersFile: is required when sharding.mode is consistent (or --peers)",
                    "sharding.peerTimeout: must be greater than zero (got 0ms)",
                ],
            ),
            (
                "mode: sharded\n  nodeName: a b\n  peersFile: peers.txt",
                [
                    "sharding.mode: must be one of off, consistent (got sharded)",
                    "sharding.nodeName: must be 1 to 253 visible ASCII characters other than `#` (got \"a b\")",
                    "sharding.peersFile: must be an absolute path (got \"peers.txt\")",
                ],
            ),
        ] {
            let e = parse(&format!(
                "origin:\n  url: http://o:80\nsharding:\n  {yaml}\n"
            ))
            .unwrap_err();
            let lines: Vec<String> = e.0.iter().map(ToString::to_string).collect();
            assert_eq!(lines, want, "{yaml}");
        }
    }

    #[test]
    fn steering_modes_parse() {
        for m in SteeringMode::ALL {
            assert_eq!(m.as_str().parse::<SteeringMode>(), Ok(m));
        }
        assert!("adq".parse::<SteeringMode>().is_err());
    }
}
