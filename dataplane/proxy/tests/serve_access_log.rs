//! The access log on stdout (JSON and combined, sampled, never stalling the workers) and the
//! request histograms on /metrics, against the real binary and an in-process origin.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The access-log lines (JSON objects) in the data plane's output so far. The tracing log
/// shares the file; its lines start with a timestamp, never `{`.
fn json_lines(dp: &Dataplane) -> Vec<Value> {
    dp.log_text()
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Wait (10 s at most) for `n` JSON lines whose path is `path`.
fn lines_for(dp: &Dataplane, path: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found: Vec<Value> = json_lines(dp)
            .into_iter()
            .filter(|v| v["path"] == path)
            .collect();
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} lines for {path}; log:\n{}",
            found.len(),
            dp.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `n` GETs of `path(i)` on one keep-alive connection; each must be a 200.
fn keep_alive_gets(addr: SocketAddr, n: usize, path: impl Fn(usize) -> String) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..n {
        // One write a request (several small ones meet delayed ACKs: 40 ms each).
        let req = format!("GET {} HTTP/1.1\r\nHost: test.example\r\n\r\n", path(i));
        w.write_all(req.as_bytes()).unwrap();
        let resp = read_response(&mut r, false).unwrap();
        assert_eq!(resp.status, 200, "request {i}");
    }
}

#[test]
fn json_lines_for_a_miss_then_a_hit() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let ua = [("User-Agent", "test-agent/1.0")];
    assert_eq!(dp.request("GET", "/obj/4k/1", &ua).status, 200);
    assert!(dp.request("GET", "/obj/4k/1", &ua).is_hit());
    let range = [("Range", "bytes=0-99")];
    assert_eq!(dp.request("GET", "/obj/4k/1", &range).status, 206);
    assert_eq!(dp.request("HEAD", "/obj/4k/1", &[]).status, 200);

    let lines = lines_for(&dp, "/obj/4k/1", 4);
    let (miss, hit, part, head) = (&lines[0], &lines[1], &lines[2], &lines[3]);
    let origin_addr = o.addr().to_string();
    for v in [miss, hit, part, head] {
        assert_eq!(v["protocol"], "HTTP/1.1", "{v}");
        assert_eq!(v["host"], "test.example", "{v}");
        assert_eq!(v["client"], "127.0.0.1", "{v}");
        assert!(v["tls"].is_null(), "{v}");
        assert_eq!(v["completed"], true, "{v}");
        let time = v["time"].as_str().unwrap();
        assert!(
            time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
            "{time}"
        );
        let (ttfb, total) = (v["ttfb_ms"].as_f64().unwrap(), v["total_ms"].as_f64());
        assert!(ttfb <= total.unwrap(), "{v}");
    }
    assert_eq!(miss["method"], "GET");
    assert_eq!(miss["status"], 200);
    assert_eq!(miss["bytes"], 4096);
    assert_eq!(miss["cache"], "miss", "{miss}");
    assert!(
        miss["cache_status"]
            .as_str()
            .unwrap()
            .starts_with("edgecache; fwd=uri-miss"),
        "{miss}"
    );
    assert_eq!(miss["origin"], origin_addr.as_str(), "{miss}");
    assert_eq!(miss["user_agent"], "test-agent/1.0");
    assert_eq!(hit["cache"], "hit", "{hit}");
    assert_eq!(hit["status"], 200);
    assert_eq!(hit["bytes"], 4096);
    assert!(hit["origin"].is_null(), "a hit contacts no origin: {hit}");
    assert_eq!(part["status"], 206);
    assert_eq!(part["bytes"], 100, "{part}");
    assert_eq!(head["method"], "HEAD");
    assert_eq!(head["bytes"], 0, "{head}");
    assert_eq!(dp.metric("edgecache_dataplane_access_log_lines_total"), 4.0);
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_access_log_dropped_total{reason="queue_full"}"#),
        0.0
    );
}

#[test]
fn the_combined_format_with_edgecaches_fields() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.extra = vec!["--access-log".into(), "combined".into()];
    let dp = Dataplane::start(opts);
    let headers = [
        ("User-Agent", "test-agent/1.0"),
        ("Referer", "http://ref.example/a"),
    ];
    assert_eq!(dp.request("GET", "/obj/1k/c?x=1", &headers).status, 200);
    let want = "\"GET /obj/1k/c?x=1 HTTP/1.1\" 200 1024 \"http://ref.example/a\" \"test-agent/1.0\" \
                host=\"test.example\" cache=miss cache_status=\"edgecache; fwd=uri-miss";
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let log = dp.log_text();
        if let Some(l) = log.lines().find(|l| l.contains(want)) {
            break l.to_string();
        }
        assert!(Instant::now() < deadline, "no combined line; log:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(line.contains(" +0000] \""), "{line}");
    assert!(
        line.contains(&format!(" origin={} peer=- tls=- completed=1", o.addr())),
        "{line}"
    );
    assert!(
        line.contains(" ttfb_ms=") && line.contains(" total_ms="),
        "{line}"
    );
    assert!(json_lines(&dp).is_empty());
}

#[test]
fn sample_zero_logs_nothing_and_the_histograms_count_every_request() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.extra = vec!["--access-log-sample".into(), "0".into()];
    let dp = Dataplane::start(opts);
    keep_alive_gets(dp.listen, 50, |i| format!("/obj/1k/{}", i % 5));
    let count = r#"edgecache_dataplane_request_duration_seconds_count{cache="hit",status="2xx",site="default"}"#;
    dp.wait_for_metrics("45 hits counted", 10, |m| metric_value(m, count) == 45.0);
    std::thread::sleep(Duration::from_millis(300));
    assert!(json_lines(&dp).is_empty(), "{}", dp.log_text());
    assert_eq!(dp.metric("edgecache_dataplane_access_log_lines_total"), 0.0);
}

#[test]
fn a_share_of_requests_is_sampled() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.extra = vec!["--access-log-sample".into(), "0.25".into()];
    let dp = Dataplane::start(opts);
    keep_alive_gets(dp.listen, 800, |_| "/obj/1k/s".into());
    let hits = r#"edgecache_dataplane_request_duration_seconds_count{cache="hit",status="2xx",site="default"}"#;
    dp.wait_for_metrics("799 hits", 10, |m| metric_value(m, hits) == 799.0);
    std::thread::sleep(Duration::from_millis(300));
    let n = json_lines(&dp).len();
    // 200 expected; 8 standard deviations either side.
    assert!((100..=300).contains(&n), "{n} of 800 lines");
    assert_eq!(
        dp.metric("edgecache_dataplane_access_log_lines_total"),
        n as f64
    );
}

#[test]
fn the_histograms_by_outcome_status_and_site() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let site = [("Host", "WWW.Example.ORG:8080")];
    assert_eq!(dp.request("GET", "/obj/1k/h", &site).status, 200);
    let hit = dp.request("GET", "/obj/1k/h", &site);
    assert!(hit.is_hit());
    assert_eq!(
        dp.request("GET", "/obj/1k/h?status=404&cc=no-store", &site)
            .status,
        404
    );
    assert_eq!(dp.request("POST", "/obj/1k/h", &site).status, 200);
    // Any number of hosts: the label is the site they were routed to (here the one site, the
    // `origin.url` shorthand, `default`), never the client's host.
    for i in 0..70 {
        let host = format!("s{i}.example");
        assert_eq!(
            dp.request("GET", "/obj/1k/x", &[("Host", &host)]).status,
            200
        );
    }
    let m = dp.metrics();
    let labels = |cache: &str, status: &str, site: &str| {
        format!(r#"{{cache="{cache}",status="{status}",site="{site}"}}"#)
    };
    for (name, cache, status, site, n) in [
        (
            "request_duration_seconds_count",
            "miss",
            "2xx",
            "default",
            71.0,
        ),
        (
            "request_duration_seconds_count",
            "hit",
            "2xx",
            "default",
            1.0,
        ),
        (
            "request_duration_seconds_count",
            "miss",
            "4xx",
            "default",
            1.0,
        ),
        (
            "request_duration_seconds_count",
            "pass",
            "2xx",
            "default",
            1.0,
        ),
        (
            "request_first_byte_seconds_count",
            "hit",
            "2xx",
            "default",
            1.0,
        ),
    ] {
        let key = format!("edgecache_dataplane_{name}{}", labels(cache, status, site));
        assert_eq!(metric_value(&m, &key), n, "{key}\n{m}");
    }
    // The bytes of the hit's body, under its labels (the byte hit ratio by site).
    let key = format!(
        "edgecache_dataplane_served_bytes_total{}",
        labels("hit", "2xx", "default")
    );
    assert_eq!(metric_value(&m, &key), hit.body.len() as f64, "{key}\n{m}");
    assert!(
        !m.contains("s0.example") && !m.contains("site=\"other\""),
        "{m}"
    );
    // Buckets from 0.5 ms to 10 s, cumulative to the count.
    let bucket = |le: &str| {
        metric_value(
            &m,
            &format!(
                r#"edgecache_dataplane_request_duration_seconds_bucket{{le="{le}",cache="hit",status="2xx",site="default"}}"#
            ),
        )
    };
    assert_eq!(bucket("10.0"), 1.0, "{m}");
    assert_eq!(bucket("+Inf"), 1.0, "{m}");
    assert!(m.contains(r#"le="0.0005""#), "{m}");
}

/// Read `keep` bytes of the response to `GET path`, then close the connection.
fn read_some_and_close(addr: SocketAddr, path: &str, keep: usize) {
    // A small receive buffer (no autotuning): what the kernel holds for this client stays far
    // below the object's size.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(64 << 10).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test.example\r\n\r\n").unwrap();
    let mut buf = vec![0; keep];
    s.read_exact(&mut buf).unwrap();
    // Unread bytes in the receive queue: the close sends a reset.
    drop(s);
}

#[test]
fn an_aborted_large_response_logs_the_bytes_sent() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    // Large: two 4 MiB slices (and their manifest) in the store.
    const SIZE: u64 = 8 << 20;
    let path = "/obj/8m/1";
    // A miss: the client goes after 256 KiB; the fill goes on and stores the object.
    read_some_and_close(dp.listen, path, 256 << 10);
    let miss = lines_for(&dp, path, 1).remove(0);
    dp.wait_for_metrics("the object stored", 30, |m| {
        metric_value(m, "edgecache_dataplane_store_objects") == 3.0
    });
    // A hit from the disk, cut the same way.
    read_some_and_close(dp.listen, path, 256 << 10);
    let hit = lines_for(&dp, path, 2).remove(1);
    for (v, cache) in [(&miss, "miss"), (&hit, "hit")] {
        assert_eq!(v["cache"], cache, "{v}");
        assert_eq!(v["status"], 200, "{v}");
        assert_eq!(v["completed"], false, "{v}");
        let bytes = v["bytes"].as_u64().unwrap();
        assert!((200 << 10..SIZE).contains(&bytes), "{bytes} bytes: {v}");
        println!("VERIFY aborted {cache}: {bytes} of {SIZE} bytes logged");
    }
    // A whole one for comparison.
    let whole = dp.get(path);
    assert_eq!(whole.body.len() as u64, SIZE);
    let v = lines_for(&dp, path, 3).remove(2);
    assert_eq!(
        (v["bytes"].as_u64(), &v["completed"]),
        (Some(SIZE), &Value::Bool(true))
    );
}

/// Four client threads, each running `client(addr, thread)`, within two minutes: how long
/// they took.
fn four_clients(dp: &Dataplane, client: fn(SocketAddr, usize)) -> Duration {
    let started = Instant::now();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = dp.listen;
            std::thread::spawn(move || client(addr, t))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(120), "{took:?}");
    took
}

/// The lines a log dropped and wrote, by their metrics' names; printed for the record.
fn dropped_and_written(dp: &Dataplane, dropped: &str, written: &str, what: &str) -> (f64, f64) {
    let m = dp.metrics();
    let (d, w) = (metric_value(&m, dropped), metric_value(&m, written));
    println!("VERIFY {what}: {w} lines written, {d} dropped");
    (d, w)
}

#[test]
fn a_stdout_pipe_nobody_reads_does_not_stall_requests() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    // stdout is a pipe this test holds and never reads (stderr still goes to the log file).
    let dp = Dataplane::start_with(Opts::new(&o.url(), dir.path()), |cmd| {
        cmd.stdout(Stdio::piped());
    });
    let took = four_clients(&dp, |addr, t| {
        keep_alive_gets(addr, 5_000, |i| format!("/obj/1k/{}?t={t}", i % 50))
    });
    let (dropped, written) = dropped_and_written(
        &dp,
        r#"edgecache_dataplane_access_log_dropped_total{reason="queue_full"}"#,
        "edgecache_dataplane_access_log_lines_total",
        &format!("20000 requests with stdout blocked in {took:?}"),
    );
    // The pipe (64 KiB) and the queue (1 MiB) hold a few thousand lines; the rest is dropped.
    assert!(dropped > 10_000.0, "dropped {dropped}");
    assert!(written < 1_000.0, "written {written}");
    // The admin side and new connections are still served.
    assert_eq!(dp.get("/obj/1k/0?t=0").status, 200);
}

#[test]
fn a_stderr_pipe_nobody_reads_does_not_stall_requests() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    // The tracing log at debug (lines for every OPTIONS request, which bypasses the cache)
    // into a pipe this test holds and never reads.
    let dp = Dataplane::start_with(Opts::new(&o.url(), dir.path()), |cmd| {
        cmd.env("RUST_LOG", "debug").stderr(Stdio::piped());
    });
    // A line is about 100 bytes: 64 KiB of pipe is full after a few hundred requests, and
    // the 1 MiB queue after a few thousand.
    let took = four_clients(&dp, |addr, t| {
        for i in 0..3_000 {
            let r = request(addr, "OPTIONS", &format!("/obj/1k/{t}-{i}"), &[], b"");
            assert!(r.is_ok(), "request {t}-{i}: {r:?}");
        }
    });
    let (dropped, written) = dropped_and_written(
        &dp,
        "edgecache_dataplane_log_dropped_total",
        "edgecache_dataplane_log_lines_total",
        &format!("12000 requests with stderr blocked in {took:?}"),
    );
    assert!(dropped > 0.0, "dropped {dropped}");
    assert!(written < 1_000.0, "written {written}");
    assert_eq!(dp.get("/obj/1k/after").status, 200);
}

#[test]
fn a_request_hyper_refuses_before_its_head_is_read_is_logged_with_its_status() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let malformed = raw(
        dp.listen,
        b"GET /x HTTP/1.1\r\nHost: test.example\r\nno colon\r\n\r\n",
    )
    .unwrap();
    assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed}");
    // More header fields than hyper parses (100).
    let fields: String = (0..200).map(|i| format!("X-Pad-{i}: a\r\n")).collect();
    let huge = format!("GET /y HTTP/1.1\r\nHost: test.example\r\n{fields}\r\n");
    let too_large = raw(dp.listen, huge.as_bytes()).unwrap();
    assert!(too_large.starts_with("HTTP/1.1 431"), "{too_large}");
    let lines = lines_for(&dp, "-", 2);
    let statuses: Vec<&Value> = lines.iter().map(|v| &v["status"]).collect();
    assert_eq!(statuses, [400, 431], "{lines:?}");
    for v in &lines {
        assert_eq!(v["method"], "-", "{v}");
        assert_eq!(v["client"], "127.0.0.1", "{v}");
        assert_eq!(v["cache"], "none", "{v}");
        assert_eq!(v["bytes"], 0, "{v}");
    }
    assert_eq!(o.requests(), 0);
}
