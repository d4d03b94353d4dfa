//! EdgeCachePurges through the fake as through a real API server: the CRD's schema, defaults and
//! CEL rules (one selector kind, immutable spec) on writes, and the status subresource; and the
//! Pods tests add with their IP, node and readiness.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::collections::BTreeMap;

use edgecache_api::purge::{EdgeCachePurge, EdgeCachePurgeStatus};
use edgecache_fakeapi::{FakeApiServer, keys};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn fake() -> FakeApiServer {
    let fake = FakeApiServer::new();
    assert!(
        fake.install_crd(
            &serde_json::to_value(edgecache_api::schema::edgecache_purge_crd()).unwrap()
        )
    );
    fake
}

fn purge(spec: serde_json::Value) -> EdgeCachePurge {
    serde_json::from_value(json!({
        "apiVersion": "edgecache.dev/v1alpha1", "kind": "EdgeCachePurge",
        "metadata": {"name": "p1"}, "spec": spec,
    }))
    .unwrap()
}

fn refused(err: kube::Error, text: &str) {
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(s.message.contains(text), "{text:?} in {}", s.message);
        }
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn one_selector_kind_is_stored_with_defaults() {
    let fake = fake();
    let api: Api<EdgeCachePurge> = Api::namespaced(fake.client(), "edge");
    let p = api
        .create(
            &PostParams::default(),
            &purge(json!({"edgeCache": "web", "tags": ["product-42"]})),
        )
        .await
        .unwrap();
    assert!(p.metadata.uid.is_some());
    assert!(p.metadata.creation_timestamp.is_some());
    let raw = fake.get(keys::EDGECACHEPURGES, Some("edge"), "p1").unwrap();
    assert_eq!(raw["spec"]["soft"], false, "schema default");
    assert_eq!(raw["spec"]["all"], false, "schema default");
}

#[tokio::test]
async fn two_selector_kinds_or_none_are_refused() {
    let fake = fake();
    let api: Api<EdgeCachePurge> = Api::namespaced(fake.client(), "edge");
    for spec in [
        json!({"edgeCache": "web", "tags": ["t"], "urls": ["http://www.example/a"]}),
        json!({"edgeCache": "web", "all": true, "prefixes": ["http://www.example/"]}),
        json!({"edgeCache": "web", "soft": true}),
    ] {
        let err = api
            .create(&PostParams::default(), &purge(spec.clone()))
            .await
            .expect_err("refused");
        refused(err, "set exactly one of urls, prefixes, tags or all: true");
    }
    // Bounds from the schema: an empty selector string.
    let err = api
        .create(
            &PostParams::default(),
            &purge(json!({"edgeCache": "web", "tags": [""]})),
        )
        .await
        .expect_err("refused");
    refused(err, "spec.tags[0]");
    assert!(fake.list(keys::EDGECACHEPURGES).is_empty());
}

#[tokio::test]
async fn the_spec_is_immutable_and_the_status_is_a_subresource() {
    let fake = fake();
    let api: Api<EdgeCachePurge> = Api::namespaced(fake.client(), "edge");
    api.create(
        &PostParams::default(),
        &purge(json!({"edgeCache": "web", "tags": ["product-42"]})),
    )
    .await
    .unwrap();
    let err = api
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tags": ["product-43"]}})),
        )
        .await
        .expect_err("a spec change is refused");
    refused(err, "spec is immutable");
    // A label change is fine.
    api.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "web"}}})),
    )
    .await
    .unwrap();
    // The status goes through /status only, and leaves the spec and generation alone.
    let st = EdgeCachePurgeStatus {
        kind: "tags".into(),
        confirmed: "0/0".into(),
        ..Default::default()
    };
    let after = api
        .patch_status(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": st})),
        )
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().confirmed, "0/0");
    assert_eq!(after.metadata.generation, Some(1));
    let ignored = api
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"confirmed": "9/9"}})),
        )
        .await
        .unwrap();
    assert_eq!(ignored.status.unwrap().confirmed, "0/0");
}

#[tokio::test]
async fn pods_carry_ip_node_and_readiness() {
    let fake = FakeApiServer::new();
    let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
    fake.put_pod("edge", "web-a", &labels, "n1", Some("127.0.0.2"), true);
    fake.put_pod("edge", "web-b", &labels, "n2", None, false);
    let api: Api<Pod> = Api::namespaced(fake.client(), "edge");
    let pods = api
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 2);
    let a = api.get("web-a").await.unwrap();
    let status = a.status.clone().unwrap();
    assert_eq!(status.pod_ip.as_deref(), Some("127.0.0.2"));
    assert_eq!(a.spec.unwrap().node_name.as_deref(), Some("n1"));
    assert_eq!(status.conditions.unwrap()[0].status, "True");
    assert!(fake.set_pod_ready("edge", "web-b", true));
    let b = api.get("web-b").await.unwrap();
    assert_eq!(b.status.unwrap().conditions.unwrap()[0].status, "True");
    assert!(!fake.set_pod_ready("edge", "web-z", true));
    // Put again after a delete: a new pod, a new uid.
    let uid = a.metadata.uid.clone();
    assert!(fake.delete(keys::PODS, Some("edge"), "web-a"));
    fake.put_pod("edge", "web-a", &labels, "n1", Some("127.0.0.2"), true);
    assert_ne!(api.get("web-a").await.unwrap().metadata.uid, uid);
}
