//! Sharding across the EdgeCache's nodes: which node owns a key, whether that node is up, and
//! the peer list behind both, reloaded when its file changes. Shared by every worker; the
//! requests themselves are in the data plane's `handler/peer.rs`, the pure ring in
//! [`crate::ring`].
//!
//! Peer health is passive and active. A forward that fails (connect error, timeout, a broken
//! response, a 5xx the peer generated itself) marks the peer down at once, for a backoff of
//! [`DOWN_FIRST`] doubling to [`DOWN_MAX`] while it keeps failing; a key whose owner is down is
//! fetched from the origin by the node that has the request. Once a down peer's backoff is over,
//! a probe (a TCP connect to its data-plane address) brings it back, or doubles the backoff.
//! A successful forward resets it.
//!
//! The peers file is read again every [`RELOAD_EVERY`] and taken when its bytes change, which
//! covers a ConfigMap update (kubelet swaps the `..data` symlink: the path now opens another
//! file), an atomic replace (rename over it) and an edit in place. A file that cannot be read or
//! has a mistake is logged and counted once, and the previous list stays in force.
//!
//! The operator also pushes the list to the admin endpoint (`PUT /peers`, with the admin token)
//! whenever it reconciles: a ConfigMap reaches a running pod only at the kubelet's next sync of
//! its volumes, a minute or more after the change, while a push lands at once. From the first
//! push on, the pushed list is the one in force and the file is no longer read (it may lag
//! behind the pushes and would put an older list back); the file stays the source at start.
//! `GET /peers` shows the list in force and where it came from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::peer_auth::PeerKey;
use crate::popularity::Popularity;
use crate::ring::{self, ParseError, Peer, Ring};
use edgecache_upstream::error::ProxyError;
use edgecache_upstream::origin::{self, Origin};
use edgecache_upstream::sites::HostHeader;

/// The first time a failing peer is left alone.
pub const DOWN_FIRST: Duration = Duration::from_secs(5);
/// The longest.
pub const DOWN_MAX: Duration = Duration::from_secs(60);
/// How often the peers file is read for a change.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);
/// How often down peers whose backoff is over are probed (and the gauges refreshed).
const TICK: Duration = Duration::from_millis(250);

/// The longest a probe waits for a down peer's answer (less when `peerTimeout` is less).
const PROBE_ANSWER_MAX: Duration = Duration::from_secs(2);

/// Whether an HTTP server answers at `addr`: connected within `connect`, the first bytes of a
/// status line within `answer` after that. The request is `OPTIONS *`, which a node answers at
/// once by itself (a 400 or 421: it has no cache key), never from its store or its origin.
pub async fn answers_http(addr: std::net::SocketAddr, connect: Duration, answer: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(Ok(mut s)) = tokio::time::timeout(connect, tokio::net::TcpStream::connect(addr)).await
    else {
        return false;
    };
    let exchange = async {
        s.write_all(
            b"OPTIONS * HTTP/1.1\r\nHost: edgecache-peer-probe\r\nConnection: close\r\n\r\n",
        )
        .await?;
        let mut head = [0u8; 7];
        s.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(&head == b"HTTP/1.")
    };
    matches!(tokio::time::timeout(answer, exchange).await, Ok(Ok(true)))
}

/// Sharding's own settings, which the data plane maps from the config contract.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node: String,
    pub peers_file: PathBuf,
    pub popularity_threshold: u32,
    pub popularity_window: Duration,
    pub peer_connect_timeout: Duration,
    pub peer_timeout: Duration,
    /// The key hops are proven with (dataplane/fleet/src/peer_auth.rs); `None`: hops are
    /// trusted as they come.
    pub peer_key_file: Option<PathBuf>,
}

/// The metric handles sharding counts in, registered by the data plane: its
/// `peers{state}` (the other nodes of the list, up and down) and `peer_list_reloads_total{result}`.
#[derive(Debug, Clone, Default)]
pub struct ShardingMetrics {
    pub peers: Family<[(&'static str, String); 1], Gauge>,
    pub reloads: Family<[(&'static str, String); 1], Counter>,
}

/// Why the peers file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    #[error("sharding.peerKeyFile: {0}")]
    Key(String),
    #[error("cannot read the peers file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("peers file {}: {error}", path.display())]
    Parse { path: PathBuf, error: ParseError },
}

/// Where a missed key is fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This node owns it (or there is no one else).
    Local,
    /// Another node owns it (or, its owner down, is its successor); `key` is the key's ring hash.
    Peer { owner: Peer, key: u64 },
    /// Another node owns it but is down, and this node is its successor: the origin, from here.
    OwnerDown,
}

#[derive(Debug, Clone, Copy, Default)]
struct Health {
    down: bool,
    /// When a down peer may be probed.
    retry_at: Option<Instant>,
    /// The current backoff; zero after a successful forward.
    backoff: Duration,
}

fn next_backoff(b: Duration) -> Duration {
    if b.is_zero() {
        DOWN_FIRST
    } else {
        (b * 2).min(DOWN_MAX)
    }
}

/// What the file held when it was last read.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Text(Vec<u8>),
    Unreadable(String),
}

pub struct Sharding {
    settings: Settings,
    key: Option<PeerKey>,
    ring: RwLock<Arc<Ring>>,
    health: Mutex<HashMap<String, Health>>,
    popularity: Popularity,
    seen: Mutex<Seen>,
    /// The last list pushed through the admin endpoint; once there is one, the file is not
    /// read again.
    pushed: Mutex<Option<Vec<u8>>>,
    metrics: Arc<ShardingMetrics>,
}

/// The largest peer list `PUT /peers` takes (a line is under 100 bytes: thousands of nodes).
pub const PUSH_MAX: usize = 1 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read_peers(path: &Path) -> Result<Vec<u8>, PeersError> {
    std::fs::read(path).map_err(|source| PeersError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_bytes(bytes: &[u8]) -> Result<Vec<Peer>, ParseError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => ring::parse(text),
        Err(e) => Err(ParseError {
            line: 1 + bytes[..e.valid_up_to()]
                .iter()
                .filter(|b| **b == b'\n')
                .count(),
            reason: "not UTF-8 text".into(),
        }),
    }
}

fn parse_peers(path: &Path, bytes: &[u8]) -> Result<Vec<Peer>, PeersError> {
    parse_bytes(bytes).map_err(|error| PeersError::Parse {
        path: path.to_path_buf(),
        error,
    })
}

impl Sharding {
    /// Read the peers file; a mistake in it stops the start.
    pub fn open(settings: Settings, metrics: Arc<ShardingMetrics>) -> Result<Self, PeersError> {
        let bytes = read_peers(&settings.peers_file)?;
        let peers = parse_peers(&settings.peers_file, &bytes)?;
        let key = match &settings.peer_key_file {
            Some(path) => Some(PeerKey::load(path).map_err(PeersError::Key)?),
            None => {
                warn!(
                    "sharding.peerKeyFile is unset: hop headers are trusted as they come, so \
                     any client that reaches this node can pose as a peer"
                );
                None
            }
        };
        let s = Sharding {
            key,
            popularity: Popularity::new(settings.popularity_window, Instant::now()),
            settings,
            ring: RwLock::new(Arc::new(Ring::default())),
            health: Mutex::new(HashMap::new()),
            seen: Mutex::new(Seen::Text(bytes)),
            pushed: Mutex::new(None),
            metrics,
        };
        s.install(peers);
        Ok(s)
    }

    pub fn node(&self) -> &str {
        &self.settings.node
    }

    /// Whether `ip` is another node's, by the peers file: its connections are peer traffic,
    /// outside the per-address client caps (a busy node's forwards must not be refused by its
    /// peers as one client's flood would be). The per-worker connection cap still applies.
    pub fn is_peer_ip(&self, ip: std::net::IpAddr) -> bool {
        let ip = edgecache_edge::client_caps::canonical(ip);
        self.ring().peers().any(|p| {
            p.name != self.settings.node
                && edgecache_edge::client_caps::canonical(p.addr.ip()) == ip
        })
    }

    /// The key hops are proven with, when one is set.
    pub fn key(&self) -> Option<&PeerKey> {
        self.key.as_ref()
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A worker's client for the other nodes: the client's Host is kept (the owner keys on
    /// it) and each request names its peer's address (`Origin::prepare_at`; the URL here only
    /// gives the scheme); the origin's idle timeout and pool size, the peer timeouts.
    pub fn client(
        &self,
        origin: &origin::Settings,
        cache_name: &str,
    ) -> Result<Origin, ProxyError> {
        let cfg = origin::Settings {
            url: "http://peer".into(),
            host_header: HostHeader::Preserve,
            connect_timeout: self.settings.peer_connect_timeout,
            first_byte_timeout: self.settings.peer_timeout,
            max_idle_connections: origin.max_idle_connections,
        };
        Origin::new(&cfg, cache_name).map(Origin::for_peers)
    }

    fn ring(&self) -> Arc<Ring> {
        self.ring.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn install(&self, peers: Vec<Peer>) {
        let ring = Ring::new(peers);
        let names: Vec<&str> = ring.peers().map(|p| p.name.as_str()).collect();
        info!(
            node = self.node(),
            peers = ring.len(),
            "peer list: {}",
            names.join(", ")
        );
        if !ring.contains(self.node()) && !ring.is_empty() {
            warn!(
                node = self.node(),
                "this node is not in the peer list: it owns no key and asks the owners for every miss"
            );
        }
        lock(&self.health).retain(|name, _| ring.contains(name));
        *self.ring.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(ring);
        self.export();
    }

    /// Where a miss of the primary cache key `key` is fetched from.
    pub fn route(&self, key: &[u8]) -> Route {
        let h = ring::key_hash(key);
        let ring = self.ring();
        let node = &self.settings.node;
        let owner = match ring.owner(h) {
            None => return Route::Local,
            Some(o) if &o.name == node => return Route::Local,
            Some(o) => o,
        };
        let health = lock(&self.health);
        let down = |p: &Peer| health.get(&p.name).is_some_and(|h| h.down);
        if !down(owner) {
            return Route::Peer {
                owner: owner.clone(),
                key: h,
            };
        }
        // The owner is down: its successor among the live nodes takes the key, the same one
        // from every entry node, so a lost share is fetched once, not once per entry node.
        match ring.owner_among(h, |p| &p.name == node || !down(p)) {
            Some(s) if &s.name != node => Route::Peer {
                owner: s.clone(),
                key: h,
            },
            _ => Route::OwnerDown,
        }
    }

    /// Count a request for a key another node owns; whether this node keeps a copy of it too.
    pub fn keep_copy(&self, key: u64) -> bool {
        let t = self.settings.popularity_threshold;
        t != 0 && self.popularity.record(key, Instant::now()) >= t
    }

    /// A forward to `name` failed: mark it down (a peer already down stays as it is).
    pub fn peer_failed(&self, name: &str, why: &str) {
        let mut health = lock(&self.health);
        let h = health.entry(name.to_string()).or_default();
        if h.down {
            return;
        }
        h.down = true;
        h.backoff = next_backoff(h.backoff);
        h.retry_at = Some(Instant::now() + h.backoff);
        warn!(peer = name, backoff = ?h.backoff, "peer marked down: {why}");
        drop(health);
        self.export();
    }

    /// A forward to `name` succeeded.
    pub fn peer_answered(&self, name: &str) {
        let mut health = lock(&self.health);
        if health.contains_key(name) {
            health.remove(name);
        }
    }

    /// Take a peer list pushed by the operator (the peers file's format), in force at once for
    /// every worker (one swap of the ring). Returns whether it changed the list in force; a list
    /// with a mistake is refused and the one in force stays.
    pub fn push(&self, bytes: &[u8]) -> Result<bool, ParseError> {
        let peers = parse_bytes(bytes)?;
        let mut pushed = lock(&self.pushed);
        if pushed.as_deref() == Some(bytes) {
            return Ok(false);
        }
        *pushed = Some(bytes.to_vec());
        // Under the lock: two pushes at once install in the order they are recorded.
        self.count_reload("pushed");
        self.install(peers);
        Ok(true)
    }

    /// The list in force, `NAME ADDRESS` a line sorted by name, after a comment saying where it
    /// came from (`file` or `pushed`).
    pub fn list_text(&self) -> String {
        let source = if lock(&self.pushed).is_some() {
            "pushed"
        } else {
            "file"
        };
        let ring = self.ring();
        let mut peers: Vec<&Peer> = ring.peers().collect();
        peers.sort_by(|a, b| a.name.cmp(&b.name));
        let mut text = format!("# source: {source}\n");
        for p in peers {
            text.push_str(&format!("{} {}\n", p.name, p.addr));
        }
        text
    }

    /// Take the peers file if its bytes changed (not once a list was pushed); a bad one is
    /// logged and counted once.
    pub fn reload(&self) {
        // Held to the end: a push meanwhile is not undone by this reload's install.
        let pushed = lock(&self.pushed);
        if pushed.is_some() {
            return;
        }
        let path = &self.settings.peers_file;
        let (now_seen, peers) = match read_peers(path) {
            Ok(bytes) => {
                let peers = parse_peers(path, &bytes);
                (Seen::Text(bytes), peers)
            }
            Err(e) => (Seen::Unreadable(e.to_string()), Err(e)),
        };
        {
            let mut seen = lock(&self.seen);
            if *seen == now_seen {
                return;
            }
            *seen = now_seen;
        }
        match peers {
            Ok(peers) => {
                self.count_reload("ok");
                self.install(peers);
            }
            Err(e) => {
                self.count_reload("failed");
                warn!("{e}; keeping the previous peer list");
            }
        }
    }

    fn count_reload(&self, result: &'static str) {
        self.metrics
            .reloads
            .get_or_create(&[("result", result.to_string())])
            .inc();
    }

    /// The other nodes of the list, up and down, into `peers{state}`.
    fn export(&self) {
        let ring = self.ring();
        let health = lock(&self.health);
        let (mut up, mut down) = (0, 0);
        for p in ring.peers().filter(|p| p.name != self.settings.node) {
            if health.get(&p.name).is_some_and(|h| h.down) {
                down += 1;
            } else {
                up += 1;
            }
        }
        drop(health);
        for (state, n) in [("up", up), ("down", down)] {
            self.metrics
                .peers
                .get_or_create(&[("state", state.to_string())])
                .set(n);
        }
    }

    /// Probe the down peers whose backoff is over: an HTTP request to the data-plane address
    /// ([`answers_http`]), so a peer that accepts connections but never answers stays down.
    async fn probe(&self) {
        let now = Instant::now();
        let ring = self.ring();
        let due: Vec<Peer> = {
            let health = lock(&self.health);
            ring.peers()
                .filter(|p| {
                    health
                        .get(&p.name)
                        .is_some_and(|h| h.down && h.retry_at.is_none_or(|t| t <= now))
                })
                .cloned()
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let connect = self.settings.peer_connect_timeout;
        let answer = self.settings.peer_timeout.min(PROBE_ANSWER_MAX);
        let probes = due.into_iter().map(|p| async move {
            let ok = answers_http(p.addr, connect, answer).await;
            (p, ok)
        });
        let results = futures_util::future::join_all(probes).await;
        let mut health = lock(&self.health);
        for (p, ok) in results {
            let Some(h) = health.get_mut(&p.name) else {
                continue;
            };
            if ok {
                // Up again; the backoff stays until a forward succeeds, so a peer that fails
                // again at once is left alone longer.
                h.down = false;
                h.retry_at = None;
                info!(peer = %p.name, "peer up again (it answered a probe)");
            } else {
                h.backoff = next_backoff(h.backoff);
                h.retry_at = Some(Instant::now() + h.backoff);
            }
        }
    }

    /// Reload the peers file and probe down peers until shutdown.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reloaded = Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            if reloaded.elapsed() >= RELOAD_EVERY {
                reloaded = Instant::now();
                self.reload();
            }
            self.probe().await;
            self.export();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn settings(file: &std::path::Path, node: &str) -> Settings {
        Settings {
            node: node.into(),
            peers_file: file.to_path_buf(),
            popularity_threshold: 3,
            popularity_window: Duration::from_secs(60),
            peer_connect_timeout: Duration::from_millis(200),
            peer_timeout: Duration::from_secs(1),
            peer_key_file: None,
        }
    }

    fn write(path: &std::path::Path, text: &str) {
        // An atomic replace, as an operator's tooling or `mv` does it.
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    fn metrics() -> Arc<ShardingMetrics> {
        Arc::new(ShardingMetrics::default())
    }

    fn reloads(m: &ShardingMetrics, result: &str) -> u64 {
        m.reloads
            .get_or_create(&[("result", result.to_string())])
            .get()
    }

    /// A key this ring gives to `owner`.
    fn key_owned_by(s: &Sharding, owner: &str) -> Vec<u8> {
        (0..)
            .map(|i| format!("http://www.example/k{i}").into_bytes())
            .find(|k| match s.route(k) {
                Route::Peer { owner: o, .. } => o.name == owner,
                Route::Local => owner == s.node(),
                Route::OwnerDown => false,
            })
            .unwrap()
    }

    const THREE: &str = "a 127.0.0.1:1\nb 127.0.0.2:1\nc 127.0.0.3:1\n";

    /// Node `a` of three, its peers file in the returned directory.
    fn node_a(threshold: u32) -> (tempfile::TempDir, Sharding) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers");
        write(&file, THREE);
        let mut s = settings(&file, "a");
        s.popularity_threshold = threshold;
        let s = Sharding::open(s, metrics()).unwrap();
        (dir, s)
    }

    #[test]
    fn a_key_goes_to_its_owner_and_to_its_successor_while_the_owner_is_down() {
        let (_dir, s) = node_a(3);
        let local = key_owned_by(&s, "a");
        assert_eq!(s.route(&local), Route::Local);
        let k = key_owned_by(&s, "b");
        s.peer_failed("b", "test");
        // The next by score among a and c takes it: a itself (the origin, from here) or c.
        let ring = s.ring();
        let next = ring
            .owner_among(ring::key_hash(&k), |p| p.name != "b")
            .unwrap()
            .name
            .clone();
        match s.route(&k) {
            Route::OwnerDown => assert_eq!(next, "a"),
            Route::Peer { owner, .. } => {
                assert_eq!((owner.name.as_str(), next.as_str()), ("c", "c"))
            }
            Route::Local => panic!("a key of b's is not a's own"),
        }
        // Both down: a takes it.
        s.peer_failed("c", "test");
        assert_eq!(s.route(&k), Route::OwnerDown);
        s.peer_answered("c");
        assert_eq!(lock(&s.health)["b"].backoff, DOWN_FIRST);
        // Failing again while down changes nothing; a success brings it back with no backoff.
        s.peer_failed("b", "test");
        assert_eq!(lock(&s.health)["b"].backoff, DOWN_FIRST);
        s.peer_answered("b");
        assert!(matches!(s.route(&k), Route::Peer { .. }));
        assert!(lock(&s.health).is_empty());
    }

    #[test]
    fn backoff_doubles_to_its_ceiling() {
        let mut b = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..6 {
            b = next_backoff(b);
            seen.push(b.as_secs());
        }
        assert_eq!(seen, [5, 10, 20, 40, 60, 60]);
    }

    #[test]
    fn a_copy_is_kept_from_the_thresholds_request_on() {
        let (_dir, s) = node_a(3);
        let kept: Vec<bool> = (0..4).map(|_| s.keep_copy(42)).collect();
        assert_eq!(kept, [false, false, true, true]);
        let (_dir, s) = node_a(0);
        assert!((0..10).all(|_| !s.keep_copy(42)));
    }

    #[test]
    fn a_bad_reload_keeps_the_previous_list_and_is_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers");
        write(&file, THREE);
        let m = metrics();
        let s = Sharding::open(settings(&file, "a"), m.clone()).unwrap();
        let k = key_owned_by(&s, "c");
        write(&file, "a 127.0.0.1:1\nb nowhere\n");
        s.reload();
        s.reload();
        assert_eq!((reloads(&m, "ok"), reloads(&m, "failed")), (0, 1));
        assert!(matches!(s.route(&k), Route::Peer { ref owner, .. } if owner.name == "c"));
        // A missing file is a bad reload too; the same list again is no reload at all.
        std::fs::remove_file(&file).unwrap();
        s.reload();
        assert_eq!(reloads(&m, "failed"), 2);
        write(&file, "a 127.0.0.1:1\nb 127.0.0.2:1\n");
        s.reload();
        s.reload();
        assert_eq!(reloads(&m, "ok"), 1);
        // c left: its keys go to a or b.
        assert!(!matches!(s.route(&k), Route::Peer { ref owner, .. } if owner.name == "c"));
    }

    #[test]
    fn a_pushed_list_is_in_force_at_once_and_the_file_is_no_longer_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers");
        write(&file, THREE);
        let m = metrics();
        let s = Sharding::open(settings(&file, "a"), m.clone()).unwrap();
        assert!(s.list_text().starts_with("# source: file\n"));
        let k = key_owned_by(&s, "c");
        // c comes back at another address: pushed, in force with no reload.
        let moved = "# pushed\na 127.0.0.1:1\nb 127.0.0.2:1\nc 127.0.0.9:1\n";
        assert_eq!(s.push(moved.as_bytes()), Ok(true));
        assert!(
            matches!(s.route(&k), Route::Peer { ref owner, .. } if owner.addr.to_string() == "127.0.0.9:1")
        );
        assert_eq!(
            s.list_text(),
            "# source: pushed\na 127.0.0.1:1\nb 127.0.0.2:1\nc 127.0.0.9:1\n"
        );
        assert_eq!(s.push(moved.as_bytes()), Ok(false), "the same list again");
        assert_eq!(reloads(&m, "pushed"), 1);
        // The file (behind the pushes) no longer counts.
        write(&file, "a 127.0.0.1:1\n");
        s.reload();
        assert_eq!(reloads(&m, "ok"), 0);
        assert!(s.list_text().contains("c 127.0.0.9:1"));
        // A push with a mistake is refused; the list in force stays.
        let err = s.push(b"a 127.0.0.1:1\nb nowhere\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(s.list_text().contains("c 127.0.0.9:1"));
    }

    #[test]
    fn a_configmap_symlink_swap_is_a_reload() {
        // kubelet's layout: peers -> ..data/peers, ..data -> ..TIMESTAMP (swapped by rename).
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("..v1")).unwrap();
        std::fs::write(d.join("..v1/peers"), THREE).unwrap();
        std::os::unix::fs::symlink("..v1", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/peers", d.join("peers")).unwrap();
        let m = metrics();
        let s = Sharding::open(settings(&d.join("peers"), "a"), m.clone()).unwrap();
        assert_eq!(s.ring().len(), 3);
        std::fs::create_dir(d.join("..v2")).unwrap();
        std::fs::write(d.join("..v2/peers"), "a 127.0.0.1:1\n").unwrap();
        std::os::unix::fs::symlink("..v2", d.join("..data_tmp")).unwrap();
        std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        s.reload();
        assert_eq!(reloads(&m, "ok"), 1);
        assert_eq!(s.ring().len(), 1);
    }

    #[test]
    fn a_bad_file_at_start_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers");
        write(&file, "a 127.0.0.1:1\n\nb 127.0.0.1\n");
        let e = Sharding::open(settings(&file, "a"), metrics())
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            format!(
                "peers file {}: line 3: `127.0.0.1` is not an address like 10.0.0.7:8080 (IP and port)",
                file.display()
            )
        );
        std::fs::write(&file, b"a 127.0.0.1:1\nb\xff 127.0.0.2:1\n").unwrap();
        let e = Sharding::open(settings(&file, "a"), metrics())
            .err()
            .unwrap()
            .to_string();
        assert!(e.ends_with("line 2: not UTF-8 text"), "{e}");
    }

    /// A loopback server that answers every connection's request with a 400, as a node answers
    /// a probe.
    async fn answering() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn a_down_peer_comes_back_when_it_answers_a_probe() {
        let (addr, server) = answering().await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers");
        write(&file, &format!("a 127.0.0.1:1\nb {addr}\n"));
        let s = Sharding::open(settings(&file, "a"), metrics()).unwrap();
        s.peer_failed("b", "test");
        // Not before its backoff is over.
        s.probe().await;
        assert!(lock(&s.health)["b"].down);
        lock(&s.health).entry("b".into()).or_default().retry_at = Some(Instant::now());
        s.probe().await;
        assert!(!lock(&s.health)["b"].down);
        // Gone: the probe fails and the backoff doubles.
        server.abort();
        let _ = server.await;
        s.peer_failed("b", "test");
        lock(&s.health).entry("b".into()).or_default().retry_at = Some(Instant::now());
        s.probe().await;
        let h = lock(&s.health)["b"];
        assert!(h.down);
        assert_eq!(h.backoff, DOWN_FIRST * 4);
    }

    /// A peer that accepts connections but never answers (a wedged process, a full accept
    /// queue behind a live kernel) stays down: a TCP connect alone brought it back, and every
    /// key it owns then stalled for `peerTimeout` again.
    #[tokio::test]
    async fn a_peer_that_accepts_but_never_answers_stays_down() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers");
        write(&file, &format!("a 127.0.0.1:1\nb {addr}\n"));
        let s = Sharding::open(settings(&file, "a"), metrics()).unwrap();
        s.peer_failed("b", "test");
        lock(&s.health).entry("b".into()).or_default().retry_at = Some(Instant::now());
        s.probe().await;
        let h = lock(&s.health)["b"];
        assert!(h.down, "connected, but no answer");
        assert_eq!(h.backoff, DOWN_FIRST * 2);
        drop(listener);
    }
}
