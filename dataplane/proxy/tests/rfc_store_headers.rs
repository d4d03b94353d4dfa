//! RFC 9111 3.1 (storing header fields) and 5.1 (Age) through the server: hop-by-hop fields and
//! fields listed in Connection are neither stored nor forwarded, other fields are returned as
//! received, Age is generated, Date is preserved; Set-Cookie under the default cookie policy.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

#[test]
fn rfc9111_3_1_hop_by_hop_and_connection_listed_fields_are_not_stored() {
    let date = http_date_now();
    let o = Scripted::start(move |_, _| {
        resp(
            "200 OK",
            &[
                ("Cache-Control", "max-age=600"),
                ("Connection", "X-Hop, keep-alive"),
                ("Keep-Alive", "timeout=30"),
                ("X-Hop", "secret"),
                ("X-Kept", "a"),
                ("X-Kept", "b"),
                ("X-Odd-Case", "Value With  Spaces"),
                ("Date", &date),
                ("Age", "3"),
            ],
            b"hello",
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let first = dp.get("/h");
    let date = first.header("date").to_string();
    for r in [first, dp.get("/h")] {
        assert_eq!(r.body, b"hello");
        assert_eq!(r.header("x-hop"), "", "Connection-listed");
        assert_eq!(r.header("keep-alive"), "");
        assert_eq!(r.header("x-kept"), "a, b", "both lines, in order");
        assert_eq!(r.header("x-odd-case"), "Value With  Spaces");
        assert_eq!(r.header("date"), date, "Date preserved");
    }
    advance(&dp, 100);
    let r = dp.get("/h");
    assert!(r.is_hit());
    let age: u64 = r.header("age").parse().unwrap();
    assert!(
        (103..=106).contains(&age),
        "Age = 3 from upstream + 100 resident: {age}"
    );
    assert_eq!(r.header("x-hop"), "");
    assert_eq!(o.count(), 1);
}

#[test]
fn rfc9111_5_1_age_is_generated_on_hits_and_counts_upstream_age() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/age?cc=max-age%3D600&hdr=Age:50";
    dp.get(p);
    advance(&dp, 20);
    let r = dp.get(p);
    assert!(r.is_hit());
    let age: u64 = r.header("age").parse().unwrap();
    assert!((70..=73).contains(&age), "Age {age}");
    // An Age above the lifetime makes it stale at once.
    let p = "/obj/4k/age2?cc=max-age%3D600&hdr=Age:1000";
    dp.get(p);
    assert!(!dp.get(p).is_hit());
}

#[test]
fn rfc9111_3_set_cookie_is_stored_only_with_public_by_default() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/ck?cc=max-age%3D600&hdr=Set-Cookie:s%3D1";
    let r = dp.get(p);
    assert_eq!(r.header("set-cookie"), "s=1", "forwarded to its client");
    assert!(
        r.cache_status().contains("set-cookie"),
        "{}",
        r.cache_status()
    );
    assert!(!dp.get(p).is_hit());
    let p = "/obj/4k/ckp?cc=public%2C%20max-age%3D600&hdr=Set-Cookie:s%3D1";
    dp.get(p);
    assert!(dp.get(p).is_hit());
    // private=set-cookie: stored without the cookie.
    let p = "/obj/4k/ckq?cc=private%3D%22set-cookie%22%2C%20max-age%3D600&hdr=Set-Cookie:s%3D1";
    let r = dp.get(p);
    assert_eq!(r.header("set-cookie"), "s=1");
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(
        r.header("set-cookie"),
        "",
        "a qualified private field is not stored"
    );
}
