//! RFC 9111 5.2.2 (response directives), 3.5 (Authorization) and RFC 9213 (CDN-Cache-Control,
//! and the targeted EdgeCache-Cache-Control) through the server.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

#[test]
fn rfc9111_5_2_2_5_and_5_2_2_7_no_store_and_private_are_not_stored() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    for (p, why) in [
        ("/obj/4k/ns?cc=no-store%2C%20max-age%3D600", "no-store"),
        ("/obj/4k/pr?cc=private%2C%20max-age%3D600", "private"),
        ("/obj/4k/PR?cc=PRIVATE%2C%20max-age%3D600", "private"),
    ] {
        let r = dp.get(p);
        assert!(r.cache_status().contains(why), "{p}: {}", r.cache_status());
        assert!(!dp.get(p).is_hit());
        assert_eq!(o.requests_for(p), 2, "{p}");
    }
}

#[test]
fn rfc9111_5_2_2_4_response_no_cache_is_stored_but_always_revalidated() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/64k/rnc?cc=no-cache%2C%20max-age%3D600";
    let r = dp.get(p);
    assert!(r.cache_status().contains("stored"), "{}", r.cache_status());
    let bytes_after_fill = stat(&o, "body_bytes");
    for i in 1..=3 {
        let r = dp.get(p);
        assert_eq!(r.status, 200);
        assert!(
            r.cache_status().contains("fwd=stale"),
            "{}",
            r.cache_status()
        );
        assert!(
            r.cache_status().contains("fwd-status=304"),
            "{}",
            r.cache_status()
        );
        check_body(65536, "rnc", &r.body).unwrap();
        assert_eq!(stat(&o, "not_modified"), i);
    }
    assert_eq!(
        stat(&o, "body_bytes"),
        bytes_after_fill,
        "bodies came from the store"
    );
}

#[test]
fn rfc9111_5_2_2_2_must_revalidate_gives_an_error_not_stale_when_the_origin_is_down() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let mr = "/obj/4k/mr?cc=max-age%3D10%2C%20must-revalidate%2C%20stale-if-error%3D600";
    let sie = "/obj/4k/sie?cc=max-age%3D10%2C%20stale-if-error%3D600";
    dp.get(mr);
    dp.get(sie);
    advance(&dp, 30);
    o.shutdown();
    let r = dp.get(mr);
    assert_eq!(
        r.status,
        504,
        "must-revalidate: 504, not stale: {}",
        r.cache_status()
    );
    // Even a client that accepts stale does not get it.
    let r = dp.request("GET", mr, &[("Cache-Control", "max-stale")]);
    assert_eq!(r.status, 504, "{}", r.cache_status());
    // The same response without must-revalidate is served stale (RFC 5861 4).
    let r = dp.get(sie);
    assert_eq!(r.status, 200, "{}", r.cache_status());
    check_body(4096, "sie", &r.body).unwrap();
}

#[test]
fn rfc9111_5_2_2_10_s_maxage_forbids_serving_stale() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/sm?cc=s-maxage%3D10%2C%20stale-while-revalidate%3D600";
    dp.get(p);
    advance(&dp, 30);
    let r = dp.request("GET", p, &[("Cache-Control", "max-stale")]);
    assert!(
        r.cache_status().contains("fwd=stale"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9111_3_5_authorization_is_shared_only_with_public_s_maxage_or_must_revalidate() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let auth = [("Authorization", "Bearer a")];
    let other = [("Authorization", "Bearer b")];
    for p in [
        "/obj/4k/pub?cc=public%2C%20max-age%3D600",
        "/obj/4k/smx?cc=s-maxage%3D600",
    ] {
        dp.request("GET", p, &auth);
        let r = dp.request("GET", p, &other);
        assert!(r.is_hit(), "{p}: {}", r.cache_status());
        assert!(dp.get(p).is_hit());
        assert_eq!(o.requests_for(p), 1);
    }
    // must-revalidate also allows reuse for authorized requests (3.5), while fresh.
    let p = "/obj/4k/mrv?cc=max-age%3D600%2C%20must-revalidate";
    dp.request("GET", p, &auth);
    assert!(dp.request("GET", p, &other).is_hit());
    // Plain max-age: not stored for an authorized request.
    let p = "/obj/4k/plain?cc=max-age%3D600";
    let r = dp.request("GET", p, &auth);
    assert!(
        r.cache_status().contains("authorization"),
        "{}",
        r.cache_status()
    );
    assert!(!dp.request("GET", p, &auth).is_hit());
    assert!(!dp.get(p).is_hit(), "not stored, so not served to anyone");
    assert!(dp.get(p).is_hit());
    // Stored from an unauthenticated request, it is revalidated for an authorized one.
    let r = dp.request("GET", p, &auth);
    assert!(!r.is_hit(), "{}", r.cache_status());
}

#[test]
fn rfc9213_cdn_cache_control_takes_precedence_and_is_not_forwarded() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    // Cache-Control says no-store; CDN-Cache-Control lets this cache store for 60 s.
    let p = "/obj/4k/cdn?cc=no-store&hdr=CDN-Cache-Control:max-age%3D60";
    let r = dp.get(p);
    assert_eq!(r.header("cdn-cache-control"), "", "not forwarded");
    assert_eq!(
        r.header("cache-control"),
        "no-store",
        "Cache-Control goes downstream"
    );
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("cdn-cache-control"), "");
    assert_eq!(r.header("cache-control"), "no-store");
    advance(&dp, 90);
    assert!(
        !dp.get(p).is_hit(),
        "CDN-Cache-Control's max-age=60 governs"
    );
    // CDN-Cache-Control: no-store beats Cache-Control: max-age.
    let p = "/obj/4k/cdn2?cc=max-age%3D600&hdr=CDN-Cache-Control:no-store";
    dp.get(p);
    assert!(!dp.get(p).is_hit());
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9213_edgecache_cache_control_beats_cdn_cache_control() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/ecc?cc=no-store&hdr=CDN-Cache-Control:no-store\
             &hdr=EdgeCache-Cache-Control:max-age%3D60";
    let r = dp.get(p);
    assert_eq!(r.header("edgecache-cache-control"), "");
    assert_eq!(r.header("cdn-cache-control"), "");
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("edgecache-cache-control"), "");
    assert_eq!(r.header("cdn-cache-control"), "");
    let p = "/obj/4k/ecc2?cc=max-age%3D600&hdr=EdgeCache-Cache-Control:no-store";
    dp.get(p);
    assert!(!dp.get(p).is_hit());
}

#[test]
fn rfc9111_3_5_an_authorized_request_does_not_share_an_anonymous_fetch_in_flight() {
    let o = Scripted::start(|req, _| {
        std::thread::sleep(std::time::Duration::from_millis(400));
        let who = req
            .header("authorization")
            .unwrap_or("anonymous")
            .to_string();
        resp(
            "200 OK",
            &[("Cache-Control", "max-age=600")],
            who.as_bytes(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let listen = dp.listen;
    let anon = std::thread::spawn(move || get(listen, "/who", &[]).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let authed = get(listen, "/who", &[("Authorization", "Bearer alice")]).unwrap();
    assert_eq!(anon.join().unwrap().body, b"anonymous");
    assert_eq!(authed.body, b"Bearer alice", "{}", authed.cache_status());
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9111_5_2_2_4_and_5_2_2_7_qualified_no_cache_and_private_drop_only_the_listed_fields() {
    let o = Scripted::start(|_, _| {
        resp(
            "200 OK",
            &[
                (
                    "Cache-Control",
                    "max-age=600, no-cache=\"X-Secret\", private=\"X-User\"",
                ),
                ("X-Secret", "s"),
                ("X-User", "alice"),
                ("X-Public", "p"),
            ],
            b"shared",
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let r = dp.get("/q");
    assert_eq!(r.header("x-secret"), "s", "its own client gets every field");
    assert_eq!(r.header("x-user"), "alice");
    let r = dp.get("/q");
    assert!(
        r.is_hit(),
        "served without validation: {}",
        r.cache_status()
    );
    assert_eq!(r.body, b"shared");
    assert_eq!(r.header("x-secret"), "");
    assert_eq!(r.header("x-user"), "");
    assert_eq!(r.header("x-public"), "p");
    assert_eq!(o.count(), 1);
}

#[test]
fn rfc9111_5_2_2_3_must_understand_overrides_no_store_for_understood_status_codes() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/mu?cc=must-understand%2C%20no-store%2C%20max-age%3D600";
    dp.get(p);
    assert!(dp.get(p).is_hit(), "200 is understood: no-store is ignored");
    assert_eq!(o.requests_for(p), 1);
}
