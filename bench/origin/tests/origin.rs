//! End-to-end tests of the origin over real sockets, with a raw HTTP/1.1 client
//! (so truncation and framing are visible as they are on the wire).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use edgecache_origin::{OriginHandle, OriginOptions, check_body, expected_body, spawn};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The connection ended before the announced Content-Length.
    truncated: bool,
    chunked: bool,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn request(addr: SocketAddr, method: &str, target: &str, extra: &[(&str, &str)]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n");
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw); // a reset after a cut is fine
    parse(&raw, method == "HEAD")
}

fn parse(raw: &[u8], head: bool) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no head")
        + 4;
    let head_s = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head_s.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut r = Resp {
        status,
        headers,
        body: Vec::new(),
        truncated: false,
        chunked: false,
    };
    let rest = &raw[end..];
    if head || status == 304 || status == 204 {
        return r;
    }
    if r.header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        r.chunked = true;
        let mut p = rest;
        loop {
            let nl = p
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("chunk size line");
            let n =
                usize::from_str_radix(std::str::from_utf8(&p[..nl]).unwrap().trim(), 16).unwrap();
            p = &p[nl + 2..];
            if n == 0 {
                break;
            }
            r.body.extend_from_slice(&p[..n]);
            p = &p[n + 2..];
        }
    } else if let Some(cl) = r.header("content-length") {
        let cl: usize = cl.parse().unwrap();
        r.body = rest[..rest.len().min(cl)].to_vec();
        r.truncated = rest.len() < cl;
    } else {
        r.body = rest.to_vec();
    }
    r
}

fn start() -> OriginHandle {
    OriginHandle::start("127.0.0.1:0".parse().unwrap(), OriginOptions::default()).unwrap()
}

#[test]
fn serves_exact_bytes_for_every_size() {
    let o = start();
    for (s, size) in [
        ("0", 0u64),
        ("1", 1),
        ("4k", 4096),
        ("100k", 102_400),
        ("1m", 1 << 20),
        ("5000000", 5_000_000),
        ("12345", 12_345),
    ] {
        let r = request(o.addr(), "GET", &format!("/obj/{s}/42"), &[]);
        assert_eq!(r.status, 200);
        assert!(!r.truncated);
        assert_eq!(r.header("content-length"), Some(size.to_string().as_str()));
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
        assert_eq!(r.header("cache-control"), Some("public, max-age=3600"));
        assert!(r.header("date").is_some());
        assert_eq!(
            r.header("last-modified"),
            Some("Thu, 01 Jan 2026 00:00:00 GMT")
        );
        let etag = r.header("etag").unwrap();
        assert!(etag.starts_with('"') && !etag.starts_with("W/"), "{etag}");
        check_body(size, 42, &r.body).unwrap();
        assert_eq!(r.body, expected_body(size, 42));
    }
    // Non-numeric ids work and differ.
    let a = request(o.addr(), "GET", "/obj/4k/abc", &[]);
    check_body(4096, "abc", &a.body).unwrap();
    assert_ne!(
        a.header("etag"),
        request(o.addr(), "GET", "/obj/4k/abd", &[]).header("etag")
    );
    assert_ne!(
        a.header("etag"),
        request(o.addr(), "GET", "/obj/8k/abc", &[]).header("etag")
    );
}

#[test]
fn head_has_length_and_no_body() {
    let o = start();
    let r = request(o.addr(), "HEAD", "/obj/1m/3", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("1048576"));
    assert!(r.body.is_empty());
}

#[test]
fn errors() {
    let o = start();
    assert_eq!(request(o.addr(), "GET", "/nope", &[]).status, 404);
    assert_eq!(request(o.addr(), "GET", "/obj/4x/1", &[]).status, 400);
    assert_eq!(request(o.addr(), "GET", "/obj/4k/a%20b", &[]).status, 400);
    assert_eq!(
        request(o.addr(), "GET", "/obj/4k/1?delay_ms=x", &[]).status,
        400
    );
    // Unsafe methods succeed (caches invalidate on them); others are refused.
    assert_eq!(
        request(o.addr(), "POST", "/obj/4k/1", &[("Content-Length", "0")]).status,
        200
    );
    assert_eq!(
        request(o.addr(), "PATCH", "/obj/4k/1", &[("Content-Length", "0")]).status,
        405
    );
    assert_eq!(request(o.addr(), "GET", "/obj/999g/1", &[]).status, 400);
}

#[test]
fn cache_control_override() {
    let o = start();
    let r = request(o.addr(), "GET", "/obj/4k/1?cc=private,%20no-store", &[]);
    assert_eq!(r.header("cache-control"), Some("private, no-store"));
    let r = request(o.addr(), "GET", "/obj/4k/1?cc=", &[]);
    assert_eq!(r.header("cache-control"), None);
    let r = request(o.addr(), "GET", "/obj/4k/1?cc=none", &[]);
    assert_eq!(r.header("cache-control"), None);
    let r = request(
        o.addr(),
        "GET",
        "/obj/4k/1?cc=max-age%3D5&hdr=Set-Cookie:a%3Db&hdr=Vary:Accept",
        &[],
    );
    assert_eq!(r.header("cache-control"), Some("max-age=5"));
    assert_eq!(r.header("set-cookie"), Some("a=b"));
    assert_eq!(r.header("vary"), Some("Accept"));
    check_body(4096, 1, &r.body).unwrap();
    let o2 = OriginHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        OriginOptions {
            max_age: 60,
            threads: 1,
            ..OriginOptions::default()
        },
    )
    .unwrap();
    let r = request(o2.addr(), "GET", "/obj/4k/1", &[]);
    assert_eq!(r.header("cache-control"), Some("public, max-age=60"));
}

#[test]
fn chunked_body() {
    let o = start();
    for (s, size) in [("100k", 102_400u64), ("1m", 1 << 20), ("10", 10)] {
        let r = request(o.addr(), "GET", &format!("/obj/{s}/9?chunked=1"), &[]);
        assert_eq!(r.status, 200);
        assert!(r.chunked);
        assert_eq!(r.header("content-length"), None);
        check_body(size, 9, &r.body).unwrap();
    }
}

#[test]
fn cut_truncates() {
    let o = start();
    for (size, cut) in [
        (1u64 << 20, 1000u64),
        (1 << 20, 65_536),
        (1 << 20, 200_000),
        (4096, 0),
    ] {
        let r = request(o.addr(), "GET", &format!("/obj/{size}/5?cut={cut}"), &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some(size.to_string().as_str()));
        assert!(r.truncated, "size {size} cut {cut}");
        assert_eq!(r.body.len() as u64, cut, "size {size} cut {cut}");
        assert_eq!(r.body[..], expected_body(size, 5)[..cut as usize]);
    }
    // cut >= size is a whole response.
    let r = request(o.addr(), "GET", "/obj/4k/5?cut=4k", &[]);
    assert!(!r.truncated);
    check_body(4096, 5, &r.body).unwrap();
}

#[test]
fn status_delay_slow() {
    let o = start();
    let r = request(o.addr(), "GET", "/obj/4k/1?status=503", &[]);
    assert_eq!(r.status, 503);
    check_body(4096, 1, &r.body).unwrap();
    let r = request(o.addr(), "GET", "/obj/4k/1?status=204", &[]);
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());

    let t = Instant::now();
    let r = request(o.addr(), "GET", "/obj/4k/1?delay_ms=200", &[]);
    assert!(t.elapsed() >= Duration::from_millis(200));
    check_body(4096, 1, &r.body).unwrap();

    // 4 chunks of 64 KiB -> 3 pauses.
    let t = Instant::now();
    let r = request(o.addr(), "GET", "/obj/256k/1?slow_ms=100", &[]);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    check_body(256 * 1024, 1, &r.body).unwrap();
}

#[test]
fn conditional_requests() {
    let o = start();
    let r = request(o.addr(), "GET", "/obj/4k/8", &[]);
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();

    let r = request(o.addr(), "GET", "/obj/4k/8", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(r.header("cache-control"), Some("public, max-age=3600"));
    let weak = format!("\"x\", W/{etag}");
    assert_eq!(
        request(o.addr(), "GET", "/obj/4k/8", &[("If-None-Match", &weak)]).status,
        304
    );
    assert_eq!(
        request(o.addr(), "GET", "/obj/4k/8", &[("If-None-Match", "*")]).status,
        304
    );
    assert_eq!(
        request(
            o.addr(),
            "GET",
            "/obj/4k/8",
            &[("If-None-Match", "\"other\"")]
        )
        .status,
        200
    );
    // Another object's etag does not match.
    assert_eq!(
        request(o.addr(), "GET", "/obj/4k/9", &[("If-None-Match", &etag)]).status,
        200
    );

    assert_eq!(
        request(o.addr(), "GET", "/obj/4k/8", &[("If-Modified-Since", &lm)]).status,
        304
    );
    assert_eq!(
        request(
            o.addr(),
            "GET",
            "/obj/4k/8",
            &[("If-Modified-Since", "Wed, 31 Dec 2025 23:59:59 GMT")]
        )
        .status,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    assert_eq!(
        request(
            o.addr(),
            "GET",
            "/obj/4k/8",
            &[("If-None-Match", "\"other\""), ("If-Modified-Since", &lm)]
        )
        .status,
        200
    );
    let stats = request(o.addr(), "GET", "/__stats", &[]);
    let v: serde_json::Value = serde_json::from_slice(&stats.body).unwrap();
    assert_eq!(v["not_modified"], 4);
}

#[test]
fn counters_and_stats() {
    let o = start();
    for _ in 0..3 {
        request(o.addr(), "GET", "/obj/4k/1", &[]);
    }
    request(o.addr(), "GET", "/obj/4k/2", &[]);
    request(o.addr(), "HEAD", "/obj/4k/2", &[]);
    request(o.addr(), "GET", "/obj/4k/2?cut=10", &[]);
    request(o.addr(), "GET", "/missing", &[]);
    assert_eq!(o.requests(), 7);
    assert_eq!(o.requests_for("/obj/4k/1"), 3);
    assert_eq!(o.requests_for("/obj/4k/2"), 2);
    assert_eq!(o.requests_for("/obj/4k/2?cut=10"), 1);
    assert_eq!(o.requests_for("/obj/4k/3"), 0);

    // /__stats and /__health are not counted.
    let r = request(o.addr(), "GET", "/__stats?path=/obj/4k/1", &[]);
    request(o.addr(), "GET", "/__health", &[]);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["requests"], 7);
    assert_eq!(v["path_requests"], 3);
    assert_eq!(v["distinct_paths"], 4);
    assert_eq!(v["max_per_path"], 3);
    let r = request(o.addr(), "GET", "/__stats?paths=1", &[]);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["paths"]["/obj/4k/2?cut=10"], 1);
    assert_eq!(o.requests(), 7);

    assert_eq!(request(o.addr(), "GET", "/__reset", &[]).status, 405);
    assert_eq!(
        request(o.addr(), "POST", "/__reset", &[("Content-Length", "0")]).status,
        200
    );
    assert_eq!(o.requests(), 0);
    assert_eq!(o.requests_for("/obj/4k/1"), 0);
    request(o.addr(), "GET", "/obj/4k/1", &[]);
    assert_eq!(o.requests_for("/obj/4k/1"), 1);
    o.reset();
    assert_eq!(o.requests(), 0);
}

#[test]
fn keep_alive_and_concurrency() {
    let o = start();
    // Many requests on one keep-alive connection.
    let mut s = TcpStream::connect(o.addr()).unwrap();
    for i in 0..50 {
        let last = i == 49;
        let req = format!(
            "GET /obj/100/{i} HTTP/1.1\r\nHost: o\r\n{}\r\n",
            if last { "Connection: close\r\n" } else { "" }
        );
        s.write_all(req.as_bytes()).unwrap();
    }
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    assert_eq!(raw.windows(12).filter(|w| w == b"HTTP/1.1 200").count(), 50);
    // Parallel clients.
    let addr = o.addr();
    let hs: Vec<_> = (0..32)
        .map(|i| {
            std::thread::spawn(move || {
                request(addr, "GET", &format!("/obj/100k/{i}?delay_ms=50"), &[])
            })
        })
        .collect();
    for (i, h) in hs.into_iter().enumerate() {
        let r = h.join().unwrap();
        check_body(102_400, i, &r.body).unwrap();
    }
    assert_eq!(o.requests(), 82);
    assert!(o.max_in_flight() > 1);
}

#[tokio::test(flavor = "current_thread")]
async fn async_spawn_and_drop() {
    let o = spawn("127.0.0.1:0".parse().unwrap(), OriginOptions::default())
        .await
        .unwrap();
    let addr = o.addr();
    let r = tokio::task::spawn_blocking(move || request(addr, "GET", "/obj/4k/77", &[]))
        .await
        .unwrap();
    check_body(4096, 77, &r.body).unwrap();
    assert_eq!(o.requests_for("/obj/4k/77"), 1);
    drop(o);
    // The port is closed after drop.
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn serves_a_directory_under_files() {
    let dir = std::env::temp_dir().join(format!("ec-origin-files-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("pkg@1.0.0/dist")).unwrap();
    let js = "function f(x) { return x; }\n".repeat(100);
    std::fs::write(dir.join("pkg@1.0.0/dist/a.min.js"), &js).unwrap();
    std::fs::write(dir.join("pkg@1.0.0/x~y.css"), "not served: `~`").unwrap();
    let o = OriginHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        OriginOptions {
            files_dir: Some(dir.clone()),
            ..OriginOptions::default()
        },
    )
    .unwrap();
    let path = "/files/pkg@1.0.0/dist/a.min.js";
    let r = request(o.addr(), "GET", path, &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, js.as_bytes(), "as it is on disk, never compressed");
    assert_eq!(r.header("content-type"), Some("application/javascript"));
    assert_eq!(r.header("content-encoding"), None);
    let etag = r.header("etag").unwrap().to_string();
    assert!(
        etag.starts_with('"') && etag.ends_with('"'),
        "strong: {etag}"
    );
    let r = request(o.addr(), "GET", path, &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert_eq!(
        request(o.addr(), "GET", "/files/pkg@1.0.0/x~y.css", &[]).status,
        404
    );
    assert_eq!(request(o.addr(), "GET", "/files/nope.js", &[]).status, 404);
    assert_eq!(o.requests_for(path), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
