//! `edgecache-operator render -f FILE`: the objects the operator would apply, offline.

use edgecache_api::v1alpha1::EdgeCache;

use crate::build::build;
use crate::crd::to_yaml;
use crate::strict;
use crate::validate::{self, FieldError, Policy, validate};

/// Why a manifest cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the manifest is not an EdgeCache: {0}")]
    Parse(#[from] yaml_serde::Error),
    /// Every problem of every EdgeCache in the manifest, each once, one per line.
    #[error("{}", problems_text(.0))]
    Problems(Vec<(String, Vec<FieldError>)>),
    #[error("the manifest is not an edgecache.dev/v1alpha1 EdgeCache (got {0})")]
    WrongKind(String),
    #[error("cannot serialize the objects: {0}")]
    Serialize(#[from] serde_json::Error),
}

fn problems_text(docs: &[(String, Vec<FieldError>)]) -> String {
    let mut out = String::new();
    for (what, problems) in docs {
        let n = problems.len();
        out.push_str(&format!(
            "{what}: {n} problem{}\n",
            if n == 1 { "" } else { "s" }
        ));
        for p in problems {
            out.push_str(&format!("  {p}\n"));
        }
    }
    out.trim_end().to_string()
}

/// Render every object the operator would apply for `manifest` (one or more EdgeCaches in a
/// YAML stream), as a YAML multi-document stream in apply order. A manifest without a namespace
/// renders into `default`. Offline there is no uid, so the objects carry no owner reference.
///
/// The manifest is checked as `kubectl apply` and the API server would check it (unknown fields,
/// types, enums, patterns, bounds: the CRD's schema) and then as the operator does
/// ([`validate`]); every problem of every document is reported, each once.
pub fn render(manifest: &str, policy: &Policy) -> Result<String, Error> {
    use serde::Deserialize as _;
    let mut out = String::new();
    let mut problems = Vec::new();
    for (i, doc) in yaml_serde::Deserializer::from_str(manifest).enumerate() {
        let value = yaml_serde::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        match render_one(value, policy)? {
            Ok(text) => out.push_str(&text),
            Err((name, p)) => problems.push((format!("EdgeCache {name} (document {})", i + 1), p)),
        }
    }
    if !problems.is_empty() {
        return Err(Error::Problems(problems));
    }
    if out.is_empty() {
        return Err(Error::WrongKind("an empty manifest".into()));
    }
    Ok(out)
}

type Rendered = Result<String, (String, Vec<FieldError>)>;

fn render_one(value: yaml_serde::Value, policy: &Policy) -> Result<Rendered, Error> {
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let kind = value.get("kind").and_then(|v| v.as_str()).unwrap_or("");
    if api_version != "edgecache.dev/v1alpha1" || kind != "EdgeCache" {
        return Err(Error::WrongKind(format!("{api_version} {kind}")));
    }
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("(unnamed)")
        .to_string();
    let mut json = serde_json::to_value(&value)?;
    let mut problems = strict::check(&schema(), &mut json);
    let mut ec: EdgeCache = match serde_json::from_value(json) {
        Ok(ec) => ec,
        // What the schema does not catch (it catches every type and shape problem).
        Err(e) if problems.is_empty() => {
            return Ok(Err((
                name,
                vec![FieldError {
                    field: "(manifest)".into(),
                    reason: e.to_string(),
                }],
            )));
        }
        Err(_) => return Ok(Err((name, problems))),
    };
    if ec.metadata.namespace.is_none() {
        ec.metadata.namespace = Some("default".into());
    }
    let validated = match validate(&ec, policy) {
        Ok(v) => v,
        Err(validate::Error::InvalidSpec(more)) => {
            let seen = |f: &str| {
                problems
                    .iter()
                    .any(|p: &FieldError| p.field == f || f.starts_with(&format!("{}.", p.field)))
            };
            let more: Vec<FieldError> = more.into_iter().filter(|e| !seen(&e.field)).collect();
            problems.extend(more);
            return Ok(Err((name, problems)));
        }
        Err(e @ validate::Error::MissingMetadata(_)) => {
            problems.push(FieldError {
                field: "metadata".into(),
                reason: e.to_string(),
            });
            return Ok(Err((name, problems)));
        }
    };
    if !problems.is_empty() {
        return Ok(Err((name, problems)));
    }
    let desired = build(&validated);
    let secret = desired
        .admin_secret
        .metadata
        .name
        .as_deref()
        .unwrap_or_default();
    let mut out = format!(
        "# Secret {secret} (type Opaque, keys {}: the admin token, and {}: the key the pods \
         prove their hops to each other with) is created by the operator once, each 32 random \
         bytes hex-encoded, when it does not exist; it is never printed.\n",
        crate::build::ADMIN_TOKEN_KEY,
        crate::build::PEER_KEY_KEY
    );
    for c in validated.spec.tls.iter().flat_map(|t| &t.certificates) {
        out.push_str(&format!(
            "# Secret {} (type {}, keys {} and {}) must exist in namespace {}: the pods mount it \
             at {}/ (and reload it when it is renewed); the operator rolls nothing out until it \
             does. It is not the operator's and is not printed.\n",
            c.secret_name,
            crate::named_secrets::TLS_SECRET_TYPE,
            crate::validate::TLS_CERT_KEY,
            crate::validate::TLS_KEY_KEY,
            validated.namespace,
            crate::validate::tls_secret_dir(&c.secret_name),
        ));
    }
    for name in crate::validate::origin_ca_secrets(&validated.spec) {
        out.push_str(&format!(
            "# Secret {name} (any type, holding the PEM CA bundle the sites name) must exist in \
             namespace {}: the pods mount it at {}/; the operator rolls nothing out until it \
             does. It is not the operator's and is not printed.\n",
            validated.namespace,
            crate::validate::origin_ca_secret_dir(name),
        ));
    }
    for obj in desired.objects()? {
        out.push_str("---\n");
        out.push_str(&to_yaml(&obj)?);
    }
    Ok(Ok(out))
}

/// The CRD's `openAPIV3Schema` for v1alpha1.
fn schema() -> serde_json::Value {
    let crd = edgecache_api::schema::edgecache_crd();
    crd.spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(serde_json::Value::Null)
}
