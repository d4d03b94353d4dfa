//! `render` on the sample manifest: every document parses into its Kubernetes type, and the
//! DaemonSet is one a reviewer would accept.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use edgecache_operator::render::render;
use edgecache_operator::validate::Policy;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use serde::Deserialize;

const SAMPLE: &str = include_str!("../examples/edgecache.yaml");

fn docs() -> Vec<yaml_serde::Value> {
    let text = render(SAMPLE, &Policy::default()).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| yaml_serde::Value::deserialize(d).unwrap())
        .collect()
}

#[test]
fn sample_renders_five_objects_in_apply_order() {
    let docs = docs();
    let kinds: Vec<_> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ConfigMap",
            "ConfigMap",
            "Service",
            "DaemonSet"
        ]
    );
    let _: ServiceAccount = yaml_serde::from_value(docs[0].clone()).unwrap();
    let cm: ConfigMap = yaml_serde::from_value(docs[1].clone()).unwrap();
    // Sharding is on by default: the peer list (empty offline: there are no pods) comes before
    // the pods that mount it.
    let peers: ConfigMap = yaml_serde::from_value(docs[2].clone()).unwrap();
    assert_eq!(peers.metadata.name.as_deref(), Some("web-peers"));
    assert!(peers.data.unwrap().contains_key("peers"));
    let _: Service = yaml_serde::from_value(docs[3].clone()).unwrap();
    let ds: DaemonSet = yaml_serde::from_value(docs[4].clone()).unwrap();

    // The config is one the data plane accepts, with the sample's values.
    let cfg =
        edgecache_operator::validate::parse_as_pod(&cm.data.unwrap()["config.yaml"], "node-a")
            .unwrap();
    assert_eq!(cfg.origin.url, "http://origin.edge.svc.cluster.local:8080");
    assert_eq!(cfg.memory.limit, Some(edgecache_api::ByteSize::gib(8)));
    assert_eq!(cfg.workers.steering, edgecache_api::SteeringMode::Cpu);

    assert_eq!(ds.metadata.namespace.as_deref(), Some("edge"));
    assert_eq!(
        ds.metadata.owner_references, None,
        "offline: no uid to own by"
    );
    let pod = ds.spec.template.spec.unwrap();
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref().unwrap(),
        ["ALL"]
    );
    assert_eq!(
        c.resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"].0,
        "8Gi"
    );
    assert!(c.readiness_probe.is_some() && c.liveness_probe.is_some());
    let cache = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "cache")
        .unwrap();
    assert_eq!(cache.host_path.unwrap().path, "/mnt/nvme0/edgecache");
}

#[test]
fn render_refuses_other_kinds_and_invalid_specs() {
    let err = render(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
        &Policy::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("not an edgecache.dev/v1alpha1 EdgeCache"),
        "{err}"
    );
    let bad = SAMPLE.replace("size: 200GiB", "size: 1MiB");
    let err = render(&bad, &Policy::default()).unwrap_err();
    assert!(err.to_string().contains("spec.storage.size"), "{err}");
}

#[test]
fn the_sample_passes_the_crd_rules() {
    let ec: edgecache_api::v1alpha1::EdgeCache = yaml_serde::from_str(SAMPLE).unwrap();
    kube::core::cel::validate_cel(&ec).unwrap();
}

#[test]
fn several_edgecaches_in_one_stream() {
    let two = format!(
        "{SAMPLE}\n---\n{}",
        SAMPLE.replace("name: web", "name: api")
    );
    let text = render(&two, &Policy::default()).unwrap();
    assert_eq!(text.matches("kind: DaemonSet").count(), 2);
    assert!(text.contains("name: api-config"));
    assert!(render("", &Policy::default()).is_err());
}

#[test]
fn every_mistake_is_reported_once_in_the_users_words() {
    let bad = SAMPLE
        .replace(
            "hostPath: /mnt/nvme0/edgecache",
            "hostpath: /mnt/nvme0/edgecache",
        )
        .replace("memory: 8Gi", "memroy: 8Gi")
        .replace("size: 200GiB", "size: 1MiB")
        .replace("mode: cpu", "mode: fast")
        .replace("maxUnavailable: 10%", "maxUnavailable: [1]")
        .replace("port: 8080", "port: eighty");
    let bad = format!("{bad}  extra: 1\n");
    let err = render(&bad, &Policy::default()).unwrap_err().to_string();
    for (path, words) in [
        ("spec.storage.hostpath", "unknown field"),
        ("spec.resources.memroy", "unknown field"),
        ("spec.extra", "unknown field"),
        ("spec.storage.size", "must be at least 64MiB (got 1MiB)"),
        ("spec.steering.mode", "must be one of"),
        (
            "spec.updateStrategy.maxUnavailable",
            "must be an integer or a string",
        ),
        ("spec.network.port", "must be an integer (got \"eighty\")"),
    ] {
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("{path}:")))
            .collect();
        assert_eq!(lines.len(), 1, "{path} reported once in:\n{err}");
        assert!(lines[0].contains(words), "{path}: {words:?} in:\n{err}");
    }
    assert!(!err.contains("did not match any variant"), "{err}");
    assert!(!err.contains("untagged"), "{err}");
}

#[test]
fn an_unknown_field_alone_fails_the_render() {
    let bad = SAMPLE.replace("directIoThreshold: 64KiB", "directIOThreshold: 64KiB");
    let err = render(&bad, &Policy::default()).unwrap_err().to_string();
    assert!(
        err.contains("spec.storage.directIOThreshold: unknown field"),
        "{err}"
    );
}

/// The least Kubernetes minor version (1.x) the chart's `kubeVersion` admits.
fn chart_min_minor() -> u32 {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/edgecache/Chart.yaml"
    );
    let chart: yaml_serde::Value =
        yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let constraint = chart["kubeVersion"]
        .as_str()
        .expect("Chart.yaml has a kubeVersion");
    let version = constraint
        .strip_prefix(">=")
        .unwrap_or_else(|| panic!("a lower bound, like >=1.30.0-0: {constraint}"));
    let minor = version.split('.').nth(1).unwrap();
    minor.parse().unwrap()
}

/// Kubernetes features the rendered pods use, with the minor version that serves them by
/// default (the feature gate's beta, on by default).
fn features_used(pod: &k8s_openapi::api::core::v1::PodSpec) -> Vec<(&'static str, u32)> {
    let mut out = Vec::new();
    for c in &pod.containers {
        let lifecycle = c.lifecycle.as_ref();
        let hooks = lifecycle
            .into_iter()
            .flat_map(|l| [&l.pre_stop, &l.post_start]);
        if hooks.flatten().any(|h| h.sleep.is_some()) {
            // PodLifecycleSleepAction: alpha in 1.29, beta and on by default in 1.30.
            out.push(("a sleep lifecycle hook", 30));
        }
    }
    out
}

#[test]
fn the_chart_admits_no_kubernetes_older_than_the_pods_need() {
    let ds: DaemonSet = yaml_serde::from_value(docs()[4].clone()).unwrap();
    let pod = ds.spec.template.spec.unwrap();
    let min = chart_min_minor();
    for (feature, needs) in features_used(&pod) {
        assert!(
            min >= needs,
            "the pods use {feature}, served from Kubernetes 1.{needs}, but charts/edgecache/Chart.yaml admits 1.{min}"
        );
    }
}

/// The rendered documents of `text`, by kind (the first of each).
fn kinds(text: &str) -> impl Fn(&str) -> yaml_serde::Value {
    let docs: Vec<yaml_serde::Value> = yaml_serde::Deserializer::from_str(text)
        .map(|d| yaml_serde::Value::deserialize(d).unwrap())
        .collect();
    move |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
            .clone()
    }
}

/// The config a pod reads from the rendered ConfigMap.
fn pod_config(of: &impl Fn(&str) -> yaml_serde::Value) -> edgecache_api::DataplaneConfig {
    let cm: ConfigMap = yaml_serde::from_value(of("ConfigMap")).unwrap();
    edgecache_operator::validate::parse_as_pod(&cm.data.unwrap()["config.yaml"], "node-a").unwrap()
}

const TLS_SAMPLE: &str = include_str!("../examples/edgecache-tls.yaml");

#[test]
fn the_tls_sample_renders_its_listener_secrets_and_ports() {
    let ec: edgecache_api::v1alpha1::EdgeCache = yaml_serde::from_str(TLS_SAMPLE).unwrap();
    kube::core::cel::validate_cel(&ec).unwrap();
    let text = render(TLS_SAMPLE, &Policy::default()).unwrap();
    for secret in ["web-tls", "static-web-tls"] {
        assert!(
            text.contains(&format!(
                "# Secret {secret} (type kubernetes.io/tls, keys tls.crt and tls.key) must exist in namespace edge"
            )),
            "{text}"
        );
    }
    let of = kinds(&text);
    let cfg = pod_config(&of);
    assert_eq!(cfg.tls.listen.unwrap().to_string(), "0.0.0.0:8443");
    assert_eq!(
        cfg.tls.certificates[0].cert,
        "/etc/edgecache-tls/web-tls/tls.crt"
    );
    assert_eq!(
        cfg.tls.certificates[1].key,
        "/etc/edgecache-tls/static-web-tls/tls.key"
    );
    assert!(cfg.tls.redirect_http);
    assert_eq!(cfg.access_log.sample, 0.1);
    assert_eq!(cfg.http2.max_concurrent_streams, 0);

    let svc: Service = yaml_serde::from_value(of("Service")).unwrap();
    let ports: Vec<_> = svc
        .spec
        .unwrap()
        .ports
        .unwrap()
        .into_iter()
        .map(|p| (p.name.unwrap(), p.port))
        .collect();
    assert_eq!(
        ports,
        [("http".to_string(), 8080), ("https".to_string(), 8443)]
    );
    let ds: DaemonSet = yaml_serde::from_value(of("DaemonSet")).unwrap();
    let pod = ds.spec.template.spec.unwrap();
    let mounts = pod.containers[0].volume_mounts.clone().unwrap();
    let tls: Vec<_> = mounts
        .iter()
        .filter(|m| m.name.starts_with("tls-"))
        .map(|m| (m.mount_path.as_str(), m.sub_path.is_none()))
        .collect();
    assert_eq!(
        tls,
        [
            ("/etc/edgecache-tls/web-tls", true),
            ("/etc/edgecache-tls/static-web-tls", true)
        ]
    );
    // The plain sample has none of it.
    let plain = render(SAMPLE, &Policy::default()).unwrap();
    assert!(!plain.contains("https"), "{plain}");
    assert!(!plain.contains("edgecache-tls"), "{plain}");
}

const SITES_SAMPLE: &str = include_str!("../examples/edgecache-sites.yaml");

#[test]
fn the_sites_sample_renders_its_sites_and_mounts_the_origin_ca_secret() {
    let ec: edgecache_api::v1alpha1::EdgeCache = yaml_serde::from_str(SITES_SAMPLE).unwrap();
    kube::core::cel::validate_cel(&ec).unwrap();
    let text = render(SITES_SAMPLE, &Policy::default()).unwrap();
    for note in [
        "# Secret shop-tls (type kubernetes.io/tls, keys tls.crt and tls.key) must exist in namespace edge",
        "# Secret img-origin-ca (any type, holding the PEM CA bundle the sites name) must exist in namespace edge: the pods mount it at /etc/edgecache-origin-ca/img-origin-ca/",
    ] {
        assert!(text.contains(note), "{note} in {text}");
    }
    let of = kinds(&text);
    let cfg = pod_config(&of);
    assert_eq!(cfg.origin.url, "");
    assert_eq!(cfg.sites.len(), 2);
    let (www, img) = (&cfg.sites[0], &cfg.sites[1]);
    assert_eq!(www.origins, ["http://web.shop.svc.cluster.local:8080"]);
    assert_eq!(www.health_check.path.as_deref(), Some("/healthz"));
    assert_eq!(www.cache.drop_query, ["utm_*", "fbclid"]);
    assert_eq!(img.hosts, ["*.img.shop.example"]);
    assert_eq!(
        img.origin_tls.ca_file.as_deref(),
        Some("/etc/edgecache-origin-ca/img-origin-ca/ca.crt")
    );
    assert!(img.origin_http2);
    assert_eq!(cfg.tls.certificates.len(), 1);

    let ds: DaemonSet = yaml_serde::from_value(of("DaemonSet")).unwrap();
    let pod = ds.spec.template.spec.unwrap();
    let secrets: Vec<(String, String)> = (pod.volumes.iter().flatten())
        .filter_map(|v| Some((v.name.clone(), v.secret.as_ref()?.secret_name.clone()?)))
        .collect();
    assert_eq!(
        secrets,
        [
            ("admin-token".to_string(), "shop-admin-token".to_string()),
            ("tls-0".to_string(), "shop-tls".to_string()),
            ("origin-ca-0".to_string(), "img-origin-ca".to_string()),
        ]
    );
    let mount = (pod.containers[0].volume_mounts.iter().flatten())
        .find(|m| m.name == "origin-ca-0")
        .unwrap();
    assert_eq!(mount.mount_path, "/etc/edgecache-origin-ca/img-origin-ca");
    assert_eq!(mount.read_only, Some(true));
    assert!(mount.sub_path.is_none());
}
