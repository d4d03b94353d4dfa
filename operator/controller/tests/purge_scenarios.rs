//! The purge controller (the real `kube::runtime::Controller` with the operator's purge
//! reconcile) against the in-process fake API server, with real HTTP endpoints standing in for
//! the data-plane pods: small in-test servers on distinct loopback addresses (127.0.0.2, .3,
//! ...) with one admin port, the pods' `status.podIP`s. Each checks the bearer token the way the
//! data plane does (401 otherwise), records every call, answers `POST /purge` with the data
//! plane's JSON, and treats a repeated id as a no-op (`"repeated":true`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod purge_support;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use edgecache_fakeapi::{FakeApiServer, keys};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use purge_support::*;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One call a stand-in pod received.
#[derive(Debug, Clone)]
struct Call {
    /// The decoded query pairs of `POST /purge`.
    query: Vec<(String, String)>,
    authorized: bool,
}

impl Call {
    fn get(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A stand-in for one data-plane pod's admin endpoint; stops listening when dropped.
struct PodServer {
    calls: Arc<Mutex<Vec<Call>>>,
    task: JoinHandle<()>,
}

impl Drop for PodServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodServer {
    async fn start(ip: &str, port: u16, node: &'static str, token: &'static str) -> Self {
        let listener = TcpListener::bind((ip, port)).await.expect("bind");
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let log = calls.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (log, seen) = (log.clone(), seen.clone());
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (log, seen) = (log.clone(), seen.clone());
                    async move { Ok::<_, Infallible>(answer(&req, node, token, &log, &seen)) }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self { calls, task }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The ids this pod accepted (authorized calls).
    fn ids(&self) -> BTreeSet<String> {
        self.calls()
            .iter()
            .filter(|c| c.authorized)
            .filter_map(|c| c.get("id").map(String::from))
            .collect()
    }
}

/// What the data plane's admin endpoint answers (dataplane/proxy/src/admin.rs).
fn answer(
    req: &hyper::Request<hyper::body::Incoming>,
    node: &str,
    token: &str,
    log: &Mutex<Vec<Call>>,
    seen: &Mutex<BTreeSet<String>>,
) -> hyper::Response<Full<Bytes>> {
    let authorized = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {token}"));
    let query: Vec<(String, String)> =
        form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    log.lock().unwrap().push(Call {
        query: query.clone(),
        authorized,
    });
    let respond = |code: u16, body: String| {
        hyper::Response::builder()
            .status(code)
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    if !authorized {
        return respond(
            401,
            "unauthorized: this call needs `Authorization: Bearer <admin token>`\n".into(),
        );
    }
    if req.method() != http::Method::POST || req.uri().path() != "/purge" {
        return respond(404, "not found\n".into());
    }
    let id = query
        .iter()
        .find(|(k, _)| k == "id")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let repeated = !seen.lock().unwrap().insert(id.clone());
    let objects = usize::from(!repeated && query.iter().any(|(k, _)| k == "url"));
    respond(
        200,
        json!({"id": id, "rules": usize::from(!repeated), "objects": objects,
               "repeated": repeated, "node": node, "rules_in_force": 1})
        .to_string()
            + "\n",
    )
}

/// (pod, node) of the pod on `IPS[i]`.
const PODS: [(&str, &str); 3] = [
    ("web-a", "node-a"),
    ("web-b", "node-b"),
    ("web-c", "node-c"),
];

/// Pod `i` of `web`, ready, with a stand-in admin endpoint on its IP that expects [`TOKEN`].
async fn serving_pod(fake: &FakeApiServer, port: u16, i: usize) -> PodServer {
    let (pod, node) = PODS[i];
    let server = PodServer::start(IPS[i], port, node, TOKEN).await;
    put_pod(fake, pod, node, IPS[i], true);
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_reaches_three_pods_and_becomes_complete() {
    let port = common_port(&IPS).await;
    let fake = cluster(port, TOKEN).await;
    let servers = [
        serving_pod(&fake, port, 0).await,
        serving_pod(&fake, port, 1).await,
        serving_pod(&fake, port, 2).await,
    ];
    let op = Operator::start(&fake, Duration::from_secs(3600));
    let p = create_purge(
        &fake,
        "tags",
        json!({"edgeCache": "web", "tags": ["product-42", "product 43"], "soft": true}),
    )
    .await;
    eventually("the purge is Complete", || is_complete(&fake, "tags")).await;

    let st = status(&fake, "tags");
    assert_eq!(st["confirmed"], "3/3");
    assert_eq!(st["kind"], "tags, soft");
    assert_eq!(st["pending"], json!([]));
    let nodes: Vec<(&str, &str)> = st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["pod"].as_str().unwrap(), n["node"].as_str().unwrap()))
        .collect();
    assert_eq!(
        nodes,
        [
            ("web-a", "node-a"),
            ("web-b", "node-b"),
            ("web-c", "node-c")
        ]
    );
    assert!(
        st["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["confirmedAt"].is_string() && n["podUid"].is_string())
    );
    let (_, reason, _) = complete(&fake, "tags").unwrap();
    assert_eq!(reason, "AllPodsConfirmed");
    assert_eq!(op.deliveries("confirmed"), 3);
    assert!(
        op.ctx
            .metrics
            .encode()
            .contains("edgecache_operator_purge_deliveries_total{outcome=\"confirmed\"} 3")
    );

    // Every pod got one authorized call per tag, with the stable id, the soft flag and `at` =
    // the end of the creation second.
    let at = p.metadata.creation_timestamp.clone().unwrap().0.as_second() + 1;
    for s in &servers {
        let calls = s.calls();
        assert!(calls.iter().all(|c| c.authorized));
        assert_eq!(s.ids(), ids_of(&p, 2));
        let tags: BTreeSet<&str> = calls.iter().filter_map(|c| c.get("tag")).collect();
        assert_eq!(tags, BTreeSet::from(["product-42", "product 43"]));
        for c in &calls {
            assert_eq!(c.get("at"), Some(at.to_string().as_str()));
            assert_eq!(c.get("soft"), Some(""));
        }
    }
    // Confirmed pods are not called again (a resync or two later).
    let before: usize = servers.iter().map(|s| s.calls().len()).sum();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after: usize = servers.iter().map(|s| s.calls().len()).sum();
    assert_eq!(before, after, "confirmed pods are left alone");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_pod_stays_unconfirmed_and_gets_the_purge_once_back() {
    let port = common_port(&IPS).await;
    let fake = cluster(port, TOKEN).await;
    let a = serving_pod(&fake, port, 0).await;
    let b = serving_pod(&fake, port, 1).await;
    // Ready as far as the API server knows, but nothing answers on its address.
    put_pod(&fake, "web-c", "node-c", IPS[2], true);
    let op = Operator::start(&fake, Duration::from_secs(3600));
    let p = create_purge(
        &fake,
        "img",
        json!({"edgeCache": "web", "prefixes": ["http://www.example/img/"]}),
    )
    .await;
    until_confirmed(&fake, "img", "2/3").await;
    let (s, reason, message) = complete(&fake, "img").unwrap();
    // Issue 35 defect 9: an unreachable admin port is named as such (a NetworkPolicy, a
    // firewall), not only "pending".
    assert_eq!((s.as_str(), reason.as_str()), ("False", "AdminUnreachable"));
    assert!(message.contains("NetworkPolicies"), "{message}");
    assert!(
        message.contains("node node-c (pod web-c): unreachable"),
        "{message}"
    );
    let st = status(&fake, "img");
    assert_eq!(st["pending"][0]["node"], "node-c");
    assert!(
        st["pending"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{st}"
    );
    assert_eq!(a.ids(), ids_of(&p, 1));
    assert_eq!(b.ids(), ids_of(&p, 1));

    // The node comes back: the retry delivers the purge, dated as before.
    let c = PodServer::start(IPS[2], port, "node-c", TOKEN).await;
    eventually("the purge is Complete", || is_complete(&fake, "img")).await;
    assert_eq!(status(&fake, "img")["confirmed"], "3/3");
    assert_eq!(c.ids(), ids_of(&p, 1));
    // The end of the creation second.
    let at = p.metadata.creation_timestamp.clone().unwrap().0.as_second() + 1;
    assert_eq!(c.calls()[0].get("at"), Some(at.to_string().as_str()));
    assert_eq!(c.calls()[0].get("prefix"), Some("http://www.example/img/"));
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_added_later_gets_the_earlier_purges() {
    let port = common_port(&IPS).await;
    let fake = cluster(port, TOKEN).await;
    let _a = serving_pod(&fake, port, 0).await;
    let _b = serving_pod(&fake, port, 1).await;
    let op = Operator::start(&fake, Duration::from_secs(3600));
    let p1 = create_purge(
        &fake,
        "one",
        json!({"edgeCache": "web", "urls": ["http://www.example/a.css"]}),
    )
    .await;
    let p2 = create_purge(&fake, "two", json!({"edgeCache": "web", "all": true})).await;
    eventually("both purges Complete", || {
        is_complete(&fake, "one") && is_complete(&fake, "two")
    })
    .await;
    // The first delivery of a URL purge removed one object there.
    assert!(
        status(&fake, "one")["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["objects"] == 1)
    );

    // A new node: its pod starts, not ready yet. Complete goes back to false for both.
    let c = PodServer::start(IPS[2], port, "node-c", TOKEN).await;
    put_pod(&fake, "web-c", "node-c", IPS[2], false);
    eventually(
        "Complete is false while the new pod has not confirmed",
        || !is_complete(&fake, "one") && !is_complete(&fake, "two"),
    )
    .await;
    assert_eq!(status(&fake, "two")["confirmed"], "2/3");
    assert_eq!(
        status(&fake, "two")["pending"][0]["reason"],
        "the pod is not ready"
    );
    assert!(
        c.calls().is_empty(),
        "a pod that is not ready is not called"
    );

    // It turns ready: it gets both earlier purges.
    assert!(fake.set_pod_ready(NS, "web-c", true));
    eventually("both purges Complete again", || {
        is_complete(&fake, "one") && is_complete(&fake, "two")
    })
    .await;
    assert_eq!(status(&fake, "one")["confirmed"], "3/3");
    let mut want = ids_of(&p1, 1);
    want.extend(ids_of(&p2, 1));
    assert_eq!(c.ids(), want);
    // The earlier confirmations are kept as they were (not re-sent, not rewritten).
    let nodes = status(&fake, "one")["nodes"].clone();
    assert_eq!(nodes[0]["objects"], 1);
    assert_eq!(nodes[1]["objects"], 1);

    // The pod is replaced (new uid, same name): it is sent the purges again, and its answers
    // (repeated ids on a node that kept them) confirm it.
    let uid_before = status(&fake, "two")["nodes"][2]["podUid"].clone();
    assert!(fake.delete(keys::PODS, Some(NS), "web-c"));
    put_pod(&fake, "web-c", "node-c", IPS[2], true);
    eventually("the replacement pod confirmed", || {
        let st = status(&fake, "two");
        st["confirmed"] == "3/3" && st["nodes"][2]["podUid"] != uid_before
    })
    .await;
    op.stop().await;
}

/// Requests the purge controller made for purge `name` (reads of it) since request `from`.
fn purge_reads(fake: &FakeApiServer, from: usize, name: &str) -> usize {
    let path = format!("/edgecachepurges/{name}");
    fake.requests()[from..]
        .iter()
        .filter(|r| {
            r.method == http::Method::GET
                && r.uri.split('?').next().is_some_and(|p| p.ends_with(&path))
        })
        .count()
}

/// Issue 35 defect 15: the events of pods that confirmed every purge re-queue no complete
/// purge (each re-queue read the purge, its EdgeCache and Secret and listed the pods); a new
/// pod still gets every purge, and a pending purge is still re-queued by its pod's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_events_requeue_only_the_purges_that_still_need_the_pod() {
    let port = common_port(&IPS).await;
    let fake = cluster(port, TOKEN).await;
    let _a = serving_pod(&fake, port, 0).await;
    let _b = serving_pod(&fake, port, 1).await;
    let op =
        Operator::start_with_resync(&fake, Duration::from_secs(3600), Duration::from_secs(3600));
    let names = ["one", "two", "three"];
    for (i, name) in names.iter().enumerate() {
        create_purge(
            &fake,
            name,
            json!({"edgeCache": "web", "urls": [format!("http://www.example/{i}.css")]}),
        )
        .await;
    }
    eventually("every purge Complete", || {
        names.iter().all(|n| is_complete(&fake, n))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mark = fake.requests().len();
    // Five updates of a confirmed pod (what a kubelet status update looks like to the watch).
    for i in 0..5 {
        let mut pod = fake.get(keys::PODS, Some(NS), "web-a").unwrap();
        pod["metadata"]["annotations"] = json!({"touched": i.to_string()});
        fake.put_object(keys::PODS, Some(NS), pod);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for name in names {
        assert_eq!(
            purge_reads(&fake, mark, name),
            0,
            "purge {name} was re-read for a pod that confirmed it"
        );
    }
    // A new pod still gets every purge.
    let c = serving_pod(&fake, port, 2).await;
    eventually("every purge confirmed by the new pod", || {
        names.iter().all(|n| status(&fake, n)["confirmed"] == "3/3")
    })
    .await;
    assert_eq!(c.ids().len(), 3);
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_not_confirmed_and_the_status_says_why() {
    let port = common_port(&IPS).await;
    let fake = cluster(port, "not-the-pods-token").await;
    let a = serving_pod(&fake, port, 0).await;
    let op = Operator::start(&fake, Duration::from_secs(3600));
    create_purge(&fake, "t", json!({"edgeCache": "web", "tags": ["x"]})).await;
    eventually("the refusal is in the status", || {
        complete(&fake, "t").is_some_and(|c| c.2.contains("refused the admin token"))
    })
    .await;
    let (s, _, message) = complete(&fake, "t").unwrap();
    assert_eq!(s, "False");
    assert!(message.contains("HTTP 401"), "{message}");
    let st = status(&fake, "t");
    assert_eq!(st["confirmed"], "0/1");
    assert_eq!(st["nodes"], json!([]));
    assert!(!a.calls().is_empty());
    assert!(a.ids().is_empty(), "no call was accepted");
    assert!(op.deliveries("refused") >= 1);
    assert_eq!(op.deliveries("confirmed"), 0);

    // The Secret holds the pods' token again: the retry confirms.
    put_token(&fake, TOKEN);
    eventually("the purge is Complete", || is_complete(&fake, "t")).await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_are_deleted_after_the_retention() {
    let port = common_port(&IPS[..1]).await;
    let fake = cluster(port, TOKEN).await;
    let a = serving_pod(&fake, port, 0).await;
    let op = Operator::start(&fake, Duration::from_secs(3));
    let p = create_purge(&fake, "old", json!({"edgeCache": "web", "all": true})).await;
    eventually("delivered first", || is_complete(&fake, "old")).await;
    assert_eq!(a.ids(), ids_of(&p, 1));
    assert!(fake.get(keys::EDGECACHEPURGES, Some(NS), "old").is_some());
    eventually("deleted past the retention", || {
        fake.get(keys::EDGECACHEPURGES, Some(NS), "old").is_none()
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_of_a_missing_edgecache_waits_and_says_so() {
    let port = common_port(&IPS[..1]).await;
    let fake = cluster(port, TOKEN).await;
    let op = Operator::start(&fake, Duration::from_secs(3600));
    create_purge(&fake, "lost", json!({"edgeCache": "nope", "all": true})).await;
    eventually("the status names the missing EdgeCache", || {
        complete(&fake, "lost")
            .is_some_and(|c| c.0 == "False" && c.2.contains("EdgeCache edge/nope does not exist"))
    })
    .await;
    op.stop().await;
}
