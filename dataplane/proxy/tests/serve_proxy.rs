//! The data plane as a reverse proxy and first-layer cache, on loopback with an in-process origin.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;

#[test]
fn miss_then_hit_from_disk_with_cache_status() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let first = dp.get("/obj/100k/1");
    assert_eq!(first.status, 200);
    assert!(
        first.cache_status().contains("fwd=uri-miss"),
        "{}",
        first.cache_status()
    );
    assert!(
        first.cache_status().contains("stored"),
        "{}",
        first.cache_status()
    );
    check_body(100 * 1024, 1, &first.body).unwrap();
    let second = dp.get("/obj/100k/1");
    assert_eq!(second.status, 200);
    assert!(second.is_hit(), "{}", second.cache_status());
    check_body(100 * 1024, 1, &second.body).unwrap();
    assert_eq!(o.requests(), 1, "the hit must not reach the origin");
    assert!(
        dp.metric("edgecache_dataplane_disk_reads_total") >= 1.0,
        "{}",
        dp.metrics()
    );
    // The latency histogram counts each read once: the +Inf bucket equals the count.
    let m = dp.metrics();
    assert_eq!(
        metric_value(
            &m,
            r#"edgecache_dataplane_disk_read_seconds_bucket{le="+Inf"}"#
        ),
        metric_value(&m, "edgecache_dataplane_disk_read_seconds_count"),
        "{m}"
    );
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_requests_total{cache="hit_disk"}"#),
        1.0,
        "{}",
        dp.metrics()
    );
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_requests_total{cache="miss"}"#),
        1.0
    );
}

#[test]
fn head_is_served_from_a_stored_get() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    assert_eq!(dp.get("/obj/4k/head").status, 200);
    let head = dp.request("HEAD", "/obj/4k/head", &[]);
    assert_eq!(head.status, 200);
    assert!(head.is_hit(), "{}", head.cache_status());
    assert_eq!(head.header("content-length"), "4096");
    assert!(head.body.is_empty());
    assert_eq!(o.requests(), 1);
}

#[test]
fn responses_that_may_not_be_stored_are_not() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    for path in [
        "/obj/4k/a?cc=no-store",
        "/obj/4k/b?cc=private",
        "/obj/4k/c?status=500&cc=none",
    ] {
        let a = dp.get(path);
        let b = dp.get(path);
        assert!(!b.is_hit(), "{path}: {}", b.cache_status());
        assert_eq!(
            o.requests_for(path),
            2,
            "{path} must go to the origin twice ({} / {})",
            a.cache_status(),
            b.cache_status()
        );
    }
}

#[test]
fn authorization_requests_do_not_share_entries_unless_the_response_allows_it() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    // max-age only: not storable for a request with Authorization (RFC 9111 3.5).
    let p = "/obj/4k/auth?cc=max-age%3D60";
    dp.request("GET", p, &[("Authorization", "Bearer x")]);
    dp.request("GET", p, &[("Authorization", "Bearer x")]);
    assert_eq!(o.requests_for(p), 2);
    // public: storable and shareable.
    let p = "/obj/4k/auth2?cc=public%2C%20max-age%3D60";
    dp.request("GET", p, &[("Authorization", "Bearer x")]);
    let r = dp.request("GET", p, &[("Authorization", "Bearer y")]);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(o.requests_for(p), 1);
}

#[test]
fn origin_down_gives_502_with_a_clear_body() {
    let dir = tempfile::tempdir().unwrap();
    let dead = format!("http://127.0.0.1:{}", free_port());
    let dp = Dataplane::start(Opts::new(&dead, dir.path()));
    let r = dp.get("/obj/4k/1");
    assert_eq!(r.status, 502);
    let body = String::from_utf8_lossy(&r.body);
    // A short fixed text: the origin's address and the error chain stay in the log.
    assert_eq!(body, "502 Bad Gateway: the origin cannot be reached\n");
    let port = dead.rsplit(':').next().unwrap();
    assert!(!body.contains(port), "{body}");
    let log = dp.log_text();
    assert!(
        log.contains("origin failure") && log.contains(port),
        "the chain is logged: {log}"
    );
    assert!(
        r.cache_status().contains("detail=connect"),
        "{}",
        r.cache_status()
    );
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_origin_errors_total{kind="connect"}"#),
        1.0
    );
}

#[test]
fn a_slow_origin_gives_504_not_a_hang() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "origin:\n  firstByteTimeout: 300ms\n  idleTimeout: 300ms\n",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let url = o.url();
    let mut opts = Opts::new(&url, &cache);
    opts.extra = vec!["--config".into(), cfg.display().to_string()];
    let dp = Dataplane::start(opts);
    let r = dp.get("/obj/4k/slow?delay_ms=3000");
    assert_eq!(r.status, 504);
    // Silent mid-body: the client sees a truncated body, and nothing is stored.
    let r = dp.get("/obj/1m/stall?slow_ms=2000");
    assert!(
        r.truncated,
        "a stalled body must end truncated, got {} bytes",
        r.body.len()
    );
    let again = dp.get("/obj/1m/stall?slow_ms=2000");
    assert!(!again.is_hit());
}

#[test]
fn a_body_the_origin_cut_short_is_never_stored_and_the_client_sees_the_cut() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    // With a Content-Length the cut is repaired from the origin with If-Range: this origin
    // ignores Range (a whole 200), so the repair is refused and the client still sees the cut
    // (one more origin request per fetch). Chunked: no length, no repair.
    for (path, asked) in [
        ("/obj/1m/cut?cut=300000", 4),
        ("/obj/1m/cutc?cut=300000&chunked=1", 2),
    ] {
        let r = dp.get(path);
        assert_eq!(r.status, 200);
        assert!(
            r.truncated,
            "{path}: the client must see the truncation ({} bytes)",
            r.body.len()
        );
        assert!(r.body.len() < 1 << 20);
        let again = dp.get(path);
        assert!(
            !again.is_hit(),
            "{path}: a cut body must not be stored: {}",
            again.cache_status()
        );
        assert_eq!(o.requests_for(path), asked);
    }
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_fill_repairs_total{result="failed"}"#),
        2.0,
        "{}",
        dp.metrics()
    );
}

#[test]
fn large_objects_stream_before_the_origin_finishes() {
    use std::io::{BufRead, BufReader, Read, Write};
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    // 4 MiB sent in 64 KiB chunks 50 ms apart: about 3.2 s in all.
    let mut s = std::net::TcpStream::connect(dp.listen).unwrap();
    s.write_all(b"GET /obj/4m/stream?slow_ms=50 HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n").unwrap();
    let started = std::time::Instant::now();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    while {
        line.clear();
        r.read_line(&mut line).unwrap();
        line.trim() != ""
    } {}
    let mut first = [0u8; 1];
    r.read_exact(&mut first).unwrap();
    let first_byte = started.elapsed();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    let total = started.elapsed();
    assert!(
        first_byte * 4 < total,
        "first byte at {first_byte:?} of {total:?}: the body must stream"
    );
    let mut body = first.to_vec();
    body.extend(rest);
    check_body(4 << 20, "stream", &body).unwrap();
    let again = dp.get("/obj/4m/stream?slow_ms=50");
    assert!(again.is_hit(), "{}", again.cache_status());
}

#[test]
fn concurrent_misses_make_one_origin_fetch() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let path = "/obj/256k/herd?delay_ms=500";
    let listen = dp.listen;
    let clients: Vec<_> = (0..50)
        .map(|_| std::thread::spawn(move || get(listen, path, &[]).expect("response")))
        .collect();
    for c in clients {
        let r = c.join().unwrap();
        assert_eq!(r.status, 200);
        check_body(256 * 1024, "herd", &r.body).unwrap();
    }
    assert_eq!(
        o.requests_for(path),
        1,
        "50 concurrent misses must make exactly one origin request"
    );
}

#[test]
fn malformed_requests_get_400_and_the_server_stays_up() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let long_header = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let bad: Vec<Vec<u8>> = vec![
        b"GARBAGE\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost a\r\n\r\n".to_vec(),
        b"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\nHost: a\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: a\r\n\r\nZZ\r\n".to_vec(),
        long_header.into_bytes(),
    ];
    for b in &bad {
        let out = raw(dp.listen, b).unwrap();
        let status = out.split_whitespace().nth(1).unwrap_or("");
        assert!(
            status.starts_with('4') || out.is_empty(),
            "request {:?} got {out:?}",
            String::from_utf8_lossy(&b[..b.len().min(60)])
        );
    }
    // A request without a Host in HTTP/1.1 is a 400 from the cache itself.
    let out = raw(
        dp.listen,
        b"GET /obj/4k/1 HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let ok = dp.get("/obj/4k/alive");
    assert_eq!(ok.status, 200);
    assert_eq!(o.requests(), 1, "no malformed request reached the origin");
}

#[test]
fn the_origin_sees_via_xff_and_the_host_policy() {
    // The origin echoes nothing, so check with a raw listener acting as origin.
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&url, dir.path()));
    let listen = dp.listen;
    let client = std::thread::spawn(move || {
        get(
            listen,
            "/x",
            &[("Host", "www.example"), ("X-Forwarded-For", "192.0.2.1")],
        )
    });
    let (s, _) = l.accept().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        head.push(line.trim().to_ascii_lowercase());
    }
    (&s).write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nCache-Control: max-age=60\r\n\r\nok")
        .unwrap();
    let resp = client.join().unwrap().unwrap();
    assert_eq!(resp.body, b"ok");
    assert!(head.contains(&"host: www.example".to_string()), "{head:?}");
    assert!(head.contains(&"via: 1.1 edgecache".to_string()), "{head:?}");
    assert!(
        head.contains(&"x-forwarded-for: 192.0.2.1, 127.0.0.1".to_string()),
        "{head:?}"
    );
    assert!(
        head.iter().all(|h| !h.starts_with("connection: close")),
        "hop-by-hop fields are not forwarded: {head:?}"
    );
}

#[test]
fn purge_removes_a_url() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    dp.get("/obj/4k/p");
    assert!(dp.get("/obj/4k/p").is_hit());
    let r = request(
        dp.admin,
        "PURGE",
        "/obj/4k/p",
        &[("Host", "test.example")],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(!dp.get("/obj/4k/p").is_hit());
    assert_eq!(o.requests_for("/obj/4k/p"), 2);
}

#[test]
fn admin_endpoints_answer() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    assert_eq!(get(dp.admin, "/healthz", &[]).unwrap().status, 200);
    assert_eq!(get(dp.admin, "/readyz", &[]).unwrap().status, 200);
    dp.get("/obj/4k/m");
    let m = dp.metrics();
    for name in [
        "edgecache_dataplane_requests_total",
        "edgecache_dataplane_response_body_bytes_total",
        "edgecache_dataplane_origin_fetches_total",
        "edgecache_dataplane_disk_reads_total",
        "edgecache_dataplane_disk_read_bytes_total",
        "edgecache_dataplane_store_bytes",
        "edgecache_dataplane_store_objects",
        "edgecache_dataplane_store_evictions_total",
        "edgecache_dataplane_io_engine_info",
        "edgecache_dataplane_accepted_connections_total",
    ] {
        assert!(m.contains(name), "{name} missing from:\n{m}");
    }
    assert_eq!(
        metric_value(&m, "edgecache_dataplane_store_objects"),
        1.0,
        "{m}"
    );
}

#[test]
fn sigterm_finishes_in_flight_responses_then_exits() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let mut dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let listen = dp.listen;
    // About 1.6 s of body in flight when SIGTERM arrives.
    let client = std::thread::spawn(move || get(listen, "/obj/2m/term?slow_ms=50", &[]).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    dp.stop();
    let r = client.join().unwrap();
    assert_eq!(r.status, 200);
    assert!(!r.truncated, "the in-flight response must finish");
    check_body(2 << 20, "term", &r.body).unwrap();
    assert!(dp.child.try_wait().unwrap().is_some(), "the process exited");
    assert!(
        std::net::TcpStream::connect(listen).is_err(),
        "no longer accepting"
    );
}

/// A small miss goes out as one write, head and body together: the data plane holds a stored
/// body's last chunk until the object is published (so a client with the whole body finds it
/// stored), and used to send the head alone first, then the body after the disk write: two
/// sends per miss, each a wake-up of the client. A client waiting in `read` while the data
/// plane fetches and stores now gets the whole response from its first read, and the object
/// is stored by then.
#[test]
fn a_small_miss_goes_out_in_one_write() {
    use std::io::{Read, Write};
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    for i in 0..20 {
        let path = format!("/obj/4k/one-write-{i}");
        let mut s = std::net::TcpStream::connect(dp.listen).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        let head_end = text.find("\r\n\r\n").expect("a whole head") + 4;
        assert!(text.contains("stored"), "{text}");
        assert_eq!(
            n - head_end,
            4096,
            "request {i}: the first read brought {} of the 4096 body bytes",
            n - head_end
        );
        check_body(4096, format!("one-write-{i}"), &buf[head_end..n]).unwrap();
        let again = dp.get(&path);
        assert!(
            again.is_hit(),
            "{path} is stored once it is sent: {}",
            again.cache_status()
        );
    }
    assert_eq!(o.requests(), 20);
}

/// Requests on one keep-alive connection, many in a row and some pipelined (sent before the
/// response to the one before has been read, so they arrive while it is written): each is
/// answered whole and in order. hyper reads into what is left of its buffer while a response
/// goes out (third_party/hyper/PATCHES.md), so these pass through that room as it runs out, with
/// heads of several sizes.
#[test]
fn pipelined_and_successive_requests_on_one_connection_are_answered_in_order() {
    use std::io::{BufReader, Write};
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let mut s = std::net::TcpStream::connect(dp.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let request = |id: usize, pad: usize| {
        format!(
            "GET /obj/4k/pipe{id} HTTP/1.1\r\nHost: test.example\r\nX-Pad: {}\r\n\r\n",
            "p".repeat(pad)
        )
    };
    for round in 0..40 {
        // Three requests in one write, the middle one with a head of a few KiB.
        let burst: String = (0..3)
            .map(|i| request(i, if i == 1 { 100 * round } else { 10 }))
            .collect();
        s.write_all(burst.as_bytes()).unwrap();
        for i in 0..3 {
            let resp = read_response(&mut r, false).unwrap();
            assert_eq!(resp.status, 200, "round {round}, request {i}");
            check_body(4096, format!("pipe{i}"), &resp.body).unwrap();
        }
    }
}
