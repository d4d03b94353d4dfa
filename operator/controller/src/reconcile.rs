//! The reconcile pipeline: validate (pure) → build (pure) → apply (I/O) → status (I/O), and the
//! error policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use edgecache_api::v1alpha1::{EdgeCache, condition};
use futures_util::StreamExt as _;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::core::error_boundary::{DeserializeGuard, InvalidObject};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, instrument, warn};

use crate::apply::{self, Change};
use crate::build::build;
use crate::conflict;
use crate::context::Context;
use crate::pod_metrics::{self, PodMetrics};
use crate::status::{self, Outcome};
use crate::validate::{self, validate};
use crate::{named_secrets, node_status, peers, pod_admin};

/// Pods whose `/metrics` are read at the same time.
const SCRAPES_AT_ONCE: usize = 32;

/// How often a converged EdgeCache is looked at again even without a watch event.
pub const RESYNC: Duration = Duration::from_secs(300);

/// How soon an EdgeCache whose peer list did not reach every ready pod is reconciled again (a
/// pod that took a push reads its peers file no more, so a failed push is retried).
pub const PEERS_RETRY: Duration = Duration::from_secs(10);

/// How soon an EdgeCache whose children still belong to an earlier EdgeCache of its name (being
/// garbage-collected) is looked at again: the collector works in seconds, and not every child
/// kind is watched (ServiceAccounts are not).
pub const PREVIOUS_CHILDREN_RECHECK: Duration = Duration::from_secs(1);

/// Why a reconciliation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be reconciled; it waits for the user to change it.
    #[error(transparent)]
    InvalidSpec(#[from] validate::Error),
    /// Applying a child failed: requeued with backoff. A refusal by the API server (403
    /// Forbidden, 422 Invalid) also sets Degraded with its message, since retrying alone will
    /// not fix it.
    #[error("applying the children failed: {0}")]
    Apply(#[source] apply::Error),
    /// A child's name is taken by an object the operator did not create; it waits (rechecked at
    /// every resync) and touches nothing.
    #[error("{0}")]
    NameConflict(#[source] apply::Error),
    /// Writing the status failed (transient).
    #[error("writing the status failed: {0}")]
    Status(#[source] kube::Error),
    /// Listing the other EdgeCaches (for conflicts) failed (transient).
    #[error("listing the EdgeCaches failed: {0}")]
    List(#[source] kube::Error),
    /// Listing the cache pods (for the peer list and status) failed (transient).
    #[error("listing the cache pods failed: {0}")]
    Pods(#[source] kube::Error),
    /// Reading the EdgeCache's Service (its IP families) failed (transient).
    #[error("reading the Service failed: {0}")]
    Service(#[source] kube::Error),
    /// Another, earlier EdgeCache holds a cache directory or host port this one needs; it waits
    /// (rechecked when that one changes or goes, and at every resync).
    #[error("{0}")]
    Conflict(conflict::Conflict),
    /// A Secret the spec names (a TLS certificate, an origin CA bundle) is missing or
    /// unusable; nothing is applied until it is fixed (the Secrets are watched; rechecked at
    /// every resync too).
    #[error("{0}")]
    NamedSecret(named_secrets::Refusal),
    /// Reading the named Secrets failed (transient).
    #[error("reading the named Secrets failed: {0}")]
    Secrets(#[source] kube::Error),
    /// The stored object does not parse as an EdgeCache (e.g. written under an older CRD).
    #[error("the EdgeCache cannot be read: {0}")]
    InvalidObject(String),
}

impl Error {
    /// A bounded label for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "invalid_spec",
            Self::Apply(_) => "apply",
            Self::NameConflict(_) => "name_conflict",
            Self::Status(_) => "status",
            Self::List(_) => "list",
            Self::Pods(_) => "pods",
            Self::Service(_) => "service",
            Self::Conflict(_) => "conflict",
            Self::NamedSecret(r) => r.kind.category(),
            Self::Secrets(_) => "secrets",
            Self::InvalidObject(_) => "invalid_object",
        }
    }

    /// Whether trying again later may succeed without a spec change.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            Self::InvalidSpec(_)
                | Self::InvalidObject(_)
                | Self::Conflict(_)
                | Self::NameConflict(_)
                | Self::NamedSecret(_)
        )
    }
}

fn key(ec: &EdgeCache) -> String {
    format!("{}/{}", ec.namespace().unwrap_or_default(), ec.name_any())
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// Reconcile one EdgeCache.
#[instrument(skip(ec, ctx), fields(edgecache = %key(&ec), generation = ec.metadata.generation))]
pub async fn reconcile(ec: Arc<EdgeCache>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.start_reconcile();
    if ec.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes the children through their owner references.
        return Ok(Action::await_change());
    }
    let namespace = ec.namespace().unwrap_or_default();
    let api: Api<EdgeCache> = Api::namespaced(ctx.client.clone(), &namespace);

    if ec.spec.paused {
        let st = status::compute(&ec, Outcome::Paused, &now());
        status::write(&api, &ec, &st).await.map_err(Error::Status)?;
        info!("paused; nothing applied");
        return Ok(Action::await_change());
    }

    let validated = match validate(&ec, &ctx.policy) {
        Ok(v) => v,
        Err(e) => {
            refuse(&ctx, &api, &ec, "InvalidSpec", "Validate", e.to_string()).await?;
            return Err(Error::InvalidSpec(e));
        }
    };
    let others = list_edgecaches(&ctx).await?;
    if let Some(c) = conflict::find(&ec, &others, &ctx.policy) {
        refuse(&ctx, &api, &ec, "Conflict", "CheckConflicts", c.to_string()).await?;
        return Err(Error::Conflict(c));
    }

    // Pods that cannot mount their Secrets, or start TLS or reach their HTTPS origins with
    // them, are not rolled out.
    let named = named_secrets::names(&validated.spec);
    if !named.is_empty() {
        let found = secrets_named(&ctx, &namespace, &named).await?;
        if let Some(r) = named_secrets::refusal(&validated.spec, &namespace, &found) {
            let (reason, action) = (r.kind.reason(), r.kind.action());
            refuse(&ctx, &api, &ec, reason, action, r.message.clone()).await?;
            return Err(Error::NamedSecret(r));
        }
    }

    let validated = validated.serving_on(&service_ip_families(&ctx, &namespace, &ec).await?);
    let pods = list_pods(&ctx, &namespace, &validated.name).await?;
    let peers = peers::peers(&pods, validated.spec.network.port);
    let desired = build(&validated).with_peers(&peers);
    let sharding = desired.peers_config_map.is_some().then_some(peers.len());
    let (applied, changes) = match apply::apply(&ctx.client, &namespace, desired).await {
        Ok(r) => r,
        Err(e @ apply::Error::PreviousOwner { .. }) => {
            // A re-create of a deleted EdgeCache: its old children go soon; nothing is touched.
            let message = format!("waiting for the garbage collector: {e}");
            let st = status::compute(
                &ec,
                Outcome::Waiting {
                    reason: "PreviousChildren",
                    message: &message,
                },
                &now(),
            );
            status::write(&api, &ec, &st).await.map_err(Error::Status)?;
            info!(error = %e, "children of an earlier EdgeCache of this name; rechecking soon");
            return Ok(Action::requeue(PREVIOUS_CHILDREN_RECHECK));
        }
        Err(e @ apply::Error::NameConflict { .. }) => {
            refuse(&ctx, &api, &ec, "NameConflict", "Apply", e.to_string()).await?;
            return Err(Error::NameConflict(e));
        }
        Err(e) => {
            match refusal_reason(&e) {
                // The API server refuses what the operator sends: a human must act (RBAC, an
                // admission policy, a spec the children cannot be built from).
                Some(reason) => {
                    let message = format!("applying the children was refused: {e}");
                    refuse(&ctx, &api, &ec, reason, "Apply", message).await?;
                }
                None => {
                    let note = e.to_string();
                    publish(
                        &ctx,
                        &ec,
                        EventType::Warning,
                        "ApplyFailed",
                        "Apply",
                        note,
                        None,
                    )
                    .await;
                }
            }
            return Err(Error::Apply(e));
        }
    };
    for c in changes.iter().filter(|c| c.change != Change::Unchanged) {
        ctx.metrics
            .child_writes
            .get_or_create(&crate::metrics::WriteLabels {
                kind: c.kind,
                change: c.change.as_str(),
            })
            .inc();
        let reason = match c.change {
            Change::Created => "Created",
            Change::Deleted => "Deleted",
            _ => "Updated",
        };
        info!(kind = c.kind, name = %c.name, change = c.change.as_str(), "applied");
        let child = ObjectReference {
            api_version: Some(c.api_version.clone()),
            kind: Some(c.kind.into()),
            name: Some(c.name.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectReference::default()
        };
        publish(
            &ctx,
            &ec,
            EventType::Normal,
            reason,
            "Apply",
            format!("{} {} {}", c.kind, c.name, c.change.as_str()),
            Some(child),
        )
        .await;
    }

    // The peer list to every ready pod at once (the ConfigMap reaches running pods only at the
    // kubelet's next volume sync, a minute or more later).
    let peers_delivered = match sharding {
        Some(_) => push_peers(&ctx, &validated, &pods, &peers::render(&peers)).await,
        None => true,
    };
    let failed_creates = failed_creates(&ctx, &namespace, &applied.daemon_set).await;
    let scraped = scrape(&ctx, &validated, &pods).await;
    let st = status::compute(
        &ec,
        Outcome::Applied {
            daemon_set: &applied.daemon_set,
            config_hash: &applied.config_hash,
            nodes: &node_status::nodes(&pods, &scraped.metrics),
            peers: sharding,
            failed_creates: &failed_creates,
            admin_unreachable: scraped.unreachable.as_deref(),
        },
        &now(),
    );
    status::write(&api, &ec, &st).await.map_err(Error::Status)?;
    ctx.reset_backoff(&key(&ec));
    Ok(Action::requeue(if peers_delivered {
        RESYNC
    } else {
        PEERS_RETRY
    }))
}

/// The Degraded reason for an apply the API server refused (as opposed to one that may pass
/// when retried as it is).
fn refusal_reason(e: &apply::Error) -> Option<&'static str> {
    match e.code()? {
        403 => Some("ApplyForbidden"),
        422 => Some("ApplyInvalid"),
        _ => None,
    }
}

/// Degraded (with `reason`) and, unless the same Degraded condition is already there, one
/// Warning event; nothing is applied.
async fn refuse(
    ctx: &Context,
    api: &Api<EdgeCache>,
    ec: &EdgeCache,
    reason: &str,
    action: &str,
    message: String,
) -> Result<(), Error> {
    let was_degraded = ec
        .status
        .as_ref()
        .and_then(|s| s.condition(condition::DEGRADED))
        .is_some_and(|c| c.reason == reason && c.message == message);
    let outcome = Outcome::Refused {
        reason,
        message: &message,
    };
    let st = status::compute(ec, outcome, &now());
    status::write(api, ec, &st).await.map_err(Error::Status)?;
    if !was_degraded {
        publish(ctx, ec, EventType::Warning, reason, action, message, None).await;
    }
    Ok(())
}

/// The Secrets of `names` (each once) that exist, by name (read one by one: the operator does
/// not keep the namespace's Secrets).
async fn secrets_named(
    ctx: &Context,
    namespace: &str,
    names: &[&str],
) -> Result<BTreeMap<String, Secret>, Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let mut found = BTreeMap::new();
    for name in names {
        if let Some(s) = api.get_opt(name).await.map_err(Error::Secrets)? {
            found.insert(name.to_string(), s);
        }
    }
    Ok(found)
}

/// `spec.ipFamilies` of the EdgeCache's Service as stored (empty before it exists).
async fn service_ip_families(
    ctx: &Context,
    namespace: &str,
    ec: &EdgeCache,
) -> Result<Vec<String>, Error> {
    let api: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(ctx.client.clone(), namespace);
    let service = api.get_opt(&ec.name_any()).await.map_err(Error::Service)?;
    Ok(service
        .and_then(|s| s.spec)
        .and_then(|s| s.ip_families)
        .unwrap_or_default())
}

/// The DaemonSet controller's `FailedCreate` Events (core/v1) on `ds`, read only while it misses
/// pods (`status::pods_missing`). A failure to read them (a 403 where the RBAC lacks `list` on
/// events) is logged: the status then says what the counts say.
async fn failed_creates(ctx: &Context, namespace: &str, ds: &DaemonSet) -> Vec<CoreEvent> {
    let Some(name) = ds.metadata.name.as_deref() else {
        return Vec::new();
    };
    if status::pods_missing(ds) == 0 {
        return Vec::new();
    }
    let api: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), namespace);
    let fields = format!(
        "involvedObject.kind=DaemonSet,involvedObject.name={name},reason={}",
        status::FAILED_CREATE
    );
    match api.list(&ListParams::default().fields(&fields)).await {
        Ok(list) => list.items,
        Err(e) => {
            warn!(error = %e, daemonset = name, "cannot read the DaemonSet's FailedCreate events");
            Vec::new()
        }
    }
}

/// The pods of this EdgeCache's DaemonSet (pods that only carry its labels are left out).
async fn list_pods(ctx: &Context, namespace: &str, name: &str) -> Result<Vec<Pod>, Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = crate::build::selector_labels(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(Error::Pods)?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| peers::controlled_by(p, name))
        .collect())
}

/// What reading the pods' `/metrics` found.
#[derive(Default)]
struct Scraped {
    /// The figures of each pod that answered, by pod name.
    metrics: BTreeMap<String, PodMetrics>,
    /// The pods that could not be reached (`POD (ERROR)`); `None` when none was called.
    unreachable: Option<Vec<String>>,
}

/// One pod's `/metrics` call.
enum Scrape {
    Read(String, PodMetrics),
    Unreachable(String),
    Failed,
}

/// The `/metrics` of each ready pod with an IP, by pod name, [`SCRAPES_AT_ONCE`] at a time (a pod
/// that cannot be read within `ctx.scrape_timeout` is left out and logged: status shows what
/// Kubernetes knows of it, and one that cannot be reached at all is named in `AdminReachable`).
/// Nothing when scraping is off or the admin token cannot be read.
async fn scrape(ctx: &Context, ec: &validate::ValidatedEdgeCache, pods: &[Pod]) -> Scraped {
    let Some(timeout) = ctx.scrape_timeout else {
        return Scraped::default();
    };
    let token = match admin_token(ctx, ec).await {
        Ok(t) => t,
        Err(e) => {
            warn!(error = %e, "cannot read the admin token; pod metrics not read");
            return Scraped::default();
        }
    };
    let port = ec.spec.network.admin_port;
    // Collected first: the futures own what they use (no borrow of `pods` crosses an await).
    let calls: Vec<_> = pods
        .iter()
        .filter(|p| peers::is_ready(p))
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let ip: std::net::IpAddr = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            let token = token.clone();
            Some(async move {
                let addr = std::net::SocketAddr::new(ip, port);
                let got = pod_admin::call("GET", addr, "/metrics", token.as_deref(), timeout).await;
                match got {
                    Ok((200, body)) => {
                        Scrape::Read(name, pod_metrics::parse(&String::from_utf8_lossy(&body)))
                    }
                    Ok((code, _)) => {
                        warn!(pod = %name, code, "pod /metrics refused");
                        Scrape::Failed
                    }
                    Err(e) if e.is_unreachable() => {
                        warn!(pod = %name, error = %e, "pod admin port unreachable");
                        Scrape::Unreachable(format!("{name} ({e})"))
                    }
                    Err(e) => {
                        warn!(pod = %name, error = %e, "pod /metrics not read");
                        Scrape::Failed
                    }
                }
            })
        })
        .collect();
    let mut out = Scraped {
        metrics: BTreeMap::new(),
        unreachable: Some(Vec::new()),
    };
    let mut results = futures_util::stream::iter(calls).buffer_unordered(SCRAPES_AT_ONCE);
    while let Some(r) = results.next().await {
        match r {
            Scrape::Read(name, m) => {
                out.metrics.insert(name, m);
            }
            Scrape::Unreachable(what) => out.unreachable.get_or_insert_default().push(what),
            Scrape::Failed => {}
        }
    }
    if let Some(u) = out.unreachable.as_mut() {
        u.sort();
    }
    out
}

/// The EdgeCache's admin token (`None` when its Secret or key is missing).
async fn admin_token(
    ctx: &Context,
    ec: &validate::ValidatedEdgeCache,
) -> Result<Option<String>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ec.namespace);
    Ok(secrets
        .get_opt(&crate::build::admin_secret_name(&ec.name))
        .await?
        .and_then(|s| s.data)
        .and_then(|d| d.get(crate::build::ADMIN_TOKEN_KEY).cloned())
        .and_then(|t| String::from_utf8(t.0).ok()))
}

/// `PUT /peers` with the peer list `text` to the admin endpoint of each ready pod with an IP
/// (the pods the list names, and only they need it: a pod that is not ready yet read the
/// ConfigMap when it started). Each pod takes it at once and reads its peers file no more
/// (dataplane/fleet/src/sharding.rs). Whether every such pod took it; a pod whose data plane
/// has no `/peers` (an older image, 404 or 405) counts as served: it still reads the file.
/// Nothing is sent when pods are not called (`scrape_timeout` unset).
async fn push_peers(
    ctx: &Context,
    ec: &validate::ValidatedEdgeCache,
    pods: &[Pod],
    text: &str,
) -> bool {
    let Some(timeout) = ctx.scrape_timeout else {
        return true;
    };
    let token = match admin_token(ctx, ec).await {
        Ok(t) => t,
        Err(e) => {
            warn!(error = %e, "cannot read the admin token; the peer list is not pushed");
            return false;
        }
    };
    let body = bytes::Bytes::from(text.to_string());
    let port = ec.spec.network.admin_port;
    let calls: Vec<_> = pods
        .iter()
        .filter(|p| peers::is_ready(p) && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let ip: std::net::IpAddr = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            let (token, body) = (token.clone(), body.clone());
            Some(async move {
                let addr = std::net::SocketAddr::new(ip, port);
                let got = pod_admin::call_with_body(
                    "PUT",
                    addr,
                    "/peers",
                    token.as_deref(),
                    body,
                    timeout,
                )
                .await;
                match got {
                    Ok((200, answer)) => {
                        if answer.starts_with(b"changed") {
                            info!(pod = %name, "peer list pushed");
                        }
                        true
                    }
                    Ok((404 | 405, _)) => true,
                    Ok((code, answer)) => {
                        let answer = String::from_utf8_lossy(&answer);
                        warn!(pod = %name, code, answer = %answer.trim(), "peer list refused");
                        false
                    }
                    Err(e) => {
                        warn!(pod = %name, error = %e, "peer list not pushed");
                        false
                    }
                }
            })
        })
        .collect();
    futures_util::stream::iter(calls)
        .buffer_unordered(SCRAPES_AT_ONCE)
        .fold(true, |all, ok| async move { all && ok })
        .await
}

/// Every EdgeCache the operator watches (objects that do not parse are left out: they get no
/// DaemonSet).
async fn list_edgecaches(ctx: &Context) -> Result<Vec<EdgeCache>, Error> {
    let api: Api<DeserializeGuard<EdgeCache>> = match &ctx.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(Error::List)?;
    Ok(list.items.into_iter().filter_map(|g| g.0.ok()).collect())
}

/// Invalid specs wait for a change; conflicts are looked at again at the resync (and when the
/// other EdgeCache changes); transient failures requeue with exponential backoff.
pub fn error_policy(ec: Arc<EdgeCache>, err: &Error, ctx: Arc<Context>) -> Action {
    policy(&key(&ec), err, &ctx)
}

fn policy(key: &str, err: &Error, ctx: &Context) -> Action {
    ctx.metrics.failure(err.category());
    if let Error::Conflict(c) = err {
        warn!(edgecache = %key, conflict = %c, "waiting for a conflicting EdgeCache");
        return Action::requeue(RESYNC);
    }
    if let Error::NamedSecret(why) = err {
        warn!(edgecache = %key, problem = %why, recheck = ?ctx.named_secret_recheck, "waiting for the Secrets it names");
        return Action::requeue(ctx.named_secret_recheck);
    }
    if let Error::NameConflict(c) = err {
        warn!(edgecache = %key, conflict = %c, "a child's name is taken; waiting");
        return Action::requeue(RESYNC);
    }
    if err.is_transient() {
        let delay = ctx.backoff(key);
        warn!(edgecache = %key, error = %err, category = err.category(), ?delay, "reconcile failed; requeued");
        Action::requeue(delay)
    } else {
        warn!(edgecache = %key, error = %err, "invalid EdgeCache; waiting for a change");
        Action::await_change()
    }
}

fn guard_key(obj: &DeserializeGuard<EdgeCache>) -> String {
    let meta = match &obj.0 {
        Ok(ec) => &ec.metadata,
        Err(invalid) => &invalid.metadata,
    };
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// The controller's entry point: objects that do not parse are reported, not retried, so one
/// broken object cannot wedge the others.
pub async fn reconcile_guarded(
    obj: Arc<DeserializeGuard<EdgeCache>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let meta = match &obj.0 {
        Ok(ec) => ec.metadata.clone(),
        Err(invalid) => invalid.metadata.clone(),
    };
    let traced = ctx.clone();
    crate::trace::reconcile(&traced, "EdgeCache", &meta, Error::category, async move {
        match &obj.0 {
            Ok(ec) => reconcile(Arc::new(ec.clone()), ctx).await,
            Err(invalid) => {
                let _timer = ctx.metrics.start_reconcile();
                report_unreadable(invalid, &ctx).await?;
                Err(Error::InvalidObject(invalid.error.clone()))
            }
        }
    })
    .await
}

/// The error policy of [`reconcile_guarded`].
pub fn error_policy_guarded(
    obj: Arc<DeserializeGuard<EdgeCache>>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    policy(&guard_key(&obj), err, &ctx)
}

/// Degraded condition and a Warning event on an object that does not parse.
async fn report_unreadable(invalid: &InvalidObject, ctx: &Context) -> Result<(), Error> {
    let meta = &invalid.metadata;
    let (Some(name), Some(namespace)) = (meta.name.as_deref(), meta.namespace.as_deref()) else {
        return Ok(());
    };
    let message = format!(
        "the object does not parse as an EdgeCache: {}",
        invalid.error
    );
    let mut conditions = Vec::new();
    let t = now();
    let generation = meta.generation;
    status::set_condition(
        &mut conditions,
        condition::DEGRADED,
        true,
        "InvalidObject",
        message.clone(),
        generation,
        &t,
    );
    status::set_condition(
        &mut conditions,
        condition::READY,
        false,
        "InvalidObject",
        "the object cannot be read; see the Degraded condition".into(),
        generation,
        &t,
    );
    let api: Api<DeserializeGuard<EdgeCache>> = Api::namespaced(ctx.client.clone(), namespace);
    let st = serde_json::json!({"observedGeneration": generation, "conditions": conditions});
    // Onto this object only, not a namesake created since (see status::patch_status_if_changed).
    let written = status::patch_status_if_changed(&api, meta, None::<&serde_json::Value>, &st)
        .await
        .map_err(Error::Status)?;
    if !written {
        return Ok(());
    }
    let reference = ObjectReference {
        api_version: Some(EdgeCache::api_version(&()).into_owned()),
        kind: Some(EdgeCache::kind(&()).into_owned()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        uid: meta.uid.clone(),
        ..ObjectReference::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "InvalidObject".into(),
        note: Some(truncate(message)),
        action: "Read".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &reference).await {
        warn!(error = %e, "could not publish an event");
    }
    Ok(())
}

fn truncate(mut note: String) -> String {
    if note.len() > 1000 {
        let mut cut = 1000;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    note
}

/// Publish an event on the EdgeCache; a failure to do so is logged, never fatal.
async fn publish(
    ctx: &Context,
    ec: &EdgeCache,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
    secondary: Option<ObjectReference>,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(note)),
        action: action.into(),
        secondary,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &ec.object_ref(&())).await {
        warn!(error = %e, reason, "could not publish an event");
    }
}
