//! Prometheus metrics, registered once under the `edgecache_operator_` prefix, with bounded
//! labels (failure reasons come from `Error::category`, never from error text).

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: &'static str,
    pub change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// The operator's metric families.
pub struct Metrics {
    pub reconciles: Counter,
    pub failures: Family<ReasonLabels, Counter>,
    pub duration: Histogram,
    pub child_writes: Family<WriteLabels, Counter>,
    /// Deliveries of a purge to one pod, by outcome (`confirmed`, `unreachable`, `refused`,
    /// `bad_answer`).
    pub purge_deliveries: Family<OutcomeLabels, Counter>,
    /// The tracer's counters (`trace_spans_exported_total`, `trace_spans_dropped_total`).
    pub trace: edgecache_trace::Counters,
    pub registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let sub = registry.sub_registry_with_prefix("edgecache_operator");
        let reconciles = Counter::default();
        sub.register("reconciles", "Reconciliations started", reconciles.clone());
        let failures = Family::<ReasonLabels, Counter>::default();
        sub.register(
            "reconcile_failures",
            "Reconciliations that failed, by reason",
            failures.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 12));
        sub.register(
            "reconcile_duration_seconds",
            "Time spent in one reconciliation",
            duration.clone(),
        );
        let child_writes = Family::<WriteLabels, Counter>::default();
        sub.register(
            "child_writes",
            "Children created or changed by server-side apply, by kind",
            child_writes.clone(),
        );
        let purge_deliveries = Family::<OutcomeLabels, Counter>::default();
        sub.register(
            "purge_deliveries",
            "Deliveries of an EdgeCachePurge to one data-plane pod, by outcome",
            purge_deliveries.clone(),
        );
        let trace = edgecache_trace::Counters::default();
        sub.register(
            "trace_spans_exported",
            "Trace spans of reconciles sent to the OTLP endpoint (--trace-endpoint) and taken by it",
            trace.exported.clone(),
        );
        let trace_dropped = Family::<ReasonLabels, Counter>::default();
        sub.register(
            "trace_spans_dropped",
            "Trace spans dropped (label reason: queue_full, export_failed)",
            trace_dropped.clone(),
        );
        // One label set at a time: get_or_create's guard holds the family's lock.
        let dropped = |reason: &'static str| {
            trace_dropped
                .get_or_create(&ReasonLabels { reason })
                .clone()
        };
        let trace = edgecache_trace::Counters {
            queue_full: dropped("queue_full"),
            export_failed: dropped("export_failed"),
            ..trace
        };
        Self {
            reconciles,
            failures,
            duration,
            child_writes,
            purge_deliveries,
            trace,
            registry: Arc::new(registry),
        }
    }
}

impl Metrics {
    /// Count a reconciliation and time it until the guard drops.
    pub fn start_reconcile(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer {
            start: Instant::now(),
            histogram: &self.duration,
        }
    }

    pub fn failure(&self, reason: &'static str) {
        self.failures.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Count one delivery of a purge to a pod.
    pub fn purge_delivery(&self, outcome: &'static str) {
        self.purge_deliveries
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Observes the reconcile duration when dropped.
pub struct ReconcileTimer<'a> {
    start: Instant,
    histogram: &'a Histogram,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}
