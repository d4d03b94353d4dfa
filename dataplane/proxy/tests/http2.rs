//! HTTP/2 to clients: the limits a client is told, load from `h2load` over TLS, and the known
//! floods sent frame by frame (CONTINUATION without end, rapid reset, empty DATA frames): the
//! flooding connection is cut or held to its bounds, and other clients are served meanwhile.

#![allow(clippy::unwrap_used)]

mod common;
mod tls_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::frames::*;
use common::*;
use tls_support::*;

fn start(o: &OriginHandle, dir: &std::path::Path) -> Dataplane {
    Dataplane::start(Opts::new(&o.url(), dir))
}

/// While `flood` runs, another client's requests are served.
fn others_are_served_during(dp: &Dataplane, flood: impl FnOnce() + Send) {
    rounds_during(flood, 5, |n| {
        let r = dp.get(&format!("/obj/4k/other-{}", n % 3));
        assert_eq!(r.status, 200);
    });
}

#[test]
fn a_continuation_flood_is_cut_at_the_header_list_limit() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let mut raw = Raw::open(dp.listen);
    // A header block that never ends: HEADERS without END_HEADERS, then CONTINUATION frames
    // of 1 KiB fields, up to 16 MiB.
    let mut block = request_block("GET", "/obj/4k/cont");
    assert!(raw.send(&frame(HEADERS, END_STREAM, 1, &block)));
    block.clear();
    let mut field = vec![0u8, 5];
    field.extend_from_slice(b"x-pad");
    field.extend_from_slice(&[0x7f, 0x81, 0x07]); // length 1000 (7-bit prefix integer)
    field.extend_from_slice(&[b'a'; 1000]);
    let chunk: Vec<u8> = field.iter().copied().cycle().take(16 * 1024).collect();
    let mut sent = 0usize;
    let cut = loop {
        if raw.ended() || !raw.send(&frame(CONTINUATION, 0, 1, &chunk)) {
            break true;
        }
        sent += chunk.len();
        if sent >= 16 << 20 {
            break raw.wait_ended(Duration::from_secs(5));
        }
    };
    assert!(cut, "the server took {sent} bytes of one header block");
    // What was sent includes what the two sockets' buffers took (a few MiB on loopback).
    assert!(sent <= 8 << 20, "cut only after {sent} bytes");
    assert!(raw.wait_ended(Duration::from_secs(5)));
    assert_eq!(dp.get("/obj/4k/after").status, 200);
    assert_eq!(
        o.requests(),
        1,
        "the flooded request never reached the origin"
    );
    let errors = "edgecache_dataplane_http2_connection_errors_total";
    assert_eq!(
        dp.metric(&format!("{errors}{{reason=\"protocol_error\"}}")),
        1.0
    );
}

#[test]
fn a_rapid_reset_flood_neither_stalls_others_nor_floods_the_origin() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let streams = 20_000u32;
    let mut raw = Raw::open(dp.listen);
    others_are_served_during(&dp, || {
        let mut batch = Vec::new();
        for i in 0..streams {
            let id = 2 * i + 1;
            let block = request_block("GET", &format!("/obj/4k/rr-{}", i % 50));
            batch.extend(frame(HEADERS, END_STREAM | END_HEADERS, id, &block));
            batch.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes())); // CANCEL
            if batch.len() > 64 * 1024 {
                if !raw.send(&batch) {
                    return;
                }
                batch.clear();
            }
        }
        raw.send(&batch);
    });
    assert!(
        raw.wait_ended(Duration::from_secs(5)),
        "the flooding connection is told to go away"
    );
    // The origin saw at most one fetch per distinct object, not one per stream.
    assert!(o.requests() <= 50 + 20, "{} origin requests", o.requests());
    assert_eq!(dp.get("/obj/4k/after").status, 200);
    let errors = "edgecache_dataplane_http2_connection_errors_total";
    assert_eq!(
        dp.metric(&format!("{errors}{{reason=\"enhance_your_calm\"}}")),
        1.0,
        "{}",
        dp.metrics()
    );
}

#[test]
fn a_stream_the_client_resets_mid_body_is_counted_as_cancelled() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    assert!(dp.get("/obj/1m/reset").status == 200);
    let mut raw = Raw::open(dp.listen);
    // The client's default window (64 KiB) stops the 1 MiB body early; it resets the stream.
    let block = request_block("GET", "/obj/1m/reset");
    assert!(raw.send(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &block)));
    std::thread::sleep(Duration::from_millis(200));
    assert!(raw.send(&frame(RST_STREAM, 0, 1, &8u32.to_be_bytes())));
    let streams = "edgecache_dataplane_http2_streams_total";
    dp.wait_for_metrics("the reset stream counted", 5, |m| {
        metric_value(m, &format!("{streams}{{result=\"cancelled\"}}")) == 1.0
    });
    assert_eq!(
        dp.metric(&format!("{streams}{{result=\"completed\"}}")),
        0.0
    );
    assert!(!raw.ended(), "a reset stream leaves its connection open");
}

#[test]
fn empty_data_frames_do_not_stall_others() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let mut raw = Raw::open(dp.listen);
    others_are_served_during(&dp, || {
        let block = request_block("POST", "/obj/4k/empty");
        if !raw.send(&frame(HEADERS, END_HEADERS, 1, &block)) {
            return;
        }
        let empty = frame(DATA, 0, 1, &[]);
        let batch: Vec<u8> = empty
            .iter()
            .copied()
            .cycle()
            .take(empty.len() * 4096)
            .collect();
        for _ in 0..100 {
            if !raw.send(&batch) {
                return;
            }
        }
    });
    assert_eq!(dp.get("/obj/4k/after").status, 200);
}

#[test]
fn h2load_over_tls_gets_every_response_within_the_advertised_limits() {
    if !tool("h2load") || !tool("nghttp") {
        return;
    }
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (c, k) = ca.issue(dir.path(), "a", &["a.test"]);
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (url, cache) = (o.url(), dir.path().join("cache"));
    let mut opts = Opts::new(&url, &cache);
    opts.extra = [
        "--tls-listen",
        &tls.to_string(),
        "--tls-cert",
        &c.display().to_string(),
        "--tls-key",
        &k.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let dp = Dataplane::start(opts);
    let url = format!("https://127.0.0.1:{}/obj/4k/load", tls.port());
    // What the server tells a client it may do.
    let out = Command::new("nghttp").args(["-nv", &url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):128"),
        "{text}"
    );
    assert!(
        text.contains("SETTINGS_INITIAL_WINDOW_SIZE(0x04):1048576"),
        "{text}"
    );
    assert!(
        text.contains("SETTINGS_MAX_HEADER_LIST_SIZE(0x06):32768"),
        "{text}"
    );
    // 4,000 requests on 8 connections, up to 64 streams each at once.
    let out = Command::new("h2load")
        .args(["-n", "4000", "-c", "8", "-m", "64", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("4000 succeeded, 0 failed, 0 errored"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Application protocol: h2"), "{text}");
    assert_eq!(o.requests(), 1);
    assert!(dp.get("/obj/4k/load").status == 200);
    // Every stream counted, none cancelled (the last request is HTTP/1.1).
    let streams = "edgecache_dataplane_http2_streams_total";
    assert_eq!(
        dp.metric(&format!("{streams}{{result=\"completed\"}}")),
        4001.0
    );
    assert_eq!(
        dp.metric(&format!("{streams}{{result=\"cancelled\"}}")),
        0.0
    );
}

/// Whether `name` runs; prints the skip line when it does not (CI installs nghttp2-client).
fn tool(name: &str) -> bool {
    let ok = Command::new(name).arg("--version").output().is_ok();
    if !ok {
        println!("SKIPPED: {name} (Debian nghttp2-client) is not installed");
    }
    ok
}

/// CPU time (user and system) the process `pid` has used.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// A partial h2c preface waits for the rest of it by readiness: connections that sent a prefix
/// and nothing more cost no CPU while they wait (a 5 ms poll made 800 of them cost 23% of a
/// core). Only the head timeout ends them.
#[test]
fn partial_prefaces_cost_no_cpu_while_they_wait() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let held: Vec<TcpStream> = (0..240)
        .map(|_| {
            let mut s = TcpStream::connect(dp.listen).unwrap();
            s.write_all(&PREFACE[..16]).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_time(dp.child.id());
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_time(dp.child.id()) - before;
    // Polling, 240 waiting prefaces cost about 200 ms of CPU in these 3 s; waiting for
    // readiness, next to nothing (a margin for the process's own timers and metrics).
    assert!(used < Duration::from_millis(60), "{used:?} of CPU in 3 s");
    // The rest of a preface, when it comes, is read as HTTP/2 at once.
    let mut s = TcpStream::connect(dp.listen).unwrap();
    s.write_all(&PREFACE[..10]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(&PREFACE[10..]).unwrap();
    s.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 9];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[3], SETTINGS, "the server's SETTINGS: {head:?}");
    drop(held);
}

/// A client that opens every stream's window at 0 and never widens it takes no byte, so no
/// socket write ever blocks: while others wait for the I/O buffers its streams hold, they are
/// reset after `writeTimeoutUnderPressure` (after `writeTimeout` otherwise), the connection that
/// made no progress on any stream is closed, and the buffers go back. Another client's 8 MiB
/// hits stay whole meanwhile.
#[test]
fn streams_whose_window_never_opens_are_reset_and_give_back_their_buffers() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(
        &o.url(),
        dir.path(),
        "clients:\n  writeTimeout: 3s\n  writeTimeoutUnderPressure: 1s\n",
        2,
        &[],
    );
    let r = dp.get("/obj/8m/zw");
    assert_eq!(r.body.len(), 8 << 20);
    // Buffers in use: allocated, less those pooled for reuse.
    let in_use = |m: &str| {
        metric_value(m, "edgecache_dataplane_io_buffer_bytes")
            - metric_value(m, "edgecache_dataplane_io_buffer_pooled_bytes")
    };
    let idle = in_use(&dp.metrics());
    let stalled: Vec<Raw> = (0..2)
        .map(|_| {
            let mut raw = Raw::open_with(dp.listen, &[(INITIAL_WINDOW_SIZE, 0)]);
            for i in 0..32u32 {
                let block = request_block("GET", "/obj/8m/zw");
                assert!(raw.send(&frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, &block)));
            }
            raw
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // A fresh client's hit is whole while they hold what they hold.
    let r = dp.get("/obj/8m/zw");

    assert!(
        !r.truncated && r.body.len() == 8 << 20,
        "{} bytes",
        r.body.len()
    );
    for raw in &stalled {
        assert!(
            raw.wait_ended(Duration::from_secs(10)),
            "a connection that took no byte of 32 streams is still open"
        );
    }
    dp.wait_for_metrics("the stalled streams' buffers back", 10, |m| {
        in_use(m) <= idle
    });
    let r = dp.get("/obj/8m/zw");
    assert!(
        !r.truncated && r.body.len() == 8 << 20,
        "{} bytes",
        r.body.len()
    );
}

/// A GET whose HEADERS frame does not end the stream has content (its DATA frames follow, with
/// no Content-Length to say so): refused at once, as an HTTP/1.1 GET with a body is, so a
/// client cannot park request data in the connection's window behind cacheable requests.
#[test]
fn a_get_with_content_is_refused_over_http2_too() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let rt = runtime();
    let status = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(dp.listen).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tcp),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        // A body of unknown length: no Content-Length goes with it.
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>(1);
        let body = http_body_util::StreamBody::new(Box::pin(futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|f| (f, rx)) },
        )));
        let req = http::Request::get("http://a.test/obj/4k/gb")
            .body(body)
            .unwrap();
        let pending = send.send_request(req);
        let _ = tx
            .send(Ok(http_body::Frame::data(bytes::Bytes::from_static(
                b"smuggled",
            ))))
            .await;
        let resp = pending.await.unwrap();
        drop(tx);
        resp.status().as_u16()
    });
    assert_eq!(status, 400);
    assert_eq!(o.requests(), 0);
}
