//! RFC 9111 2 (the cache key) through the server: scheme, host (case-insensitive, default port
//! removed) and path with query.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

#[test]
fn rfc9111_2_host_is_case_insensitive_and_the_default_port_is_removed() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let p = "/obj/4k/key";
    let r = dp.request("GET", p, &[("Host", "WWW.Example.COM")]);
    assert!(!r.is_hit());
    for host in [
        "www.example.com",
        "www.example.com:80",
        "WWW.EXAMPLE.COM:80",
    ] {
        let r = dp.request("GET", p, &[("Host", host)]);
        assert!(r.is_hit(), "{host}: {}", r.cache_status());
        check_body(4096, "key", &r.body).unwrap();
    }
    // Another port or another host is another key.
    assert!(
        !dp.request("GET", p, &[("Host", "www.example.com:8080")])
            .is_hit()
    );
    assert!(
        !dp.request("GET", p, &[("Host", "other.example.com")])
            .is_hit()
    );
    assert_eq!(o.requests_for(p), 3);
}

#[test]
fn rfc9111_2_the_query_is_part_of_the_key() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    dp.get("/obj/4k/q?a=1");
    assert!(dp.get("/obj/4k/q?a=1").is_hit());
    assert!(!dp.get("/obj/4k/q?a=2").is_hit());
    assert!(!dp.get("/obj/4k/q").is_hit());
    assert!(dp.get("/obj/4k/q?a=2").is_hit());
    assert_eq!(o.requests_for("/obj/4k/q?a=1"), 1);
    assert_eq!(o.requests_for("/obj/4k/q?a=2"), 1);
    assert_eq!(o.requests_for("/obj/4k/q"), 1);
}
