//! The CRD's CEL rules and schema patterns, evaluated offline with kube's `cel` feature (the
//! same rules the API server runs at `kubectl apply`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap
#![cfg(feature = "crd")]

use edgecache_api::v1alpha1::EdgeCache;
use kube::core::cel::{validate_cel, validate_cel_update};

fn ec(spec_yaml: &str) -> EdgeCache {
    let doc = format!(
        "apiVersion: edgecache.dev/v1alpha1\nkind: EdgeCache\nmetadata:\n  name: web\n  namespace: default\nspec:\n{}",
        spec_yaml
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    yaml_serde::from_str(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"))
}

const MINIMAL: &str = "origin:\n  url: http://origin.default.svc:8080\n";

fn rejects(obj: &EdgeCache, needle: &str) {
    let err = validate_cel(obj).expect_err("expected a CEL rejection");
    let text = format!("{err:?}");
    assert!(text.contains(needle), "wanted {needle:?} in {text}");
}

#[test]
fn minimal_object_passes() {
    validate_cel(&ec(MINIMAL)).unwrap();
}

#[test]
fn full_valid_object_passes() {
    let obj = ec(&format!(
        "{MINIMAL}steering:\n  mode: queue\n  required: true\nnetwork:\n  hostNetwork: true\n  port: 80\n  adminPort: 9901\nsecurity:\n  mode: capabilities\n  seccompLocalhostProfile: edgecache/io-uring.json\n"
    ));
    validate_cel(&obj).unwrap();
    let obj = ec(&format!(
        "{MINIMAL}  hostHeader: rewrite\n  hostHeaderValue: www.example.com\n"
    ));
    validate_cel(&obj).unwrap();
}

#[test]
fn queue_steering_needs_host_network() {
    rejects(
        &ec(&format!("{MINIMAL}steering:\n  mode: queue\n")),
        "needs network.hostNetwork",
    );
}

#[test]
fn rewrite_host_header_needs_a_value_and_only_then() {
    rejects(
        &ec(&format!("{MINIMAL}  hostHeader: rewrite\n")),
        "hostHeaderValue is required",
    );
    rejects(
        &ec(&format!("{MINIMAL}  hostHeaderValue: www.example.com\n")),
        "hostHeaderValue is required",
    );
}

#[test]
fn ports_must_differ() {
    rejects(
        &ec(&format!("{MINIMAL}network:\n  port: 9090\n")),
        "must differ",
    );
}

#[test]
fn seccomp_profile_only_with_capabilities() {
    rejects(
        &ec(&format!(
            "{MINIMAL}security:\n  seccompLocalhostProfile: edgecache/io-uring.json\n"
        )),
        "applies only to security.mode capabilities",
    );
}

#[test]
fn required_steering_needs_a_mode() {
    rejects(
        &ec(&format!("{MINIMAL}steering:\n  required: true\n")),
        "needs a steering.mode other than off",
    );
}

/// kube-cel evaluates `x-kubernetes-validations` only; patterns and bounds are the API server's
/// OpenAPI validation, so here the schema is checked to carry them.
#[test]
fn schema_carries_patterns_bounds_and_enums() {
    let crd = serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(
        spec["origin"]["properties"]["url"]["pattern"],
        r"^https?://[^/?#@ ]+/?$"
    );
    assert_eq!(
        spec["storage"]["properties"]["hostPath"]["pattern"],
        r"^/[^\x00]*$"
    );
    assert!(spec["storage"]["properties"]["size"]["pattern"].is_string());
    assert!(spec["resources"]["properties"]["cpu"]["pattern"].is_string());
    assert_eq!(
        spec["steering"]["properties"]["queueOffset"]["maximum"],
        1.0
    );
    assert_eq!(spec["network"]["properties"]["port"]["minimum"], 1.0);
    assert_eq!(spec["network"]["properties"]["port"]["maximum"], 65535.0);
    assert_eq!(
        spec["steering"]["properties"]["mode"]["enum"],
        serde_json::json!(["queue", "cpu", "hash", "incoming-cpu", "off"])
    );
    assert_eq!(
        spec["security"]["properties"]["mode"]["enum"],
        serde_json::json!(["privileged", "capabilities"])
    );
    assert_eq!(
        spec["network"]["properties"]["internalTrafficPolicy"]["enum"],
        serde_json::json!(["Cluster", "Local"])
    );
    assert_eq!(
        spec["storage"]["properties"]["ioEngine"]["enum"],
        serde_json::json!(["auto", "uring", "threads"])
    );
    assert_eq!(
        spec["storage"]["properties"]["hostPath"]["default"],
        "/var/cache/edgecache"
    );
    assert_eq!(spec["resources"]["properties"]["memory"]["default"], "2GiB");
}

#[test]
fn cache_path_is_immutable() {
    let old = ec(&format!(
        "{MINIMAL}storage:\n  hostPath: /mnt/nvme0/edgecache\n"
    ));
    let moved = ec(&format!(
        "{MINIMAL}storage:\n  hostPath: /mnt/nvme1/edgecache\n"
    ));
    let err = validate_cel_update(&moved, &old).expect_err("moving the cache must be refused");
    assert!(
        format!("{err:?}").contains("storage.hostPath is immutable"),
        "{err:?}"
    );
    // Other fields may change.
    let resized = ec(&format!(
        "{MINIMAL}storage:\n  hostPath: /mnt/nvme0/edgecache\n  size: 20GiB\n"
    ));
    validate_cel_update(&resized, &old).unwrap();
    // On create the transition rule does not apply.
    validate_cel(&moved).unwrap();
}

#[test]
fn sharding_knobs_only_when_sharding_is_on() {
    validate_cel(&ec(&format!(
        "{MINIMAL}sharding:\n  popularityThreshold: 2\n  peerTimeout: 2s\n"
    )))
    .unwrap();
    validate_cel(&ec(&format!(
        "{MINIMAL}sharding:\n  mode: consistent\n  popularityWindow: 30s\n"
    )))
    .unwrap();
    validate_cel(&ec(&format!("{MINIMAL}sharding:\n  mode: off\n"))).unwrap();
    rejects(
        &ec(&format!(
            "{MINIMAL}sharding:\n  mode: off\n  popularityThreshold: 2\n"
        )),
        "apply only when sharding.mode is not off",
    );
}

#[test]
fn the_tls_port_must_differ_and_each_secret_is_named_once() {
    let certs = "  certificates:\n  - secretName: web-tls\n";
    validate_cel(&ec(&format!("{MINIMAL}tls:\n{certs}"))).unwrap();
    rejects(
        &ec(&format!("{MINIMAL}tls:\n  port: 9090\n{certs}")),
        "tls.port must differ from network.port and network.adminPort",
    );
    rejects(
        &ec(&format!("{MINIMAL}network:\n  port: 8443\ntls:\n{certs}")),
        "tls.port must differ",
    );
    rejects(
        &ec(&format!(
            "{MINIMAL}tls:\n  certificates:\n  - secretName: a\n  - secretName: b\n  - secretName: a\n"
        )),
        "each Secret may be named once",
    );
}

/// An EdgeCache of `sites_yaml` (a `sites:` list) alone, with no origin URL.
fn sites_ec(sites_yaml: &str) -> EdgeCache {
    ec(&format!("sites:\n{sites_yaml}"))
}

const WWW: &str = "- hosts: [www.a.example]\n  origins: [http://web.shop.svc.cluster.local:8080]\n";

#[test]
fn sites_alone_pass_and_origin_url_becomes_optional() {
    validate_cel(&sites_ec(&format!(
        "{WWW}- hosts: ['*.img.a.example']\n  default: true\n  origins: [https://img:8443]\n  originTls: {{caSecret: {{name: img-ca}}}}\n"
    )))
    .unwrap();
    validate_cel(&ec(&format!("{MINIMAL}sites:\n{WWW}"))).unwrap();
}

#[test]
fn neither_origin_url_nor_sites_is_refused() {
    rejects(&ec("log: info\n"), "origin.url or sites is required");
    rejects(&ec("sites: []\n"), "origin.url or sites is required");
}

#[test]
fn a_hostname_is_named_by_one_site_only() {
    rejects(
        &sites_ec(&format!(
            "{WWW}- hosts: [b.a.example, www.a.example]\n  origins: [http://b]\n"
        )),
        "each hostname may be named by one site only",
    );
}

#[test]
fn at_most_one_default_site_and_none_beside_origin_url() {
    let default = "- hosts: [b.a.example]\n  default: true\n  origins: [http://b]\n";
    let other = "- hosts: [c.a.example]\n  default: true\n  origins: [http://c]\n";
    rejects(
        &sites_ec(&format!("{default}{other}")),
        "at most one site may be default: true",
    );
    rejects(
        &ec(&format!("{MINIMAL}sites:\n{default}")),
        "no site may be default: true",
    );
}

#[test]
fn a_site_has_one_scheme_and_a_rewrite_needs_its_value() {
    rejects(
        &sites_ec("- hosts: [a.example]\n  origins: [http://a, https://b]\n"),
        "origins must be all http:// or all https://",
    );
    rejects(
        &sites_ec("- hosts: [a.example]\n  origins: [http://a]\n  hostHeader: rewrite\n"),
        "hostHeaderValue is required when hostHeader is rewrite",
    );
    validate_cel(&sites_ec(
        "- hosts: [a.example]\n  origins: [http://a]\n  hostHeader: rewrite\n  hostHeaderValue: www.a.example\n",
    ))
    .unwrap();
}

#[test]
fn a_ca_secret_key_is_a_secret_key() {
    rejects(
        &sites_ec(
            "- hosts: [a.example]\n  origins: [https://a]\n  originTls: {caSecret: {name: ca, key: ..data}}\n",
        ),
        "must be a Secret key",
    );
}

/// Defect 10 of issue 35: the CRD said `maxUnavailable` was nullable, so the API server stored
/// `maxUnavailable: null`, which the Rust type could not read (InvalidObject). Now the schema is
/// not nullable (the server drops a null and applies the default, 1), and a null already stored
/// reads as that default.
#[test]
fn max_unavailable_null_is_the_default() {
    let obj = ec(&format!(
        "{MINIMAL}updateStrategy:\n  maxUnavailable: null\n"
    ));
    assert_eq!(
        obj.spec.update_strategy.max_unavailable,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)
    );
    let crd = serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap();
    let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["updateStrategy"]["properties"]["maxUnavailable"];
    assert_eq!(field["default"], 1, "{field}");
    assert_ne!(field["nullable"], true, "{field}");
}

/// Defect 4 of issue 35: the CRD refuses the names the children cannot take (the same rule
/// `edgecache_api::v1alpha1::name_problem` applies, which the operator's validate uses).
#[test]
fn the_crd_refuses_names_the_children_cannot_take() {
    let named = |name: &str| {
        let mut obj = ec(MINIMAL);
        obj.metadata.name = Some(name.to_string());
        obj
    };
    let long = format!("a{}", "b".repeat(63));
    for name in ["web", "a", "web-2", &long[..63]] {
        validate_cel(&named(name)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(edgecache_api::v1alpha1::name_problem(name), None, "{name}");
    }
    for (name, needle) in [
        ("default", "ServiceAccount"),
        ("2web", "DNS-1035"),
        ("web.example", "DNS-1035"),
        ("web-", "DNS-1035"),
        (&long[..], "DNS-1035"),
    ] {
        rejects(&named(name), needle);
        assert!(
            edgecache_api::v1alpha1::name_problem(name).is_some(),
            "{name}"
        );
    }
}

/// The CRD's schema defaults are the Rust type's: what the API server stores for a minimal
/// EdgeCache (its defaults applied) parses into the spec the Rust defaults give.
#[test]
fn the_schema_defaults_are_the_rust_defaults() {
    let crd = serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let minimal = serde_json::json!({"apiVersion": "edgecache.dev/v1alpha1", "kind": "EdgeCache",
        "metadata": {"name": "web"}, "spec": {"origin": {"url": "http://origin:8080"}}});
    let stored = kube::core::cel::apply_defaults(schema, &minimal);
    assert_eq!(stored["spec"]["network"]["port"], 8080, "{stored}");
    assert_eq!(stored["spec"]["storage"]["sliceSize"], "4MiB", "{stored}");
    let stored: EdgeCache = serde_json::from_value(stored).unwrap();
    let plain: EdgeCache = serde_json::from_value(minimal).unwrap();
    assert_eq!(stored.spec, plain.spec);
}
