//! Prometheus metrics of the data plane, registered once with bounded labels, all under the
//! `edgecache_dataplane_` prefix. The handles the request pipeline and the connections count in
//! are edgecache-serve's (`edgecache_serve::metrics`); here are the start-up's facts, the
//! steering mode and the store's counters, read at scrape time through a collector, so the hot
//! path never touches two copies of a number.

use std::sync::Arc;

use edgecache_store::{Store, StoreStats, WriteKind};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

pub use edgecache_serve::metrics::*;

/// The prefix of every metric name.
pub const PREFIX: &str = "edgecache_dataplane";

/// What the start-up decided, exported as constants.
#[derive(Debug, Default)]
pub struct PlanFacts {
    /// The disk I/O engine in use (`uring`, `threads`).
    pub engine: &'static str,
    pub workers: i64,
    /// The memory limit planned with (0: none).
    pub memory_limit: i64,
    pub ram_tier: i64,
    pub index_reserve: i64,
}

/// Register the start-up's facts: the I/O engine, the workers and the memory plan.
pub fn register_plan(registry: &mut Registry, facts: &PlanFacts) {
    registry.register(
        "io_engine",
        "The disk I/O engine in use",
        Info::new(vec![("engine", facts.engine.to_string())]),
    );
    let constants = [
        ("workers", "Worker threads", facts.workers),
        (
            "memory_limit_bytes",
            "Memory limit planned with (0 = none)",
            facts.memory_limit,
        ),
        (
            "ram_tier_capacity_bytes",
            "RAM tier size from the memory plan (with what the store's index cannot use)",
            facts.ram_tier,
        ),
        (
            "index_reserve_bytes",
            "Memory the plan keeps for the store index and connections",
            facts.index_reserve,
        ),
    ];
    for (name, help, value) in constants {
        registry.register(name, help, ConstGauge::new(value));
    }
}

/// Register the steering mode in effect (after any fallback).
pub fn register_steering(registry: &mut Registry, mode: edgecache_api::SteeringMode) {
    registry.register(
        "steering",
        "Connection steering mode in effect",
        Info::new(vec![("mode", mode.as_str().to_string())]),
    );
}

/// Exports the store's counters at scrape time.
#[derive(Debug)]
pub struct StoreCollector(pub Arc<Store>);

impl Collector for StoreCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_store_stats(&self.0.stats(), encoder)
    }
}

/// The store's metrics from one snapshot of its stats.
pub fn encode_store_stats(
    s: &StoreStats,
    mut encoder: DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let counters: [(&str, &str, u64); 18] = [
        (
            "store_admitted_body_bytes",
            "Body bytes of the records the store wrote whole (what admission let in)",
            s.admitted_body_bytes,
        ),
        (
            "store_admission_rejected",
            "Fills served but not written: storage.admission kept them off the disk",
            s.admission_rejected,
        ),
        (
            "store_publishes_invalidated",
            "Fills not stored because their URL was invalidated (unsafe method, PURGE) while they ran",
            s.publishes_invalidated,
        ),
        (
            "store_evictions",
            "Objects evicted from the disk store",
            s.evictions,
        ),
        (
            "store_reinserted",
            "Objects read since written that storage.reinsertion copied ahead of their segment's eviction",
            s.reinserted,
        ),
        (
            "store_reinserted_body_bytes",
            "Body bytes of the objects storage.reinsertion copied",
            s.reinserted_bytes,
        ),
        (
            "store_reinserts_refused",
            "Copies not published: the object was replaced, purged or evicted meanwhile",
            s.reinserts_refused,
        ),
        (
            "store_variants_trimmed",
            "Variants dropped because their key had storage.maxVariantsPerKey newer ones",
            s.variants_trimmed,
        ),
        (
            "store_index_evictions",
            "Objects the store index dropped to stay within its memory bound",
            s.index_evictions,
        ),
        (
            "store_corrupt_records",
            "Torn or corrupt records dropped (at recovery or on read)",
            s.corrupt_dropped,
        ),
        (
            "store_body_checks_skipped",
            "Disk reads that skipped the body checksums (record verified earlier in this run)",
            s.body_checks_skipped,
        ),
        (
            "store_write_errors",
            "Disk write errors (e.g. ENOSPC, EIO)",
            s.write_errors,
        ),
        (
            "store_record_writes",
            "Record writes queued by fills: whole records, the headers of larger ones and their bodies' 256 KiB pieces",
            s.record_writes,
        ),
        (
            "store_record_write_ops",
            "Disk writes those went out in (back to back ones queued together share one)",
            s.record_write_ops,
        ),
        ("disk_reads", "Reads from the disk store", s.disk_reads),
        (
            "disk_read_bytes",
            "Bytes read from the disk store",
            s.disk_read_bytes,
        ),
        (
            "store_recovered_objects",
            "Objects found on disk at start",
            s.recovered_objects,
        ),
        (
            "io_buffer_waits",
            "Times a read or write waited for the I/O buffer budget",
            s.io_buffer_waits,
        ),
    ];
    for (name, help, v) in counters {
        let c = ConstCounter::new(v);
        c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
    }
    // Write amplification: the sum over kinds, over store_admitted_body_bytes_total; per
    // byte served, over response_body_bytes_total.
    let mut family = encoder.encode_descriptor(
        "store_disk_write_bytes",
        "Bytes written to the disk store, by what for (record: bodies with their padding \
         and headers; tombstone; segment_header; meta_rewrite)",
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for kind in WriteKind::ALL {
        let c = ConstCounter::new(s.disk_write_bytes[kind as usize]);
        c.encode(family.encode_family(&[("kind", kind.as_str())])?)?;
    }
    let gauges: [(&str, &str, u64); 11] = [
        ("store_objects", "Objects in the disk store", s.objects),
        (
            "store_index_bytes",
            "RAM bytes of the store's object index",
            s.index_bytes,
        ),
        (
            "store_index_bound_bytes",
            "Most RAM the store's object index may grow to (the memory plan's share)",
            s.index_bound_bytes,
        ),
        ("store_bytes", "Bytes used in the disk store", s.bytes_used),
        (
            "store_capacity_bytes",
            "Disk budget of the store",
            s.bytes_capacity,
        ),
        (
            "ram_tier_bytes",
            "Bytes held in the RAM tier, evicted copies that responses still send included",
            s.ram_tier_bytes,
        ),
        (
            "ram_tier_objects",
            "Objects held in the RAM tier",
            s.ram_tier_objects,
        ),
        (
            "io_buffer_bytes",
            "I/O buffer bytes allocated now (all workers)",
            s.io_buffer_bytes,
        ),
        (
            "io_buffer_pooled_bytes",
            "Of io_buffer_bytes, those pooled for reuse (in use: the difference)",
            s.io_buffer_pooled,
        ),
        (
            "io_buffer_peak_bytes",
            "Most I/O buffer bytes ever allocated at once",
            s.io_buffer_peak,
        ),
        (
            "io_buffer_capacity_bytes",
            "The I/O buffer budget (all workers)",
            s.io_buffer_capacity,
        ),
    ];
    for (name, help, v) in gauges {
        let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
        g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
    }
    // Disk read latency: cumulative buckets in seconds.
    let h = &s.disk_read_latency;
    // Per-bucket counts: the encoder makes them cumulative (and writes `f64::MAX` as +Inf).
    let buckets: Vec<(f64, u64)> = h
        .counts
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let bound = h.bounds_us.get(i).map_or(f64::MAX, |us| *us as f64 / 1e6);
            (bound, *n)
        })
        .collect();
    let mut m = encoder.encode_descriptor(
        "disk_read_seconds",
        "Latency of reads from the disk store (from the read slot to the completion)",
        None,
        prometheus_client::metrics::MetricType::Histogram,
    )?;
    m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        h.sum_us as f64 / 1e6,
        h.count(),
        &buckets,
        None,
    )?;
    Ok(())
}
