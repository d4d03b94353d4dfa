//! Pure: whether an EdgeCache's pods would collide with another EdgeCache's pods on some node,
//! decided from the list of EdgeCaches alone.
//!
//! Two EdgeCaches collide when they use the same cache directory (`storage.hostPath`, after
//! normalization: the data plane locks its store, so the second pod would crash-loop) or, both
//! on the host network, a common host port (`network.port` or `network.adminPort` of one equal
//! to either of the other's), and their pods could land on one node. Node overlap is decided
//! conservatively, without the Nodes: two EdgeCaches may share a node unless their
//! `spec.placement.nodeSelector`s require different values for one label key (the DaemonSets
//! follow node labels over time, so a node list now would not settle it).
//!
//! The earlier one wins (by creationTimestamp, then namespace/name); EdgeCaches are taken in
//! that order and each one is accepted unless it collides with one accepted before it, so an
//! EdgeCache refused for a conflict blocks no one. Objects being deleted and invalid specs hold
//! nothing (the latter get no DaemonSet).

use std::fmt;

use edgecache_api::v1alpha1::EdgeCache;
use kube::ResourceExt;

use crate::validate::{Policy, host_path, validate};

/// Why an EdgeCache waits: the earlier EdgeCache it collides with, and on what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// `namespace/name` of the earlier EdgeCache.
    pub other: String,
    /// What both would use on a node, in the user's words.
    pub what: String,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is also used by EdgeCache {}, created earlier, on nodes both may select; this \
             EdgeCache gets no DaemonSet until that one is deleted or changed",
            self.what, self.other
        )
    }
}

/// What one EdgeCache's pods hold on a node.
struct Claim<'a> {
    ec: &'a EdgeCache,
    host_path: String,
    /// Host ports with their field names; empty off the host network.
    host_ports: Vec<(u16, &'static str)>,
}

impl<'a> Claim<'a> {
    fn of(ec: &'a EdgeCache) -> Self {
        let n = &ec.spec.network;
        let host_path = host_path::normalize(&ec.spec.storage.host_path)
            .unwrap_or_else(|_| ec.spec.storage.host_path.clone());
        let host_ports = if n.host_network {
            let mut ports = vec![
                (n.port, "network.port"),
                (n.admin_port, "network.adminPort"),
            ];
            if let Some(tls) = &ec.spec.tls {
                ports.push((tls.port, "tls.port"));
            }
            ports
        } else {
            Vec::new()
        };
        Self {
            ec,
            host_path,
            host_ports,
        }
    }

    /// What `self` and `other` would both use, ignoring where their pods run.
    fn shared(&self, other: &Claim<'_>) -> Option<String> {
        if self.host_path == other.host_path {
            return Some(format!(
                "the cache directory storage.hostPath {}",
                self.host_path
            ));
        }
        let (port, field) = self
            .host_ports
            .iter()
            .find(|(p, _)| other.host_ports.iter().any(|(q, _)| p == q))?;
        Some(format!("host port {port} ({field}, on the host network)"))
    }

    /// Whether no node can match both node selectors (one key, two values).
    fn disjoint(&self, other: &Claim<'_>) -> bool {
        let a = &self.ec.spec.placement.node_selector;
        let b = &other.ec.spec.placement.node_selector;
        a.iter().any(|(k, v)| b.get(k).is_some_and(|w| w != v))
    }

    fn order_key(&self) -> (Option<i64>, String, String) {
        let created = self
            .ec
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second());
        (
            created,
            self.ec.namespace().unwrap_or_default(),
            self.ec.name_any(),
        )
    }
}

fn same_object(a: &EdgeCache, b: &EdgeCache) -> bool {
    a.namespace() == b.namespace() && a.name_any() == b.name_any()
}

/// Whether `a` and `b` would use a common cache directory or host port (wherever they run):
/// a change to one may change whether the other is refused.
pub fn shares_resources(a: &EdgeCache, b: &EdgeCache) -> bool {
    !same_object(a, b) && Claim::of(a).shared(&Claim::of(b)).is_some()
}

/// The conflict that keeps `me` from getting a DaemonSet, given every EdgeCache the operator
/// sees (`all` may or may not contain `me`; `me` is taken as given).
pub fn find(me: &EdgeCache, all: &[EdgeCache], policy: &Policy) -> Option<Conflict> {
    let mut claims: Vec<Claim<'_>> = all
        .iter()
        .filter(|ec| !same_object(ec, me))
        .chain(std::iter::once(me))
        .filter(|ec| ec.metadata.deletion_timestamp.is_none())
        .filter(|ec| same_object(ec, me) || validate(ec, policy).is_ok())
        .map(Claim::of)
        .collect();
    // Objects without a creationTimestamp (offline) sort first, as `None < Some`.
    claims.sort_by_key(Claim::order_key);
    let mut accepted: Vec<&Claim<'_>> = Vec::new();
    for c in &claims {
        let clash = accepted
            .iter()
            .filter(|a| !a.disjoint(c))
            .find_map(|a| a.shared(c).map(|what| (*a, what)));
        match (clash, same_object(c.ec, me)) {
            (Some((a, what)), true) => {
                return Some(Conflict {
                    other: format!(
                        "{}/{}",
                        a.ec.namespace().unwrap_or_default(),
                        a.ec.name_any()
                    ),
                    what,
                });
            }
            (None, true) => return None,
            (Some(_), false) => {}
            (None, false) => accepted.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::test_support::minimal_edgecache;

    fn ec(name: &str, created: i64, spec: &str) -> EdgeCache {
        let mut e = minimal_edgecache(spec);
        e.metadata.name = Some(name.into());
        e.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(1_800_000_000 + created).unwrap_or(Timestamp::UNIX_EPOCH),
        ));
        e
    }

    fn conflict(me: &EdgeCache, all: &[EdgeCache]) -> Option<Conflict> {
        find(me, all, &Policy::default())
    }

    const HOST: &str = "network:\n  hostNetwork: true\n";

    #[test]
    fn the_later_one_on_the_same_cache_path_is_refused_naming_the_earlier() {
        let a = ec("a", 0, "storage:\n  hostPath: /mnt/x\n");
        let b = ec("b", 10, "storage:\n  hostPath: /mnt//x/\n");
        let all = [a.clone(), b.clone()];
        assert_eq!(conflict(&a, &all), None);
        let c = conflict(&b, &all).unwrap();
        assert_eq!(c.other, "edge/a");
        assert_eq!(c.what, "the cache directory storage.hostPath /mnt/x");
        assert!(
            c.to_string().contains("EdgeCache edge/a, created earlier"),
            "{c}"
        );
    }

    #[test]
    fn same_creation_time_is_decided_by_name() {
        let a = ec("a", 0, "");
        let b = ec("b", 0, "");
        let all = [b.clone(), a.clone()];
        assert_eq!(conflict(&a, &all), None);
        assert_eq!(conflict(&b, &all).unwrap().other, "edge/a");
    }

    #[test]
    fn host_ports_collide_only_on_the_host_network() {
        let a = ec("a", 0, &format!("storage:\n  hostPath: /mnt/a\n{HOST}"));
        // b's client port is a's admin port.
        let b = ec(
            "b",
            1,
            "storage:\n  hostPath: /mnt/b\nnetwork:\n  hostNetwork: true\n  port: 9090\n  adminPort: 9091\n",
        );
        let c = conflict(&b, &[a.clone(), b.clone()]).unwrap();
        assert_eq!(
            c.what,
            "host port 9090 (network.adminPort, on the host network)"
        );
        // b's client port is the TLS port of an earlier EdgeCache.
        let t = ec(
            "t",
            0,
            &format!(
                "storage:\n  hostPath: /mnt/t\n{HOST}  port: 81\n  adminPort: 9191\ntls:\n  port: 8444\n  certificates:\n  - secretName: t-tls\n"
            ),
        );
        let b = ec(
            "b",
            1,
            "storage:\n  hostPath: /mnt/b\nnetwork:\n  hostNetwork: true\n  port: 8444\n  adminPort: 9091\n",
        );
        let c = conflict(&b, &[t, b.clone()]).unwrap();
        assert_eq!(c.what, "host port 8444 (tls.port, on the host network)");
        // Same ports, but b in the pod network: no collision.
        let b = ec("b", 1, "storage:\n  hostPath: /mnt/b\n");
        assert_eq!(conflict(&b, &[a, b.clone()]), None);
    }

    #[test]
    fn node_selectors_that_exclude_each_other_do_not_collide() {
        let a = ec("a", 0, "placement:\n  nodeSelector:\n    zone: a\n");
        let b = ec("b", 1, "placement:\n  nodeSelector:\n    zone: b\n");
        assert_eq!(conflict(&b, &[a.clone(), b.clone()]), None);
        // Different keys may both match one node: conservatively a conflict.
        let c = ec("c", 2, "placement:\n  nodeSelector:\n    rack: r1\n");
        assert_eq!(conflict(&c, &[a, c.clone()]).unwrap().other, "edge/a");
    }

    #[test]
    fn refused_deleted_and_invalid_ones_hold_nothing() {
        // a holds /mnt/x; b is refused for it; c shares only b's host port, so c runs.
        let a = ec("a", 0, "storage:\n  hostPath: /mnt/x\n");
        let b = ec("b", 1, &format!("storage:\n  hostPath: /mnt/x\n{HOST}"));
        let c = ec("c", 2, &format!("storage:\n  hostPath: /mnt/c\n{HOST}"));
        let all = [a.clone(), b.clone(), c.clone()];
        assert!(conflict(&b, &all).is_some());
        assert_eq!(conflict(&c, &all), None);

        let mut gone = a.clone();
        gone.metadata.deletion_timestamp = gone.metadata.creation_timestamp.clone();
        assert_eq!(conflict(&b, &[gone, b.clone()]), None);

        let invalid = ec("a", 0, "storage:\n  hostPath: /mnt/x\n  size: 1MiB\n");
        assert_eq!(conflict(&b, &[invalid, b.clone()]), None);
    }

    #[test]
    fn shared_resources_ignore_order_and_placement() {
        let a = ec("a", 0, "placement:\n  nodeSelector:\n    zone: a\n");
        let b = ec("b", 1, "placement:\n  nodeSelector:\n    zone: b\n");
        assert!(shares_resources(&a, &b) && shares_resources(&b, &a));
        assert!(!shares_resources(&a, &a));
        let c = ec("c", 1, "storage:\n  hostPath: /mnt/c\n");
        assert!(!shares_resources(&a, &c));
    }
}
