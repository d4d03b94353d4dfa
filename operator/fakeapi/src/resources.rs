//! The resource kinds the fake serves, and how a request path maps onto one.

use std::collections::BTreeMap;

/// What the fake knows about one resource (one group/version/plural).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    /// Lower-case plural as it appears in URLs.
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Whether `/status` is a separate subresource: then writes to the main resource keep the
    /// stored status, and writes to `/status` change nothing but the status.
    pub status_subresource: bool,
}

impl ResourceInfo {
    pub fn new(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status_subresource: bool,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource,
        }
    }

    /// The served version of a CustomResourceDefinition (its first version).
    pub fn from_crd(crd: &serde_json::Value) -> Option<Self> {
        let spec = &crd["spec"];
        let version = spec["versions"].get(0)?;
        Some(Self::new(
            spec["group"].as_str()?,
            version["name"].as_str()?,
            spec["names"]["plural"].as_str()?,
            spec["names"]["kind"].as_str()?,
            spec["scope"] == "Namespaced",
            version["subresources"].get("status").is_some(),
        ))
    }

    /// `group/version/plural`, the store's resource key.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.group, self.version, self.plural)
    }

    /// `apiVersion` of the objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The resources served by default: what the EdgeCache operator and kube-runtime touch.
pub fn defaults() -> BTreeMap<String, ResourceInfo> {
    [
        ResourceInfo::new("", "v1", "configmaps", "ConfigMap", true, false),
        ResourceInfo::new("", "v1", "services", "Service", true, true),
        ResourceInfo::new("", "v1", "serviceaccounts", "ServiceAccount", true, false),
        ResourceInfo::new("", "v1", "secrets", "Secret", true, false),
        ResourceInfo::new("", "v1", "pods", "Pod", true, true),
        ResourceInfo::new("", "v1", "events", "Event", true, false),
        ResourceInfo::new("", "v1", "nodes", "Node", false, true),
        ResourceInfo::new("", "v1", "namespaces", "Namespace", false, true),
        ResourceInfo::new("apps", "v1", "daemonsets", "DaemonSet", true, true),
        ResourceInfo::new("apps", "v1", "deployments", "Deployment", true, true),
        ResourceInfo::new("events.k8s.io", "v1", "events", "Event", true, false),
        ResourceInfo::new(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            false,
        ),
        ResourceInfo::new("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        ResourceInfo::new(
            "edgecache.dev",
            "v1alpha1",
            "edgecaches",
            "EdgeCache",
            true,
            true,
        ),
        ResourceInfo::new(
            "edgecache.dev",
            "v1alpha1",
            "edgecachepurges",
            "EdgeCachePurge",
            true,
            true,
        ),
    ]
    .into_iter()
    .map(|r| (r.key(), r))
    .collect()
}

/// A parsed request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `group/version/plural`.
    pub resource: String,
    /// Namespace from the path; `None` for cluster-scoped resources and all-namespace lists.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `status`, or another subresource name.
    pub subresource: Option<String>,
}

/// Parse `/api/v1/...` or `/apis/GROUP/VERSION/...`.
pub fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] => (Some(ns.to_string()), {
            let mut v = vec![*plural];
            v.extend_from_slice(tail);
            v
        }),
        other => (None, other.to_vec()),
    };
    let plural = rest.first()?;
    Some(Target {
        resource: format!("{group}/{version}/{plural}"),
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
    })
}

/// Decode an `application/x-www-form-urlencoded` query into pairs.
pub fn parse_query(query: Option<&str>) -> BTreeMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("/apis/apps/v1/namespaces/edge/daemonsets/web/status"),
            Some(Target {
                resource: "apps/v1/daemonsets".into(),
                namespace: Some("edge".into()),
                name: Some("web".into()),
                subresource: Some("status".into()),
            })
        );
        assert_eq!(
            parse_path("/api/v1/nodes"),
            Some(Target {
                resource: "/v1/nodes".into(),
                namespace: None,
                name: None,
                subresource: None,
            })
        );
        assert_eq!(
            parse_path("/apis/edgecache.dev/v1alpha1/edgecaches").map(|t| t.resource),
            Some("edgecache.dev/v1alpha1/edgecaches".into())
        );
        assert_eq!(parse_path("/healthz"), None);
    }

    #[test]
    fn queries() {
        let q = parse_query(Some(
            "&watch=true&labelSelector=app.kubernetes.io%2Fname%3Dedgecache&x=a+b",
        ));
        assert_eq!(q["watch"], "true");
        assert_eq!(q["labelSelector"], "app.kubernetes.io/name=edgecache");
        assert_eq!(q["x"], "a b");
    }
}
