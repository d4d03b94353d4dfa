//! The kind scenarios' EdgeCaches, submitted to the fake API server with the CRD installed: it
//! validates them against the schema and the CEL rules as a real API server would, so a scenario
//! the real cluster would refuse fails here, without a cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use edgecache_api::v1alpha1::EdgeCache;
use edgecache_e2e::scenarios::{edgecache, placement, rollout_patch, sharding};
use edgecache_fakeapi::FakeApiServer;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "e2e-offline";

fn api() -> Api<EdgeCache> {
    let fake = FakeApiServer::new();
    assert!(
        fake.install_crd(&serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap())
    );
    Api::namespaced(fake.client(), NS)
}

#[tokio::test]
async fn every_scenario_edgecache_is_one_the_api_server_accepts() {
    let api = api();
    let mut all = vec![
        ("web", json!({})),
        ("caps", json!({})),
        ("shard", sharding()),
    ];
    all.extend(placement());
    for (name, spec) in all {
        api.create(&PostParams::default(), &edgecache(NS, name, spec))
            .await
            .unwrap_or_else(|e| panic!("the {name} scenario's EdgeCache is refused: {e}"));
    }
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(rollout_patch()),
    )
    .await
    .expect("the rollout scenario's spec change is accepted");
}

#[tokio::test]
async fn queue_steering_off_the_host_network_is_refused_as_on_a_real_cluster() {
    // What the placement scenario used to create.
    let ec = edgecache(NS, "queue", json!({"steering": {"mode": "queue"}}));
    let err = api().create(&PostParams::default(), &ec).await.unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 422);
    let fields: Vec<String> = s
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert_eq!(fields, ["spec.network.hostNetwork"]);
}
