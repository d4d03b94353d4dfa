//! OpenTelemetry traces, small: the W3C `traceparent` field ([`TraceParent`]), head sampling
//! ([`Tracer::sample`]), spans ([`Span`]) and their export as OTLP/HTTP protobuf
//! (src/otlp.rs, the encoding; src/export.rs, the exporter thread).
//!
//! A process that traces has one [`Tracer`]. Whoever starts a span (a data-plane worker, a
//! reconcile) only ever pushes the finished span into the tracer's bounded queue, which never
//! waits: a span that does not fit is dropped and counted (`trace_spans_dropped_total`). One
//! exporter thread takes them in batches and POSTs them to the collector.
//!
//! Sampling is decided once, where a trace enters the process, as OpenTelemetry's
//! `ParentBased(TraceIdRatioBased)` sampler does: a valid incoming `traceparent` decides by
//! its sampled flag (a sampled parent is always followed, an unsampled one never), and a request
//! without one starts a new trace with the configured ratio. A malformed `traceparent` is
//! ignored: the request starts a new trace, as if it had none.

mod export;
mod otlp;
#[cfg(feature = "receiver")]
pub mod receiver;
mod share;
mod span;

pub use export::{Counters, Endpoint, StartError, Tracer};
pub use share::Share;
pub use span::*;
