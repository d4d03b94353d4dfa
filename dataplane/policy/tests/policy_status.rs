//! Cache-Status (RFC 9211).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

use edgecache_policy::status::{CacheStatus, Fwd};
use http::HeaderMap;

#[test]
fn policy_cache_status_values_rfc9211_2() {
    let cases: &[(CacheStatus, &str)] = &[
        (CacheStatus::hit("edgecache"), "edgecache; hit"),
        (
            CacheStatus::hit("edgecache").ttl(30),
            "edgecache; hit; ttl=30",
        ),
        (
            CacheStatus::hit("edgecache").ttl(-5),
            "edgecache; hit; ttl=-5",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::UriMiss).stored(true),
            "edgecache; fwd=uri-miss; stored",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::Stale).fwd_status(304),
            "edgecache; fwd=stale; fwd-status=304",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::Bypass).detail("method"),
            "edgecache; fwd=bypass; detail=method",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::UriMiss).detail("no store"),
            "edgecache; fwd=uri-miss; detail=\"no store\"",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::VaryMiss).collapsed(true),
            "edgecache; fwd=vary-miss; collapsed",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::Request)
                .fwd_status(200)
                .stored(true),
            "edgecache; fwd=request; fwd-status=200; stored",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::Method),
            "edgecache; fwd=method",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::Miss),
            "edgecache; fwd=miss",
        ),
        (
            CacheStatus::forward("edgecache", Fwd::Partial),
            "edgecache; fwd=partial",
        ),
        (
            CacheStatus::hit("edgecache").key("http://h/\"x\""),
            "edgecache; hit; key=\"http://h/\\\"x\\\"\"",
        ),
        (CacheStatus::hit("1cache"), "\"1cache\"; hit"),
        (CacheStatus::hit("edge.cache-1"), "edge.cache-1; hit"),
        (
            CacheStatus::none("edgecache").detail("only-if-cached"),
            "edgecache; detail=only-if-cached",
        ),
    ];
    for (status, want) in cases {
        assert_eq!(status.to_string(), *want);
        assert_eq!(status.header_value().to_str().unwrap(), *want);
    }
}

#[test]
fn policy_plain_hits_are_written_as_the_formatter_writes_them() {
    for ttl in [0, 1, 9, 10, 42, 86_399, -1, -10, i64::MAX, i64::MIN] {
        let s = CacheStatus::hit("edgecache").ttl(ttl);
        assert_eq!(
            s.header_value().to_str().unwrap(),
            s.to_string(),
            "ttl {ttl}"
        );
        assert_eq!(s.to_string(), format!("edgecache; hit; ttl={ttl}"));
    }
    let quoted = CacheStatus::hit("edge cache").ttl(5);
    assert_eq!(
        quoted.header_value().to_str().unwrap(),
        "\"edge cache\"; hit; ttl=5"
    );
}

#[test]
fn policy_appended_after_upstream_members_rfc9211_2() {
    let mut h = HeaderMap::new();
    h.insert("cache-status", "origin-cache; hit".parse().unwrap());
    CacheStatus::forward("edgecache", Fwd::UriMiss).append_to(&mut h);
    let all: Vec<_> = h
        .get_all("cache-status")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(all, ["origin-cache; hit", "edgecache; fwd=uri-miss"]);
}
