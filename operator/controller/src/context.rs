//! What every reconciliation shares.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use crate::metrics::Metrics;
use crate::validate::Policy;

/// Shared state of the reconcilers.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    /// What the operator was installed to allow (e.g. the host paths).
    pub policy: Policy,
    /// How long reading a ready pod's `/metrics` (for `status.nodes`) may take; `None`: the
    /// pods are not read (tests whose fake pods have no endpoint behind their IPs).
    pub scrape_timeout: Option<Duration>,
    /// The one namespace watched, or all when `None` (where other EdgeCaches are listed).
    pub watch_namespace: Option<String>,
    /// Consecutive transient failures per object (`namespace/name`), for the requeue backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Requeue delay after the first transient failure; doubles up to `max_backoff`.
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// How soon an EdgeCache waiting for a Secret it names (missing, or not yet valid) is looked
    /// at again: those Secrets are not watched (the operator watches only its own), so creating
    /// or fixing one is seen at the next recheck.
    pub named_secret_recheck: Duration,
    /// Traces of the reconciles (`--trace-endpoint`), or `None`: off.
    pub tracer: Option<Arc<edgecache_trace::Tracer>>,
}

impl Context {
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: crate::build::MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics: Metrics::default(),
            policy: Policy::default(),
            watch_namespace: None,
            scrape_timeout: None,
            failures: Mutex::new(HashMap::new()),
            base_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
            named_secret_recheck: Duration::from_secs(15),
            tracer: None,
        }
    }

    /// Count a transient failure of `key` and return the delay before the next try.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let factor = 1u32 << (*n - 1).min(16);
        self.base_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// Forget the failures of `key` after a success.
    pub fn reset_backoff(&self, key: &str) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.remove(key);
    }
}
