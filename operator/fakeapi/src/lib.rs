//! An in-process fake Kubernetes API server for the operator's fast tests: a
//! `tower::Service<http::Request<kube::client::Body>>` handed to `kube::Client::new`, so the real
//! `kube::Api`, watchers and `kube::runtime::Controller` run against it in `cargo test`.
//!
//! It models what the operator's reconcile, status and purge logic need to run, and no more:
//! - an object store keyed by group/version/resource, namespace and name, with a global,
//!   monotonically increasing `resourceVersion`, uids and creation timestamps;
//! - get, list (equality label selectors; equality field selectors on any field path, e.g. an
//!   Event's `involvedObject.name`), create, replace (optimistic concurrency on
//!   `resourceVersion`), delete (at once);
//! - watch as a streaming body of newline-delimited events, resumable from a resourceVersion;
//! - JSON merge patch (strategic merge patch is treated as a merge patch), JSON patch (with
//!   `test` ops, a failed one a 422), and server-side apply as one manager sees it
//!   (`src/patch.rs`: what a manager stops applying goes, fields others wrote stay);
//! - the status subresource split, `metadata.generation` bumped on changes outside metadata
//!   and status only, and no-op writes that change nothing (no new resourceVersion, no event);
//! - a DaemonSet "controller": every DaemonSet's status is recomputed from the fake Nodes (their
//!   labels and the pod template's nodeSelector and required node affinity), and it keeps one Pod
//!   per fitting node (`DAEMONSET-NODE`, bound to the node, owned by the DaemonSet, with a pod
//!   IP, the node's under `hostNetwork`; deleted when the node or the DaemonSet goes, made again
//!   when deleted by hand); pods are ready at once unless [`FakeApiServer::set_pods_ready`] says
//!   not, and a pod's status can be set as its kubelet would report it
//!   ([`FakeApiServer::set_pod_status`]);
//! - Pods put by the test ([`FakeApiServer::put_pod`]), for tests that want pods of their own;
//! - metadata-only requests (`Accept: ...;as=PartialObjectMetadata`, what kube's
//!   `Api<PartialObjectMeta<K>>` and `get_metadata` send);
//! - fault injection ([`FakeApiServer::inject_fault`]: an RBAC refusal, a 422, a 500) and a
//!   request log for wire-level tests.
//!
//! Everything else a real API server does is judged by the real one, in the cluster tier
//! (e2e/tests/kind.rs, control_plane.rs, helm_release.rs; scripts/cluster-tier.sh): validation
//! (built-in kinds, the CRD's schema and CEL rules), defaulting, pruning of unknown fields,
//! admission, field ownership and apply conflicts, garbage collection and finalizers, watch
//! expiry (410) and API server restarts, RBAC. The fake accepts what it is given.

mod patch;
mod pods;
mod resources;
mod sim;

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

use resources::{ResourceInfo, Target, parse_path};
use sim::{LabelSelector, pod_fits_node};

/// The body type of the fake's responses.
pub type FakeBody = UnsyncBoxBody<Bytes, Infallible>;

/// Resource keys of the kinds the tests use most.
pub mod keys {
    pub const NODES: &str = "/v1/nodes";
    pub const CONFIGMAPS: &str = "/v1/configmaps";
    pub const SERVICES: &str = "/v1/services";
    pub const SERVICEACCOUNTS: &str = "/v1/serviceaccounts";
    pub const SECRETS: &str = "/v1/secrets";
    pub const DAEMONSETS: &str = "apps/v1/daemonsets";
    pub const PODS: &str = super::pods::PODS;
    pub const EVENTS: &str = "events.k8s.io/v1/events";
    pub const EDGECACHES: &str = "edgecache.dev/v1alpha1/edgecaches";
    pub const EDGECACHEPURGES: &str = "edgecache.dev/v1alpha1/edgecachepurges";
}

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
struct ApiError {
    code: u16,
    reason: String,
    message: String,
}

impl ApiError {
    fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
            message: message.into(),
        }
    }
    fn not_found(what: &str) -> Self {
        Self::new(404, "NotFound", format!("{what} not found"))
    }
    fn status(&self) -> Value {
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code
        })
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

struct State {
    resources: BTreeMap<String, ResourceInfo>,
    objects: BTreeMap<ObjKey, Value>,
    /// Per object and field manager (`manager` or `manager/status`): what it last applied.
    applied: BTreeMap<ObjKey, BTreeMap<String, Value>>,
    rv: u64,
    uid_seq: u64,
    history: Vec<Arc<Change>>,
    sender: broadcast::Sender<Arc<Change>>,
    requests: Vec<RequestRecord>,
    faults: Vec<Fault>,
    pods_ready: bool,
    /// Pod statuses set by [`FakeApiServer::set_pod_status`], kept until cleared.
    pod_status: BTreeMap<ObjKey, Value>,
    /// Addresses handed out so far, and each node's (for `hostNetwork` pods).
    ip_seq: u32,
    node_ips: BTreeMap<String, String>,
    /// Set while the DaemonSet controller removes pods itself (they are not made again).
    syncing_pods: bool,
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
                applied: BTreeMap::new(),
                rv: 1,
                uid_seq: 0,
                history: Vec::new(),
                sender,
                requests: Vec::new(),
                faults: Vec::new(),
                pods_ready: true,
                pod_status: BTreeMap::new(),
                ip_seq: 0,
                node_ips: BTreeMap::new(),
                syncing_pods: false,
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

    /// Stop serving `resource` (a [`keys`] value such as [`keys::EDGECACHES`]): its requests
    /// answer 404, as a real API server's do before the CRD is installed. Returns whether it
    /// was served.
    pub fn unregister(&self, resource: &str) -> bool {
        self.lock().resources.remove(resource).is_some()
    }

    /// Serve the kind a CustomResourceDefinition (as JSON) defines (its schema is not checked).
    /// Returns false for a malformed CRD.
    pub fn install_crd(&self, crd: &Value) -> bool {
        let Some(info) = ResourceInfo::from_crd(crd) else {
            return false;
        };
        self.lock().resources.insert(info.key(), info);
        true
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

    /// Create or replace an object directly (as an admin would), outside any request.
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
        st.commit(&k, obj);
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

    /// Report `status` for a DaemonSet pod as its kubelet would (e.g. not ready, or answering
    /// on another IP), until called again with `None`, which brings back the running status of
    /// [`Self::set_pods_ready`]. The pod's IP is kept when `status` has none. Re-simulates every
    /// DaemonSet.
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

    /// Delete an object as an admin would; false when there is none.
    pub fn delete(&self, resource: &str, namespace: Option<&str>, name: &str) -> bool {
        let k = (
            resource.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        self.lock().remove_object(&k).is_ok()
    }

    /// Every committed change so far, oldest first.
    pub fn changes(&self) -> Vec<Change> {
        self.lock().history.iter().map(|c| (**c).clone()).collect()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
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
        let initial: Vec<Value> = match since {
            Some(rv) => st
                .history
                .iter()
                .filter(|c| c.resource_version > rv && filter.matches_change(c))
                .map(|c| event_json(c))
                .collect(),
            None => st
                .objects
                .iter()
                .filter(|((r, ns, _), obj)| *r == target.resource && filter.matches_obj(ns, obj))
                .map(|(_, obj)| json!({"type": "ADDED", "object": obj}))
                .collect(),
        };
        let mut rx = st.sender.subscribe();
        drop(st);
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(290);
        let (tx, body_rx) = mpsc::channel::<Bytes>(64);
        tokio::spawn(async move {
            let shape = |mut e: Value| {
                if meta_only {
                    e["object"] = partial_metadata(&e["object"]);
                }
                e
            };
            for e in initial {
                if tx.send(line(&shape(e))).await.is_err() {
                    return;
                }
            }
            let deadline = tokio::time::sleep(Duration::from_secs(timeout));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = &mut deadline => return,
                    _ = tx.closed() => return,
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

/// The answer an injected fault gives: the reason the real server gives with that code.
fn injected(code: u16, method: &Method, path: &str) -> ApiError {
    let reason = match code {
        400 => "BadRequest",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "Unknown",
    };
    ApiError::new(code, reason, format!("injected fault: {method} {path}"))
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
    /// `a.b=value` field selectors (`metadata.name`, an Event's `involvedObject.name`): the
    /// field at that path must be that string. The real server takes only the fields each kind
    /// declares; the fake takes any path.
    fields: Vec<(String, String)>,
}

impl Filter {
    fn new(target: &Target, query: &BTreeMap<String, String>) -> Result<Self, ApiError> {
        let bad = |e: String| ApiError::new(400, "BadRequest", e);
        let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
            .map_err(bad)?;
        let fields = query
            .get("fieldSelector")
            .map_or("", String::as_str)
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|part| match part.split_once('=') {
                Some((path, v)) if !path.is_empty() && !path.ends_with('!') => Ok((
                    format!("/{}", path.replace('.', "/")),
                    v.trim_start_matches('=').to_string(),
                )),
                _ => Err(bad(format!("unsupported field selector `{part}`"))),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            resource: target.resource.clone(),
            namespace: target.namespace.clone(),
            labels,
            fields,
        })
    }

    fn matches_obj(&self, ns: &str, obj: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == ns)
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
        let parse = || -> Result<Value, ApiError> {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::new(400, "BadRequest", format!("body is not JSON: {e}")))
        };
        let key = |name: &str| {
            (
                target.resource.clone(),
                ns_key(&target.namespace),
                name.to_string(),
            )
        };
        match (method, &target.name) {
            (&Method::GET, None) => Ok((200, self.list_objects(&info, target, query)?)),
            (&Method::GET, Some(name)) => self
                .objects
                .get(&key(name))
                .cloned()
                .map(|o| (200, o))
                .ok_or_else(|| ApiError::not_found(&format!("{} {name}", info.kind))),
            (&Method::POST, None) => self.create(&info, target, parse()?).map(|o| (201, o)),
            (&Method::PUT, Some(name)) => {
                let k = key(name);
                let old = self.stored(&info, &k)?;
                let obj = parse()?;
                if stale(&obj, &old) {
                    return Err(conflict(&info, name));
                }
                let new = split_status(&info, &old, obj, sub.as_deref());
                Ok((200, self.write(&k, new, sub.is_some())))
            }
            (&Method::PATCH, Some(name)) => {
                let k = key(name);
                let manager = query.get("fieldManager").cloned().unwrap_or_default();
                self.patch(&info, &k, content_type, parse()?, sub.as_deref(), &manager)
            }
            (&Method::DELETE, Some(name)) => self.remove_object(&key(name)).map(|o| (200, o)),
            _ => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{method} is not supported here"),
            )),
        }
    }

    fn stored(&self, info: &ResourceInfo, k: &ObjKey) -> Result<Value, ApiError> {
        self.objects
            .get(k)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&format!("{} {}", info.kind, k.2)))
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
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "BadRequest", "body must be an object"));
        }
        let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str) else {
            return Err(ApiError::new(422, "Invalid", "metadata.name is required"));
        };
        let name = name.to_string();
        if info.namespaced {
            obj["metadata"]["namespace"] = json!(ns_key(&target.namespace));
        }
        let k = (target.resource.clone(), ns_key(&target.namespace), name);
        if self.objects.contains_key(&k) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} {} already exists", info.kind, k.2),
            ));
        }
        if info.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        Ok(self.write(&k, obj, false))
    }

    fn patch(
        &mut self,
        info: &ResourceInfo,
        k: &ObjKey,
        content_type: &str,
        patch: Value,
        sub: Option<&str>,
        manager: &str,
    ) -> Result<(u16, Value), ApiError> {
        let old = self.objects.get(k).cloned();
        let ct = content_type.split(';').next().unwrap_or("").trim();
        if ct == "application/apply-patch+yaml" {
            return self.apply(info, k, old, patch, sub, manager);
        }
        let old = old.ok_or_else(|| ApiError::not_found(&format!("{} {}", info.kind, k.2)))?;
        let mut new = old.clone();
        match ct {
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                if stale(&patch, &old) {
                    return Err(conflict(info, &k.2));
                }
                patch::merge_patch(&mut new, &patch);
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
        Ok((200, self.write(k, new, sub.is_some())))
    }

    /// Server-side apply, as `patch::apply` models it.
    fn apply(
        &mut self,
        info: &ResourceInfo,
        k: &ObjKey,
        old: Option<Value>,
        mut applied: Value,
        sub: Option<&str>,
        manager: &str,
    ) -> Result<(u16, Value), ApiError> {
        if applied.pointer("/metadata/name").and_then(Value::as_str) != Some(k.2.as_str()) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                "metadata.name in the body must match the URL",
            ));
        }
        let created = old.is_none();
        let base = match old {
            Some(o) => o,
            None if sub.is_some() => {
                return Err(ApiError::not_found(&format!("{} {}", info.kind, k.2)));
            }
            None => {
                let mut o = json!({"metadata": {"name": k.2}});
                if info.namespaced {
                    o["metadata"]["namespace"] = json!(k.1);
                }
                o
            }
        };
        if info.status_subresource
            && sub.is_none()
            && let Some(m) = applied.as_object_mut()
        {
            m.remove("status");
        }
        let manager = match sub {
            Some(s) => format!("{manager}/{s}"),
            None => manager.to_string(),
        };
        let before = self.applied.get(k).and_then(|m| m.get(&manager));
        let mut new = base.clone();
        patch::apply(&mut new, before, &applied);
        let new = split_status(info, &base, new, sub);
        self.applied
            .entry(k.clone())
            .or_default()
            .insert(manager, applied);
        let out = self.write(k, new, sub.is_some());
        Ok((if created { 201 } else { 200 }, out))
    }

    /// A write through the API: commit it, then let the simulated controllers react.
    fn write(&mut self, k: &ObjKey, new: Value, status_only: bool) -> Value {
        let out = self.commit(k, new);
        self.react(&k.0, k, status_only);
        out
    }

    /// Store `new` (server metadata filled in) unless nothing changed; emit the change.
    fn commit(&mut self, k: &ObjKey, mut new: Value) -> Value {
        let old = self.objects.get(k).cloned();
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        if let Some(info) = self.resources.get(&k.0) {
            new["apiVersion"] = json!(info.api_version());
            new["kind"] = json!(info.kind);
        }
        match &old {
            Some(o) => {
                for f in ["uid", "creationTimestamp", "name", "namespace"] {
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
                new["metadata"]["resourceVersion"] = o["metadata"]["resourceVersion"].clone();
                if *o == new {
                    return new;
                }
            }
            None => {
                self.uid_seq += 1;
                new["metadata"]["uid"] =
                    json!(format!("00000000-0000-4000-8000-{:012x}", self.uid_seq));
                new["metadata"]["creationTimestamp"] = json!(now());
                new["metadata"]["generation"] = json!(1);
            }
        }
        self.rv += 1;
        new["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(k.clone(), new.clone());
        let change = if old.is_none() {
            ChangeType::Added
        } else {
            ChangeType::Modified
        };
        self.emit(k, change, new.clone());
        new
    }

    fn emit(&mut self, k: &ObjKey, change: ChangeType, object: Value) {
        let c = Arc::new(Change {
            resource_version: self.rv,
            change,
            resource: k.0.clone(),
            namespace: (!k.1.is_empty()).then(|| k.1.clone()),
            name: k.2.clone(),
            object,
        });
        self.history.push(c.clone());
        // No receivers is fine.
        let _ = self.sender.send(c);
    }

    /// Delete `k` at once (no finalizers, no garbage collector: only the simulated DaemonSet
    /// controller's pods go with their DaemonSet or node).
    fn remove_object(&mut self, k: &ObjKey) -> Result<Value, ApiError> {
        let mut last = self
            .objects
            .remove(k)
            .ok_or_else(|| ApiError::not_found(&format!("{} {}", k.0, k.2)))?;
        self.applied.remove(k);
        self.rv += 1;
        last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.emit(k, ChangeType::Deleted, last.clone());
        if k.0 == keys::NODES {
            self.simulate_all();
        } else if k.0 == keys::DAEMONSETS {
            let uid = last.pointer("/metadata/uid").cloned().unwrap_or_default();
            for pk in self.pods_of(&k.1, &uid) {
                self.syncing_pods = true;
                let _ = self.remove_object(&pk);
                self.syncing_pods = false;
            }
        } else if k.0 == pods::PODS && !self.syncing_pods {
            // The DaemonSet controller makes a deleted pod again (under the same name here).
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

    /// The pods in `namespace` that the object `uid` owns.
    fn pods_of(&self, namespace: &str, uid: &Value) -> Vec<ObjKey> {
        self.objects
            .iter()
            .filter(|((r, ns, _), pod)| {
                r == pods::PODS
                    && ns == namespace
                    && pod
                        .pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|refs| refs.iter().any(|o| o["uid"] == *uid))
            })
            .map(|(pk, _)| pk.clone())
            .collect()
    }

    /// The DaemonSet controller: one pod per node `ds` fits (created when missing, deleted from
    /// nodes it no longer fits or that are gone), each with the kubelet's status, and the
    /// DaemonSet's status counted from them.
    fn simulate(&mut self, k: &ObjKey) {
        let Some(ds) = self.objects.get(k).cloned() else {
            return;
        };
        let empty = json!({});
        let pod_spec = ds.pointer("/spec/template/spec").unwrap_or(&empty).clone();
        let host_network = pod_spec["hostNetwork"].as_bool().unwrap_or(false);
        let fitting: Vec<String> = self
            .objects
            .iter()
            .filter(|((r, _, _), n)| r == keys::NODES && pod_fits_node(&pod_spec, n))
            .filter_map(|(_, n)| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(String::from)
            .collect();
        let uid = ds.pointer("/metadata/uid").cloned().unwrap_or_default();
        for pk in self.pods_of(&k.1, &uid) {
            let node = self.objects[&pk].pointer("/spec/nodeName").cloned();
            if !node.is_some_and(|n| fitting.iter().any(|f| n == f.as_str())) {
                self.pod_status.remove(&pk);
                self.syncing_pods = true;
                let _ = self.remove_object(&pk);
                self.syncing_pods = false;
            }
        }
        let mut ready = 0;
        for node in &fitting {
            let pk = (
                pods::PODS.to_string(),
                k.1.clone(),
                pods::pod_name(&k.2, node),
            );
            let existing = self.objects.get(&pk).cloned();
            let ip = match existing
                .as_ref()
                .and_then(|p| p.pointer("/status/podIP"))
                .and_then(Value::as_str)
            {
                Some(ip) => ip.to_string(),
                None if host_network => self.node_ip(node),
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
            let mut pod = existing.unwrap_or_else(|| pods::new_pod(&ds, node));
            pod["status"] = status;
            if pods::is_ready(&self.commit(&pk, pod)) {
                ready += 1;
            }
        }
        let desired = i64::try_from(fitting.len()).unwrap_or(i64::MAX);
        let mut status = json!({
            "currentNumberScheduled": desired,
            "desiredNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "updatedNumberScheduled": desired,
            "numberAvailable": ready,
            "observedGeneration": ds.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        });
        if desired > ready {
            status["numberUnavailable"] = json!(desired - ready);
        }
        let mut new = ds;
        new["status"] = status;
        self.commit(k, new);
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
