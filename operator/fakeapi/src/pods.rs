//! The pods the simulated DaemonSet controller (and kubelet) makes: one per fitting node, named
//! `DAEMONSET-NODE`, bound to the node, with the template's labels and a controller owner
//! reference to the DaemonSet, an IP of its own (the node's with `hostNetwork`), and the status
//! a running pod reports: `Ready` as [`crate::FakeApiServer::set_pods_ready`] says, or whatever
//! [`crate::FakeApiServer::set_pod_status`] put there (an image pull failure, a crash loop).

use serde_json::{Value, json};

/// Resource key of Pods.
pub const PODS: &str = "/v1/pods";

/// The name of the DaemonSet's pod on `node`.
pub fn pod_name(daemon_set: &str, node: &str) -> String {
    format!("{daemon_set}-{node}")
}

/// The `n`th address of a private range (`10.244.0.1` up), for pod or node IPs.
pub fn address(prefix: &str, n: u32) -> String {
    format!("{prefix}.{}.{}", n / 250, n % 250 + 1)
}

/// A new pod of `ds` on `node`.
pub fn new_pod(ds: &Value, node: &str) -> Value {
    let ds_name = ds
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let template = ds.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
    spec["nodeName"] = json!(node);
    let mut metadata = json!({
        "name": pod_name(ds_name, node),
        "namespace": ds.pointer("/metadata/namespace").cloned().unwrap_or(json!("default")),
        "ownerReferences": [{
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": ds_name,
            "uid": ds.pointer("/metadata/uid").cloned().unwrap_or(json!("")),
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    for key in ["labels", "annotations"] {
        if let Some(v) = template.pointer(&format!("/metadata/{key}")) {
            metadata[key] = v.clone();
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// What the kubelet reports for a pod whose containers run: `Ready` as given.
pub fn running_status(spec: &Value, ip: &str, ready: bool) -> Value {
    let flag = if ready { "True" } else { "False" };
    let containers: Vec<Value> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": ready,
                "restartCount": 0,
                "started": true,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            })
        })
        .collect();
    let mut ready_condition = json!({"type": "Ready", "status": flag});
    if !ready {
        ready_condition["reason"] = json!("ContainersNotReady");
        let names: Vec<&str> = containers
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        ready_condition["message"] = json!(format!(
            "containers with unready status: [{}]",
            names.join(" ")
        ));
    }
    json!({
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": flag},
            ready_condition,
        ],
        "containerStatuses": containers,
    })
}

/// Whether a pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_of_a_daemon_set() {
        let ds = json!({
            "metadata": {"name": "web", "namespace": "edge", "uid": "u1"},
            "spec": {"template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "dataplane", "image": "img:1"}]}
            }}
        });
        let mut pod = new_pod(&ds, "node-a");
        pod["status"] = running_status(&pod["spec"], "10.244.0.1", true);
        assert_eq!(pod["metadata"]["name"], "web-node-a");
        assert_eq!(pod["metadata"]["labels"]["app"], "web");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(pod["spec"]["nodeName"], "node-a");
        assert_eq!(pod["status"]["podIP"], "10.244.0.1");
        assert!(is_ready(&pod));
        let st = running_status(&pod["spec"], "10.244.0.1", false);
        assert_eq!(
            st["conditions"][3]["message"],
            "containers with unready status: [dataplane]"
        );
        assert!(!is_ready(&json!({"status": st})));
        assert_eq!(address("10.244", 0), "10.244.0.1");
        assert_eq!(address("10.244", 251), "10.244.1.2");
    }
}
