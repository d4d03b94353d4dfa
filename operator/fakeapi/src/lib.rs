//! An in-process fake Kubernetes API server for tests: a
//! `tower::Service<http::Request<kube::client::Body>>` handed to `kube::Client::new`, so the real
//! `kube::Api`, watchers and `kube::runtime::Controller` run against it in `cargo test`.
//!
//! What it models:
//! - an object store keyed by group/version/resource, namespace and name, with a global,
//!   monotonically increasing `resourceVersion`, uids and creation timestamps;
//! - get, list (label selectors; `metadata.name`/`metadata.namespace` and equality field
//!   selectors on any other field path, e.g. an Event's `involvedObject.name`), create,
//!   replace (optimistic concurrency on `resourceVersion`), delete;
//! - watch as a streaming body of newline-delimited events, resumable from a resourceVersion
//!   through an event history, `410 Gone` for one older than the (compactable) history, and
//!   `sendInitialEvents` with the initial-events-end bookmark;
//! - JSON merge patch (strategic merge patch is treated as a merge patch), JSON patch (with
//!   `test` ops), and a server-side-apply approximation: the fields each manager applied are
//!   tracked (and shown in `metadata.managedFields`, in the `fieldsV1` shape), fields a manager
//!   stops applying are pruned unless another manager owns them, conflicting values owned by
//!   another manager are a 409 unless `force=true`, and update operations take ownership of
//!   what they change; list-maps are merged item by item by their keys (the built-in kinds'
//!   OpenAPI `x-kubernetes-list-map-keys` for containers, env, ports, volumes, volume mounts,
//!   Service ports and owner references; a CRD's from its schema), so one manager's apply
//!   never removes items another owns;
//! - CRD-defined kinds ([`FakeApiServer::install_crd`]): fields the schema does not declare are
//!   pruned on every write, and refused (422, every one named) with `fieldValidation=Strict`;
//!   the schema's defaults are applied; its types, enums, patterns and bounds and its CEL rules
//!   (`x-kubernetes-validations`, transition rules included, through kube's `cel` feature) are
//!   checked, with ratcheting on updates; a failure is a `422 Invalid` Status whose details list
//!   every cause, with the real server's field paths and messages;
//! - built-in kinds refused where the real server refuses them (422 with causes): object
//!   names (DNS-1123 subdomains, DNS-1035 labels for Services), container and volume names,
//!   required images, a DaemonSet selector that must match its template's labels, port ranges
//!   and names, duplicate container, volume and port names, volume mounts of missing volumes;
//! - Secrets: `stringData` folded into `data`, `data` that is not base64 refused (400), the
//!   type defaulted to `Opaque`, and the type's required keys checked as `ValidateSecret` does
//!   (`kubernetes.io/tls`: `data[tls.crt]` and `data[tls.key]`; basic-auth, ssh-auth and
//!   dockerconfigjson too), with the 1 MiB size limit, an immutable type and the `immutable`
//!   flag (422 with causes);
//! - the status subresource split, `metadata.generation` bumped on changes outside metadata
//!   and status only, and no-op writes that change nothing (no new resourceVersion, no event);
//! - finalizers (delete sets `deletionTimestamp`; the object goes when the last finalizer is
//!   removed) and owner-reference garbage collection with the three propagation policies
//!   (Background, the default; Foreground: the owner waits, with the `foregroundDeletion`
//!   finalizer, for its `blockOwnerDeletion` dependents; Orphan), sparing dependents another
//!   live owner keeps;
//! - a DaemonSet "controller": every DaemonSet's status is recomputed from the fake Nodes, their
//!   labels and taints, and the pod template's nodeSelector, required node affinity and
//!   tolerations, and it keeps one Pod per fitting node (`DAEMONSET-NODE`, bound to the node,
//!   owned by the DaemonSet, with a pod IP, the node's under `hostNetwork`; deleted when the
//!   node goes or stops fitting, made again when deleted by hand); pods are ready at once
//!   unless [`FakeApiServer::set_pods_ready`] says not, a pod's status can be set as its
//!   kubelet would report it ([`FakeApiServer::set_pod_status`]: an image pull failure, a crash
//!   loop), pod creation can be refused as admission would refuse it
//!   ([`FakeApiServer::refuse_pods`]: no pod, a core/v1 `FailedCreate` Event on the DaemonSet),
//!   the DaemonSet's ready counts follow its pods, and
//!   a new pod template is rolled out at once, or step by step (`maxUnavailable` pods per
//!   [`FakeApiServer::advance_rollouts`]) after [`FakeApiServer::set_manual_rollouts`];
//! - Pods put by the test as well, as the kubelet reports them ([`FakeApiServer::put_pod`]:
//!   node, `status.podIP`, a `Ready` condition that [`FakeApiServer::set_pod_ready`] flips),
//!   for tests that want pods of their own and no fake Nodes (so no DaemonSet pods);
//! - metadata-only requests (`Accept: ...;as=PartialObjectMetadata`, what kube's
//!   `Api<PartialObjectMeta<K>>` and `get_metadata` send): gets, lists and watches answer with
//!   `PartialObjectMetadata` objects, the metadata alone;
//! - fault injection ([`FakeApiServer::inject_fault`]), dropping every open watch
//!   ([`FakeApiServer::drop_watches`], with [`FakeApiServer::compact`] to force relists), and a
//!   request log for wire-level tests.
//!
//! What it does not model: built-in defaulting and the rest of the built-in validation, admission
//! webhooks and policies, RBAC (inject a 403 instead), namespaces' lifecycle, list pagination
//! (`limit` is ignored and everything comes in one page), list-map keys beyond those named above
//! (other lists are atomic), set-type lists, strategic-merge-patch directives, YAML apply bodies
//! (kube sends JSON), containers that run (the pods of the simulated DaemonSets have the spec of
//! the template they were made from; a rollout does not replace them), kubelets (pod statuses
//! are what the fake or the test puts there), rollouts over time (a DaemonSet's pods are
//! updated at once), and watch bookmarks other than the initial-events-end one.

mod admission;
mod fields;
mod gc;
mod pods;
mod resources;
mod sim;
mod validation;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

pub use fields::{FieldSet, Path};
pub use gc::{FOREGROUND, GARBAGE_COLLECTOR, Propagation};
pub use resources::{ResourceInfo, Target, parse_path};
pub use sim::{LabelSelector, daemonset_status, pod_fits_node};
pub use validation::Cause;

use fields::{
    ListKeys, changed_paths, fields_v1, get, leaf_paths, merge_patch, order_like, overlaps, remove,
    set, shares,
};

/// The body type of the fake's responses.
pub type FakeBody = UnsyncBoxBody<Bytes, Infallible>;

/// Resource keys of the kinds the tests use most.
pub mod keys {
    pub const NODES: &str = "/v1/nodes";
    pub const CONFIGMAPS: &str = "/v1/configmaps";
    pub const SERVICES: &str = "/v1/services";
    pub const SERVICEACCOUNTS: &str = "/v1/serviceaccounts";
    pub const SECRETS: &str = super::admission::SECRETS;
    pub const DAEMONSETS: &str = "apps/v1/daemonsets";
    pub const PODS: &str = super::pods::PODS;
    pub const EVENTS: &str = "events.k8s.io/v1/events";
    pub const CORE_EVENTS: &str = super::pods::CORE_EVENTS;
    pub const EDGECACHES: &str = "edgecache.dev/v1alpha1/edgecaches";
    pub const EDGECACHEPURGES: &str = "edgecache.dev/v1alpha1/edgecachepurges";
}

/// Manager name of the writes the simulated DaemonSet controller makes.
pub const DAEMONSET_CONTROLLER: &str = "fake-daemonset-controller";

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change: what watches stream and what tests inspect.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub resource_version: u64,
    pub change: ChangeType,
    /// `group/version/plural`.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
    /// Whether only the status changed (a write to the status subresource or the simulator).
    pub status_only: bool,
    /// The object after the change (before it, for deletions).
    pub object: Value,
}

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: Method,
    /// Path and query.
    pub uri: String,
    pub status: u16,
    /// When it was answered (for a watch: when the stream started).
    pub at: std::time::Instant,
}

/// An error answer, sent as a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// The Status's `details` (for 422 Invalid: name, group, kind and every cause).
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }
    fn not_found(what: &str) -> Self {
        Self::new(404, "NotFound", format!("{what} not found"))
    }
    fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// An injected failure: the next `times` requests whose method matches (any when `None`) and
/// whose path contains `path_contains` get `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub method: Option<Method>,
    pub path_contains: String,
    pub code: u16,
    pub times: u32,
}

type ObjKey = (String, String, String);
type ManagerKey = (String, Option<String>);

#[derive(Debug, Clone, Default)]
struct Ownership {
    /// `Apply` or `Update`.
    operation: String,
    fields: FieldSet,
}

struct State {
    resources: BTreeMap<String, ResourceInfo>,
    objects: BTreeMap<ObjKey, Value>,
    managers: BTreeMap<ObjKey, BTreeMap<ManagerKey, Ownership>>,
    rv: u64,
    uid_seq: u64,
    history: Vec<Arc<Change>>,
    /// Resource versions at or below this were compacted away: watching from them is 410 Gone.
    history_floor: u64,
    sender: broadcast::Sender<Arc<Change>>,
    requests: Vec<RequestRecord>,
    faults: Vec<Fault>,
    pods_ready: bool,
    /// Step-by-step rollouts: per DaemonSet, the generation being rolled out and how many pods
    /// run it (`None`: all of them).
    manual_rollouts: bool,
    rollouts: BTreeMap<ObjKey, (i64, Option<i64>)>,
    /// Pod statuses set by [`FakeApiServer::set_pod_status`], kept until cleared.
    pod_status: BTreeMap<ObjKey, Value>,
    /// Per namespace, why pod creation is refused there ([`FakeApiServer::refuse_pods`]).
    pod_refusals: BTreeMap<String, String>,
    /// Addresses handed out so far, and each node's (for `hostNetwork` pods).
    ip_seq: u32,
    node_ips: BTreeMap<String, String>,
    /// Set while the DaemonSet controller removes pods itself (they are not made again).
    syncing_pods: bool,
    /// Bumped to end every open watch.
    watch_epoch: tokio::sync::watch::Sender<u64>,
    /// Set while [`FakeApiServer::put_object`] writes: stored as given, not validated.
    admin_write: bool,
}

/// The fake API server. Clones share one store.
#[derive(Clone)]
pub struct FakeApiServer {
    state: Arc<Mutex<State>>,
}

impl Default for FakeApiServer {
    fn default() -> Self {
        Self::new()
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn ns_key(ns: &Option<String>) -> String {
    ns.clone().unwrap_or_default()
}

impl FakeApiServer {
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(4096);
        Self {
            state: Arc::new(Mutex::new(State {
                resources: resources::defaults(),
                objects: BTreeMap::new(),
                managers: BTreeMap::new(),
                rv: 1,
                uid_seq: 0,
                history: Vec::new(),
                history_floor: 0,
                sender,
                requests: Vec::new(),
                faults: Vec::new(),
                pods_ready: true,
                manual_rollouts: false,
                rollouts: BTreeMap::new(),
                pod_status: BTreeMap::new(),
                pod_refusals: BTreeMap::new(),
                ip_seq: 0,
                node_ips: BTreeMap::new(),
                syncing_pods: false,
                watch_epoch: tokio::sync::watch::Sender::new(0),
                admin_write: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock poisons it; the state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A `kube::Client` talking to this fake, with `default` as its default namespace.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    /// Serve another resource kind.
    pub fn register(&self, info: ResourceInfo) {
        self.lock().resources.insert(info.key(), info);
    }

    /// Stop serving `resource` (a [`keys`] value such as [`keys::EDGECACHES`]): its requests
    /// answer 404, as a real API server's do before the CRD is installed. Returns whether it
    /// was served.
    pub fn unregister(&self, resource: &str) -> bool {
        self.lock().resources.remove(resource).is_some()
    }

    /// Serve the kind a CustomResourceDefinition (as JSON) defines, with its schema: unknown
    /// fields are pruned on writes, or refused when the request asks `fieldValidation=Strict`
    /// (what `kubectl apply` does by default). Returns false for a malformed CRD.
    pub fn install_crd(&self, crd: &Value) -> bool {
        match ResourceInfo::from_crd(crd) {
            Some(info) => {
                self.register(info);
                true
            }
            None => false,
        }
    }

    /// Add (or relabel) a Node.
    pub fn add_node(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        self.put_object(
            keys::NODES,
            None,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}}),
        );
    }

    /// Add a taint to a Node.
    pub fn taint_node(&self, name: &str, key: &str, effect: &str) {
        let mut st = self.lock();
        let k = (keys::NODES.to_string(), String::new(), name.to_string());
        if let Some(mut node) = st.objects.get(&k).cloned() {
            let taints = node["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut taints = taints;
            taints.push(json!({"key": key, "effect": effect}));
            node["spec"]["taints"] = json!(taints);
            let _ = st.commit(&k, node, "fake-admin", None, "Update");
            st.simulate_all();
        }
    }

    /// Create or replace an object directly (as an admin would), outside any request. It is
    /// pruned and defaulted but not validated: it stands for an object stored under an older
    /// schema or version of the rules.
    pub fn put_object(&self, resource: &str, namespace: Option<&str>, mut obj: Value) {
        let mut st = self.lock();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if let Some(ns) = namespace {
            obj["metadata"]["namespace"] = json!(ns);
        }
        let k = (
            resource.to_string(),
            namespace.unwrap_or_default().to_string(),
            name,
        );
        st.admin_write = true;
        let _ = st.commit(&k, obj, "fake-admin", None, "Update");
        st.admin_write = false;
        st.react(resource, &k, false);
    }

    /// Create or replace a Pod as the kubelet would report it: scheduled on `node`, with
    /// `status.podIP` = `ip` (none when `None`), phase Running and a `Ready` condition of
    /// `ready`, owned by nothing. The simulated DaemonSets make their own pods on the fake
    /// Nodes; a test that wants pods of its own (their IPs, nodes and readiness) and adds no
    /// Nodes puts them here. A Pod deleted and put again gets a new uid.
    pub fn put_pod(
        &self,
        namespace: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
        node: &str,
        ip: Option<&str>,
        ready: bool,
    ) {
        let mut status = json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        });
        if let Some(ip) = ip {
            status["podIP"] = json!(ip);
            status["podIPs"] = json!([{ "ip": ip }]);
        }
        self.put_object(
            keys::PODS,
            Some(namespace),
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "dataplane", "image": "edgecache-dataplane"}]},
                "status": status,
            }),
        );
    }

    /// Turn a Pod's `Ready` condition on or off (the kubelet's readiness probe); false when
    /// there is no such Pod.
    pub fn set_pod_ready(&self, namespace: &str, name: &str, ready: bool) -> bool {
        let Some(mut pod) = self.get(keys::PODS, Some(namespace), name) else {
            return false;
        };
        pod["status"]["conditions"] =
            json!([{"type": "Ready", "status": if ready { "True" } else { "False" }}]);
        self.put_object(keys::PODS, Some(namespace), pod);
        true
    }

    /// Whether the simulated DaemonSet pods are ready (default: true). Re-simulates every
    /// DaemonSet.
    pub fn set_pods_ready(&self, ready: bool) {
        let mut st = self.lock();
        st.pods_ready = ready;
        st.simulate_all();
    }

    /// Report `status` for a DaemonSet pod as its kubelet would (e.g. a container waiting in
    /// `ImagePullBackOff`), until called again with `None`, which brings back the running
    /// status of [`Self::set_pods_ready`]. The pod's IP is kept when `status` has none.
    /// Re-simulates every DaemonSet.
    pub fn set_pod_status(&self, namespace: &str, name: &str, status: Option<Value>) {
        let mut st = self.lock();
        let k = (
            pods::PODS.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        match status {
            Some(s) => st.pod_status.insert(k, s),
            None => st.pod_status.remove(&k),
        };
        st.simulate_all();
    }

    /// Refuse the creation of pods in `namespace` with `message` (what admission answers: Pod
    /// Security, a ResourceQuota that requires limits, a missing PriorityClass), until called
    /// again with `None`. The simulated DaemonSet controller then creates no pod there, counts
    /// only the pods that exist in `currentNumberScheduled`, and records a core/v1 Warning Event
    /// `FailedCreate` on the DaemonSet (`Error creating: MESSAGE`), as the real one does.
    /// Re-simulates every DaemonSet.
    pub fn refuse_pods(&self, namespace: &str, message: Option<&str>) {
        let mut st = self.lock();
        match message {
            Some(m) => st.pod_refusals.insert(namespace.to_string(), m.to_string()),
            None => st.pod_refusals.remove(namespace),
        };
        st.simulate_all();
    }

    /// Roll new pod templates out step by step (see [`Self::advance_rollouts`]) instead of at
    /// once.
    pub fn set_manual_rollouts(&self, manual: bool) {
        let mut st = self.lock();
        st.manual_rollouts = manual;
        if !manual {
            st.rollouts.values_mut().for_each(|r| r.1 = None);
        }
        st.simulate_all();
    }

    /// Replace `maxUnavailable` more pods of every DaemonSet that is rolling out.
    pub fn advance_rollouts(&self) {
        let mut st = self.lock();
        let nodes = st.nodes();
        let keys: Vec<ObjKey> = st.rollouts.keys().cloned().collect();
        for k in keys {
            let Some(ds) = st.objects.get(&k).cloned() else {
                continue;
            };
            let desired = daemonset_status(&ds, &nodes, true, None)["desiredNumberScheduled"]
                .as_i64()
                .unwrap_or(0);
            if let Some((_, Some(updated))) = st.rollouts.get_mut(&k) {
                *updated += sim::rollout_step(&ds, desired);
                if *updated >= desired {
                    st.rollouts.insert(
                        k.clone(),
                        (ds["metadata"]["generation"].as_i64().unwrap_or(1), None),
                    );
                }
            }
        }
        st.simulate_all();
    }

    /// End every open watch stream (clients reconnect from their last resourceVersion).
    pub fn drop_watches(&self) {
        self.lock().watch_epoch.send_modify(|e| *e += 1);
    }

    /// The stored object, if any.
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let k = (
            resource.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        self.lock().objects.get(&k).cloned()
    }

    /// Every stored object of a resource.
    pub fn list(&self, resource: &str) -> Vec<Value> {
        self.lock()
            .objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Delete an object as an admin would (finalizers and garbage collection apply).
    pub fn delete(&self, resource: &str, namespace: Option<&str>, name: &str) -> bool {
        let k = (
            resource.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        self.lock()
            .delete_object(&k, Propagation::Background)
            .is_ok()
    }

    /// Every committed change so far, oldest first (compaction does not drop them here).
    pub fn changes(&self) -> Vec<Change> {
        self.lock().history.iter().map(|c| (**c).clone()).collect()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Forget the watch history: watches from an older resourceVersion get 410 Gone.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.history_floor = st.rv;
    }

    /// Fail matching requests (see [`Fault`]).
    pub fn inject_fault(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Drop every injected fault not yet used.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Every request answered so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.lock().requests.clone()
    }

    /// Field sets per manager (`manager` or `manager/status`) of an object.
    pub fn managed_fields(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> BTreeMap<String, FieldSet> {
        let k = (
            resource.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        self.lock()
            .managers
            .get(&k)
            .map(|m| {
                m.iter()
                    .map(|((mgr, sub), o)| {
                        let name = match sub {
                            Some(s) => format!("{mgr}/{s}"),
                            None => mgr.clone(),
                        };
                        (name, o.fields.clone())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn handle(self, req: Request<kube::client::Body>) -> Response<FakeBody> {
        let (parts, body) = req.into_parts();
        let uri = parts.uri.to_string();
        let method = parts.method.clone();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return self.finish(
                    &method,
                    &uri,
                    Err(ApiError::new(400, "BadRequest", format!("body: {e}"))),
                );
            }
        };
        if let Some(err) = self.take_fault(&method, parts.uri.path()) {
            return self.finish(&method, &uri, Err(err));
        }
        let query = resources::parse_query(parts.uri.query());
        let Some(target) = parse_path(parts.uri.path()) else {
            return self.finish(&method, &uri, Err(ApiError::not_found(parts.uri.path())));
        };
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_string();
        // `Accept: ...;as=PartialObjectMetadata[List]` (kube's metadata-only Api): the objects'
        // metadata alone, as the real server sends it.
        let meta_only = parts
            .headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("as=PartialObjectMetadata"));
        if method == Method::GET
            && target.name.is_none()
            && matches!(query.get("watch").map(String::as_str), Some("true" | "1"))
        {
            let resp = self.watch(&target, &query, meta_only);
            let status = resp.status().as_u16();
            self.lock().requests.push(RequestRecord {
                method,
                uri,
                status,
                at: std::time::Instant::now(),
            });
            return resp;
        }
        let result = {
            let mut st = self.lock();
            st.dispatch(&method, &target, &query, &content_type, &body)
        };
        let result = match result {
            Ok((code, v)) if meta_only && method == Method::GET => Ok((code, partial_metadata(&v))),
            other => other,
        };
        self.finish(&method, &uri, result)
    }

    fn take_fault(&self, method: &Method, path: &str) -> Option<ApiError> {
        let mut st = self.lock();
        let i = st.faults.iter().position(|f| {
            f.times > 0
                && f.method.as_ref().is_none_or(|m| m == method)
                && path.contains(&f.path_contains)
        })?;
        let code = st.faults[i].code;
        st.faults[i].times -= 1;
        if st.faults[i].times == 0 {
            st.faults.remove(i);
        }
        Some(injected(code, method, path))
    }

    fn finish(
        &self,
        method: &Method,
        uri: &str,
        result: Result<(u16, Value), ApiError>,
    ) -> Response<FakeBody> {
        let (code, body) = match result {
            Ok((code, v)) => (code, v),
            Err(e) => (e.code, e.status()),
        };
        self.lock().requests.push(RequestRecord {
            method: method.clone(),
            uri: uri.to_string(),
            status: code,
            at: std::time::Instant::now(),
        });
        json_response(code, &body)
    }

    fn watch(
        &self,
        target: &Target,
        query: &BTreeMap<String, String>,
        meta_only: bool,
    ) -> Response<FakeBody> {
        let st = self.lock();
        if !st.resources.contains_key(&target.resource) {
            return json_response(404, &ApiError::not_found(&target.resource).status());
        }
        let filter = match Filter::new(target, query) {
            Ok(f) => f,
            Err(e) => return json_response(400, &e.status()),
        };
        let since = query
            .get("resourceVersion")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v != 0);
        let send_initial = query.get("sendInitialEvents").map(String::as_str) == Some("true");
        let mut initial: Vec<Value> = Vec::new();
        match since {
            Some(rv) if !send_initial => {
                if rv < st.history_floor {
                    initial.push(json!({"type": "ERROR", "object": ApiError::new(410, "Expired", format!("too old resource version: {rv} ({})", st.history_floor)).status()}));
                } else {
                    for c in st.history.iter().filter(|c| c.resource_version > rv) {
                        if filter.matches_change(c) {
                            initial.push(event_json(c));
                        }
                    }
                }
            }
            _ => {
                for ((r, ns, _), obj) in &st.objects {
                    if *r == target.resource && filter.matches_obj(ns, obj) {
                        initial.push(json!({"type": "ADDED", "object": obj}));
                    }
                }
                if send_initial {
                    initial.push(json!({"type": "BOOKMARK", "object": {
                        "kind": st.resources.get(&target.resource).map(|r| r.kind.clone()).unwrap_or_default(),
                        "apiVersion": st.resources.get(&target.resource).map(ResourceInfo::api_version).unwrap_or_default(),
                        "metadata": {"resourceVersion": st.rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}
                    }}));
                }
            }
        }
        let expired = initial.iter().any(|e| e["type"] == "ERROR");
        let mut rx = st.sender.subscribe();
        let mut epoch = st.watch_epoch.subscribe();
        drop(st);
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(290);
        let (tx, body_rx) = mpsc::channel::<Bytes>(64);
        tokio::spawn(async move {
            let shape = |mut e: Value| {
                if meta_only && e["type"] != "ERROR" {
                    e["object"] = partial_metadata(&e["object"]);
                }
                e
            };
            for e in initial {
                if tx.send(line(&shape(e))).await.is_err() {
                    return;
                }
            }
            if expired {
                return;
            }
            let deadline = tokio::time::sleep(Duration::from_secs(timeout));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = &mut deadline => return,
                    _ = tx.closed() => return,
                    _ = epoch.changed() => return,
                    msg = rx.recv() => match msg {
                        Ok(c) => {
                            if filter.matches_change(&c) && tx.send(line(&shape(event_json(&c)))).await.is_err() {
                                return;
                            }
                        }
                        // Lagged or closed: end the watch; the client resumes from its last
                        // resourceVersion through the history.
                        Err(_) => return,
                    }
                }
            }
        });
        let stream = futures_util::stream::unfold(body_rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, Infallible>(http_body::Frame::data(b)), rx))
        });
        let mut resp = Response::new(UnsyncBoxBody::new(StreamBody::new(stream)));
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        resp
    }
}

/// The answer an injected fault gives: the reason the real server gives with that code, and for
/// 403 its RBAC message (`daemonsets.apps "web" is forbidden: User ... cannot patch ...`).
fn injected(code: u16, method: &Method, path: &str) -> ApiError {
    let reason = match code {
        400 => "BadRequest",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "Unknown",
    };
    let Some(t) = parse_path(path).filter(|_| code == 403) else {
        return ApiError::new(code, reason, "injected fault");
    };
    let (group, plural) = match t.resource.split('/').collect::<Vec<_>>().as_slice() {
        [g, _, p] => (g.to_string(), p.to_string()),
        _ => (String::new(), t.resource.clone()),
    };
    let verb = match *method {
        Method::GET if t.name.is_none() => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "access",
    };
    let qualified = if group.is_empty() {
        plural.clone()
    } else {
        format!("{plural}.{group}")
    };
    let what = match &t.name {
        Some(n) => format!("{qualified} \"{n}\""),
        None => qualified,
    };
    let scope = match &t.namespace {
        Some(ns) => format!(" in the namespace \"{ns}\""),
        None => " at the cluster scope".into(),
    };
    ApiError::new(
        403,
        reason,
        format!(
            "{what} is forbidden: User \"system:serviceaccount:edgecache-system:edgecache-operator\" cannot {verb} resource \"{plural}\" in API group \"{group}\"{scope}"
        ),
    )
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

/// An object (or a list of them) as a metadata-only request gets it: `PartialObjectMetadata`.
fn partial_metadata(v: &Value) -> Value {
    let one = |o: &Value| {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": o["metadata"]})
    };
    match v["items"].as_array() {
        Some(items) => json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": v["metadata"], "items": items.iter().map(one).collect::<Vec<_>>(),
        }),
        None => one(v),
    }
}

fn event_json(c: &Change) -> Value {
    json!({"type": c.change.as_str(), "object": c.object})
}

fn json_response(code: u16, body: &Value) -> Response<FakeBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Which objects a list or watch returns.
struct Filter {
    resource: String,
    namespace: Option<String>,
    labels: LabelSelector,
    name: Option<String>,
    field_namespace: Option<String>,
    /// Other `a.b=value` field selectors (e.g. an Event's `involvedObject.name`, `reason`): the
    /// field at that path must be that string. The real server takes only the fields each kind
    /// declares; the fake takes any path.
    fields: Vec<(String, String)>,
}

impl Filter {
    fn new(target: &Target, query: &BTreeMap<String, String>) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
            .map_err(|e| ApiError::new(400, "BadRequest", e))?;
        let mut name = None;
        let mut field_namespace = None;
        let mut fields = Vec::new();
        for part in query
            .get("fieldSelector")
            .map_or("", String::as_str)
            .split(',')
            .filter(|p| !p.is_empty())
        {
            match part.split_once('=') {
                Some(("metadata.name", v)) => name = Some(v.trim_start_matches('=').to_string()),
                Some(("metadata.namespace", v)) => {
                    field_namespace = Some(v.trim_start_matches('=').to_string())
                }
                Some((path, v)) if !path.is_empty() && !path.ends_with('!') => fields.push((
                    format!("/{}", path.replace('.', "/")),
                    v.trim_start_matches('=').to_string(),
                )),
                _ => {
                    return Err(ApiError::new(
                        400,
                        "BadRequest",
                        format!("unsupported field selector `{part}`"),
                    ));
                }
            }
        }
        Ok(Self {
            resource: target.resource.clone(),
            namespace: target.namespace.clone(),
            labels,
            name,
            field_namespace,
            fields,
        })
    }

    fn matches_obj(&self, ns: &str, obj: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == ns)
            && self.field_namespace.as_deref().is_none_or(|n| n == ns)
            && self
                .name
                .as_deref()
                .is_none_or(|n| obj.pointer("/metadata/name").and_then(Value::as_str) == Some(n))
            && self
                .labels
                .matches(&sim::string_map(obj.pointer("/metadata/labels")))
            && self
                .fields
                .iter()
                .all(|(path, v)| obj.pointer(path).and_then(Value::as_str) == Some(v.as_str()))
    }

    fn matches_change(&self, c: &Change) -> bool {
        c.resource == self.resource
            && self.matches_obj(c.namespace.as_deref().unwrap_or(""), &c.object)
    }
}

impl State {
    fn info(&self, target: &Target) -> Result<ResourceInfo, ApiError> {
        self.resources
            .get(&target.resource)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&format!("resource {}", target.resource)))
    }

    fn dispatch(
        &mut self,
        method: &Method,
        target: &Target,
        query: &BTreeMap<String, String>,
        content_type: &str,
        body: &Bytes,
    ) -> Result<(u16, Value), ApiError> {
        let info = self.info(target)?;
        let sub = target.subresource.clone();
        if let Some(s) = &sub
            && (s != "status" || !info.status_subresource)
        {
            return Err(ApiError::not_found(&format!("subresource {s}")));
        }
        let manager = query
            .get("fieldManager")
            .cloned()
            .unwrap_or_else(|| "unknown".into());
        let strict = query.get("fieldValidation").map(String::as_str) == Some("Strict");
        let parse = || -> Result<Value, ApiError> {
            let v: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::new(400, "BadRequest", format!("body is not JSON: {e}")))?;
            if strict {
                admission::strict(&info, &v)?;
            }
            Ok(v)
        };
        match (method, &target.name) {
            (&Method::GET, None) => Ok((200, self.list_objects(&info, target, query)?)),
            (&Method::GET, Some(name)) => {
                let k = (
                    target.resource.clone(),
                    ns_key(&target.namespace),
                    name.clone(),
                );
                self.objects
                    .get(&k)
                    .cloned()
                    .map(|o| (200, o))
                    .ok_or_else(|| ApiError::not_found(&format!("{} {name}", info.kind)))
            }
            (&Method::POST, None) => {
                let obj = parse()?;
                self.create(&info, target, obj, &manager).map(|o| (201, o))
            }
            (&Method::PUT, Some(name)) => {
                let obj = parse()?;
                self.replace(&info, target, name, obj, sub.as_deref(), &manager)
                    .map(|o| (200, o))
            }
            (&Method::PATCH, Some(name)) => {
                let patch = parse()?;
                let force = query.get("force").map(String::as_str) == Some("true");
                self.patch(
                    &info,
                    target,
                    name,
                    content_type,
                    patch,
                    sub.as_deref(),
                    &manager,
                    force,
                    query.contains_key("fieldManager"),
                )
            }
            (&Method::DELETE, Some(name)) => {
                let k = (
                    target.resource.clone(),
                    ns_key(&target.namespace),
                    name.clone(),
                );
                // DeleteOptions.preconditions.uid, as the API server checks it (409).
                let options: Option<Value> = serde_json::from_slice(body).ok();
                let want_uid = options
                    .as_ref()
                    .and_then(|o| o.pointer("/preconditions/uid"))
                    .and_then(Value::as_str);
                if let (Some(want), Some(obj)) = (want_uid, self.objects.get(&k))
                    && obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(want)
                {
                    return Err(ApiError::new(
                        409,
                        "Conflict",
                        format!(
                            "Precondition failed: UID in precondition: {want}, UID in object meta: {}",
                            obj.pointer("/metadata/uid")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                        ),
                    ));
                }
                let policy =
                    Propagation::parse(query.get("propagationPolicy").map(String::as_str), body)?;
                self.delete_object(&k, policy).map(|o| (200, o))
            }
            _ => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{method} is not supported here"),
            )),
        }
    }

    fn list_objects(
        &self,
        info: &ResourceInfo,
        target: &Target,
        query: &BTreeMap<String, String>,
    ) -> Result<Value, ApiError> {
        let filter = Filter::new(target, query)?;
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|((r, ns, _), obj)| *r == target.resource && filter.matches_obj(ns, obj))
            .map(|(_, o)| o.clone())
            .collect();
        Ok(json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        }))
    }

    fn create(
        &mut self,
        info: &ResourceInfo,
        target: &Target,
        mut obj: Value,
        manager: &str,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "BadRequest", "body must be an object"));
        }
        if obj["metadata"].is_null() {
            obj["metadata"] = json!({});
        }
        let name = match obj.pointer("/metadata/name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match obj
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
            {
                Some(prefix) => {
                    self.uid_seq += 1;
                    format!("{prefix}{:05x}", self.uid_seq)
                }
                None => return Err(ApiError::new(422, "Invalid", "metadata.name is required")),
            },
        };
        obj["metadata"]["name"] = json!(name);
        if info.namespaced {
            let ns = target
                .namespace
                .clone()
                .or_else(|| {
                    obj.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .map(String::from)
                })
                .unwrap_or_else(|| "default".into());
            obj["metadata"]["namespace"] = json!(ns);
        }
        let k = (
            target.resource.clone(),
            ns_key(&target.namespace),
            name.clone(),
        );
        if self.objects.contains_key(&k) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} {name} already exists", info.kind),
            ));
        }
        if info.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        let out = self.commit(&k, obj, manager, None, "Update")?;
        self.after_write(&target.resource, &k, false);
        Ok(out)
    }

    fn replace(
        &mut self,
        info: &ResourceInfo,
        target: &Target,
        name: &str,
        obj: Value,
        sub: Option<&str>,
        manager: &str,
    ) -> Result<Value, ApiError> {
        let k = (
            target.resource.clone(),
            ns_key(&target.namespace),
            name.to_string(),
        );
        let old = self
            .objects
            .get(&k)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&format!("{} {name}", info.kind)))?;
        if stale(&obj, &old) {
            return Err(conflict(info, name));
        }
        let new = split_status(info, &old, obj, sub);
        let out = self.commit(&k, new, manager, sub, "Update")?;
        self.after_write(&target.resource, &k, sub.is_some());
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn patch(
        &mut self,
        info: &ResourceInfo,
        target: &Target,
        name: &str,
        content_type: &str,
        patch: Value,
        sub: Option<&str>,
        manager: &str,
        force: bool,
        has_manager: bool,
    ) -> Result<(u16, Value), ApiError> {
        let k = (
            target.resource.clone(),
            ns_key(&target.namespace),
            name.to_string(),
        );
        let old = self.objects.get(&k).cloned();
        let ct = content_type.split(';').next().unwrap_or("").trim();
        if ct == "application/apply-patch+yaml" {
            if !has_manager {
                return Err(ApiError::new(
                    400,
                    "BadRequest",
                    "fieldManager is required for apply patch",
                ));
            }
            return self.apply(info, target, &k, old, patch, sub, manager, force);
        }
        let old = old.ok_or_else(|| ApiError::not_found(&format!("{} {name}", info.kind)))?;
        let mut new = old.clone();
        match ct {
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                if stale(&patch, &old) {
                    return Err(conflict(info, name));
                }
                merge_patch(&mut new, &patch);
            }
            "application/json-patch+json" => {
                let p: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                    ApiError::new(400, "BadRequest", format!("invalid JSON patch: {e}"))
                })?;
                json_patch::patch(&mut new, &p).map_err(|e| {
                    ApiError::new(422, "Invalid", format!("JSON patch failed: {e}"))
                })?;
            }
            other => {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!("unsupported patch type {other}"),
                ));
            }
        }
        let new = split_status(info, &old, new, sub);
        let out = self.commit(&k, new, manager, sub, "Update")?;
        self.after_write(&target.resource, &k, sub.is_some());
        Ok((200, out))
    }

    /// The server-side-apply approximation (see the crate docs).
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        info: &ResourceInfo,
        target: &Target,
        k: &ObjKey,
        old: Option<Value>,
        applied: Value,
        sub: Option<&str>,
        manager: &str,
        force: bool,
    ) -> Result<(u16, Value), ApiError> {
        let name = &k.2;
        if applied.pointer("/metadata/name").and_then(Value::as_str) != Some(name.as_str()) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                "metadata.name in the body must match the URL",
            ));
        }
        let status_only = sub.is_some();
        let skip_status = info.status_subresource && !status_only;
        let keys = ListKeys {
            resource: &target.resource,
            schema: info.schema.as_ref(),
        };
        let applied_paths = leaf_paths(&applied, status_only, skip_status, &keys);
        let mkey: ManagerKey = (manager.to_string(), sub.map(String::from));
        let base = match &old {
            Some(o) => o.clone(),
            None => {
                if status_only {
                    return Err(ApiError::not_found(&format!("{} {name}", info.kind)));
                }
                let mut o = json!({"apiVersion": info.api_version(), "kind": info.kind, "metadata": {"name": name}});
                if info.namespaced {
                    o["metadata"]["namespace"] = json!(k.1);
                }
                o
            }
        };
        let mut owners = self.managers.get(k).cloned().unwrap_or_default();
        // Conflicts: a field another manager owns, applied with a different value.
        let mut conflicts = Vec::new();
        for (other, own) in owners.iter_mut().filter(|(m, _)| **m != mkey) {
            let clash: Vec<Path> = own
                .fields
                .iter()
                .filter(|q| {
                    applied_paths
                        .iter()
                        .any(|p| overlaps(p, q) && get(&base, p) != get(&applied, p))
                })
                .cloned()
                .collect();
            if clash.is_empty() {
                continue;
            }
            if force {
                for q in &clash {
                    own.fields.remove(q);
                }
            } else {
                for q in clash {
                    conflicts.push(format!("conflict with \"{}\": .{}", other.0, q.join(".")));
                }
            }
        }
        if !conflicts.is_empty() {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Apply failed with {} conflict{}: {}",
                    conflicts.len(),
                    if conflicts.len() == 1 { "" } else { "s" },
                    conflicts.join(", ")
                ),
            ));
        }
        let mut new = base.clone();
        // Prune what this manager applied before and no longer applies, unless someone else
        // owns it too.
        if let Some(prev) = owners.get(&mkey) {
            for q in prev.fields.difference(&applied_paths) {
                let shared = owners
                    .iter()
                    .any(|(m, o)| *m != mkey && o.fields.iter().any(|f| shares(f, q)));
                if !shared {
                    remove(&mut new, q);
                }
            }
        }
        for p in &applied_paths {
            if let Some(v) = get(&applied, p) {
                set(&mut new, p, v.clone());
            }
        }
        order_like(&mut new, &applied, &keys);
        owners.insert(
            mkey,
            Ownership {
                operation: "Apply".into(),
                fields: applied_paths,
            },
        );
        owners.retain(|_, o| !o.fields.is_empty());
        let before = self.managers.insert(k.clone(), owners);
        let created = old.is_none();
        let out = self.commit_raw(k, new, created).inspect_err(|_| {
            self.restore_managers(k, before.clone());
        })?;
        self.after_write(&target.resource, k, status_only);
        Ok((if created { 201 } else { 200 }, out))
    }

    /// Record an update operation's ownership, then commit.
    fn commit(
        &mut self,
        k: &ObjKey,
        new: Value,
        manager: &str,
        sub: Option<&str>,
        operation: &str,
    ) -> Result<Value, ApiError> {
        let old = self.objects.get(k).cloned();
        let status_only = sub.is_some();
        let info = self.resources.get(&k.0).cloned();
        let keys = ListKeys {
            resource: &k.0,
            schema: info.as_ref().and_then(|i| i.schema.as_ref()),
        };
        let changed = changed_paths(
            old.as_ref().unwrap_or(&Value::Null),
            &new,
            status_only,
            false,
            &keys,
        );
        let before = self.managers.get(k).cloned();
        if !changed.is_empty() {
            let owners = self.managers.entry(k.clone()).or_default();
            for own in owners.values_mut() {
                own.fields
                    .retain(|q| !changed.iter().any(|p| overlaps(p, q)));
            }
            let entry = owners
                .entry((manager.to_string(), sub.map(String::from)))
                .or_default();
            entry.operation = operation.into();
            entry
                .fields
                .extend(changed.into_iter().filter(|p| get(&new, p).is_some()));
            owners.retain(|_, o| !o.fields.is_empty());
        }
        self.commit_raw(k, new, old.is_none())
            .inspect_err(|_| self.restore_managers(k, before))
    }

    /// Put back the field owners of `k` after a refused write.
    fn restore_managers(&mut self, k: &ObjKey, before: Option<BTreeMap<ManagerKey, Ownership>>) {
        match before {
            Some(m) => self.managers.insert(k.clone(), m),
            None => self.managers.remove(k),
        };
    }

    /// Store `new` (server metadata filled in) unless nothing changed; emit the change.
    fn commit_raw(&mut self, k: &ObjKey, mut new: Value, created: bool) -> Result<Value, ApiError> {
        let old = self.objects.get(k).cloned();
        if new["metadata"].is_null() {
            new["metadata"] = json!({});
        }
        let info = self.resources.get(&k.0).cloned();
        admission::admit(
            &k.0,
            info.as_ref(),
            &mut new,
            old.as_ref(),
            !self.admin_write,
        )?;
        if let Some(info) = &info {
            new["apiVersion"] = json!(info.api_version());
            new["kind"] = json!(info.kind);
        }
        match &old {
            Some(o) => {
                for f in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "name",
                    "namespace",
                ] {
                    match o["metadata"].get(f) {
                        Some(v) => new["metadata"][f] = v.clone(),
                        None => {
                            if let Some(m) = new["metadata"].as_object_mut() {
                                m.remove(f);
                            }
                        }
                    }
                }
                let generation = o
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                let bump = strip(o) != strip(&new);
                new["metadata"]["generation"] =
                    json!(if bump { generation + 1 } else { generation });
            }
            None => {
                self.uid_seq += 1;
                new["metadata"]["uid"] =
                    json!(format!("00000000-0000-4000-8000-{:012x}", self.uid_seq));
                new["metadata"]["creationTimestamp"] = json!(now());
                new["metadata"]["generation"] = json!(1);
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("deletionTimestamp");
                }
            }
        }
        new["metadata"]["managedFields"] = self.managed_fields_json(k, info.as_ref());
        if let Some(o) = &old {
            new["metadata"]["resourceVersion"] = o["metadata"]["resourceVersion"].clone();
            if *o == new {
                return Ok(new);
            }
        }
        let finalizing = new.pointer("/metadata/deletionTimestamp").is_some()
            && new
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        if finalizing {
            return self.remove_object(k, new);
        }
        self.rv += 1;
        new["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let status_only = old
            .as_ref()
            .is_some_and(|o| without_status(o) == without_status(&new));
        self.objects.insert(k.clone(), new.clone());
        self.emit(
            k,
            if created || old.is_none() {
                ChangeType::Added
            } else {
                ChangeType::Modified
            },
            new.clone(),
            status_only,
        );
        Ok(new)
    }

    fn managed_fields_json(&self, k: &ObjKey, info: Option<&ResourceInfo>) -> Value {
        let api_version = info.map(ResourceInfo::api_version).unwrap_or_default();
        let entries: Vec<Value> = self
            .managers
            .get(k)
            .into_iter()
            .flatten()
            .map(|((m, sub), o)| {
                let mut e = json!({
                    "manager": m, "operation": o.operation, "apiVersion": api_version,
                    "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&o.fields),
                });
                if let Some(s) = sub {
                    e["subresource"] = json!(s);
                }
                e
            })
            .collect();
        json!(entries)
    }

    fn emit(&mut self, k: &ObjKey, change: ChangeType, object: Value, status_only: bool) {
        let c = Arc::new(Change {
            resource_version: self.rv,
            change,
            resource: k.0.clone(),
            namespace: (!k.1.is_empty()).then(|| k.1.clone()),
            name: k.2.clone(),
            status_only,
            object,
        });
        self.history.push(c.clone());
        // No receivers is fine.
        let _ = self.sender.send(c);
    }

    fn remove_object(&mut self, k: &ObjKey, mut last: Value) -> Result<Value, ApiError> {
        self.objects.remove(k);
        self.managers.remove(k);
        self.rollouts.remove(k);
        self.rv += 1;
        last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.emit(k, ChangeType::Deleted, last.clone(), false);
        // The garbage collector: the dependents of what went, and the owners in foreground
        // deletion that waited for it.
        if let Some(uid) = last.pointer("/metadata/uid").and_then(Value::as_str) {
            self.collect_dependents(uid);
        }
        let owners: Vec<String> = last
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str().map(String::from))
            .collect();
        for owner in owners {
            self.finish_foreground(&owner);
        }
        if k.0 == keys::NODES {
            self.simulate_all();
        }
        // The DaemonSet controller makes a deleted pod again (under the same name here).
        if k.0 == pods::PODS && !self.syncing_pods {
            let owner = last
                .pointer("/metadata/ownerReferences/0/name")
                .and_then(Value::as_str)
                .map(|ds| (keys::DAEMONSETS.to_string(), k.1.clone(), ds.to_string()));
            if let Some(ds) = owner {
                self.simulate(&ds);
            }
        }
        Ok(last)
    }

    /// What follows a write through the API: the controllers react, and the garbage collector
    /// deletes an object whose owners are all gone.
    fn after_write(&mut self, resource: &str, k: &ObjKey, status_only: bool) {
        self.react(resource, k, status_only);
        if !status_only {
            self.collect_if_orphaned(k);
        }
    }

    /// The simulated controllers' reaction to a write.
    fn react(&mut self, resource: &str, k: &ObjKey, status_only: bool) {
        if status_only {
            return;
        }
        if resource == keys::DAEMONSETS {
            self.simulate(k);
        } else if resource == keys::NODES {
            self.simulate_all();
        }
    }

    fn simulate_all(&mut self) {
        let keys: Vec<ObjKey> = self
            .objects
            .keys()
            .filter(|(r, _, _)| r == keys::DAEMONSETS)
            .cloned()
            .collect();
        for k in keys {
            self.simulate(&k);
        }
    }

    fn nodes(&self) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((r, _, _), _)| r == keys::NODES)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The DaemonSet controller: recompute one DaemonSet's status.
    fn simulate(&mut self, k: &ObjKey) {
        let Some(ds) = self.objects.get(k).cloned() else {
            return;
        };
        let nodes = self.nodes();
        let generation = ds["metadata"]["generation"].as_i64().unwrap_or(1);
        let updated = match self.rollouts.get(k) {
            // A new template on a DaemonSet that existed before: its pods are replaced later.
            Some((g, _)) if *g != generation && self.manual_rollouts => Some(0),
            Some((g, u)) if *g == generation => *u,
            _ => None,
        };
        self.rollouts.insert(k.clone(), (generation, updated));
        let mut status = daemonset_status(&ds, &nodes, self.pods_ready, updated);
        let (scheduled, ready) = self.sync_pods(k, &ds, &nodes);
        let desired = status["desiredNumberScheduled"].as_i64().unwrap_or(0);
        status["currentNumberScheduled"] = json!(scheduled);
        status["numberReady"] = json!(ready);
        status["numberAvailable"] = json!(ready);
        match status.as_object_mut() {
            Some(m) if desired > ready => {
                m.insert("numberUnavailable".into(), json!(desired - ready));
            }
            Some(m) => {
                m.remove("numberUnavailable");
            }
            None => {}
        }
        if ds.get("status") == Some(&status) {
            return;
        }
        let mut new = ds;
        new["status"] = status;
        let _ = self.commit(k, new, DAEMONSET_CONTROLLER, Some("status"), "Update");
    }
}

impl State {
    /// The DaemonSet controller's pods: one per node `ds` fits (created when missing, deleted
    /// from nodes it no longer fits or that are gone), each with the kubelet's status; none is
    /// created where [`FakeApiServer::refuse_pods`] refuses them (a `FailedCreate` Event on the
    /// DaemonSet instead). Returns how many exist and how many are ready.
    fn sync_pods(&mut self, k: &ObjKey, ds: &Value, nodes: &[Value]) -> (i64, i64) {
        let empty = json!({});
        let pod_spec = ds.pointer("/spec/template/spec").unwrap_or(&empty).clone();
        let host_network = pod_spec["hostNetwork"].as_bool().unwrap_or(false);
        let uid = ds
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let fitting: Vec<String> = nodes
            .iter()
            .filter(|n| pod_fits_node(&pod_spec, n))
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(String::from)
            .collect();
        let mine: Vec<(ObjKey, Value)> = self
            .objects
            .iter()
            .filter(|((r, ns, _), pod)| {
                r == pods::PODS
                    && *ns == k.1
                    && pod
                        .pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|refs| refs.iter().any(|o| o["uid"] == uid))
            })
            .map(|(pk, pod)| (pk.clone(), pod.clone()))
            .collect();
        for (pk, pod) in mine {
            let node = pod.pointer("/spec/nodeName").and_then(Value::as_str);
            if !node.is_some_and(|n| fitting.iter().any(|f| f == n)) {
                self.pod_status.remove(&pk);
                self.syncing_pods = true;
                let _ = self.remove_object(&pk, pod);
                self.syncing_pods = false;
            }
        }
        let (mut scheduled, mut ready) = (0, 0);
        let refusal = self.pod_refusals.get(&k.1).cloned();
        for node in fitting {
            let pk = (
                pods::PODS.to_string(),
                k.1.clone(),
                pods::pod_name(&k.2, &node),
            );
            let existing = self.objects.get(&pk).cloned();
            if let (None, Some(message)) = (&existing, &refusal) {
                self.failed_create(k, ds, message);
                continue;
            }
            scheduled += 1;
            let ip = match existing
                .as_ref()
                .and_then(|p| p.pointer("/status/podIP"))
                .and_then(Value::as_str)
            {
                Some(ip) => ip.to_string(),
                None if host_network => self.node_ip(&node),
                None => {
                    self.ip_seq += 1;
                    pods::address("10.244", self.ip_seq - 1)
                }
            };
            let status = match self.pod_status.get(&pk) {
                Some(s) => {
                    let mut s = s.clone();
                    if s.get("podIP").is_none() {
                        s["podIP"] = json!(ip);
                    }
                    s
                }
                None => pods::running_status(&pod_spec, &ip, self.pods_ready),
            };
            let pod = match existing {
                None => {
                    let mut pod = pods::new_pod(ds, &node, &ip, self.pods_ready);
                    pod["status"] = status;
                    self.commit(&pk, pod, DAEMONSET_CONTROLLER, None, "Update")
                }
                Some(mut pod) if pod.get("status") != Some(&status) => {
                    pod["status"] = status;
                    self.commit(&pk, pod, "fake-kubelet", Some("status"), "Update")
                }
                Some(pod) => Ok(pod),
            };
            if pod.is_ok_and(|p| pods::is_ready(&p)) {
                ready += 1;
            }
        }
        (scheduled, ready)
    }

    /// The DaemonSet controller's Warning Event for a pod that admission refused (one per
    /// DaemonSet and message; written once, so a re-simulation changes nothing).
    fn failed_create(&mut self, k: &ObjKey, ds: &Value, message: &str) {
        let uid = ds.pointer("/metadata/uid").cloned().unwrap_or(json!(""));
        let name = format!("{}.failedcreate", k.2);
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": k.1},
            "involvedObject": {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": k.2,
                               "namespace": k.1, "uid": uid},
            "reason": "FailedCreate",
            "message": format!("Error creating: {message}"),
            "type": "Warning",
            "count": 1,
            "source": {"component": "daemonset-controller"},
        });
        let ek = (pods::CORE_EVENTS.to_string(), k.1.clone(), name);
        if self
            .objects
            .get(&ek)
            .is_some_and(|e| e["message"] == event["message"] && e["involvedObject"]["uid"] == uid)
        {
            return;
        }
        let _ = self.commit(&ek, event, DAEMONSET_CONTROLLER, None, "Update");
    }

    fn node_ip(&mut self, node: &str) -> String {
        if let Some(ip) = self.node_ips.get(node) {
            return ip.clone();
        }
        let n = u32::try_from(self.node_ips.len()).unwrap_or(u32::MAX);
        let ip = pods::address("192.168", n);
        self.node_ips.insert(node.to_string(), ip.clone());
        ip
    }
}

/// Whether `body` names a resourceVersion other than the stored object's (optimistic concurrency).
fn stale(body: &Value, stored: &Value) -> bool {
    let rv = |v: &Value| {
        v.pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from)
    };
    rv(body).is_some_and(|b| Some(b) != rv(stored))
}

fn conflict(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            info.plural
        ),
    )
}

/// For kinds with a status subresource: a main-resource write keeps the stored status; a
/// status write changes the status only.
fn split_status(info: &ResourceInfo, old: &Value, mut new: Value, sub: Option<&str>) -> Value {
    if !info.status_subresource {
        return new;
    }
    if sub == Some("status") {
        let mut out = old.clone();
        match new.get_mut("status").map(Value::take) {
            Some(s) if !s.is_null() => out["status"] = s,
            _ => {
                if let Some(m) = out.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        out
    } else {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        new
    }
}

/// The object without metadata and status: what a generation counts.
fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

fn without_status(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
    }
    v
}

impl tower::Service<Request<kube::client::Body>> for FakeApiServer {
    type Response = Response<FakeBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.handle(req).await) })
    }
}
