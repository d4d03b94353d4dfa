//! Reconcile one `EdgeCachePurge`, the I/O around [`super::plan`]: read the EdgeCache (its admin
//! port), its admin token Secret and its pods; send the purge to every ready pod that has not
//! confirmed it; write the status; delete the purge once it is older than the retention.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use edgecache_api::purge::EdgeCachePurge;
use edgecache_api::v1alpha1::EdgeCache;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams};
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::{info, instrument, warn};

use super::plan::{self, AdminCall, Blocked, Cause, Delivery, Failure, PodView};
use crate::build::{ADMIN_TOKEN_KEY, admin_secret_name, selector_labels};
use crate::context::Context;
use crate::pod_admin;

/// Pods purged at once by one reconcile.
const PODS_IN_PARALLEL: usize = 16;

/// Knobs of the purge controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long an EdgeCachePurge is kept after its creation; then it is deleted, delivered or
    /// not. It should exceed the longest time a node may be away and come back with its cache
    /// (a node that returns later no longer gets the purge).
    pub retention: Duration,
    /// Bound on one admin call to a pod (connect, answer and body).
    pub call_timeout: Duration,
    /// How often a complete purge is looked at again without a watch event.
    pub resync: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            retention: DEFAULT_RETENTION,
            call_timeout: Duration::from_secs(5),
            resync: crate::reconcile::RESYNC,
        }
    }
}

/// Default of `--purge-retention`: a day.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// What the purge reconciler shares.
pub struct PurgeContext {
    pub ctx: Arc<Context>,
    pub settings: Settings,
}

/// Why a purge reconcile failed; every one is transient (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the EdgeCache, its Secret or its pods failed.
    #[error("reading {what} failed: {source}")]
    Read {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    /// Writing the status failed.
    #[error("writing the status failed: {0}")]
    Status(#[source] kube::Error),
    /// Deleting a purge past its retention failed.
    #[error("deleting the expired purge failed: {0}")]
    Delete(#[source] kube::Error),
}

impl Error {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Read { .. } => "purge_read",
            Self::Status(_) => "purge_status",
            Self::Delete(_) => "purge_delete",
        }
    }
}

/// The per-object backoff key (distinct from the EdgeCaches' keys in the shared context).
fn key_of(meta: &ObjectMeta) -> String {
    format!(
        "EdgeCachePurge/{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

fn key(p: &EdgeCachePurge) -> String {
    key_of(&p.metadata)
}

/// Time left before `purge` is past the retention (zero when it is), by its creationTimestamp.
pub fn time_left(purge: &EdgeCachePurge, retention: Duration, now: Timestamp) -> Duration {
    let Some(created) = purge.metadata.creation_timestamp.as_ref() else {
        return retention;
    };
    let age = now.duration_since(created.0);
    let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
    retention.saturating_sub(age)
}

/// Reconcile one EdgeCachePurge.
#[instrument(skip(purge, pctx), fields(purge = %key(&purge)))]
pub async fn reconcile(
    purge: Arc<EdgeCachePurge>,
    pctx: Arc<PurgeContext>,
) -> Result<Action, Error> {
    let ctx = &pctx.ctx;
    let settings = &pctx.settings;
    let namespace = purge.namespace().unwrap_or_default();
    let api: Api<EdgeCachePurge> = Api::namespaced(ctx.client.clone(), &namespace);
    // The controller's copy may not have our last status write yet (a pod event can come
    // first): read it fresh, so a confirmed pod is not sent the purge again and its
    // confirmation (time, objects) is kept as it was.
    let Some(purge) = api
        .get_opt(&purge.name_any())
        .await
        .map_err(|source| Error::Read {
            what: "the EdgeCachePurge",
            source,
        })?
    else {
        return Ok(Action::await_change());
    };
    if purge.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let left = time_left(&purge, settings.retention, now);
    if left.is_zero() {
        info!("past the retention; deleting");
        // This object only: a namesake created since it was read is not deleted (409).
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: purge.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        return match api.delete(&purge.name_any(), &params).await {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                Ok(Action::await_change())
            }
            Err(e) => Err(Error::Delete(e)),
        };
    }

    let round = deliver(&purge, &namespace, ctx, settings).await?;
    let blocked = round.blocked.as_ref().map(|(reason, message)| Blocked {
        reason,
        message: message.as_str(),
    });
    let status = plan::compute(&purge, &round.pods, &round.deliveries, blocked, &Time(now));
    let complete = plan::is_complete(&status);
    crate::status::patch_status_if_changed(&api, &purge.metadata, purge.status.as_ref(), &status)
        .await
        .map_err(Error::Status)?;
    if round.invalid {
        // Nothing to send until the object changes (its spec cannot: it waits for the GC).
        return Ok(Action::requeue(left));
    }
    let key = key(&purge);
    if complete {
        ctx.reset_backoff(&key);
        return Ok(Action::requeue(settings.resync.min(left)));
    }
    // Some pod has not confirmed: try again with backoff (a pod turning ready, or a new pod,
    // triggers a reconcile through the pod watch at once).
    let delay = ctx.backoff(&key).min(left);
    info!(
        pending = status.pending.len(),
        ?delay,
        "not every pod confirmed; retrying"
    );
    Ok(Action::requeue(delay))
}

/// What one round of sending found and did.
struct Round {
    /// The EdgeCache's current pods (empty when it is missing).
    pods: Vec<PodView>,
    /// The pods sent to, by uid.
    deliveries: BTreeMap<String, Delivery>,
    /// Why nothing could be sent (reason, message).
    blocked: Option<(&'static str, String)>,
    /// The purge itself cannot be sent (no retry until it changes).
    invalid: bool,
}

async fn deliver(
    purge: &EdgeCachePurge,
    namespace: &str,
    ctx: &Context,
    settings: &Settings,
) -> Result<Round, Error> {
    let ec_name = purge.spec.edge_cache.as_str();
    let mut round = Round {
        pods: Vec::new(),
        deliveries: BTreeMap::new(),
        blocked: None,
        invalid: false,
    };
    let calls = match plan::calls(purge) {
        Ok(c) => c,
        Err(e) => {
            round.blocked = Some(("InvalidSpec", e.to_string()));
            round.invalid = true;
            return Ok(round);
        }
    };
    // Only the admin port is needed; an EdgeCache that does not parse is a read error (retried).
    let ecs: Api<EdgeCache> = Api::namespaced(ctx.client.clone(), namespace);
    let Some(ec) = ecs.get_opt(ec_name).await.map_err(|source| Error::Read {
        what: "the EdgeCache",
        source,
    })?
    else {
        round.blocked = Some((
            "EdgeCacheNotFound",
            format!("EdgeCache {namespace}/{ec_name} does not exist"),
        ));
        return Ok(round);
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = selector_labels(ec_name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    round.pods = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::Read {
            what: "the EdgeCache's pods",
            source,
        })?
        .items
        .iter()
        .filter_map(plan::pod_view)
        .collect();
    let targets = plan::to_send(&round.pods, purge.status.as_ref());
    if targets.is_empty() {
        return Ok(round);
    }
    let Some(token) = admin_token(ctx, namespace, ec_name).await? else {
        round.blocked = Some((
            "NoAdminToken",
            format!(
                "Secret {namespace}/{} has no `{ADMIN_TOKEN_KEY}` yet (the operator creates it with the EdgeCache)",
                admin_secret_name(ec_name)
            ),
        ));
        return Ok(round);
    };
    let port = ec.spec.network.admin_port;
    let sends: Vec<_> = targets
        .into_iter()
        .map(|pod| deliver_one(pod, port, &calls, &token, settings.call_timeout))
        .collect();
    let sent: Vec<(String, Delivery)> = futures_util::stream::iter(sends)
        .buffer_unordered(PODS_IN_PARALLEL)
        .collect()
        .await;
    for (_, d) in &sent {
        ctx.metrics.purge_delivery(d.outcome());
    }
    round.deliveries = sent.into_iter().collect();
    Ok(round)
}

/// Send every call to one pod; its uid and the outcome.
async fn deliver_one(
    pod: &PodView,
    port: u16,
    calls: &[AdminCall],
    token: &str,
    timeout: Duration,
) -> (String, Delivery) {
    let delivery = match pod.ip {
        Some(ip) => send_all(SocketAddr::new(ip, port), calls, token, timeout).await,
        None => Delivery::Failed(Failure::new(Cause::Unreachable, "the pod has no IP yet")),
    };
    if let Delivery::Failed(f) = &delivery {
        warn!(pod = %pod.name, node = %pod.node, why = %f.why, "purge not confirmed");
    }
    (pod.uid.clone(), delivery)
}

/// The admin token of the EdgeCache's Secret, if it has one.
async fn admin_token(
    ctx: &Context,
    namespace: &str,
    ec_name: &str,
) -> Result<Option<String>, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = secrets
        .get_opt(&admin_secret_name(ec_name))
        .await
        .map_err(|source| Error::Read {
            what: "the admin token Secret",
            source,
        })?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|d| d.get(ADMIN_TOKEN_KEY).cloned())
        .and_then(|b| String::from_utf8(b.0).ok())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

/// Send every call to one pod, in order; the first failure ends it (the next round sends them
/// all again: the ids make that a no-op where they arrived).
async fn send_all(
    addr: SocketAddr,
    calls: &[AdminCall],
    token: &str,
    timeout: Duration,
) -> Delivery {
    let mut node = String::new();
    let mut objects = 0u64;
    for call in calls {
        let answer =
            match pod_admin::call("POST", addr, &call.path_and_query, Some(token), timeout).await {
                Ok((code, body)) => plan::read_answer(call, code, &body),
                Err(e) => Err(Failure::new(
                    Cause::Unreachable,
                    format!("unreachable: {e}"),
                )),
            };
        match answer {
            Ok(a) => {
                node = a.node;
                objects = objects.saturating_add(a.objects);
            }
            Err(f) => return Delivery::Failed(f),
        }
    }
    Delivery::Confirmed { node, objects }
}

/// The reconcile of the controller, which watches through `DeserializeGuard` so one purge
/// that does not parse cannot stop the others; such a one is only logged (its spec cannot
/// change, so it waits for the garbage collector or a human).
pub async fn reconcile_guarded(
    obj: Arc<DeserializeGuard<EdgeCachePurge>>,
    pctx: Arc<PurgeContext>,
) -> Result<Action, Error> {
    let meta = match &obj.0 {
        Ok(p) => p.metadata.clone(),
        Err(invalid) => invalid.metadata.clone(),
    };
    let ctx = pctx.ctx.clone();
    crate::trace::reconcile(&ctx, "EdgeCachePurge", &meta, Error::category, async move {
        guarded(obj, pctx).await
    })
    .await
}

async fn guarded(
    obj: Arc<DeserializeGuard<EdgeCachePurge>>,
    pctx: Arc<PurgeContext>,
) -> Result<Action, Error> {
    match &obj.0 {
        Ok(p) => reconcile(Arc::new(p.clone()), pctx).await,
        Err(invalid) => {
            warn!(
                name = invalid.metadata.name.as_deref().unwrap_or(""),
                error = %invalid.error,
                "an EdgeCachePurge does not parse; skipped"
            );
            Ok(Action::await_change())
        }
    }
}

/// Failed reconciles are retried with the per-object backoff.
pub fn error_policy(
    obj: Arc<DeserializeGuard<EdgeCachePurge>>,
    err: &Error,
    pctx: Arc<PurgeContext>,
) -> Action {
    let ctx = &pctx.ctx;
    ctx.metrics.failure(err.category());
    let meta = match &obj.0 {
        Ok(p) => &p.metadata,
        Err(invalid) => &invalid.metadata,
    };
    let key = key_of(meta);
    let delay = ctx.backoff(&key);
    warn!(purge = %key, error = %err, ?delay, "purge reconcile failed; requeued");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_counts_from_the_creation_timestamp() {
        let mut p = EdgeCachePurge::new("p", Default::default());
        let created = Timestamp::from_second(1_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        p.metadata.creation_timestamp = Some(Time(created));
        let day = Duration::from_secs(86_400);
        let at = |s: i64| Timestamp::from_second(1_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH);
        assert_eq!(time_left(&p, day, at(0)), day);
        assert_eq!(
            time_left(&p, day, at(3600)),
            day - Duration::from_secs(3600)
        );
        assert_eq!(time_left(&p, day, at(86_400)), Duration::ZERO);
        assert_eq!(time_left(&p, day, at(100_000)), Duration::ZERO);
        // A clock behind the API server's: the whole retention is left.
        assert_eq!(time_left(&p, day, at(-60)), day);
    }
}
