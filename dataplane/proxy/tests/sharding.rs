//! Sharding across nodes (issue 16): several data planes on loopback in front of one origin,
//! each told its name and the peers file (`--node-name`, `--peers`), which the tests rewrite as
//! the operator would. Owners are found by what the nodes do (stores, forwards, origin
//! fetches), never by computing the hash here: the test holds the binary to its contract.

#![allow(clippy::unwrap_used)]

mod common;
mod tls_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

const FORWARDED_OK: &str = r#"edgecache_dataplane_peer_forwards_total{result="ok"}"#;
const SERVED: &str = "edgecache_dataplane_peer_served_total";
const OBJECTS: &str = "edgecache_dataplane_store_objects";
const RELOADS_OK: &str = r#"edgecache_dataplane_peer_list_reloads_total{result="ok"}"#;
const RELOADS_FAILED: &str = r#"edgecache_dataplane_peer_list_reloads_total{result="failed"}"#;
const UP: &str = r#"edgecache_dataplane_peers{state="up"}"#;
const DOWN: &str = r#"edgecache_dataplane_peers{state="down"}"#;

/// Data planes `n0`, `n1`, ... each reading its own peers file (empty at start: the ports are
/// only known once they run).
struct Fleet {
    nodes: Vec<Dataplane>,
    files: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

/// Replace a file atomically, as a ConfigMap update or `mv` does.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn name(i: usize) -> String {
    format!("n{i}")
}

impl Fleet {
    /// `n` nodes with one worker each; `yaml` is their config file (the flags add the rest).
    fn start(origin: &OriginHandle, n: usize, yaml: &str) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("dp.yaml");
        std::fs::write(&cfg, yaml).unwrap();
        let mut nodes = Vec::new();
        let mut files = Vec::new();
        for i in 0..n {
            let file = dir.path().join(format!("peers-{i}"));
            std::fs::write(&file, "# nobody yet\n").unwrap();
            let cache = dir.path().join(format!("cache-{i}"));
            let url = origin.url();
            let mut opts = Opts::new(&url, &cache);
            opts.workers = 1;
            opts.extra = vec![
                "--config".into(),
                cfg.display().to_string(),
                "--node-name".into(),
                name(i),
                "--peers".into(),
                file.display().to_string(),
            ];
            nodes.push(Dataplane::start(opts));
            files.push(file);
        }
        Fleet {
            nodes,
            files,
            _dir: dir,
        }
    }

    /// The peers file listing `members` (indexes of nodes).
    fn list(&self, members: &[usize]) -> String {
        members
            .iter()
            .map(|&i| format!("{} {}\n", name(i), self.nodes[i].listen))
            .collect()
    }

    /// Give node `i` the list of `members` and wait until it took it.
    fn tell(&self, i: usize, members: &[usize]) {
        let before = self.nodes[i].metric(RELOADS_OK);
        replace(&self.files[i], &self.list(members));
        let others = members.iter().filter(|&&m| m != i).count() as f64;
        self.nodes[i].wait_for_metrics("the new peer list", 15, |m| {
            metric_value(m, RELOADS_OK) > before && metric_value(m, UP) == others
        });
    }

    fn tell_all(&self, members: &[usize]) {
        for i in 0..self.nodes.len() {
            self.tell(i, members);
        }
    }

    /// `n` nodes that all list one another.
    fn all_listed(origin: &OriginHandle, n: usize, yaml: &str) -> Fleet {
        let f = Fleet::start(origin, n, yaml);
        f.tell_all(&(0..n).collect::<Vec<_>>());
        f
    }

    fn sum(&self, metric: &str) -> f64 {
        self.nodes.iter().map(|n| n.metric(metric)).sum()
    }
}

fn get_ok(node: &Dataplane, path: &str, size: u64, id: u64) {
    let r = node.get(path);
    assert_eq!(r.status, 200, "{path}: {}", r.cache_status());
    check_body(size, id, &r.body).unwrap_or_else(|e| panic!("{path}: {e}"));
}

/// Keeps copies only of objects asked for 100 times: every object lives on its owner alone.
const NO_COPIES: &str = "sharding:\n  popularityThreshold: 100\n";

#[test]
fn three_nodes_hold_each_object_once_and_fetch_it_once() {
    let o = origin();
    let f = Fleet::all_listed(&o, 3, NO_COPIES);
    // Every object through every node.
    let distinct = 90;
    for id in 0..distinct {
        for node in &f.nodes {
            get_ok(node, &format!("/obj/4k/{id}"), 4096, id);
        }
    }
    let per_node: Vec<f64> = f.nodes.iter().map(|n| n.metric(OBJECTS)).collect();
    let held = f.sum(OBJECTS);
    eprintln!(
        "distinct objects {distinct}: held per node {per_node:?} (sum {held}); origin fetches {}; \
         forwarded {}, served for peers {}",
        o.requests(),
        f.sum(FORWARDED_OK),
        f.sum(SERVED)
    );
    assert_eq!(o.requests(), distinct, "one origin fetch per object");
    assert_eq!(
        held, distinct as f64,
        "each object stored once in the fleet"
    );
    for n in &per_node {
        // About a third each: the fleet holds about 3x what one node holds.
        assert!((*n - distinct as f64 / 3.0).abs() <= 12.0, "{per_node:?}");
    }
    // Two requests of every three landed on a node that does not own the object.
    assert_eq!(f.sum(FORWARDED_OK), 2.0 * distinct as f64);
    assert_eq!(f.sum(SERVED), 2.0 * distinct as f64);

    // Requests the cache does not answer are never forwarded.
    let before = f.sum(FORWARDED_OK);
    for id in 0..10 {
        let r = request(
            f.nodes[0].listen,
            "POST",
            &format!("/obj/4k/p{id}"),
            &[],
            b"x",
        )
        .unwrap();
        assert_eq!(r.status, 200);
    }
    assert_eq!(f.sum(FORWARDED_OK), before);
    assert_eq!(o.requests(), distinct + 10);
}

#[test]
fn concurrent_misses_through_every_node_make_one_origin_fetch() {
    let o = origin();
    let f = Fleet::all_listed(&o, 3, NO_COPIES);
    let addrs: Vec<_> = f.nodes.iter().map(|n| n.listen).collect();
    for id in 0..4 {
        // The origin takes 400 ms, so all nine requests are in flight at once.
        let path = format!("/obj/64k/{id}?delay_ms=400");
        let clients: Vec<_> = (0..9)
            .map(|c| {
                let (addr, path) = (addrs[c % 3], path.clone());
                std::thread::spawn(move || get(addr, &path, &[]).unwrap())
            })
            .collect();
        for c in clients {
            let r = c.join().unwrap();
            assert_eq!(r.status, 200, "{}", r.cache_status());
            check_body(64 << 10, id, &r.body).unwrap();
        }
        assert_eq!(o.requests_for(&path), 1, "{path}");
    }
}

#[test]
fn the_owner_killed_clients_still_get_200s_and_it_is_asked_again_once_back() {
    let o = origin();
    let f = Fleet::all_listed(&o, 3, NO_COPIES);
    let keys = 30;
    for id in 0..keys {
        get_ok(&f.nodes[0], &format!("/obj/4k/{id}"), 4096, id);
    }
    let mut f = f;
    f.nodes[2].kill9();
    let t0 = Instant::now();
    for id in 0..keys {
        for node in &f.nodes[..2] {
            get_ok(node, &format!("/obj/4k/{id}"), 4096, id);
        }
    }
    let took = t0.elapsed();
    let m0 = f.nodes[0].metrics();
    let failed = metric_value(
        &m0,
        r#"edgecache_dataplane_peer_forwards_total{result="connect"}"#,
    );
    let skipped = metric_value(
        &m0,
        r#"edgecache_dataplane_peer_forwards_total{result="owner_down"}"#,
    );
    eprintln!(
        "owner killed: {} requests in {took:?}, node 0: {failed} connect failures, {skipped} \
         sent to the origin as the owner was down",
        2 * keys
    );
    // One failure marked it down; its other keys went to the origin without trying it.
    assert_eq!(failed, 1.0, "{m0}");
    assert!(skipped >= 3.0, "{m0}");
    assert_eq!(metric_value(&m0, DOWN), 1.0, "{m0}");

    // Back on the same address: the probe finds it after the 5 s backoff, and keys go to it.
    let dead = f.nodes.remove(2);
    f.nodes.insert(2, dead.restart());
    f.nodes[0].wait_for_metrics("the owner up again", 15, |m| metric_value(m, UP) == 2.0);
    let asked = f.nodes[0].metric(FORWARDED_OK);
    for id in 100..130 {
        get_ok(&f.nodes[0], &format!("/obj/4k/{id}"), 4096, id);
    }
    assert!(f.nodes[0].metric(FORWARDED_OK) >= asked + 3.0);
}

/// Ask for `keys` objects through `node`; how many the origin was asked for.
fn origin_fetches(o: &OriginHandle, node: &Dataplane, keys: u64, round: &str) -> u64 {
    let before = o.requests();
    for id in 0..keys {
        get_ok(node, &format!("/obj/1k/{id}"), 1024, id);
    }
    let n = o.requests() - before;
    eprintln!("{round}: {n} of {keys} keys fetched from the origin");
    n
}

/// At most 1/N + 5% of the keys moved, and not far fewer than 1/N (the change did something).
fn assert_moved_about_one_in(n: f64, moved: f64, what: &str) {
    assert!(
        (0.6 / n..=1.0 / n + 0.05).contains(&moved),
        "{what} moved {moved}"
    );
}

#[test]
fn a_peer_added_or_removed_moves_about_one_key_in_n() {
    let o = origin();
    // n3 asks the owners for everything while it is not in the list, and keeps no copies.
    let f = Fleet::start(&o, 4, NO_COPIES);
    f.tell_all(&[0, 1, 2]);
    let keys = 300;
    assert_eq!(origin_fetches(&o, &f.nodes[3], keys, "3 nodes"), keys);
    // 3 -> 4: n3's keys are the ones that moved, and only those miss (at n3) now.
    f.tell_all(&[0, 1, 2, 3]);
    let moved = origin_fetches(&o, &f.nodes[3], keys, "3 -> 4") as f64 / keys as f64;
    assert_moved_about_one_in(4.0, moved, "3 -> 4");
    // 4 -> 3: only n1's keys move (to owners that never had them).
    f.tell_all(&[0, 2, 3]);
    let moved = origin_fetches(&o, &f.nodes[3], keys, "4 -> 3") as f64 / keys as f64;
    assert_moved_about_one_in(4.0, moved, "4 -> 3");
    // And nothing else moves: the same keys again are all hits somewhere.
    assert_eq!(origin_fetches(&o, &f.nodes[3], keys, "again"), 0);
}

#[test]
fn no_loop_when_two_nodes_each_think_the_other_owns_everything() {
    let o = origin();
    let f = Fleet::start(&o, 2, NO_COPIES);
    // n0 lists only n1, n1 only n0: each forwards every miss to the other.
    f.tell(0, &[1]);
    f.tell(1, &[0]);
    for id in 0..20 {
        get_ok(
            &f.nodes[id as usize % 2],
            &format!("/obj/4k/{id}"),
            4096,
            id,
        );
    }
    // Each request made one hop and one origin fetch: the receiving node served it.
    assert_eq!(o.requests(), 20);
    for node in &f.nodes {
        let m = node.metrics();
        assert_eq!(metric_value(&m, FORWARDED_OK), 10.0, "{m}");
        assert_eq!(metric_value(&m, SERVED), 10.0, "{m}");
        assert!(!m.contains(r#"result="timeout""#), "{m}");
    }
    // A client's own hop header only makes the node serve the request itself.
    let r = f.nodes[0].request("GET", "/obj/4k/99", &[("EdgeCache-Hop", "n1")]);
    assert_eq!(r.status, 200);
    assert_eq!(f.nodes[0].metric(FORWARDED_OK), 10.0);
    assert_eq!(f.nodes[1].metric(SERVED), 10.0);
}

#[test]
fn a_bad_peers_file_is_refused_at_start_and_on_reload() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("peers");
    std::fs::write(&file, "# the fleet\nn0 127.0.0.1:8080\nn1 127.0.0.1\n").unwrap();
    let err = serve_refused(
        &dir.path().join("cache"),
        &[
            "--node-name".as_ref(),
            "n0".as_ref(),
            "--peers".as_ref(),
            file.as_os_str(),
        ],
    );
    assert!(
        err.contains(&format!(
            "peers file {}: line 3: `127.0.0.1` is not an address like 10.0.0.7:8080",
            file.display()
        )),
        "{err}"
    );

    let o = origin();
    let f = Fleet::all_listed(&o, 2, NO_COPIES);
    replace(&f.files[0], "n0 127.0.0.1:1\nn1 nowhere\n");
    f.nodes[0].wait_for_metrics("the bad reload counted", 15, |m| {
        metric_value(m, RELOADS_FAILED) == 1.0
    });
    // The previous list is still in force: n1 owns about half the keys and is asked for them.
    for id in 0..20 {
        get_ok(&f.nodes[0], &format!("/obj/4k/{id}"), 4096, id);
    }
    assert!(f.nodes[0].metric(FORWARDED_OK) >= 4.0);
    assert_eq!(o.requests(), 20);
    assert!(
        f.nodes[0].log_text().contains("line 2"),
        "the log names the line"
    );
}

#[test]
fn a_hot_object_is_kept_on_the_node_that_asks_for_it() {
    let o = origin();
    let f = Fleet::all_listed(&o, 2, "sharding:\n  popularityThreshold: 2\n");
    // Four requests through each node: the non-owner asks the owner twice, keeps the second
    // answer, and serves the rest itself.
    for _ in 0..4 {
        for node in &f.nodes {
            get_ok(node, "/obj/4k/7", 4096, 7);
        }
    }
    assert_eq!(o.requests(), 1);
    assert_eq!(f.sum(FORWARDED_OK), 2.0);
    assert_eq!(f.sum(OBJECTS), 2.0, "the owner's copy and the hot copy");
    for node in &f.nodes {
        let r = node.get("/obj/4k/7");
        assert!(r.is_hit(), "{}", r.cache_status());
    }
}

/// A node that is not an EdgeCache: for each connection it reads a request head and answers
/// with `answer` after `delay` (nothing at all for an empty answer). Listed as `fake`.
fn fake_peer(answer: &'static str, delay: std::time::Duration) -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().take(64).flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s);
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                std::thread::sleep(delay);
                let _ = r.get_mut().write_all(answer.as_bytes());
                std::thread::sleep(delay);
            });
        }
    });
    addr
}

/// One real node (`n0`, peer timeout 1 s) and a [`fake_peer`] answering `answer` after `delay`
/// in its list; 20 keys through n0, about half of them owned by `fake`: every one a 200
/// fetched from the origin once, the fake peer tried once (failing with `result`) and then
/// left alone while it is down.
fn through_a_failing_peer(answer: &'static str, delay: Duration, result: &str) {
    let fake = fake_peer(answer, delay);
    let o = origin();
    let f = Fleet::start(&o, 1, "sharding:\n  peerTimeout: 1s\n");
    replace(
        &f.files[0],
        &format!("n0 {}\nfake {fake}\n", f.nodes[0].listen),
    );
    f.nodes[0].wait_for_metrics("the list with the fake peer", 15, |m| {
        metric_value(m, UP) == 1.0
    });
    let t0 = Instant::now();
    for id in 0..20 {
        get_ok(&f.nodes[0], &format!("/obj/4k/{id}"), 4096, id);
    }
    assert_eq!(o.requests(), 20);
    // Tried again only once a backoff (5 s, then longer) is over and a probe connected: on a
    // loaded machine the 20 requests may take that long.
    let tries = 1.0 + (t0.elapsed().as_secs() / 5) as f64;
    let m = f.nodes[0].metrics();
    let forwards = |r: &str| {
        metric_value(
            &m,
            &format!(r#"edgecache_dataplane_peer_forwards_total{{result="{r}"}}"#),
        )
    };
    assert!((1.0..=tries).contains(&forwards(result)), "{m}");
    assert!(forwards("owner_down") >= 3.0, "{m}");
}

#[test]
fn a_peer_that_fails_by_its_own_5xx_is_marked_down_and_the_origin_asked() {
    through_a_failing_peer(
        "HTTP/1.1 500 Internal Server Error\r\nedgecache-peer-error: internal\r\ncontent-length: 0\r\n\r\n",
        Duration::ZERO,
        "peer_error",
    );
}

#[test]
fn a_peer_that_does_not_answer_in_time_is_marked_down_and_the_origin_asked() {
    through_a_failing_peer("", Duration::from_secs(3), "timeout");
}

#[test]
fn a_peer_that_dies_after_its_head_before_any_body_byte_costs_the_client_nothing() {
    through_a_failing_peer(
        "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 4096\r\n\r\n",
        Duration::ZERO,
        "body",
    );
}

/// The access-log line (JSON) of the request for `path` in `node`'s output, once written.
fn access_line(node: &Dataplane, path: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = node
            .log_text()
            .lines()
            .filter(|l| l.starts_with('{'))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["path"] == path);
        if let Some(v) = found {
            return v;
        }
        assert!(Instant::now() < deadline, "no line for {path}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_access_log_names_the_owner_a_miss_went_to() {
    let o = origin();
    let f = Fleet::all_listed(&o, 2, NO_COPIES);
    let owner = f.nodes[1].listen.to_string();
    let mut forwarded = 0;
    for id in 0..16 {
        let path = format!("/obj/4k/{id}");
        get_ok(&f.nodes[0], &path, 4096, id);
        let here = access_line(&f.nodes[0], &path);
        assert_eq!(here["cache"], "miss", "{here}");
        if here["peer"].is_null() {
            // Node 0 owns it: fetched from the origin itself.
            assert_eq!(here["origin"], o.addr().to_string().as_str(), "{here}");
            continue;
        }
        forwarded += 1;
        assert_eq!(here["peer"], owner.as_str(), "{here}");
        assert!(here["origin"].is_null(), "{here}");
        // The owner logged the hop: its client is node 0, and it went to the origin.
        let there = access_line(&f.nodes[1], &path);
        assert_eq!(there["origin"], o.addr().to_string().as_str(), "{there}");
        assert_eq!(there["client"], "127.0.0.1", "{there}");
    }
    assert!(forwarded > 0, "none of 16 keys is owned by node 1");
}

const REFUSED_MISSING: &str = r#"edgecache_dataplane_peer_hops_refused_total{reason="missing"}"#;
const REFUSED_BAD: &str = r#"edgecache_dataplane_peer_hops_refused_total{reason="bad_mac"}"#;

/// A peer key the test's nodes share (sharding.peerKeyFile), in the fleet's config.
fn keyed(dir: &Path) -> String {
    let key = dir.join("peer-key");
    std::fs::write(&key, "k3y-".repeat(12) + "\n").unwrap();
    format!(
        "sharding:\n  popularityThreshold: 100\n  peerKeyFile: {}\n",
        key.display()
    )
}

/// With a shared key, hops between the nodes carry their proof and sharding works as before; a
/// client's hop header, without a proof or with a forged one, is a client's request: the node
/// neither serves it as a peer's (storing a key it does not own) nor trusts it, and forwards
/// what another node owns as usual.
#[test]
fn with_a_peer_key_a_client_cannot_pose_as_a_peer() {
    let o = origin();
    let keydir = tempfile::tempdir().unwrap();
    let f = Fleet::all_listed(&o, 2, &keyed(keydir.path()));
    for id in 1000..1020 {
        get_ok(&f.nodes[0], &format!("/obj/4k/{id}"), 4096, id);
    }
    let forwarded = f.nodes[0].metric(FORWARDED_OK);
    assert!(forwarded > 0.0, "some keys are n1's");
    assert_eq!(f.nodes[1].metric(SERVED), forwarded, "each hop proven");
    assert_eq!(f.sum(REFUSED_MISSING) + f.sum(REFUSED_BAD), 0.0);
    assert_eq!(o.requests(), 20);

    // A client's hop header for keys n1 owns, sent to n1 ... and for every key, sent to n0.
    // A proof of the right form and time, under no key the nodes have.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let forged = format!("v1 {now} {}", "5a".repeat(32));
    for id in 1020..1040 {
        let path = format!("/obj/4k/{id}");
        let r = f.nodes[0].request("GET", &path, &[("EdgeCache-Hop", "n1")]);
        assert_eq!(r.status, 200);
        let r = f.nodes[0].request(
            "GET",
            &format!("{path}?forged"),
            &[("EdgeCache-Hop", "n1"), ("EdgeCache-Hop-Auth", &forged)],
        );
        assert_eq!(r.status, 200);
        assert!(r.header("edgecache-peer-error").is_empty());
    }
    assert_eq!(
        f.nodes[0].metric(SERVED),
        0.0,
        "no client request served as a peer's"
    );
    assert_eq!(f.nodes[0].metric(REFUSED_MISSING), 20.0);
    assert!(
        f.nodes[0].metric(REFUSED_BAD) >= 19.0,
        "the forged proof's timestamp is old"
    );
    // The keys n1 owns went to n1, as any client's requests do.
    assert!(f.nodes[0].metric(FORWARDED_OK) > forwarded);
    // Each object still fetched once across the fleet.
    assert_eq!(o.requests(), 60);
}

/// With `tls.redirectHttp`, clients on the plain port are sent to HTTPS, but hops between the
/// nodes (plain HTTP, proven) are served: before, the owner's 308 came back for every key it
/// owned.
#[test]
fn hops_are_not_redirected_to_https() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let yaml = keyed(dir.path());
    let cfg = dir.path().join("dp.yaml");
    std::fs::write(&cfg, &yaml).unwrap();
    let ca = tls_support::Ca::new();
    let (cert, key) = ca.issue(dir.path(), "node", &["test.example"]);
    let mut nodes = Vec::new();
    let mut files = Vec::new();
    let mut tls_addrs = Vec::new();
    for i in 0..2 {
        let file = dir.path().join(format!("peers-{i}"));
        std::fs::write(&file, "# nobody yet\n").unwrap();
        let cache = dir.path().join(format!("cache-{i}"));
        let url = o.url();
        let mut opts = Opts::new(&url, &cache);
        opts.workers = 1;
        let tls = format!("127.0.0.1:{}", free_port());
        opts.extra = [
            "--config",
            &cfg.display().to_string(),
            "--node-name",
            &name(i),
            "--peers",
            &file.display().to_string(),
            "--tls-listen",
            &tls,
            "--tls-cert",
            &cert.display().to_string(),
            "--tls-key",
            &key.display().to_string(),
            "--tls-redirect-http",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        nodes.push(Dataplane::start(opts));
        files.push(file);
        tls_addrs.push(tls.parse::<std::net::SocketAddr>().unwrap());
    }
    let f = Fleet {
        nodes,
        files,
        _dir: dir,
    };
    f.tell_all(&[0, 1]);
    // A client on the plain port is redirected ...
    let r = f.nodes[0].get("/obj/4k/r0");
    assert_eq!(r.status, 308);
    // ... but HTTPS clients' misses that n0 forwards to n1 over plain HTTP are answered.
    let rt = tls_support::runtime();
    let cfg = tls_support::client_config(&ca, &["http/1.1"]);
    let got = rt.block_on(async {
        let mut statuses = Vec::new();
        for id in 0..20u64 {
            let path = format!("/obj/4k/t{id}");
            let (r, _) = tls_support::get_tls(tls_addrs[0], "test.example", &cfg, &path).await;
            statuses.push(r.status);
        }
        statuses
    });
    assert!(got.iter().all(|s| *s == 200), "{got:?}");
    assert!(
        f.nodes[0].metric(FORWARDED_OK) > 0.0,
        "some keys went to n1"
    );
    assert_eq!(f.nodes[1].metric(SERVED), f.nodes[0].metric(FORWARDED_OK));
    assert_eq!(o.requests(), 20);
}

/// A connection from `from` (a loopback address) to `to`, held open.
fn connect_from(from: &str, to: std::net::SocketAddr) -> std::net::TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let src: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    s.bind(&src.into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// Whether the server closed `s` at once (a refused connection), within a second.
fn refused(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    match s.read(&mut [0u8; 1]) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Another node's connections are peer traffic, outside the per-address client caps: with
/// `maxConnectionsPerIp` taken by idle connections from the peer's address, its forwards are
/// still served (before, they were refused and the fleet fell back to the origin). Any other
/// address is held to the cap as before.
#[test]
fn a_peers_forwards_are_outside_the_per_address_client_cap() {
    let o = origin();
    let keydir = tempfile::tempdir().unwrap();
    let yaml = keyed(keydir.path()) + "clients:\n  maxConnectionsPerIp: 2\n";
    let f = Fleet::all_listed(&o, 2, &yaml);
    // n0 connects from 127.0.0.1: fill n1's cap for that address.
    let _held: Vec<_> = (0..2)
        .map(|_| connect_from("127.0.0.1", f.nodes[1].listen))
        .collect();
    for id in 2000..2020 {
        get_ok(&f.nodes[0], &format!("/obj/4k/{id}"), 4096, id);
    }
    let forwarded = f.nodes[0].metric(FORWARDED_OK);
    assert!(
        forwarded > 0.0,
        "n0's forwards to n1 were refused: {}",
        f.nodes[0].metrics()
    );
    assert_eq!(f.nodes[1].metric(SERVED), forwarded);
    // A client's address is capped as before.
    let mut held: Vec<_> = (0..2)
        .map(|_| connect_from("127.0.0.2", f.nodes[1].listen))
        .collect();
    let mut third = connect_from("127.0.0.2", f.nodes[1].listen);
    assert!(
        refused(&mut third),
        "a third connection of one client address"
    );
    assert!(!refused(&mut held[0]));
}

/// With one of three nodes stopped, each of its keys goes to one survivor, the same from every
/// entry node (the next by rendezvous score): requested through both survivors, a lost key is
/// fetched from the origin once, but for the one request per entry node whose forward found the
/// node gone. (Each entry node fetched every lost key for itself before: twice.)
#[test]
fn a_stopped_nodes_keys_are_fetched_once_across_the_survivors() {
    let o = origin();
    let mut f = Fleet::all_listed(&o, 3, NO_COPIES);
    let keys = 60;
    for id in 0..keys {
        get_ok(&f.nodes[0], &format!("/obj/4k/{id}"), 4096, id);
    }
    let lost = f.nodes[2].metric(OBJECTS) as u64;
    assert!(lost > 5, "n2 owns some keys: {lost}");
    assert_eq!(o.requests(), keys);
    f.nodes[2].kill9();
    for id in 0..keys {
        for node in &f.nodes[..2] {
            get_ok(node, &format!("/obj/4k/{id}"), 4096, id);
        }
    }
    let refetched = o.requests() - keys;
    eprintln!("n2 held {lost} keys; the survivors fetched {refetched} again");
    assert!(
        (lost..=lost + 2).contains(&refetched),
        "each lost key once (and one per entry node that found n2 gone)"
    );
}
