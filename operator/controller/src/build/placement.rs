//! Where the cache pods run: the NVMe (and, for `queue` steering, ADQ) default node affinity,
//! merged with the user's placement.
//!
//! Node affinity terms are ORed and the expressions inside one term are ANDed. The default is
//! two terms, "NFD says non-rotational disk" OR "labelled edgecache.dev/nvme", each with "and
//! labelled edgecache.dev/adq" for `queue` steering. A user's required terms are combined with
//! the default by AND: every user term is crossed with every default term.

use edgecache_api::SteeringMode;
use edgecache_api::v1alpha1::{ADQ_LABEL, NFD_NONROTATIONAL_LABEL, NVME_LABEL, PlacementSpec};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};

fn label_true(key: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: Some(vec!["true".into()]),
    }
}

/// The default required terms, or none when `nvmeNodesOnly` is off.
pub fn default_terms(placement: &PlacementSpec, steering: SteeringMode) -> Vec<NodeSelectorTerm> {
    if !placement.nvme_nodes_only {
        return Vec::new();
    }
    [NFD_NONROTATIONAL_LABEL, NVME_LABEL]
        .into_iter()
        .map(|disk| {
            let mut exprs = vec![label_true(disk)];
            if steering == SteeringMode::Queue {
                exprs.push(label_true(ADQ_LABEL));
            }
            NodeSelectorTerm {
                match_expressions: Some(exprs),
                match_fields: None,
            }
        })
        .collect()
}

/// The pod's affinity: the user's, with the default terms ANDed into its required node affinity.
pub fn affinity(placement: &PlacementSpec, steering: SteeringMode) -> Option<Affinity> {
    let defaults = default_terms(placement, steering);
    let mut affinity = placement.affinity.clone().unwrap_or_default();
    if !defaults.is_empty() {
        let mut node = affinity.node_affinity.take().unwrap_or_default();
        let user_terms = node
            .required_during_scheduling_ignored_during_execution
            .take()
            .map(|s| s.node_selector_terms)
            .unwrap_or_default();
        let terms = if user_terms.is_empty() {
            defaults
        } else {
            user_terms
                .iter()
                .flat_map(|u| defaults.iter().map(move |d| and(u, d)))
                .collect()
        };
        node.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
            node_selector_terms: terms,
        });
        affinity.node_affinity = Some(NodeAffinity { ..node });
    }
    (affinity != Affinity::default()).then_some(affinity)
}

fn and(a: &NodeSelectorTerm, b: &NodeSelectorTerm) -> NodeSelectorTerm {
    let cat = |x: &Option<Vec<NodeSelectorRequirement>>,
               y: &Option<Vec<NodeSelectorRequirement>>| {
        let v: Vec<_> = x.iter().chain(y.iter()).flatten().cloned().collect();
        (!v.is_empty()).then_some(v)
    };
    NodeSelectorTerm {
        match_expressions: cat(&a.match_expressions, &b.match_expressions),
        match_fields: cat(&a.match_fields, &b.match_fields),
    }
}
