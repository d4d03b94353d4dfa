//! Step 3 of the pipeline, I/O: server-side apply of the built children, one field manager,
//! forced (the operator owns these objects; a hand edit is put back).
//!
//! Forcing is safe only on objects the operator made: a forced apply onto someone else's
//! Service of the same name would take it over (and add the owner reference that makes the
//! garbage collector delete it with the EdgeCache). So every child that already exists must
//! carry this EdgeCache's controller owner reference; if one does not, nothing is applied and
//! the EdgeCache is Degraded with `NameConflict`.

use std::marker::PhantomData;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::build::{ADMIN_TOKEN_KEY, Applied, Desired, MANAGER, PEER_KEY_KEY, Prepared};

/// What applying one child did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Created,
    Updated,
    Unchanged,
    /// A child the spec no longer needs (the peers ConfigMap once sharding is off).
    Deleted,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Updated => "updated",
            Self::Unchanged => "unchanged",
            Self::Deleted => "deleted",
        }
    }
}

/// One child's apply result, for events and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildChange {
    pub kind: &'static str,
    pub api_version: String,
    pub name: String,
    pub change: Change,
}

/// Why applying the children failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A child's name is taken by an object this EdgeCache does not control.
    #[error(
        "{kind} {namespace}/{name} already exists and was not created by this EdgeCache ({owner}); rename or delete it, or rename the EdgeCache"
    )]
    NameConflict {
        kind: &'static str,
        namespace: String,
        name: String,
        /// Who controls it instead, in words.
        owner: String,
    },
    /// A child still carries the controller reference of an earlier EdgeCache of the same
    /// name (deleted: two of one name cannot exist at once), which the garbage collector
    /// removes in the background; the reconcile waits for it, briefly, and touches nothing.
    #[error(
        "{kind} {namespace}/{name} still belongs to an earlier EdgeCache of this name, which the garbage collector is removing"
    )]
    PreviousOwner {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The API server refused or failed a request about one child.
    #[error("{kind} {name}: {source}")]
    Api {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The API server's status code, when it answered with one.
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Api {
                source: kube::Error::Api(s),
                ..
            } => Some(s.code),
            _ => None,
        }
    }

    /// The API server's own message (or the client error), without the child's name.
    pub fn api_message(&self) -> String {
        match self {
            Self::Api {
                source: kube::Error::Api(s),
                ..
            } => s.message.clone(),
            Self::Api { source, .. } => source.to_string(),
            Self::NameConflict { .. } | Self::PreviousOwner { .. } => self.to_string(),
        }
    }
}

fn api_error<K: Resource<DynamicType = ()>>(name: &str) -> impl FnOnce(kube::Error) -> Error {
    let name = name.to_string();
    move |source| Error::Api {
        kind: kind_of::<K>(),
        name,
        source,
    }
}

/// Apply every child in order (ServiceAccount, admin token Secret, ConfigMap, peers ConfigMap,
/// Service, DaemonSet), after checking that none of them is someone else's object. Stops at the first
/// failure; what was applied before it stays (the next reconcile converges).
pub async fn apply(
    client: &Client,
    namespace: &str,
    desired: Desired<Prepared>,
) -> Result<(Desired<Applied>, Vec<ChildChange>), Error> {
    let existing = Existing {
        service_account: claim::<ServiceAccount>(client, namespace, &desired.service_account)
            .await?,
        admin_secret: claim::<Secret>(client, namespace, &desired.admin_secret).await?,
        config_map: claim::<ConfigMap>(client, namespace, &desired.config_map).await?,
        peers_config_map: match &desired.peers_config_map {
            Some(cm) => claim::<ConfigMap>(client, namespace, cm).await?,
            // Not needed: only a leftover of this EdgeCache's matters; someone else's
            // ConfigMap of that name is no conflict and is left alone.
            None => match claim::<ConfigMap>(client, namespace, &peers_template(&desired)).await {
                Err(Error::NameConflict { .. }) => None,
                other => other?,
            },
        },
        service: claim::<Service>(client, namespace, &desired.service).await?,
        network_policy: match &desired.network_policy {
            Some(p) => claim::<NetworkPolicy>(client, namespace, p).await?,
            None => None,
        },
        daemon_set: claim::<DaemonSet>(client, namespace, &desired.daemon_set).await?,
    };
    let mut changes = Vec::with_capacity(5);
    let service_account = apply_one(
        client,
        namespace,
        &desired.service_account,
        existing.service_account,
        &mut changes,
    )
    .await?;
    let admin_secret = ensure_admin_secret(
        client,
        namespace,
        &desired.admin_secret,
        existing.admin_secret.is_some(),
        &mut changes,
    )
    .await?;
    let config_map = apply_one(
        client,
        namespace,
        &desired.config_map,
        existing.config_map,
        &mut changes,
    )
    .await?;
    // Before the DaemonSet: its pods mount it.
    let peers_config_map = match &desired.peers_config_map {
        Some(cm) => Some(
            apply_one(
                client,
                namespace,
                cm,
                existing.peers_config_map,
                &mut changes,
            )
            .await?,
        ),
        None => {
            if existing.peers_config_map.is_some() {
                remove_peers(client, namespace, &peers_template(&desired), &mut changes).await?;
            }
            None
        }
    };
    let service = apply_one(
        client,
        namespace,
        &desired.service,
        existing.service,
        &mut changes,
    )
    .await?;
    // Before the DaemonSet: under a default-deny policy its pods are reachable from the start.
    let network_policy = match &desired.network_policy {
        Some(p) => {
            Some(apply_one(client, namespace, p, existing.network_policy, &mut changes).await?)
        }
        None => None,
    };
    let daemon_set = apply_one(
        client,
        namespace,
        &desired.daemon_set,
        existing.daemon_set,
        &mut changes,
    )
    .await?;
    Ok((
        Desired {
            service_account,
            config_map,
            service,
            daemon_set,
            admin_secret,
            peers_config_map,
            network_policy,
            config_hash: desired.config_hash,
            state: PhantomData,
        },
        changes,
    ))
}

/// The resourceVersion of each child that exists already (`None`: not there yet).
struct Existing {
    service_account: Option<String>,
    admin_secret: Option<String>,
    config_map: Option<String>,
    peers_config_map: Option<String>,
    service: Option<String>,
    network_policy: Option<String>,
    daemon_set: Option<String>,
}

/// The peers ConfigMap this EdgeCache has or had: the desired one, or (sharding off) one
/// with its name and owner, to find and delete a leftover.
fn peers_template(desired: &Desired<Prepared>) -> ConfigMap {
    desired.peers_config_map.clone().unwrap_or_else(|| {
        let owner = desired.config_map.metadata.clone();
        let name = desired.daemon_set.name_any();
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(crate::build::peers_config_map_name(&name)),
                ..owner
            },
            ..ConfigMap::default()
        }
    })
}

/// Delete the peers ConfigMap once sharding is turned off (the pods no longer mount it).
async fn remove_peers(
    client: &Client,
    namespace: &str,
    cm: &ConfigMap,
    changes: &mut Vec<ChildChange>,
) -> Result<(), Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = cm.name_any();
    match api.delete(&name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(api_error::<ConfigMap>(&name)(e)),
    }
    changes.push(ChildChange {
        kind: "ConfigMap",
        api_version: ConfigMap::api_version(&()).into_owned(),
        name,
        change: Change::Deleted,
    });
    Ok(())
}

/// The stored child's resourceVersion, if it exists and this EdgeCache controls it; a
/// [`Error::NameConflict`] if it exists and does not.
async fn claim<K>(client: &Client, namespace: &str, obj: &K) -> Result<Option<String>, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = obj.name_any();
    let Some(stored) = api
        .get_metadata_opt(&name)
        .await
        .map_err(api_error::<K>(&name))?
    else {
        return Ok(None);
    };
    match owner(&stored.metadata, obj.meta()) {
        Owner::This => Ok(Some(stored.metadata.resource_version.unwrap_or_default())),
        Owner::Previous => Err(Error::PreviousOwner {
            kind: kind_of::<K>(),
            namespace: namespace.to_string(),
            name,
        }),
        Owner::Other(owner) => Err(Error::NameConflict {
            kind: kind_of::<K>(),
            namespace: namespace.to_string(),
            name,
            owner,
        }),
    }
}

/// Who controls a stored child.
#[derive(Debug, PartialEq, Eq)]
enum Owner {
    /// This EdgeCache (the controller reference `desired` asks for, by uid).
    This,
    /// An earlier EdgeCache of the same name (same kind and name, another uid): deleted, its
    /// children not collected yet.
    Previous,
    /// Someone else, in words.
    Other(String),
}

fn owner(stored: &ObjectMeta, desired: &ObjectMeta) -> Owner {
    let Some(want) = desired.owner_references.as_ref().and_then(|r| r.first()) else {
        return Owner::This;
    };
    let refs = stored.owner_references.as_deref().unwrap_or_default();
    let Some(controller) = refs.iter().find(|r| r.controller == Some(true)) else {
        return Owner::Other("it has no controller owner reference".to_string());
    };
    if controller.uid == want.uid {
        Owner::This
    } else if controller.kind == want.kind
        && controller.api_version == want.api_version
        && controller.name == want.name
    {
        Owner::Previous
    } else {
        Owner::Other(format!(
            "it is controlled by {} {}",
            controller.kind, controller.name
        ))
    }
}

fn kind_of<K: Resource<DynamicType = ()>>() -> &'static str {
    // The kinds this module applies; `Resource::kind` is a `Cow` of a `&'static str` for them.
    match K::kind(&()).as_ref() {
        "ServiceAccount" => "ServiceAccount",
        "Secret" => "Secret",
        "ConfigMap" => "ConfigMap",
        "Service" => "Service",
        "DaemonSet" => "DaemonSet",
        "NetworkPolicy" => "NetworkPolicy",
        _ => "object",
    }
}

async fn apply_one<K>(
    client: &Client,
    namespace: &str,
    obj: &K,
    before: Option<String>,
    changes: &mut Vec<ChildChange>,
) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = obj.name_any();
    let kind = kind_of::<K>();
    let params = PatchParams::apply(MANAGER).force();
    let after = api
        .patch(&name, &params, &Patch::Apply(obj))
        .await
        .map_err(api_error::<K>(&name))?;
    let change = match (before, after.meta().resource_version.as_ref()) {
        (None, _) => Change::Created,
        (Some(b), Some(a)) if &b == a => Change::Unchanged,
        _ => Change::Updated,
    };
    changes.push(ChildChange {
        kind,
        api_version: K::api_version(&()).into_owned(),
        name,
        change,
    });
    Ok(after)
}

/// Create the admin token Secret with a fresh random token and peer key when it does not exist;
/// an existing one keeps both (neither is ever rotated by a reconcile), and one made before
/// peer keys existed gets one added. Returns the Secret without its data, so nothing secret is
/// kept or logged.
async fn ensure_admin_secret(
    client: &Client,
    namespace: &str,
    template: &Secret,
    exists: bool,
    changes: &mut Vec<ChildChange>,
) -> Result<Secret, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = template.name_any();
    ensure_secret(&api, &name, template, exists, changes)
        .await
        .map_err(api_error::<Secret>(&name))
}

async fn ensure_secret(
    api: &Api<Secret>,
    name: &str,
    template: &Secret,
    exists: bool,
    changes: &mut Vec<ChildChange>,
) -> Result<Secret, kube::Error> {
    let stored = if exists {
        api.get_opt(name).await?
    } else {
        None
    };
    let random = || random_token().map_err(|e| kube::Error::Service(Box::new(e)));
    let (secret, change) = match stored {
        Some(s)
            if s.data
                .as_ref()
                .is_some_and(|d| d.contains_key(PEER_KEY_KEY)) =>
        {
            (s, Change::Unchanged)
        }
        Some(_) => {
            // A JSON merge patch adds the key and leaves the token as it is.
            let patch = serde_json::json!({
                "data": { PEER_KEY_KEY: ByteString(random()?.into_bytes()) }
            });
            let patched = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            (patched, Change::Updated)
        }
        None => {
            let mut s = template.clone();
            s.data = Some(
                [
                    (
                        ADMIN_TOKEN_KEY.to_string(),
                        ByteString(random()?.into_bytes()),
                    ),
                    (PEER_KEY_KEY.to_string(), ByteString(random()?.into_bytes())),
                ]
                .into(),
            );
            match api.create(&PostParams::default(), &s).await {
                Ok(created) => (created, Change::Created),
                // Created meanwhile (another reconcile): keep that one.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    (api.get(name).await?, Change::Unchanged)
                }
                Err(e) => return Err(e),
            }
        }
    };
    changes.push(ChildChange {
        kind: "Secret",
        api_version: Secret::api_version(&()).into_owned(),
        name: name.to_string(),
        change,
    });
    Ok(Secret {
        data: None,
        string_data: None,
        ..secret
    })
}

/// 32 bytes from the kernel's CSPRNG, hex-encoded (64 characters).
fn random_token() -> std::io::Result<String> {
    use std::fmt::Write as _;
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_64_hex_characters_and_differ() {
        let a = super::random_token().unwrap();
        let b = super::random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn an_earlier_edgecache_of_the_same_name_is_told_from_other_owners() {
        use super::{Owner, owner};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
        let by = |kind: &str, name: &str, uid: &str, controller: bool| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: "edgecache.dev/v1alpha1".into(),
                kind: kind.into(),
                name: name.into(),
                uid: uid.into(),
                controller: Some(controller),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        };
        let desired = by("EdgeCache", "web", "new", true);
        assert_eq!(
            owner(&by("EdgeCache", "web", "new", true), &desired),
            Owner::This
        );
        assert_eq!(
            owner(&by("EdgeCache", "web", "old", true), &desired),
            Owner::Previous
        );
        assert_eq!(
            owner(&by("EdgeCache", "other", "x", true), &desired),
            Owner::Other("it is controlled by EdgeCache other".into())
        );
        assert_eq!(
            owner(&by("Deployment", "web", "x", true), &desired),
            Owner::Other("it is controlled by Deployment web".into())
        );
        assert_eq!(
            owner(&by("EdgeCache", "web", "old", false), &desired),
            Owner::Other("it has no controller owner reference".into())
        );
        assert_eq!(
            owner(&ObjectMeta::default(), &desired),
            Owner::Other("it has no controller owner reference".into())
        );
    }
}
