//! The purge controller against real `edgecache-dataplane` processes: three data planes on
//! 127.0.0.2-4 (one admin port, the pods' `status.podIP`s in the fake API server), each with
//! the admin token file the operator's Secret holds and its node name, caching from an
//! in-test origin. A tagged object is cached on every node; one node is down when the purge is
//! made and comes back (same cache directory) later: every node then misses the object, the
//! late one too, since the purge is dated at its creation.
//!
//! Needs the data-plane binary next to this test's (`cargo build -p edgecache-dataplane` with
//! the same target directory), or `EDGECACHE_DATAPLANE_BIN`; without it the test prints
//! `SKIPPED` and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod dataplane_support;
mod purge_support;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use edgecache_operator::pod_admin;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use purge_support::*;
use serde_json::json;
use tokio::net::TcpListener;

/// An origin that counts the requests per path and tags every object `product-42`.
async fn origin() -> (SocketAddr, Arc<Mutex<BTreeMap<String, usize>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let log = counts.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = log.clone();
            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                *log.lock()
                    .unwrap()
                    .entry(req.uri().path().to_string())
                    .or_default() += 1;
                async move {
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .header("cache-control", "public, max-age=3600")
                            .header("surrogate-key", "product-42")
                            .body(Full::new(Bytes::from(vec![b'x'; 1000])))
                            .unwrap(),
                    )
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, counts)
}

/// One data-plane process; killed on drop.
struct Dataplane {
    child: Killed,
    args: Vec<String>,
    node: &'static str,
    listen: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
}

impl Dataplane {
    async fn start(
        bin: &Path,
        dir: &Path,
        origin: SocketAddr,
        admin: SocketAddr,
        node: &'static str,
    ) -> Self {
        let listen: SocketAddr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let args = serve_args(origin, listen, admin, dir, TOKEN);
        let log = dir.join(format!("dataplane-{node}.log"));
        let mut dp = Self {
            child: Killed(spawn(bin, &args, node, &log)),
            args,
            node,
            listen,
            admin,
            log,
        };
        dp.wait_ready().await;
        dp
    }

    async fn wait_ready(&mut self) {
        wait_ready(&mut self.child, self.admin, &self.log).await;
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start again on the same cache directory and addresses (a restarted pod).
    async fn restart(&mut self, bin: &Path) {
        self.stop();
        self.child = Killed(spawn(bin, &self.args, self.node, &self.log));
        self.wait_ready().await;
    }

    async fn get(&self, path: &str) -> u16 {
        pod_admin::call("GET", self.listen, path, None, Duration::from_secs(5))
            .await
            .unwrap()
            .0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_data_planes_purge_what_they_stored_before_the_purge_even_when_late() {
    let Some(bin) = dataplane_bin() else {
        println!("SKIPPED: {NOT_BUILT}");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (origin_addr, counts) = origin().await;
    let port = common_port(&IPS).await;
    let fake = cluster(port, TOKEN).await;
    let nodes = ["node-a", "node-b", "node-c"];
    let mut dps = Vec::new();
    for (i, node) in nodes.into_iter().enumerate() {
        let dir = tmp.path().join(node);
        std::fs::create_dir_all(&dir).unwrap();
        let admin: SocketAddr = format!("{}:{port}", IPS[i]).parse().unwrap();
        dps.push(Dataplane::start(&bin, &dir, origin_addr, admin, node).await);
        put_pod(&fake, &format!("web-{i}"), node, IPS[i], true);
    }
    let fetched = || counts.lock().unwrap().get("/p/42").copied().unwrap_or(0);
    // Cached on every node: one origin fetch each, then hits.
    for dp in &dps {
        assert_eq!(dp.get("/p/42").await, 200);
        assert_eq!(dp.get("/p/42").await, 200);
    }
    assert_eq!(fetched(), 3, "one miss per node, then hits");

    // node-c is down (its pod still looks ready) when the purge is made.
    dps[2].stop();
    let op = Operator::start(&fake, Duration::from_secs(3600));
    create_purge(
        &fake,
        "p42",
        json!({"edgeCache": "web", "tags": ["product-42"]}),
    )
    .await;
    until_confirmed(&fake, "p42", "2/3").await;
    let (s, _, message) = complete(&fake, "p42").unwrap();
    assert_eq!(s, "False");
    assert!(message.contains("node node-c"), "{message}");
    // The node names are the data planes' own (their answers).
    let st = status(&fake, "p42");
    let named: Vec<&str> = st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["node-a", "node-b"]);
    for dp in &dps[..2] {
        assert_eq!(dp.get("/p/42").await, 200);
    }
    assert_eq!(fetched(), 5, "purged on node-a and node-b: fetched again");

    // node-c comes back with its cache: the retry purges what it stored before the purge.
    dps[2].restart(&bin).await;
    eventually("the purge is Complete", || is_complete(&fake, "p42")).await;
    assert_eq!(status(&fake, "p42")["nodes"][2]["node"], "node-c");
    assert_eq!(dps[2].get("/p/42").await, 200);
    assert_eq!(
        fetched(),
        6,
        "purged on node-c too, though it got the purge late"
    );
    // Later copies are newer than the purge (a later second): hits again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for dp in &dps {
        assert_eq!(dp.get("/p/42").await, 200);
    }
    let after = fetched();
    for dp in &dps {
        assert_eq!(dp.get("/p/42").await, 200);
    }
    assert_eq!(fetched(), after, "copies stored after the purge are kept");
    op.stop().await;
}
