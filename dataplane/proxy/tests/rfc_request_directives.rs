//! RFC 9111 5.2.1 (request directives) and 5.4 (Pragma) through the server, with the bench
//! origin (strong ETag, Last-Modified, 304 to conditionals) and a clock the test moves.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

#[test]
fn rfc9111_5_2_1_4_request_no_cache_revalidates_a_fresh_entry() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/nc?cc=max-age%3D600";
    dp.get(p);
    let r = dp.request("GET", p, &[("Cache-Control", "no-cache")]);
    assert_eq!(r.status, 200);
    assert!(
        r.cache_status().contains("fwd=request"),
        "{}",
        r.cache_status()
    );
    assert!(
        r.cache_status().contains("fwd-status=304"),
        "{}",
        r.cache_status()
    );
    check_body(4096, "nc", &r.body).unwrap();
    assert_eq!(o.requests_for(p), 2);
    assert_eq!(stat(&o, "not_modified"), 1, "a conditional request");
    assert!(dp.get(p).is_hit());
}

#[test]
fn rfc9111_5_4_pragma_no_cache_counts_only_without_cache_control() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/pragma?cc=max-age%3D600";
    dp.get(p);
    let r = dp.request("GET", p, &[("Pragma", "no-cache")]);
    assert!(
        r.cache_status().contains("fwd=request"),
        "{}",
        r.cache_status()
    );
    assert_eq!(stat(&o, "not_modified"), 1);
    // With Cache-Control present, Pragma is ignored.
    let r = dp.request(
        "GET",
        p,
        &[("Pragma", "no-cache"), ("Cache-Control", "max-stale=5")],
    );
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9111_5_2_1_5_request_no_store_is_not_stored_but_may_be_served_from_cache() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/ns?cc=max-age%3D600";
    let r = dp.request("GET", p, &[("Cache-Control", "no-store")]);
    check_body(4096, "ns", &r.body).unwrap();
    assert!(!r.cache_status().contains("stored"), "{}", r.cache_status());
    let r = dp.get(p);
    assert!(!r.is_hit(), "nothing was stored: {}", r.cache_status());
    // "If a request containing no-store is satisfied from a cache, the directive does not apply
    // to the already stored response."
    let r = dp.request("GET", p, &[("Cache-Control", "no-store")]);
    assert!(r.is_hit(), "{}", r.cache_status());
    check_body(4096, "ns", &r.body).unwrap();
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9111_5_2_1_1_request_max_age() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/ma?cc=max-age%3D600";
    dp.get(p);
    advance(&dp, 30);
    let r = dp.request("GET", p, &[("Cache-Control", "max-age=100")]);
    assert!(r.is_hit(), "age 30 <= 100: {}", r.cache_status());
    let r = dp.request("GET", p, &[("Cache-Control", "max-age=10")]);
    assert!(
        r.cache_status().contains("fwd=request"),
        "age 30 > 10: {}",
        r.cache_status()
    );
    assert!(
        r.cache_status().contains("fwd-status=304"),
        "{}",
        r.cache_status()
    );
    check_body(4096, "ma", &r.body).unwrap();
    // The 304 refreshed it (the origin's Date is real time while this test's clock moved
    // 30 s, so its apparent age stays about 30 s: RFC 9111 4.2.3).
    let r = dp.request("GET", p, &[("Cache-Control", "max-age=100")]);
    assert!(r.is_hit(), "{}", r.cache_status());
    // max-age=0 always validates.
    let r = dp.request("GET", p, &[("Cache-Control", "max-age=0")]);
    assert!(!r.is_hit(), "{}", r.cache_status());
    assert_eq!(o.requests_for(p), 3);
}

#[test]
fn rfc9111_5_2_1_2_request_max_stale_accepts_a_stale_entry_within_its_bound() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/ms?cc=max-age%3D10";
    dp.get(p);
    advance(&dp, 30); // 20 s stale
    for v in ["max-stale=60", "max-stale"] {
        let r = dp.request("GET", p, &[("Cache-Control", v)]);
        assert!(r.is_hit(), "{v}: {}", r.cache_status());
        assert_eq!(r.status, 200);
        check_body(4096, "ms", &r.body).unwrap();
        let age: u64 = r.header("age").parse().unwrap();
        assert!(age >= 30, "Age {age}");
    }
    assert_eq!(o.requests_for(p), 1);
    let r = dp.request("GET", p, &[("Cache-Control", "max-stale=5")]);
    assert!(
        r.cache_status().contains("fwd=stale"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9111_5_2_1_3_request_min_fresh() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/mf?cc=max-age%3D60";
    dp.get(p);
    advance(&dp, 30);
    let r = dp.request("GET", p, &[("Cache-Control", "min-fresh=10")]);
    assert!(r.is_hit(), "30 s left >= 10: {}", r.cache_status());
    let r = dp.request("GET", p, &[("Cache-Control", "min-fresh=40")]);
    assert!(
        r.cache_status().contains("fwd=request"),
        "30 s left < 40: {}",
        r.cache_status()
    );
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9111_5_2_1_7_only_if_cached() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/oic?cc=max-age%3D10";
    let oic = [("Cache-Control", "only-if-cached")];
    assert_eq!(dp.request("GET", p, &oic).status, 504);
    assert_eq!(o.requests_for(p), 0);
    dp.get(p);
    let r = dp.request("GET", p, &oic);
    assert_eq!(r.status, 200);
    assert!(r.is_hit());
    advance(&dp, 30);
    // Stale: only-if-cached does not revalidate; with max-stale the stale entry is acceptable.
    assert_eq!(dp.request("GET", p, &oic).status, 504);
    let r = dp.request(
        "GET",
        p,
        &[("Cache-Control", "only-if-cached, max-stale=60")],
    );
    assert_eq!(r.status, 200);
    check_body(4096, "oic", &r.body).unwrap();
    // A Vary mismatch is "nothing usable stored" too.
    assert_eq!(o.requests_for(p), 1);
}
