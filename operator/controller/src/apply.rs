//! Step 3 of the pipeline, I/O: server-side apply of the built children, one field manager,
//! forced (the operator owns these objects; a hand edit is put back).

use std::marker::PhantomData;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::build::{ADMIN_TOKEN_KEY, Applied, Desired, MANAGER, Prepared};

/// What applying one child did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Created,
    Updated,
    Unchanged,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Updated => "updated",
            Self::Unchanged => "unchanged",
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

/// Apply every child in order (ServiceAccount, admin token Secret, ConfigMap, Service,
/// DaemonSet). Stops at the first failure; what was applied before it stays (the next reconcile
/// converges).
pub async fn apply(
    client: &Client,
    namespace: &str,
    desired: Desired<Prepared>,
) -> Result<(Desired<Applied>, Vec<ChildChange>), kube::Error> {
    let mut changes = Vec::with_capacity(4);
    let service_account = apply_one::<ServiceAccount>(
        client,
        namespace,
        &desired.service_account,
        "ServiceAccount",
        &mut changes,
    )
    .await?;
    let admin_secret =
        ensure_admin_secret(client, namespace, &desired.admin_secret, &mut changes).await?;
    let config_map = apply_one::<ConfigMap>(
        client,
        namespace,
        &desired.config_map,
        "ConfigMap",
        &mut changes,
    )
    .await?;
    let service =
        apply_one::<Service>(client, namespace, &desired.service, "Service", &mut changes).await?;
    let daemon_set = apply_one::<DaemonSet>(
        client,
        namespace,
        &desired.daemon_set,
        "DaemonSet",
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
            config_hash: desired.config_hash,
            state: PhantomData,
        },
        changes,
    ))
}

async fn apply_one<K>(
    client: &Client,
    namespace: &str,
    obj: &K,
    kind: &'static str,
    changes: &mut Vec<ChildChange>,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = obj.name_any();
    let before = api
        .get_metadata_opt(&name)
        .await?
        .and_then(|m| m.metadata.resource_version);
    let params = PatchParams::apply(MANAGER).force();
    let after = api.patch(&name, &params, &Patch::Apply(obj)).await?;
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

/// Create the admin token Secret with a fresh random token when it does not exist; an existing
/// one is left exactly as it is (a token is never rotated by a reconcile). Returns the Secret
/// without its data, so the token is not kept or logged.
async fn ensure_admin_secret(
    client: &Client,
    namespace: &str,
    template: &Secret,
    changes: &mut Vec<ChildChange>,
) -> Result<Secret, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = template.name_any();
    let (secret, change) = match api.get_opt(&name).await? {
        Some(s) => (s, Change::Unchanged),
        None => {
            let token = random_token().map_err(|e| kube::Error::Service(Box::new(e)))?;
            let mut s = template.clone();
            s.data = Some([(ADMIN_TOKEN_KEY.to_string(), ByteString(token.into_bytes()))].into());
            match api.create(&PostParams::default(), &s).await {
                Ok(created) => (created, Change::Created),
                // Created meanwhile (another reconcile): keep that one.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    (api.get(&name).await?, Change::Unchanged)
                }
                Err(e) => return Err(e),
            }
        }
    };
    changes.push(ChildChange {
        kind: "Secret",
        api_version: Secret::api_version(&()).into_owned(),
        name,
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
}
