//! The chart's Grafana dashboard and PrometheusRule against a real Prometheus: every panel's
//! query and every alert's expression parses and finds series, so a renamed metric breaks the
//! build, not the dashboard.
//!
//! Two real `edgecache-dataplane` processes (nodes `node-a` and `node-b` on 127.0.0.2 and
//! 127.0.0.3, sharded between them, each with a TLS listener and a memory limit) cache from an
//! in-test origin; the purge controller runs against the fake API server with a third pod
//! (`node-c`, 127.0.0.4) where no data plane answers, and the operator's admin endpoint serves
//! its metrics. A short bounded load goes through them: misses, hits, forwards to the key's
//! owner, a 404, a 500, an origin that drops the connection, HTTP/2 over TLS (curl), a stream
//! cancelled, a broken HTTP/2 connection, a tag purge and lookups of what it named.
//! Prometheus (`/usr/bin/prometheus`, Debian's package; scripts/test.sh installs it) scrapes
//! them every second with the labels the chart's PodMonitor and ServiceMonitor give (namespace,
//! pod, node, edgecache), and loads the alert rules rendered by `helm template`. Then:
//!
//! - every target of every panel of `charts/edgecache/dashboards/edgecache.json`, with the
//!   dashboard's variables set to "All" and `$__rate_interval` to 1m, and every variable's
//!   `label_values` query, answers without an error and with at least one series;
//! - `promtool check rules` accepts the rendered rule groups, Prometheus evaluates each rule
//!   without an error, each alert's expression parses as it is, and with `bool` on its final
//!   comparison (`<query> > bool <threshold>`) finds at least one series.
//!
//! Needs the data-plane binary next to this test's (`cargo build -p edgecache-dataplane` with
//! the same target directory) or `EDGECACHE_DATAPLANE_BIN`, Prometheus and promtool
//! (`PROMETHEUS_BIN`, `PROMTOOL_BIN`, default /usr/bin), helm (`HELM`, the cached
//! charts/install-helm.sh one, or PATH), openssl and curl; without one it prints `SKIPPED`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod dataplane_support;
mod purge_support;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use edgecache_operator::pod_admin;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use purge_support::*;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The nodes that run a data plane; `IPS[2]` (node-c) has a pod but no data plane.
const NODES: [&str; 2] = ["node-a", "node-b"];
/// What `$__rate_interval` is in the queries (Prometheus scrapes every second).
const RATE_INTERVAL: &str = "1m";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn runs(bin: &Path, arg: &str) -> bool {
    Command::new(bin)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `var` from the environment, or `default`, if it runs.
fn tool(var: &str, default: &str, arg: &str) -> Option<PathBuf> {
    let bin = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    runs(&bin, arg).then_some(bin)
}

/// helm: `$HELM`, the one charts/install-helm.sh caches, or PATH (as e2e/src/chart.rs).
fn helm() -> Option<PathBuf> {
    let tools = std::env::var_os("EDGECACHE_TOOLS")
        .map_or_else(|| PathBuf::from("/var/tmp/edgecache-tools"), PathBuf::from);
    let mut candidates: Vec<PathBuf> = std::env::var_os("HELM")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.push(tools.join("helm"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("helm")));
    }
    candidates.into_iter().find(|c| runs(c, "version"))
}

struct Tools {
    dataplane: PathBuf,
    prometheus: PathBuf,
    promtool: PathBuf,
    helm: PathBuf,
}

fn tools() -> Result<Tools, String> {
    let dataplane = dataplane_bin().ok_or(NOT_BUILT)?;
    let prometheus = tool("PROMETHEUS_BIN", "/usr/bin/prometheus", "--version").ok_or(
        "prometheus not installed (apt-get install prometheus; scripts/test.sh installs it)",
    )?;
    let promtool = tool("PROMTOOL_BIN", "/usr/bin/promtool", "--version")
        .ok_or("promtool not installed (Debian's prometheus package)")?;
    let helm = helm().ok_or("helm not installed (charts/install-helm.sh)")?;
    for t in ["openssl", "curl"] {
        if !runs(Path::new(t), "--version") && !runs(Path::new(t), "version") {
            return Err(format!("{t} not installed"));
        }
    }
    Ok(Tools {
        dataplane,
        prometheus,
        promtool,
        helm,
    })
}

/// The origin: `/obj/N` cacheable and tagged `product-42`, `/missing` a 404, `/error` a 500,
/// `/reset` a connection dropped without an answer, `/slow` an answer after 3 s.
async fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                let path = req.uri().path().to_string();
                let r = hyper::Response::builder();
                let r = match path.as_str() {
                    "/missing" => r.status(404).header("cache-control", "max-age=60"),
                    "/error" => r.status(500).header("cache-control", "no-store"),
                    "/reset" => return Err(std::io::Error::other("dropped")),
                    "/slow" => {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        r.header("cache-control", "no-store")
                    }
                    _ => r
                        .header("cache-control", "public, max-age=3600")
                        .header("surrogate-key", "product-42"),
                };
                Ok(r.body(Full::new(Bytes::from(vec![b'x'; 2000]))).unwrap())
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// A free port on `ip`.
fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One data-plane process; killed on drop.
struct Dataplane {
    child: Killed,
    listen: SocketAddr,
    tls: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
}

impl Dataplane {
    fn spawn(
        bin: &Path,
        dir: &Path,
        origin: SocketAddr,
        node: &str,
        (listen, tls, admin): (SocketAddr, SocketAddr, SocketAddr),
        peers: &Path,
    ) -> Self {
        let certs = dir.parent().unwrap();
        let mut args = serve_args(origin, listen, admin, dir, TOKEN);
        for (flag, value) in [
            ("--tls-listen", tls.to_string()),
            ("--tls-cert", certs.join("cert.pem").display().to_string()),
            ("--tls-key", certs.join("key.pem").display().to_string()),
            ("--peers", peers.display().to_string()),
        ] {
            args.extend([flag.to_string(), value]);
        }
        let log = dir.join("dataplane.log");
        let child = Killed(spawn(bin, &args, node, &log));
        Self {
            child,
            listen,
            tls,
            admin,
            log,
        }
    }

    async fn wait_ready(&mut self) {
        wait_ready(&mut self.child, self.admin, &self.log).await;
    }

    async fn get(&self, path: &str) -> u16 {
        pod_admin::call("GET", self.listen, path, None, Duration::from_secs(10))
            .await
            .map_or(0, |r| r.0)
    }

    /// HTTP/2 over TLS (curl): `paths` on one connection; the HTTP versions curl saw.
    fn curl_h2(&self, paths: &[&str], max_time: Option<&str>) -> String {
        let host = format!("a.test:{}", self.tls.port());
        let mut cmd = Command::new("curl");
        cmd.args(["-sk", "--http2", "--resolve"])
            .arg(format!("{host}:{}", self.tls.ip()))
            .args(["-w", "%{http_version} "]);
        if let Some(t) = max_time {
            cmd.args(["--max-time", t]);
        }
        for p in paths {
            cmd.arg(format!("https://{host}{p}"))
                .args(["-o", "/dev/null"]);
        }
        let out = cmd.output().expect("run curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A prior-knowledge HTTP/2 connection to the plain listener that sends a DATA frame on
    /// stream 0: a connection error (PROTOCOL_ERROR).
    fn broken_h2(&self) {
        let mut s = std::net::TcpStream::connect(self.listen).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut frames = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        frames.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS
        frames.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0]); // DATA on stream 0
        s.write_all(&frames).unwrap();
        let mut buf = [0u8; 4096];
        while matches!(std::io::Read::read(&mut s, &mut buf), Ok(n) if n > 0) {}
    }
}

/// A self-signed certificate for `a.test` (openssl), in `dir`.
fn certificate(dir: &Path) {
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "30",
            "-subj",
            "/CN=a.test",
            "-addext",
            "subjectAltName=DNS:a.test",
            "-keyout",
        ])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "openssl req failed");
}

/// Prometheus on a loopback port, its storage in `dir`; killed on drop.
struct Prometheus {
    child: Killed,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    async fn start(bin: &Path, dir: &Path, config: &str) -> Self {
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port("127.0.0.1"))
            .parse()
            .unwrap();
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn prometheus");
        let mut p = Self {
            child: Killed(child),
            addr,
            log,
        };
        for _ in 0..300 {
            if let Ok((200, _)) =
                pod_admin::call("GET", addr, "/-/ready", None, Duration::from_secs(1)).await
            {
                return p;
            }
            assert!(
                p.child.try_wait().unwrap().is_none(),
                "prometheus exited: {}",
                p.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("prometheus is not ready: {}", p.log_text());
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn api(&self, path_and_query: &str) -> Value {
        let (status, body) = pod_admin::call(
            "GET",
            self.addr,
            path_and_query,
            None,
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("{path_and_query}: {e}"));
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "{path_and_query}: {status} {e}: {}",
                String::from_utf8_lossy(&body)
            )
        })
    }

    /// The value of a query that gives one series, if it does.
    async fn scalar(&self, q: &str) -> Option<f64> {
        let answer = self.query(q).await;
        answer["data"]["result"][0]["value"][1]
            .as_str()?
            .parse()
            .ok()
    }

    /// Until `n` targets have been scraped (Prometheus's scrape manager takes up to 5 s to
    /// start scraping new targets).
    async fn wait_for_targets(&self, n: usize) {
        for _ in 0..120 {
            if self.scalar("count(up)").await == Some(n as f64) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("prometheus did not scrape {n} targets: {}", self.log_text());
    }

    /// Until every target has been scraped at least 4 times in the last minute, the last time
    /// more than 2 s after `after`.
    async fn wait_for_scrapes(&self, after: std::time::SystemTime) {
        let after = after
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        for _ in 0..120 {
            let count = self.scalar("min(count_over_time(up[1m]))").await;
            let last = self.scalar("min(timestamp(up))").await;
            if count.is_some_and(|c| c >= 4.0) && last.is_some_and(|t| t > after + 2.0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("prometheus did not scrape its targets: {}", self.log_text());
    }

    /// An instant query's answer.
    async fn query(&self, q: &str) -> Value {
        let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        self.api(&format!("/api/v1/query?query={q}")).await
    }
}

/// What is wrong with an instant query's answer: an error, or no series.
fn problem(answer: &Value) -> Option<String> {
    if answer.get("errorType").is_some() || answer["status"] != "success" {
        return Some(format!(
            "error {}: {}",
            answer["errorType"], answer["error"]
        ));
    }
    match answer["data"]["result"].as_array() {
        Some(r) if !r.is_empty() => None,
        _ => Some("no series".into()),
    }
}

/// A dashboard query as Grafana sends it with every variable at "All".
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$namespace", ".*")
        .replace("$edgecache", ".*")
        .replace("$node", ".*")
}

/// `expr` with `bool` on its last comparison at the top level (outside brackets and strings),
/// which must be followed by a number only: `A < 0.5` becomes `A < bool 0.5`, which gives every
/// series of `A` (0 or 1) instead of those past the threshold.
fn with_bool(expr: &str) -> Result<String, String> {
    let b = expr.as_bytes();
    let (mut depth, mut i, mut last) = (0i32, 0, None);
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            q @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'=' | b'!' | b'<' | b'>' if depth == 0 => {
                let two = b.get(i + 1) == Some(&b'=');
                if b[i] != b'!' && b[i] != b'=' || two {
                    let end = i + if two { 2 } else { 1 };
                    last = Some(end);
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let end = last.ok_or("no comparison at the top level")?;
    let rest = expr[end..].trim();
    rest.parse::<f64>()
        .map_err(|_| format!("the last comparison is not with a number: `{rest}`"))?;
    Ok(format!("{} bool {rest}", &expr[..end]))
}

/// The rule groups of the chart's PrometheusRule, rendered with the alerts on and `sets`.
fn rendered_rules(helm: &Path, sets: &[&str]) -> Value {
    let chart = repo_root().join("charts/edgecache");
    let mut cmd = Command::new(helm);
    cmd.args(["template", "ec"])
        .arg(&chart)
        .args(["--namespace", "edge-system"])
        .args(["--show-only", "templates/prometheusrule.yaml"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = yaml_serde::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(doc["kind"], "PrometheusRule");
    doc["spec"].clone()
}

/// Every (alert name, expression) of the rule groups.
fn alerts(spec: &Value) -> Vec<(String, String)> {
    spec["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn prometheus_config(dps: &[Dataplane], operator: SocketAddr, dead: SocketAddr) -> String {
    // Static labels where the PodMonitor relabels from the pod (node, edgecache) and the
    // prometheus-operator adds namespace and pod.
    let mut targets = String::new();
    let pods = dps
        .iter()
        .map(|d| d.admin)
        .chain([dead])
        .zip(["node-a", "node-b", "node-c"]);
    for (i, (addr, node)) in pods.enumerate() {
        targets.push_str(&format!(
            "      - targets: ['{addr}']\n        labels: {{namespace: {NS}, edgecache: web, \
             node: {node}, pod: web-{i}}}\n"
        ));
    }
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files: [rules.yaml]\n\
         scrape_configs:\n\
         \x20 - job_name: edge/ec-edgecache-dataplane\n    static_configs:\n{targets}\
         \x20 - job_name: ec-edgecache\n    static_configs:\n\
         \x20     - targets: ['{operator}']\n        labels: {{namespace: edge-system, \
         pod: ec-edgecache-operator-0}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_and_alert_finds_series_in_a_real_prometheus() {
    let tools = match tools() {
        Ok(t) => t,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    certificate(tmp.path());

    // The alert rules, as the chart renders them (rules.yaml, which Prometheus loads too):
    // promtool accepts them. In this short test
    // the hit-ratio alert's minimum lookup rate is 0 (a rate over its window is far below 1/s).
    let spec = rendered_rules(
        &tools.helm,
        &[
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.hitRatio.minRequestsPerSecond=0",
        ],
    );
    let rules = tmp.path().join("rules.yaml");
    std::fs::write(&rules, yaml_serde::to_string(&spec).unwrap()).unwrap();
    let check = Command::new(&tools.promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let alerts = alerts(&spec);

    // Two sharded data planes, and node-c's pod, where nothing answers.
    let origin = origin().await;
    let admin_port = common_port(&IPS).await;
    let addrs: Vec<(SocketAddr, SocketAddr, SocketAddr)> = IPS[..2]
        .iter()
        .map(|ip| {
            let at = |port| format!("{ip}:{port}").parse().unwrap();
            (at(free_port(ip)), at(free_port(ip)), at(admin_port))
        })
        .collect();
    let peers = tmp.path().join("peers");
    let list: String = NODES
        .iter()
        .zip(&addrs)
        .map(|(n, a)| format!("{n} {}\n", a.0))
        .collect();
    std::fs::write(&peers, list).unwrap();
    let mut dps = Vec::new();
    for (node, a) in NODES.iter().zip(&addrs) {
        let dir = tmp.path().join(node);
        std::fs::create_dir_all(&dir).unwrap();
        dps.push(Dataplane::spawn(
            &tools.dataplane,
            &dir,
            origin,
            node,
            *a,
            &peers,
        ));
    }
    for dp in &mut dps {
        dp.wait_ready().await;
    }
    let fake = cluster(admin_port, TOKEN).await;
    for (i, node) in ["node-a", "node-b", "node-c"].into_iter().enumerate() {
        put_pod(&fake, &format!("web-{i}"), node, IPS[i], true);
    }
    let op = Operator::start(&fake, Duration::from_secs(3600));
    let op_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let op_addr = op_listener.local_addr().unwrap();
    let op_admin = tokio::spawn(edgecache_operator::admin::serve(
        op_listener,
        op.ctx.clone(),
        Arc::new(AtomicBool::new(true)),
    ));

    let dead: SocketAddr = format!("{}:{admin_port}", IPS[2]).parse().unwrap();
    let prom = Prometheus::start(
        &tools.prometheus,
        tmp.path(),
        &prometheus_config(&dps, op_addr, dead),
    )
    .await;

    // Every target scraped once before the load, so that its counters rise between scrapes.
    prom.wait_for_targets(4).await;

    // The load: misses (half of them forwarded to the other node, the key's owner), hits, a
    // 404, a 500, a dropped origin connection, on both nodes.
    for dp in &dps {
        for round in 0..2 {
            for n in 0..8 {
                assert_eq!(dp.get(&format!("/obj/{n}")).await, 200, "round {round}");
            }
        }
        assert_eq!(dp.get("/missing").await, 404);
        assert_eq!(dp.get("/error").await, 500);
        assert!(dp.get("/reset").await >= 500);
    }
    // HTTP/2 over TLS, a stream cancelled (curl gives up on a slow answer), a broken
    // HTTP/2 connection.
    for dp in &dps {
        let versions = dp.curl_h2(&["/obj/1", "/obj/2", "/obj/9"], None);
        assert_eq!(versions.trim(), "2 2 2", "curl over TLS");
        dp.curl_h2(&["/slow"], Some("1"));
        dp.broken_h2();
    }
    // A tag purge: confirmed by node-a and node-b, node-c unreachable (the operator retries);
    // then lookups of what it named.
    create_purge(
        &fake,
        "p42",
        json!({"edgeCache": "web", "tags": ["product-42"]}),
    )
    .await;
    until_confirmed(&fake, "p42", "2/3").await;
    for dp in &dps {
        for n in 0..8 {
            assert_eq!(dp.get(&format!("/obj/{n}")).await, 200);
        }
    }
    assert!(op.deliveries("unreachable") > 0);

    // A few scrapes and rule evaluations after the load.
    prom.wait_for_scrapes(std::time::SystemTime::now()).await;

    let mut failures = Vec::new();
    let mut checked = 0;

    // The dashboard: every target of every panel, and the variables' label_values.
    let path = repo_root().join("charts/edgecache/dashboards/edgecache.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut panels = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        panels += 1;
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for t in targets {
            let expr = substitute(t["expr"].as_str().unwrap());
            checked += 1;
            if let Some(p) = problem(&prom.query(&expr).await) {
                failures.push(format!("panel {}: {p}: {expr}", panel["title"]));
            }
        }
    }
    let mut variables = 0;
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        let Some(q) = v["query"]["query"].as_str() else {
            continue;
        };
        variables += 1;
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .expect("a label_values(selector, label) variable");
        let (selector, label) = inner.rsplit_once(',').unwrap();
        let answer = prom.query(&substitute(selector)).await;
        let has_label = answer["data"]["result"]
            .as_array()
            .is_some_and(|r| r.iter().any(|s| s["metric"].get(label.trim()).is_some()));
        if !has_label {
            failures.push(format!(
                "variable {}: no series of {selector} with label {label}",
                v["name"]
            ));
        }
    }

    // The alerts: Prometheus evaluated each without an error; each expression parses as it is
    // and finds series with `bool` on its threshold.
    let loaded = prom.api("/api/v1/rules").await;
    let evaluated: BTreeSet<String> = loaded["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| {
            if r["health"] == "ok" {
                r["name"].as_str().map(str::to_string)
            } else {
                failures.push(format!(
                    "rule {} {}: {}",
                    r["name"], r["health"], r["lastError"]
                ));
                None
            }
        })
        .collect();
    for (name, expr) in &alerts {
        checked += 1;
        if !evaluated.contains(name) {
            failures.push(format!("alert {name} was not evaluated by Prometheus"));
        }
        let answer = prom.query(expr).await;
        if answer.get("errorType").is_some() {
            failures.push(format!("alert {name}: {}: {expr}", answer["error"]));
            continue;
        }
        match with_bool(expr) {
            Ok(all) => {
                if let Some(p) = problem(&prom.query(&all).await) {
                    failures.push(format!("alert {name}: {p}: {all}"));
                }
            }
            Err(e) => failures.push(format!("alert {name}: {e}: {expr}")),
        }
    }
    println!(
        "{panels} panels ({checked} queries with the alerts), {variables} variables, {} alerts \
         checked in Prometheus",
        alerts.len()
    );
    assert!(
        failures.is_empty(),
        "{} of the queries failed:\n{}\n\nprometheus log:\n{}\nnode-a log:\n{}",
        failures.len(),
        failures.join("\n"),
        prom.log_text(),
        std::fs::read_to_string(&dps[0].log).unwrap_or_default()
    );
    assert!(
        panels >= 25 && alerts.len() == 6,
        "{panels} panels, {} alerts",
        alerts.len()
    );
    op_admin.abort();
    op.stop().await;
}

#[test]
fn bool_goes_on_the_last_top_level_comparison() {
    assert_eq!(
        with_bool("(sum(a{x!=\"1\"}) / (sum(b) > 0)) < 0.5").unwrap(),
        "(sum(a{x!=\"1\"}) / (sum(b) > 0)) < bool 0.5"
    );
    assert_eq!(with_bool("min(up) >= 1").unwrap(), "min(up) >= bool 1");
    assert!(with_bool("sum(rate(a[5m]))").is_err());
    assert!(with_bool("a > b").is_err());
}
