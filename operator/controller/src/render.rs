//! `edgecache-operator render -f FILE`: the objects the operator would apply, offline.

use edgecache_api::v1alpha1::EdgeCache;

use crate::build::build;
use crate::crd::to_yaml;
use crate::validate::{self, Policy, validate};

/// Why a manifest cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the manifest is not an EdgeCache: {0}")]
    Parse(#[from] serde_yaml::Error),
    #[error("the manifest is not an edgecache.dev/v1alpha1 EdgeCache (got {0})")]
    WrongKind(String),
    #[error(transparent)]
    Invalid(#[from] validate::Error),
    #[error("cannot serialize the objects: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Render every object the operator would apply for `manifest` (one or more EdgeCaches in a
/// YAML stream), as a YAML multi-document stream in apply order. A manifest without a namespace
/// renders into `default`. Offline there is no uid, so the objects carry no owner reference.
pub fn render(manifest: &str, policy: &Policy) -> Result<String, Error> {
    use serde::Deserialize as _;
    let mut out = String::new();
    for doc in serde_yaml::Deserializer::from_str(manifest) {
        let value = serde_yaml::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        out.push_str(&render_one(value, policy)?);
    }
    if out.is_empty() {
        return Err(Error::WrongKind("an empty manifest".into()));
    }
    Ok(out)
}

fn render_one(value: serde_yaml::Value, policy: &Policy) -> Result<String, Error> {
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let kind = value.get("kind").and_then(|v| v.as_str()).unwrap_or("");
    if api_version != "edgecache.dev/v1alpha1" || kind != "EdgeCache" {
        return Err(Error::WrongKind(format!("{api_version} {kind}")));
    }
    let mut ec: EdgeCache = serde_yaml::from_value(value)?;
    if ec.metadata.namespace.is_none() {
        ec.metadata.namespace = Some("default".into());
    }
    let desired = build(&validate(&ec, policy)?);
    let secret = desired
        .admin_secret
        .metadata
        .name
        .as_deref()
        .unwrap_or_default();
    let mut out = format!(
        "# Secret {secret} (type Opaque, key {}: the admin token) is created by the operator \
         once, with 32 random bytes hex-encoded, when it does not exist; it is never printed.\n",
        crate::build::ADMIN_TOKEN_KEY
    );
    for obj in desired.objects()? {
        out.push_str("---\n");
        out.push_str(&to_yaml(&obj)?);
    }
    Ok(out)
}
