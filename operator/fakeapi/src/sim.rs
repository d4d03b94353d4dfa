//! Label selectors, and the stand-in for the scheduler: which fake Nodes a DaemonSet's pods
//! would land on.

use std::collections::BTreeMap;

use serde_json::Value;

/// A parsed `labelSelector` query of equality requirements (`a=b,c==d`), what the operator
/// sends; anything else is refused (400), not approximated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector(Vec<(String, String)>);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|part| {
                let (k, v) = part
                    .split_once("==")
                    .or_else(|| part.split_once('='))
                    .filter(|(k, _)| !k.ends_with('!'))
                    .ok_or_else(|| format!("unsupported label selector requirement `{part}`"))?;
                Ok((k.trim().to_string(), v.trim().to_string()))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// The string map at `v[key]` (labels, nodeSelector).
pub fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a `matchExpressions` requirement (In, NotIn, Exists, DoesNotExist) holds.
fn node_requirement(req: &Value, labels: &BTreeMap<String, String>) -> bool {
    let label = labels.get(req["key"].as_str().unwrap_or(""));
    let listed = |l: &String| {
        req["values"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v.as_str() == Some(l)))
    };
    match req["operator"].as_str().unwrap_or("") {
        "In" => label.is_some_and(listed),
        "NotIn" => label.is_none_or(|l| !listed(l)),
        "Exists" => label.is_some(),
        "DoesNotExist" => label.is_none(),
        _ => false,
    }
}

/// Whether a pod with this spec would run on `node`: its nodeSelector and required node
/// affinity (`matchExpressions`). Taints are not modelled.
pub fn pod_fits_node(pod_spec: &Value, node: &Value) -> bool {
    let labels = string_map(node.pointer("/metadata/labels"));
    let selector = string_map(pod_spec.get("nodeSelector"));
    if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return false;
    }
    let Some(terms) = pod_spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    else {
        return true;
    };
    terms.iter().any(|t| {
        t["matchExpressions"]
            .as_array()
            .is_some_and(|e| !e.is_empty() && e.iter().all(|r| node_requirement(r, &labels)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let l = BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            ("tier".to_string(), "edge".to_string()),
        ]);
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web,tier=edge", true),
            ("app=api", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&l),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app!=api").is_err());
        assert!(LabelSelector::parse("app in (web)").is_err());
    }

    #[test]
    fn pods_fit_nodes_by_selector_and_affinity() {
        let node = |labels: Value| json!({"metadata": {"name": "n", "labels": labels}});
        let nvme = node(json!({"edgecache.dev/nvme": "true", "kubernetes.io/os": "linux"}));
        let ssd = node(json!({"ssd": "1", "kubernetes.io/os": "linux"}));
        let plain = node(json!({"kubernetes.io/os": "linux"}));
        let spec = json!({
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "edgecache.dev/nvme", "operator": "In", "values": ["true"]}]},
                {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}
            ]}}}
        });
        assert!(pod_fits_node(&spec, &nvme));
        assert!(pod_fits_node(&spec, &ssd));
        assert!(!pod_fits_node(&spec, &plain));
        assert!(pod_fits_node(&json!({}), &plain));
        assert!(!pod_fits_node(
            &json!({"nodeSelector": {"kubernetes.io/os": "windows"}}),
            &plain
        ));
    }
}
