//! The NetworkPolicy of an EdgeCache's pods, rendered when the install names the operator's
//! pods (`--operator-namespace`, `--operator-pod-label`; the chart does by default). Purges and
//! metrics go from the operator to each pod's IP on the admin port, so a default-deny policy in
//! the EdgeCache's namespace would stop them silently (issue 35 defect 9). Rendered per
//! EdgeCache by the operator, not by the chart: only the operator knows each EdgeCache's
//! namespace, pod labels and ports, and the policy goes with the EdgeCache (owner reference).
//!
//! Ingress only: the serving ports (`http`, and `https` with `spec.tls`) from anywhere, which
//! covers clients and the pods' peer fills (a hop goes to the owner's serving port); the admin
//! port from the operator's pods, from the EdgeCache's own pods and from the install's CIDRs
//! (`--admin-from-cidr`: the nodes' subnet, so that the API server's pod proxy and kubelets on
//! other nodes get through where the enforcer does not exempt node traffic). Egress is not restricted
//! here: an Egress policy would have to list every origin, and a pod selected by one allows
//! nothing else. Pods on the host network are not subject to NetworkPolicy (a node firewall
//! governs them).

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{child_meta, selector_labels};
use crate::validate::ValidatedEdgeCache;

/// The label every namespace carries with its own name (set by the API server).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// `None` unless the install names the operator's pods.
pub(super) fn network_policy(ec: &ValidatedEdgeCache) -> Option<NetworkPolicy> {
    let operator = ec.admin_clients.as_ref()?;
    let ports = |numbers: &[u16]| {
        numbers
            .iter()
            .map(|n| NetworkPolicyPort {
                port: Some(IntOrString::Int(i32::from(*n))),
                protocol: Some("TCP".into()),
                end_port: None,
            })
            .collect::<Vec<_>>()
    };
    let serving: Vec<u16> = std::iter::once(ec.spec.network.port)
        .chain(ec.spec.tls.as_ref().map(|t| t.port))
        .collect();
    let own_pods = LabelSelector {
        match_labels: Some(selector_labels(&ec.name)),
        ..LabelSelector::default()
    };
    let operator_pods = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(
                [(NAMESPACE_NAME_LABEL.to_string(), operator.namespace.clone())].into(),
            ),
            ..LabelSelector::default()
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(operator.pod_labels.clone()),
            ..LabelSelector::default()
        }),
        ip_block: None,
    };
    Some(NetworkPolicy {
        metadata: child_meta(ec, ec.name.clone()),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(own_pods.clone()),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    from: None,
                    ports: Some(ports(&serving)),
                },
                NetworkPolicyIngressRule {
                    from: Some(
                        [
                            operator_pods,
                            NetworkPolicyPeer {
                                pod_selector: Some(own_pods),
                                ..NetworkPolicyPeer::default()
                            },
                        ]
                        .into_iter()
                        .chain(operator.cidrs.iter().map(|cidr| NetworkPolicyPeer {
                            ip_block: Some(IPBlock {
                                cidr: cidr.clone(),
                                except: None,
                            }),
                            ..NetworkPolicyPeer::default()
                        }))
                        .collect(),
                    ),
                    ports: Some(ports(&[ec.spec.network.admin_port])),
                },
            ]),
            egress: None,
        }),
    })
}
