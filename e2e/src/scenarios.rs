//! The EdgeCaches the kind scenarios create (`tests/kind.rs`), here so that they are also
//! checked where no cluster runs: `tests/scenarios_offline.rs` checks each one against the
//! CRD's CEL rules.

use edgecache_api::v1alpha1::EdgeCache;
use serde_json::{Value, json};

/// The client port of the scenarios' cache pods.
pub const PORT: u16 = 8080;
/// Their admin port.
pub const ADMIN_PORT: u16 = 9090;
/// The port of the in-namespace origin.
pub const ORIGIN_PORT: u16 = 8000;

/// The data-plane image loaded into kind (`EDGECACHE_E2E_DATAPLANE_IMAGE`).
pub fn dataplane_image() -> String {
    std::env::var("EDGECACHE_E2E_DATAPLANE_IMAGE")
        .unwrap_or_else(|_| "edgecache-dataplane:dev".into())
}

/// Deep-merge `patch` into `base` (objects merged, everything else replaced).
pub fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// An EdgeCache for the in-namespace origin, cpu steering, `capabilities` mode, a small memory
/// limit, a cache directory of its own under each node's /mnt/nvme0, and sharding off (the
/// scenarios check each node's own cache: a miss then a hit on every node; [`sharding`] turns
/// it on); `spec` is merged in.
pub fn edgecache(ns: &str, name: &str, spec: Value) -> EdgeCache {
    let mut s = json!({
        "origin": {"url": format!("http://origin.{ns}.svc.cluster.local:{ORIGIN_PORT}")},
        // 128MiB: every scenario's directory stays on each node until the cluster goes (a
        // hostPath outlives its pods), and the store allocates its whole size: at 512MiB a
        // tier of about 30 scenarios on three nodes held some 30 GB of disk at its end.
        "storage": {"hostPath": format!("/mnt/nvme0/{ns}-{name}"), "size": "128MiB"},
        // No cache.maxObjectSize: unset, it is an eighth of this storage.size, 16MiB (its 1GiB
        // default had exceeded this storage.size, and the operator refused every scenario).
        "resources": {"memory": "256Mi"},
        "steering": {"mode": "cpu"},
        "network": {"port": PORT, "adminPort": ADMIN_PORT},
        "security": {"mode": "capabilities"},
        "sharding": {"mode": "off"},
        "image": dataplane_image(),
        "imagePullPolicy": "IfNotPresent",
    });
    merge(&mut s, &spec);
    serde_json::from_value(json!({
        "apiVersion": "edgecache.dev/v1alpha1",
        "kind": "EdgeCache",
        "metadata": {"name": name, "namespace": ns},
        "spec": s,
    }))
    .expect("a valid EdgeCache")
}

/// The placement scenario's EdgeCaches: `cpu` steering (every NVMe node) and `queue` steering
/// (NVMe nodes with ADQ), which needs the host network (the CRD's CEL rule: ADQ queues belong to
/// the host NIC).
pub fn placement() -> Vec<(&'static str, Value)> {
    vec![
        ("cpu", json!({})),
        (
            "queue",
            json!({"steering": {"mode": "queue"}, "network": {"hostNetwork": true}}),
        ),
    ]
}

/// The rollout scenario's spec change (a new default TTL: a new config, so new pods).
pub const ROLLOUT_TTL: &str = "120s";

/// The merge patch of the rollout scenario.
pub fn rollout_patch() -> Value {
    json!({"spec": {"cache": {"defaultTtl": ROLLOUT_TTL}}})
}

/// The sharding scenario's spec: the nodes share one cache (each key on its owner).
pub fn sharding() -> Value {
    json!({"sharding": {"mode": "consistent", "popularityThreshold": 0}})
}
