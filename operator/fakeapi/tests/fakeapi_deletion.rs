//! Deletion propagation, as the real API server and garbage collector do it: Background (the
//! default), Foreground (the owner waits, marked, for its blocking dependents) and Orphan (the
//! dependents stay, without the owner reference).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use edgecache_fakeapi::{FOREGROUND, FakeApiServer, keys};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "ns";

async fn make(
    api: &Api<ConfigMap>,
    name: &str,
    owners: &[(&str, bool)],
    finalizer: bool,
) -> String {
    let refs: Vec<Value> = owners
        .iter()
        .map(|(uid, block)| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": uid, "uid": uid,
                   "blockOwnerDeletion": block})
        })
        .collect();
    let mut meta = json!({"name": name});
    if !refs.is_empty() {
        meta["ownerReferences"] = json!(refs);
    }
    if finalizer {
        meta["finalizers"] = json!(["example.com/hold"]);
    }
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": meta})).unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

fn stored(fake: &FakeApiServer, name: &str) -> Option<Value> {
    fake.get(keys::CONFIGMAPS, Some(NS), name)
}

#[tokio::test]
async fn foreground_deletion_keeps_the_owner_until_its_blocking_dependents_are_gone() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), NS);
    let owner = make(&api, "owner", &[], false).await;
    make(&api, "held", &[(&owner, true)], true).await;
    make(&api, "plain", &[(&owner, true)], false).await;

    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    // The owner is marked, with the foregroundDeletion finalizer, and waits.
    let o = stored(&fake, "owner").expect("the owner waits for its dependents");
    assert!(o["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(o["metadata"]["finalizers"], json!([FOREGROUND]));
    // Its dependents are deleted: one at once, one held by its own finalizer.
    assert!(stored(&fake, "plain").is_none());
    assert!(stored(&fake, "held").unwrap()["metadata"]["deletionTimestamp"].is_string());

    // The last blocking dependent goes: so does the owner.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(stored(&fake, "held").is_none());
    assert!(
        stored(&fake, "owner").is_none(),
        "the owner went after its dependents"
    );
}

#[tokio::test]
async fn a_dependent_that_does_not_block_does_not_hold_a_foreground_deletion() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), NS);
    let owner = make(&api, "owner", &[], false).await;
    make(&api, "held", &[(&owner, false)], true).await;
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    assert!(stored(&fake, "owner").is_none());
    assert!(stored(&fake, "held").unwrap()["metadata"]["deletionTimestamp"].is_string());
}

#[tokio::test]
async fn orphan_deletion_leaves_the_dependents_without_the_owner_reference() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), NS);
    let owner = make(&api, "owner", &[], false).await;
    let other = make(&api, "other", &[], false).await;
    make(&api, "dep", &[(&owner, true)], false).await;
    make(&api, "shared", &[(&owner, true), (&other, false)], false).await;
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert!(stored(&fake, "owner").is_none());
    let dep = stored(&fake, "dep").expect("orphaned, not deleted");
    assert!(dep["metadata"].get("ownerReferences").is_none(), "{dep}");
    let shared = stored(&fake, "shared").unwrap();
    assert_eq!(
        shared["metadata"]["ownerReferences"][0]["uid"],
        other.as_str()
    );
    assert_eq!(
        shared["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn background_deletion_spares_dependents_another_owner_keeps() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), NS);
    let a = make(&api, "a", &[], false).await;
    let b = make(&api, "b", &[], false).await;
    make(&api, "only-a", &[(&a, true)], false).await;
    make(&api, "both", &[(&a, true), (&b, true)], false).await;
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(stored(&fake, "a").is_none());
    assert!(stored(&fake, "only-a").is_none());
    let both = stored(&fake, "both").expect("b still owns it");
    assert_eq!(
        both["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1",
        "kind": "ConfigMap", "name": b, "uid": b, "blockOwnerDeletion": true}])
    );
    api.delete("b", &DeleteParams::background()).await.unwrap();
    assert!(stored(&fake, "both").is_none());
}

#[tokio::test]
async fn a_dependent_written_for_an_owner_that_is_gone_is_collected() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), NS);
    let owner = make(&api, "owner", &[], false).await;
    make(&api, "kept", &[(&owner, false)], false).await;
    assert!(stored(&fake, "kept").is_some());
    // A controller writing from a stale cache after the owner went: the write succeeds, and
    // the garbage collector deletes the object.
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(stored(&fake, "kept").is_none());
    make(&api, "late", &[(&owner, false)], false).await;
    assert!(stored(&fake, "late").is_none());
}
