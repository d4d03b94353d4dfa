//! Shared by the purge controller tests: the purge controller running against the fake API
//! server, a cluster with an EdgeCache `web` and its admin token Secret, its pods, and readers
//! of the EdgeCachePurge status.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test support

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use edgecache_api::purge::EdgeCachePurge;
use edgecache_api::v1alpha1::EdgeCache;
use edgecache_fakeapi::{FakeApiServer, keys};
use edgecache_operator::build::{MANAGER, admin_secret_name, selector_labels};
use edgecache_operator::context::Context;
use edgecache_operator::purge::{self, Settings};
use edgecache_operator::test_support::minimal_edgecache;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const NS: &str = "edge";
pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A port free on every address the tests use (the pods share one admin port).
pub async fn common_port(ips: &[&str]) -> u16 {
    for _ in 0..50 {
        let first = std::net::TcpListener::bind((ips[0], 0)).expect("bind");
        let port = first.local_addr().expect("addr").port();
        if ips[1..]
            .iter()
            .all(|ip| std::net::TcpListener::bind((*ip, port)).is_ok())
        {
            return port;
        }
    }
    panic!("no common free port on {ips:?}");
}

/// The purge controller running against `fake`.
pub struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    pub ctx: Arc<Context>,
}

impl Operator {
    pub fn start(fake: &FakeApiServer, retention: Duration) -> Self {
        Self::start_with_resync(fake, retention, Duration::from_secs(1))
    }

    /// With complete purges looked at again every `resync` (without a watch event).
    pub fn start_with_resync(fake: &FakeApiServer, retention: Duration, resync: Duration) -> Self {
        let mut ctx = Context::new(fake.client());
        ctx.base_backoff = Duration::from_millis(50);
        ctx.max_backoff = Duration::from_millis(400);
        let (tx, rx) = oneshot::channel::<()>();
        let cfg = purge::Config {
            namespace: None,
            concurrency: 2,
            debounce: Duration::from_millis(20),
            settings: Settings {
                retention,
                call_timeout: Duration::from_secs(2),
                resync,
            },
        };
        let ctx = Arc::new(ctx);
        let task = tokio::spawn(purge::run(ctx.clone(), cfg, async move {
            let _ = rx.await;
        }));
        Self {
            stop: Some(tx),
            task,
            ctx,
        }
    }

    /// `edgecache_operator_purge_deliveries_total{outcome}`.
    pub fn deliveries(&self, outcome: &'static str) -> u64 {
        self.ctx
            .metrics
            .purge_deliveries
            .get_or_create(&edgecache_operator::metrics::OutcomeLabels { outcome })
            .get()
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("the purge controller stops on shutdown")
            .expect("the purge controller does not panic");
    }
}

pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fake API server with an EdgeCache `web` whose admin port is `port`, and its admin token
/// Secret holding `token`.
pub async fn cluster(port: u16, token: &str) -> FakeApiServer {
    let fake = FakeApiServer::new();
    let mut ec = minimal_edgecache(&format!("network:\n  adminPort: {port}\n"));
    ec.metadata.uid = None;
    ec.metadata.generation = None;
    Api::<EdgeCache>::namespaced(fake.client(), NS)
        .create(&PostParams::default(), &ec)
        .await
        .unwrap();
    put_token(&fake, token);
    fake
}

pub fn put_token(fake: &FakeApiServer, token: &str) {
    fake.put_object(
        keys::SECRETS,
        Some(NS),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": admin_secret_name("web")},
               "data": {"token": k8s_openapi::ByteString(token.as_bytes().to_vec())}}),
    );
}

/// The labels the operator's DaemonSet puts on the data-plane pods of `web`.
pub fn pod_labels() -> BTreeMap<String, String> {
    let mut l = selector_labels("web");
    l.insert("app.kubernetes.io/component".into(), "dataplane".into());
    l.insert("app.kubernetes.io/managed-by".into(), MANAGER.into());
    l
}

pub fn put_pod(fake: &FakeApiServer, name: &str, node: &str, ip: &str, ready: bool) {
    fake.put_pod(NS, name, &pod_labels(), node, Some(ip), ready);
}

pub async fn create_purge(fake: &FakeApiServer, name: &str, spec: Value) -> EdgeCachePurge {
    let p: EdgeCachePurge = serde_json::from_value(json!({
        "apiVersion": "edgecache.dev/v1alpha1", "kind": "EdgeCachePurge",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    Api::<EdgeCachePurge>::namespaced(fake.client(), NS)
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
}

pub fn status(fake: &FakeApiServer, name: &str) -> Value {
    fake.get(keys::EDGECACHEPURGES, Some(NS), name)
        .map(|p| p["status"].clone())
        .unwrap_or(Value::Null)
}

/// (status, reason, message) of the Complete condition.
pub fn complete(fake: &FakeApiServer, name: &str) -> Option<(String, String, String)> {
    let st = status(fake, name);
    let c = st["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Complete")?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

/// Wait until `status.confirmed` of purge `name` is `want` (`2/3`).
pub async fn until_confirmed(fake: &FakeApiServer, name: &str, want: &str) {
    eventually(&format!("{name}: {want} confirmed"), || {
        status(fake, name)["confirmed"] == want
    })
    .await;
}

pub fn is_complete(fake: &FakeApiServer, name: &str) -> bool {
    complete(fake, name).is_some_and(|c| c.0 == "True")
}

pub fn ids_of(p: &EdgeCachePurge, n: usize) -> BTreeSet<String> {
    let uid = p.metadata.uid.clone().unwrap();
    (0..n).map(|i| format!("{uid}-{i}")).collect()
}

pub const IPS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
