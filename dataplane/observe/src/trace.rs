//! A request's span (OpenTelemetry, edgecache-trace), kept beside its access-log record
//! (src/request_log.rs): started when the handler reads the head, if the request is sampled,
//! and ended with the record (status, cache outcome, bytes sent). Its [`SpanContext`] goes into
//! the request's extensions, where the origin client finds it (the origin or peer fetch, a
//! child span, whose `traceparent` it sends on) and so do the store reads (the disk read).
//!
//! Sampling is decided here, once per request, by the `traceparent` the request came with
//! ([`edgecache_trace::Tracer::sample`]: a sampled parent is followed, an unsampled one is not,
//! and without a valid one a new trace is sampled at `tracing.sample`). Two `traceparent`
//! fields, or one longer than [`edgecache_trace::TRACEPARENT_MAX`], are no `traceparent`.

use std::time::Instant;

use edgecache_trace::{Kind, Span, Tracer};
use http::{Method, request};

pub use edgecache_trace::SpanContext;

/// The span of a request whose head was just read, when it is sampled; its context then rides
/// in the request's extensions.
pub fn request_span(
    tracer: &std::sync::Arc<Tracer>,
    parts: &mut request::Parts,
    site: &'static str,
) -> Option<Box<Span>> {
    let mut fields = parts.headers.get_all(edgecache_trace::TRACEPARENT).iter();
    let parent = match (fields.next(), fields.next()) {
        (Some(v), None) => Some(v.as_bytes()),
        _ => None,
    };
    let mut span = Box::new(tracer.sample(parent, span_name(&parts.method), Kind::Server)?);
    span.set("http.request.method", parts.method.as_str().to_string());
    if let Some(host) = parts.extensions.get::<edgecache_policy::Authority>() {
        span.set("server.address", host.as_str().to_string());
    }
    span.set("url.path", parts.uri.path().to_string());
    span.set("edgecache.site", site);
    parts.extensions.insert(span.context());
    Some(span)
}

/// OpenTelemetry's HTTP server span name without a route: the method (`HTTP` for one it does
/// not know).
fn span_name(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "HTTP",
    }
}

/// The request is over: its span says how (it is recorded when dropped).
pub(crate) fn end_request(
    span: &mut Span,
    status: u16,
    cache: &'static str,
    bytes: u64,
    completed: bool,
    ended: Option<Instant>,
) {
    span.set("http.response.status_code", i64::from(status));
    span.set("edgecache.cache", cache);
    span.set("http.response.body.size", bytes);
    span.set("edgecache.completed", completed);
    if status >= 500 {
        span.fail(format!("status {status}"));
    }
    span.end_at(ended.unwrap_or_else(Instant::now));
}
