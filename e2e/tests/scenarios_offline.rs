//! The kind scenarios' EdgeCaches against the CRD's CEL rules (kube's `cel` feature, offline), so
//! a scenario the real cluster would refuse fails here, without a cluster. (The cluster tier
//! creates them on a real API server, which also checks the rest of the schema.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use edgecache_api::v1alpha1::EdgeCache;
use edgecache_e2e::scenarios::{edgecache, merge, placement, rollout_patch, sharding};
use kube::core::cel::{validate_cel, validate_cel_update};
use serde_json::json;

const NS: &str = "e2e-offline";

#[test]
fn every_scenario_edgecache_satisfies_the_crd_cel_rules() {
    let mut all = vec![
        ("web", json!({})),
        ("caps", json!({})),
        ("shard", sharding()),
    ];
    all.extend(placement());
    for (name, spec) in all {
        validate_cel(&edgecache(NS, name, spec))
            .unwrap_or_else(|e| panic!("the {name} scenario's EdgeCache is refused: {e:?}"));
    }
    let old = edgecache(NS, "web", json!({}));
    let mut patched = serde_json::to_value(&old).unwrap();
    merge(&mut patched, &rollout_patch());
    let new: EdgeCache = serde_json::from_value(patched).unwrap();
    validate_cel_update(&new, &old)
        .unwrap_or_else(|e| panic!("the rollout scenario's spec change is refused: {e:?}"));
}
