//! The metric handles of the data plane, made and registered once with bounded labels by the
//! binary (its registry puts every name under the `edgecache_dataplane_` prefix) and read by
//! the request pipeline and the connections: the request outcomes, the fills, the slices, the
//! compression, the in-flight parts of the memory plan. The store's own counters are read at
//! scrape time through the binary's collector, so the hot path never touches two copies of a
//! number.

use std::sync::Arc;

use edgecache_fleet::sharding::ShardingMetrics;
use edgecache_host::{MemoryPlan, Part, Share, part_bound};
use edgecache_observe::request_log::{
    RequestHistograms, RequestLabels, RequestMetrics, request_histogram,
};
use edgecache_store::Store;
use edgecache_upstream::interim::InterimMetrics;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Label = [(&'static str, String); 1];

/// How the cache handled a request; the `cache` label of `requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Served from the RAM tier.
    HitRam,
    /// Served from the disk store.
    HitDisk,
    /// Fetched from the origin (and stored when allowed).
    Miss,
    /// Served from another request's origin fetch (coalesced).
    Coalesced,
    /// A stale entry revalidated with the origin.
    Revalidated,
    /// Not cacheable: passed to the origin.
    Bypass,
    /// Answered by the cache itself without the origin (e.g. 400, 504 only-if-cached).
    Synthetic,
    /// The origin failed (502/504).
    OriginError,
    /// Fetched from the node that owns the key (sharding).
    Peer,
}

impl Outcome {
    /// Every outcome, in declaration order (`outcome as usize` is its place).
    pub const ALL: [Outcome; 9] = [
        Self::HitRam,
        Self::HitDisk,
        Self::Miss,
        Self::Coalesced,
        Self::Revalidated,
        Self::Bypass,
        Self::Synthetic,
        Self::OriginError,
        Self::Peer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::HitRam => "hit_ram",
            Self::HitDisk => "hit_disk",
            Self::Miss => "miss",
            Self::Coalesced => "coalesced",
            Self::Revalidated => "revalidated",
            Self::Bypass => "bypass",
            Self::Synthetic => "synthetic",
            Self::OriginError => "origin_error",
            Self::Peer => "peer",
        }
    }
}

/// Where a slice of a sliced object came from for a response; the `source` label of
/// `slices_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceSource {
    /// Read from the store.
    Store,
    /// Read from the store after waiting for a fetch of it in flight (a fill's or another
    /// request's).
    Waited,
    /// Fetched from the origin for this response (and stored as it passed).
    Origin,
}

impl SliceSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Waited => "waited",
            Self::Origin => "origin",
        }
    }
}

/// What happened to a sliced object's manifest; the `event` label of `slice_manifests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestEvent {
    /// A new manifest (a new version, or the same one after a purge) was stored.
    Written,
    /// A 304 refreshed a stale manifest's stored headers; its slices stay.
    Freshened,
    /// A slice of another version came back: the manifest was dropped.
    Dropped,
    /// A request for a stale manifest waited for another's revalidation of it (and then
    /// looked again), instead of sending its own.
    Coalesced,
}

impl ManifestEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::Freshened => "freshened",
            Self::Dropped => "dropped",
            Self::Coalesced => "coalesced",
        }
    }
}

/// All metric handles, shared by every worker.
#[derive(Debug)]
pub struct Metrics {
    pub requests: Family<Label, Counter>,
    /// `requests`' series of each [`Outcome`], looked up once: a request then takes neither the
    /// family's lock nor a label allocation.
    request_series: [std::sync::OnceLock<Counter>; Outcome::ALL.len()],
    pub response_bytes: Counter,
    pub origin_fetches: Counter,
    pub origin_errors: Family<Label, Counter>,
    pub origin_first_byte_seconds: Histogram,
    pub accepted: Family<Label, Counter>,
    pub active_connections: Gauge,
    pub store_write_aborts: Family<Label, Counter>,
    pub steering_fallbacks: Counter,
    pub ready: Gauge,
    /// 1xx responses from the origin by action, and the interim queues' share of `memory`.
    pub interim: Arc<InterimMetrics>,
    pub connections_closed: Family<Label, Counter>,
    pub connections_refused: Family<Label, Counter>,
    pub fill_clients_switched: Counter,
    pub paced_chunks_released: Counter,
    /// Large disk hits holding a stream slot, and waiting for one (src/stream_slots.rs).
    pub disk_streams: crate::stream_slots::SlotGauges,
    pub coalesce_gave_up: Counter,
    /// The cache's own compression (src/compress.rs): fills compressed, by coding; fills
    /// answered identity because the worker compressed as many as it may; bytes in and out.
    pub compressed: Family<Label, Counter>,
    pub compress_busy: Counter,
    pub compress_bytes_in: Counter,
    pub compress_bytes_out: Counter,
    /// Stored responses a purge rule named at lookup, by verdict (`remove`, `stale`).
    pub purge_hits: Family<Label, Counter>,
    pub store_hit_repairs: Family<Label, Counter>,
    pub fill_repairs: Family<Label, Counter>,
    /// Sharding: misses sent to the key's owner, by result.
    pub peer_forwards: Family<Label, Counter>,
    /// Sharding: requests another node forwarded here.
    pub peer_served: Counter,
    /// Sharding: hop headers without a valid proof (edgecache_fleet::peer_auth), by reason.
    pub peer_hops_refused: Family<Label, Counter>,
    /// Sharding: the other nodes of the peer list, by state, and peers file changes taken or
    /// refused.
    pub sharding: Arc<ShardingMetrics>,
    /// The in-flight parts of the memory plan: `memory_bytes{part}`, `memory_bound_bytes{part}`.
    pub memory: MemoryParts,
    /// From a request's head to the end of its response body (edgecache_observe::request_log).
    pub request_duration: RequestHistograms,
    /// From a request's head to its response head handed to hyper.
    pub request_first_byte: RequestHistograms,
    /// Response body bytes sent to clients, with the labels of the request histograms (the
    /// byte hit ratio by site).
    pub served_bytes: Family<RequestLabels, Counter>,
    /// Access-log lines written to stdout.
    pub access_log_lines: Counter,
    /// Access-log lines dropped, by reason (`queue_full`, `write_error`).
    pub access_log_dropped: Family<Label, Counter>,
    /// Trace spans the collector took.
    pub trace_spans_exported: Counter,
    /// Trace spans dropped, by reason (`queue_full`, `export_failed`).
    pub trace_spans_dropped: Family<Label, Counter>,
    /// HTTP/2 streams served, by result (`completed`, `cancelled`).
    pub http2_streams: Family<Label, Counter>,
    /// HTTP/2 connections that ended in an error, by its code.
    pub http2_connection_errors: Family<Label, Counter>,
    /// Slices of sliced objects served, by [`SliceSource`].
    pub slices: Family<Label, Counter>,
    /// Manifests of sliced objects, by [`ManifestEvent`].
    pub slice_manifests: Family<Label, Counter>,
}

/// The bytes each [`Part`] of the memory plan holds now, and its bound (unbounded until
/// [`MemoryParts::set_bounds`]). Read at scrape time by [`MemoryCollector`].
#[derive(Debug, Clone, Default)]
pub struct MemoryParts {
    /// The store's ([`Store::unknown_length_bodies`]).
    pub unknown_length_bodies: Arc<Share>,
    pub coalescing_tails: Arc<Share>,
    pub fill_client_queues: Arc<Share>,
    pub interim_queues: Arc<Share>,
    /// The compressing fills' encoders (src/compress.rs).
    pub encoders: Arc<Share>,
    /// `CONNECTION_BYTES` per open client connection.
    pub connections: Arc<Share>,
}

impl MemoryParts {
    /// The parts, the unknown-length one being the store's.
    pub fn with_store(store: &Store) -> Self {
        MemoryParts {
            unknown_length_bodies: store.unknown_length_bodies().clone(),
            ..MemoryParts::default()
        }
    }

    pub fn share(&self, part: Part) -> &Arc<Share> {
        match part {
            Part::UnknownLengthBodies => &self.unknown_length_bodies,
            Part::CoalescingTails => &self.coalescing_tails,
            Part::FillClientQueues => &self.fill_client_queues,
            Part::InterimQueues => &self.interim_queues,
            Part::Encoders => &self.encoders,
            Part::Connections => &self.connections,
        }
    }

    /// Each part's bound from the plan ([`part_bound`]).
    pub fn set_bounds(&self, plan: &MemoryPlan) {
        for part in Part::ALL {
            self.share(part).set_bound(part_bound(plan, part));
        }
    }
}

/// Exports [`MemoryParts`] at scrape time: `memory_bytes{part}` and `memory_bound_bytes{part}`.
#[derive(Debug)]
pub struct MemoryCollector(pub MemoryParts);

impl Collector for MemoryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        type Read = fn(&Share) -> u64;
        let families: [(&str, &str, Read); 2] = [
            (
                "memory_bytes",
                "Bytes held now by each in-flight part of the memory plan (label part)",
                Share::held,
            ),
            (
                "memory_bound_bytes",
                "The memory plan's bound of each in-flight part (label part)",
                Share::bound,
            ),
        ];
        for (name, help, read) in families {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for part in Part::ALL {
                let g =
                    ConstGauge::new(i64::try_from(read(self.0.share(part))).unwrap_or(i64::MAX));
                let labels = [("part", part.as_str())];
                g.encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Exports `resident_memory_bytes`, the process's resident set (VmRSS of /proc/self/status)
/// read at scrape time: what the memory plan's limit (`memory_limit_bytes`) is there to keep
/// under. Left out where /proc cannot be read.
#[derive(Debug)]
pub struct ResidentCollector;

/// The resident set in bytes from the text of /proc/self/status.
pub fn resident_bytes(status: &str) -> Option<u64> {
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

impl Collector for ResidentCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let Some(bytes) = resident_bytes(&status) {
            let g = ConstGauge::new(i64::try_from(bytes).unwrap_or(i64::MAX));
            g.encode(encoder.encode_descriptor(
                "resident_memory_bytes",
                "Resident memory of the process now (VmRSS), to compare with memory_limit_bytes",
                None,
                g.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

impl Metrics {
    /// Create the handles and register them in `registry`, with unbounded memory parts.
    #[cfg(test)]
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        Self::register_with(registry, MemoryParts::default())
    }

    /// Create the handles and register them (and the collector of `memory`) in `registry`.
    pub fn register_with(registry: &mut Registry, memory: MemoryParts) -> Arc<Self> {
        registry.register_collector(Box::new(MemoryCollector(memory.clone())));
        registry.register_collector(Box::new(ResidentCollector));
        let m = Self {
            requests: Family::default(),
            request_series: Default::default(),
            response_bytes: Counter::default(),
            origin_fetches: Counter::default(),
            origin_errors: Family::default(),
            origin_first_byte_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            accepted: Family::default(),
            active_connections: Gauge::default(),
            store_write_aborts: Family::default(),
            steering_fallbacks: Counter::default(),
            ready: Gauge::default(),
            interim: Arc::new(InterimMetrics {
                responses: Family::default(),
                queues: memory.interim_queues.clone(),
            }),
            connections_closed: Family::default(),
            connections_refused: Family::default(),
            fill_clients_switched: Counter::default(),
            paced_chunks_released: Counter::default(),
            disk_streams: Default::default(),
            coalesce_gave_up: Counter::default(),
            compressed: Family::default(),
            compress_busy: Counter::default(),
            compress_bytes_in: Counter::default(),
            compress_bytes_out: Counter::default(),
            purge_hits: Family::default(),
            store_hit_repairs: Family::default(),
            fill_repairs: Family::default(),
            peer_forwards: Family::default(),
            peer_served: Counter::default(),
            peer_hops_refused: Family::default(),
            sharding: Arc::new(ShardingMetrics::default()),
            memory,
            request_duration: Family::new_with_constructor(request_histogram),
            request_first_byte: Family::new_with_constructor(request_histogram),
            served_bytes: Family::default(),
            access_log_lines: Counter::default(),
            access_log_dropped: Family::default(),
            trace_spans_exported: Counter::default(),
            trace_spans_dropped: Family::default(),
            http2_streams: Family::default(),
            http2_connection_errors: Family::default(),
            slices: Family::default(),
            slice_manifests: Family::default(),
        };
        let r = registry;
        r.register(
            "requests",
            "Requests by how the cache handled them (label cache)",
            m.requests.clone(),
        );
        r.register(
            "response_body_bytes",
            "Body bytes sent to clients",
            m.response_bytes.clone(),
        );
        r.register(
            "origin_fetches",
            "Requests sent to the origin",
            m.origin_fetches.clone(),
        );
        r.register(
            "origin_errors",
            "Origin failures by kind",
            m.origin_errors.clone(),
        );
        r.register(
            "origin_first_byte_seconds",
            "Time from sending a request to the origin until its response head",
            m.origin_first_byte_seconds.clone(),
        );
        r.register(
            "accepted_connections",
            "Connections accepted, by worker",
            m.accepted.clone(),
        );
        r.register(
            "active_connections",
            "Client connections open now",
            m.active_connections.clone(),
        );
        r.register(
            "fill_clients_switched",
            "Clients that fell behind the fill they caused and read the rest from the store or the coalescing tail",
            m.fill_clients_switched.clone(),
        );
        r.register(
            "paced_chunks_released",
            "Stored-body chunks given back to the I/O budget by streams whose client socket had no room (read again when it drains)",
            m.paced_chunks_released.clone(),
        );
        r.register(
            "disk_streams",
            "Large hits streaming from disk now, each holding a stream slot of its client's address (all workers)",
            m.disk_streams.active.clone(),
        );
        r.register(
            "disk_streams_waiting",
            "Large hits from disk waiting for a stream slot now: their address is past its share while others want slots, or the pool is full (all workers)",
            m.disk_streams.waiting.clone(),
        );
        r.register(
            "compressed_responses",
            "Responses the cache compressed as they were fetched (label coding: gzip, br, zstd)",
            m.compressed.clone(),
        );
        r.register(
            "compress_busy",
            "Compressible responses sent and not stored uncompressed because their worker was compressing as many bodies as it may",
            m.compress_busy.clone(),
        );
        r.register(
            "compress_input_bytes",
            "Bytes the cache compressed",
            m.compress_bytes_in.clone(),
        );
        r.register(
            "compress_output_bytes",
            "Bytes the cache's compression made of them",
            m.compress_bytes_out.clone(),
        );
        r.register(
            "coalesce_gave_up",
            "Coalesced requests that fetched on their own: the fetch they waited on failed or passed its deadline before a response head",
            m.coalesce_gave_up.clone(),
        );
        r.register(
            "purge_hits",
            "Stored responses a purge rule named when a request found them (label verdict: remove, stale)",
            m.purge_hits.clone(),
        );
        r.register(
            "store_write_aborts",
            "Objects that could not be stored (label reason)",
            m.store_write_aborts.clone(),
        );
        r.register(
            "steering_fallbacks",
            "Times steering fell back to the kernel hash",
            m.steering_fallbacks.clone(),
        );
        r.register(
            "ready",
            "1 once the store is open and its index rebuilt",
            m.ready.clone(),
        );
        r.register(
            "interim_responses",
            "1xx interim responses from the origin, forwarded to the client or dropped (label action)",
            m.interim.responses.clone(),
        );
        r.register(
            "connections_closed",
            "Client connections the cache closed for a timeout (label reason: header_timeout, \
             idle_timeout, write_timeout)",
            m.connections_closed.clone(),
        );
        r.register(
            "connections_refused",
            "Client connections refused at accept for a cap (label reason: per_ip, per_worker)",
            m.connections_refused.clone(),
        );
        r.register(
            "store_hit_repairs",
            "Disk hits whose stored body failed after the response had started: finished from the \
             origin with a Range bound by If-Range (label result: ok), or cut short (failed)",
            m.store_hit_repairs.clone(),
        );
        r.register(
            "fill_repairs",
            "Misses whose body was cut on its way (the origin or the owner failing mid-body, the \
             store failing under a client switched to it): finished from the origin with a Range \
             bound by If-Range (label result: ok), or cut short (failed)",
            m.fill_repairs.clone(),
        );
        r.register(
            "peer_forwards",
            "Misses sent to the node that owns the key (label result: ok, connect, timeout, \
             protocol, body, peer_error, origin_error; owner_down: not sent, the owner is down)",
            m.peer_forwards.clone(),
        );
        r.register(
            "peer_served",
            "Requests another node forwarded to this one (served here, never forwarded again)",
            m.peer_served.clone(),
        );
        r.register(
            "peer_hops_refused",
            "Requests with a hop header but no valid proof of a peer (label reason: missing, \
             malformed, expired, bad_mac), served as clients' requests",
            m.peer_hops_refused.clone(),
        );
        r.register(
            "peers",
            "The other nodes of the peer list (label state: up, down)",
            m.sharding.peers.clone(),
        );
        r.register(
            "peer_list_reloads",
            "Changes of the peers file taken (label result: ok) or refused, the previous list \
             kept (failed)",
            m.sharding.reloads.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time from a request's head to the end of its response body (or its drop), by cache \
             outcome as Cache-Status tells it (label cache: hit, stale, revalidated, miss, pass, \
             error, synthetic, none), status class (label status) and site (label site: the site \
             the request was routed to, its first hostname or default; unknown when no site took \
             it)",
            m.request_duration.clone(),
        );
        r.register(
            "request_first_byte_seconds",
            "Time from a request's head to its response head, with the labels of \
             request_duration_seconds",
            m.request_first_byte.clone(),
        );
        r.register(
            "served_bytes",
            "Response body bytes sent to clients, with the labels of request_duration_seconds \
             (cache, status, site): the byte hit ratio by site",
            m.served_bytes.clone(),
        );
        r.register(
            "access_log_lines",
            "Access-log lines written to stdout",
            m.access_log_lines.clone(),
        );
        r.register(
            "access_log_dropped",
            "Access-log lines dropped (label reason: queue_full, when stdout does not keep up; \
             write_error)",
            m.access_log_dropped.clone(),
        );
        r.register(
            "trace_spans_exported",
            "Trace spans sent to the OTLP endpoint (tracing.endpoint) and taken by it",
            m.trace_spans_exported.clone(),
        );
        r.register(
            "trace_spans_dropped",
            "Trace spans dropped (label reason: queue_full, when the exporter does not keep up; \
             export_failed, a batch the endpoint did not take)",
            m.trace_spans_dropped.clone(),
        );
        let log = &*edgecache_observe::tracing_log::COUNTERS;
        r.register(
            "log_lines",
            "Lines of the tracing log written to stderr",
            log.lines.clone(),
        );
        r.register(
            "log_dropped",
            "Lines of the tracing log dropped because stderr did not keep up (its queue was full)",
            log.queue_full.clone(),
        );
        r.register(
            "log_write_errors",
            "Lines of the tracing log lost to a failed write to stderr",
            log.write_errors.clone(),
        );
        r.register(
            "http2_streams",
            "HTTP/2 requests, by result: completed (the response went out whole), cancelled \
             (the client reset the stream, or its connection went, before the end)",
            m.http2_streams.clone(),
        );
        r.register(
            "http2_connection_errors",
            "HTTP/2 connections ended by an error, by its code (label reason: \
             enhance_your_calm for the flood defences, protocol_error, compression_error, \
             frame_size_error, flow_control_error, keep_alive_timeout (no PING answered), io, \
             other)",
            m.http2_connection_errors.clone(),
        );
        r.register(
            "slices",
            "Slices of objects cached as slices, served to clients, by where each came from \
             (label source: store; waited, from the store after a fetch of it in flight; \
             origin, fetched for the response)",
            m.slices.clone(),
        );
        r.register(
            "slice_manifests",
            "Manifests of objects cached as slices (label event: written, a new version or a \
             refetch; freshened, a 304 refreshed a stale one and its slices stay; dropped, a \
             slice of another version came back; coalesced, a request waited for another's \
             revalidation of a stale one)",
            m.slice_manifests.clone(),
        );
        Arc::new(m)
    }

    /// One slice served, from `source`.
    pub fn slice(&self, source: SliceSource) {
        Self::inc(&self.slices, ("source", source.as_str()));
    }

    /// One manifest `event`.
    pub fn slice_manifest(&self, event: ManifestEvent) {
        Self::inc(&self.slice_manifests, ("event", event.as_str()));
    }

    /// Count one in `family`'s series with the label `(name, value)`.
    fn inc(family: &Family<Label, Counter>, (name, value): (&'static str, &'static str)) {
        family.get_or_create(&[(name, value.to_string())]).inc();
    }

    /// The counters of the tracer (edgecache_trace::Tracer).
    pub fn trace(&self) -> edgecache_trace::Counters {
        let dropped = |reason: &str| {
            self.trace_spans_dropped
                .get_or_create(&[("reason", reason.to_string())])
                .clone()
        };
        edgecache_trace::Counters {
            exported: self.trace_spans_exported.clone(),
            queue_full: dropped("queue_full"),
            export_failed: dropped("export_failed"),
        }
    }

    /// The handles the request log keeps (the same series as these).
    pub fn request_log(&self) -> RequestMetrics {
        RequestMetrics {
            request_duration: self.request_duration.clone(),
            request_first_byte: self.request_first_byte.clone(),
            served_bytes: self.served_bytes.clone(),
            access_log_lines: self.access_log_lines.clone(),
            access_log_dropped: self.access_log_dropped.clone(),
            http2_streams: self.http2_streams.clone(),
        }
    }

    pub fn http2_connection_error(&self, reason: &'static str) {
        self.http2_connection_errors
            .get_or_create(&[("reason", reason.to_string())])
            .inc();
    }

    /// A miss sent to its owner (or not, `owner_down`), by result.
    pub fn peer_forward(&self, result: &'static str) {
        self.peer_forwards
            .get_or_create(&[("result", result.to_string())])
            .inc();
    }

    pub fn peer_hop_refused(&self, reason: &'static str) {
        self.peer_hops_refused
            .get_or_create(&[("reason", reason.to_string())])
            .inc();
    }

    pub fn connection_closed(&self, reason: &'static str) {
        self.connections_closed
            .get_or_create(&[("reason", reason.to_string())])
            .inc();
    }

    pub fn connection_refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&[("reason", reason.to_string())])
            .inc();
    }

    pub fn request(&self, outcome: Outcome) {
        self.request_series[outcome as usize]
            .get_or_init(|| {
                self.requests
                    .get_or_create(&[("cache", outcome.as_str().to_string())])
                    .clone()
            })
            .inc();
    }

    pub fn origin_error(&self, kind: &'static str) {
        self.origin_errors
            .get_or_create(&[("kind", kind.to_string())])
            .inc();
    }

    pub fn accepted_on(&self, worker: usize) -> Counter {
        self.accepted
            .get_or_create(&[("worker", worker.to_string())])
            .clone()
    }

    /// A hit whose stored body failed mid-response, finished from the origin or cut short.
    pub fn hit_repair(&self, ok: bool) {
        Self::repair(&self.store_hit_repairs, ok);
    }

    pub fn fill_repair(&self, ok: bool) {
        Self::repair(&self.fill_repairs, ok);
    }

    fn repair(family: &Family<Label, Counter>, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        family
            .get_or_create(&[("result", result.to_string())])
            .inc();
    }

    pub fn write_abort(&self, reason: &'static str) {
        self.store_write_aborts
            .get_or_create(&[("reason", reason.to_string())])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each outcome's cached series is the family's series of its label, counted as often as
    /// it was recorded.
    #[test]
    fn each_outcome_counts_in_its_own_series() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i, "{o:?} in its place");
            for _ in 0..=i {
                m.request(*o);
            }
        }
        for (i, o) in Outcome::ALL.iter().enumerate() {
            let series = m
                .requests
                .get_or_create(&[("cache", o.as_str().to_string())]);
            assert_eq!(series.get(), i as u64 + 1, "{o:?}");
        }
    }

    #[test]
    fn the_resident_set_is_read_from_proc_status_and_exported() {
        let status = "Name:\tedgecache\nVmHWM:\t  9000 kB\nVmRSS:\t    5120 kB\nThreads:\t4\n";
        assert_eq!(resident_bytes(status), Some(5120 * 1024));
        assert_eq!(resident_bytes("Name:\tx\n"), None);
        let mut registry = Registry::default();
        let _m = Metrics::register(&mut registry);
        let mut out = String::new();
        assert!(prometheus_client::encoding::text::encode(&mut out, &registry).is_ok());
        let value = out
            .lines()
            .find_map(|l| l.strip_prefix("resident_memory_bytes "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_default();
        assert!(value > 1e6, "a test process holds more than 1 MB:\n{out}");
    }
}
