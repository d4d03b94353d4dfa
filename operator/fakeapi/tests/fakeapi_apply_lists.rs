//! Server-side apply merges list-maps by their keys, per field manager, as the real API server
//! does (the built-in kinds' `x-kubernetes-list-map-keys`): containers, env and volumes by name,
//! container ports by containerPort and protocol, Service ports by port and protocol, owner
//! references by uid. A manager's apply never removes items another manager owns.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::collections::BTreeMap;

use edgecache_fakeapi::{FakeApiServer, keys};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn ds(containers: Value, volumes: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": containers, "volumes": volumes}}
        }
    })
}

async fn apply(api: &Api<DaemonSet>, manager: &str, body: Value) -> Value {
    let out = api
        .patch("web", &PatchParams::apply(manager), &Patch::Apply(body))
        .await
        .unwrap_or_else(|e| panic!("{manager}'s apply: {e}"));
    serde_json::to_value(out).unwrap()
}

fn names(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|i| i[key].to_string().trim_matches('"').to_string())
        .collect()
}

fn pod(ds: &Value) -> &Value {
    &ds["spec"]["template"]["spec"]
}

#[tokio::test]
async fn two_managers_share_containers_env_ports_and_volumes() {
    let fake = FakeApiServer::new();
    let api: Api<DaemonSet> = Api::namespaced(fake.client(), "edge");
    let operator = ds(
        json!([{"name": "dataplane", "image": "edgecache:1",
                "env": [{"name": "RUST_LOG", "value": "info"}],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]),
        json!([{"name": "cache", "emptyDir": {}}]),
    );
    apply(&api, "operator", operator.clone()).await;
    // A mesh injector adds a sidecar, an env var and a port to the operator's container, and a
    // volume; it names only its own items (and the keys of the items it adds to).
    let injector = ds(
        json!([{"name": "dataplane", "env": [{"name": "MESH", "value": "on"}],
                "ports": [{"name": "metrics", "containerPort": 9090}]},
               {"name": "proxy", "image": "mesh:2"}]),
        json!([{"name": "mesh-certs", "emptyDir": {}}]),
    );
    let merged = apply(&api, "injector", injector.clone()).await;
    let p = pod(&merged);
    assert_eq!(names(&p["containers"], "name"), ["dataplane", "proxy"]);
    let dp = &p["containers"][0];
    assert_eq!(dp["image"], "edgecache:1");
    assert_eq!(names(&dp["env"], "name"), ["RUST_LOG", "MESH"]);
    assert_eq!(names(&dp["ports"], "containerPort"), ["8080", "9090"]);
    assert_eq!(names(&p["volumes"], "name"), ["cache", "mesh-certs"]);

    // The operator applies again (a new image, and its env changed): the injector's items stay.
    let mut again = operator.clone();
    again["spec"]["template"]["spec"]["containers"][0]["image"] = json!("edgecache:2");
    again["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "RUST_LOG", "value": "debug"}]);
    let merged = apply(&api, "operator", again).await;
    let p = pod(&merged);
    assert_eq!(names(&p["containers"], "name"), ["dataplane", "proxy"]);
    assert_eq!(p["containers"][0]["image"], "edgecache:2");
    assert_eq!(
        p["containers"][0]["env"],
        json!([{"name": "RUST_LOG", "value": "debug"}, {"name": "MESH", "value": "on"}])
    );
    assert_eq!(names(&p["volumes"], "name"), ["cache", "mesh-certs"]);

    // An item one manager stops applying goes, unless another manager owns part of it.
    let mut fewer = operator.clone();
    fewer["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([]);
    fewer["spec"]["template"]["spec"]["volumes"] = json!([{"name": "tmp", "emptyDir": {}}]);
    let merged = apply(&api, "operator", fewer).await;
    let p = pod(&merged);
    assert_eq!(names(&p["volumes"], "name"), ["mesh-certs", "tmp"]);
    assert_eq!(
        names(&p["containers"][0]["ports"], "containerPort"),
        ["9090"]
    );
    // The injector leaves: its sidecar, env var and volume go; the operator's container stays.
    let merged = apply(&api, "injector", ds(json!([]), json!([]))).await;
    let p = pod(&merged);
    assert_eq!(names(&p["containers"], "name"), ["dataplane"]);
    assert_eq!(names(&p["volumes"], "name"), ["tmp"]);
    assert_eq!(
        p["containers"][0]["env"],
        json!([{"name": "RUST_LOG", "value": "info"}])
    );
    assert!(p["containers"][0].get("ports").is_none(), "{p}");

    // Ownership is per item in managedFields, in the real fieldsV1 shape.
    let stored = fake.get(keys::DAEMONSETS, Some("edge"), "web").unwrap();
    let entry = stored["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "operator")
        .unwrap()
        .clone();
    let item = &entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"dataplane\"}"];
    assert!(item["."].is_object(), "{entry}");
    assert!(item["f:image"].is_object(), "{entry}");
}

#[tokio::test]
async fn a_conflict_is_per_field_of_an_item_not_per_list() {
    let fake = FakeApiServer::new();
    let api: Api<DaemonSet> = Api::namespaced(fake.client(), "edge");
    apply(
        &api,
        "operator",
        ds(
            json!([{"name": "dataplane", "image": "edgecache:1"}]),
            json!([]),
        ),
    )
    .await;
    // Another manager setting the same container's image to another value conflicts...
    let err = api
        .patch(
            "web",
            &PatchParams::apply("other"),
            &Patch::Apply(ds(
                json!([{"name": "dataplane", "image": "evil:1"}]),
                json!([]),
            )),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 409);
    assert!(
        s.message
            .contains(".spec.template.spec.containers.k:{\"name\":\"dataplane\"}.image"),
        "{}",
        s.message
    );
    // ...its own field in the same container does not.
    apply(
        &api,
        "other",
        ds(
            json!([{"name": "dataplane", "imagePullPolicy": "Always"}]),
            json!([]),
        ),
    )
    .await;
}

#[tokio::test]
async fn service_ports_are_keyed_by_port_and_protocol() {
    let fake = FakeApiServer::new();
    let api: Api<Service> = Api::namespaced(fake.client(), "edge");
    let svc = |ports: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns"},
               "spec": {"selector": {"app": "dns"}, "ports": ports}})
    };
    api.patch(
        "dns",
        &PatchParams::apply("a"),
        &Patch::Apply(svc(
            json!([{"name": "dns-tcp", "port": 53, "protocol": "TCP"}]),
        )),
    )
    .await
    .unwrap();
    // The same port number over UDP is another item; no protocol means TCP, the same item.
    let out = api
        .patch(
            "dns",
            &PatchParams::apply("b"),
            &Patch::Apply(svc(
                json!([{"name": "dns-udp", "port": 53, "protocol": "UDP"},
                                     {"port": 53, "appProtocol": "dns"}]),
            )),
        )
        .await
        .unwrap();
    let ports = serde_json::to_value(out.spec.unwrap().ports.unwrap()).unwrap();
    assert_eq!(
        ports,
        json!([{"name": "dns-udp", "port": 53, "protocol": "UDP"},
               {"name": "dns-tcp", "port": 53, "protocol": "TCP", "appProtocol": "dns"}])
    );
}

#[tokio::test]
async fn owner_references_are_merged_by_uid() {
    let fake = FakeApiServer::new();
    let api: Api<DaemonSet> = Api::namespaced(fake.client(), "edge");
    // The owners exist (the garbage collector deletes an object whose owners are all gone).
    let owners: Api<ConfigMap> = Api::namespaced(fake.client(), "edge");
    let mut uid = BTreeMap::new();
    for name in ["a", "b"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let made = owners.create(&PostParams::default(), &cm).await.unwrap();
        uid.insert(name, made.metadata.uid.unwrap());
    }
    let with_owner = |owner: &str, controller: bool| {
        let uid = &uid[owner];
        let mut d = ds(json!([{"name": "c", "image": "i:1"}]), json!([]));
        d["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": owner, "uid": uid, "controller": controller}]);
        d
    };
    apply(&api, "a", with_owner("a", true)).await;
    let out = apply(&api, "b", with_owner("b", false)).await;
    assert_eq!(
        names(&out["metadata"]["ownerReferences"], "name"),
        ["a", "b"]
    );
    // b drops its reference: a's stays.
    let mut d = ds(json!([{"name": "c", "image": "i:1"}]), json!([]));
    d["metadata"]["ownerReferences"] = json!([]);
    let out = apply(&api, "b", d).await;
    assert_eq!(names(&out["metadata"]["ownerReferences"], "name"), ["a"]);
}
