//! What the data plane tells its operators, the layer every other one writes to: the access log
//! and the request histograms ([`request_log`]), the tracing log ([`tracing_log`]), the one
//! writer thread each log has ([`line_queue`]), and what a request's connection is
//! ([`conn_info`], which the listeners fill in and the access log reads).
//!
//! It knows nothing of the layers above: the metric handles it keeps are registered by the
//! data plane and passed down ([`request_log::RequestMetrics`]), the site a request was routed
//! to arrives in its extensions ([`request_log::SiteId`]), and its settings are its own
//! ([`request_log::Settings`]), not the operator's config type.

pub mod conn_info;
pub mod line_queue;
pub mod request_log;
pub mod trace;
pub mod tracing_log;
