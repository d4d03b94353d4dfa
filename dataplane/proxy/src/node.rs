//! What every worker's listeners and connections share, beside the request pipeline's
//! [`Shared`]: made once by start-up (src/startup.rs), read by the workers' accept loops and
//! connections (src/server.rs, src/connection.rs) and by the supervisor.

use std::sync::Arc;

use edgecache_api::DataplaneConfig;
use edgecache_edge::client_caps::PerIpCaps;
use edgecache_edge::tls::Tls;
use tokio::sync::watch;

use crate::shared::Shared;

/// What every worker shares.
pub struct Node {
    /// The request pipeline's part (edgecache_serve::shared).
    pub serve: Arc<Shared>,
    /// The configuration the listeners, connections and workers read (timeouts, HTTP/2, TLS,
    /// the origin and cache settings each worker's clients are made from).
    pub cfg: DataplaneConfig,
    pub shutdown: watch::Receiver<bool>,
    /// Open connections per client address, all workers together.
    pub per_ip: Arc<PerIpCaps>,
    /// Bytes a worker's open connections may hold at most: each HTTP/1.1 connection is charged
    /// [`edgecache_host::CONNECTION_BYTES`], each HTTP/2 one [`Node::http2_connection_bytes`]
    /// (`edgecache_host::connection_budget_per_worker`).
    pub connection_budget_per_worker: u64,
    /// The HTTP/2 limits clients are told (`edgecache_host::http2_limits`).
    pub http2: edgecache_host::Http2Limits,
    /// What one HTTP/2 connection can hold at most under [`Node::http2`].
    pub http2_connection_bytes: u64,
    /// Open HTTP/2 connections per client address, all workers together
    /// (`edgecache_host::http2_connections_per_address`).
    pub per_ip_http2: Arc<PerIpCaps>,
    /// TLS termination, when the TLS listener is on.
    pub tls: Option<Arc<Tls>>,
}
