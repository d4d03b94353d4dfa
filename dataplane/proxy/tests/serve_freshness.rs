//! Freshness through the server, with a clock the test moves (`EDGECACHE_DEBUG_CLOCK=1` and
//! `POST /debug/clock?advance=N` on the admin port).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

fn start(origin_url: &str, dir: &std::path::Path, extra: &[&str]) -> Dataplane {
    let mut opts = Opts::new(origin_url, dir);
    opts.extra = extra.iter().map(|s| s.to_string()).collect();
    Dataplane::start_with(opts, |cmd| {
        cmd.env("EDGECACHE_DEBUG_CLOCK", "1");
    })
}

fn advance(dp: &Dataplane, secs: u64) {
    let r = request(
        dp.admin,
        "POST",
        &format!("/debug/clock?advance={secs}"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn fresh_then_stale_then_revalidated_with_a_304() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/8k/f?cc=max-age%3D60";
    dp.get(p);
    advance(&dp, 30);
    let r = dp.get(p);
    assert!(r.is_hit(), "fresh at 30s of 60: {}", r.cache_status());
    let age: u64 = r.header("age").parse().unwrap();
    assert!((30..=32).contains(&age), "Age {age}");
    advance(&dp, 40);
    let r = dp.get(p);
    assert!(
        r.cache_status().contains("fwd=stale"),
        "stale at 70s of 60: {}",
        r.cache_status()
    );
    assert!(
        r.cache_status().contains("fwd-status=304"),
        "revalidated with a 304: {}",
        r.cache_status()
    );
    check_body(8192, "f", &r.body).unwrap();
    assert_eq!(
        o.requests_for(p),
        2,
        "one fetch and one conditional request"
    );
    let stats = get(o.addr(), "/__stats", &[]).unwrap();
    assert!(
        String::from_utf8_lossy(&stats.body).contains("\"not_modified\":1"),
        "{}",
        String::from_utf8_lossy(&stats.body)
    );
}

#[test]
fn s_maxage_wins_over_max_age_for_a_shared_cache() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/s?cc=max-age%3D10%2C%20s-maxage%3D100";
    dp.get(p);
    advance(&dp, 50);
    assert!(dp.get(p).is_hit(), "s-maxage=100 keeps it fresh at 50s");
    assert_eq!(o.requests_for(p), 1);
}

#[test]
fn the_default_ttl_applies_only_where_the_config_sets_one() {
    let o = origin();
    // Without a default TTL, a response with no freshness information but a Last-Modified gets
    // a heuristic lifetime; with `cc=none&...` and no Last-Modified... the origin always sends
    // Last-Modified, so use a status the heuristic does not cover but default TTL would.
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &["--default-ttl", "30s"]);
    let p = "/obj/4k/ttl?cc=none";
    dp.get(p);
    let r = dp.get(p);
    assert!(
        r.is_hit(),
        "stored with the default TTL: {}",
        r.cache_status()
    );
    advance(&dp, 31 * 24 * 3600);
    let r = dp.get(p);
    assert!(
        !r.is_hit(),
        "stale after the TTL (and any heuristic): {}",
        r.cache_status()
    );
}

#[test]
fn only_if_cached_gives_504_when_nothing_is_stored() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let r = dp.request("GET", "/obj/4k/oic", &[("Cache-Control", "only-if-cached")]);
    assert_eq!(r.status, 504);
    assert_eq!(o.requests(), 0);
    dp.get("/obj/4k/oic");
    let r = dp.request("GET", "/obj/4k/oic", &[("Cache-Control", "only-if-cached")]);
    assert_eq!(r.status, 200);
    assert!(r.is_hit());
}
