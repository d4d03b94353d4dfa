//! Pure: the peer list of a sharded EdgeCache from its cache pods, and the peers file text the
//! data plane reads (`NAME ADDRESS` a line; see `edgecache-dataplane serve --peers`).
//!
//! A peer is a cache pod of this EdgeCache's DaemonSet that is ready, not terminating, bound to
//! a node and has an IP: its name is the node's name (what the pod gets as
//! `EDGECACHE_NODE_NAME`, stable across pod restarts, so a restart moves no key), its address
//! the pod IP and the client port. The list is sorted by name, so the same pods always give the
//! same bytes and an unchanged membership writes nothing.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Pod;

/// One line of the peers file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Peer {
    /// The node name.
    pub name: String,
    /// Pod IP and client port.
    pub addr: SocketAddr,
}

/// Whether the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether `pod` is controlled by the DaemonSet of this name (the EdgeCache's, which `apply`
/// refuses to take over when someone else made it): pods that merely carry the labels never
/// join the list.
pub fn controlled_by(pod: &Pod, daemon_set: &str) -> bool {
    pod.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|r| r.kind == "DaemonSet" && r.name == daemon_set && r.controller == Some(true))
}

/// The peer a pod stands for, if it may serve other nodes now.
fn peer(pod: &Pod, port: u16) -> Option<Peer> {
    if pod.metadata.deletion_timestamp.is_some() || !is_ready(pod) {
        return None;
    }
    let node = pod.spec.as_ref()?.node_name.clone()?;
    let ip: IpAddr = pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
    edgecache_api::dataplane::check_node_name(&node).ok()?;
    Some(Peer {
        name: node,
        addr: SocketAddr::new(ip, port),
    })
}

/// The peers among `pods` (the DaemonSet's pods), sorted by name; each node and each address
/// appears once (two pods on one node, which a DaemonSet has only while one is going: the first
/// by address is kept).
pub fn peers(pods: &[Pod], port: u16) -> Vec<Peer> {
    let mut all: Vec<Peer> = pods.iter().filter_map(|p| peer(p, port)).collect();
    all.sort();
    all.dedup_by(|b, a| a.name == b.name);
    let mut seen = std::collections::BTreeSet::new();
    all.retain(|p| seen.insert(p.addr));
    all
}

/// The peers file: a comment naming its maker, then `NAME ADDRESS` lines.
pub fn render(peers: &[Peer]) -> String {
    let mut text = String::from(
        "# Written by edgecache-operator: the ready cache pods (node name, pod IP:client port).\n",
    );
    for p in peers {
        text.push_str(&format!("{} {}\n", p.name, p.addr));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, ip: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web", "uid": "ds-uid", "controller": true}
            ]},
            "spec": {"nodeName": node, "containers": []},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    #[test]
    fn ready_pods_sorted_by_node_with_ip_and_client_port() {
        let pods = [
            pod("web-c", "node-c", "10.0.0.3", true),
            pod("web-a", "node-a", "10.0.0.1", true),
            pod("web-b", "node-b", "10.0.0.2", false),
            pod("web-6", "node-6", "fd00::6", true),
        ];
        let list = peers(&pods, 8080);
        assert_eq!(
            render(&list),
            "# Written by edgecache-operator: the ready cache pods (node name, pod IP:client port).\n\
             node-6 [fd00::6]:8080\nnode-a 10.0.0.1:8080\nnode-c 10.0.0.3:8080\n"
        );
        let mut reversed = pods.to_vec();
        reversed.reverse();
        assert_eq!(
            peers(&reversed, 8080),
            list,
            "order of the pods does not matter"
        );
    }

    #[test]
    fn terminating_unscheduled_and_ip_less_pods_are_left_out() {
        let terminating =
            crate::test_support::terminating(pod("web-a", "node-a", "10.0.0.1", true));
        let mut unscheduled = pod("web-b", "node-b", "10.0.0.2", true);
        unscheduled.spec.as_mut().unwrap().node_name = None;
        let no_ip = pod("web-c", "node-c", "", true);
        let bad_name = pod("web-d", "node d", "10.0.0.4", true);
        assert!(peers(&[terminating, unscheduled, no_ip, bad_name], 8080).is_empty());
    }

    #[test]
    fn one_line_per_node_and_per_address() {
        let pods = [
            pod("web-a2", "node-a", "10.0.0.9", true),
            pod("web-a1", "node-a", "10.0.0.1", true),
            pod("web-b", "node-b", "10.0.0.1", true),
        ];
        let list = peers(&pods, 80);
        assert_eq!(
            list,
            vec![Peer {
                name: "node-a".into(),
                addr: "10.0.0.1:80".parse().unwrap()
            }]
        );
    }

    #[test]
    fn only_pods_of_the_daemon_set() {
        let mine = pod("web-a", "node-a", "10.0.0.1", true);
        let mut stray = pod("other", "node-b", "10.0.0.2", true);
        stray.metadata.owner_references = None;
        assert!(controlled_by(&mine, "web"));
        assert!(!controlled_by(&mine, "api"));
        assert!(!controlled_by(&stray, "web"));
    }
}
