//! The real `kube::runtime::Controller` (with the operator's reconcile, owns, predicates and
//! shutdown) against the in-process fake API server: the operator's own decisions (children,
//! status, conflicts, Secrets, peer lists), fast. What the API server, the garbage collector,
//! admission and the kubelet do is the cluster tier's to test (e2e/tests/kind.rs,
//! control_plane.rs, helm_release.rs), on a real Kubernetes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use edgecache_api::v1alpha1::EdgeCache;
use edgecache_fakeapi::{FakeApiServer, Fault, keys};
use edgecache_operator::build::{CONFIG_HASH_ANNOTATION, build};
use edgecache_operator::context::Context;
use edgecache_operator::controller::{Config, run};
use edgecache_operator::metrics::ReasonLabels;
use edgecache_operator::test_support::{TWO_SITES, minimal_edgecache, sites_edgecache};
use edgecache_operator::validate::{Policy, validate};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const NS: &str = "edge";

struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    ctx: Arc<Context>,
    /// What `/readyz` answers from.
    ready: Arc<AtomicBool>,
}

impl Operator {
    fn start(fake: &FakeApiServer) -> Self {
        Self::start_with(fake, |_| {})
    }

    /// The operator with `configure` applied to its context.
    fn start_with(fake: &FakeApiServer, configure: impl FnOnce(&mut Context)) -> Self {
        let mut ctx = Context::new(fake.client());
        ctx.base_backoff = Duration::from_millis(50);
        ctx.max_backoff = Duration::from_millis(400);
        ctx.named_secret_recheck = Duration::from_millis(200);
        configure(&mut ctx);
        let ctx = Arc::new(ctx);
        let (tx, rx) = oneshot::channel::<()>();
        let ready = Arc::new(AtomicBool::new(false));
        let cfg = Config {
            namespace: None,
            concurrency: 2,
            debounce: Duration::from_millis(20),
        };
        let task = tokio::spawn(run(ctx.clone(), cfg, ready.clone(), async move {
            let _ = rx.await;
        }));
        Self {
            stop: Some(tx),
            task,
            ctx,
            ready,
        }
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the controller stops on shutdown")
            .expect("the controller task does not panic");
    }

    fn failures(&self, reason: &'static str) -> u64 {
        self.ctx
            .metrics
            .failures
            .get_or_create(&ReasonLabels { reason })
            .get()
    }
}

async fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(Duration::from_secs(15), what, f).await
}

async fn eventually_within(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn nodes(fake: &FakeApiServer) {
    fake.add_node(
        "nvme-1",
        &[
            ("edgecache.dev/nvme", "true"),
            ("kubernetes.io/os", "linux"),
        ],
    );
    fake.add_node(
        "ssd-1",
        &[
            (
                "feature.node.kubernetes.io/storage-nonrotationaldisk",
                "true",
            ),
            ("kubernetes.io/os", "linux"),
        ],
    );
    fake.add_node("hdd-1", &[("kubernetes.io/os", "linux")]);
}

fn new_ec(spec_yaml: &str) -> EdgeCache {
    let mut ec = minimal_edgecache(spec_yaml);
    ec.metadata.uid = None;
    ec.metadata.generation = None;
    ec
}

async fn create(fake: &FakeApiServer, ec: &EdgeCache) -> EdgeCache {
    Api::<EdgeCache>::namespaced(fake.client(), NS)
        .create(&PostParams::default(), ec)
        .await
        .unwrap()
}

fn ec_value(fake: &FakeApiServer) -> Option<Value> {
    fake.get(keys::EDGECACHES, Some(NS), "web")
}

fn condition(fake: &FakeApiServer, type_: &str) -> Option<(String, String, String)> {
    condition_of(fake, "web", type_)
}

fn condition_of(fake: &FakeApiServer, name: &str, type_: &str) -> Option<(String, String, String)> {
    let ec = fake.get(keys::EDGECACHES, Some(NS), name)?;
    let c = ec["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

fn is_ready(fake: &FakeApiServer) -> bool {
    condition(fake, "Ready").is_some_and(|c| c.0 == "True")
}

fn observed_generation(fake: &FakeApiServer) -> Option<i64> {
    ec_value(fake)?["status"]["observedGeneration"].as_i64()
}

fn ds(fake: &FakeApiServer) -> Option<Value> {
    fake.get(keys::DAEMONSETS, Some(NS), "web")
}

fn template_hash(fake: &FakeApiServer) -> Option<String> {
    ds(fake)?["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
        .as_str()
        .map(String::from)
}

fn children_exist(fake: &FakeApiServer) -> [bool; 4] {
    [
        fake.get(keys::SERVICEACCOUNTS, Some(NS), "web").is_some(),
        fake.get(keys::CONFIGMAPS, Some(NS), "web-config").is_some(),
        fake.get(keys::SERVICES, Some(NS), "web").is_some(),
        ds(fake).is_some(),
    ]
}

/// Writes to anything but events.
fn object_writes(fake: &FakeApiServer) -> usize {
    fake.changes()
        .iter()
        .filter(|c| !c.resource.ends_with("/events"))
        .count()
}

async fn eventually_event(fake: &FakeApiServer, reason: &str) {
    eventually(&format!("a {reason} event"), || {
        event_reasons(fake).iter().any(|r| r == reason)
    })
    .await
}

fn event_reasons(fake: &FakeApiServer) -> Vec<String> {
    fake.list(keys::EVENTS)
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect()
}

async fn patch_spec(fake: &FakeApiServer, spec: Value) {
    Api::<EdgeCache>::namespaced(fake.client(), NS)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_converges_to_ready_with_the_right_children() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    let ec = create(&fake, &new_ec("resources:\n  memory: 4GiB\n")).await;
    eventually("Ready", || is_ready(&fake)).await;

    let uid = ec.metadata.uid.clone().unwrap();
    for (res, name) in [
        (keys::SERVICEACCOUNTS, "web"),
        (keys::CONFIGMAPS, "web-config"),
        (keys::SERVICES, "web"),
        (keys::DAEMONSETS, "web"),
    ] {
        let obj = fake
            .get(res, Some(NS), name)
            .unwrap_or_else(|| panic!("{res} {name}"));
        let owner = &obj["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], uid.as_str(), "{res}");
        assert_eq!(owner["controller"], true);
    }
    // The children are exactly what `build` makes.
    let mut stored_ec: EdgeCache = serde_json::from_value(ec_value(&fake).unwrap()).unwrap();
    stored_ec.status = None;
    let want = build(&validate(&stored_ec, &Policy::default()).unwrap());
    let stored_ds: DaemonSet = serde_json::from_value(ds(&fake).unwrap()).unwrap();
    assert_eq!(stored_ds.spec, want.daemon_set.spec);
    let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-config").unwrap();
    let cfg = edgecache_operator::validate::parse_as_pod(
        cm["data"]["config.yaml"].as_str().unwrap(),
        "node-a",
    )
    .unwrap();
    assert_eq!(cfg.memory.limit, Some(edgecache_api::ByteSize::gib(4)));

    let status = &ec_value(&fake).unwrap()["status"];
    assert_eq!(status["desiredNodes"], 2, "nvme-1 and ssd-1, not hdd-1");
    assert_eq!(status["readyNodes"], 2);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(
        status["configHash"].as_str(),
        Some(want.config_hash.as_str())
    );
    assert_eq!(
        template_hash(&fake).as_deref(),
        Some(want.config_hash.as_str())
    );
    assert_eq!(condition(&fake, "Degraded").unwrap().0, "False");

    let reasons = event_reasons(&fake);
    assert_eq!(
        reasons.iter().filter(|r| *r == "Created").count(),
        6,
        "{reasons:?}"
    );
    // Children are applied with the one field manager, forced.
    let applies: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == http::Method::PATCH && !r.uri.contains("edgecaches"))
        .collect();
    assert!(!applies.is_empty());
    assert!(
        applies
            .iter()
            .all(|r| r.uri.contains("fieldManager=edgecache-operator")
                && r.uri.contains("force=true"))
    );
    // Events go to events.k8s.io/v1 in the EdgeCache's namespace.
    assert!(fake.requests().iter().any(|r| {
        r.method == http::Method::POST
            && r.uri
                .starts_with("/apis/events.k8s.io/v1/namespaces/edge/events")
            && r.status == 201
    }));
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_change_rolls_the_pods_and_bumps_observed_generation() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let first_hash = template_hash(&fake).unwrap();

    patch_spec(&fake, json!({"storage": {"size": "20GiB"}})).await;
    eventually("observedGeneration 2", || {
        observed_generation(&fake) == Some(2)
    })
    .await;
    eventually("new hash on the pod template", || {
        template_hash(&fake).is_some_and(|h| h != first_hash)
    })
    .await;
    let hash = template_hash(&fake).unwrap();
    eventually("Ready with the new config", || {
        is_ready(&fake) && ec_value(&fake).unwrap()["status"]["configHash"] == hash.as_str()
    })
    .await;
    let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-config").unwrap();
    assert!(
        cm["data"]["config.yaml"]
            .as_str()
            .unwrap()
            .contains("size: 20GiB")
    );
    let ready = condition(&fake, "Ready").unwrap();
    assert_eq!(ready.1, "AllNodesReady");
    let gens: Vec<i64> = ec_value(&fake).unwrap()["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["observedGeneration"].as_i64().unwrap())
        .collect();
    assert_eq!(gens, [2, 2, 2]);

    // An image change rolls the pods without a config change.
    patch_spec(
        &fake,
        json!({"image": "registry.local/edgecache-dataplane:0.2.0"}),
    )
    .await;
    eventually("new image", || {
        ds(&fake).is_some_and(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"]
                == "registry.local/edgecache-dataplane:0.2.0"
        })
    })
    .await;
    assert_eq!(template_hash(&fake).unwrap(), hash);
    eventually("observedGeneration 3", || {
        observed_generation(&fake) == Some(3)
    })
    .await;
    assert!(event_reasons(&fake).contains(&"Updated".to_string()));
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_deleted_or_edited_by_hand_come_back() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let old_uid = ds(&fake).unwrap()["metadata"]["uid"].clone();

    assert!(fake.delete(keys::DAEMONSETS, Some(NS), "web"));
    eventually("the DaemonSet is back", || {
        ds(&fake).is_some_and(|d| d["metadata"]["uid"] != old_uid)
    })
    .await;
    assert!(fake.delete(keys::CONFIGMAPS, Some(NS), "web-config"));
    eventually("the ConfigMap is back", || children_exist(&fake)[1]).await;

    // kubectl edit of the config: the operator's apply (forced) puts it back.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(fake.client(), NS);
    let want = fake.get(keys::CONFIGMAPS, Some(NS), "web-config").unwrap()["data"].clone();
    cms.patch(
        "web-config",
        &PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"data": {"config.yaml": "origin:\n  url: http://evil\n"}})),
    )
    .await
    .unwrap();
    eventually("the config is restored", || {
        fake.get(keys::CONFIGMAPS, Some(NS), "web-config")
            .is_some_and(|c| c["data"] == want)
    })
    .await;
    eventually("Ready again", || is_ready(&fake)).await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_spec_goes_degraded_and_touches_nothing() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("storage:\n  size: 1MiB\n")).await;
    eventually("Degraded", || {
        condition(&fake, "Degraded").is_some_and(|c| c.0 == "True" && c.1 == "InvalidSpec")
    })
    .await;
    let (_, _, message) = condition(&fake, "Degraded").unwrap();
    assert!(
        message.contains("spec.storage.size: must be at least 64MiB (got 1MiB)"),
        "{message}"
    );
    assert_eq!(condition(&fake, "Ready").unwrap().0, "False");
    assert_eq!(children_exist(&fake), [false; 4], "nothing is created");
    eventually("a Warning event", || {
        event_reasons(&fake).contains(&"InvalidSpec".to_string())
    })
    .await;
    // No requeue storm: nothing more is written while the spec stays as it is.
    let writes = object_writes(&fake);
    let events = fake.list(keys::EVENTS).len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(object_writes(&fake), writes);
    assert_eq!(fake.list(keys::EVENTS).len(), events);
    assert!(op.failures("invalid_spec") >= 1);

    // Fixing the spec converges.
    patch_spec(&fake, json!({"storage": {"size": "1GiB"}})).await;
    eventually("Ready after the fix", || is_ready(&fake)).await;
    assert_eq!(condition(&fake, "Degraded").unwrap().1, "AsExpected");

    // Breaking a running EdgeCache leaves its children as they are. (The port passes the
    // CRD's pattern, so the API server takes it; the operator's own check refuses it.)
    let ds_before = ds(&fake).unwrap();
    patch_spec(&fake, json!({"origin": {"url": "http://origin:99999"}})).await;
    eventually("Degraded again", || {
        condition(&fake, "Degraded")
            .is_some_and(|c| c.0 == "True" && c.2.contains("spec.origin.url"))
    })
    .await;
    assert_eq!(ds(&fake).unwrap(), ds_before);
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_matching_node_is_degraded_until_one_is_labelled() {
    let fake = FakeApiServer::new();
    fake.add_node("hdd-1", &[("kubernetes.io/os", "linux")]);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("NoMatchingNodes", || {
        condition(&fake, "Degraded").is_some_and(|c| c.0 == "True" && c.1 == "NoMatchingNodes")
    })
    .await;
    fake.add_node(
        "hdd-1",
        &[
            ("kubernetes.io/os", "linux"),
            ("edgecache.dev/nvme", "true"),
        ],
    );
    eventually("Ready once a node matches", || is_ready(&fake)).await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_not_ready_is_progressing() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    fake.set_pods_ready(false);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("NodesNotReady", || {
        condition(&fake, "Ready").is_some_and(|c| c.0 == "False" && c.1 == "NodesNotReady")
    })
    .await;
    let progressing = condition(&fake, "Progressing").unwrap();
    assert_eq!(
        (progressing.0.as_str(), progressing.1.as_str()),
        ("True", "RollingOut")
    );
    assert_eq!(progressing.2, "0/2 nodes ready, 2/2 updated");
    // Ready names the nodes and what their pods report.
    let ready = condition(&fake, "Ready").unwrap().2;
    assert_eq!(
        ready,
        "0/2 nodes ready, 2/2 updated; not ready: nvme-1 (NotReady: containers with unready \
         status: [dataplane]), ssd-1 (NotReady: containers with unready status: [dataplane])"
    );
    fake.set_pods_ready(true);
    eventually("Ready", || is_ready(&fake)).await;
    assert_eq!(condition(&fake, "Progressing").unwrap().0, "False");
    op.stop().await;
}

/// Issue 35 defect 9: with the operator's pods known, the EdgeCache's pods get a NetworkPolicy
/// (owned, so it goes with the EdgeCache), applied before their DaemonSet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_policy_is_applied_with_the_children() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start_with(&fake, |ctx| {
        ctx.policy.admin_clients = Some(edgecache_operator::validate::AdminClients {
            namespace: "edgecache-system".into(),
            pod_labels: [(
                "app.kubernetes.io/name".to_string(),
                "edgecache-operator".to_string(),
            )]
            .into(),
            cidrs: Vec::new(),
        });
    });
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let np = fake
        .get("networking.k8s.io/v1/networkpolicies", Some(NS), "web")
        .expect("a NetworkPolicy");
    let uid = ec_value(&fake).unwrap()["metadata"]["uid"].clone();
    assert_eq!(np["metadata"]["ownerReferences"][0]["uid"], uid);
    assert_eq!(np["spec"]["ingress"][1]["ports"][0]["port"], 9090);
    assert_eq!(
        np["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "edgecache-system"
    );
    let order: Vec<String> = fake
        .changes()
        .iter()
        .filter(|c| c.resource.ends_with("networkpolicies") || c.resource == keys::DAEMONSETS)
        .map(|c| c.resource.clone())
        .collect();
    assert!(
        order
            .first()
            .is_some_and(|r| r.ends_with("networkpolicies")),
        "{order:?}"
    );
    op.stop().await;
}

/// Issue 35 defect 6: on an IPv6 cluster (the API server gives the Service `ipFamilies:
/// [IPv6]`), the data plane listens on `[::]`, not on IPv4's `0.0.0.0` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_ipv6_cluster_the_pods_listen_on_ipv6() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let listen = |fake: &FakeApiServer| {
        let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-config").unwrap();
        let text = cm["data"]["config.yaml"].as_str().unwrap().to_string();
        // Its shape only: the node name comes from the pod's env.
        edgecache_api::dataplane::parse_shape(&text)
            .unwrap()
            .0
            .listen
            .to_string()
    };
    assert_eq!(listen(&fake), "0.0.0.0:8080");
    // What the API server's Service allocation puts there on a single-stack IPv6 cluster.
    let mut svc = fake.get(keys::SERVICES, Some(NS), "web").unwrap();
    svc["spec"]["ipFamilies"] = json!(["IPv6"]);
    svc["spec"]["ipFamilyPolicy"] = json!("SingleStack");
    fake.put_object(keys::SERVICES, Some(NS), svc);
    eventually("the config listens on [::]", || {
        listen(&fake) == "[::]:8080"
    })
    .await;
    eventually("Ready with the new config", || is_ready(&fake)).await;
    assert_eq!(
        fake.get(keys::SERVICES, Some(NS), "web").unwrap()["spec"]["ipFamilies"],
        json!(["IPv6"]),
        "the operator's apply leaves the server's families alone"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciling_twice_writes_nothing_the_second_time() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    // Let the controller settle, then check it stays quiet.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rv = fake.resource_version();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fake.resource_version(),
        rv,
        "a converged controller writes nothing"
    );
    op.stop().await;

    // Reconcile by hand, twice: the second one writes nothing at all.
    let mut ctx = Context::new(fake.client());
    ctx.base_backoff = Duration::from_millis(50);
    let ctx = Arc::new(ctx);
    let get = || async {
        Arc::new(
            Api::<EdgeCache>::namespaced(fake.client(), NS)
                .get("web")
                .await
                .unwrap(),
        )
    };
    edgecache_operator::reconcile::reconcile(get().await, ctx.clone())
        .await
        .unwrap();
    let rv = fake.resource_version();
    let changes = fake.changes().len();
    edgecache_operator::reconcile::reconcile(get().await, ctx.clone())
        .await
        .unwrap();
    assert_eq!(fake.resource_version(), rv);
    assert_eq!(fake.changes().len(), changes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_restart_mid_way_reaches_the_same_end_state() {
    // Reference: one uninterrupted run.
    let reference = FakeApiServer::new();
    nodes(&reference);
    let op = Operator::start(&reference);
    create(&reference, &new_ec("")).await;
    eventually("reference Ready", || is_ready(&reference)).await;
    op.stop().await;

    // Interrupted: the DaemonSet apply keeps failing, the operator stops half way.
    let fake = FakeApiServer::new();
    nodes(&fake);
    fake.inject_fault(Fault {
        method: Some(http::Method::PATCH),
        path_contains: "/daemonsets/".into(),
        code: 500,
        times: u32::MAX,
    });
    let first = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("half applied", || {
        children_exist(&fake) == [true, true, true, false]
    })
    .await;
    eventually("failures counted", || first.failures("apply") >= 2).await;
    assert!(event_reasons(&fake).contains(&"ApplyFailed".to_string()));
    first.stop().await;

    fake.clear_faults();
    let second = Operator::start(&fake);
    eventually("Ready after the restart", || is_ready(&fake)).await;
    second.stop().await;

    let strip = |v: Value| -> Value {
        let mut v = v;
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "ownerReferences",
        ] {
            v["metadata"].as_object_mut().unwrap().remove(f);
        }
        v
    };
    for (res, name) in [
        (keys::SERVICEACCOUNTS, "web"),
        (keys::CONFIGMAPS, "web-config"),
        (keys::SERVICES, "web"),
        (keys::DAEMONSETS, "web"),
    ] {
        let a = strip(fake.get(res, Some(NS), name).unwrap());
        let b = strip(reference.get(res, Some(NS), name).unwrap());
        assert_eq!(a, b, "{res} {name}");
    }
    let status = |f: &FakeApiServer| {
        let mut s = ec_value(f).unwrap()["status"].clone();
        for c in s["conditions"].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("lastTransitionTime");
        }
        s
    };
    assert_eq!(status(&fake), status(&reference));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_changes_nothing() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let before = ds(&fake).unwrap();
    patch_spec(
        &fake,
        json!({"paused": true, "image": "registry.local/other:1"}),
    )
    .await;
    eventually("Paused", || {
        condition(&fake, "Progressing").is_some_and(|c| c.1 == "Paused")
    })
    .await;
    assert_eq!(ds(&fake).unwrap(), before);
    patch_spec(&fake, json!({"paused": false})).await;
    eventually("rolled after unpausing", || {
        ds(&fake).is_some_and(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/other:1"
        })
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_object_is_reported_and_does_not_wedge_the_others() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    // Stored under some older schema: `storage.size` is not a byte size.
    fake.put_object(
        keys::EDGECACHES,
        Some(NS),
        json!({
            "apiVersion": "edgecache.dev/v1alpha1", "kind": "EdgeCache",
            "metadata": {"name": "broken"},
            "spec": {"origin": {"url": "http://o"}, "storage": {"size": "lots"}}
        }),
    );
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("the valid one is Ready", || is_ready(&fake)).await;
    eventually("the broken one is Degraded", || {
        fake.get(keys::EDGECACHES, Some(NS), "broken")
            .is_some_and(|o| {
                o["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "Degraded"
                            && c["reason"] == "InvalidObject"
                            && c["message"].as_str().unwrap_or("").contains("lots")
                    })
                })
            })
    })
    .await;
    assert!(event_reasons(&fake).contains(&"InvalidObject".to_string()));
    assert!(fake.get(keys::DAEMONSETS, Some(NS), "broken").is_none());
    assert!(op.failures("invalid_object") >= 1);
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_only_changes_cause_no_reconcile() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reconciles = op.ctx.metrics.reconciles.get();
    // Someone else writes the status: the generation does not change, so nothing runs.
    Api::<EdgeCache>::namespaced(fake.client(), NS)
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyNodes": 42}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(op.ctx.metrics.reconciles.get(), reconciles);
    // A spec change does.
    patch_spec(&fake, json!({"log": "debug"})).await;
    eventually("reconciled the new generation", || {
        observed_generation(&fake) == Some(2)
    })
    .await;
    assert!(op.ctx.metrics.reconciles.get() > reconciles);
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_path_outside_the_allow_list_is_degraded_and_gets_no_daemon_set() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("storage:\n  hostPath: /var/lib/kubelet\n")).await;
    eventually("Degraded", || {
        condition(&fake, "Degraded").is_some_and(|c| c.0 == "True")
    })
    .await;
    let (_, _, message) = condition(&fake, "Degraded").unwrap();
    assert!(
        message.contains("/var/lib/kubelet") && message.contains("[/var/cache/edgecache, /mnt]"),
        "the message names the path and the allow-list: {message}"
    );
    assert!(ds(&fake).is_none(), "no DaemonSet for a refused hostPath");
    eventually("a Warning event naming the path", || {
        fake.list(keys::EVENTS).iter().any(|e| {
            e["type"] == "Warning"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("/var/lib/kubelet") && n.contains("/mnt"))
        })
    })
    .await;
    op.stop().await;
}

fn admin_token(fake: &FakeApiServer) -> Option<String> {
    let s = fake.get("/v1/secrets", Some(NS), "web-admin-token")?;
    s["data"]["token"].as_str().map(String::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_secret_is_created_once_and_never_rotated() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    let ec = create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let secret = fake
        .get("/v1/secrets", Some(NS), "web-admin-token")
        .expect("the admin token Secret");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"],
        ec.metadata.uid.clone().unwrap().as_str()
    );
    let token = admin_token(&fake).unwrap();
    let bytes: Vec<u8> = serde_json::from_value::<k8s_openapi::ByteString>(json!(token))
        .unwrap()
        .0;
    assert_eq!(bytes.len(), 64, "32 random bytes, hex-encoded");
    assert!(bytes.iter().all(|b| b.is_ascii_hexdigit()));

    // Later reconciles (a spec change, a resync) keep the token.
    patch_spec(&fake, json!({"storage": {"size": "20GiB"}})).await;
    eventually("observedGeneration 2", || {
        observed_generation(&fake) == Some(2)
    })
    .await;
    eventually("Ready again", || is_ready(&fake)).await;
    assert_eq!(admin_token(&fake).unwrap(), token);
    let secret_writes = fake
        .changes()
        .iter()
        .filter(|c| c.resource == "/v1/secrets")
        .count();
    assert_eq!(secret_writes, 1, "created once, never rewritten");

    // Deleted by hand: the next reconcile makes a new one.
    fake.delete("/v1/secrets", Some(NS), "web-admin-token");
    patch_spec(&fake, json!({"storage": {"size": "30GiB"}})).await;
    eventually("a new Secret", || admin_token(&fake).is_some()).await;
    assert_ne!(admin_token(&fake).unwrap(), token);
    op.stop().await;
}

fn peer_key(fake: &FakeApiServer) -> Option<String> {
    let s = fake.get("/v1/secrets", Some(NS), "web-admin-token")?;
    s["data"]["peer-key"].as_str().map(String::from)
}

/// The admin Secret also holds the key the pods prove their hops to each other with
/// (`sharding.peerKeyFile` names its file); a Secret made before peer keys existed gets one
/// added on the next reconcile, its token kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_secret_holds_a_peer_key_and_an_old_one_gets_it_added() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let token = admin_token(&fake).unwrap();
    let key = peer_key(&fake).expect("a peer key");
    assert_ne!(key, token);
    let config = fake
        .get("/v1/configmaps", Some(NS), "web-config")
        .expect("the config");
    let text = config["data"]["config.yaml"].as_str().unwrap_or_default();
    assert!(
        text.contains("peerKeyFile: /etc/edgecache-admin/peer-key"),
        "{text}"
    );

    // A Secret as an older operator made it: the token alone.
    let mut old = fake
        .get("/v1/secrets", Some(NS), "web-admin-token")
        .unwrap();
    old["data"].as_object_mut().unwrap().remove("peer-key");
    fake.put_object("/v1/secrets", Some(NS), old);
    assert_eq!(peer_key(&fake), None);
    patch_spec(&fake, json!({"storage": {"size": "20GiB"}})).await;
    eventually("a peer key added", || peer_key(&fake).is_some()).await;
    assert_eq!(admin_token(&fake).unwrap(), token, "the token kept");
    op.stop().await;
}

fn named_ec(name: &str, spec_yaml: &str) -> EdgeCache {
    let mut ec = new_ec(spec_yaml);
    ec.metadata.name = Some(name.into());
    ec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_edgecache_sharing_the_cache_path_waits_for_the_earlier_one() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("storage:\n  hostPath: /mnt/nvme0/ec\n")).await;
    eventually("web Ready", || is_ready(&fake)).await;
    // Same cache directory, different ports: the later one must not start pods.
    tokio::time::sleep(Duration::from_millis(1100)).await; // a later creationTimestamp
    create(
        &fake,
        &named_ec(
            "api",
            "storage:\n  hostPath: /mnt/nvme0/ec/\nnetwork:\n  port: 8081\n  adminPort: 9091\n",
        ),
    )
    .await;
    eventually("api Degraded", || {
        condition_of(&fake, "api", "Degraded").is_some_and(|c| c.0 == "True" && c.1 == "Conflict")
    })
    .await;
    let (_, _, message) = condition_of(&fake, "api", "Degraded").unwrap();
    assert!(
        message.contains("edge/web") && message.contains("/mnt/nvme0/ec"),
        "names the other EdgeCache and the path: {message}"
    );
    assert!(fake.get(keys::DAEMONSETS, Some(NS), "api").is_none());
    assert!(is_ready(&fake), "the earlier one is untouched");
    eventually("a Conflict event", || {
        event_reasons(&fake).contains(&"Conflict".to_string())
    })
    .await;

    // The earlier one's deletion lets the later one proceed.
    Api::<EdgeCache>::namespaced(fake.client(), NS)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("api gets its DaemonSet and is Ready", || {
        fake.get(keys::DAEMONSETS, Some(NS), "api").is_some()
            && condition_of(&fake, "api", "Ready").is_some_and(|c| c.0 == "True")
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_edgecache_on_the_same_host_port_is_refused() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("network:\n  hostNetwork: true\n")).await;
    eventually("web Ready", || is_ready(&fake)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Its client port is web's admin port, on the host network of the same nodes.
    create(
        &fake,
        &named_ec(
            "api",
            "storage:\n  hostPath: /mnt/api\nnetwork:\n  hostNetwork: true\n  port: 9090\n  adminPort: 9091\n",
        ),
    )
    .await;
    eventually("api Degraded", || {
        condition_of(&fake, "api", "Degraded").is_some_and(|c| {
            c.0 == "True" && c.1 == "Conflict" && c.2.contains("9090") && c.2.contains("edge/web")
        })
    })
    .await;
    assert!(fake.get(keys::DAEMONSETS, Some(NS), "api").is_none());
    // Moving it off the host network resolves the conflict.
    Api::<EdgeCache>::namespaced(fake.client(), NS)
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"network": {"hostNetwork": false}}})),
        )
        .await
        .unwrap();
    eventually("api Ready", || {
        condition_of(&fake, "api", "Ready").is_some_and(|c| c.0 == "True")
    })
    .await;
    op.stop().await;
}

/// A user's own Service named like the EdgeCache, created through the API by another manager.
async fn user_service(fake: &FakeApiServer, name: &str) -> Value {
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": {"team": "payments"}},
        "spec": {"selector": {"app": "payments"},
                 "ports": [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}
    }))
    .unwrap();
    let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(fake.client(), NS);
    let params = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..PostParams::default()
    };
    serde_json::to_value(api.create(&params, &svc).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_object_with_a_childs_name_is_refused_and_left_alone() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let before = user_service(&fake, "web").await;
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Degraded NameConflict", || {
        condition(&fake, "Degraded").is_some_and(|c| c.0 == "True" && c.1 == "NameConflict")
    })
    .await;
    let (_, _, message) = condition(&fake, "Degraded").unwrap();
    assert!(
        message.contains("Service edge/web") && message.contains("not created by"),
        "names the object: {message}"
    );
    assert_eq!(condition(&fake, "Ready").unwrap().0, "False");
    eventually("a NameConflict event", || {
        event_reasons(&fake).contains(&"NameConflict".to_string())
    })
    .await;
    // The user's Service is exactly as it was: no owner reference, no operator fields.
    let after = fake.get(keys::SERVICES, Some(NS), "web").unwrap();
    assert_eq!(after, before, "the user's Service is not touched");
    assert!(
        ds(&fake).is_none(),
        "no pods behind a Service the operator does not own"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_another_owner_are_refused_too() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    // A DaemonSet named `web` that some other controller owns.
    fake.put_object(
        keys::DAEMONSETS,
        Some(NS),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "web", "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": "other",
                "uid": "11111111-2222-4333-8444-555555555555", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": "other"}},
                     "template": {"metadata": {"labels": {"app": "other"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
    );
    let before = ds(&fake).unwrap()["spec"].clone();
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Degraded NameConflict", || {
        condition(&fake, "Degraded").is_some_and(|c| {
            c.0 == "True" && c.1 == "NameConflict" && c.2.contains("DaemonSet edge/web")
        })
    })
    .await;
    assert_eq!(ds(&fake).unwrap()["spec"], before);
    op.stop().await;
}

fn daemonset_patches(fake: &FakeApiServer) -> Vec<std::time::Instant> {
    fake.requests()
        .iter()
        .filter(|r| r.method == http::Method::PATCH && r.uri.contains("/daemonsets/"))
        .map(|r| r.at)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_apply_is_degraded_with_the_servers_message_and_backs_off() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    // The operator's RBAC lost `patch` on DaemonSets.
    fake.inject_fault(Fault {
        method: Some(http::Method::PATCH),
        path_contains: "/daemonsets/".into(),
        code: 403,
        times: u32::MAX,
    });
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Degraded ApplyForbidden", || {
        condition(&fake, "Degraded").is_some_and(|c| c.0 == "True" && c.1 == "ApplyForbidden")
    })
    .await;
    let (_, _, message) = condition(&fake, "Degraded").unwrap();
    assert!(
        message.contains("DaemonSet web")
            && message
                .contains("injected fault: PATCH /apis/apps/v1/namespaces/edge/daemonsets/web"),
        "the API server's message: {message}"
    );
    assert_eq!(condition(&fake, "Ready").unwrap().0, "False");
    // Retried with a growing delay, not in a loop; one event, not one per retry.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let tries = daemonset_patches(&fake);
    assert!(
        (2..=10).contains(&tries.len()),
        "{} tries in about 1.5 s",
        tries.len()
    );
    let gaps: Vec<Duration> = tries.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.last().unwrap() > gaps.first().unwrap(),
        "the delay grows: {gaps:?}"
    );
    let warnings = event_reasons(&fake)
        .iter()
        .filter(|r| *r == "ApplyForbidden")
        .count();
    assert_eq!(warnings, 1);
    assert!(op.failures("apply") >= 2);

    // RBAC fixed: the next retry converges and Degraded clears.
    fake.clear_faults();
    eventually("Ready", || is_ready(&fake)).await;
    assert_eq!(condition(&fake, "Degraded").unwrap().1, "AsExpected");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_the_server_finds_invalid_is_degraded_with_its_causes() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    // A 422 on an apply (an admission policy, say) is Degraded ApplyInvalid. (A name the
    // children cannot take is the CRD's to refuse: operator/api/tests/crd_cel.rs.)
    fake.inject_fault(Fault {
        method: Some(http::Method::PATCH),
        path_contains: "/services/".into(),
        code: 422,
        times: u32::MAX,
    });
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Degraded ApplyInvalid", || {
        condition(&fake, "Degraded").is_some_and(|c| c.0 == "True" && c.1 == "ApplyInvalid")
    })
    .await;
    let (_, _, message) = condition(&fake, "Degraded").unwrap();
    assert!(
        message.contains("Service web") && message.contains("injected fault"),
        "{message}"
    );
    assert!(fake.get(keys::SERVICES, Some(NS), "web").is_none());
    eventually("a Warning event", || {
        event_reasons(&fake).contains(&"ApplyInvalid".to_string())
    })
    .await;
    fake.clear_faults();
    eventually("Ready", || is_ready(&fake)).await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edgecache_naming_no_image_runs_the_operators_own_version() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    // The CRD defaults no image: a stored one would freeze the image of its creation day.
    let crd = serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap();
    let image =
        crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/image");
    assert!(
        image.is_some_and(|i| i.get("default").is_none()),
        "{image:?}"
    );
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    assert!(ec_value(&fake).unwrap()["spec"].get("image").is_none());
    let image = ds(&fake).unwrap()["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    assert_eq!(
        image,
        edgecache_operator::validate::default_image().as_str()
    );
    assert!(
        image
            .as_str()
            .unwrap()
            .ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
        "the operator's own version: {image}"
    );
    op.stop().await;
}

/// A reconcile still running on an EdgeCache that is deleted and created again under its name
/// (it read the old one) writes nothing onto the new one: the status write is a JSON patch that
/// tests `metadata.uid` first. Before, it merge-patched by name, and the new EdgeCache showed
/// the old one's Ready status before its own children existed (the flake of
/// `foreground_and_orphan_deletion_of_an_edgecache`: Ready again, orphaned, no children left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_reconcile_cannot_write_its_status_onto_a_namesake() {
    use edgecache_api::v1alpha1::EdgeCacheStatus;
    let fake = FakeApiServer::new();
    let api = Api::<EdgeCache>::namespaced(fake.client(), NS);
    let old = create(&fake, &new_ec("")).await;
    api.delete("web", &DeleteParams::background())
        .await
        .unwrap();
    let new = create(&fake, &new_ec("")).await;
    assert_ne!(old.metadata.uid, new.metadata.uid);
    let stale = EdgeCacheStatus {
        observed_generation: Some(1),
        config_hash: Some("stale".into()),
        ..EdgeCacheStatus::default()
    };
    let wrote = edgecache_operator::status::write(&api, &old, &stale)
        .await
        .unwrap();
    assert!(!wrote, "nothing is written onto the namesake");
    assert!(
        ec_value(&fake)
            .unwrap()
            .get("status")
            .is_none_or(|s| s.get("configHash").is_none()),
        "{:?}",
        ec_value(&fake).unwrap()["status"]
    );
    // The object it read: written.
    assert!(
        edgecache_operator::status::write(&api, &new, &stale)
            .await
            .unwrap()
    );
    assert_eq!(ec_value(&fake).unwrap()["status"]["configHash"], "stale");
}

// Sharding: the peer list follows the pods; per-node status.

fn peer_lines(fake: &FakeApiServer) -> Option<Vec<String>> {
    let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-peers")?;
    Some(
        cm["data"]["peers"]
            .as_str()?
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect(),
    )
}

fn peer_names(fake: &FakeApiServer) -> Vec<String> {
    peer_lines(fake)
        .unwrap_or_default()
        .iter()
        .filter_map(|l| l.split(' ').next().map(String::from))
        .collect()
}

fn pod_ip(fake: &FakeApiServer, name: &str) -> Option<String> {
    fake.get(keys::PODS, Some(NS), name)?["status"]["podIP"]
        .as_str()
        .map(String::from)
}

fn node_entry(fake: &FakeApiServer, node: &str) -> Option<Value> {
    ec_value(fake)?["status"]["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["node"] == node)
        .cloned()
}

fn three_nodes(fake: &FakeApiServer) {
    nodes(fake);
    fake.add_node(
        "nvme-2",
        &[
            ("edgecache.dev/nvme", "true"),
            ("kubernetes.io/os", "linux"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_list_follows_ready_pods_without_touching_the_config() {
    let fake = FakeApiServer::new();
    three_nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("three peers", || peer_names(&fake).len() == 3).await;
    eventually("Ready", || is_ready(&fake)).await;
    let lines = peer_lines(&fake).unwrap();
    let want: Vec<String> = ["nvme-1", "nvme-2", "ssd-1"]
        .iter()
        .map(|n| format!("{n} {}:8080", pod_ip(&fake, &format!("web-{n}")).unwrap()))
        .collect();
    assert_eq!(lines, want, "sorted by node, pod IP and the client port");
    let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-config").unwrap();
    let cfg = edgecache_operator::validate::parse_as_pod(
        cm["data"]["config.yaml"].as_str().unwrap(),
        "node-a",
    )
    .unwrap();
    assert_eq!(
        cfg.sharding.peers_file.as_deref(),
        Some("/etc/edgecache-peers/peers")
    );
    let status = ec_value(&fake).unwrap()["status"].clone();
    assert_eq!(status["nodesReady"], "3/3");
    assert_eq!(
        status["sharding"],
        json!({"mode": "consistent", "peers": 3})
    );
    let hash = template_hash(&fake).unwrap();
    let ds_generation = ds(&fake).unwrap()["metadata"]["generation"].clone();
    let config_rv = cm["metadata"]["resourceVersion"].clone();

    // A pod that stops being ready leaves the list.
    let unready = json!({"phase": "Running", "podIP": pod_ip(&fake, "web-nvme-2").unwrap(),
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                        "message": "containers with unready status: [dataplane]"}],
        "containerStatuses": [{"name": "dataplane", "image": "i", "imageID": "", "ready": false,
                               "restartCount": 0, "state": {"running": {}}}]});
    fake.set_pod_status(NS, "web-nvme-2", Some(unready));
    eventually("nvme-2 leaves the list", || {
        peer_names(&fake) == ["nvme-1", "ssd-1"]
    })
    .await;
    eventually("nvme-2 reported not ready", || {
        node_entry(&fake, "nvme-2")
            .is_some_and(|n| n["ready"] == false && n["reason"] == "NotReady")
    })
    .await;
    // ... and comes back when ready again.
    fake.set_pod_status(NS, "web-nvme-2", None);
    eventually("nvme-2 back", || peer_names(&fake).len() == 3).await;

    // A node that goes takes its pod, and its line, with it.
    assert!(fake.delete(keys::NODES, None, "nvme-1"));
    eventually("nvme-1 leaves the list", || {
        peer_names(&fake) == ["nvme-2", "ssd-1"]
    })
    .await;
    eventually("status.nodes forgets nvme-1", || {
        node_entry(&fake, "nvme-1").is_none() && node_entry(&fake, "ssd-1").is_some()
    })
    .await;

    // A pod deleted by hand is made again with a new IP: the old address goes.
    let old = pod_ip(&fake, "web-ssd-1").unwrap();
    assert!(fake.delete(keys::PODS, Some(NS), "web-ssd-1"));
    let new = pod_ip(&fake, "web-ssd-1").unwrap();
    assert_ne!(old, new);
    eventually("the new address", || {
        peer_lines(&fake).is_some_and(|l| l.contains(&format!("ssd-1 {new}:8080")))
    })
    .await;

    // None of this changed the config or the pod template: no pod was restarted.
    assert_eq!(template_hash(&fake).unwrap(), hash);
    assert_eq!(ds(&fake).unwrap()["metadata"]["generation"], ds_generation);
    assert_eq!(
        fake.get(keys::CONFIGMAPS, Some(NS), "web-config").unwrap()["metadata"]["resourceVersion"],
        config_rv
    );
    op.stop().await;
}

/// Defects 17 and 18 of issue 35: started before its CRD exists, the operator must stop
/// promptly when asked, report not ready, and start within a few seconds once the CRD appears
/// (its watches' back-off had grown to 30 s, so it began about 30 s after); `/readyz` turns ready
/// once the EdgeCache cache has synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_before_its_crd_it_waits_stops_promptly_and_starts_soon_after_the_crd() {
    let fake = FakeApiServer::new();
    assert!(fake.unregister(keys::EDGECACHES));
    nodes(&fake);
    let op = Operator::start(&fake);
    // Long enough for kube's default back-off to pass 10 s between tries.
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(!op.ready.load(std::sync::atomic::Ordering::SeqCst));
    assert!(
        fake.install_crd(&serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap())
    );
    create(&fake, &new_ec("")).await;
    eventually_within(Duration::from_secs(8), "ready once the CRD exists", || {
        op.ready.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    eventually_within(Duration::from_secs(8), "the EdgeCache reconciled", || {
        ds(&fake).is_some()
    })
    .await;
    op.stop().await;

    // Asked to stop while its CRD is missing, it stops within 2 s.
    let fake = FakeApiServer::new();
    assert!(fake.unregister(keys::EDGECACHES));
    let op = Operator::start(&fake);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let asked = std::time::Instant::now();
    op.stop().await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
}

/// Defect 7 of issue 35: the operator listed and watched every Secret of the cluster (metadata
/// only, but the RBAC that needs is a read of every Secret). It lists and watches its own
/// Secrets, by label, and gets the Secrets an EdgeCache names by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_listed_and_watched_by_the_operators_label_only() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let lists: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| {
            r.method == http::Method::GET
                && r.uri
                    .split('?')
                    .next()
                    .is_some_and(|p| p.ends_with("/secrets"))
        })
        .map(|r| r.uri.clone())
        .collect();
    assert!(!lists.is_empty(), "the operator's own Secrets are watched");
    for uri in &lists {
        assert!(
            uri.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dedgecache-operator"),
            "{uri}"
        );
    }
    op.stop().await;
}

/// Defect 2 of issue 35: the status is merge-patched and an empty `nodes` is not serialised, so
/// the last pods stayed in `status.nodes` after every node had gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_nodes_is_cleared_when_no_node_matches_any_more() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    assert!(node_entry(&fake, "nvme-1").is_some());
    for node in ["nvme-1", "ssd-1", "hdd-1"] {
        assert!(fake.delete(keys::NODES, None, node), "{node}");
    }
    eventually("Degraded NoMatchingNodes", || {
        condition(&fake, "Degraded").is_some_and(|c| c.1 == "NoMatchingNodes")
    })
    .await;
    eventually("status.nodes cleared", || {
        ec_value(&fake).is_some_and(|ec| {
            ec["status"]["nodes"]
                .as_array()
                .is_none_or(|nodes| nodes.is_empty())
        })
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_off_has_no_peer_list_and_turning_it_off_removes_it() {
    let fake = FakeApiServer::new();
    three_nodes(&fake);
    let op = Operator::start(&fake);
    create(&fake, &new_ec("sharding:\n  mode: \"off\"\n")).await;
    eventually("Ready", || is_ready(&fake)).await;
    assert!(fake.get(keys::CONFIGMAPS, Some(NS), "web-peers").is_none());
    let volumes = ds(&fake).unwrap()["spec"]["template"]["spec"]["volumes"].clone();
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["name"] != "peers"),
        "{volumes}"
    );
    assert_eq!(
        ec_value(&fake).unwrap()["status"]["sharding"],
        json!({"mode": "off", "peers": 0})
    );

    patch_spec(&fake, json!({"sharding": {"mode": "consistent"}})).await;
    eventually("three peers", || peer_names(&fake).len() == 3).await;
    patch_spec(&fake, json!({"sharding": {"mode": "off"}})).await;
    eventually("the peers ConfigMap goes", || {
        fake.get(keys::CONFIGMAPS, Some(NS), "web-peers").is_none()
    })
    .await;
    eventually_event(&fake, "Deleted").await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_peers_config_map_is_no_conflict_while_sharding_is_off() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    fake.put_object(
        keys::CONFIGMAPS,
        Some(NS),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-peers"},
               "data": {"peers": "someone else's"}}),
    );
    let op = Operator::start(&fake);
    create(&fake, &new_ec("sharding:\n  mode: \"off\"\n")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-peers").unwrap();
    assert_eq!(cm["data"]["peers"], "someone else's");
    // Turned on, the name is needed: NameConflict, and the ConfigMap is still not touched.
    patch_spec(&fake, json!({"sharding": {"mode": "consistent"}})).await;
    eventually("NameConflict", || {
        condition(&fake, "Degraded")
            .is_some_and(|c| c.1 == "NameConflict" && c.2.contains("web-peers"))
    })
    .await;
    let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-peers").unwrap();
    assert_eq!(cm["data"]["peers"], "someone else's");
    op.stop().await;
}

/// A stand-in for a pod's admin endpoint on 127.0.0.1: answers every request with `body` and
/// keeps each request head.
async fn admin_endpoint(body: &'static str) -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).await.unwrap_or(0);
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).to_lowercase());
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(reply.as_bytes()).await;
        }
    });
    (port, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_nodes_carry_what_each_pod_reports_on_its_metrics() {
    let (port, heads) = admin_endpoint(
        "edgecache_dataplane_io_engine_info{engine=\"threads\"} 1\n\
         edgecache_dataplane_steering_info{mode=\"off\"} 1\n\
         edgecache_dataplane_store_bytes 4096\n\
         edgecache_dataplane_store_objects 3\n\
         edgecache_dataplane_requests_total{cache=\"hit_disk\"} 3\n\
         edgecache_dataplane_requests_total{cache=\"miss\"} 1\n",
    )
    .await;
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start_with(&fake, |ctx| {
        ctx.scrape_timeout = Some(Duration::from_millis(300));
    });
    create(&fake, &new_ec(&format!("network:\n  adminPort: {port}\n"))).await;
    eventually("Ready", || is_ready(&fake)).await;
    // nvme-1's pod answers on 127.0.0.1; ssd-1's address has nothing behind it.
    let local = json!({"phase": "Running", "podIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "dataplane", "image": "i", "imageID": "", "ready": true,
                               "restartCount": 0, "state": {"running": {}}}]});
    fake.set_pod_status(NS, "web-nvme-1", Some(local));
    eventually("nvme-1's figures", || {
        node_entry(&fake, "nvme-1").is_some_and(|n| {
            n["ioEngine"] == "threads"
                && n["steering"] == "off"
                && n["diskBytes"] == 4096
                && n["objects"] == 3
                && n["hitRatio"] == 0.75
        })
    })
    .await;
    let ssd = node_entry(&fake, "ssd-1").unwrap();
    assert_eq!(ssd["ready"], true);
    assert!(ssd.get("ioEngine").is_none(), "not read: {ssd}");
    // Read with the admin token of the EdgeCache's Secret.
    let secret = fake
        .get(keys::SECRETS, Some(NS), "web-admin-token")
        .unwrap();
    let token: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"]["token"].clone()).unwrap();
    let token = String::from_utf8(token.0).unwrap();
    let heads = heads.lock().unwrap().clone();
    // `/metrics` read, and the peer list pushed (sharding is on by default), both with it.
    assert!(
        heads.iter().any(|h| h.starts_with("get /metrics http/1.1"))
            && heads.iter().any(|h| h.starts_with("put /peers http/1.1"))
            && heads.iter().all(|h| {
                h.starts_with("get /metrics http/1.1") || h.starts_with("put /peers http/1.1")
            }),
        "{heads:?}"
    );
    assert!(
        heads
            .iter()
            .all(|h| h.contains(&format!("authorization: bearer {token}"))),
        "{heads:?}"
    );
    // Issue 35 defect 9: the pod the operator cannot reach is a condition, not silence.
    eventually("AdminReachable names ssd-1's pod", || {
        condition(&fake, "AdminReachable").is_some_and(|c| {
            c.0 == "False" && c.1 == "AdminUnreachable" && c.2.contains("of 1 pod(s): web-ssd-1 (")
        })
    })
    .await;
    let (_, _, message) = condition(&fake, "AdminReachable").unwrap();
    assert!(!message.contains("web-nvme-1"), "{message}");
    assert!(message.contains("NetworkPolicies"), "{message}");
    assert!(is_ready(&fake), "serving is not judged by the admin port");
    // Reachable again (the policy fixed): the condition clears.
    let local = fake.get(keys::PODS, Some(NS), "web-nvme-1").unwrap()["status"].clone();
    fake.set_pod_status(NS, "web-ssd-1", Some(local));
    eventually("AdminReachable", || {
        condition(&fake, "AdminReachable").is_some_and(|c| c.0 == "True" && c.1 == "AllPodsAnswer")
    })
    .await;
    op.stop().await;
}

const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

/// `data` as a Secret's `data` (base64).
fn secret_data(data: &[(&str, &str)]) -> Value {
    data.iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                json!(k8s_openapi::ByteString(v.as_bytes().to_vec())),
            )
        })
        .collect()
}

/// Create the Secret `name` of `type_` with `data`, as a user or cert-manager would.
async fn put_secret(fake: &FakeApiServer, name: &str, type_: &str, data: &[(&str, &str)]) {
    let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": name}, "type": type_, "data": secret_data(data),
    }))
    .unwrap();
    Api::namespaced(fake.client(), NS)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// Merge `data` into the Secret `name`'s data, as a user or cert-manager would.
async fn patch_secret(fake: &FakeApiServer, name: &str, data: &[(&str, &str)]) {
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(fake.client(), NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": secret_data(data) })),
        )
        .await
        .unwrap();
}

fn degraded_tls(fake: &FakeApiServer, text: &str) -> bool {
    condition(fake, "Degraded")
        .is_some_and(|c| c.0 == "True" && c.1 == "TlsSecretInvalid" && c.2.contains(text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_secrets_are_checked_before_a_rollout_and_a_renewal_restarts_no_pod() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    create(
        &fake,
        &new_ec("tls:\n  certificates:\n  - secretName: web-tls\n  - secretName: api-tls\n"),
    )
    .await;
    // Neither Secret exists: Degraded, naming both, and no pods that could not start.
    eventually("Degraded TlsSecretInvalid", || {
        degraded_tls(
            &fake,
            "spec.tls.certificates[0].secretName: Secret web-tls does not exist; \
             spec.tls.certificates[1].secretName: Secret api-tls does not exist",
        )
    })
    .await;
    assert!(ds(&fake).is_none(), "nothing rolled out");
    assert_eq!(condition(&fake, "Ready").unwrap().0, "False");
    eventually_event(&fake, "TlsSecretInvalid").await;

    // An Opaque Secret is refused by the operator (the Secret watch brings it).
    put_secret(
        &fake,
        "web-tls",
        "Opaque",
        &[("tls.crt", CERT_PEM), ("tls.key", KEY_PEM)],
    )
    .await;
    eventually("the Opaque Secret named", || {
        degraded_tls(
            &fake,
            "Secret web-tls is of type Opaque, not kubernetes.io/tls",
        )
    })
    .await;
    // Nor a TLS Secret whose key is empty (cert-manager before the first issue).
    put_secret(
        &fake,
        "api-tls",
        "kubernetes.io/tls",
        &[("tls.crt", CERT_PEM), ("tls.key", "")],
    )
    .await;
    eventually("the empty key named", || {
        degraded_tls(&fake, "Secret api-tls has an empty tls.key")
    })
    .await;
    assert!(ds(&fake).is_none());

    // Fixed (a Secret's type cannot change: deleted and made again, as a user would):
    // rolled out without any change to the EdgeCache.
    fake.delete("/v1/secrets", Some(NS), "web-tls");
    put_secret(
        &fake,
        "web-tls",
        "kubernetes.io/tls",
        &[("tls.crt", CERT_PEM), ("tls.key", KEY_PEM)],
    )
    .await;
    patch_secret(&fake, "api-tls", &[("tls.key", KEY_PEM)]).await;
    eventually("Ready", || is_ready(&fake)).await;
    assert_eq!(condition(&fake, "Degraded").unwrap().0, "False");
    let d = ds(&fake).unwrap();
    let secret_volumes: Vec<_> = d["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["secret"]["secretName"].as_str())
        .collect();
    assert_eq!(secret_volumes, ["web-admin-token", "web-tls", "api-tls"]);
    let hash = template_hash(&fake).unwrap();
    let ds_version = d["metadata"]["resourceVersion"].clone();

    // A renewal (cert-manager rewrites the data of the same Secret) changes neither the config
    // nor the pod template, at the next reconcile too: no pod restarts (the kubelet updates the
    // files). Named Secrets are not watched; a cache pod's change reconciles here.
    let before = op.ctx.metrics.reconciles.get();
    patch_secret(
        &fake,
        "web-tls",
        &[("tls.crt", &format!("{CERT_PEM}{CERT_PEM}"))],
    )
    .await;
    assert!(fake.delete(keys::PODS, Some(NS), "web-nvme-1"));
    eventually("a reconcile after the renewal", || {
        op.ctx.metrics.reconciles.get() > before
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(template_hash(&fake).unwrap(), hash);
    assert_eq!(
        ds(&fake).unwrap()["metadata"]["resourceVersion"],
        ds_version
    );
    assert!(is_ready(&fake));

    // A Secret deleted later: Degraded again at the next reconcile (the resync, or a change of
    // the EdgeCache, its children or its pods: here a pod replaced); the running pods are left
    // as they are.
    fake.delete("/v1/secrets", Some(NS), "api-tls");
    assert!(fake.delete(keys::PODS, Some(NS), "web-ssd-1"));
    eventually("Degraded again", || {
        degraded_tls(&fake, "Secret api-tls does not exist")
    })
    .await;
    assert_eq!(
        ds(&fake).unwrap()["metadata"]["resourceVersion"],
        ds_version
    );
    op.stop().await;
}

fn degraded_origin_ca(fake: &FakeApiServer, text: &str) -> bool {
    condition(fake, "Degraded")
        .is_some_and(|c| c.0 == "True" && c.1 == "OriginCaSecretInvalid" && c.2.contains(text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sites_wait_for_their_origin_ca_secret_then_roll_out() {
    let fake = FakeApiServer::new();
    nodes(&fake);
    let op = Operator::start(&fake);
    // Sites alone (no origin.url): www on a Service pool, *.img on HTTPS origins whose CA
    // bundle is the key bundle.pem of Secret img-ca, which does not exist yet.
    let mut ec = sites_edgecache(TWO_SITES);
    ec.metadata.uid = None;
    ec.metadata.generation = None;
    create(&fake, &ec).await;
    eventually("Degraded OriginCaSecretInvalid", || {
        degraded_origin_ca(
            &fake,
            "spec.sites[1].originTls.caSecret: Secret img-ca does not exist",
        )
    })
    .await;
    assert!(ds(&fake).is_none(), "nothing rolled out");
    assert_eq!(condition(&fake, "Ready").unwrap().0, "False");
    eventually_event(&fake, "OriginCaSecretInvalid").await;

    // An Opaque Secret without the key the site names: still refused, naming the key (the
    // Secret watch brings it).
    put_secret(&fake, "img-ca", "Opaque", &[("ca.crt", CERT_PEM)]).await;
    eventually("the missing key named", || {
        degraded_origin_ca(&fake, "Secret img-ca has no key bundle.pem")
    })
    .await;
    assert!(ds(&fake).is_none());

    // The key added: rolled out without any change to the EdgeCache.
    patch_secret(&fake, "img-ca", &[("bundle.pem", CERT_PEM)]).await;
    eventually("Ready", || is_ready(&fake)).await;
    assert_eq!(condition(&fake, "Degraded").unwrap().0, "False");
    let d = ds(&fake).unwrap();
    let pod = &d["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "origin-ca-0")
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "img-ca");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "origin-ca-0")
        .unwrap();
    assert_eq!(mount["mountPath"], "/etc/edgecache-origin-ca/img-ca");
    assert_eq!(mount["readOnly"], true);
    assert!(mount.get("subPath").is_none());
    let cm = fake.get(keys::CONFIGMAPS, Some(NS), "web-config").unwrap();
    let cfg = edgecache_operator::validate::parse_as_pod(
        cm["data"]["config.yaml"].as_str().unwrap(),
        "ssd-1",
    )
    .unwrap();
    assert_eq!(cfg.origin.url, "");
    let hosts: Vec<&[String]> = cfg.sites.iter().map(|s| s.hosts.as_slice()).collect();
    assert_eq!(
        hosts,
        [
            &["www.shop.example".to_string(), "shop.example".to_string()][..],
            &["*.img.shop.example".to_string()][..]
        ]
    );
    assert_eq!(
        cfg.sites[1].origin_tls.ca_file.as_deref(),
        Some("/etc/edgecache-origin-ca/img-ca/bundle.pem")
    );

    // A rotated bundle (new data, same Secret) restarts no pod: the kubelet updates the file.
    // Named Secrets are not watched (the operator watches only its own), so a rotation alone
    // causes no reconcile: one is caused here, by deleting a child, and it reads the new bundle.
    let hash = template_hash(&fake).unwrap();
    patch_secret(
        &fake,
        "img-ca",
        &[("bundle.pem", &format!("{CERT_PEM}{CERT_PEM}"))],
    )
    .await;
    let before = op.ctx.metrics.reconciles.get();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(fake.client(), NS)
        .delete("web-config", &Default::default())
        .await
        .unwrap();
    eventually("a reconcile after the rotation", || {
        op.ctx.metrics.reconciles.get() > before
            && fake.get(keys::CONFIGMAPS, Some(NS), "web-config").is_some()
    })
    .await;
    assert_eq!(template_hash(&fake).unwrap(), hash);
    assert!(is_ready(&fake));
    op.stop().await;
}

/// Issue 33: every reconcile is a span at the OTLP endpoint (a real receiver, decoding with the
/// OpenTelemetry types), naming the object and how the reconcile ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_are_traced() {
    let rx = edgecache_trace::receiver::Receiver::start().unwrap();
    let fake = FakeApiServer::new();
    nodes(&fake);
    let settings = edgecache_operator::trace::settings(Some(rx.endpoint()), 1.0);
    let op = Operator::start_with(&fake, |ctx| {
        ctx.tracer = edgecache_trace::Tracer::start(&settings, ctx.metrics.trace.clone()).unwrap();
    });
    create(&fake, &new_ec("")).await;
    eventually("Ready", || is_ready(&fake)).await;
    let ok = |s: &edgecache_trace::receiver::Received| {
        s.name == "reconcile EdgeCache" && s.str("edgecache.outcome") == Some("ok")
    };
    eventually("a reconcile span", || rx.spans().iter().any(ok)).await;
    let spans = rx.spans();
    let s = spans.iter().find(|s| ok(s)).unwrap();
    assert_eq!(s.str("k8s.namespace.name"), Some(NS));
    assert_eq!(s.str("edgecache.name"), Some("web"));
    assert_eq!(s.str("edgecache.kind"), Some("EdgeCache"));
    assert_eq!(s.resource_str("service.name"), Some("edgecache-operator"));
    assert_eq!(s.parent_span_id, "", "a reconcile starts its trace");
    assert!(s.end >= s.start);
    assert_eq!(s.status, 0);

    // An invalid spec: the span says why, as an error.
    patch_spec(&fake, json!({"storage": {"size": "1MiB"}})).await;
    let invalid = |s: &edgecache_trace::receiver::Received| {
        s.name == "reconcile EdgeCache" && s.str("edgecache.outcome") == Some("invalid_spec")
    };
    eventually("an invalid_spec span", || rx.spans().iter().any(invalid)).await;
    let spans = rx.spans();
    let s = spans.iter().find(|s| invalid(s)).unwrap();
    assert_eq!(s.status, 2, "an error status: {s:?}");
    assert_eq!(s.str("edgecache.name"), Some("web"));
    assert_eq!(rx.rejected(), 0);
    assert!(op.ctx.metrics.trace.exported.get() >= 2);
    op.stop().await;
}
