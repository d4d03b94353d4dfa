//! The `EdgeCachePurge` controller: delivers each purge to every data-plane pod of its
//! EdgeCache over the pods' authenticated admin endpoint, records each pod's confirmation, and
//! deletes purges past the retention.
//!
//! Durable delivery: a purge is re-sent to each current pod that has not confirmed it under its
//! present uid, with backoff, and at once when one of the EdgeCache's pods changes (turns ready,
//! is added, is replaced). Re-sending is safe: every call carries an id derived from the
//! purge's uid, which the data plane applies once, and `at` = the purge's creationTimestamp
//! (to the end of its second), which makes a late delivery purge what was stored before the
//! purge was made and spare what was stored later.
//!
//! [`plan`] holds the pure decisions, [`reconcile`] the I/O around them, [`run`] the wiring.

pub mod plan;
pub mod reconcile;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use edgecache_api::purge::EdgeCachePurge;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{reflector, watcher};
use tracing::info;

use crate::build::MANAGER;
use crate::context::Context;
use crate::controller::{api, generation_changes, log_outcome, until_stopped, watch};
pub use reconcile::{DEFAULT_RETENTION, PurgeContext, Settings};

/// Label selector of the data-plane pods of every EdgeCache (what the DaemonSets' pod templates
/// carry; see `build::labels`).
pub fn dataplane_pod_selector() -> String {
    format!(
        "app.kubernetes.io/name=edgecache,app.kubernetes.io/component=dataplane,app.kubernetes.io/managed-by={MANAGER}"
    )
}

/// Knobs of [`run`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Watch one namespace, or all when `None`.
    pub namespace: Option<String>,
    /// Purges reconciled at once.
    pub concurrency: u16,
    /// Quiet time before a burst of events becomes one reconciliation.
    pub debounce: Duration,
    pub settings: Settings,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 4,
            debounce: Duration::from_millis(500),
            settings: Settings::default(),
        }
    }
}

/// Run the purge controller until `shutdown` resolves; in-flight reconciliations finish first.
pub async fn run(
    ctx: Arc<Context>,
    cfg: Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = cfg.namespace.as_deref();
    let (reader, writer) = reflector::store();
    // The spec is immutable and status writes (ours) do not bump the generation: a purge is
    // reconciled when created, when its EdgeCache's pods change, and on requeue.
    let shutdown = futures_util::FutureExt::shared(Box::pin(shutdown));
    let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let purges = generation_changes(
        "edgecachepurges",
        api::<DeserializeGuard<EdgeCachePurge>>(&client, ns),
        writer,
        Some(synced.clone()),
    );
    // A pod of an EdgeCache changing (ready, added, replaced) re-sends that EdgeCache's purges
    // that still need it (`plan::needs_pod`): none when every purge is complete and the pod
    // confirmed them all.
    let store = reader.clone();
    let of_pod = move |pod: Pod| {
        let (Some(ns), Some(instance)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/instance")),
        ) else {
            return Vec::new();
        };
        store
            .state()
            .iter()
            .filter(|g| {
                g.0.as_ref().is_ok_and(|p| {
                    p.metadata.namespace.as_deref() == Some(ns)
                        && &p.spec.edge_cache == instance
                        && plan::needs_pod(p.status.as_ref(), &pod)
                })
            })
            .map(|g| ObjectRef::from_obj(&**g))
            .collect::<Vec<_>>()
    };
    info!(
        namespace = ns.unwrap_or("(all)"),
        retention = ?cfg.settings.retention,
        "purge controller starting"
    );
    let pctx = Arc::new(PurgeContext {
        ctx,
        settings: cfg.settings.clone(),
    });
    let controller = Controller::for_stream(purges, reader)
        .watches_stream(
            watch(
                "pods (purges)",
                api::<Pod>(&client, ns),
                watcher::Config::default().labels(&dataplane_pod_selector()),
            ),
            of_pod,
        )
        .with_config(
            controller::Config::default()
                .concurrency(cfg.concurrency)
                .debounce(cfg.debounce),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile::reconcile_guarded, reconcile::error_policy, pctx)
        .for_each(|res| async move { log_outcome("edgecachepurge", res.map(|(obj, _)| obj)) });
    until_stopped(controller, shutdown, &synced).await;
    info!("purge controller stopped");
}
