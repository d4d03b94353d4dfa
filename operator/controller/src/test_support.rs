//! Fixtures for tests (unit and integration): a minimal `EdgeCache` from a YAML spec fragment.
//! Panics on malformed fixtures; never used outside tests.

use edgecache_api::v1alpha1::EdgeCache;
use yaml_serde::Value;

/// The spec every fixture starts from.
pub const BASE: &str = "apiVersion: edgecache.dev/v1alpha1
kind: EdgeCache
metadata:
  name: web
  namespace: edge
  uid: 5c1e0b8e-0000-4000-8000-000000000001
  generation: 1
spec:
  origin:
    url: http://origin.edge.svc:8080
";

/// `BASE` with `spec_yaml` deep-merged into its spec (maps merge, everything else replaces).
pub fn minimal_edgecache(spec_yaml: &str) -> EdgeCache {
    let mut doc: Value = yaml_serde::from_str(BASE).unwrap_or_else(|e| panic!("BASE: {e}"));
    let patch: Value = if spec_yaml.trim().is_empty() {
        Value::Mapping(Default::default())
    } else {
        yaml_serde::from_str(spec_yaml).unwrap_or_else(|e| panic!("fixture: {e}\n{spec_yaml}"))
    };
    if let Some(spec) = doc.get_mut("spec") {
        merge(spec, patch);
    }
    yaml_serde::from_value(doc).unwrap_or_else(|e| panic!("fixture does not parse: {e}"))
}

/// `minimal_edgecache(spec_yaml)` without `origin.url`: an EdgeCache of `spec.sites` alone.
pub fn sites_edgecache(spec_yaml: &str) -> EdgeCache {
    let mut ec = minimal_edgecache(spec_yaml);
    ec.spec.origin.url = None;
    ec
}

/// Two sites: `www.shop.example` on a Service pool with active health checks and dropped
/// `utm_*` parameters, and `*.img.shop.example` on HTTPS origins checked against the CA
/// bundle in Secret `img-ca` (key `bundle.pem`).
pub const TWO_SITES: &str = "sites:
- hosts: [www.shop.example, shop.example]
  origins: [http://web.shop.svc.cluster.local:8080]
  balance: leastConnections
  healthCheck: {path: /healthz, interval: 10s}
  cache: {defaultTtl: 5m, dropQuery: [utm_*], sortQuery: true}
- hosts: ['*.img.shop.example']
  origins: [https://img-0.shop.svc:8443, https://img-1.shop.svc:8443]
  retries: 2
  originTls: {caSecret: {name: img-ca, key: bundle.pem}, serverName: img.internal}
  originHttp2: true
  hostHeader: origin
";

/// `pod` with a deletionTimestamp: being deleted.
pub fn terminating(mut pod: k8s_openapi::api::core::v1::Pod) -> k8s_openapi::api::core::v1::Pod {
    pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    pod
}

/// Parse a whole manifest (e.g. `examples/edgecache.yaml`).
pub fn edgecache_from_manifest(yaml: &str) -> EdgeCache {
    yaml_serde::from_str(yaml).unwrap_or_else(|e| panic!("manifest does not parse: {e}"))
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Mapping(a), Value::Mapping(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}
