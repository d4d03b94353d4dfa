//! The fake refuses what a real API server refuses: invalid built-in objects (422 with every
//! cause), and EdgeCaches that break their CRD's schema or CEL rules; it applies the schema's
//! defaults, as the real one does.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use edgecache_api::v1alpha1::EdgeCache;
use edgecache_fakeapi::{FakeApiServer, keys};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

fn status(err: kube::Error) -> Box<Status> {
    match err {
        kube::Error::Api(s) => s,
        other => panic!("not an API error: {other}"),
    }
}

/// The causes of a 422, as (reason, field) pairs.
fn causes(s: &Status) -> Vec<(String, String)> {
    assert_eq!(s.code, 422, "{s:?}");
    assert_eq!(s.reason, "Invalid");
    s.details
        .as_ref()
        .expect("a 422 has details")
        .causes
        .iter()
        .map(|c| (c.reason.clone(), c.field.clone()))
        .collect()
}

/// The Status message has `text`.
fn says(s: &Status, text: &str) {
    assert!(s.message.contains(text), "{text:?} in {}", s.message);
}

fn pair(reason: &str, field: &str) -> (String, String) {
    (reason.to_string(), field.to_string())
}

fn daemon_set(v: Value) -> DaemonSet {
    serde_json::from_value(v).unwrap()
}

fn good_ds(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "edge"}},
                "spec": {
                    "containers": [{"name": "dataplane", "image": "edgecache:1",
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
                    "volumes": [{"name": "cache", "emptyDir": {}}]
                }
            }
        }
    })
}

#[tokio::test]
async fn a_valid_daemon_set_is_stored() {
    let fake = FakeApiServer::new();
    let api: Api<DaemonSet> = Api::namespaced(fake.client(), "edge");
    api.create(&PostParams::default(), &daemon_set(good_ds("web")))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_invalid_daemon_set_is_refused_with_every_cause() {
    let fake = FakeApiServer::new();
    let api: Api<DaemonSet> = Api::namespaced(fake.client(), "edge");
    let mut bad = good_ds("Web_1");
    bad["spec"]["selector"]["matchLabels"]["app"] = json!("other");
    bad["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "dataplane", "image": "",
         "ports": [{"name": "http", "containerPort": 0}, {"name": "http", "containerPort": 9090}],
         "volumeMounts": [{"name": "missing", "mountPath": "/x"}]},
        {"name": "dataplane", "image": "sidecar:1"},
        {"name": "Bad_Name", "image": "x:1"}
    ]);
    let err = status(
        api.create(&PostParams::default(), &daemon_set(bad))
            .await
            .unwrap_err(),
    );
    let got = causes(&err);
    let c = "spec.template.spec.containers";
    for want in [
        pair("FieldValueInvalid", "metadata.name"),
        pair("FieldValueInvalid", "spec.template.metadata.labels"),
        pair("FieldValueRequired", &format!("{c}[0].image")),
        pair(
            "FieldValueInvalid",
            &format!("{c}[0].ports[0].containerPort"),
        ),
        pair("FieldValueDuplicate", &format!("{c}[0].ports[1].name")),
        pair(
            "FieldValueNotFound",
            &format!("{c}[0].volumeMounts[0].name"),
        ),
        pair("FieldValueDuplicate", &format!("{c}[1].name")),
        pair("FieldValueInvalid", &format!("{c}[2].name")),
    ] {
        assert!(got.contains(&want), "{want:?} in {got:?}");
    }
    assert_eq!(got.len(), 8, "{got:?}");
    assert!(
        err.message
            .starts_with("DaemonSet.apps \"Web_1\" is invalid: ["),
        "{}",
        err.message
    );
    says(
        &err,
        "spec.template.metadata.labels: Invalid value: {\"app\":\"web\",\"tier\":\"edge\"}: `selector` does not match template `labels`",
    );
    assert!(fake.get(keys::DAEMONSETS, Some("edge"), "Web_1").is_none());

    // Server-side apply is validated the same way, and so is a patch that breaks a stored one.
    api.create(&PostParams::default(), &daemon_set(good_ds("web")))
        .await
        .unwrap();
    let err = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "dataplane"}]}}}}),
            ),
        )
        .await
        .unwrap_err();
    // (A merge patch replaces the list whole: the container has no volumeMounts left.)
    assert_eq!(
        causes(&status(err)),
        [pair(
            "FieldValueRequired",
            "spec.template.spec.containers[0].image"
        )]
    );
    let mut empty = good_ds("empty");
    empty["spec"]["template"]["spec"]["containers"] = json!([]);
    let err = api
        .patch(
            "empty",
            &PatchParams::apply("me"),
            &Patch::Apply(daemon_set(empty)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        causes(&status(err)),
        [pair("FieldValueRequired", "spec.template.spec.containers")]
    );
}

#[tokio::test]
async fn services_need_dns_1035_names_ports_in_range_and_unique_ports() {
    let fake = FakeApiServer::new();
    let api: Api<Service> = Api::namespaced(fake.client(), "edge");
    let svc = |name: &str, ports: Value| -> Service {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name}, "spec": {"selector": {"app": "web"}, "ports": ports}}))
        .unwrap()
    };
    api.create(
        &PostParams::default(),
        &svc(
            "web",
            json!([{"name": "http", "port": 8080, "targetPort": "http"}]),
        ),
    )
    .await
    .unwrap();
    // A dotted name is a valid DNS subdomain (an EdgeCache may have it) but no Service name.
    let err = status(
        api.create(
            &PostParams::default(),
            &svc("web.v2", json!([{"name": "http", "port": 8080}])),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "metadata.name")]);
    assert!(
        err.message.starts_with(
            "Service \"web.v2\" is invalid: metadata.name: Invalid value: \"web.v2\": a DNS-1035 label"
        ),
        "{}",
        err.message
    );
    let err = status(
        api.create(
            &PostParams::default(),
            &svc(
                "api",
                json!([{"name": "http", "port": 70000},
                       {"name": "http", "port": 80, "targetPort": 0},
                       {"port": 80, "protocol": "TCP"}]),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        causes(&err),
        [
            pair("FieldValueInvalid", "spec.ports[0].port"),
            pair("FieldValueDuplicate", "spec.ports[1].name"),
            pair("FieldValueInvalid", "spec.ports[1].targetPort"),
            pair("FieldValueRequired", "spec.ports[2].name"),
            pair("FieldValueDuplicate", "spec.ports[2]"),
        ]
    );
}

#[tokio::test]
async fn config_maps_and_service_accounts_need_valid_names() {
    let fake = FakeApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "edge");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "web-config"}, "data": {"config.yaml": "x", "bad key": "y"}}),
    )
    .unwrap();
    let err = status(cms.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "data")]);
    let sas: Api<ServiceAccount> = Api::namespaced(fake.client(), "edge");
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "-web"}})).unwrap();
    let err = status(sas.create(&PostParams::default(), &sa).await.unwrap_err());
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "metadata.name")]);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "web.v2"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
}

fn edgecaches(fake: &FakeApiServer) -> Api<DynamicObject> {
    assert!(
        fake.install_crd(&serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap())
    );
    Api::namespaced_with(
        fake.client(),
        "edge",
        &kube::api::ApiResource::erase::<EdgeCache>(&()),
    )
}

/// The Status of a refused create of the EdgeCache `web` with `spec`.
async fn refused(api: &Api<DynamicObject>, spec: Value) -> Box<Status> {
    status(
        api.create(&PostParams::default(), &ec(spec))
            .await
            .expect_err("the create is refused"),
    )
}

fn ec(spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "edgecache.dev/v1alpha1", "kind": "EdgeCache",
        "metadata": {"name": "web"}, "spec": spec}),
    )
    .unwrap()
}

#[tokio::test]
async fn edgecaches_get_the_schema_defaults() {
    let fake = FakeApiServer::new();
    let api = edgecaches(&fake);
    api.create(
        &PostParams::default(),
        &ec(json!({"origin": {"url": "http://origin:8080"}})),
    )
    .await
    .unwrap();
    let stored = fake.get(keys::EDGECACHES, Some("edge"), "web").unwrap();
    assert_eq!(
        stored["spec"]["storage"]["hostPath"],
        "/var/cache/edgecache"
    );
    assert_eq!(stored["spec"]["network"]["port"], 8080);
    assert_eq!(stored["spec"]["origin"]["connectTimeout"], "2s");
    assert_eq!(stored["spec"]["steering"]["mode"], "off");
    assert_eq!(stored["spec"]["storage"]["sliceSize"], "4MiB");
    // What the real server stores parses into the Rust type as the Rust defaults would.
    let parsed: EdgeCache = serde_json::from_value(stored).unwrap();
    let plain: EdgeCache = serde_json::from_value(json!({"apiVersion": "edgecache.dev/v1alpha1",
        "kind": "EdgeCache", "metadata": {"name": "web"},
        "spec": {"origin": {"url": "http://origin:8080"}}}))
    .unwrap();
    assert_eq!(parsed.spec, plain.spec);
}

#[tokio::test]
async fn an_edgecache_may_size_its_store_auto() {
    let fake = FakeApiServer::new();
    let api = edgecaches(&fake);
    api.create(
        &PostParams::default(),
        &ec(json!({"origin": {"url": "http://origin:8080"}, "storage": {"size": "auto"}})),
    )
    .await
    .unwrap();
    let stored = fake.get(keys::EDGECACHES, Some("edge"), "web").unwrap();
    let parsed: EdgeCache = serde_json::from_value(stored).unwrap();
    assert_eq!(parsed.spec.storage.size, edgecache_api::DiskSize::Auto);
    let api = edgecaches(&FakeApiServer::new());
    let err = refused(
        &api,
        json!({"origin": {"url": "http://origin:8080"}, "storage": {"size": "Auto"}}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [pair("FieldValueInvalid", "spec.storage.size")]
    );
}

#[tokio::test]
async fn edgecaches_breaking_the_cel_rules_are_refused() {
    let fake = FakeApiServer::new();
    let api = edgecaches(&fake);
    // `queue` steering without the host network: the CEL rule on the spec.
    let err = refused(
        &api,
        json!({"origin": {"url": "http://o:8080"}, "steering": {"mode": "queue"}}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [pair("FieldValueInvalid", "spec.network.hostNetwork")]
    );
    says(
        &err,
        "spec.network.hostNetwork: Invalid value: \"object\": steering.mode queue needs network.hostNetwork: true",
    );
    assert!(fake.get(keys::EDGECACHES, Some("edge"), "web").is_none());
    // The ports must differ, through the defaults (adminPort defaults to 9090).
    let err = refused(
        &api,
        json!({"origin": {"url": "http://o:8080"}, "network": {"port": 9090}}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [pair("FieldValueInvalid", "spec.network.adminPort")]
    );

    // The transition rule: the cache path is immutable on update, by apply or patch.
    let spec = json!({"origin": {"url": "http://o:8080"}, "storage": {"hostPath": "/mnt/a"}});
    api.patch(
        "web",
        &PatchParams::apply("kubectl"),
        &Patch::Apply(ec(spec)),
    )
    .await
    .unwrap();
    let moved = json!({"origin": {"url": "http://o:8080"}, "storage": {"hostPath": "/mnt/b"}});
    let err = status(
        api.patch(
            "web",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(ec(moved)),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        causes(&err),
        [pair("FieldValueInvalid", "spec.storage.hostPath")]
    );
    says(&err, "storage.hostPath is immutable");
    let err = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"storage": {"hostPath": "/mnt/c"}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(status(err).code, 422);
    let stored = fake.get(keys::EDGECACHES, Some("edge"), "web").unwrap();
    assert_eq!(stored["spec"]["storage"]["hostPath"], "/mnt/a");
    // Other changes go through.
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"storage": {"size": "20GiB"}}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn edgecaches_breaking_the_openapi_schema_are_refused() {
    let fake = FakeApiServer::new();
    let api = edgecaches(&fake);
    let err = refused(
        &api,
        json!({"origin": {"url": "ftp://o"},
                       "storage": {"size": "lots", "readsInFlight": 0, "sliceSize": "4 slices"},
                       "network": {"port": "http"},
                       "steering": {"mode": "adq"}}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [
            pair("FieldValueTypeInvalid", "spec.network.port"),
            pair("FieldValueInvalid", "spec.origin.url"),
            pair("FieldValueNotSupported", "spec.steering.mode"),
            pair("FieldValueInvalid", "spec.storage.readsInFlight"),
            pair("FieldValueInvalid", "spec.storage.size"),
            pair("FieldValueInvalid", "spec.storage.sliceSize"),
            // The CEL rules wait for an object of the right shape.
            pair("FieldValueInvalid", "<nil>"),
        ]
    );
    says(
        &err,
        "spec.storage.readsInFlight: Invalid value: 0: spec.storage.readsInFlight in body should be greater than or equal to 1",
    );
    // Neither origin.url nor sites: the origin section is defaulted, and a CEL rule refuses.
    let err = refused(&api, json!({"storage": {}})).await;
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "spec.origin.url")]);
    says(&err, "origin.url or sites is required");
}

#[tokio::test]
async fn an_object_an_older_schema_let_in_still_takes_status_writes() {
    let fake = FakeApiServer::new();
    let api = edgecaches(&fake);
    fake.put_object(
        keys::EDGECACHES,
        Some("edge"),
        json!({"apiVersion": "edgecache.dev/v1alpha1", "kind": "EdgeCache",
            "metadata": {"name": "web"},
            "spec": {"origin": {"url": "http://o"}, "storage": {"size": "lots"}}}),
    );
    api.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"readyNodes": 1}})),
    )
    .await
    .unwrap();
    // A spec change that keeps the old problem and adds none goes through too (ratcheting).
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"log": "debug"}})),
    )
    .await
    .unwrap();
    // One that adds a new problem does not.
    let err = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"log": ""}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        causes(&status(err)),
        [pair("FieldValueInvalid", "spec.log")]
    );
}

fn secret(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

fn secrets(fake: &FakeApiServer) -> Api<DynamicObject> {
    Api::namespaced_with(
        fake.client(),
        "edge",
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    )
}

#[tokio::test]
async fn tls_secrets_need_both_keys_and_keep_their_type() {
    use k8s_openapi::api::core::v1::Secret;
    let fake = FakeApiServer::new();
    let api = secrets(&fake);
    // A kubernetes.io/tls Secret without its keys is refused, each key named as the real
    // server names it.
    let err = status(
        api.create(
            &PostParams::default(),
            &secret(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "web-tls"}, "type": "kubernetes.io/tls",
                "data": {"ca.crt": "Y2E="}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        causes(&err),
        [
            pair("FieldValueRequired", "data[tls.crt]"),
            pair("FieldValueRequired", "data[tls.key]"),
        ]
    );
    says(
        &err,
        "Secret \"web-tls\" is invalid: [data[tls.crt]: Required value, data[tls.key]: Required value]",
    );
    // stringData counts (it is folded into data first), and an empty value passes: the real
    // server only checks that the keys are there.
    let typed: Api<Secret> = Api::namespaced(fake.client(), "edge");
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "web-tls"},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": "CERT", "tls.key": ""}}))
    .unwrap();
    let created = typed.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(created.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(created.data.as_ref().unwrap()["tls.crt"].0, b"CERT");
    // Its type cannot change.
    let err = status(
        typed
            .patch(
                "web-tls",
                &PatchParams::default(),
                &Patch::Merge(json!({"type": "Opaque"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "type")]);
    says(&err, "type: Invalid value: \"Opaque\": field is immutable");
    // Nor can a TLS Secret lose a key.
    let err = status(
        api.patch(
            "web-tls",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "remove", "path": "/data/tls.key"}])).unwrap(),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(causes(&err), [pair("FieldValueRequired", "data[tls.key]")]);
    // A renewal (new data, same keys) goes through.
    typed
        .patch(
            "web-tls",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"tls.crt": "CERT2", "tls.key": "KEY2"}})),
        )
        .await
        .unwrap();
    // A Secret without a type is Opaque, and may hold anything.
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "plain"}, "data": {"x": "eA=="}}))
            .unwrap();
    let created = typed.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    // Listed and watched like any other kind.
    let names: Vec<_> = typed
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.metadata.name.unwrap())
        .collect();
    assert_eq!(names, ["plain", "web-tls"]);
}

#[tokio::test]
async fn immutable_secrets_keep_their_data_and_big_ones_are_refused() {
    use k8s_openapi::api::core::v1::Secret;
    let fake = FakeApiServer::new();
    let typed: Api<Secret> = Api::namespaced(fake.client(), "edge");
    let s: Secret = serde_json::from_value(
        json!({"metadata": {"name": "frozen"}, "immutable": true, "stringData": {"k": "v"}}),
    )
    .unwrap();
    typed.create(&PostParams::default(), &s).await.unwrap();
    let err = status(
        typed
            .patch(
                "frozen",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"k": "w"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(causes(&err), [pair("FieldValueForbidden", "data")]);
    let big: Secret = serde_json::from_value(
        json!({"metadata": {"name": "big"}, "stringData": {"k": "x".repeat(1024 * 1024 + 3)}}),
    )
    .unwrap();
    let err = status(
        typed
            .create(&PostParams::default(), &big)
            .await
            .unwrap_err(),
    );
    assert_eq!(causes(&err), [pair("FieldValueTooLong", "data")]);
}

#[tokio::test]
async fn edgecaches_with_a_bad_tls_spec_are_refused() {
    let fake = FakeApiServer::new();
    let api = edgecaches(&fake);
    let origin = json!({"url": "http://o:8080"});
    // The TLS port must differ from the plain one (8443 by default; 8080 here).
    let err = refused(
        &api,
        json!({"origin": origin, "network": {"port": 8443},
               "tls": {"certificates": [{"secretName": "web-tls"}]}}),
    )
    .await;
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "spec.tls.port")]);
    says(
        &err,
        "tls.port must differ from network.port and network.adminPort",
    );
    // Each Secret once.
    let err = refused(
        &api,
        json!({"origin": origin, "tls": {"certificates": [
            {"secretName": "a"}, {"secretName": "b"}, {"secretName": "a"}]}}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [pair("FieldValueInvalid", "spec.tls.certificates")]
    );
    says(&err, "each Secret may be named once");
    // At least one, and Secret names only.
    let err = refused(&api, json!({"origin": origin, "tls": {"certificates": []}})).await;
    assert_eq!(
        causes(&err),
        [pair("FieldValueInvalid", "spec.tls.certificates")]
    );
    says(&err, "should have at least 1 items");
    let err = refused(
        &api,
        json!({"origin": origin, "tls": {"certificates": [{"secretName": "Web_TLS"}]}}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [pair(
            "FieldValueInvalid",
            "spec.tls.certificates[0].secretName"
        )]
    );
    // The version is a string of the two the data plane knows; the sample is a share.
    let err = refused(
        &api,
        json!({"origin": origin, "tls": {"minVersion": "1.1", "certificates": [{"secretName": "a"}]},
               "accessLog": {"sample": 2}, "http2": {"maxConcurrentStreams": 2000000}}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [
            pair("FieldValueInvalid", "spec.accessLog.sample"),
            pair("FieldValueInvalid", "spec.http2.maxConcurrentStreams"),
            pair("FieldValueNotSupported", "spec.tls.minVersion"),
        ]
    );
    // A good one gets the defaults.
    let created = api
        .create(
            &PostParams::default(),
            &ec(json!({"origin": origin, "tls": {"certificates": [{"secretName": "web-tls"}]}})),
        )
        .await
        .unwrap();
    let spec = &created.data["spec"];
    assert_eq!(spec["tls"]["port"], 8443);
    assert_eq!(spec["tls"]["minVersion"], "1.2");
    assert_eq!(spec["tls"]["redirectHttp"], false);
    assert_eq!(
        spec["http2"],
        json!({"enabled": true, "maxConcurrentStreams": 0, "maxHeaderListSize": "0",
               "streamWindow": "0", "connectionWindow": "0", "keepAliveInterval": "20s",
               "keepAliveTimeout": "10s"})
    );
    assert_eq!(spec["accessLog"], json!({"format": "json"}));
}

#[tokio::test]
async fn edgecaches_with_bad_sites_are_refused() {
    let fake = FakeApiServer::new();
    let api = edgecaches(&fake);
    let site = |hosts: Value, origins: Value| json!({"hosts": hosts, "origins": origins});
    let www = site(
        json!(["www.a.example"]),
        json!(["http://web.shop.svc.cluster.local:8080"]),
    );
    // A hostname named by two sites.
    let err = refused(
        &api,
        json!({"sites": [www, site(json!(["*.img.a.example", "www.a.example"]), json!(["https://img:8443"]))]}),
    )
    .await;
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "spec.sites")]);
    says(&err, "each hostname may be named by one site only");
    // The same hostname twice in one site: a set-list.
    let err = refused(
        &api,
        json!({"sites": [site(json!(["b.example", "b.example"]), json!(["http://b:80"]))]}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [pair("FieldValueDuplicate", "spec.sites[0].hosts[1]")]
    );
    says(
        &err,
        "spec.sites[0].hosts[1]: Duplicate value: \"b.example\"",
    );
    // Two defaults.
    let mut a = www.clone();
    a["default"] = json!(true);
    let mut b = site(json!(["b.example"]), json!(["http://b:80"]));
    b["default"] = json!(true);
    let err = refused(&api, json!({"sites": [a.clone(), b]})).await;
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "spec.sites")]);
    says(&err, "at most one site may be default: true");
    // A default site beside origin.url (the default already).
    let err = refused(&api, json!({"origin": {"url": "http://o"}, "sites": [a]})).await;
    assert_eq!(causes(&err), [pair("FieldValueInvalid", "spec.sites")]);
    says(&err, "beside sites, origin.url is the default site");
    // A path in an origin URL, an upper-case or ported hostname, an empty pool, no hosts.
    let err = refused(
        &api,
        json!({"sites": [
            site(json!(["Www.a.example", "c.example:8080"]), json!(["http://web:8080/shop"])),
            site(json!([]), json!([])),
        ]}),
    )
    .await;
    assert_eq!(
        causes(&err),
        [
            pair("FieldValueInvalid", "spec.sites[0].hosts[0]"),
            pair("FieldValueInvalid", "spec.sites[0].hosts[1]"),
            pair("FieldValueInvalid", "spec.sites[0].origins[0]"),
            pair("FieldValueInvalid", "spec.sites[1].hosts"),
            pair("FieldValueInvalid", "spec.sites[1].origins"),
        ]
    );
    says(&err, "should match '^https?://[^/?#@ ]+/?$'");
    // Two schemes in one pool; a rewrite without its value; retries past 8.
    let mut mixed = site(
        json!(["m.example"]),
        json!(["http://m:80", "https://m:443"]),
    );
    mixed["hostHeader"] = json!("rewrite");
    let err = refused(&api, json!({"sites": [mixed]})).await;
    assert_eq!(
        causes(&err),
        [
            pair("FieldValueInvalid", "spec.sites[0].origins"),
            pair("FieldValueInvalid", "spec.sites[0].hostHeaderValue"),
        ]
    );
    says(&err, "origins must be all http:// or all https://");
    let mut many = www.clone();
    many["retries"] = json!(9);
    let err = refused(&api, json!({"sites": [many]})).await;
    assert_eq!(
        causes(&err),
        [pair("FieldValueInvalid", "spec.sites[0].retries")]
    );

    // A good one, with sites only, gets the defaults (the contract's).
    let mut img = site(
        json!(["*.img.a.example"]),
        json!(["https://img-0:8443", "https://img-1:8443"]),
    );
    img["originTls"] = json!({"caSecret": {"name": "img-ca"}, "serverName": "img.internal"});
    let created = api
        .create(&PostParams::default(), &ec(json!({"sites": [www, img]})))
        .await
        .unwrap();
    let spec = &created.data["spec"];
    assert_eq!(spec["origin"]["connectTimeout"], "2s");
    assert!(spec["origin"].get("url").is_none());
    let s = &spec["sites"][0];
    assert_eq!(s["default"], false);
    assert_eq!(s["balance"], "roundRobin");
    assert_eq!(s["retries"], 1);
    assert_eq!(s["hostHeader"], "preserve");
    assert_eq!(
        s["healthCheck"],
        json!({"interval": "5s", "timeout": "2s", "unhealthyAfter": 3, "healthyAfter": 2})
    );
    assert_eq!(spec["sites"][1]["originTls"]["caSecret"]["key"], "ca.crt");
}
