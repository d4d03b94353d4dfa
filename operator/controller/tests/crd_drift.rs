//! The committed CRD and the Helm chart's copy must equal what the Rust types generate.
//! Regenerate with:
//! `cargo run -p edgecache-operator -- crd > crds/edgecache.dev_edgecaches.yaml &&
//!  cp crds/edgecache.dev_edgecaches.yaml charts/edgecache/files/`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::path::PathBuf;

use edgecache_operator::crd::{CRD_FILE, crd_yaml};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The checkout under test: cargo sets `CARGO_MANIFEST_DIR` when it runs the test (a binary
/// reused from a shared target directory may have been built in another checkout).
fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../..")
}

#[test]
fn committed_crd_matches_the_rust_types() {
    let want = crd_yaml().unwrap();
    let path = repo_root().join("crds").join(CRD_FILE);
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "{} drifted from the Rust types; regenerate it with \
         `cargo run -p edgecache-operator -- crd > crds/{CRD_FILE}`",
        path.display()
    );
}

#[test]
fn chart_crd_copy_matches() {
    // The chart renders this copy from templates/crds.yaml (so `helm upgrade` updates the CRD).
    let path = repo_root().join("charts/edgecache/files").join(CRD_FILE);
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == crd_yaml().unwrap(),
        "{} drifted; cp crds/{CRD_FILE} charts/edgecache/files/",
        path.display()
    );
}

#[test]
fn crd_names_columns_and_conditions() {
    let text = crd_yaml().unwrap();
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).unwrap();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("edgecaches.edgecache.dev")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["ec".to_string()]));
    assert_eq!(
        crd.spec.names.categories,
        Some(vec!["edgecache".to_string()])
    );
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(
        v.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let cols: Vec<_> = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        cols,
        [
            ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
            ("Nodes", ".status.nodesReady"),
            ("Sharding", ".status.sharding.mode"),
            ("Steering", ".spec.steering.mode"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
    let schema = serde_json::to_value(v.schema.as_ref().unwrap()).unwrap();
    let root = &schema["openAPIV3Schema"]["properties"];
    // Every printer column path exists in the schema.
    assert!(root["status"]["properties"]["nodesReady"].is_object());
    assert!(root["status"]["properties"]["sharding"]["properties"]["mode"].is_object());
    assert!(root["spec"]["properties"]["steering"]["properties"]["mode"].is_object());
    let list_map_keys = |field: &str| {
        let list = &root["status"]["properties"][field];
        assert_eq!(list["x-kubernetes-list-type"], "map", "{field}");
        list["x-kubernetes-list-map-keys"].clone()
    };
    assert_eq!(list_map_keys("conditions"), serde_json::json!(["type"]));
    // Keyed by pod: a node has two pods while one replaces the other.
    assert_eq!(list_map_keys("nodes"), serde_json::json!(["pod"]));
    // YAML 1.1 readers (kubectl) must see the string `off`, not false.
    assert!(
        text.contains("default: 'off'"),
        "steering default must be quoted"
    );
}
