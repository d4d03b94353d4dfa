//! Traces (issue 33): data planes with `tracing.endpoint` send their spans to a real OTLP/HTTP
//! receiver the test starts (edgecache-trace's receiver, which decodes them with the
//! OpenTelemetry project's generated protobuf types). One trace crosses a peer hop: the
//! client's `traceparent` is the parent of the first node's request span, whose peer fetch is
//! the parent of the owner's request span, whose origin fetch is the parent the origin is sent.
//! Head sampling follows the client's `traceparent` (sampled or not) and the ratio; a
//! malformed one starts a new trace and is never the client's error.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::path::Path;
use std::time::Duration;

use common::*;
use edgecache_trace::receiver::{Received, Receiver};
use rfc_support::{Scripted, resp};

const FORWARDED_OK: &str = r#"edgecache_dataplane_peer_forwards_total{result="ok"}"#;
const RELOADS_OK: &str = r#"edgecache_dataplane_peer_list_reloads_total{result="ok"}"#;
const UP: &str = r#"edgecache_dataplane_peers{state="up"}"#;
const EXPORTED: &str = "edgecache_dataplane_trace_spans_exported_total";

/// The client's trace and span.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent(flags: &str) -> String {
    format!("00-{TRACE}-{CLIENT_SPAN}-{flags}")
}

/// An origin whose every response is fresh for ten minutes.
fn origin() -> Scripted {
    Scripted::start(|_, _| {
        resp(
            "200 OK",
            &[("Cache-Control", "max-age=600")],
            b"hello trace",
        )
    })
}

/// A data plane tracing to `rx` with `yaml` beside.
fn node(origin: &str, dir: &Path, rx: &Receiver, sample: f64, extra: &[String]) -> Dataplane {
    let yaml = format!(
        "tracing:\n  endpoint: {}\n  sample: {sample}\nmemory:\n  ramTier: 0\n\
         sharding:\n  popularityThreshold: 100\n",
        rx.endpoint()
    );
    Dataplane::start_with_yaml(origin, dir, &yaml, 1, extra)
}

fn by_node<'a>(spans: &'a [Received], node: &str, name: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|s| s.resource_str("service.instance.id") == Some(node) && s.name == name)
        .collect()
}

fn one<'a>(spans: &'a [Received], node: &str, name: &str) -> &'a Received {
    let found = by_node(spans, node, name);
    assert_eq!(found.len(), 1, "one {name} span of {node}: {spans:#?}");
    found[0]
}

#[test]
fn one_trace_crosses_a_peer_hop_to_the_origin() {
    let rx = Receiver::start().unwrap();
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers");
    std::fs::write(&peers, "# nobody yet\n").unwrap();
    let nodes: Vec<Dataplane> = (0..2)
        .map(|i| {
            let d = dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&d).unwrap();
            let extra = [
                "--node-name".to_string(),
                format!("n{i}"),
                "--peers".to_string(),
                peers.display().to_string(),
            ];
            node(&o.url(), &d, &rx, 0.0, &extra)
        })
        .collect();
    let list: String = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| format!("n{i} {}\n", n.listen))
        .collect();
    let tmp = peers.with_extension("new");
    std::fs::write(&tmp, list).unwrap();
    std::fs::rename(&tmp, &peers).unwrap();
    for n in &nodes {
        n.wait_for_metrics("the peer list", 15, |m| {
            metric_value(m, RELOADS_OK) >= 1.0 && metric_value(m, UP) == 1.0
        });
    }

    // A path n1 owns, asked of n0 with the client's sampled traceparent (the ratio is 0: only
    // the client's flag samples these requests).
    let tp = traceparent("01");
    let mut path = None;
    for id in 0..64 {
        let p = format!("/t/{id}");
        let before = nodes[0].metric(FORWARDED_OK);
        let r = nodes[0].request("GET", &p, &[("traceparent", &tp)]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"hello trace");
        if nodes[0].metric(FORWARDED_OK) > before {
            path = Some(p);
            break;
        }
    }
    let path = path.expect("some path of 64 is owned by n1");
    let spans = rx
        .wait_for(Duration::from_secs(15), |s| {
            s.iter()
                .any(|s| s.name == "origin fetch" && s.str("url.path") == Some(path.as_str()))
                && s.iter()
                    .filter(|s| s.str("url.path") == Some(path.as_str()))
                    .count()
                    >= 4
        })
        .unwrap_or_else(|s| panic!("the hop's spans did not all arrive: {s:#?}"));
    let spans: Vec<Received> = spans
        .into_iter()
        .filter(|s| s.str("url.path") == Some(path.as_str()))
        .collect();
    assert_eq!(rx.rejected(), 0);

    let n0 = one(&spans, "n0", "GET");
    let hop = one(&spans, "n0", "peer fetch");
    let n1 = one(&spans, "n1", "GET");
    let fetch = one(&spans, "n1", "origin fetch");
    assert!(
        by_node(&spans, "n0", "origin fetch").is_empty(),
        "{spans:#?}"
    );
    for s in [n0, hop, n1, fetch] {
        assert_eq!(s.trace_id, TRACE, "one trace: {s:#?}");
        assert_eq!(s.resource_str("service.name"), Some("edgecache-dataplane"));
    }
    assert_eq!(
        n0.parent_span_id, CLIENT_SPAN,
        "the client's span is the parent"
    );
    assert_eq!(hop.parent_span_id, n0.span_id);
    assert_eq!(
        n1.parent_span_id, hop.span_id,
        "the owner's span is the hop's child"
    );
    assert_eq!(fetch.parent_span_id, n1.span_id);
    assert_eq!((n0.kind, hop.kind, n1.kind, fetch.kind), (2, 3, 2, 3));
    assert_eq!(n0.str("edgecache.cache"), Some("miss"));
    assert_eq!(n0.int("http.response.status_code"), Some(200));
    assert_eq!(n0.int("http.response.body.size"), Some(11));
    assert_eq!(n0.str("edgecache.site"), Some("default"));
    assert_eq!(n0.str("http.request.method"), Some("GET"));
    assert_eq!(n1.str("edgecache.cache"), Some("miss"));
    assert_eq!(hop.int("http.response.status_code"), Some(200));
    assert_eq!(fetch.int("http.response.status_code"), Some(200));
    assert!(
        hop.start >= n0.start && hop.end <= n0.end,
        "{hop:#?} within {n0:#?}"
    );
    // The origin was sent the owner's fetch span as its parent.
    let at_origin = o.requests_for(&path);
    assert_eq!(at_origin.len(), 1);
    assert_eq!(
        at_origin[0].header("traceparent"),
        Some(format!("00-{TRACE}-{}-01", fetch.span_id).as_str())
    );

    // Asked again: the owner's hit reads the disk (no RAM tier), a child of its request span.
    let r = nodes[0].request("GET", &path, &[("traceparent", &tp)]);
    assert_eq!(r.body, b"hello trace");
    let spans = rx
        .wait_for(Duration::from_secs(15), |s| {
            s.iter().any(|s| s.name == "disk read")
                && s.iter()
                    .filter(|s| s.str("url.path") == Some(path.as_str()) && s.name == "GET")
                    .count()
                    >= 4
        })
        .unwrap_or_else(|s| panic!("no disk read span: {s:#?}"));
    let disk = spans.iter().find(|s| s.name == "disk read").unwrap();
    let hit = spans
        .iter()
        .find(|s| s.span_id == disk.parent_span_id)
        .expect("the disk read's parent");
    assert_eq!(hit.resource_str("service.instance.id"), Some("n1"));
    assert_eq!(hit.str("edgecache.cache"), Some("hit"));
    assert_eq!(disk.trace_id, TRACE);
    assert_eq!(disk.kind, 1);
    assert!(nodes[0].metric(EXPORTED) >= 2.0);
}

#[test]
fn sampling_follows_the_clients_traceparent_and_the_ratio() {
    let rx = Receiver::start().unwrap();
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--node-name".to_string(), "solo".to_string()];
    // Ratio 0: no new trace is sampled.
    let dp = node(&o.url(), dir.path(), &rx, 0.0, &extra);
    let unsampled = traceparent("00");
    for (path, headers) in [
        ("/none", vec![]),
        ("/unsampled", vec![("traceparent", unsampled.as_str())]),
        ("/malformed", vec![("traceparent", "00-xyz-01")]),
    ] {
        let r = dp.request("GET", path, &headers);
        assert_eq!(r.status, 200, "{path}");
    }
    // Not sampled, the client's traceparent goes to the origin as it came.
    assert_eq!(
        o.requests_for("/unsampled")[0].header("traceparent"),
        Some(unsampled.as_str())
    );
    let sampled = traceparent("01");
    let r = dp.request("GET", "/sampled", &[("traceparent", &sampled)]);
    assert_eq!(r.status, 200);
    let spans = rx
        .wait_for(Duration::from_secs(15), |s| {
            s.iter()
                .any(|s| s.str("url.path") == Some("/sampled") && s.name == "GET")
        })
        .unwrap_or_else(|s| panic!("no span of /sampled: {s:#?}"));
    // Spans go out in the order they end: the earlier requests' would have come first.
    let paths: Vec<_> = spans.iter().filter_map(|s| s.str("url.path")).collect();
    assert!(
        paths.iter().all(|p| *p == "/sampled"),
        "only the sampled request is traced: {paths:?}"
    );
    drop(dp);

    // Ratio 1: every new trace is sampled; a malformed traceparent starts one.
    let rx = Receiver::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dp = node(&o.url(), dir.path(), &rx, 1.0, &extra);
    let r = dp.request(
        "GET",
        "/malformed",
        &[(
            "traceparent",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        )],
    );
    assert_eq!(r.status, 200);
    let long = format!("{}-{}", traceparent("01"), "x".repeat(4000));
    let r = dp.request("GET", "/long", &[("traceparent", &long)]);
    assert_eq!(r.status, 200);
    let r = dp.request("GET", "/unsampled-at-1", &[("traceparent", &unsampled)]);
    assert_eq!(r.status, 200);
    let spans = rx
        .wait_for(Duration::from_secs(15), |s| {
            s.iter()
                .any(|s| s.str("url.path") == Some("/long") && s.name == "GET")
        })
        .unwrap_or_else(|s| panic!("no span of /long: {s:#?}"));
    for path in ["/malformed", "/long"] {
        let s = spans
            .iter()
            .find(|s| s.str("url.path") == Some(path) && s.name == "GET")
            .unwrap_or_else(|| panic!("{path}: {spans:#?}"));
        assert_eq!(s.parent_span_id, "", "{path}: a new root");
        assert_ne!(s.trace_id, TRACE.to_ascii_lowercase(), "{path}");
        // Its origin fetch carries the new trace to the origin.
        let at_origin = o.requests_for(path);
        let sent = at_origin.last().unwrap().header("traceparent").unwrap();
        assert!(
            sent.starts_with(&format!("00-{}-", s.trace_id)),
            "{path}: {sent}"
        );
    }
    // An unsampled parent is followed at any ratio: none of its spans (wait out a batch).
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        !rx.spans()
            .iter()
            .any(|s| s.str("url.path") == Some("/unsampled-at-1")),
        "{:#?}",
        rx.spans()
    );
    assert_eq!(rx.rejected(), 0);
}
