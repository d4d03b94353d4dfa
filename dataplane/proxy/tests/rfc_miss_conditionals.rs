//! A miss for a client that sent conditionals or a Range (RFC 9111 4.3.2, 3.4; RFC 9110 13):
//! the cache fetches the whole object without the client's validators, stores it, and answers
//! the client's own request from it, as it would answer a hit.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

#[test]
fn rfc9111_4_3_2_a_miss_with_a_matching_if_none_match_gets_a_304_and_the_object_is_stored() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/minm";
    // The bench origin's strong ETag is "<size hex>-<id>".
    let etag = "\"1000-minm\"";
    let r = dp.request("GET", p, &[("If-None-Match", etag)]);
    assert_eq!(r.status, 304, "{}", r.cache_status());
    assert_eq!(r.header("etag"), etag);
    assert!(r.body.is_empty());
    assert_eq!(
        stat(&o, "not_modified"),
        0,
        "the origin was asked for the whole object"
    );
    // The 304 goes out before the fill ends: the next request may still follow the fetch.
    let r = dp.get(p);
    assert!(
        r.is_hit() || r.cache_status().contains("collapsed"),
        "{}",
        r.cache_status()
    );
    check_body(4096, "minm", &r.body).unwrap();
    assert_eq!(o.requests_for(p), 1);
    // A non-matching tag on a miss gets the whole 200.
    let r = dp.request("GET", "/obj/4k/minm2", &[("If-None-Match", "\"nope\"")]);
    assert_eq!(r.status, 200);
    check_body(4096, "minm2", &r.body).unwrap();
    // If-Modified-Since on a miss.
    let r = dp.request(
        "GET",
        "/obj/4k/mims",
        &[("If-Modified-Since", "Thu, 01 Jan 2026 00:00:00 GMT")],
    );
    assert_eq!(r.status, 304);
    check_body(4096, "mims", &dp.get("/obj/4k/mims").body).unwrap();
    assert_eq!(o.requests_for("/obj/4k/mims"), 1);
    // HEAD with If-None-Match on a miss.
    let r = dp.request("HEAD", "/obj/4k/mhead", &[("If-None-Match", "*")]);
    assert_eq!(r.status, 304);
    check_body(4096, "mhead", &dp.get("/obj/4k/mhead").body).unwrap();
    assert_eq!(o.requests_for("/obj/4k/mhead"), 1);
}

#[test]
fn rfc9110_13_2_a_miss_that_is_not_stored_still_answers_the_clients_conditional() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/nsinm?cc=no-store";
    let r = dp.request("GET", p, &[("If-None-Match", "\"1000-nsinm\"")]);
    assert_eq!(r.status, 304, "{}", r.cache_status());
    let r = dp.request("GET", p, &[("Range", "bytes=0-9")]);
    assert_eq!(r.status, 206, "{}", r.cache_status());
    assert_eq!(r.body, &expected_body(4096, "nsinm")[0..10]);
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9111_4_concurrent_misses_with_different_conditionals_each_get_their_answer() {
    let o = origin_with(OriginOptions {
        delay: std::time::Duration::from_millis(300),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/cc";
    let listen = dp.listen;
    let hs: Vec<_> = [
        vec![],
        vec![("If-None-Match", "\"1000-cc\"")],
        vec![("Range", "bytes=10-19")],
    ]
    .into_iter()
    .map(|h| std::thread::spawn(move || (h.first().map(|x| x.0), get(listen, p, &h).unwrap())))
    .collect();
    let full = expected_body(4096, "cc");
    for h in hs {
        let (kind, r) = h.join().unwrap();
        match kind {
            None => {
                assert_eq!(r.status, 200);
                assert_eq!(r.body, full);
            }
            Some("If-None-Match") => {
                assert_eq!(r.status, 304, "{}", r.cache_status());
                assert!(r.body.is_empty());
            }
            _ => {
                assert_eq!(r.status, 206, "{}", r.cache_status());
                assert_eq!(r.body, &full[10..20]);
            }
        }
    }
    assert_eq!(o.requests_for(p), 1, "coalesced");
}
