//! Traces of the reconciles (`--trace-endpoint`, edgecache-trace): each reconcile of an
//! EdgeCache or an EdgeCachePurge is a span (`reconcile EdgeCache`, `reconcile EdgeCachePurge`)
//! of a new trace, sampled at `--trace-sample`, with the object's namespace and name and how it
//! ended (`edgecache.outcome`: `ok`, or the error's category, and the error as the span's
//! status). Spans go to the same kind of OTLP/HTTP endpoint as the data plane's, through the
//! same bounded queue: a reconcile never waits for the collector.

use std::future::Future;

use edgecache_trace::Kind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::context::Context;

/// How the operator traces: `--trace-endpoint` (none: off) and `--trace-sample`, with the
/// resource `service.name` `edgecache-operator` and the pod's name as `service.instance.id`.
pub fn settings(endpoint: Option<String>, sample: f64) -> edgecache_trace::Settings {
    let mut resource = vec![("service.name".to_string(), "edgecache-operator".to_string())];
    if let Ok(pod) = std::env::var("POD_NAME") {
        resource.push(("service.instance.id".to_string(), pod));
    }
    edgecache_trace::Settings {
        endpoint,
        sample,
        resource,
        ..edgecache_trace::Settings::default()
    }
}

/// Run `reconcile` of the object `meta` (of `kind`) as a span, when tracing is on and the
/// reconcile is sampled; `category` names an error's kind.
pub async fn reconcile<T, E: std::fmt::Display>(
    ctx: &Context,
    kind: &'static str,
    meta: &ObjectMeta,
    category: fn(&E) -> &'static str,
    reconcile: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let Some(tracer) = &ctx.tracer else {
        return reconcile.await;
    };
    let name = match kind {
        "EdgeCache" => "reconcile EdgeCache",
        _ => "reconcile EdgeCachePurge",
    };
    let Some(mut span) = tracer.sample(None, name, Kind::Internal) else {
        return reconcile.await;
    };
    span.set(
        "k8s.namespace.name",
        meta.namespace.clone().unwrap_or_default(),
    );
    span.set("edgecache.kind", kind);
    span.set("edgecache.name", meta.name.clone().unwrap_or_default());
    if let Some(g) = meta.generation {
        span.set("edgecache.generation", g);
    }
    let result = reconcile.await;
    match &result {
        Ok(_) => span.set("edgecache.outcome", "ok"),
        Err(e) => {
            span.set("edgecache.outcome", category(e));
            span.fail(e.to_string());
        }
    }
    result
}
