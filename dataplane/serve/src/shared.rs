//! What every worker's request pipeline shares: made once by the binary's start-up
//! (dataplane/proxy/src/startup.rs), read by every request's handler (src/handler.rs). What only
//! the listeners and connections read (client caps, the connection budget, TLS) is the binary's
//! (dataplane/proxy/src/node.rs).

use std::sync::Arc;
use std::time::Duration;

use edgecache_observe::request_log::RequestLog;
use edgecache_store::Store;

use crate::clock::Clock;
use crate::coalesce::Coalescer;
use crate::metrics::Metrics;

/// What the request pipeline reads of the data plane's configuration, in its own plain form
/// (the binary's contract.rs fills it from the operator's config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The largest body stored; a longer response is passed on and not kept.
    pub max_object_size: u64,
    /// The slice size of ranged fills of large objects; 0: not sliced.
    pub slice_size: u64,
    /// Longest silence allowed while an origin sends a body.
    pub origin_idle_timeout: Duration,
    /// How long an origin may take to start its response.
    pub origin_first_byte_timeout: Duration,
    /// Large disk streams per client address on a worker: 0 for work-conserving shares
    /// (src/stream_slots.rs), else a hard cap.
    pub max_disk_streams_per_ip: u32,
}

/// What every worker's request pipeline shares.
pub struct Shared {
    pub settings: Settings,
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub coalescer: Arc<Coalescer>,
    /// Fills answered while their store write lands (src/landing.rs).
    pub landing: Arc<crate::landing::Landing>,
    pub clock: Arc<Clock>,
    /// Who owns which key, when sharding is on.
    pub sharding: Option<Arc<crate::sharding::Sharding>>,
    /// Purge rules checked at lookup (edgecache_purge::purges).
    pub purges: Arc<crate::purges::Purges>,
    /// The sites and their origin pools.
    pub sites: Arc<crate::sites::Sites>,
    /// The access log and the request histograms (edgecache_observe::request_log).
    pub requests: Arc<RequestLog>,
}
