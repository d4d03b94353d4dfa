//! The committed CRDs and the Helm chart's copies must equal what the Rust types generate.
//! Regenerate with:
//! `cargo run -p edgecache-operator -- crd edgecaches > crds/edgecache.dev_edgecaches.yaml &&
//!  cargo run -p edgecache-operator -- crd edgecachepurges > crds/edgecache.dev_edgecachepurges.yaml &&
//!  cp crds/edgecache.dev_*.yaml charts/edgecache/files/`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::path::PathBuf;

use edgecache_operator::crd::{CRDS, crd_yaml, crd_yaml_of};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// The checkout under test: cargo sets `CARGO_MANIFEST_DIR` when it runs the test (a binary
/// reused from a shared target directory may have been built in another checkout).
fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../..")
}

#[test]
fn committed_crds_match_the_rust_types() {
    for (plural, file) in CRDS {
        let want = crd_yaml_of(plural).unwrap();
        let path = repo_root().join("crds").join(file);
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            got == want,
            "{} drifted from the Rust types; regenerate it with \
             `cargo run -p edgecache-operator -- crd {plural} > crds/{file}`",
            path.display()
        );
    }
}

#[test]
fn chart_crd_copies_match() {
    for (plural, file) in CRDS {
        // The chart renders these copies from templates/crds.yaml (so `helm upgrade` updates
        // the CRDs).
        let path = repo_root().join("charts/edgecache/files").join(file);
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            got == crd_yaml_of(plural).unwrap(),
            "{} drifted; cp crds/{file} charts/edgecache/files/",
            path.display()
        );
    }
}

#[test]
fn crd_yaml_is_the_edgecache_crd() {
    assert_eq!(crd_yaml_of("edgecaches").unwrap(), crd_yaml().unwrap());
    assert!(crd_yaml_of("edgecache").is_err());
}

/// Issue 35: `edgecache-operator crd` printed the EdgeCache CRD alone; users pipe it into
/// `kubectl apply -f -`, so by default it prints every CRD, one YAML stream.
#[test]
fn the_crd_subcommand_prints_every_crd_by_default() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_edgecache-operator"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<String> = yaml_serde::Deserializer::from_str(&text)
        .map(|doc| {
            let crd = <CustomResourceDefinition as serde::Deserialize>::deserialize(doc).unwrap();
            crd.metadata.name.unwrap()
        })
        .collect();
    assert_eq!(
        names,
        ["edgecaches.edgecache.dev", "edgecachepurges.edgecache.dev"]
    );
    for (plural, _) in CRDS {
        assert!(text.contains(&crd_yaml_of(plural).unwrap()), "{plural}");
    }
}

/// Defect 16 of issue 35: both CRDs carried the category `edgecache`, the EdgeCache kind's
/// singular name. kubectl expands a category before it looks a resource name up, so `kubectl get
/// edgecache` listed purges too and `kubectl delete edgecache NAME` failed with "you must specify
/// only one resource". No category may equal any CRD's plural, singular, short name or kind.
#[test]
fn no_category_shadows_a_resource_name() {
    let crds: Vec<CustomResourceDefinition> = CRDS
        .iter()
        .map(|(plural, _)| yaml_serde::from_str(&crd_yaml_of(plural).unwrap()).unwrap())
        .collect();
    let mut names = Vec::new();
    for crd in &crds {
        let n = &crd.spec.names;
        names.push(n.plural.clone());
        names.push(n.kind.to_lowercase());
        names.extend(n.singular.clone());
        names.extend(n.short_names.clone().unwrap_or_default());
    }
    for crd in &crds {
        for category in crd.spec.names.categories.iter().flatten() {
            assert!(
                !names.contains(category),
                "{}: category {category:?} shadows a resource name ({names:?})",
                crd.spec.names.plural
            );
        }
    }
}

/// The common contract of every CRD the operator owns: its name, namespaced scope, short name,
/// `edgecache-all` category (`kubectl get edgecache-all` lists every kind), `v1alpha1` with a status subresource, these printer columns, and
/// conditions as a list-map keyed by `type`. Returns the version's `openAPIV3Schema`
/// properties.
fn check_contract(text: &str, plural: &str, short: &str, columns: &[(&str, &str)]) -> Value {
    let crd: CustomResourceDefinition = yaml_serde::from_str(text).unwrap();
    let name = format!("{plural}.edgecache.dev");
    assert_eq!(crd.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec![short.to_string()]));
    assert_eq!(
        crd.spec.names.categories,
        Some(vec!["edgecache-all".to_string()])
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
    assert_eq!(cols, columns);
    let schema = serde_json::to_value(v.schema.as_ref().unwrap()).unwrap();
    let root = schema["openAPIV3Schema"]["properties"].clone();
    let conds = &root["status"]["properties"]["conditions"];
    assert_eq!(conds["x-kubernetes-list-type"], "map");
    assert_eq!(conds["x-kubernetes-list-map-keys"], json!(["type"]));
    root
}

#[test]
fn purge_crd_names_columns_and_conditions() {
    let text = crd_yaml_of("edgecachepurges").unwrap();
    let root = check_contract(
        &text,
        "edgecachepurges",
        "ecp",
        &[
            ("EdgeCache", ".spec.edgeCache"),
            ("Kind", ".status.kind"),
            (
                "Complete",
                ".status.conditions[?(@.type==\"Complete\")].status",
            ),
            ("Nodes confirmed", ".status.confirmed"),
            ("Age", ".metadata.creationTimestamp"),
        ],
    );
    // Every printer column path exists in the schema.
    assert!(root["spec"]["properties"]["edgeCache"].is_object());
    assert!(root["status"]["properties"]["kind"].is_object());
    assert!(root["status"]["properties"]["confirmed"].is_object());
    // The CEL rules: one selector kind, immutable spec.
    let rules = root["spec"]["x-kubernetes-validations"].as_array().unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[1]["rule"], "self == oldSelf");
}

#[test]
fn crd_names_columns_and_conditions() {
    let text = crd_yaml().unwrap();
    let root = check_contract(
        &text,
        "edgecaches",
        "ec",
        &[
            ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
            ("Nodes", ".status.nodesReady"),
            ("Sharding", ".status.sharding.mode"),
            ("Steering", ".spec.steering.mode"),
            ("Age", ".metadata.creationTimestamp"),
        ],
    );
    // Every printer column path exists in the schema.
    assert!(root["status"]["properties"]["nodesReady"].is_object());
    assert!(root["status"]["properties"]["sharding"]["properties"]["mode"].is_object());
    assert!(root["spec"]["properties"]["steering"]["properties"]["mode"].is_object());
    // status.nodes is keyed by pod: a node has two pods while one replaces the other.
    let nodes = &root["status"]["properties"]["nodes"];
    assert_eq!(nodes["x-kubernetes-list-type"], "map");
    assert_eq!(nodes["x-kubernetes-list-map-keys"], json!(["pod"]));
    // YAML 1.1 readers (kubectl) must see the string `off`, not false.
    assert!(
        text.contains("default: 'off'"),
        "steering default must be quoted"
    );
}

/// Every `format` under `node` whose type and format the API server does not recognise, as
/// `path: type/format`.
fn unrecognised_formats(node: &Value, path: &str, out: &mut Vec<String>) {
    // k8s.io/apiextensions-apiserver (pkg/apiserver/validation/formats.go, v1.37): integer and
    // number formats, and the string formats it validates.
    const STRING_FORMATS: &[&str] = &[
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
        "date-time",
        "k8s-short-name",
        "k8s-long-name",
    ];
    let Some(map) = node.as_object() else {
        return;
    };
    if let Some(format) = map.get("format").and_then(Value::as_str) {
        let ty = map.get("type").and_then(Value::as_str).unwrap_or("");
        let known = match ty {
            "integer" => ["int32", "int64"].contains(&format),
            "number" => ["float", "double"].contains(&format),
            "string" => STRING_FORMATS.contains(&format),
            _ => false,
        };
        if !known {
            out.push(format!("{path}: {ty}/{format}"));
        }
    }
    // Only the keywords that hold schemas (not `default`, `example` or `enum`, which hold data).
    for key in [
        "properties",
        "patternProperties",
        "definitions",
        "dependencies",
    ] {
        for (name, sub) in map
            .get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            unrecognised_formats(sub, &format!("{path}.{key}.{name}"), out);
        }
    }
    for key in ["allOf", "anyOf", "oneOf", "items"] {
        for (i, sub) in map
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            unrecognised_formats(sub, &format!("{path}.{key}[{i}]"), out);
        }
    }
    for key in ["items", "additionalProperties", "additionalItems", "not"] {
        if let Some(sub) = map.get(key).filter(|v| v.is_object()) {
            unrecognised_formats(sub, &format!("{path}.{key}"), out);
        }
    }
}

/// Defect 11 of issue 35: schemars writes `format: uint8/uint16/uint32/uint64` for unsigned
/// fields, and the API server (v1.37.2) answered every apply of the CRDs with an "unrecognized
/// format" warning for each. Every format in both CRDs must be one it knows for that type.
#[test]
fn every_schema_format_is_one_the_api_server_recognises() {
    for (plural, _) in CRDS {
        let crd: Value = yaml_serde::from_str(&crd_yaml_of(plural).unwrap()).unwrap();
        let mut bad = Vec::new();
        for (i, v) in crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let schema = &v["schema"]["openAPIV3Schema"];
            unrecognised_formats(schema, &format!("versions[{i}]"), &mut bad);
        }
        assert!(bad.is_empty(), "{plural}: unrecognised formats: {bad:#?}");
    }
}
