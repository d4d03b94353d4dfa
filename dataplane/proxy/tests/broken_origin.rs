//! Origins that frame their bodies badly: a response with neither Content-Length nor chunked
//! framing ends when the origin closes, so a dropped connection looks complete. Such responses
//! are forwarded as they come and not stored, unless `cache.storeCloseDelimited: true`.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;

/// An origin that answers every request with a close-delimited 200 of `body` (or, with
/// `cut`, only its first half before closing: to the cache the two look the same).
struct RawOrigin {
    url: String,
    requests: Arc<AtomicU64>,
}

fn raw_origin(body: &'static [u8], cut: bool) -> RawOrigin {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let requests = Arc::new(AtomicU64::new(0));
    let count = requests.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            count.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nCache-Control: public, max-age=600\r\n\
                  Content-Type: text/plain\r\nConnection: close\r\n\r\n",
            );
            let n = if cut { body.len() / 2 } else { body.len() };
            let _ = s.write_all(&body[..n]);
            // Dropping the stream closes it: the end of the body.
        }
    });
    RawOrigin { url, requests }
}

const BODY: &[u8] = b"a close-delimited body of some length, ending when the origin closes\n";

#[test]
fn close_delimited_responses_are_forwarded_whole_and_not_stored() {
    for cut in [false, true] {
        let o = raw_origin(BODY, cut);
        let dir = tempfile::tempdir().unwrap();
        let dp = Dataplane::start(Opts::new(&o.url, dir.path()));
        let want = if cut { &BODY[..BODY.len() / 2] } else { BODY };
        for _ in 0..2 {
            let r = dp.get("/cd");
            assert_eq!(r.status, 200);
            assert_eq!(r.body, want, "forwarded as it came (cut: {cut})");
            assert!(!r.is_hit(), "{}", r.cache_status());
            assert!(
                r.cache_status().contains("detail=close-delimited"),
                "{}",
                r.cache_status()
            );
        }
        assert_eq!(
            o.requests.load(Ordering::SeqCst),
            2,
            "never stored (cut: {cut})"
        );
    }
}

#[test]
fn store_close_delimited_true_stores_them() {
    let o = raw_origin(BODY, false);
    let dir = tempfile::tempdir().unwrap();
    let yaml = "cache:\n  storeCloseDelimited: true\n";
    let dp = Dataplane::start_with_yaml(&o.url, dir.path(), yaml, 2, &[]);
    assert!(!dp.get("/cd").is_hit());
    let r = dp.get("/cd");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.body, BODY);
    assert_eq!(o.requests.load(Ordering::SeqCst), 1);
}

/// Wait until the origin has no body in progress; false after `within`.
fn origin_idle_within(o: &OriginHandle, within: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if o.in_flight() == 0 {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn nobody_wanting_the_bytes_stops_the_origin_read() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    // 64 MiB at 64 KiB per 20 ms: 20 s to read whole.
    let big = "/obj/64m/pass?cc=no-store&slow_ms=20";
    let r = dp.request("HEAD", big, &[]);
    assert_eq!(r.status, 200);
    assert!(
        origin_idle_within(&o, std::time::Duration::from_secs(3)),
        "a HEAD of an uncacheable object stopped reading its body"
    );
    // A GET whose client goes away after the head.
    {
        use std::io::{BufRead, BufReader, Write};
        let mut s = std::net::TcpStream::connect(dp.listen).unwrap();
        write!(s, "GET {big} HTTP/1.1\r\nHost: test.example\r\n\r\n").unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        assert!(line.contains("200"), "{line}");
    }
    assert!(
        origin_idle_within(&o, std::time::Duration::from_secs(3)),
        "an aborted GET of an uncacheable object stopped reading its body"
    );
}
