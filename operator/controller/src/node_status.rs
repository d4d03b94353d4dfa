//! Pure: `status.nodes` from the cache pods, and a summary of the failing ones for the
//! conditions. The reason and message of a pod that is not ready come from where Kubernetes
//! puts them: the scheduler's `PodScheduled` condition (a pod no node can take), the cache
//! container's waiting state (`ErrImagePull`, `ImagePullBackOff`, `CrashLoopBackOff` with the
//! last termination's exit code and message), its terminated state, the pod's phase, and last
//! the `Ready` condition itself (a running pod whose readiness probe fails).

use std::collections::BTreeMap;

use edgecache_api::v1alpha1::NodeStatus;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::build::CONTAINER;
use crate::peers::is_ready;
use crate::pod_metrics::PodMetrics;

/// Longest message kept per pod (kubelet messages can carry whole logs).
const MESSAGE_MAX: usize = 512;
/// Failing nodes named in a condition message; the rest are counted.
const NAMED_MAX: usize = 5;

/// Waiting (and, between restarts, terminated) reasons that will not clear without a human (a
/// fixed image, a fixed config, a runtime that can start the container).
const NEEDS_A_HUMAN: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "StartError",
    "ContainerCannotRun",
    "Unschedulable",
];

/// One entry per pod, sorted by node then pod, with the figures read from its `/metrics` (by
/// pod name) where there are some.
pub fn nodes(pods: &[Pod], metrics: &BTreeMap<String, PodMetrics>) -> Vec<NodeStatus> {
    let mut out: Vec<NodeStatus> = pods
        .iter()
        .map(|p| {
            let mut n = node(p);
            if let Some(m) = metrics.get(&n.pod) {
                n.io_engine = m.io_engine.clone();
                n.steering = m.steering.clone();
                n.disk_bytes = m.disk_bytes;
                n.objects = m.objects;
                n.hit_ratio = m.hit_ratio;
            }
            n
        })
        .collect();
    out.sort_by(|a, b| (&a.node, &a.pod).cmp(&(&b.node, &b.pod)));
    out
}

fn node(pod: &Pod) -> NodeStatus {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_else(|| name.clone());
    let container = cache_container(pod);
    let ready = is_ready(pod) && pod.metadata.deletion_timestamp.is_none();
    let (reason, message) = if ready {
        (None, None)
    } else {
        let (r, m) = why_not_ready(pod, container);
        (Some(r), m.map(|m| truncate(&m, MESSAGE_MAX)))
    };
    NodeStatus {
        node,
        pod: name,
        ready,
        reason,
        message,
        restarts: container.map_or(0, |c| c.restart_count),
        ..NodeStatus::default()
    }
}

fn cache_container(pod: &Pod) -> Option<&ContainerStatus> {
    let statuses = pod.status.as_ref()?.container_statuses.as_deref()?;
    statuses
        .iter()
        .find(|c| c.name == CONTAINER)
        .or(statuses.first())
}

fn non_empty(s: Option<&String>) -> Option<String> {
    s.filter(|s| !s.is_empty()).cloned()
}

fn why_not_ready(pod: &Pod, container: Option<&ContainerStatus>) -> (String, Option<String>) {
    if pod.metadata.deletion_timestamp.is_some() {
        return (
            "Terminating".into(),
            Some("the pod is being deleted".into()),
        );
    }
    let status = pod.status.clone().unwrap_or_default();
    let conditions = status.conditions.unwrap_or_default();
    if let Some(c) = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        let reason = non_empty(c.reason.as_ref()).unwrap_or_else(|| "Pending".into());
        return (reason, non_empty(c.message.as_ref()));
    }
    if let Some(state) = container.and_then(|c| c.state.as_ref()) {
        if let Some(w) = &state.waiting {
            let reason = non_empty(w.reason.as_ref()).unwrap_or_else(|| "Waiting".into());
            let mut message = non_empty(w.message.as_ref());
            if let Some(last) = container
                .and_then(|c| c.last_state.as_ref())
                .and_then(|s| s.terminated.as_ref())
            {
                let mut text = format!("last exit code {}", last.exit_code);
                if let Some(r) = non_empty(last.reason.as_ref()) {
                    text.push_str(&format!(" ({r})"));
                }
                if let Some(m) = non_empty(last.message.as_ref()) {
                    text.push_str(&format!(": {}", m.trim()));
                }
                message = Some(match message {
                    Some(m) => format!("{m}; {text}"),
                    None => text,
                });
            }
            return (reason, message);
        }
        if let Some(t) = &state.terminated {
            let reason = non_empty(t.reason.as_ref()).unwrap_or_else(|| "Terminated".into());
            let message = non_empty(t.message.as_ref())
                .map(|m| m.trim().to_string())
                .unwrap_or_else(|| format!("exit code {}", t.exit_code));
            return (reason, Some(message));
        }
    }
    if let Some(phase) = status.phase.as_deref()
        && phase != "Running"
    {
        let reason = non_empty(status.reason.as_ref()).unwrap_or_else(|| phase.to_string());
        return (reason, non_empty(status.message.as_ref()));
    }
    let message = conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| non_empty(c.message.as_ref()))
        .unwrap_or_else(|| "the readiness probe (/readyz on the admin port) fails".into());
    ("NotReady".into(), Some(message))
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

/// Whether a node's problem needs a human (Degraded) rather than time (a pod starting).
pub fn needs_a_human(n: &NodeStatus) -> bool {
    !n.ready
        && n.reason
            .as_deref()
            .is_some_and(|r| NEEDS_A_HUMAN.contains(&r))
}

/// `node-b (ImagePullBackOff: Back-off pulling image "x"), node-c (NotReady)` for the first
/// few of `nodes`, and how many more.
pub fn describe(nodes: &[&NodeStatus]) -> String {
    let mut parts: Vec<String> = nodes
        .iter()
        .take(NAMED_MAX)
        .map(|n| {
            let reason = n.reason.as_deref().unwrap_or("NotReady");
            match &n.message {
                Some(m) => format!("{} ({reason}: {m})", n.node),
                None => format!("{} ({reason})", n.node),
            }
        })
        .collect();
    if nodes.len() > NAMED_MAX {
        parts.push(format!("and {} more", nodes.len() - NAMED_MAX));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(name: &str, node: Option<&str>, status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": []},
            "status": status,
        }))
        .unwrap()
    }

    /// The cache container waiting with this reason and message.
    fn waiting(reason: &str, message: &str, restarts: i32) -> Value {
        json!({"name": "dataplane", "ready": false, "restartCount": restarts, "image": "i",
               "imageID": "", "state": {"waiting": {"reason": reason, "message": message}}})
    }

    fn not_ready() -> Value {
        json!({"type": "Ready", "status": "False", "reason": "ContainersNotReady",
               "message": "containers with unready status: [dataplane]"})
    }

    #[test]
    fn a_ready_pod_has_no_reason() {
        let p = pod(
            "web-a",
            Some("node-a"),
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "dataplane", "ready": true, "restartCount": 2,
                       "image": "i", "imageID": "", "state": {"running": {}}}]}),
        );
        assert_eq!(
            nodes(std::slice::from_ref(&p), &BTreeMap::new()),
            vec![NodeStatus {
                node: "node-a".into(),
                pod: "web-a".into(),
                ready: true,
                reason: None,
                message: None,
                restarts: 2,
                ..NodeStatus::default()
            }]
        );
        let metrics = BTreeMap::from([(
            "web-a".to_string(),
            PodMetrics {
                io_engine: Some("uring".into()),
                hit_ratio: Some(0.5),
                ..PodMetrics::default()
            },
        )]);
        let n = &nodes(&[p], &metrics)[0];
        assert_eq!(
            (n.io_engine.as_deref(), n.hit_ratio),
            (Some("uring"), Some(0.5))
        );
    }

    #[test]
    fn image_pull_back_off_with_the_kubelet_message() {
        let p = pod(
            "web-b",
            Some("node-b"),
            json!({"phase": "Pending", "conditions": [not_ready()], "containerStatuses": [
                waiting("ImagePullBackOff", "Back-off pulling image \"ghcr.io/x:9\"", 0)]}),
        );
        let n = &nodes(&[p], &BTreeMap::new())[0];
        assert_eq!(n.reason.as_deref(), Some("ImagePullBackOff"));
        assert_eq!(
            n.message.as_deref(),
            Some("Back-off pulling image \"ghcr.io/x:9\"")
        );
        assert!(needs_a_human(n));
        assert_eq!(
            describe(&[n]),
            "node-b (ImagePullBackOff: Back-off pulling image \"ghcr.io/x:9\")"
        );
    }

    #[test]
    fn crash_loop_carries_the_last_termination_message() {
        let mut container = waiting(
            "CrashLoopBackOff",
            "back-off 5m0s restarting failed container=dataplane",
            7,
        );
        container["lastState"] = json!({"terminated": {"exitCode": 2, "reason": "Error",
            "message": "storage.dir /var/cache/edgecache: not empty and not ours\n"}});
        let p = pod(
            "web-c",
            Some("node-c"),
            json!({"phase": "Running", "conditions": [not_ready()], "containerStatuses": [container]}),
        );
        let n = &nodes(&[p], &BTreeMap::new())[0];
        assert_eq!(n.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(
            n.message.as_deref(),
            Some(
                "back-off 5m0s restarting failed container=dataplane; last exit code 2 (Error): \
                 storage.dir /var/cache/edgecache: not empty and not ours"
            )
        );
        assert_eq!(n.restarts, 7);
    }

    #[test]
    fn a_container_the_runtime_cannot_start_needs_a_human() {
        // runc refusing the container (issue 35 defect 20): RunContainerError while restarting,
        // and StartError as the terminated state between two attempts.
        let message = "failed to create containerd task: runc create failed: unable to start \
                       container process: unable to apply caps: operation not permitted";
        let mut container = waiting("RunContainerError", message, 3);
        container["lastState"] = json!({"terminated": {"exitCode": 128, "reason": "StartError",
            "message": message}});
        let p = pod(
            "web-g",
            Some("node-g"),
            json!({"phase": "Pending", "conditions": [not_ready()], "containerStatuses": [container]}),
        );
        let n = &nodes(&[p], &BTreeMap::new())[0];
        assert_eq!(n.reason.as_deref(), Some("RunContainerError"));
        assert!(
            n.message
                .as_deref()
                .is_some_and(|m| m.contains("last exit code 128 (StartError)")),
            "{n:?}"
        );
        assert_eq!(n.restarts, 3);
        assert!(needs_a_human(n));
        let between = pod(
            "web-h",
            Some("node-h"),
            json!({"phase": "Running", "conditions": [not_ready()], "containerStatuses": [{
                "name": "dataplane", "ready": false, "restartCount": 4, "image": "i", "imageID": "",
                "state": {"terminated": {"exitCode": 128, "reason": "StartError", "message": message}}}]}),
        );
        let n = &nodes(&[between], &BTreeMap::new())[0];
        assert_eq!(n.reason.as_deref(), Some("StartError"));
        assert!(needs_a_human(n));
    }

    #[test]
    fn unschedulable_pending_pod_is_named_by_its_pod() {
        let p = pod(
            "web-d",
            None,
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient memory."}]}),
        );
        let n = &nodes(&[p], &BTreeMap::new())[0];
        assert_eq!(
            (n.node.as_str(), n.reason.as_deref(), n.message.as_deref()),
            (
                "web-d",
                Some("Unschedulable"),
                Some("0/3 nodes are available: 3 Insufficient memory.")
            )
        );
    }

    #[test]
    fn running_but_unready_and_terminating() {
        let running = pod(
            "web-e",
            Some("node-e"),
            json!({"phase": "Running", "conditions": [not_ready()],
                   "containerStatuses": [{"name": "dataplane", "ready": false, "restartCount": 0,
                       "image": "i", "imageID": "", "state": {"running": {}}}]}),
        );
        let going = crate::test_support::terminating(pod(
            "web-f",
            Some("node-f"),
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
        ));
        let ns = nodes(&[going, running], &BTreeMap::new());
        assert_eq!(ns[0].node, "node-e", "sorted by node");
        assert_eq!(ns[0].reason.as_deref(), Some("NotReady"));
        assert_eq!(
            ns[0].message.as_deref(),
            Some("containers with unready status: [dataplane]")
        );
        assert!(!needs_a_human(&ns[0]));
        assert_eq!(ns[1].reason.as_deref(), Some("Terminating"));
        assert!(!ns[1].ready);
    }

    #[test]
    fn long_messages_are_cut_and_many_nodes_counted() {
        assert_eq!(truncate("ab€cd", 3), "ab...");
        let n = NodeStatus {
            node: "n".into(),
            pod: "p".into(),
            ..NodeStatus::default()
        };
        let all: Vec<&NodeStatus> = std::iter::repeat_n(&n, 7).collect();
        assert!(describe(&all).ends_with("n (NotReady), and 2 more"));
    }
}
