//! Selectors, and the stand-in for the DaemonSet controller and scheduler: which fake Nodes a
//! DaemonSet's pods would land on, and the status it would report.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` query (`a=b,c!=d,e,!f,g in (h,i),j notin (k)`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector(Vec<Req>);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        let mut rest = s.trim();
        while !rest.is_empty() {
            // Split at the next comma outside parentheses.
            let mut depth = 0;
            let end = rest
                .char_indices()
                .find(|(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    *c == ',' && depth == 0
                })
                .map(|(i, _)| i)
                .unwrap_or(rest.len());
            let part = rest[..end].trim();
            rest = rest.get(end + 1..).unwrap_or("").trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_req(part)?);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
        })
    }
}

fn parse_req(part: &str) -> Result<Req, String> {
    let set = |s: &str| -> Vec<String> {
        s.trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect()
    };
    if let Some(k) = part.strip_prefix('!') {
        return Ok(Req::NotExists(k.trim().into()));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Req::NotEq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Req::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = part.split_once(" notin ") {
        return Ok(Req::NotIn(k.trim().into(), set(v)));
    }
    if let Some((k, v)) = part.split_once(" in ") {
        return Ok(Req::In(k.trim().into(), set(v)));
    }
    if part.contains(' ') || part.contains('(') {
        return Err(format!("unsupported label selector requirement `{part}`"));
    }
    Ok(Req::Exists(part.into()))
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

/// Whether a `matchExpressions` requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) holds.
fn node_requirement(req: &Value, labels: &BTreeMap<String, String>) -> bool {
    let key = req["key"].as_str().unwrap_or("");
    let values: Vec<&str> = req["values"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let label = labels.get(key);
    let num = |s: &str| s.parse::<i64>().ok();
    match req["operator"].as_str().unwrap_or("") {
        "In" => label.is_some_and(|l| values.contains(&l.as_str())),
        "NotIn" => label.is_none_or(|l| !values.contains(&l.as_str())),
        "Exists" => label.is_some(),
        "DoesNotExist" => label.is_none(),
        "Gt" => {
            matches!((label.and_then(|l| num(l)), values.first().and_then(|v| num(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((label.and_then(|l| num(l)), values.first().and_then(|v| num(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// Taints every DaemonSet pod tolerates (the DaemonSet controller adds these tolerations).
const DAEMONSET_TOLERATED: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/unschedulable",
];

fn tolerates(tolerations: &[Value], taint: &Value, host_network: bool) -> bool {
    let key = taint["key"].as_str().unwrap_or("");
    if DAEMONSET_TOLERATED.contains(&key)
        || (host_network && key == "node.kubernetes.io/network-unavailable")
    {
        return true;
    }
    let effect = taint["effect"].as_str().unwrap_or("");
    let value = taint["value"].as_str().unwrap_or("");
    tolerations.iter().any(|t| {
        let t_key = t["key"].as_str().unwrap_or("");
        let t_effect = t["effect"].as_str().unwrap_or("");
        let key_ok = t_key.is_empty() || t_key == key;
        let effect_ok = t_effect.is_empty() || t_effect == effect;
        let value_ok = match t["operator"].as_str().unwrap_or("Equal") {
            "Exists" => true,
            _ => t["value"].as_str().unwrap_or("") == value,
        };
        key_ok && effect_ok && value_ok
    })
}

/// Whether a pod with this spec would run on `node` (nodeSelector, required node affinity,
/// NoSchedule/NoExecute taints).
pub fn pod_fits_node(pod_spec: &Value, node: &Value) -> bool {
    let labels = string_map(node.pointer("/metadata/labels"));
    let selector = string_map(pod_spec.get("nodeSelector"));
    if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return false;
    }
    if let Some(terms) = pod_spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    {
        let name = node.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let fields = BTreeMap::from([("metadata.name".to_string(), name.to_string())]);
        let term_ok = |t: &Value| {
            let exprs = t["matchExpressions"].as_array();
            let fexprs = t["matchFields"].as_array();
            if exprs.is_none_or(Vec::is_empty) && fexprs.is_none_or(Vec::is_empty) {
                return false;
            }
            exprs.into_iter().flatten().all(|r| node_requirement(r, &labels))
                && fexprs.into_iter().flatten().all(|r| node_requirement(r, &fields))
        };
        if !terms.iter().any(term_ok) {
            return false;
        }
    }
    let tolerations = pod_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let host_network = pod_spec["hostNetwork"].as_bool().unwrap_or(false);
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
        .all(|t| tolerates(&tolerations, t, host_network))
}

/// The status the DaemonSet controller would report for `ds` over `nodes`: `updated` pods of
/// the current template (every scheduled pod when `None`), ready when `pods_ready`.
pub fn daemonset_status(
    ds: &Value,
    nodes: &[Value],
    pods_ready: bool,
    updated: Option<i64>,
) -> Value {
    let empty = json!({});
    let pod_spec = ds.pointer("/spec/template/spec").unwrap_or(&empty);
    let desired = i64::try_from(nodes.iter().filter(|n| pod_fits_node(pod_spec, n)).count())
        .unwrap_or(i64::MAX);
    let ready = if pods_ready { desired } else { 0 };
    let updated = updated.unwrap_or(desired).min(desired);
    let mut status = json!({
        "currentNumberScheduled": desired,
        "desiredNumberScheduled": desired,
        "numberMisscheduled": 0,
        "numberReady": ready,
        "updatedNumberScheduled": updated,
        "numberAvailable": ready,
        "observedGeneration": ds.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
    });
    if desired > ready {
        status["numberUnavailable"] = json!(desired - ready);
    }
    status
}

/// Pods a rollout replaces per step: the DaemonSet's `maxUnavailable` (a count, or a percentage
/// of `desired` rounded up), at least 1.
pub fn rollout_step(ds: &Value, desired: i64) -> i64 {
    let mu = ds.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable");
    let n = match mu {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(1),
        Some(Value::String(s)) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map(|p| (desired * p + 99) / 100)
            .unwrap_or(1),
        _ => 1,
    };
    n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors() {
        let l = labels(&[("app", "web"), ("tier", "edge")]);
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web,tier=edge", true),
            ("app=api", false),
            ("app!=api", true),
            ("tier", true),
            ("!tier", false),
            ("missing", false),
            ("app in (web,api)", true),
            ("app notin (web)", false),
            ("app in (api),tier", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&l),
                want,
                "{sel}"
            );
        }
    }

    fn node(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})
    }

    #[test]
    fn pods_fit_nodes_by_selector_affinity_and_taints() {
        let nvme = node(
            "a",
            json!({"edgecache.dev/nvme": "true", "kubernetes.io/os": "linux"}),
            json!([]),
        );
        let plain = node("b", json!({"kubernetes.io/os": "linux"}), json!([]));
        let tainted = node(
            "c",
            json!({"edgecache.dev/nvme": "true", "kubernetes.io/os": "linux"}),
            json!([{"key": "dedicated", "value": "cache", "effect": "NoSchedule"}]),
        );
        let spec = json!({
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "edgecache.dev/nvme", "operator": "In", "values": ["true"]}]},
                {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}
            ]}}}
        });
        assert!(pod_fits_node(&spec, &nvme));
        assert!(!pod_fits_node(&spec, &plain));
        assert!(!pod_fits_node(&spec, &tainted));
        let mut tolerant = spec.clone();
        tolerant["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
        assert!(pod_fits_node(&tolerant, &tainted));
        // DaemonSet pods tolerate the node-condition taints.
        let not_ready = node(
            "d",
            json!({"edgecache.dev/nvme": "true", "kubernetes.io/os": "linux"}),
            json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
        );
        assert!(pod_fits_node(&spec, &not_ready));

        let ds = json!({"metadata": {"generation": 3}, "spec": {"template": {"spec": spec}}});
        let st = daemonset_status(
            &ds,
            &[nvme.clone(), plain.clone(), tainted.clone()],
            true,
            None,
        );
        assert_eq!(st["desiredNumberScheduled"], 1);
        assert_eq!(st["numberReady"], 1);
        assert_eq!(st["observedGeneration"], 3);
        let st = daemonset_status(&ds, std::slice::from_ref(&nvme), false, None);
        assert_eq!(st["numberReady"], 0);
        assert_eq!(st["numberUnavailable"], 1);
        let st = daemonset_status(&ds, &[nvme], true, Some(0));
        assert_eq!(st["updatedNumberScheduled"], 0);
    }

    #[test]
    fn rollout_steps() {
        let ds = |mu: Value| json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": mu}}}});
        assert_eq!(rollout_step(&ds(json!(2)), 10), 2);
        assert_eq!(rollout_step(&ds(json!("25%")), 10), 3);
        assert_eq!(rollout_step(&ds(json!("1%")), 10), 1);
        assert_eq!(rollout_step(&json!({}), 10), 1);
    }
}
