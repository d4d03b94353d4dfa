//! The controller: watches EdgeCaches (generation changes only), the children it owns, the
//! cache pods (for the peer list and per-node status), the metadata of its own Secrets (the
//! admin tokens, by label) and the DaemonSets' `FailedCreate` Events, and runs the reconcile pipeline with bounded concurrency until shutdown. A change to (or the
//! deletion of) an EdgeCache also reconciles the EdgeCaches sharing a cache directory or host
//! port with it, so a conflict clears when the earlier EdgeCache goes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use edgecache_api::v1alpha1::EdgeCache;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod, Secret, Service};
use kube::core::PartialObjectMeta;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use crate::conflict;
use crate::context::Context;
use crate::reconcile::{error_policy_guarded, reconcile_guarded};

/// Knobs of `run`.
#[derive(Debug, Clone)]
pub struct Config {
    /// Watch one namespace, or all when `None`.
    pub namespace: Option<String>,
    /// Reconciliations running at once.
    pub concurrency: u16,
    /// Quiet time before a burst of events becomes one reconciliation.
    pub debounce: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 4,
            debounce: Duration::from_millis(500),
        }
    }
}

/// A watch's delay before it retries after an error: 0.5 s, doubling to at most 5 s, and 0.5 s
/// again after an event. kube's default grows to 30 s, so an operator started before its CRDs
/// began its work up to half a minute after they appeared. Every watch of both controllers has
/// one of its own ([`resilient`]).
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = delay.saturating_mul(2).min(Self::MAX);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Log what a controller's output stream reports at debug (the reconcilers' failures are logged
/// by their error policies, the watches' by [`resilient`]).
pub fn log_outcome<R, Q, E>(controller: &str, res: Result<R, controller::Error<E, Q>>)
where
    R: std::fmt::Debug,
    E: std::error::Error,
    Q: std::error::Error,
{
    match res {
        Ok(obj) => debug!(controller, ?obj, "reconciled"),
        Err(e) => debug!(controller, error = %e, "reconcile error"),
    }
}

/// Drive `controller` (a Controller's drained output) until it ends, or until `shutdown` has
/// resolved before `synced` turned true. kube's Controller holds its runner until its store has
/// synced and does not end on a graceful shutdown before that, so an operator started before its
/// CRDs ignored SIGTERM (issue 35 defect 17). Before the first sync nothing can be in flight, so
/// it stops at once; after it, in-flight reconciliations finish first.
pub async fn until_stopped(
    controller: impl Future<Output = ()>,
    shutdown: impl Future<Output = ()>,
    synced: &AtomicBool,
) {
    let mut controller = std::pin::pin!(controller);
    tokio::select! {
        () = &mut controller => return,
        () = shutdown => {}
    }
    if synced.load(Ordering::SeqCst) {
        controller.await;
    } else {
        info!("stopping before the first sync: nothing was in flight");
    }
}

/// An `Api` on one namespace, or on all when `ns` is `None`.
pub fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One watch of a controller, on its own: `stream`'s errors (the API server unreachable or
/// restarted, a 410 to relist after, a resource it does not serve yet, a 403) are logged at warn,
/// naming the watch, and kept here; the watch retries behind its own [`WatchBackoff`]. kube's
/// `trigger_backoff` instead pauses every watch of a Controller on any one's error: after an API
/// server restart each watch's 410 cost all of them a back-off in turn, and a new EdgeCache was
/// seen about 25 s after the server was back (issue 35 defect 21).
pub fn resilient<K>(
    watch: &'static str,
    stream: impl futures_util::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) -> impl futures_util::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Send + 'static,
{
    stream
        .backoff(WatchBackoff::default())
        .filter_map(move |event| {
            std::future::ready(match event {
                Ok(obj) => Some(Ok(obj)),
                Err(e) => {
                    warn!(watch, error = %e, "a watch failed; retrying within 5 s");
                    None
                }
            })
        })
}

/// The objects of `api` changed or deleted, each watch on its own ([`resilient`]). An owned
/// child's owner is all the controller reads of it: `Api<PartialObjectMeta<K>>` watches metadata
/// only.
pub fn watch<K>(
    name: &'static str,
    api: Api<K>,
    config: watcher::Config,
) -> impl futures_util::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    resilient(name, watcher(api, config).touched_objects())
}

/// The objects of `api` as a watch stream that feeds `writer` (the controller's store) with
/// every change but yields an object only when its generation changed: status-only updates
/// (ours included) cause no work. `synced` turns true once the store holds its first full list.
///
/// Not `Store::wait_until_ready`: the Controller waits on the same store, and kube's
/// `DelayedInit` wakes only the last of two waiters, so a second one could wait for ever (the
/// operator reconciled while `/readyz` said "cache not synced", issue 35 defect 18).
pub fn generation_changes<K>(
    name: &'static str,
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    synced: Option<Arc<AtomicBool>>,
) -> impl futures_util::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let stream = watcher(api, watcher::Config::default())
        .reflect(writer)
        .inspect_ok(move |event| {
            if let (watcher::Event::InitDone, Some(synced)) = (event, &synced) {
                synced.store(true, Ordering::SeqCst);
            }
        })
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    resilient(name, stream)
}

/// Run until `shutdown` resolves; in-flight reconciliations finish first. `ready` turns true
/// once the EdgeCache cache has synced.
pub async fn run(
    ctx: Arc<Context>,
    cfg: Config,
    ready: Arc<AtomicBool>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = cfg.namespace.as_deref();
    let shutdown = futures_util::FutureExt::shared(Box::pin(shutdown));
    let (reader, writer) = reflector::store();
    // Status-only updates (ours included) do not bump the generation, so they cause no work.
    // DeserializeGuard: an object that does not parse is reported, and cannot wedge the others.
    let edgecaches = generation_changes(
        "edgecaches",
        api::<DeserializeGuard<EdgeCache>>(&client, ns),
        writer,
        Some(ready.clone()),
    );
    let children =
        watcher::Config::default().labels("app.kubernetes.io/managed-by=edgecache-operator");
    // Another EdgeCache changing or going away may lift (or cause) a conflict on a cache
    // directory or host port: reconcile the EdgeCaches that share one with it.
    let peers = reader.clone();
    let sharing = move |changed: DeserializeGuard<EdgeCache>| {
        let Ok(changed) = changed.0 else {
            return Vec::new();
        };
        peers
            .state()
            .iter()
            .filter(|g| {
                g.0.as_ref()
                    .is_ok_and(|ec| conflict::shares_resources(ec, &changed))
            })
            .map(|g| ObjectRef::from_obj(&**g))
            .collect::<Vec<_>>()
    };
    // The cache pods (owned by the DaemonSet, not by the EdgeCache): their readiness and IPs
    // make the peer list, their states `status.nodes`.
    let pods = watcher::Config::default().labels(&format!(
        "app.kubernetes.io/managed-by={},app.kubernetes.io/name=edgecache",
        crate::build::MANAGER
    ));
    let pod_owner = |pod: Pod| {
        let ns = pod.metadata.namespace.clone()?;
        let name = pod
            .metadata
            .labels
            .as_ref()?
            .get("app.kubernetes.io/instance")?
            .clone();
        Some(ObjectRef::<DeserializeGuard<EdgeCache>>::new(&name).within(&ns))
    };
    // The operator's own Secrets (the admin tokens), by label and metadata only: one deleted is
    // made again at once. The Secrets an EdgeCache names (TLS, origin CA) are not watched: that
    // would need every Secret's list and watch; they are read by name at each reconcile, and
    // rechecked while missing or invalid (`Context::named_secret_recheck`).
    // The DaemonSet controller's FailedCreate Events (a pod refused by Pod Security, a
    // ResourceQuota, a missing PriorityClass): such a refusal changes no DaemonSet count after
    // the first, and its Event may come after the status the reconcile read, so it reconciles
    // the EdgeCache of the DaemonSet's name (the status's Degraded condition names it).
    let failed_creates = watch(
        "the DaemonSets' FailedCreate events",
        api::<CoreEvent>(&client, ns),
        watcher::Config::default().fields(&format!(
            "involvedObject.kind=DaemonSet,reason={}",
            crate::status::FAILED_CREATE
        )),
    );
    let event_owner = |event: CoreEvent| {
        let o = event.involved_object;
        let ns = o.namespace.or(event.metadata.namespace)?;
        Some(ObjectRef::<DeserializeGuard<EdgeCache>>::new(&o.name?).within(&ns))
    };
    info!(
        namespace = ns.unwrap_or("(all)"),
        concurrency = cfg.concurrency,
        "controller starting"
    );
    // Every watch on its own (`resilient`): one failing never pauses the others.
    let controller = Controller::for_stream(edgecaches, reader)
        .owns_stream(watch(
            "daemonsets",
            api::<PartialObjectMeta<DaemonSet>>(&client, ns),
            children.clone(),
        ))
        .owns_stream(watch(
            "configmaps",
            api::<PartialObjectMeta<ConfigMap>>(&client, ns),
            children.clone(),
        ))
        .owns_stream(watch(
            "services",
            api::<PartialObjectMeta<Service>>(&client, ns),
            children.clone(),
        ))
        .owns_stream(watch(
            "secrets",
            api::<PartialObjectMeta<Secret>>(&client, ns),
            children,
        ))
        .watches_stream(failed_creates, event_owner)
        .watches_stream(watch("pods", api::<Pod>(&client, ns), pods), pod_owner)
        .watches_stream(
            watch(
                "edgecaches (shared resources)",
                api::<DeserializeGuard<EdgeCache>>(&client, ns),
                watcher::Config::default(),
            ),
            sharing,
        )
        .with_config(
            controller::Config::default()
                .concurrency(cfg.concurrency)
                .debounce(cfg.debounce),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_guarded, error_policy_guarded, ctx)
        .for_each(|res| async move { log_outcome("edgecache", res.map(|(obj, _)| obj)) });
    until_stopped(controller, shutdown, &ready).await;
    info!("controller stopped");
}
