//! The tracer against a real OTLP/HTTP receiver (src/receiver.rs, which decodes with the
//! OpenTelemetry project's generated types): spans arrive with their ids, parents and
//! attributes; head sampling follows the incoming `traceparent` and the ratio; a full queue
//! drops and counts instead of waiting; a collector that is down costs the spans, counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use edgecache_trace::receiver::Receiver;
use edgecache_trace::{Counters, Kind, Settings, Tracer, hex};

fn tracer(endpoint: String, sample: f64, queue: usize) -> (Arc<Tracer>, Counters) {
    let counters = Counters::default();
    let settings = Settings {
        endpoint: Some(endpoint),
        sample,
        resource: vec![("service.name".into(), "trace-test".into())],
        queue_spans: queue,
    };
    let t = Tracer::start(&settings, counters.clone())
        .expect("starts")
        .expect("on");
    (t, counters)
}

const PARENT: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const UNSAMPLED: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

#[test]
fn spans_reach_the_receiver_with_their_parents() {
    let rx = Receiver::start().expect("receiver");
    let (t, counters) = tracer(rx.endpoint(), 0.0, 100);
    // Ratio 0: a new trace is never sampled, a sampled parent always is.
    assert!(t.sample(None, "dropped", Kind::Server).is_none());
    assert!(
        t.sample(Some(UNSAMPLED), "unsampled", Kind::Server)
            .is_none()
    );
    let mut server = t
        .sample(Some(PARENT), "GET", Kind::Server)
        .expect("a sampled parent is followed");
    server.set("edgecache.cache", "miss");
    server.set("http.response.status_code", 200i64);
    let ctx = server.context();
    let mut client = ctx.child("origin fetch", Kind::Client);
    let sent = client.traceparent();
    client.end();
    drop(client);
    drop(server);
    assert!(t.flush(Duration::from_secs(10)), "flushed");
    let spans = rx
        .wait_for(Duration::from_secs(10), |s| s.len() >= 2)
        .expect("two spans");
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert_eq!(rx.rejected(), 0);
    let server = spans.iter().find(|s| s.name == "GET").expect("server span");
    let client = spans
        .iter()
        .find(|s| s.name == "origin fetch")
        .expect("client span");
    assert_eq!(server.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(server.parent_span_id, "00f067aa0ba902b7");
    assert_eq!(server.kind, 2);
    assert_eq!(server.str("edgecache.cache"), Some("miss"));
    assert_eq!(server.int("http.response.status_code"), Some(200));
    assert_eq!(server.resource_str("service.name"), Some("trace-test"));
    assert_eq!(client.trace_id, server.trace_id);
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(client.kind, 3);
    assert!(
        client.start >= server.start && client.end <= server.end,
        "{client:?} {server:?}"
    );
    // The traceparent the child sends names it.
    let sent = String::from_utf8(sent.to_vec()).expect("ascii");
    assert_eq!(
        sent,
        format!("00-{}-{}-01", client.trace_id, client.span_id)
    );
    assert_eq!(counters.exported.get(), 2);
}

#[test]
fn a_malformed_traceparent_starts_a_new_trace() {
    let rx = Receiver::start().expect("receiver");
    let (t, _) = tracer(rx.endpoint(), 1.0, 100);
    let span = t
        .sample(Some(b"00-zzzz-not-a-traceparent"), "GET", Kind::Server)
        .expect("ratio 1 samples a new trace");
    let id = hex(&span.trace_id());
    drop(span);
    t.flush(Duration::from_secs(10));
    let spans = rx
        .wait_for(Duration::from_secs(10), |s| !s.is_empty())
        .expect("a span");
    assert_eq!(spans[0].trace_id, id);
    assert_eq!(spans[0].parent_span_id, "", "a root");
}

#[test]
fn the_ratio_samples_its_share_of_new_traces() {
    let rx = Receiver::start().expect("receiver");
    let (t, _) = tracer(rx.endpoint(), 0.25, 10_000);
    let n = 4000;
    let sampled = (0..n)
        .filter_map(|_| t.sample(None, "GET", Kind::Server))
        .count();
    t.flush(Duration::from_secs(10));
    let share = sampled as f64 / f64::from(n);
    assert!((0.2..0.3).contains(&share), "{share}");
    let spans = rx
        .wait_for(Duration::from_secs(10), |s| s.len() >= sampled)
        .expect("every sampled span");
    assert_eq!(spans.len(), sampled);
}

#[test]
fn a_full_queue_drops_and_counts_without_waiting() {
    // A "collector" that accepts connections and never answers: once the exporter is stuck in
    // its first POST (5 s timeout), the queue of 4 fills and every span after it is dropped.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let (connected, stuck) = std::sync::mpsc::channel();
    let _keep = std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming().flatten() {
            held.push(c);
            let _ = connected.send(());
        }
    });
    let (t, counters) = tracer(format!("http://{addr}"), 1.0, 4);
    drop(t.sample(None, "GET", Kind::Server));
    stuck
        .recv_timeout(Duration::from_secs(10))
        .expect("the exporter connects");
    let started = Instant::now();
    for _ in 0..1000 {
        drop(t.sample(None, "GET", Kind::Server));
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "recording never waits: {:?}",
        started.elapsed()
    );
    assert_eq!(
        counters.queue_full.get(),
        1000 - 4,
        "all but the queue's 4 dropped"
    );
}

#[test]
fn a_collector_that_is_down_costs_the_spans_counted() {
    // A port nobody listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let (t, counters) = tracer(format!("http://{addr}"), 1.0, 100);
    for _ in 0..3 {
        drop(t.sample(None, "GET", Kind::Server));
    }
    assert!(t.flush(Duration::from_secs(10)));
    assert_eq!(counters.export_failed.get(), 3);
    assert_eq!(counters.exported.get(), 0);
}
