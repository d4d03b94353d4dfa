//! Step 2 of the pipeline, pure: the objects one `EdgeCache` needs. Does not need a Kubernetes
//! client; `render` prints exactly these, and `apply` sends exactly these.

mod config_map;
mod daemon_set;
mod network_policy;
mod peers_config_map;
pub mod placement;
mod service;

use std::collections::BTreeMap;
use std::marker::PhantomData;

use edgecache_api::ByteSize;
use edgecache_api::v1alpha1::EdgeCache;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::peers::Peer;
use crate::validate::ValidatedEdgeCache;

/// Field manager of every write the operator makes.
pub const MANAGER: &str = "edgecache-operator";
/// Pod-template annotation carrying the sha256 of the data-plane config; a new value rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "edgecache.dev/config-hash";
/// Key of the data-plane config in the ConfigMap.
pub const CONFIG_KEY: &str = "config.yaml";
/// Where the ConfigMap is mounted in the container.
pub const CONFIG_DIR: &str = "/etc/edgecache";
/// Name of the data-plane container.
pub const CONTAINER: &str = "dataplane";
/// Where the admin token Secret is mounted in the container (not below [`CONFIG_DIR`]: a mount
/// point inside a read-only ConfigMap volume cannot be created).
pub const ADMIN_TOKEN_DIR: &str = "/etc/edgecache-admin";
/// Key of the token in the admin token Secret (and its file name in [`ADMIN_TOKEN_DIR`]).
pub const ADMIN_TOKEN_KEY: &str = "token";
/// Key of the peer key in the same Secret (and its file name): the key the pods of one
/// EdgeCache prove their hops to each other with (`sharding.peerKeyFile`).
pub const PEER_KEY_KEY: &str = "peer-key";

/// Marker: built, not yet sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared;
/// Marker: accepted by the API server (the objects are what it returned).
#[derive(Debug, Clone, PartialEq)]
pub struct Applied;

/// Everything one `EdgeCache` owns.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired<S> {
    pub service_account: ServiceAccount,
    pub config_map: ConfigMap,
    pub service: Service,
    pub daemon_set: DaemonSet,
    /// The Secret holding the data plane's admin token: built without data; `apply` creates it
    /// with a random token only when it does not exist, and never rewrites it.
    pub admin_secret: Secret,
    /// The ConfigMap holding the peer list, when sharding is on (see [`Desired::with_peers`]).
    /// Not part of `config_hash`: a change of membership restarts no pod.
    pub peers_config_map: Option<ConfigMap>,
    /// The pods' NetworkPolicy, when the install names the operator's pods
    /// ([`crate::validate::Policy::admin_clients`]).
    pub network_policy: Option<NetworkPolicy>,
    /// sha256 (hex) of the ConfigMap's `config.yaml`.
    pub config_hash: String,
    pub state: PhantomData<S>,
}

impl<S> Desired<S> {
    /// The objects in apply order (ServiceAccount and ConfigMap before the pods that use them),
    /// as JSON values.
    pub fn objects(&self) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        let mut objects = vec![
            serde_json::to_value(&self.service_account)?,
            serde_json::to_value(&self.config_map)?,
        ];
        if let Some(peers) = &self.peers_config_map {
            objects.push(serde_json::to_value(peers)?);
        }
        objects.push(serde_json::to_value(&self.service)?);
        if let Some(policy) = &self.network_policy {
            objects.push(serde_json::to_value(policy)?);
        }
        objects.push(serde_json::to_value(&self.daemon_set)?);
        Ok(objects)
    }
}

impl Desired<Prepared> {
    /// The same children with `peers` in the peers ConfigMap (nothing changes when sharding is
    /// off). `build` starts from an empty list: the pods are not known before they exist.
    pub fn with_peers(mut self, peers: &[Peer]) -> Self {
        if let Some(cm) = &mut self.peers_config_map {
            peers_config_map::set_peers(cm, peers);
        }
        self
    }
}

/// Build the children of a validated `EdgeCache`.
pub fn build(ec: &ValidatedEdgeCache) -> Desired<Prepared> {
    let (config_map, config_hash) = config_map::config_map(ec);
    Desired {
        service_account: service::service_account(ec),
        service: service::service(ec),
        daemon_set: daemon_set::daemon_set(ec, &config_hash),
        admin_secret: admin_secret(ec),
        peers_config_map: peers_config_map::peers_config_map(ec),
        network_policy: network_policy::network_policy(ec),
        config_map,
        config_hash,
        state: PhantomData,
    }
}

/// Labels on every child and on the pods.
pub fn labels(ec: &ValidatedEdgeCache) -> BTreeMap<String, String> {
    let mut l = selector_labels(&ec.name);
    l.insert("app.kubernetes.io/component".into(), "dataplane".into());
    l.insert("app.kubernetes.io/managed-by".into(), MANAGER.into());
    l
}

/// The DaemonSet's (immutable) selector and the Service's selector.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "edgecache".to_string(),
        ),
        ("app.kubernetes.io/instance".to_string(), name.to_string()),
    ])
}

/// Names of the children.
pub fn config_map_name(name: &str) -> String {
    format!("{name}-config")
}

/// Name of the ConfigMap holding the peer list.
pub fn peers_config_map_name(name: &str) -> String {
    format!("{name}-peers")
}

/// Name of the admin token Secret.
pub fn admin_secret_name(name: &str) -> String {
    format!("{name}-admin-token")
}

fn admin_secret(ec: &ValidatedEdgeCache) -> Secret {
    Secret {
        metadata: child_meta(ec, admin_secret_name(&ec.name)),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// Metadata of a child: name, namespace, labels and (when the owner has a uid) the controller
/// owner reference that makes the garbage collector delete it with the `EdgeCache`.
fn child_meta(ec: &ValidatedEdgeCache, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(ec.namespace.clone()),
        labels: Some(labels(ec)),
        owner_references: owner_reference(ec).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

fn owner_reference(ec: &ValidatedEdgeCache) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: EdgeCache::api_version(&()).into_owned(),
        kind: EdgeCache::kind(&()).into_owned(),
        name: ec.name.clone(),
        uid: ec.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// A byte size as a Kubernetes quantity (`2Gi`, or plain bytes when not a whole binary unit).
pub fn quantity(b: ByteSize) -> String {
    let n = b.bytes();
    for (suffix, unit) in [
        ("Ti", 1u64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{}{suffix}", n / unit);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests;
