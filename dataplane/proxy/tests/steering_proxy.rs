//! Connection steering through the real server (`edgecache-dataplane serve --workers N
//! --steering MODE`), verified connection by connection: connect, make a request, then read
//! `edgecache_dataplane_accepted_connections_total{worker}` — exactly one worker's counter went
//! up by one, and it is the expected one. The server's per-connection debug line (enabled by
//! `EDGECACHE_DEBUG_STEERING_OBSERVE=1` and `RUST_LOG=...,edgecache::accept=debug`) names the
//! accepting worker too (cross-checked) and what the steering program saw for the SYN (queue,
//! CPU, flow hash), which gives the expected worker in `queue` and `hash` modes.
//!
//! - `cpu`, `incoming-cpu`: client threads pinned to each worker's CPU on loopback; the SYN is
//!   processed on the client's CPU, so it must land on the worker pinned there.
//! - `hash`: the worker is `flow hash % n`, as the program saw it.
//! - `off`: the kernel's hash; each connection is accepted exactly once, by a live worker.
//! - `queue`: two network namespaces joined by a 4-queue veth, 4 workers, queue offset 0.
//! - A worker killed through the debug hook (`EDGECACHE_DEBUG_WORKER_FAULTS`, SIGUSR1) and held
//!   dead: the others keep their exact mapping and every connection is still served; after the
//!   supervisor repairs the group, the mapping is exact for all again.
//! - The TLS listener (`--tls-listen`), a second SO_REUSEPORT group: in `cpu` mode each TLS
//!   connection lands on the worker pinned to the client's CPU, and a dead worker's TLS
//!   listener is closed and repaired with its plain one.
//! - Without CAP_BPF (dropped from the bounding set before exec, as `capsh --drop` does):
//!   the server falls back to `off`, serves a MISS then a HIT, reports it; with
//!   `steeringRequired: true` it refuses to start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_support;

use std::cell::Cell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use edgecache_testnet::{VethPair, enter_netns};

use common::{Dataplane, Opts, check_body, metric_value, read_response};

const CONNS: usize = 48;
const NO_SLOT: i64 = u32::MAX as i64;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the steering program (SO_ATTACH_REUSEPORT_EBPF) needs; `incoming-cpu` and `off` run
/// no program and need no privilege.
const BPF: &str = "the BPF steering program (CAP_BPF)";

/// Where a server is, and how to reach it.
struct Target {
    listen: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
    workers: usize,
    pid: u32,
    /// The network namespace clients (and scrapes) run in; `None` = this one.
    client_ns: Option<String>,
    fault_file: PathBuf,
}

/// What one connection showed.
#[derive(Debug, Clone)]
struct Conn {
    port: u16,
    /// The worker whose accepted counter went up.
    worker: usize,
    /// The fields of the server's `accepted` line for this connection.
    fields: HashMap<String, String>,
}

impl Conn {
    fn field(&self, k: &str) -> i64 {
        self.fields
            .get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no field {k} in {:?}", self.fields))
    }
}

/// Run `f` on a new thread, inside `ns` when given and pinned to `cpu` when given.
fn on_thread<T: Send + 'static>(
    ns: Option<String>,
    cpu: Option<usize>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        if let Some(ns) = ns {
            enter_netns(&ns);
        }
        if let Some(c) = cpu {
            edgecache_host::pin_current_thread(c).unwrap();
        }
        f()
    })
    .join()
    .unwrap()
}

impl Target {
    fn metrics(&self) -> String {
        let admin = self.admin;
        on_thread(self.client_ns.clone(), None, move || {
            common::get(admin, "/metrics", &[])
                .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                .unwrap_or_default()
        })
    }

    fn accepted(&self, text: &str) -> Vec<f64> {
        (0..self.workers)
            .map(|w| {
                metric_value(
                    text,
                    &format!("edgecache_dataplane_accepted_connections_total{{worker=\"{w}\"}}"),
                )
            })
            .collect()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_len(&self) -> usize {
        std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize)
    }

    /// The `accepted` line the server logged for the connection from `port`, written after
    /// byte `from` of the log (client ports are reused across connections).
    fn accept_line(&self, port: u16, from: usize) -> HashMap<String, String> {
        let needle = format!(":{port}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = self.log_text();
            let text = text.get(from..).unwrap_or("");
            for line in text.lines().filter(|l| l.contains(" accepted ")) {
                let fields = parse_fields(line);
                if fields.get("peer").is_some_and(|p| p.ends_with(&needle)) {
                    return fields;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no accepted line for client port {port} in the server log"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One connection from a thread pinned to `cpu`: a GET of a small object, then which
    /// worker accepted it (metric delta, cross-checked with the server's line).
    fn connect(&self, cpu: Option<usize>, id: &str) -> Conn {
        let before = self.accepted(&self.metrics());
        let log_from = self.log_len();
        let listen = self.listen;
        let path = format!("/obj/1000/{id}");
        let (port, resp) = on_thread(self.client_ns.clone(), cpu, move || {
            let mut s = TcpStream::connect_timeout(&listen, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("connect {listen}: {e}"));
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let port = s.local_addr().unwrap().port();
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: steering.test\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let resp = read_response(&mut BufReader::new(s), false)
                .unwrap_or_else(|e| panic!("response on port {port}: {e}"));
            (port, resp)
        });
        assert_eq!(resp.status, 200, "port {port}: {:?}", resp.headers);
        check_body(1000, id, &resp.body).unwrap();
        // The counter is bumped at accept, before the response: it is there now.
        let after = self.accepted(&self.metrics());
        let deltas: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let up: Vec<usize> = (0..self.workers).filter(|&w| deltas[w] != 0.0).collect();
        assert!(
            up.len() == 1 && deltas[up[0]] == 1.0,
            "port {port}: accepted counters moved by {deltas:?}, expected exactly one +1"
        );
        let worker = up[0];
        let fields = self.accept_line(port, log_from);
        assert_eq!(
            fields.get("worker").map(String::as_str),
            Some(worker.to_string().as_str()),
            "port {port}: the server's line names another worker than the metric: {fields:?}"
        );
        Conn {
            port,
            worker,
            fields,
        }
    }

    /// A debug request to the supervisor (see the supervisor's docs), then SIGUSR1.
    fn fault(&self, request: &str) {
        std::fs::write(&self.fault_file, request).unwrap();
        signal(self.pid, libc::SIGUSR1);
    }

    /// Whether the route gauge of `worker` reads `live` (1) or closed (0).
    fn route_live(&self, text: &str, worker: usize) -> Option<bool> {
        let tag = format!("worker=\"{worker}\"");
        text.lines()
            .find(|l| l.starts_with("edgecache_dataplane_steering_route{") && l.contains(&tag))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v == 1.0)
    }

    /// The CPU each worker is pinned to, from the route metric.
    fn worker_cpus(&self) -> Vec<usize> {
        let text = self.metrics();
        (0..self.workers)
            .map(|w| {
                let tag = format!("worker=\"{w}\"");
                let line = text
                    .lines()
                    .find(|l| {
                        l.starts_with("edgecache_dataplane_steering_route{") && l.contains(&tag)
                    })
                    .unwrap_or_else(|| panic!("no route metric for worker {w}:\n{text}"));
                line.split("cpu=\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .and_then(|c| c.parse().ok())
                    .unwrap()
            })
            .collect()
    }

    fn wait_for(&self, what: &str, cond: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.metrics();
            if cond(&text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; metrics:\n{text}\nlog tail:\n{}",
                tail(&self.log_text())
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill `worker` and keep it dead (its listener closed, steering told).
    fn kill_and_hold(&self, worker: usize) {
        self.fault(&format!("{worker} panic hold"));
        self.wait_for("the killed worker's route to close", |t| {
            self.route_live(t, worker) == Some(false)
        });
    }

    /// Let the supervisor restart `worker`; wait for the repaired route.
    fn release(&self, worker: usize, restarts: f64) {
        self.fault(&format!("{worker} release"));
        let name = format!("edgecache_dataplane_worker_restarts_total{{worker=\"{worker}\"}}");
        self.wait_for("the worker's restart", |t| {
            metric_value(t, &name) == restarts && self.route_live(t, worker) == Some(true)
        });
    }

    fn mode_metrics(&self) -> (String, f64) {
        let text = self.metrics();
        let mode = text
            .lines()
            .find_map(|l| l.strip_prefix("edgecache_dataplane_steering_info{mode=\""))
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_string();
        let fallbacks = metric_value(&text, "edgecache_dataplane_steering_fallbacks_total");
        (mode, fallbacks)
    }
}

/// LISTEN sockets on `port` in this network namespace (`/proc/net/tcp`): one per worker whose
/// listener is open. A dead worker's listener must be gone, not left accepting for nobody.
fn listeners_on(port: u16) -> usize {
    listeners_in("/proc/net/tcp", port)
}

/// The same in the network namespace of process `pid`.
fn listeners_of(pid: u32, port: u16) -> usize {
    listeners_in(&format!("/proc/{pid}/net/tcp"), port)
}

fn listeners_in(table: &str, port: u16) -> usize {
    let text = std::fs::read_to_string(table).unwrap();
    let local = format!(":{port:04X}");
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&local) && f[3] == "0A"
        })
        .count()
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// `key=value` tokens of a log line.
fn parse_fields(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect()
}

#[allow(unsafe_code)]
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// Start a loopback server in `mode` with the debug hooks on, and `more` flags.
fn start_loopback(
    origin: &str,
    dir: &Path,
    mode: &str,
    workers: u32,
    more: &[String],
) -> (Dataplane, Target, tempfile::TempDir) {
    let aux = tempfile::tempdir().unwrap();
    let fault_file = aux.path().join("fault");
    let mut o = Opts::new(origin, dir);
    o.workers = workers;
    o.extra = vec!["--steering".into(), mode.into()];
    o.extra.extend(more.iter().cloned());
    let ff = fault_file.clone();
    let dp = Dataplane::start_with(o, move |cmd| {
        cmd.env("RUST_LOG", "info,edgecache::accept=debug")
            .env("EDGECACHE_DEBUG_STEERING_OBSERVE", "1")
            .env("EDGECACHE_DEBUG_WORKER_FAULTS", &ff);
    });
    let t = Target {
        listen: dp.listen,
        admin: dp.admin,
        log: dp.log.clone(),
        workers: workers as usize,
        pid: dp.child.id(),
        client_ns: None,
        fault_file,
    };
    (dp, t, aux)
}

/// `count` connections, alternating between the workers' CPUs; `expect(conn, client_cpu)`
/// checks each. Returns the per-worker histogram.
fn round(
    t: &Target,
    cpus: &[usize],
    count: usize,
    label: &str,
    expect: impl Fn(&Conn, usize),
) -> Vec<usize> {
    let mut hist = vec![0; t.workers];
    for k in 0..count {
        let cpu = cpus[k % cpus.len()];
        let c = t.connect(Some(cpu), &format!("{label}-{k}"));
        expect(&c, cpu);
        hist[c.worker] += 1;
    }
    hist
}

fn check_mode_in_effect(t: &Target, mode: &str) {
    let (m, fallbacks) = t.mode_metrics();
    assert_eq!(m, mode, "steering_info mode");
    assert_eq!(fallbacks, 0.0, "no fallback expected");
}

/// cpu and incoming-cpu: each connection lands on the worker pinned to the client's CPU; with
/// worker 1 dead its CPU's connections go to the others (served, not refused); repaired, exact.
fn cpu_like(mode: &str) {
    let _g = serial();
    let origin = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let (_dp, t, _aux) = start_loopback(&origin.url(), dir.path(), mode, 2, &[]);
    check_mode_in_effect(&t, mode);
    let cpus = t.worker_cpus();
    let owner = |cpu: usize| cpus.iter().position(|&c| c == cpu).unwrap();
    let exact = |c: &Conn, cpu: usize| {
        assert_eq!(
            c.worker,
            owner(cpu),
            "{mode}: port {} from cpu {cpu} landed on worker {}",
            c.port,
            c.worker
        );
    };
    let hist = round(&t, &cpus, CONNS, "a", exact);
    println!(
        "VERIFY mode={mode} all workers: connections={CONNS} exact={CONNS} per-worker={hist:?}"
    );

    // Worker 1 dies and stays dead: CPU 0's connections stay exact; CPU 1's are served by
    // a live worker.
    assert_eq!(listeners_on(t.listen.port()), 2);
    t.kill_and_hold(1);
    assert_eq!(
        listeners_on(t.listen.port()),
        1,
        "the dead worker's listener is still open"
    );
    let (kept, moved) = (Cell::new(0), Cell::new(0));
    let hist = round(&t, &cpus, CONNS, "b", |c, cpu| {
        assert_ne!(c.worker, 1, "{mode}: a connection reached the dead worker");
        if owner(cpu) == 1 {
            moved.set(moved.get() + 1);
        } else {
            exact(c, cpu);
            kept.set(kept.get() + 1);
        }
    });
    println!(
        "VERIFY mode={mode} worker 1 dead: connections={CONNS} exact(live workers)={} \
         served-by-others(dead worker's cpu)={} per-worker={hist:?}",
        kept.get(),
        moved.get()
    );

    // Repaired: exact again, and the restart is counted.
    t.release(1, 1.0);
    assert_eq!(listeners_on(t.listen.port()), 2);
    let hist = round(&t, &cpus, CONNS, "c", exact);
    println!(
        "VERIFY mode={mode} after repair: connections={CONNS} exact={CONNS} per-worker={hist:?}"
    );
    assert!(
        t.log_text()
            .contains("worker restarted with a fresh listener")
    );
}

#[test]
fn cpu_mode_lands_on_the_clients_cpu() {
    if common::needs_root("cpu_mode_lands_on_the_clients_cpu", BPF) {
        return;
    }
    cpu_like("cpu");
}

/// One TLS connection to `addr` from a thread pinned to `cpu`: a GET, then the worker the
/// server's accept line names.
fn tls_connect(
    t: &Target,
    addr: SocketAddr,
    cfg: &std::sync::Arc<rustls::ClientConfig>,
    cpu: usize,
    id: &str,
) -> usize {
    let log_from = t.log_len();
    let cfg = cfg.clone();
    let path = format!("/obj/1000/{id}");
    let (port, resp) = on_thread(None, Some(cpu), move || {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let port = tcp.local_addr().unwrap().port();
        let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
        let conn = rustls::ClientConnection::new(cfg, name).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        write!(
            tls,
            "GET {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let resp = read_response(&mut BufReader::new(tls), false).unwrap();
        (port, resp)
    });
    assert_eq!(resp.status, 200);
    check_body(1000, id, &resp.body).unwrap();
    let fields = t.accept_line(port, log_from);
    fields.get("worker").and_then(|w| w.parse().ok()).unwrap()
}

#[test]
fn cpu_mode_steers_the_tls_listener_and_repairs_it() {
    let _g = serial();
    if common::needs_root("cpu_mode_steers_the_tls_listener_and_repairs_it", BPF) {
        return;
    }
    let origin = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let ca = tls_support::Ca::new();
    let (cert, key) = ca.issue(dir.path(), "a", &["a.test"]);
    let tls: SocketAddr = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    let more = [
        "--tls-listen".to_string(),
        tls.to_string(),
        "--tls-cert".into(),
        cert.display().to_string(),
        "--tls-key".into(),
        key.display().to_string(),
    ];
    let (_dp, t, _aux) = start_loopback(&origin.url(), &dir.path().join("cache"), "cpu", 2, &more);
    check_mode_in_effect(&t, "cpu");
    let cpus = t.worker_cpus();
    let owner = |cpu: usize| cpus.iter().position(|&c| c == cpu).unwrap();
    let cfg = tls_support::client_config(&ca, &["http/1.1"]);
    for k in 0..16 {
        let cpu = cpus[k % cpus.len()];
        let w = tls_connect(&t, tls, &cfg, cpu, &format!("tls-a-{k}"));
        assert_eq!(
            w,
            owner(cpu),
            "a TLS connection from cpu {cpu} landed on worker {w}"
        );
    }
    assert_eq!(listeners_on(tls.port()), 2);
    t.kill_and_hold(1);
    assert_eq!(
        listeners_on(tls.port()),
        1,
        "the dead worker's TLS listener is open"
    );
    for k in 0..8 {
        let cpu = cpus[k % cpus.len()];
        let w = tls_connect(&t, tls, &cfg, cpu, &format!("tls-b-{k}"));
        assert_ne!(w, 1, "a TLS connection reached the dead worker");
    }
    t.release(1, 1.0);
    assert_eq!(listeners_on(tls.port()), 2);
    for k in 0..16 {
        let cpu = cpus[k % cpus.len()];
        let w = tls_connect(&t, tls, &cfg, cpu, &format!("tls-c-{k}"));
        assert_eq!(
            w,
            owner(cpu),
            "after repair: cpu {cpu} landed on worker {w}"
        );
    }
    println!("VERIFY tls cpu mode: 32 exact, 8 served by the live worker while 1 was dead");
}

#[test]
fn incoming_cpu_mode_lands_on_the_clients_cpu() {
    cpu_like("incoming-cpu");
}

/// A worker whose serve loop fails (not a panic) on the thread-pool I/O engine: the supervisor
/// restarts it at once (no hold), the restart is counted and the mapping is exact again.
#[test]
fn a_failing_worker_on_the_threads_engine_is_restarted() {
    let _g = serial();
    if common::needs_root("a_failing_worker_on_the_threads_engine_is_restarted", BPF) {
        return;
    }
    let origin = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let aux = tempfile::tempdir().unwrap();
    let fault_file = aux.path().join("fault");
    let url = origin.url();
    let mut o = Opts::new(&url, dir.path());
    o.engine = "threads";
    o.extra = vec!["--steering".into(), "cpu".into()];
    let ff = fault_file.clone();
    let dp = Dataplane::start_with(o, move |cmd| {
        cmd.env("RUST_LOG", "info,edgecache::accept=debug")
            .env("EDGECACHE_DEBUG_WORKER_FAULTS", &ff);
    });
    let t = Target {
        listen: dp.listen,
        admin: dp.admin,
        log: dp.log.clone(),
        workers: 2,
        pid: dp.child.id(),
        client_ns: None,
        fault_file,
    };
    check_mode_in_effect(&t, "cpu");
    let cpus = t.worker_cpus();
    let exact = |c: &Conn, cpu: usize| {
        assert_eq!(cpus[c.worker], cpu, "port {} from cpu {cpu}", c.port);
    };
    round(&t, &cpus, 8, "t", exact);
    for (n, w) in [(1.0, 0), (2.0, 0), (1.0, 1)] {
        t.fault(&format!("{w} error"));
        let name = format!("edgecache_dataplane_worker_restarts_total{{worker=\"{w}\"}}");
        t.wait_for("the failed worker's restart", |m| {
            metric_value(m, &name) == n && t.route_live(m, w) == Some(true)
        });
    }
    let hist = round(&t, &cpus, CONNS, "u", exact);
    let log = t.log_text();
    assert!(log.contains("worker stopped with an error: injected fault: worker 0 fails"));
    assert_eq!(
        log.matches("worker restarted with a fresh listener")
            .count(),
        3,
        "three restarts logged"
    );
    println!(
        "VERIFY mode=cpu engine=threads after 3 error restarts: connections={CONNS} exact={CONNS} per-worker={hist:?}"
    );
}

#[test]
fn hash_mode_lands_on_the_flow_hash_bucket() {
    let _g = serial();
    if common::needs_root("hash_mode_lands_on_the_flow_hash_bucket", BPF) {
        return;
    }
    let origin = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let (_dp, t, _aux) = start_loopback(&origin.url(), dir.path(), "hash", 2, &[]);
    check_mode_in_effect(&t, "hash");
    let cpus = t.worker_cpus();
    let n = t.workers as i64;
    let hist = round(&t, &cpus, CONNS, "h", |c, _| {
        let want = c.field("hash") % n;
        assert_eq!(c.field("chosen"), want, "port {}: {:?}", c.port, c.fields);
        assert_eq!(c.field("err"), 0, "port {}: select failed", c.port);
        assert_eq!(
            c.worker as i64,
            want,
            "hash: port {} hash {} landed on worker {}",
            c.port,
            c.field("hash"),
            c.worker
        );
    });
    println!("VERIFY mode=hash: connections={CONNS} exact={CONNS} per-worker={hist:?}");
    assert!(
        hist.iter().all(|&h| h > 0),
        "48 flows all hashed to one worker: {hist:?}"
    );

    // Worker 0 dies: its bucket falls back to the kernel's hash over the live listener (the
    // program's select fails on the emptied slot); the other bucket stays exact.
    t.kill_and_hold(0);
    let (exact, fallback) = (Cell::new(0), Cell::new(0));
    round(&t, &cpus, CONNS, "i", |c, _| {
        assert_eq!(c.worker, 1, "a connection reached the dead worker 0");
        if c.field("hash") % n == 0 {
            assert_ne!(c.field("err"), 0, "the dead worker's slot still selected");
            fallback.set(fallback.get() + 1);
        } else {
            assert_eq!(c.field("err"), 0);
            exact.set(exact.get() + 1);
        }
    });
    println!(
        "VERIFY mode=hash worker 0 dead: connections={CONNS} exact={} fallback(dead bucket)={}",
        exact.get(),
        fallback.get()
    );
    t.release(0, 1.0);
    let hist = round(&t, &cpus, CONNS, "k", |c, _| {
        assert_eq!(c.worker as i64, c.field("hash") % n, "port {}", c.port);
    });
    println!(
        "VERIFY mode=hash after repair: connections={CONNS} exact={CONNS} per-worker={hist:?}"
    );
}

#[test]
fn off_mode_uses_the_kernel_hash() {
    let _g = serial();
    let origin = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let (_dp, t, _aux) = start_loopback(&origin.url(), dir.path(), "off", 2, &[]);
    check_mode_in_effect(&t, "off");
    let cpus = t.worker_cpus();
    // Every connection accepted exactly once (checked in connect) by one of the workers.
    let hist = round(&t, &cpus, CONNS, "o", |c, _| {
        assert!(c.worker < 2);
        assert!(
            !c.fields.contains_key("chosen"),
            "no program runs in off mode"
        );
    });
    println!(
        "VERIFY mode=off (kernel hash): connections={CONNS} accepted-once={CONNS} per-worker={hist:?}"
    );
    // A dead worker's listener accepts nothing: everything goes to the live one.
    t.kill_and_hold(1);
    let hist = round(&t, &cpus, CONNS / 2, "p", |c, _| assert_eq!(c.worker, 0));
    println!(
        "VERIFY mode=off worker 1 dead: connections={} on-live-worker={} per-worker={hist:?}",
        CONNS / 2,
        CONNS / 2
    );
    t.release(1, 1.0);
    let hist = round(&t, &cpus, CONNS / 2, "q", |_, _| {});
    println!("VERIFY mode=off after repair: per-worker={hist:?}");
}

// ---------------------------------------------------------------------------------------------
// queue mode over a 4-queue veth between two network namespaces

/// A server process; killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn queue_mode_over_a_4_queue_veth_with_a_worker_killed_and_repaired() {
    let _g = serial();
    if common::needs_root(
        "queue_mode_over_a_4_queue_veth_with_a_worker_killed_and_repaired",
        "network namespaces and a 4-queue veth",
    ) {
        return;
    }
    let ns = VethPair::new('y', 9);
    // The origin lives in the server's namespace (its socket is created there).
    let origin = on_thread(Some(ns.srv.clone()), None, common::origin);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("veth.yaml");
    std::fs::write(
        &cfg,
        "workers:\n  queueOffset: 0\n  steeringRequired: true\n",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let log = dir.path().join("server.log");
    let fault_file = dir.path().join("fault");
    let listen: SocketAddr = format!("{}:8080", ns.server_ip).parse().unwrap();
    let admin: SocketAddr = format!("{}:9090", ns.server_ip).parse().unwrap();
    let out = File::create(&log).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.srv, common::BIN, "serve"])
        .args(["--origin", &origin.url()])
        .args(["--listen", &listen.to_string()])
        .args(["--admin", &admin.to_string()])
        .arg("--cache-dir")
        .arg(&cache)
        .args([
            "--cache-size",
            "256MiB",
            "--workers",
            "4",
            "--steering",
            "queue",
        ])
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "info,edgecache::accept=debug")
        .env("EDGECACHE_DEBUG_STEERING_OBSERVE", "1")
        .env("EDGECACHE_DEBUG_WORKER_FAULTS", &fault_file)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    // `ip netns exec` execs the server: same pid.
    let pid = child.id();
    let _proc = Proc(child);
    let t = Target {
        listen,
        admin,
        log,
        workers: 4,
        pid,
        client_ns: Some(ns.cli.clone()),
        fault_file,
    };
    t.wait_for("the server to be ready", |m| {
        metric_value(m, "edgecache_dataplane_ready") == 1.0
    });
    check_mode_in_effect(&t, "queue");
    for w in 0..4 {
        let tag = format!("selector=\"queue {w} (queue_mapping {w})\",worker=\"{w}\"");
        assert!(t.metrics().contains(&tag), "route metric {tag}");
    }
    assert!(
        t.log_text()
            .contains("queue 3 (queue_mapping 3) -> worker 3")
    );

    let want = |c: &Conn| (c.field("queue") as usize) % 4;
    let run = |label: &str, dead: Option<usize>| {
        let (mut exact, mut fallback) = (0, 0);
        let mut queues = [0usize; 4];
        let mut hist = [0usize; 4];
        for k in 0..CONNS {
            let c = t.connect(None, &format!("{label}-{k}"));
            let q = want(&c);
            queues[q] += 1;
            hist[c.worker] += 1;
            if Some(q) == dead {
                assert_ne!(Some(c.worker), dead, "a connection reached the dead worker");
                assert_eq!(
                    c.field("index"),
                    NO_SLOT,
                    "the dead worker still has an index"
                );
                fallback += 1;
            } else {
                assert_eq!(
                    c.worker,
                    q,
                    "{label}: port {} queue_mapping {} landed on worker {}",
                    c.port,
                    c.field("queue"),
                    c.worker
                );
                exact += 1;
            }
        }
        println!(
            "VERIFY mode=queue {label}: connections={CONNS} exact={exact} \
             fallback(dead worker's queue)={fallback} queue histogram={queues:?} per-worker={hist:?}"
        );
        assert_eq!(exact + fallback, CONNS);
        assert!(
            queues.iter().filter(|&&q| q > 0).count() >= 2,
            "flows used one queue only: {queues:?}"
        );
        (exact, fallback)
    };
    let (exact, _) = run("all-workers", None);
    assert_eq!(exact, CONNS);

    assert_eq!(listeners_of(pid, 8080), 4);
    t.kill_and_hold(1);
    assert_eq!(
        listeners_of(pid, 8080),
        3,
        "the dead worker's listener is open"
    );
    run("worker-1-dead", Some(1));

    t.release(1, 1.0);
    assert_eq!(listeners_of(pid, 8080), 4);
    let (exact, _) = run("after-repair", None);
    assert_eq!(exact, CONNS);

    // A second death, of the last group member this time, repaired the same way.
    t.kill_and_hold(3);
    run("worker-3-dead", Some(3));
    t.release(3, 1.0);
    let (exact, _) = run("after-second-repair", None);
    assert_eq!(exact, CONNS);
    drop(_proc);
    drop(origin);
    drop(ns);
}

// ---------------------------------------------------------------------------------------------
// without CAP_BPF

const CAP_SYS_ADMIN: libc::c_ulong = 21;
const CAP_BPF: libc::c_ulong = 39;

/// Drop CAP_BPF and CAP_SYS_ADMIN from the child's bounding set before exec (what `capsh
/// --drop=cap_bpf,cap_sys_admin` does): a root process then execs without them. Another user
/// has neither to drop (nor the CAP_SETPCAP it takes): its child runs without them as it is.
#[allow(unsafe_code)]
fn drop_bpf_caps(cmd: &mut Command) {
    if !common::is_root() {
        return;
    }
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which
    // is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            for cap in [CAP_BPF, CAP_SYS_ADMIN] {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

fn cap_eff(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

#[test]
fn without_cap_bpf_the_server_falls_back_to_off_and_serves() {
    let _g = serial();
    let origin = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let url = origin.url();
    let mut o = Opts::new(&url, dir.path());
    o.extra = vec!["--steering".into(), "cpu".into()];
    let dp = Dataplane::start_with(o, drop_bpf_caps);
    let caps = cap_eff(dp.child.id());
    assert_eq!(caps & (1 << CAP_BPF), 0, "CAP_BPF still effective");
    assert_eq!(
        caps & (1 << CAP_SYS_ADMIN),
        0,
        "CAP_SYS_ADMIN still effective"
    );
    let first = dp.get("/obj/1000/fallback");
    assert_eq!(first.status, 200);
    assert!(!first.is_hit(), "first request: {}", first.cache_status());
    check_body(1000, "fallback", &first.body).unwrap();
    let second = dp.get("/obj/1000/fallback");
    assert_eq!(second.status, 200);
    assert!(second.is_hit(), "second request: {}", second.cache_status());
    check_body(1000, "fallback", &second.body).unwrap();
    let m = dp.metrics();
    assert_eq!(
        metric_value(&m, "edgecache_dataplane_steering_info{mode=\"off\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_value(&m, "edgecache_dataplane_steering_fallbacks_total"),
        1.0
    );
    let log = dp.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("steering fallback"))
        .collect();
    assert_eq!(lines.len(), 1, "one fallback line:\n{log}");
    assert!(
        lines[0].contains("missing capability"),
        "the line says why: {}",
        lines[0]
    );
    println!("VERIFY fallback without CAP_BPF: {}", lines[0].trim());
}

#[test]
fn without_cap_bpf_required_steering_refuses_to_start() {
    let _g = serial();
    let origin = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("required.yaml");
    std::fs::write(&cfg, "workers:\n  steeringRequired: true\n").unwrap();
    let mut cmd = Command::new(common::BIN);
    cmd.args(["serve", "--origin", &origin.url()])
        // Port 0 (two loopback addresses): it must refuse for the capability, not for a port
        // another test took.
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.2:0"])
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args([
            "--cache-size",
            "64MiB",
            "--workers",
            "2",
            "--steering",
            "cpu",
        ])
        .arg("--config")
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    drop_bpf_caps(&mut cmd);
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut child = Proc(child);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not refuse to start"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.0.wait_with_output_ref();
    assert!(!status.success(), "exit status {status}");
    assert!(
        out.contains("refusing to start") && out.contains("required"),
        "clear message expected:\n{out}"
    );
    println!(
        "VERIFY steeringRequired without CAP_BPF: exit {status}; {}",
        out.lines()
            .find(|l| l.contains("refusing"))
            .unwrap_or("")
            .trim()
    );
}

trait OutputRef {
    fn wait_with_output_ref(&mut self) -> String;
}

impl OutputRef for Child {
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let mut text = String::new();
        if let Some(mut o) = self.stdout.take() {
            let _ = o.read_to_string(&mut text);
        }
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut text);
        }
        text
    }
}
