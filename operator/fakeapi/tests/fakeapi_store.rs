//! The fake API server on its own, through the real `kube::Api`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::collections::BTreeMap;

use edgecache_fakeapi::{FakeApiServer, Fault, keys};
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
    }))
    .unwrap()
}

fn rv(o: &impl kube::Resource) -> u64 {
    o.meta()
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn create_get_list_replace_with_resource_versions() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    let a = api
        .create(&PostParams::default(), &cm("a", &[("k", "1")]))
        .await
        .unwrap();
    assert!(a.metadata.uid.is_some());
    assert!(a.metadata.creation_timestamp.is_some());
    assert_eq!(a.metadata.namespace.as_deref(), Some("ns"));
    let b = api
        .create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    assert!(rv(&b) > rv(&a));
    let err = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
    let list = api.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    assert_eq!(api.get("a").await.unwrap().data, a.data);
    // Replace with the current resourceVersion works; with a stale one it conflicts.
    let mut a2 = a.clone();
    a2.data = Some(BTreeMap::from([("k".into(), "2".into())]));
    let a3 = api.replace("a", &PostParams::default(), &a2).await.unwrap();
    assert!(rv(&a3) > rv(&a));
    let err = api
        .replace("a", &PostParams::default(), &a2)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
    let missing = api.get("zzz").await.unwrap_err();
    assert!(matches!(missing, kube::Error::Api(ref s) if s.code == 404));
}

#[tokio::test]
async fn watch_streams_changes_and_resumes() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    let first = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    // From "0": the current objects first.
    match stream.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("a")),
        e => panic!("{e:?}"),
    }
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .unwrap();
    match stream.next().await.unwrap().unwrap() {
        WatchEvent::Modified(o) => assert_eq!(o.data.unwrap()["x"], "y"),
        e => panic!("{e:?}"),
    }
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(matches!(
        stream.next().await.unwrap().unwrap(),
        WatchEvent::Deleted(_)
    ));

    // Resuming from an old resourceVersion replays what happened since.
    let mut resumed = api
        .watch(&WatchParams::default(), &rv(&first).to_string())
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        resumed.next().await.unwrap().unwrap(),
        WatchEvent::Modified(_)
    ));
    assert!(matches!(
        resumed.next().await.unwrap().unwrap(),
        WatchEvent::Deleted(_)
    ));
}

#[tokio::test]
async fn label_selected_lists() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    let mut labelled = cm("a", &[]);
    labelled.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    api.create(&PostParams::default(), &labelled).await.unwrap();
    api.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    let lp = kube::api::ListParams::default().labels("app=web");
    assert_eq!(api.list(&lp).await.unwrap().items.len(), 1);
    let lp = kube::api::ListParams::default().fields("metadata.name=b");
    assert_eq!(
        api.list(&lp).await.unwrap().items[0]
            .metadata
            .name
            .as_deref(),
        Some("b")
    );
    let other: Api<ConfigMap> = Api::namespaced(fake.client(), "other");
    assert!(
        other
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let all: Api<ConfigMap> = Api::all(fake.client());
    assert_eq!(all.list(&Default::default()).await.unwrap().items.len(), 2);
}

#[tokio::test]
async fn json_patch_with_test_ops() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    api.create(&PostParams::default(), &cm("a", &[("k", "1")]))
        .await
        .unwrap();
    let ok: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "1"},
        {"op": "replace", "path": "/data/k", "value": "2"}
    ]))
    .unwrap();
    let o = api
        .patch("a", &PatchParams::default(), &Patch::<()>::Json(ok))
        .await
        .unwrap();
    assert_eq!(o.data.unwrap()["k"], "2");
    let stale: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "1"},
        {"op": "replace", "path": "/data/k", "value": "3"}
    ]))
    .unwrap();
    let err = api
        .patch("a", &PatchParams::default(), &Patch::<()>::Json(stale))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );
}

#[tokio::test]
async fn server_side_apply_merges_and_prunes_what_its_manager_stopped_applying() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    let a = PatchParams::apply("a").force();
    let body = |labels: serde_json::Value, data: serde_json::Value| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "labels": labels}, "data": data}))
    };
    let first = api
        .patch(
            "x",
            &a,
            &body(json!({"l": "1"}), json!({"k": "1", "j": "1"})),
        )
        .await
        .unwrap();
    assert_eq!(first.metadata.labels.as_ref().unwrap()["l"], "1");
    // The same apply again writes nothing.
    let again = api
        .patch(
            "x",
            &a,
            &body(json!({"l": "1"}), json!({"k": "1", "j": "1"})),
        )
        .await
        .unwrap();
    assert_eq!(rv(&again), rv(&first));
    // Someone else's field stays; one the manager no longer applies goes.
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"other": "1"}})),
    )
    .await
    .unwrap();
    let pruned = api
        .patch("x", &a, &body(json!({}), json!({"k": "2"})))
        .await
        .unwrap();
    assert_eq!(pruned.metadata.labels.unwrap_or_default().len(), 0);
    let data = pruned.data.unwrap();
    assert_eq!(
        data.into_iter().collect::<Vec<_>>(),
        [("k".into(), "2".into()), ("other".into(), "1".into())]
    );
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let fake = FakeApiServer::new();
    let api: Api<DaemonSet> = Api::namespaced(fake.client(), "ns");
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}},
        "status": {"numberReady": 99, "currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0}
    });
    let created = api
        .create(&PostParams::default(), &serde_json::from_value(ds).unwrap())
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.status, None, "status is dropped on create");
    // A label change does not bump the generation; a spec change does.
    let o = api
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(o.metadata.generation, Some(1));
    let o = api
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minReadySeconds": 5}, "status": {"numberReady": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(o.metadata.generation, Some(2));
    // The status in a main-resource write is ignored (the simulator's status stays).
    assert_eq!(o.status.as_ref().map(|s| s.number_ready), Some(0));
    // A status write changes only the status.
    let s = api
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minReadySeconds": 9}, "status": {"numberReady": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(2));
    assert_eq!(s.spec.min_ready_seconds, Some(5));
    assert_eq!(s.status.unwrap().number_ready, 3);
    let last = fake.changes().pop().unwrap();
    assert!(last.status_only);
}

/// DaemonSet `d` (pods labelled `a=b`) on the nodes labelled `edgecache.dev/nvme=true`.
fn nvme_daemon_set() -> DaemonSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
            "nodeSelector": {"edgecache.dev/nvme": "true"},
            "containers": [{"name": "c", "image": "i:1"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn daemonset_status_follows_nodes() {
    let fake = FakeApiServer::new();
    fake.add_node("n1", &[("edgecache.dev/nvme", "true")]);
    fake.add_node("n2", &[]);
    let api: Api<DaemonSet> = Api::namespaced(fake.client(), "ns");
    api.create(&PostParams::default(), &nvme_daemon_set())
        .await
        .unwrap();
    let status = |d: DaemonSet| d.status.unwrap();
    let s = status(api.get("d").await.unwrap());
    assert_eq!((s.desired_number_scheduled, s.number_ready), (1, 1));
    assert_eq!(s.observed_generation, Some(1));
    fake.add_node("n3", &[("edgecache.dev/nvme", "true")]);
    assert_eq!(
        status(api.get("d").await.unwrap()).desired_number_scheduled,
        2
    );
    fake.add_node("n3", &[]);
    assert_eq!(
        status(api.get("d").await.unwrap()).desired_number_scheduled,
        1
    );
    fake.set_pods_ready(false);
    let s = status(api.get("d").await.unwrap());
    assert_eq!(
        (
            s.desired_number_scheduled,
            s.number_ready,
            s.number_unavailable
        ),
        (1, 0, Some(1))
    );
    assert!(fake.delete(keys::NODES, None, "n1"));
    assert_eq!(
        status(api.get("d").await.unwrap()).desired_number_scheduled,
        0
    );
}

#[tokio::test]
async fn the_daemonset_controller_keeps_one_pod_per_fitting_node() {
    use futures_util::StreamExt as _;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{ListParams, WatchEvent, WatchParams};
    let fake = FakeApiServer::new();
    fake.add_node("n1", &[("edgecache.dev/nvme", "true")]);
    fake.add_node("n2", &[("edgecache.dev/nvme", "true")]);
    fake.add_node("n3", &[]);
    let dss: Api<DaemonSet> = Api::namespaced(fake.client(), "ns");
    let ds = dss
        .create(&PostParams::default(), &nvme_daemon_set())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "ns");
    let by_label = ListParams::default().labels("a=b");
    let list = pods.list(&by_label).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["d-n1", "d-n2"], "none on n3, which does not fit");
    let p = &list.items[0];
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("DaemonSet", Some(true))
    );
    assert_eq!(owner.uid, ds.metadata.uid.clone().unwrap());
    let ip1 = p.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let ip2 = list.items[1]
        .status
        .as_ref()
        .unwrap()
        .pod_ip
        .clone()
        .unwrap();
    assert_ne!(ip1, ip2);
    assert!(
        pods.list(&ListParams::default().labels("a=c"))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A kubelet's report: the pod is not ready, and the DaemonSet counts it so.
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut watch = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    fake.set_pod_status(
        "ns",
        "d-n2",
        Some(
            json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "c", "image": "i:1", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull"}}}]}),
        ),
    );
    match watch.next().await.unwrap().unwrap() {
        WatchEvent::Modified(p) => {
            assert_eq!(p.metadata.name.as_deref(), Some("d-n2"));
            let st = p.status.unwrap();
            assert_eq!(st.pod_ip.as_deref(), Some(ip2.as_str()), "the IP stays");
            let waiting = st.container_statuses.unwrap()[0]
                .state
                .clone()
                .unwrap()
                .waiting
                .unwrap();
            assert_eq!(waiting.reason.as_deref(), Some("ErrImagePull"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(dss.get("d").await.unwrap().status.unwrap().number_ready, 1);

    // A pod deleted by hand is made again, with another IP; a node that goes takes its pod.
    pods.delete("d-n1", &Default::default()).await.unwrap();
    let again = pods.get("d-n1").await.unwrap();
    assert_ne!(again.status.unwrap().pod_ip.unwrap(), ip1);
    assert!(fake.delete(keys::NODES, None, "n1"));
    assert!(pods.get_opt("d-n1").await.unwrap().is_none());
    // The DaemonSet's deletion takes the rest (owner references).
    dss.delete("d", &Default::default()).await.unwrap();
    assert!(pods.list(&by_label).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn injected_faults_and_the_request_log() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    fake.inject_fault(Fault {
        method: None,
        path_contains: "/configmaps".into(),
        code: 500,
        times: 1,
    });
    let err = api.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 500),
        "{err}"
    );
    api.list(&Default::default()).await.unwrap();
    api.patch(
        "x",
        &PatchParams::apply("edgecache-operator").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
    )
    .await
    .unwrap();
    let log = fake.requests();
    assert_eq!(log[0].status, 500);
    assert_eq!(log[1].status, 200);
    assert!(
        log[2].uri.contains("fieldManager=edgecache-operator"),
        "{}",
        log[2].uri
    );
    assert!(log[2].uri.contains("force=true"), "{}", log[2].uri);
    assert_eq!(log[2].status, 201);
}

#[tokio::test]
async fn metadata_only_requests_get_the_metadata_alone() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::core::PartialObjectMeta;
    let fake = FakeApiServer::new();
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "web-tls"},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": "C", "tls.key": "K"}}))
    .unwrap();
    Api::<Secret>::namespaced(fake.client(), "ns")
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    let meta: Api<PartialObjectMeta<Secret>> = Api::namespaced(fake.client(), "ns");
    let list = meta.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("web-tls"));
    let mut watch = meta
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match watch.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("web-tls")),
        e => panic!("{e:?}"),
    }
    // On the wire: PartialObjectMetadata, without the Secret's data or type.
    let req = http::Request::get("/api/v1/namespaces/ns/secrets/web-tls")
        .header(
            http::header::ACCEPT,
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap();
    let text = fake.client().request_text(req).await.unwrap();
    let got: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got["kind"], "PartialObjectMetadata", "{text}");
    assert_eq!(got["metadata"]["name"], "web-tls");
    assert!(
        got.get("data").is_none() && got.get("type").is_none(),
        "{text}"
    );
    // Without the header, the whole object.
    let text = fake
        .client()
        .request_text(
            http::Request::get("/api/v1/namespaces/ns/secrets/web-tls")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(text.contains("tls.crt"), "{text}");
}
