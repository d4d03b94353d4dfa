//! Loading the data-plane config: an optional YAML file (the operator's ConfigMap), then the
//! command-line flags on top of it. The result is validated as a whole, so a bad config never
//! starts a half-working server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use edgecache_api::dataplane::{
    self, AccessLogFormat, CertificateFiles, CompressionLevels, ConfigErrors, DataplaneConfig,
    IoEngineKind, ShardingMode, SiteConfig, StorageConfig,
};
use edgecache_api::{ByteSize, DiskSize, SteeringMode};

/// The flags of `edgecache-dataplane serve` that override the file.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ServeFlags {
    /// YAML config file (the operator's ConfigMap). Flags override its values.
    #[arg(long, short = 'c', env = "EDGECACHE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Origin URL, http://host[:port].
    #[arg(long)]
    pub origin: Option<String>,
    /// Address clients connect to (IP:PORT; an IPv6 address with or without brackets).
    #[arg(long, value_parser = dataplane::parse_socket_addr)]
    pub listen: Option<SocketAddr>,
    /// Admin address (/healthz, /readyz, /metrics, PURGE): IP:PORT, an IPv6 address with or
    /// without brackets (the operator passes `$(POD_IP):PORT`, which is unbracketed in a pod
    /// whose IP is IPv6).
    #[arg(long, value_parser = dataplane::parse_socket_addr)]
    pub admin: Option<SocketAddr>,
    /// File holding the bearer token that PURGE and the other mutating admin calls need.
    #[arg(long)]
    pub admin_token_file: Option<PathBuf>,
    /// Directory of the disk store.
    #[arg(long)]
    pub cache_dir: Option<String>,
    /// Disk budget, e.g. 1GiB, or auto (the filesystem's free space less a tenth of it).
    #[arg(long)]
    pub cache_size: Option<DiskSize>,
    /// Objects at or above this size are read with O_DIRECT, e.g. 64KiB.
    #[arg(long)]
    pub direct_io_threshold: Option<ByteSize>,
    /// Objects larger than this are cached as slices of this size, e.g. 4MiB (0: off).
    #[arg(long)]
    pub slice_size: Option<ByteSize>,
    /// Disk I/O engine: auto, uring or threads.
    #[arg(long, value_parser = parse_engine)]
    pub io_engine: Option<IoEngineKind>,
    /// Worker threads (0 = one per CPU the process may run on).
    #[arg(long)]
    pub workers: Option<u32>,
    /// Connection steering: queue, cpu, hash, incoming-cpu or off.
    #[arg(long)]
    pub steering: Option<SteeringMode>,
    /// Memory limit to plan with instead of the cgroup's, e.g. 256MiB.
    #[arg(long)]
    pub memory_limit: Option<ByteSize>,
    /// Freshness for responses that carry none, e.g. 60s (default: none).
    #[arg(long)]
    pub default_ttl: Option<edgecache_api::Duration>,
    /// Log filter, e.g. info or debug.
    #[arg(long)]
    pub log: Option<String>,
    /// This node's name in the peers file (sharding.nodeName).
    #[arg(long, env = "EDGECACHE_NODE_NAME")]
    pub node_name: Option<String>,
    /// Peers file, one `NAME ADDRESS` a line, reloaded when it changes; turns sharding on
    /// (sharding.peersFile, sharding.mode: consistent).
    #[arg(long)]
    pub peers: Option<PathBuf>,
    /// Address TLS clients connect to (tls.listen), e.g. 0.0.0.0:8443 (IPv6 with or without
    /// brackets).
    #[arg(long, value_parser = dataplane::parse_socket_addr)]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain; repeat with --tls-key for more certificates (chosen by SNI, the
    /// first the default). Replaces tls.certificates; reloaded when the files change.
    #[arg(long)]
    pub tls_cert: Vec<PathBuf>,
    /// PEM private key of the --tls-cert in the same position.
    #[arg(long)]
    pub tls_key: Vec<PathBuf>,
    /// Answer plain-HTTP requests with a 308 redirect to HTTPS (tls.redirectHttp).
    #[arg(long)]
    pub tls_redirect_http: bool,
    /// Serve HTTP/1.1 only (http2.enabled: false).
    #[arg(long)]
    pub no_http2: bool,
    /// A site: HOST=URL[,URL...], its hostname (or *.domain) and origin pool; repeat for more.
    /// Beside them, --origin is the default site for every other Host.
    #[arg(long, value_parser = parse_site)]
    pub site: Vec<SiteConfig>,
    /// Access log to stdout: json, combined or off (accessLog.format).
    #[arg(long, value_parser = parse_access_log)]
    pub access_log: Option<AccessLogFormat>,
    /// The share of requests in the access log, from 0 to 1 (accessLog.sample).
    #[arg(long)]
    pub access_log_sample: Option<f64>,
    /// OTLP/HTTP endpoint for traces, http://host:port (tracing.endpoint); turns tracing on.
    #[arg(long, env = "EDGECACHE_TRACE_ENDPOINT")]
    pub trace_endpoint: Option<String>,
    /// The share of new traces sampled, from 0 to 1 (tracing.sample).
    #[arg(long)]
    pub trace_sample: Option<f64>,
    /// The cache's own compression for clients that accept gzip, br or zstd: on or off
    /// (compression.enabled; sites' own settings still apply).
    #[arg(long, value_parser = parse_on_off)]
    pub compression: Option<bool>,
    /// Compression levels, e.g. gzip=4,br=5,zstd=6 (compression.levels).
    #[arg(long, value_parser = parse_levels)]
    pub compression_levels: Option<CompressionLevels>,
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{s}`: expected on or off")),
    }
}

/// `gzip=N,br=N,zstd=N`, any of them; the values are checked with the config.
fn parse_levels(s: &str) -> Result<CompressionLevels, String> {
    let mut levels = CompressionLevels::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, n) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}`: expected CODING=LEVEL"))?;
        let n: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: the level is no number"))?;
        match name.trim() {
            "gzip" => levels.gzip = Some(n),
            "br" => levels.br = Some(n),
            "zstd" => levels.zstd = Some(n),
            other => return Err(format!("`{other}`: expected gzip, br or zstd")),
        }
    }
    Ok(levels)
}

fn parse_site(s: &str) -> Result<SiteConfig, String> {
    let (host, urls) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected HOST=URL[,URL...]"))?;
    Ok(SiteConfig {
        hosts: vec![host.trim().to_ascii_lowercase()],
        origins: urls.split(',').map(|u| u.trim().to_string()).collect(),
        ..SiteConfig::default()
    })
}

fn parse_access_log(s: &str) -> Result<AccessLogFormat, String> {
    match s {
        "json" => Ok(AccessLogFormat::Json),
        "combined" => Ok(AccessLogFormat::Combined),
        "off" => Ok(AccessLogFormat::Off),
        _ => Err(format!(
            "unknown access log format `{s}` (expected json, combined or off)"
        )),
    }
}

fn parse_engine(s: &str) -> Result<IoEngineKind, String> {
    match s {
        "auto" => Ok(IoEngineKind::Auto),
        "uring" => Ok(IoEngineKind::Uring),
        "threads" => Ok(IoEngineKind::Threads),
        _ => Err(format!(
            "unknown I/O engine `{s}` (expected auto, uring or threads)"
        )),
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {errors}", path.display())]
    Invalid { path: PathBuf, errors: ConfigErrors },
    #[error("{0}")]
    InvalidFlags(ConfigErrors),
}

/// Read and check a config file on its own (`check-config`).
pub fn check_file(path: &Path) -> Result<DataplaneConfig, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    dataplane::parse(&text).map_err(|errors| LoadError::Invalid {
        path: path.to_owned(),
        errors,
    })
}

/// The file (if any) with the flags applied on top, validated as a whole. The file's unknown
/// fields and fields of the wrong type are reported with every invalid value, in one go.
pub fn load(flags: &ServeFlags) -> Result<DataplaneConfig, LoadError> {
    let (mut cfg, shape) = match &flags.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            dataplane::parse_shape(&text).map_err(|errors| LoadError::Invalid {
                path: path.clone(),
                errors,
            })?
        }
        None => (DataplaneConfig::default(), Vec::new()),
    };
    // Values are checked after the overlay, so a flag may supply a value the file leaves out
    // (e.g. the origin URL).
    apply_flags(&mut cfg, flags);
    let file_is_wrong = !shape.is_empty();
    dataplane::check(cfg, shape).map_err(|errors| match &flags.config {
        Some(path) if file_is_wrong => LoadError::Invalid {
            path: path.clone(),
            errors,
        },
        _ => LoadError::InvalidFlags(errors),
    })
}

fn apply_flags(cfg: &mut DataplaneConfig, f: &ServeFlags) {
    if let Some(v) = &f.origin {
        cfg.origin.url = v.clone();
    }
    if let Some(v) = f.listen {
        cfg.listen = v;
    }
    if let Some(v) = f.admin {
        cfg.admin = v;
    }
    if let Some(v) = &f.admin_token_file {
        cfg.admin_access.token_file = Some(absolute(&v.display().to_string()));
    }
    if let Some(v) = &f.cache_dir {
        cfg.storage.dir = absolute(v);
    }
    if let Some(v) = f.cache_size {
        cfg.storage.size = v;
        // The default largest object (64GiB) is for large disks; on a small one keep any single
        // object to a quarter of the budget.
        let default_max = StorageConfig::default().max_object_size;
        if let Some(v) = v.size()
            && cfg.storage.max_object_size == default_max
            && default_max.bytes() > v.bytes() / 4
        {
            cfg.storage.max_object_size = ByteSize(v.bytes() / 4);
        }
    }
    if let Some(v) = f.direct_io_threshold {
        cfg.storage.direct_io_threshold = v;
    }
    if let Some(v) = f.slice_size {
        cfg.storage.slice_size = v;
    }
    if let Some(v) = f.io_engine {
        cfg.storage.io_engine = v;
    }
    if let Some(v) = f.workers {
        cfg.workers.count = v;
    }
    if let Some(v) = f.steering {
        cfg.workers.steering = v;
    }
    if let Some(v) = f.memory_limit {
        cfg.memory.limit = Some(v);
    }
    if let Some(v) = f.default_ttl {
        cfg.cache.default_ttl = Some(v);
    }
    if let Some(v) = &f.log {
        cfg.log = v.clone();
    }
    if let Some(v) = &f.node_name {
        cfg.sharding.node_name = Some(v.clone());
    }
    if let Some(v) = &f.peers {
        cfg.sharding.peers_file = Some(absolute(&v.display().to_string()));
        cfg.sharding.mode = ShardingMode::Consistent;
    }
    if let Some(v) = f.tls_listen {
        cfg.tls.listen = Some(v);
    }
    if !f.tls_cert.is_empty() || !f.tls_key.is_empty() {
        // Paired by position; a missing half stays empty, which validation names.
        let n = f.tls_cert.len().max(f.tls_key.len());
        let path = |v: &[PathBuf], i: usize| {
            v.get(i)
                .map(|p| absolute(&p.display().to_string()))
                .unwrap_or_default()
        };
        cfg.tls.certificates = (0..n)
            .map(|i| CertificateFiles {
                cert: path(&f.tls_cert, i),
                key: path(&f.tls_key, i),
            })
            .collect();
    }
    if f.tls_redirect_http {
        cfg.tls.redirect_http = true;
    }
    if f.no_http2 {
        cfg.http2.enabled = false;
    }
    cfg.sites.extend(f.site.iter().cloned());
    if let Some(v) = f.access_log {
        cfg.access_log.format = v;
    }
    if let Some(v) = f.access_log_sample {
        cfg.access_log.sample = v;
    }
    if let Some(v) = &f.trace_endpoint {
        cfg.tracing.endpoint = Some(v.clone());
    }
    if let Some(v) = f.trace_sample {
        cfg.tracing.sample = v;
    }
    if let Some(v) = f.compression {
        cfg.compression.enabled = Some(v);
    }
    if let Some(l) = f.compression_levels {
        let c = &mut cfg.compression.levels;
        c.gzip = l.gzip.or(c.gzip);
        c.br = l.br.or(c.br);
        c.zstd = l.zstd.or(c.zstd);
    }
}

/// A relative cache dir on the command line is taken relative to the working directory.
fn absolute(dir: &str) -> String {
    let p = Path::new(dir);
    if p.is_absolute() {
        return dir.to_string();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(p).display().to_string())
        .unwrap_or_else(|_| dir.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn flags() -> ServeFlags {
        ServeFlags {
            origin: Some("http://127.0.0.1:8000".into()),
            listen: Some("127.0.0.1:8080".parse().unwrap()),
            admin: Some("127.0.0.1:9090".parse().unwrap()),
            cache_dir: Some("/tmp/ec".into()),
            cache_size: Some(ByteSize::gib(1).into()),
            ..Default::default()
        }
    }

    /// Issue 35 defect 6: `--admin $(POD_IP):9090` in a pod whose IP is IPv6 is `fd00::5:9090`.
    #[test]
    fn address_flags_take_an_unbracketed_ipv6_pod_ip() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            flags: ServeFlags,
        }
        let cli = Cli::try_parse_from([
            "serve",
            "--admin",
            "fd00:10:244::5:9090",
            "--listen",
            "[::]:8080",
            "--tls-listen",
            "10.0.0.7:8443",
        ])
        .unwrap();
        assert_eq!(
            cli.flags.admin,
            Some("[fd00:10:244::5]:9090".parse().unwrap())
        );
        assert_eq!(cli.flags.listen, Some("[::]:8080".parse().unwrap()));
        assert_eq!(cli.flags.tls_listen, Some("10.0.0.7:8443".parse().unwrap()));
        assert!(Cli::try_parse_from(["serve", "--admin", "fd00::5"]).is_err());
    }

    #[test]
    fn flags_alone_make_a_working_config() {
        let cfg = load(&flags()).unwrap();
        assert_eq!(cfg.origin.url, "http://127.0.0.1:8000");
        assert_eq!(cfg.storage.size, ByteSize::gib(1).into());
        assert_eq!(cfg.storage.max_object_size, ByteSize::mib(256));
        assert_eq!(cfg.storage.dir, "/tmp/ec");
    }

    #[test]
    fn flags_override_the_file() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            file,
            "origin:\n  url: http://file-origin:80\nworkers:\n  count: 3\n  steering: cpu"
        )
        .unwrap();
        let f = ServeFlags {
            config: Some(file.path().into()),
            steering: Some(SteeringMode::Off),
            ..flags()
        };
        let cfg = load(&f).unwrap();
        assert_eq!(cfg.origin.url, "http://127.0.0.1:8000");
        assert_eq!(cfg.workers.count, 3);
        assert_eq!(cfg.workers.steering, SteeringMode::Off);
    }

    #[test]
    fn a_flag_may_supply_what_the_file_leaves_out() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "storage:\n  size: 2GiB").unwrap();
        let f = ServeFlags {
            config: Some(file.path().into()),
            origin: Some("http://o:1".into()),
            ..Default::default()
        };
        assert_eq!(load(&f).unwrap().storage.size, ByteSize::gib(2).into());
    }

    #[test]
    fn the_cache_size_may_be_auto() {
        let f = ServeFlags {
            cache_size: Some("auto".parse().unwrap()),
            ..flags()
        };
        let cfg = load(&f).unwrap();
        assert_eq!(cfg.storage.size, DiskSize::Auto);
        // No size to take a quarter of: the default largest object stays.
        assert_eq!(cfg.storage.max_object_size, ByteSize::gib(64));
        let store = crate::contract::store_config(&cfg.storage, 0, 0);
        assert!(store.size_auto);
    }

    #[test]
    fn unknown_fields_in_the_file_stop_the_load() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "origin:\n  url: http://o:1\n  colour: blue").unwrap();
        let f = ServeFlags {
            config: Some(file.path().into()),
            ..Default::default()
        };
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("origin.colour: unknown field"), "{e}");
    }

    #[test]
    fn peers_and_node_name_flags_turn_sharding_on() {
        let f = ServeFlags {
            node_name: Some("node-a".into()),
            peers: Some("peers.txt".into()),
            ..flags()
        };
        let cfg = load(&f).unwrap();
        assert_eq!(cfg.sharding.mode, ShardingMode::Consistent);
        assert_eq!(cfg.sharding.node_name.as_deref(), Some("node-a"));
        let file = cfg.sharding.peers_file.unwrap();
        assert!(
            file.starts_with('/') && file.ends_with("/peers.txt"),
            "{file}"
        );
        // Without a name it is an error that says how to give one.
        let f = ServeFlags {
            peers: Some("/etc/peers".into()),
            ..flags()
        };
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("sharding.nodeName: is required"), "{e}");
        assert_eq!(load(&flags()).unwrap().sharding.mode, ShardingMode::Off);
    }

    #[test]
    fn access_log_flags_override_the_file_and_are_checked() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "accessLog:\n  format: combined\n  sample: 0.5").unwrap();
        let f = ServeFlags {
            config: Some(file.path().into()),
            access_log_sample: Some(0.25),
            ..flags()
        };
        let cfg = load(&f).unwrap();
        assert_eq!(cfg.access_log.format, AccessLogFormat::Combined);
        assert_eq!(cfg.access_log.sample, 0.25);
        let f = ServeFlags {
            access_log: Some(AccessLogFormat::Off),
            ..flags()
        };
        assert_eq!(load(&f).unwrap().access_log.format, AccessLogFormat::Off);
        let f = ServeFlags {
            access_log_sample: Some(1.5),
            ..flags()
        };
        let e = load(&f).unwrap_err().to_string();
        assert!(
            e.contains("accessLog.sample: must be between 0 and 1"),
            "{e}"
        );
        assert!(parse_access_log("xml").is_err());
    }

    #[test]
    fn trace_flags_override_the_file_and_are_checked() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            file,
            "tracing:\n  endpoint: http://otel:4318\n  sample: 0.5"
        )
        .unwrap();
        let f = ServeFlags {
            config: Some(file.path().into()),
            trace_sample: Some(0.25),
            ..flags()
        };
        let cfg = load(&f).unwrap();
        assert_eq!(cfg.tracing.endpoint.as_deref(), Some("http://otel:4318"));
        assert_eq!(cfg.tracing.sample, 0.25);
        let f = ServeFlags {
            trace_endpoint: Some("grpc://otel:4317".into()),
            ..flags()
        };
        let e = load(&f).unwrap_err().to_string();
        assert!(
            e.contains("tracing.endpoint: must start with http://"),
            "{e}"
        );
    }

    #[test]
    fn missing_origin_is_an_error() {
        let f = ServeFlags {
            origin: None,
            ..flags()
        };
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("origin.url"), "{e}");
    }
}
