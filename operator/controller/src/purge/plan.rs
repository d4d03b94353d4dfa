//! Pure decisions of the purge controller: an `EdgeCachePurge` to the admin calls a pod gets,
//! pods to the views the controller needs, a pod's answer to a confirmation, and pods plus
//! confirmations to the status (which pods still need the purge, and whether it is complete).
//! Nothing here talks to the API server or to a pod.

use std::collections::BTreeMap;
use std::net::IpAddr;

use edgecache_api::purge::{
    EdgeCachePurge, EdgeCachePurgeStatus, PurgeNodeStatus, PurgePendingStatus, condition,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;

use crate::status::set_condition;

/// How many pods a condition message names before it says "and N more".
const NAMED_IN_MESSAGE: usize = 5;

/// One admin call: `POST path_and_query` on each pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminCall {
    /// The purge id the data plane keys the rule by (a repeated id is a no-op there).
    pub id: String,
    /// `/purge?id=..&tag=..&at=..` (with `soft` for a soft purge).
    pub path_and_query: String,
}

/// Why a purge cannot be turned into calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The object has no uid or creationTimestamp yet (never stored by the API server).
    #[error("the EdgeCachePurge has no {0} yet")]
    NotStored(&'static str),
    /// The spec names nothing, or more than one kind (the CRD's CEL rule refuses both; an
    /// object stored before that rule can still have it).
    #[error("set exactly one of urls, prefixes, tags or all: true")]
    Selectors,
}

/// The admin calls every pod gets for `purge`: one per URL, prefix or tag (or one for `all`),
/// in spec order, each with the id `UID-INDEX` and `at` = the end of the creationTimestamp's
/// second in Unix seconds, so a late delivery purges what the pod stored before the purge was
/// made (and within its second), and nothing it stored later.
pub fn calls(purge: &EdgeCachePurge) -> Result<Vec<AdminCall>, PlanError> {
    let uid = purge
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or(PlanError::NotStored("uid"))?;
    let at = purge
        .metadata
        .creation_timestamp
        .as_ref()
        .ok_or(PlanError::NotStored("creationTimestamp"))?
        .0
        .as_second()
        .max(0)
        // The timestamp has whole seconds and the data plane stores receipt times in whole
        // seconds: cover the whole second the purge was made in (as the data plane does for a
        // purge without `at`), so nothing received before the purge escapes it.
        .saturating_add(1);
    let spec = &purge.spec;
    let lists = [
        ("url", &spec.urls),
        ("prefix", &spec.prefixes),
        ("tag", &spec.tags),
    ];
    let kinds = lists.iter().filter(|(_, l)| !l.is_empty()).count() + usize::from(spec.all);
    if kinds != 1 {
        return Err(PlanError::Selectors);
    }
    let selectors: Vec<(&str, Option<&str>)> = if spec.all {
        vec![("all", None)]
    } else {
        lists
            .iter()
            .flat_map(|(key, values)| values.iter().map(|v| (*key, Some(v.as_str()))))
            .collect()
    };
    Ok(selectors
        .into_iter()
        .enumerate()
        .map(|(i, (key, value))| {
            let id = format!("{uid}-{i}");
            let mut q = form_urlencoded::Serializer::new(String::new());
            q.append_pair("id", &id);
            match value {
                Some(v) => q.append_pair(key, v),
                None => q.append_key_only(key),
            };
            if spec.soft {
                q.append_key_only("soft");
            }
            q.append_pair("at", &at.to_string());
            AdminCall {
                id,
                path_and_query: format!("/purge?{}", q.finish()),
            }
        })
        .collect())
}

/// What the controller needs of one data-plane pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub uid: String,
    /// `spec.nodeName`; empty while unscheduled.
    pub node: String,
    /// `status.podIP`, once it has one.
    pub ip: Option<IpAddr>,
    /// The pod's `Ready` condition is true.
    pub ready: bool,
}

/// The view of a pod that should hold the purge; `None` for a pod that is going away
/// (deleting, or finished) and so never serves again.
pub fn pod_view(pod: &Pod) -> Option<PodView> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return None;
    }
    Some(PodView {
        name: pod.metadata.name.clone()?,
        uid: pod.metadata.uid.clone()?,
        node: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        ip: status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok()),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
    })
}

/// The pods to send the purge to now: ready, with an IP, and not confirmed under their
/// current uid (a pod replaced under the same name, or a new pod, gets it again).
pub fn to_send<'a>(pods: &'a [PodView], status: Option<&EdgeCachePurgeStatus>) -> Vec<&'a PodView> {
    pods.iter()
        .filter(|p| p.ready && p.ip.is_some() && confirmation(status, p).is_none())
        .collect()
}

fn confirmation<'a>(
    status: Option<&'a EdgeCachePurgeStatus>,
    pod: &PodView,
) -> Option<&'a PurgeNodeStatus> {
    status?
        .nodes
        .iter()
        .find(|n| n.pod == pod.name && n.pod_uid == pod.uid)
}

/// Whether an event of `pod` (one of the purge's EdgeCache) may change what the purge's
/// `status` says, and so re-queues it: always while it is not complete (the pod may be one it
/// waits for, or one that went); once complete, only for a live pod that has not confirmed it
/// under its present uid (a new or replaced pod must get it). The events of confirmed pods
/// (readiness, status updates) re-queue no complete purge: each re-queue costs reads of the
/// purge, its EdgeCache and admin Secret and a list of the pods (issue 35 defect 15).
pub fn needs_pod(status: Option<&EdgeCachePurgeStatus>, pod: &Pod) -> bool {
    match status {
        Some(st) if is_complete(st) => {
            pod_view(pod).is_some_and(|view| confirmation(Some(st), &view).is_none())
        }
        _ => true,
    }
}

/// Whether `status` says every current pod confirmed.
pub fn is_complete(status: &EdgeCachePurgeStatus) -> bool {
    status
        .condition(condition::COMPLETE)
        .is_some_and(|c| c.status == "True")
}

/// What sending every call to one pod came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Every call was answered with a purge confirmation.
    Confirmed {
        /// The node name the pod reported (empty when it has none set).
        node: String,
        /// Objects removed at once, over all calls.
        objects: u64,
    },
    /// A call failed.
    Failed(Failure),
}

impl Delivery {
    /// A bounded label for metrics: `confirmed`, or the failure's cause.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::Confirmed { .. } => "confirmed",
            Self::Failed(f) => f.cause.as_str(),
        }
    }
}

/// Why a pod did not confirm: a bounded cause and the reason in words, for the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub cause: Cause,
    pub why: String,
}

impl Failure {
    pub fn new(cause: Cause, why: impl Into<String>) -> Self {
        Self {
            cause,
            why: why.into(),
        }
    }
}

/// The kinds of [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No answer: no IP, no connection, a timeout, a broken exchange.
    Unreachable,
    /// The pod refused the admin token (401, 403).
    Refused,
    /// The pod answered, but not with a confirmation of the call.
    BadAnswer,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Refused => "refused",
            Self::BadAnswer => "bad_answer",
        }
    }
}

/// The data plane's answer to `POST /purge`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Answer {
    pub id: String,
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub objects: u64,
    #[serde(default)]
    pub repeated: bool,
}

/// Read a pod's answer to `call`: a 200 with the JSON confirmation of the same id, or the
/// reason it is not one.
pub fn read_answer(call: &AdminCall, code: u16, body: &[u8]) -> Result<Answer, Failure> {
    let text = || {
        let t = String::from_utf8_lossy(body);
        let first = t.lines().next().unwrap_or("").trim();
        first.chars().take(200).collect::<String>()
    };
    match code {
        200 => {
            let a: Answer = serde_json::from_slice(body).map_err(|e| {
                Failure::new(
                    Cause::BadAnswer,
                    format!("the pod's purge answer is not the expected JSON: {e}"),
                )
            })?;
            if a.id != call.id {
                return Err(Failure::new(
                    Cause::BadAnswer,
                    format!("the pod confirmed purge id {:?}, not {:?}", a.id, call.id),
                ));
            }
            Ok(a)
        }
        401 | 403 => Err(Failure::new(
            Cause::Refused,
            format!(
                "the pod refused the admin token (HTTP {code}: {}); check the EdgeCache's admin token Secret",
                text()
            ),
        )),
        _ => Err(Failure::new(
            Cause::BadAnswer,
            format!("the pod answered HTTP {code}: {}", text()),
        )),
    }
}

/// Why nothing could be sent to any pod (the condition's reason and message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked<'a> {
    pub reason: &'a str,
    pub message: &'a str,
}

/// The status after one round: every current pod is either confirmed (an earlier
/// confirmation under its uid, or one from `deliveries`, keyed by pod uid) or pending with a
/// reason. `Complete` is true when there is at least one pod and every one confirmed;
/// otherwise its reason is `blocked`'s, `NoPods`, `AdminUnreachable` (a pod that could not be
/// reached) or `PodsPending`. Its lastTransitionTime is
/// kept while it holds.
pub fn compute(
    purge: &EdgeCachePurge,
    pods: &[PodView],
    deliveries: &BTreeMap<String, Delivery>,
    blocked: Option<Blocked<'_>>,
    now: &Time,
) -> EdgeCachePurgeStatus {
    let old = purge.status.clone().unwrap_or_default();
    let generation = purge.metadata.generation;
    let mut pods: Vec<&PodView> = pods.iter().collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let mut nodes = Vec::new();
    let mut pending = Vec::new();
    for pod in pods.iter().copied() {
        if let Some(c) = confirmation(Some(&old), pod) {
            nodes.push(c.clone());
            continue;
        }
        let reason = match (deliveries.get(&pod.uid), blocked) {
            (Some(Delivery::Confirmed { node, objects }), _) => {
                nodes.push(PurgeNodeStatus {
                    pod: pod.name.clone(),
                    pod_uid: pod.uid.clone(),
                    node: if node.is_empty() {
                        pod.node.clone()
                    } else {
                        node.clone()
                    },
                    confirmed_at: now.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    objects: *objects,
                });
                continue;
            }
            (Some(Delivery::Failed(f)), _) => f.why.clone(),
            (None, Some(b)) => b.message.to_string(),
            (None, None) if !pod.ready => "the pod is not ready".to_string(),
            (None, None) if pod.ip.is_none() => "the pod has no IP yet".to_string(),
            (None, None) => "not sent yet".to_string(),
        };
        pending.push(PurgePendingStatus {
            pod: pod.name.clone(),
            node: pod.node.clone(),
            reason,
        });
    }
    let total = pods.len();
    let (complete, reason, message) = match blocked {
        _ if total > 0 && pending.is_empty() => (
            true,
            "AllPodsConfirmed",
            format!("all {total} pod(s) confirmed the purge"),
        ),
        Some(b) => (false, b.reason, b.message.to_string()),
        None if total == 0 => (
            false,
            "NoPods",
            "the EdgeCache has no data-plane pods yet".to_string(),
        ),
        // A pod the operator cannot connect to (or that does not answer in time): what a
        // NetworkPolicy or a node firewall on the admin port looks like.
        None if deliveries
            .values()
            .any(|d| matches!(d, Delivery::Failed(f) if f.cause == Cause::Unreachable)) =>
        {
            (
                false,
                "AdminUnreachable",
                format!(
                    "{}; the operator cannot reach the admin port of some pods (check \
                     NetworkPolicies and node firewalls for spec.network.adminPort)",
                    pending_message(&pending, nodes.len(), total)
                ),
            )
        }
        None => (
            false,
            "PodsPending",
            pending_message(&pending, nodes.len(), total),
        ),
    };
    let mut conditions = old.conditions.clone();
    set_condition(
        &mut conditions,
        condition::COMPLETE,
        complete,
        reason,
        message,
        generation,
        now,
    );
    EdgeCachePurgeStatus {
        observed_generation: generation,
        conditions,
        kind: purge.spec.kind(),
        confirmed: format!("{}/{total}", nodes.len()),
        nodes,
        pending,
    }
}

fn pending_message(pending: &[PurgePendingStatus], confirmed: usize, total: usize) -> String {
    let named: Vec<String> = pending
        .iter()
        .take(NAMED_IN_MESSAGE)
        .map(|p| {
            let node = if p.node.is_empty() {
                "no node yet"
            } else {
                &p.node
            };
            format!("node {node} (pod {}): {}", p.pod, p.reason)
        })
        .collect();
    let more = pending.len().saturating_sub(NAMED_IN_MESSAGE);
    let tail = if more > 0 {
        format!("; and {more} more")
    } else {
        String::new()
    };
    format!(
        "{confirmed}/{total} pod(s) confirmed; waiting for {}{tail}",
        named.join("; ")
    )
}

#[cfg(test)]
mod tests;
