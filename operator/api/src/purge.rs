//! The `EdgeCachePurge` custom resource (edgecache.dev/v1alpha1, short name `ecp`).
//!
//! One `EdgeCachePurge` asks every data-plane pod of one `EdgeCache` (same namespace) to purge
//! some URLs, URL prefixes, tags, or everything, hard or soft. The operator delivers it to each
//! pod's authenticated admin endpoint, dated at the resource's creationTimestamp (so a pod that
//! gets it late still purges what it stored before the purge was made, to the second), and
//! records each pod's confirmation in the status. The spec is immutable: a purge is an event, and what
//! a pod confirmed must stay what the resource says.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A purge of one EdgeCache's pods.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[kube(
    group = "edgecache.dev",
    version = "v1alpha1",
    kind = "EdgeCachePurge",
    plural = "edgecachepurges",
    singular = "edgecachepurge",
    shortname = "ecp",
    category = "edgecache-all",
    namespaced,
    status = "EdgeCachePurgeStatus",
    derive = "PartialEq",
    doc = "A purge (URLs, prefixes, tags or everything; hard or soft) sent to every data-plane pod of an EdgeCache.",
    printcolumn = r#"{"name":"EdgeCache","type":"string","description":"The EdgeCache whose pods are purged","jsonPath":".spec.edgeCache"}"#,
    printcolumn = r#"{"name":"Kind","type":"string","description":"What is purged: urls, prefixes, tags or all (soft: marked stale)","jsonPath":".status.kind"}"#,
    printcolumn = r#"{"name":"Complete","type":"string","description":"Whether every current pod of the EdgeCache confirmed the purge","jsonPath":".status.conditions[?(@.type==\"Complete\")].status"}"#,
    printcolumn = r#"{"name":"Nodes confirmed","type":"string","description":"Pods that confirmed / current pods","jsonPath":".status.confirmed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(
    "(has(self.urls) && size(self.urls) > 0 ? 1 : 0) + (has(self.prefixes) && size(self.prefixes) > 0 ? 1 : 0) + (has(self.tags) && size(self.tags) > 0 ? 1 : 0) + (has(self.all) && self.all ? 1 : 0) == 1"
).message("set exactly one of urls, prefixes, tags or all: true"))]
#[x_kube(validation = Rule::new(
    "self == oldSelf"
).message("spec is immutable: a purge is an event; create another EdgeCachePurge"))]
#[serde(rename_all = "camelCase")]
pub struct EdgeCachePurgeSpec {
    /// Name of the EdgeCache (in the same namespace) whose pods are purged.
    #[schemars(length(min = 1, max = 253))]
    pub edge_cache: String,
    /// Absolute URLs (`http://host/path?query`), each with every variant stored for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 8192)))]
    pub urls: Vec<String>,
    /// URL prefixes (`http://host/img/`): every URL starting with one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 8192)))]
    pub prefixes: Vec<String>,
    /// Tags from the origin's `Surrogate-Key` or `Cache-Tag` response headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 8192)))]
    pub tags: Vec<String>,
    /// Everything the pods stored before the purge. Default: false.
    #[serde(default)]
    pub all: bool,
    /// Mark the objects stale instead of removing them: the next request revalidates, and
    /// stale-while-revalidate and stale-if-error still apply. Default: false.
    #[serde(default)]
    pub soft: bool,
}

impl EdgeCachePurgeSpec {
    /// What the purge names, for the `Kind` column: `urls`, `prefixes`, `tags` or `all`, with
    /// `, soft` for a soft purge.
    pub fn kind(&self) -> String {
        let what = if !self.urls.is_empty() {
            "urls"
        } else if !self.prefixes.is_empty() {
            "prefixes"
        } else if !self.tags.is_empty() {
            "tags"
        } else {
            "all"
        };
        if self.soft {
            format!("{what}, soft")
        } else {
            what.to_string()
        }
    }
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EdgeCachePurgeStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Complete`: every current pod of the EdgeCache confirmed the purge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// What the purge names (the `Kind` column): `urls`, `prefixes`, `tags` or `all`, with
    /// `, soft` for a soft purge.
    #[serde(default)]
    pub kind: String,
    /// Current pods that confirmed, out of the current pods (`2/3`).
    #[serde(default)]
    pub confirmed: String,
    /// The confirmation of each current pod that confirmed. Always written (an empty list
    /// clears the entries of pods that went away).
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["pod".into()]))]
    pub nodes: Vec<PurgeNodeStatus>,
    /// The current pods that have not confirmed yet, and why.
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["pod".into()]))]
    pub pending: Vec<PurgePendingStatus>,
}

/// One pod's confirmation.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PurgeNodeStatus {
    /// The pod that confirmed.
    pub pod: String,
    /// Its uid: a new pod of the same name (or on the same node) is sent the purge again.
    pub pod_uid: String,
    /// The node name the pod reported (its `spec.nodeName` when it reported none).
    pub node: String,
    /// When the operator got the confirmation (RFC 3339).
    pub confirmed_at: String,
    /// Objects the pod removed at once (URL purges; rules for prefixes, tags and `all` are
    /// checked at lookup, so they report 0). A repeated delivery reports 0.
    #[serde(default)]
    pub objects: u64,
}

/// A current pod that has not confirmed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PurgePendingStatus {
    /// The pod.
    pub pod: String,
    /// Its node (`spec.nodeName`), empty when not scheduled yet.
    #[serde(default)]
    pub node: String,
    /// Why it has not confirmed (not ready, unreachable, refused the token, ...).
    pub reason: String,
}

impl EdgeCachePurgeStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Condition types of an EdgeCachePurge.
pub mod condition {
    /// Every current pod of the EdgeCache confirmed the purge.
    pub const COMPLETE: &str = "Complete";
}
