//! 1xx interim responses from the origin (RFC 9110 15.2, RFC 8297 103 Early Hints): forwarded
//! to the client while the final response is awaited ("A proxy MUST forward 1xx responses
//! unless the proxy itself requested the generation of the 1xx response"), never to an
//! HTTP/1.0 client ("A server MUST NOT send a 1xx response to an HTTP/1.0 client"), never
//! stored; the final response is relayed and stored as usual.
//!
//! The scripted origin holds its final response back at a [`GATE`] until the test has read
//! the interim response, so "before the final response" is shown without timing.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use rfc_support::*;

const HINTS: &[u8] = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";

/// A client connection to the data plane: the stream to write to, a reader on it.
fn connect(dp: &Dataplane) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(dp.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

/// Read responses up to the final one: the interim (1xx) ones, and the final one.
fn read_until_final(r: &mut impl BufRead, head_only: bool) -> (Vec<Resp>, Resp) {
    let mut interim = Vec::new();
    loop {
        let resp = read_response(r, head_only).unwrap();
        if (100..200).contains(&resp.status) {
            interim.push(resp);
        } else {
            return (interim, resp);
        }
    }
}

fn statuses(interim: &[Resp]) -> Vec<u16> {
    interim.iter().map(|r| r.status).collect()
}

fn metric_interim(dp: &Dataplane, action: &str) -> f64 {
    dp.metric(&format!(
        "edgecache_dataplane_interim_responses_total{{action=\"{action}\"}}"
    ))
}

/// An origin that answers every request with [`HINTS`], then a cacheable 200 with `body` and
/// an `X-N` field counting the requests before it.
fn hints_then_200(body: &'static [u8]) -> Scripted {
    Scripted::start(move |_, n| {
        let mut out = HINTS.to_vec();
        out.extend(resp(
            "200 OK",
            &[("Cache-Control", "max-age=600"), ("X-N", &n.to_string())],
            body,
        ));
        out
    })
}

/// An origin that sends a 103 with two Link fields and a hop-by-hop field, then holds its
/// final response (a cacheable 200, "final body") back at the [`GATE`].
fn two_links_then_gated_200() -> Scripted {
    Scripted::start(|_, _| {
        let mut out = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\
                        Link: </app.js>; rel=preload\r\nConnection: X-Hop\r\nX-Hop: 1\r\n\r\n"
            .to_vec();
        out.extend(GATE);
        out.extend(resp(
            "200 OK",
            &[("Cache-Control", "max-age=600")],
            b"final body",
        ));
        out
    })
}

/// An origin whose first fill (a 200 "swr body", stale after 10 s, usable stale for 600) has
/// no 1xx; a revalidation gets a 103, then (after the [`GATE`]) its 304.
fn swr_origin_with_gated_revalidation() -> Scripted {
    Scripted::start(|req, _| {
        let cc = ("Cache-Control", "max-age=10, stale-while-revalidate=600");
        if req.header("if-none-match").is_some() {
            let mut out = HINTS.to_vec();
            out.extend(GATE);
            out.extend(resp("304 Not Modified", &[("ETag", "\"v1\""), cc], b""));
            out
        } else {
            resp("200 OK", &[("ETag", "\"v1\""), cc], b"swr body")
        }
    })
}

/// Wait (10 s at most) until `f` holds.
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn rfc9110_15_2_a_103_reaches_the_client_before_the_origin_sends_its_final_response() {
    let o = two_links_then_gated_200();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(b"GET /eh HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    // The origin sent its 103 and now holds the 200 back: the 103 arrives on its own.
    let early = read_response(&mut r, false).unwrap();
    assert_eq!(early.status, 103);
    assert_eq!(
        early.header("link"),
        "</style.css>; rel=preload, </app.js>; rel=preload"
    );
    assert_eq!(
        early.header("x-hop"),
        "",
        "hop-by-hop fields are not forwarded"
    );
    assert_eq!(early.header("connection"), "");
    assert_eq!(o.count(), 1);
    o.open_gate();
    let (interim, fin) = read_until_final(&mut r, false);
    assert_eq!(statuses(&interim), Vec::<u16>::new());
    assert_eq!(fin.status, 200);
    assert_eq!(fin.body, b"final body");
    assert_eq!(fin.header("link"), "");
    assert_eq!(metric_interim(&dp, "forward"), 1.0);
}

#[test]
fn rfc9111_3_a_103_before_a_200_yields_a_stored_200_without_the_interim_fields() {
    let o = hints_then_200(b"final body");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(b"GET /eh HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (interim, fin) = read_until_final(&mut r, false);
    assert_eq!(statuses(&interim), [103]);
    assert_eq!(interim[0].header("link"), "</style.css>; rel=preload");
    assert_eq!(fin.status, 200, "the final response, not the interim one");
    assert_eq!(fin.body, b"final body");
    assert_eq!(fin.header("x-n"), "0");
    // The stored response is the final one, without the interim response or its fields.
    let r = dp.get("/eh");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.status, 200, "no 1xx with a hit");
    assert_eq!(r.body, b"final body");
    assert_eq!(
        r.header("link"),
        "",
        "the interim response's fields are not stored"
    );
    assert_eq!(o.count(), 1);
}

#[test]
fn rfc9110_15_2_an_http_1_0_client_gets_no_1xx() {
    let o = hints_then_200(b"for 1.0");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(b"GET /old HTTP/1.0\r\nHost: test.example\r\n\r\n")
        .unwrap();
    let first = read_response(&mut r, false).unwrap();
    assert_eq!(first.status, 200, "the final response comes first");
    assert_eq!(first.body, b"for 1.0");
    assert_eq!(first.header("link"), "");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert_eq!(String::from_utf8_lossy(&rest), "", "nothing after it");
    assert_eq!(o.count(), 1);
    assert_eq!(metric_interim(&dp, "drop"), 1.0);
    assert_eq!(metric_interim(&dp, "forward"), 0.0);
}

#[test]
fn rfc9110_15_2_a_100_continue_the_client_did_not_ask_for_is_not_forwarded() {
    let o = Scripted::start(|_, _| {
        let mut out = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        out.extend(HINTS);
        out.extend(resp("200 OK", &[("Cache-Control", "max-age=600")], b"ok"));
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(b"GET /c HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (interim, fin) = read_until_final(&mut r, false);
    assert_eq!(
        statuses(&interim),
        [103],
        "the 100 is dropped, the 103 is not"
    );
    assert_eq!(fin.status, 200);
    assert_eq!(fin.body, b"ok");
    assert_eq!(metric_interim(&dp, "drop"), 1.0);
    assert_eq!(metric_interim(&dp, "forward"), 1.0);
}

#[test]
fn rfc9110_10_1_1_expect_100_continue_from_a_client_gets_a_100_then_the_final_response() {
    let o = Scripted::start(|req, _| {
        let mut out = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        out.extend(resp("201 Created", &[], &req.body));
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(
        b"POST /up HTTP/1.1\r\nHost: test.example\r\nContent-Length: 5\r\n\
          Expect: 100-continue\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 100"), "{line:?}");
    let mut blank = String::new();
    r.read_line(&mut blank).unwrap();
    assert_eq!(blank, "\r\n");
    s.write_all(b"hello").unwrap();
    // The data plane answered the expectation itself: the origin's 100 would be a second one.
    let resp = read_response(&mut r, false).unwrap();
    assert_eq!(resp.status, 201);
    assert_eq!(resp.body, b"hello");
    assert_eq!(o.requests()[0].body, b"hello");
}

#[test]
fn rfc9110_15_2_a_103_on_a_forwarded_post_reaches_the_client() {
    let o = Scripted::start(|req, _| {
        let mut out = HINTS.to_vec();
        out.extend(GATE);
        out.extend(resp("201 Created", &[], &req.body));
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(
        b"POST /form HTTP/1.1\r\nHost: test.example\r\nContent-Length: 5\r\n\
          Connection: close\r\n\r\nhello",
    )
    .unwrap();
    let early = read_response(&mut r, false).unwrap();
    assert_eq!(early.status, 103);
    assert_eq!(early.header("link"), "</style.css>; rel=preload");
    o.open_gate();
    let (interim, fin) = read_until_final(&mut r, false);
    assert_eq!(statuses(&interim), Vec::<u16>::new());
    assert_eq!(fin.status, 201);
    assert_eq!(fin.body, b"hello");
    assert_eq!(o.requests()[0].method, "POST");
}

#[test]
fn rfc9110_15_2_on_a_kept_alive_connection_only_the_request_it_answers_gets_a_103() {
    let o = hints_then_200(b"kept alive");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(b"GET /ka HTTP/1.1\r\nHost: test.example\r\n\r\n")
        .unwrap();
    let (interim, fin) = read_until_final(&mut r, false);
    assert_eq!(statuses(&interim), [103]);
    assert_eq!(fin.status, 200);
    assert_eq!(fin.body, b"kept alive");
    s.write_all(b"GET /ka HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let second = read_response(&mut r, false).unwrap();
    assert_eq!(second.status, 200, "a hit: no 1xx first");
    assert!(second.is_hit(), "{}", second.cache_status());
    assert_eq!(second.body, b"kept alive");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert_eq!(String::from_utf8_lossy(&rest), "", "nothing after it");
    assert_eq!(o.count(), 1);
    assert_eq!(metric_interim(&dp, "forward"), 1.0);
}

#[test]
fn rfc9110_15_2_a_background_revalidations_103_is_the_proxys_own_and_not_forwarded() {
    let o = swr_origin_with_gated_revalidation();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let (mut s, mut r) = connect(&dp);
    s.write_all(b"GET /swr HTTP/1.1\r\nHost: test.example\r\n\r\n")
        .unwrap();
    let (interim, fin) = read_until_final(&mut r, false);
    assert!(interim.is_empty());
    assert_eq!(fin.body, b"swr body");
    advance(&dp, 30);
    // Stale: served at once, revalidated in the background, on the same connection.
    s.write_all(b"GET /swr HTTP/1.1\r\nHost: test.example\r\n\r\n")
        .unwrap();
    let (interim, fin) = read_until_final(&mut r, false);
    assert_eq!(statuses(&interim), Vec::<u16>::new());
    assert!(
        fin.cache_status().contains("stale-while-revalidate"),
        "{}",
        fin.cache_status()
    );
    // The origin's 103 reached the data plane (and was dropped) while the revalidation waits.
    wait_until("the background revalidation's 103", || {
        metric_interim(&dp, "drop") == 1.0
    });
    s.write_all(b"GET /swr HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (interim, fin) = read_until_final(&mut r, false);
    assert_eq!(
        statuses(&interim),
        Vec::<u16>::new(),
        "nor to a later request"
    );
    assert_eq!(fin.status, 200);
    assert_eq!(fin.body, b"swr body");
    o.open_gate();
    assert_eq!(metric_interim(&dp, "forward"), 0.0);
    assert_eq!(o.count(), 2);
}

/// A prior-knowledge HTTP/2 connection to the data plane (the h2 crate's client, which shows
/// each interim response on its own), on a runtime of its own.
struct H2 {
    rt: tokio::runtime::Runtime,
    send: ::h2::client::SendRequest<bytes::Bytes>,
}

const H2_WAIT: Duration = Duration::from_secs(20);

impl H2 {
    fn open(dp: &Dataplane) -> H2 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let send = rt.block_on(async {
            let tcp = tokio::net::TcpStream::connect(dp.listen).await.unwrap();
            let (send, conn) = ::h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(conn);
            send.ready().await.unwrap()
        });
        H2 { rt, send }
    }

    /// Send `method path` with `body`; the response still to come.
    fn start(&mut self, method: &str, path: &str, body: &[u8]) -> ::h2::client::ResponseFuture {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("http://test.example{path}"));
        if !body.is_empty() {
            req = req.header("content-length", body.len());
        }
        let req = req.body(()).unwrap();
        let _guard = self.rt.enter();
        let (resp, mut stream) = self.send.send_request(req, body.is_empty()).unwrap();
        if !body.is_empty() {
            stream
                .send_data(bytes::Bytes::copy_from_slice(body), true)
                .unwrap();
        }
        resp
    }

    /// The next interim response on `resp`, or `None` when the final one came instead.
    fn interim(&self, resp: &mut ::h2::client::ResponseFuture) -> Option<http::Response<()>> {
        let next = std::future::poll_fn(|cx| resp.poll_informational(cx));
        self.rt
            .block_on(async { tokio::time::timeout(H2_WAIT, next).await })
            .expect("an interim or the final response in time")
            .map(|r| r.unwrap())
    }

    /// The final response: status, headers and the whole body.
    fn finish(&self, resp: ::h2::client::ResponseFuture) -> (http::response::Parts, Vec<u8>) {
        self.rt.block_on(async {
            let resp = tokio::time::timeout(H2_WAIT, resp).await.unwrap().unwrap();
            let (parts, mut body) = resp.into_parts();
            let mut out = Vec::new();
            while let Some(chunk) = tokio::time::timeout(H2_WAIT, body.data()).await.unwrap() {
                let chunk = chunk.unwrap();
                let _ = body.flow_control().release_capacity(chunk.len());
                out.extend_from_slice(&chunk);
            }
            (parts, out)
        })
    }
}

#[test]
fn rfc9113_8_1_over_http2_a_103_reaches_the_client_on_its_stream_before_the_final_response() {
    let o = two_links_then_gated_200();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let mut c = H2::open(&dp);
    let mut res = c.start("GET", "/eh", b"");
    // The origin sent its 103 and now holds the 200 back: the 103 arrives on its own.
    let early = c
        .interim(&mut res)
        .expect("a 103 before the final response");
    assert_eq!(early.status(), 103);
    let links: Vec<_> = early.headers().get_all("link").iter().collect();
    assert_eq!(
        links,
        ["</style.css>; rel=preload", "</app.js>; rel=preload"]
    );
    assert!(
        early.headers().get("x-hop").is_none(),
        "no hop-by-hop field"
    );
    assert_eq!(o.count(), 1);
    o.open_gate();
    assert!(c.interim(&mut res).is_none(), "then the final response");
    let (fin, body) = c.finish(res);
    assert_eq!(fin.status, 200);
    assert_eq!(body, b"final body");
    assert!(fin.headers.get("link").is_none());
    assert_eq!(metric_interim(&dp, "forward"), 1.0);
    // The stored response is the final one: a hit on the same connection gets no 1xx.
    let mut res = c.start("GET", "/eh", b"");
    assert!(c.interim(&mut res).is_none(), "no 1xx with a hit");
    let (hit, body) = c.finish(res);
    assert_eq!(hit.status, 200);
    assert_eq!(body, b"final body");
    assert!(
        hit.headers["cache-status"]
            .to_str()
            .unwrap()
            .contains("hit")
    );
    assert_eq!(o.count(), 1);
}

#[test]
fn rfc9110_15_2_over_http2_the_policy_is_the_same_a_100_not_asked_for_is_dropped() {
    let o = Scripted::start(|req, _| {
        let mut out = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        out.extend(HINTS);
        out.extend(resp("201 Created", &[], &req.body));
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let mut c = H2::open(&dp);
    let mut res = c.start("POST", "/form", b"hello");
    let early = c.interim(&mut res).expect("the 103");
    assert_eq!(early.status(), 103, "the origin's 100 was not the client's");
    assert!(c.interim(&mut res).is_none());
    let (fin, body) = c.finish(res);
    assert_eq!(fin.status, 201);
    assert_eq!(body, b"hello");
    assert_eq!(o.requests()[0].body, b"hello");
    assert_eq!(metric_interim(&dp, "forward"), 1.0);
    assert_eq!(metric_interim(&dp, "drop"), 1.0);
}

#[test]
fn over_http2_interim_responses_a_client_does_not_take_are_bounded() {
    // An origin that sends 2,000 103s of 200 bytes of fields each before its final response.
    let link = format!("</{}.css>; rel=preload", "x".repeat(170));
    let o = Scripted::start(move |_, _| {
        let one = format!("HTTP/1.1 103 Early Hints\r\nLink: {link}\r\n\r\n");
        let mut out = one.repeat(2_000).into_bytes();
        out.extend(resp("200 OK", &[("Cache-Control", "no-store")], b"fin"));
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let mut c = H2::open(&dp);
    let mut res = c.start("GET", "/many", b"");
    let mut got = 0;
    while let Some(r) = c.interim(&mut res) {
        assert_eq!(r.status(), 103);
        got += 1;
    }
    let (fin, body) = c.finish(res);
    assert_eq!((fin.status.as_u16(), body.as_slice()), (200, &b"fin"[..]));
    let forwarded = metric_interim(&dp, "forward");
    assert_eq!(f64::from(got), forwarded, "each one forwarded arrived");
    assert!(
        got > 0 && got < 2_000,
        "bounded per request ({got} of 2,000 forwarded)"
    );
    assert_eq!(forwarded + metric_interim(&dp, "drop"), 2_000.0);
}

#[test]
fn over_http2_a_background_revalidations_103_is_the_proxys_own_and_not_forwarded() {
    let o = swr_origin_with_gated_revalidation();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let mut c = H2::open(&dp);
    let res = c.start("GET", "/swr", b"");
    assert_eq!(c.finish(res).1, b"swr body");
    advance(&dp, 30);
    // Stale: served at once and revalidated in the background; its 103 is dropped.
    let mut res = c.start("GET", "/swr", b"");
    assert!(c.interim(&mut res).is_none(), "no 1xx with a stale hit");
    let (fin, body) = c.finish(res);
    assert_eq!(body, b"swr body");
    let status = fin.headers["cache-status"].to_str().unwrap().to_string();
    assert!(status.contains("stale-while-revalidate"), "{status}");
    wait_until("the background revalidation's 103", || {
        metric_interim(&dp, "drop") == 1.0
    });
    o.open_gate();
    assert_eq!(metric_interim(&dp, "forward"), 0.0);
}
