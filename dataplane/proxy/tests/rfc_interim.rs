//! 1xx interim responses from the origin (RFC 9110 15.2, RFC 8297 103 Early Hints): never
//! stored; the final response is relayed and stored as usual.
//!
//! What happens: the origin client (hyper's HTTP/1 client) consumes 1xx responses and hands
//! the data plane only the final response, so interim responses are dropped, not forwarded
//! (policy::interim would forward 103 to HTTP/1.1 clients; hyper gives no hook to do it).

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

#[test]
fn rfc9110_15_2_a_103_before_a_200_yields_a_correct_stored_200() {
    if skip_unless_root("rfc9110_15_2_a_103_before_a_200_yields_a_correct_stored_200") {
        return;
    }
    let o = Scripted::start(|_, n| {
        let mut out =
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n".to_vec();
        out.extend(b"HTTP/1.1 100 Continue\r\n\r\n");
        out.extend(resp(
            "200 OK",
            &[("Cache-Control", "max-age=600"), ("X-N", &n.to_string())],
            b"final body",
        ));
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let r = dp.get("/eh");
    assert_eq!(r.status, 200, "the final response, not the interim one");
    assert_eq!(r.body, b"final body");
    assert_eq!(r.header("x-n"), "0");
    let r = dp.get("/eh");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"final body");
    assert_eq!(
        r.header("link"),
        "",
        "the interim response's fields are not stored"
    );
    assert_eq!(o.count(), 1);
}

#[test]
fn rfc9110_10_1_1_expect_100_continue_from_a_client_gets_a_100_then_the_final_response() {
    if skip_unless_root("rfc9110_10_1_1_expect_100_continue") {
        return;
    }
    use std::io::{BufRead, BufReader, Write};
    let o = Scripted::start(|req, _| {
        let mut out = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        out.extend(resp("201 Created", &[], &req.body));
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let mut s = std::net::TcpStream::connect(dp.listen).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(
        b"POST /up HTTP/1.1\r\nHost: test.example\r\nContent-Length: 5\r\n\
          Expect: 100-continue\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 100"), "{line:?}");
    let mut blank = String::new();
    r.read_line(&mut blank).unwrap();
    assert_eq!(blank, "\r\n");
    s.write_all(b"hello").unwrap();
    let resp = read_response(&mut r, false).unwrap();
    assert_eq!(resp.status, 201);
    assert_eq!(resp.body, b"hello");
    assert_eq!(o.requests()[0].body, b"hello");
}
