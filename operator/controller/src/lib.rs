//! The EdgeCache operator: turns each `EdgeCache` into a data-plane DaemonSet (plus its
//! ConfigMap, Service and ServiceAccount) and reports how the rollout goes; and delivers each
//! `EdgeCachePurge` to the data-plane pods of its EdgeCache ([`purge`]).
//!
//! The reconcile pipeline is [`validate`] (pure) → [`build`] (pure) → [`apply`] (server-side
//! apply) → [`status`]; only the last two talk to the API server.

pub mod admin;
pub mod apply;
pub mod build;
pub mod conflict;
pub mod context;
pub mod controller;
pub mod crd;
pub mod metrics;
pub mod named_secrets;
pub mod node_status;
pub mod peers;
pub mod pod_admin;
pub mod pod_metrics;
pub mod purge;
pub mod reconcile;
pub mod reference;
pub mod render;
pub mod status;
pub mod strict;
#[doc(hidden)]
pub mod test_support;
pub mod trace;
pub mod validate;
