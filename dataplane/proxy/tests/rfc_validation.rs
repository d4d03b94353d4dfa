//! RFC 9111 4.3 (validation) through the server: conditional requests for stale entries, 304
//! updating the stored header fields (4.3.4, and the update survives a restart), a 200
//! replacing the stored response, and clients' own conditionals answered from the cache.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use rfc_support::*;

const LM: &str = "Thu, 01 Jan 2026 00:00:00 GMT";

#[test]
fn rfc9111_4_3_1_stale_entries_are_revalidated_with_if_none_match_and_if_modified_since() {
    let o = Scripted::start(|req, _| {
        if req.header("if-none-match").is_some() {
            resp(
                "304 Not Modified",
                &[("ETag", "\"v1\""), ("Cache-Control", "max-age=10")],
                b"",
            )
        } else {
            resp(
                "200 OK",
                &[
                    ("ETag", "\"v1\""),
                    ("Last-Modified", LM),
                    ("Cache-Control", "max-age=10"),
                ],
                b"one",
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.get("/c?x");
    advance(&dp, 30);
    let r = dp.get("/c?x");
    assert_eq!(r.body, b"one");
    assert!(
        r.cache_status().contains("fwd-status=304"),
        "{}",
        r.cache_status()
    );
    let seen = o.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].header("if-none-match"), None);
    assert_eq!(seen[1].header("if-none-match"), Some("\"v1\""));
    assert_eq!(seen[1].header("if-modified-since"), Some(LM));
    assert_eq!(seen[1].method, "GET");
}

#[test]
fn rfc9111_4_3_1_weak_validators_revalidate_too() {
    let o = Scripted::start(|req, _| {
        if req.header("if-none-match") == Some("W/\"w1\"") {
            resp(
                "304 Not Modified",
                &[("ETag", "W/\"w1\""), ("Cache-Control", "max-age=10")],
                b"",
            )
        } else {
            resp(
                "200 OK",
                &[("ETag", "W/\"w1\""), ("Cache-Control", "max-age=10")],
                b"weak",
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.get("/w");
    advance(&dp, 30);
    let r = dp.get("/w");
    assert_eq!(r.body, b"weak");
    assert!(
        r.cache_status().contains("fwd-status=304"),
        "{}",
        r.cache_status()
    );
    assert!(dp.get("/w").is_hit());
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9111_4_3_4_a_304_updates_the_stored_fields_and_the_update_survives_a_restart() {
    let o = Scripted::start(|req, _| {
        if req.header("if-none-match").is_some() {
            resp(
                "304 Not Modified",
                &[
                    ("ETag", "\"v1\""),
                    ("Cache-Control", "max-age=100000"),
                    ("X-Version", "2"),
                    // Content-Length of a 304 must not replace the stored one.
                    ("Content-Length", "999"),
                ],
                b"",
            )
        } else {
            resp(
                "200 OK",
                &[
                    ("ETag", "\"v1\""),
                    ("Cache-Control", "max-age=10"),
                    ("X-Version", "1"),
                    ("X-Kept", "yes"),
                ],
                b"body-v1",
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    assert_eq!(dp.get("/u").header("x-version"), "1");
    advance(&dp, 30);
    let r = dp.get("/u");
    assert_eq!(r.body, b"body-v1");
    assert_eq!(r.header("x-version"), "2", "updated by the 304");
    assert_eq!(r.header("x-kept"), "yes", "fields the 304 lacks are kept");
    assert_eq!(r.header("content-length"), "7");
    assert_eq!(r.header("cache-control"), "max-age=100000");
    let r = dp.get("/u");
    assert!(r.is_hit(), "fresh for max-age=100000: {}", r.cache_status());
    assert_eq!(r.header("x-version"), "2");
    assert_eq!(o.count(), 2);
    // The updated header block was written to the store, not just the index.
    let dp = dp.restart();
    let r = dp.get("/u");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("x-version"), "2");
    assert_eq!(r.header("cache-control"), "max-age=100000");
    assert_eq!(r.body, b"body-v1");
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9111_4_3_3_a_200_on_revalidation_replaces_the_stored_response() {
    let o = Scripted::start(|_, n| {
        let etag = format!("\"v{n}\"");
        resp(
            "200 OK",
            &[("ETag", etag.as_str()), ("Cache-Control", "max-age=10")],
            format!("body-{n}").as_bytes(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    assert_eq!(dp.get("/r").body, b"body-0");
    advance(&dp, 30);
    let r = dp.get("/r");
    assert_eq!(r.body, b"body-1");
    assert!(
        r.cache_status().contains("fwd-status=200"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.requests()[1].header("if-none-match"), Some("\"v0\""));
    let r = dp.get("/r");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.body, b"body-1");
    assert_eq!(r.header("etag"), "\"v1\"");
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9111_4_3_2_client_conditionals_are_answered_from_the_cache() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/cond";
    let etag = dp.get(p).header("etag").to_string();
    assert!(!etag.is_empty());
    let r = dp.request("GET", p, &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("etag"), etag);
    assert!(r.body.is_empty());
    let weak = format!("W/{etag}");
    let r = dp.request("GET", p, &[("If-None-Match", &format!("\"zzz\", {weak}"))]);
    assert_eq!(r.status, 304, "weak comparison for If-None-Match");
    let r = dp.request("GET", p, &[("If-None-Match", "\"other\"")]);
    assert_eq!(r.status, 200);
    check_body(4096, "cond", &r.body).unwrap();
    let r = dp.request("GET", p, &[("If-Modified-Since", LM)]);
    assert_eq!(r.status, 304);
    let r = dp.request(
        "GET",
        p,
        &[("If-Modified-Since", "Wed, 31 Dec 2025 00:00:00 GMT")],
    );
    assert_eq!(r.status, 200);
    let r = dp.request("HEAD", p, &[("If-None-Match", "*")]);
    assert_eq!(r.status, 304);
    assert_eq!(o.requests_for(p), 1, "all answered by the cache");
}

#[test]
fn rfc9111_4_3_2_if_match_is_left_to_the_origin() {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    let o = Scripted::start(move |req, _| {
        n2.fetch_add(1, Ordering::SeqCst);
        if req.header("if-match").is_some_and(|v| v != "\"a\"") {
            resp("412 Precondition Failed", &[], b"")
        } else {
            resp(
                "200 OK",
                &[("ETag", "\"a\""), ("Cache-Control", "max-age=600")],
                b"a",
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.get("/im");
    let r = dp.request("GET", "/im", &[("If-Match", "\"b\"")]);
    assert_eq!(r.status, 412);
    assert!(dp.get("/im").is_hit(), "the 412 did not replace the entry");
    assert_eq!(n.load(Ordering::SeqCst), 2);
}

#[test]
fn rfc9111_4_3_1_concurrent_requests_for_a_stale_entry_make_one_conditional_request() {
    let o = Scripted::start(|req, _| {
        if req.header("if-none-match").is_some() {
            std::thread::sleep(std::time::Duration::from_millis(500));
            resp(
                "304 Not Modified",
                &[("ETag", "\"c1\""), ("Cache-Control", "max-age=10")],
                b"",
            )
        } else {
            resp(
                "200 OK",
                &[("ETag", "\"c1\""), ("Cache-Control", "max-age=10")],
                b"shared-body",
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.get("/cc");
    advance(&dp, 30);
    let listen = dp.listen;
    let clients: Vec<_> = (0..6)
        .map(|_| std::thread::spawn(move || get(listen, "/cc", &[]).unwrap()))
        .collect();
    for c in clients {
        let r = c.join().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"shared-body");
    }
    let conditionals = o
        .requests()
        .iter()
        .filter(|r| r.header("if-none-match").is_some())
        .count();
    assert_eq!(
        conditionals, 1,
        "the others waited for the one revalidation"
    );
    // A client's own no-cache still gets its own validation.
    let r = dp.request("GET", "/cc", &[("Cache-Control", "no-cache")]);
    assert!(
        r.cache_status().contains("fwd=request"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.count(), 3);
}

#[test]
fn rfc9110_13_1_1_if_match_during_a_coalesced_miss_still_reaches_the_origin() {
    let o = Scripted::start(|req, _| {
        std::thread::sleep(std::time::Duration::from_millis(400));
        if req.header("if-match").is_some_and(|v| v != "\"a\"") {
            resp("412 Precondition Failed", &[], b"")
        } else {
            resp(
                "200 OK",
                &[("ETag", "\"a\""), ("Cache-Control", "max-age=600")],
                b"a",
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let listen = dp.listen;
    let plain = std::thread::spawn(move || get(listen, "/imc", &[]).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let r = get(listen, "/imc", &[("If-Match", "\"b\"")]).unwrap();
    assert_eq!(r.status, 412, "{}", r.cache_status());
    assert_eq!(plain.join().unwrap().status, 200);
    assert_eq!(o.count(), 2);
}
