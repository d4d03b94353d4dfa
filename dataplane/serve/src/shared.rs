//! What every worker shares: made once by the binary's start-up (dataplane/proxy/src/startup.rs),
//! read by the workers' loops (dataplane/proxy/src/server.rs) and by every request's handler
//! (src/handler.rs).

use std::sync::Arc;

use edgecache_api::DataplaneConfig;
use edgecache_edge::client_caps::PerIpCaps;
use edgecache_edge::tls::Tls;
use edgecache_observe::request_log::RequestLog;
use edgecache_store::Store;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::coalesce::Coalescer;
use crate::metrics::Metrics;

/// What every worker shares.
pub struct Shared {
    pub cfg: DataplaneConfig,
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub coalescer: Arc<Coalescer>,
    /// Fills answered while their store write lands (src/landing.rs).
    pub landing: Arc<crate::landing::Landing>,
    pub clock: Arc<Clock>,
    pub shutdown: watch::Receiver<bool>,
    /// Open connections per client address, all workers together.
    pub per_ip: Arc<PerIpCaps>,
    /// Bytes a worker's open connections may hold at most: each HTTP/1.1 connection is charged
    /// [`edgecache_host::CONNECTION_BYTES`], each HTTP/2 one [`Shared::http2_connection_bytes`]
    /// (`edgecache_host::connection_budget_per_worker`).
    pub connection_budget_per_worker: u64,
    /// The HTTP/2 limits clients are told (`edgecache_host::http2_limits`).
    pub http2: edgecache_host::Http2Limits,
    /// What one HTTP/2 connection can hold at most under [`Shared::http2`].
    pub http2_connection_bytes: u64,
    /// Open HTTP/2 connections per client address, all workers together
    /// (`edgecache_host::http2_connections_per_address`).
    pub per_ip_http2: Arc<PerIpCaps>,
    /// Who owns which key, when sharding is on.
    pub sharding: Option<Arc<crate::sharding::Sharding>>,
    /// Purge rules checked at lookup (edgecache_purge::purges).
    pub purges: Arc<crate::purges::Purges>,
    /// TLS termination, when the TLS listener is on.
    pub tls: Option<Arc<Tls>>,
    /// The sites and their origin pools.
    pub sites: Arc<crate::sites::Sites>,
    /// The access log and the request histograms (edgecache_observe::request_log).
    pub requests: Arc<RequestLog>,
}
