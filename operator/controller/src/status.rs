//! Step 4 of the pipeline: the status. `compute` is pure (conditions from the resource, the
//! outcome of the earlier steps, the DaemonSet status, its pods and the DaemonSet controller's
//! `FailedCreate` Events); `write` sends it when it changed.

use edgecache_api::v1alpha1::{EdgeCache, EdgeCacheStatus, NodeStatus, ShardingStatus, condition};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::build::MANAGER;
use crate::node_status;

/// What the earlier steps found.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// Nothing is applied, for this reason (`InvalidSpec`, `Conflict`) and message.
    Refused { reason: &'a str, message: &'a str },
    /// `spec.paused`: nothing was applied.
    Paused,
    /// Nothing is applied yet, for a reason that clears by itself (the children of an earlier
    /// EdgeCache of this name still being collected): Progressing, not Degraded.
    Waiting { reason: &'a str, message: &'a str },
    /// The children were applied; this is the DaemonSet the API server returned.
    Applied {
        daemon_set: &'a DaemonSet,
        config_hash: &'a str,
        /// The cache pods as `status.nodes` reports them.
        nodes: &'a [NodeStatus],
        /// Nodes in the peer list; `None` when sharding is off.
        peers: Option<usize>,
        /// The `FailedCreate` Events on the DaemonSet (read while it misses pods, see
        /// [`pods_missing`]; [`creation_failure`] decides which still count).
        failed_creates: &'a [Event],
        /// The ready pods whose admin port could not be reached (no connection, no answer in
        /// time), each `POD (ERROR)`; `None` when the pods were not called (scraping off).
        admin_unreachable: Option<&'a [String]>,
    },
}

/// The reason of the DaemonSet controller's Event for a pod it could not create.
pub const FAILED_CREATE: &str = "FailedCreate";

/// How long a `FailedCreate` Event counts after it was last seen. The DaemonSet controller
/// retries a refused creation with a back-off of at most 1000 s, each retry bumping the Event,
/// so a refusal that persists is never older than this.
pub const FAILED_CREATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Pods the DaemonSet should run but has not created (`desiredNumberScheduled` minus
/// `currentNumberScheduled`). Only then are its `FailedCreate` Events read.
pub fn pods_missing(daemon_set: &DaemonSet) -> i32 {
    let st = daemon_set.status.as_ref();
    st.map_or(0, |s| {
        (s.desired_number_scheduled - s.current_number_scheduled).max(0)
    })
}

/// Why the DaemonSet's missing pods are not created (Pod Security, a ResourceQuota that
/// requires limits, a missing PriorityClass...): the newest of `events` that is a
/// `FailedCreate` on this DaemonSet (by uid where both have one: the Events of an earlier
/// DaemonSet of the same name are not its own), while pods are missing. A failure that a later
/// creation fixed is not reported: no pod is missing then; nor is one last seen more than
/// [`FAILED_CREATE_WINDOW`] before `now` (a rollout's short gap between deleting a pod and
/// creating its successor must not bring back an old, fixed refusal).
pub fn creation_failure(daemon_set: &DaemonSet, events: &[Event], now: &Time) -> Option<String> {
    let missing = pods_missing(daemon_set);
    if missing == 0 {
        return None;
    }
    let meta = &daemon_set.metadata;
    let newest = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(FAILED_CREATE))
        .filter(|e| {
            last_seen(e).is_none_or(|t| {
                // Seconds since it was last seen (negative: a clock ahead of ours, counted).
                let age = now.0.as_second().saturating_sub(t.as_second());
                u64::try_from(age).map_or(true, |age| age <= FAILED_CREATE_WINDOW.as_secs())
            })
        })
        .filter(|e| {
            let o = &e.involved_object;
            o.kind.as_deref() == Some("DaemonSet")
                && o.name == meta.name
                && (o.uid.is_none() || meta.uid.is_none() || o.uid == meta.uid)
        })
        .max_by_key(|e| last_seen(e))?;
    let desired = daemon_set
        .status
        .as_ref()
        .map_or(0, |s| s.desired_number_scheduled);
    let message = newest.message.as_deref().unwrap_or("no message").trim();
    let times = match newest.count {
        Some(n) if n > 1 => format!(" ({n} times)"),
        _ => String::new(),
    };
    Some(format!(
        "{missing} of {desired} cache pods cannot be created: {message}{times}"
    ))
}

/// When an Event was last seen: its series, its last timestamp, its event time, its creation.
fn last_seen(e: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or(e.last_timestamp.as_ref().map(|t| t.0))
        .or(e.event_time.as_ref().map(|t| t.0))
        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The status for `ec` after `outcome`, keeping each condition's lastTransitionTime when its
/// status did not change.
pub fn compute(ec: &EdgeCache, outcome: Outcome<'_>, now: &Time) -> EdgeCacheStatus {
    let old = ec.status.clone().unwrap_or_default();
    let generation = ec.metadata.generation;
    let mut st = EdgeCacheStatus {
        observed_generation: generation,
        ..old.clone()
    };
    let mut set = |type_: &str, status: bool, reason: &str, message: String| {
        set_condition(
            &mut st.conditions,
            type_,
            status,
            reason,
            message,
            generation,
            now,
        );
    };
    match outcome {
        Outcome::Refused { reason, message } => {
            set(condition::DEGRADED, true, reason, message.to_string());
            set(
                condition::READY,
                false,
                reason,
                "the spec is not applied; see the Degraded condition".into(),
            );
            set(
                condition::PROGRESSING,
                false,
                reason,
                "nothing is rolled out until the Degraded condition clears".into(),
            );
        }
        Outcome::Waiting { reason, message } => {
            set(condition::PROGRESSING, true, reason, message.to_string());
            set(condition::DEGRADED, false, "AsExpected", String::new());
            set(
                condition::READY,
                false,
                reason,
                "nothing is rolled out yet; see the Progressing condition".into(),
            );
        }
        Outcome::Paused => {
            set(
                condition::PROGRESSING,
                false,
                "Paused",
                "reconciliation is paused (spec.paused); nothing is changed or deleted".into(),
            );
        }
        Outcome::Applied {
            daemon_set,
            config_hash,
            nodes,
            peers,
            failed_creates,
            admin_unreachable,
        } => {
            if let Some(unreachable) = admin_unreachable {
                let (ok, reason, message) = admin_reachable(unreachable);
                set(condition::ADMIN_REACHABLE, ok, reason, message);
            }
            let ds = daemon_set.status.clone().unwrap_or_default();
            let observed = match (ds.observed_generation, daemon_set.metadata.generation) {
                (Some(o), Some(g)) => o >= g,
                (_, None) => true,
                (None, Some(_)) => false,
            };
            let desired = ds.desired_number_scheduled;
            let ready = ds.number_ready;
            let updated = ds.updated_number_scheduled.unwrap_or(0);
            let available = ds.number_available.unwrap_or(0);
            st.desired_nodes = desired;
            st.ready_nodes = ready;
            st.updated_nodes = updated;
            st.available_nodes = available;
            st.config_hash = Some(config_hash.to_string());
            st.nodes_ready = Some(format!("{ready}/{desired}"));
            st.nodes = nodes.to_vec();
            st.sharding = Some(ShardingStatus {
                mode: if peers.is_some() { "consistent" } else { "off" }.into(),
                peers: peers.map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX)),
            });
            let failing: Vec<&NodeStatus> = nodes.iter().filter(|n| !n.ready).collect();
            let stuck: Vec<&NodeStatus> = failing
                .iter()
                .copied()
                .filter(|n| node_status::needs_a_human(n))
                .collect();
            let counts = format!("{ready}/{desired} nodes ready, {updated}/{desired} updated");
            // The Ready condition also names the nodes that are not, and why.
            let ready_message = if failing.is_empty() {
                counts.clone()
            } else {
                format!("{counts}; not ready: {}", node_status::describe(&failing))
            };
            // What needs a human: pods the DaemonSet cannot create, and pods that cannot start.
            let not_created = creation_failure(daemon_set, failed_creates, now);
            let failing_pods = (!stuck.is_empty()).then(|| {
                format!(
                    "{} of {} cache pods cannot start without a fix: {}",
                    stuck.len(),
                    nodes.len(),
                    node_status::describe(&stuck)
                )
            });
            let blocked = match (not_created, failing_pods) {
                (Some(c), Some(f)) => Some(("PodCreationFailed", format!("{c}; {f}"))),
                (Some(c), None) => Some(("PodCreationFailed", c)),
                (None, Some(f)) => Some(("PodsFailing", f)),
                (None, None) => None,
            };
            let degraded = |set: &mut dyn FnMut(&str, bool, &str, String)| match &blocked {
                None => set(condition::DEGRADED, false, "AsExpected", String::new()),
                Some((reason, message)) => set(condition::DEGRADED, true, reason, message.clone()),
            };
            if !observed {
                set(
                    condition::PROGRESSING,
                    true,
                    "RollingOut",
                    "waiting for the DaemonSet controller to see the new pod template".into(),
                );
                set(condition::READY, false, "RollingOut", ready_message);
                degraded(&mut set);
            } else if desired == 0 {
                let message = no_match_message(ec);
                set(
                    condition::DEGRADED,
                    true,
                    "NoMatchingNodes",
                    message.clone(),
                );
                set(condition::READY, false, "NoMatchingNodes", message);
                set(
                    condition::PROGRESSING,
                    false,
                    "NoMatchingNodes",
                    "no node to roll out to".into(),
                );
            } else if ready == desired
                && updated == desired
                && available == desired
                && blocked.is_none()
            {
                // The DaemonSet's counts and the pods are read apart: counts that already say
                // ready while a pod still says it cannot start are not Ready (nor Ready and
                // Degraded at once); the next reconcile sees them agree.
                set(condition::READY, true, "AllNodesReady", counts);
                set(
                    condition::PROGRESSING,
                    false,
                    "RolloutComplete",
                    format!("every node runs config {}", short(config_hash)),
                );
                degraded(&mut set);
            } else {
                set(condition::READY, false, "NodesNotReady", ready_message);
                match &blocked {
                    // Nothing moves until a human acts: not Progressing for ever.
                    Some((reason, _)) => set(
                        condition::PROGRESSING,
                        false,
                        reason,
                        format!("{counts}; the rollout waits until the Degraded condition clears"),
                    ),
                    None => set(condition::PROGRESSING, true, "RollingOut", counts),
                }
                degraded(&mut set);
            }
        }
    }
    st
}

/// The `AdminReachable` condition from the pods that could not be reached.
fn admin_reachable(unreachable: &[String]) -> (bool, &'static str, String) {
    if unreachable.is_empty() {
        return (
            true,
            "AllPodsAnswer",
            "every ready pod answers on its admin port".into(),
        );
    }
    let named: Vec<&str> = unreachable.iter().take(5).map(String::as_str).collect();
    let more = match unreachable.len().saturating_sub(5) {
        0 => String::new(),
        n => format!(", and {n} more"),
    };
    (
        false,
        "AdminUnreachable",
        format!(
            "the operator cannot reach the admin port of {} pod(s): {}{more}; purges and \
             metrics do not reach them (check NetworkPolicies and node firewalls for the \
             admin port, spec.network.adminPort)",
            unreachable.len(),
            named.join(", ")
        ),
    )
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn no_match_message(ec: &EdgeCache) -> String {
    let p = &ec.spec.placement;
    let mut parts = Vec::new();
    if p.nvme_nodes_only {
        let mut s = format!(
            "nodes labelled {}=true or {}=true",
            edgecache_api::v1alpha1::NFD_NONROTATIONAL_LABEL,
            edgecache_api::v1alpha1::NVME_LABEL
        );
        if ec.spec.steering.mode == edgecache_api::SteeringMode::Queue {
            s.push_str(&format!(
                " and {}=true (steering.mode queue)",
                edgecache_api::v1alpha1::ADQ_LABEL
            ));
        }
        parts.push(s);
    }
    if !p.node_selector.is_empty() {
        let sel: Vec<String> = p
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        parts.push(format!("spec.placement.nodeSelector {}", sel.join(",")));
    }
    if p.affinity.is_some() {
        parts.push("spec.placement.affinity".into());
    }
    if parts.is_empty() {
        "no schedulable Linux node accepts the cache pods (check taints and tolerations)".into()
    } else {
        format!(
            "no node matches the placement: {} (check node labels, taints and spec.placement)",
            parts.join("; ")
        )
    }
}

/// Set one condition; lastTransitionTime changes only when the status flips.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) {
    let status = if status { "True" } else { "False" }.to_string();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now.clone();
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
        }
        None => {
            conditions.push(Condition {
                type_: type_.into(),
                status,
                reason: reason.into(),
                message,
                observed_generation: generation,
                last_transition_time: now.clone(),
            });
            conditions.sort_by_key(|c| order(&c.type_));
        }
    }
}

fn order(type_: &str) -> u8 {
    match type_ {
        condition::READY => 0,
        condition::PROGRESSING => 1,
        condition::DEGRADED => 2,
        condition::ADMIN_REACHABLE => 3,
        _ => 4,
    }
}

/// Write `status` unless it equals what the object already has. Returns whether it wrote; a
/// write onto an EdgeCache of the same name created since `ec` was read (`ec` deleted meanwhile)
/// is not made (see [`patch_status_if_changed`]).
pub async fn write(
    api: &Api<EdgeCache>,
    ec: &EdgeCache,
    status: &EdgeCacheStatus,
) -> Result<bool, kube::Error> {
    patch_status_if_changed(api, &ec.metadata, ec.status.as_ref(), status).await
}

/// Replace the status of the object `meta` names (field manager [`MANAGER`]) with `status`
/// unless it equals `current`. Returns whether it wrote.
///
/// The write is one JSON patch that first tests `metadata.uid`: a reconcile still running on an
/// object that was deleted and created again under its name (it read the old one) must not
/// write the old one's status onto the new one. The API server refuses the patch (422) when the
/// test fails; the object is then read again, and if it is gone or another one, nothing was
/// written and `Ok(false)` is returned (the new object has its own reconcile). A JSON merge
/// patch cannot do this on the status subresource: the API server's status strategy puts the
/// stored metadata back over the patched object, so a `metadata.uid` in a merge patch is
/// ignored there (seen on Kubernetes v1.37; on the main resource it is a 422, "field is
/// immutable").
pub async fn patch_status_if_changed<K, S>(
    api: &Api<K>,
    meta: &ObjectMeta,
    current: Option<&S>,
    status: &S,
) -> Result<bool, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: PartialEq + serde::Serialize,
{
    if current == Some(status) {
        return Ok(false);
    }
    let name = meta.name.as_deref().unwrap_or_default();
    let new = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    let patch = status_patch(meta.uid.as_deref(), new).map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    match api
        .patch_status(name, &params, &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 422 && meta.uid.is_some() => {
            let now = api.get_metadata_opt(name).await?;
            let now_uid = now.as_ref().and_then(|o| o.metadata.uid.as_deref());
            if now_uid == meta.uid.as_deref() {
                return Err(kube::Error::Api(e));
            }
            tracing::info!(
                name,
                "the object was deleted (and perhaps created again) since it was read; its \
                 status is not written"
            );
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The JSON patch (RFC 6902) that replaces `.status` with `status`, if `metadata.uid` is `uid`.
pub fn status_patch(
    uid: Option<&str>,
    status: serde_json::Value,
) -> Result<json_patch::Patch, serde_json::Error> {
    let mut ops = Vec::with_capacity(2);
    if let Some(uid) = uid {
        ops.push(json!({"op": "test", "path": "/metadata/uid", "value": uid}));
    }
    // `add` replaces a member that exists and makes one that does not.
    ops.push(json!({"op": "add", "path": "/status", "value": status}));
    serde_json::from_value(serde_json::Value::Array(ops))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::DaemonSetStatus;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::test_support::minimal_edgecache;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn ds(generation: i64, observed: i64, desired: i32, ready: i32, updated: i32) -> DaemonSet {
        let mut d = DaemonSet::default();
        d.metadata.generation = Some(generation);
        d.status = Some(DaemonSetStatus {
            observed_generation: Some(observed),
            desired_number_scheduled: desired,
            current_number_scheduled: desired,
            number_ready: ready,
            updated_number_scheduled: Some(updated),
            number_available: Some(ready),
            ..DaemonSetStatus::default()
        });
        d
    }

    /// The status of `ec` with its DaemonSet `d` applied, `secs` after the test's epoch.
    fn applied(ec: &EdgeCache, d: &DaemonSet, secs: i64) -> EdgeCacheStatus {
        let outcome = Outcome::Applied {
            daemon_set: d,
            config_hash: "h",
            nodes: &[],
            peers: None,
            failed_creates: &[],
            admin_unreachable: None,
        };
        compute(ec, outcome, &t(secs))
    }

    fn cond<'a>(st: &'a EdgeCacheStatus, type_: &str) -> &'a Condition {
        st.condition(type_).unwrap()
    }

    #[test]
    fn the_status_patch_tests_the_uid_then_replaces_the_status() {
        let st = json!({"readyNodes": 0, "conditions": []});
        let p = serde_json::to_value(status_patch(Some("u-1"), st.clone()).unwrap()).unwrap();
        assert_eq!(
            p,
            json!([{"op": "test", "path": "/metadata/uid", "value": "u-1"},
                   {"op": "add", "path": "/status", "value": st}])
        );
        let p = serde_json::to_value(status_patch(None, st.clone()).unwrap()).unwrap();
        assert_eq!(p, json!([{"op": "add", "path": "/status", "value": st}]));
    }

    #[test]
    fn all_nodes_ready() {
        let ec = minimal_edgecache("");
        let d = ds(1, 1, 3, 3, 3);
        let st = compute(
            &ec,
            Outcome::Applied {
                daemon_set: &d,
                config_hash: "abc",
                nodes: &[],
                peers: None,
                failed_creates: &[],
                admin_unreachable: None,
            },
            &t(0),
        );
        assert_eq!(st.observed_generation, Some(1));
        assert_eq!(
            (
                st.desired_nodes,
                st.ready_nodes,
                st.updated_nodes,
                st.available_nodes
            ),
            (3, 3, 3, 3)
        );
        assert_eq!(st.config_hash.as_deref(), Some("abc"));
        let ready = cond(&st, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "AllNodesReady")
        );
        assert_eq!(ready.message, "3/3 nodes ready, 3/3 updated");
        assert_eq!(ready.observed_generation, Some(1));
        assert_eq!(cond(&st, "Progressing").status, "False");
        assert_eq!(cond(&st, "Degraded").status, "False");
        let types: Vec<_> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Progressing", "Degraded"]);
    }

    #[test]
    fn counts_that_say_ready_beside_a_pod_that_cannot_start_are_not_ready() {
        let ec = minimal_edgecache("");
        let d = ds(1, 1, 2, 2, 2);
        let stuck = NodeStatus {
            node: "nvme-1".into(),
            pod: "web-nvme-1".into(),
            ready: false,
            reason: Some("ImagePullBackOff".into()),
            message: Some("Back-off pulling image".into()),
            ..NodeStatus::default()
        };
        let fine = NodeStatus {
            node: "ssd-1".into(),
            pod: "web-ssd-1".into(),
            ready: true,
            ..NodeStatus::default()
        };
        let st = compute(
            &ec,
            Outcome::Applied {
                daemon_set: &d,
                config_hash: "abc",
                nodes: &[stuck, fine],
                peers: None,
                failed_creates: &[],
                admin_unreachable: None,
            },
            &t(0),
        );
        let ready = cond(&st, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NodesNotReady")
        );
        assert!(
            ready
                .message
                .contains("not ready: nvme-1 (ImagePullBackOff")
        );
        assert_eq!(cond(&st, "Degraded").status, "True");
    }

    /// A core/v1 Event as the DaemonSet controller records it.
    fn event(reason: &str, ds_uid: &str, message: &str, last_second: i64, count: i32) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("web.{last_second}"), "namespace": "edge"},
            "involvedObject": {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web",
                               "namespace": "edge", "uid": ds_uid},
            "reason": reason, "message": message, "type": "Warning", "count": count,
            "lastTimestamp": t(last_second).0.to_string(),
        }))
        .unwrap()
    }

    #[test]
    fn pods_the_daemon_set_cannot_create_are_degraded_with_the_admissions_message() {
        let ec = minimal_edgecache("");
        let mut d = ds(1, 1, 2, 0, 0);
        d.metadata.name = Some("web".into());
        d.metadata.uid = Some("ds-2".into());
        if let Some(s) = d.status.as_mut() {
            s.current_number_scheduled = 0;
        }
        let forbidden = "Error creating: pods \"web-x\" is forbidden: violates PodSecurity \
                         \"baseline:latest\": host namespaces (hostNetwork=true)";
        let events = [
            // The DaemonSet of an earlier EdgeCache of this name: not this one's.
            event(
                "FailedCreate",
                "ds-1",
                "Error creating: an old reason",
                90,
                1,
            ),
            event(
                "FailedCreate",
                "ds-2",
                "Error creating: an older reason",
                10,
                1,
            ),
            event("FailedCreate", "ds-2", forbidden, 20, 4),
            event("SuccessfulCreate", "ds-2", "Created pod: web-y", 30, 1),
        ];
        let outcome = |d, failed_creates| Outcome::Applied {
            daemon_set: d,
            config_hash: "h",
            nodes: &[],
            peers: None,
            failed_creates,
            admin_unreachable: None,
        };
        let st = compute(&ec, outcome(&d, &events), &t(100));
        let deg = cond(&st, "Degraded");
        assert_eq!(
            (deg.status.as_str(), deg.reason.as_str()),
            ("True", "PodCreationFailed")
        );
        assert_eq!(
            deg.message,
            format!("2 of 2 cache pods cannot be created: {forbidden} (4 times)")
        );
        let progressing = cond(&st, "Progressing");
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("False", "PodCreationFailed")
        );
        assert_eq!(cond(&st, "Ready").status, "False");

        // Fixed (the pods exist now): the same Events no longer count.
        let mut ec = ec;
        ec.status = Some(st);
        let fixed = ds(1, 1, 2, 2, 2);
        let mut fixed = fixed;
        fixed.metadata.name = Some("web".into());
        fixed.metadata.uid = Some("ds-2".into());
        let st = compute(&ec, outcome(&fixed, &events), &t(200));
        assert_eq!(cond(&st, "Degraded").status, "False");
        assert_eq!(cond(&st, "Ready").status, "True");
        assert_eq!(pods_missing(&fixed), 0);
        // The same refusal last seen over half an hour ago (fixed since; a rollout's gap):
        // not degraded.
        let st = compute(&ec, outcome(&d, &events[1..3]), &t(20 + 31 * 60));
        assert_eq!(cond(&st, "Degraded").status, "False");
        // Missing pods and no Event (yet): progressing, not degraded.
        let st = compute(&ec, outcome(&d, &[]), &t(300));
        assert_eq!(cond(&st, "Degraded").status, "False");
        assert_eq!(cond(&st, "Progressing").status, "True");
    }

    #[test]
    fn pods_the_operator_cannot_reach_are_named_in_admin_reachable() {
        let ec = minimal_edgecache("");
        let d = ds(1, 1, 2, 2, 2);
        let outcome = |admin_unreachable| Outcome::Applied {
            daemon_set: &d,
            config_hash: "h",
            nodes: &[],
            peers: None,
            failed_creates: &[],
            admin_unreachable,
        };
        let gone = ["web-a (cannot connect to 10.0.0.1:9090: Connection refused)".to_string()];
        let st = compute(&ec, outcome(Some(&gone)), &t(0));
        let c = cond(&st, "AdminReachable");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "AdminUnreachable")
        );
        assert!(
            c.message.starts_with(
                "the operator cannot reach the admin port of 1 pod(s): web-a (cannot connect"
            ),
            "{}",
            c.message
        );
        assert_eq!(cond(&st, "Ready").status, "True", "serving is judged apart");
        let types: Vec<_> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["Ready", "Progressing", "Degraded", "AdminReachable"]
        );
        let st = compute(&ec, outcome(Some(&[])), &t(0));
        assert_eq!(cond(&st, "AdminReachable").reason, "AllPodsAnswer");
        // Not called (scraping off): no such condition.
        assert!(
            compute(&ec, outcome(None), &t(0))
                .condition("AdminReachable")
                .is_none()
        );
    }

    #[test]
    fn rollout_in_progress_and_unobserved_template() {
        let ec = minimal_edgecache("");
        let d = ds(2, 2, 4, 2, 3);
        let st = applied(&ec, &d, 0);
        assert_eq!(cond(&st, "Ready").reason, "NodesNotReady");
        assert_eq!(cond(&st, "Progressing").status, "True");
        assert_eq!(
            cond(&st, "Progressing").message,
            "2/4 nodes ready, 3/4 updated"
        );
        let d = ds(3, 2, 4, 4, 4);
        let st = applied(&ec, &d, 0);
        assert_eq!(cond(&st, "Progressing").reason, "RollingOut");
        assert_eq!(cond(&st, "Ready").status, "False");
    }

    #[test]
    fn no_matching_nodes_is_degraded() {
        let ec = minimal_edgecache("steering:\n  mode: queue\nnetwork:\n  hostNetwork: true\n");
        let d = ds(1, 1, 0, 0, 0);
        let st = applied(&ec, &d, 0);
        let deg = cond(&st, "Degraded");
        assert_eq!(
            (deg.status.as_str(), deg.reason.as_str()),
            ("True", "NoMatchingNodes")
        );
        assert!(
            deg.message.contains("edgecache.dev/adq=true"),
            "{}",
            deg.message
        );
        assert_eq!(cond(&st, "Ready").reason, "NoMatchingNodes");
    }

    #[test]
    fn invalid_spec_keeps_counts_and_names_the_field() {
        let mut ec = minimal_edgecache("");
        let d = ds(1, 1, 2, 2, 2);
        ec.status = Some(applied(&ec, &d, 0));
        ec.metadata.generation = Some(2);
        let st = compute(
            &ec,
            Outcome::Refused {
                reason: "InvalidSpec",
                message: "invalid spec: spec.storage.size: too small",
            },
            &t(10),
        );
        let deg = cond(&st, "Degraded");
        assert_eq!(
            (deg.status.as_str(), deg.reason.as_str()),
            ("True", "InvalidSpec")
        );
        assert!(deg.message.contains("spec.storage.size"));
        assert_eq!(deg.observed_generation, Some(2));
        assert_eq!(st.observed_generation, Some(2));
        assert_eq!(st.ready_nodes, 2, "counts still describe the running pods");
        assert_eq!(st.config_hash.as_deref(), Some("h"));
    }

    #[test]
    fn last_transition_time_is_kept_when_the_status_does_not_change() {
        let mut ec = minimal_edgecache("");
        let d = ds(1, 1, 2, 1, 2);
        let first = applied(&ec, &d, 0);
        ec.status = Some(first.clone());
        // Same status, new message: the transition time stays.
        let d = ds(1, 1, 3, 1, 3);
        let second = applied(&ec, &d, 60);
        assert_eq!(cond(&second, "Ready").last_transition_time, t(0));
        assert_eq!(
            cond(&second, "Ready").message,
            "1/3 nodes ready, 3/3 updated"
        );
        // Ready flips: it moves.
        ec.status = Some(second);
        let d = ds(1, 1, 3, 3, 3);
        let third = applied(&ec, &d, 120);
        assert_eq!(cond(&third, "Ready").last_transition_time, t(120));
        assert_eq!(cond(&third, "Degraded").last_transition_time, t(0));
        // Computing again from the result changes nothing.
        ec.status = Some(third.clone());
        assert_eq!(applied(&ec, &d, 180), third);
    }

    #[test]
    fn paused() {
        let ec = minimal_edgecache("paused: true\n");
        let st = compute(&ec, Outcome::Paused, &t(0));
        assert_eq!(cond(&st, "Progressing").reason, "Paused");
        assert!(st.condition("Ready").is_none());
    }
}
