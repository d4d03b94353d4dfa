//! The EdgeCachePurge CRD's CEL rules, evaluated offline with kube's `cel` feature (the rules
//! the API server runs at `kubectl apply`), and the schema bounds they rely on.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap
#![cfg(feature = "crd")]

use edgecache_api::purge::EdgeCachePurge;
use kube::core::cel::{validate_cel, validate_cel_update};

fn ecp(spec_yaml: &str) -> EdgeCachePurge {
    let doc = format!(
        "apiVersion: edgecache.dev/v1alpha1\nkind: EdgeCachePurge\nmetadata:\n  name: p\n  namespace: default\nspec:\n  edgeCache: web\n{}",
        spec_yaml
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    yaml_serde::from_str(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"))
}

fn rejects(obj: &EdgeCachePurge, needle: &str) {
    let err = validate_cel(obj).expect_err("expected a CEL rejection");
    let text = format!("{err:?}");
    assert!(text.contains(needle), "wanted {needle:?} in {text}");
}

#[test]
fn exactly_one_selector_kind_passes() {
    validate_cel(&ecp("urls: [\"http://www.example/a.css\"]\n")).unwrap();
    validate_cel(&ecp(
        "prefixes: [\"http://www.example/img/\"]\nsoft: true\n",
    ))
    .unwrap();
    validate_cel(&ecp("tags: [product-42, product-43]\n")).unwrap();
    validate_cel(&ecp("all: true\nsoft: true\n")).unwrap();
}

#[test]
fn two_kinds_or_none_are_rejected() {
    const WANT: &str = "set exactly one of urls, prefixes, tags or all: true";
    rejects(&ecp("urls: [\"http://www.example/a\"]\ntags: [t]\n"), WANT);
    rejects(
        &ecp("prefixes: [\"http://www.example/\"]\nall: true\n"),
        WANT,
    );
    rejects(&ecp("soft: true\n"), WANT);
    rejects(&ecp("all: false\n"), WANT);
}

#[test]
fn the_spec_is_immutable() {
    let old = ecp("tags: [product-42]\n");
    let changed = ecp("tags: [product-43]\n");
    let err = validate_cel_update(&changed, &old).expect_err("a spec change must be refused");
    assert!(format!("{err:?}").contains("spec is immutable"), "{err:?}");
    let softened = ecp("tags: [product-42]\nsoft: true\n");
    assert!(validate_cel_update(&softened, &old).is_err());
    // The same spec (a status write, a label change) passes.
    validate_cel_update(&old.clone(), &old).unwrap();
}

/// The API server estimates a CEL rule's cost from the schema's bounds; the lists and their
/// items carry them, and the column paths exist.
#[test]
fn schema_bounds_and_columns() {
    let crd = serde_json::to_value(edgecache_api::schema::edgecache_purge_crd()).unwrap();
    let v = &crd["spec"]["versions"][0];
    let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["edgeCache"]));
    for list in ["urls", "prefixes", "tags"] {
        let l = &spec["properties"][list];
        assert_eq!(l["maxItems"], 100, "{list}");
        assert_eq!(l["items"]["maxLength"], 8192, "{list}");
        assert_eq!(l["items"]["minLength"], 1, "{list}");
    }
    assert_eq!(spec["properties"]["soft"]["default"], false);
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["ecp"])
    );
    assert_eq!(
        crd["spec"]["names"]["categories"],
        serde_json::json!(["edgecache-all"])
    );
    let status = &v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert!(status["kind"].is_object());
    assert!(status["confirmed"].is_object());
    assert_eq!(status["nodes"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["nodes"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["pod"])
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
}

/// The sample the docs (docs/purging.md) and the chart's notes point to passes the schema's CEL rules.
#[test]
fn the_sample_passes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../controller/examples/edgecachepurge.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let sample: EdgeCachePurge = yaml_serde::from_str(&text).unwrap();
    assert_eq!(sample.spec.edge_cache, "web");
    assert_eq!(sample.spec.tags, ["product-42"]);
    validate_cel(&sample).unwrap();
}
