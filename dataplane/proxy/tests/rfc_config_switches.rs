//! The operator's overrides of RFC 9111 defaults, through the server (issue 3, "config
//! switches"): ignore no-cache from clients, the cookie policy, and the cache's name in
//! Cache-Status (RFC 9211). The defaults conform and are tested in the other `rfc_*` files.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

fn start_with_config(o: &OriginHandle, dir: &std::path::Path, yaml: &str) -> Dataplane {
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    start(&o.url(), &cache, &["--config", path.to_str().unwrap()])
}

#[test]
fn rfc9111_5_2_1_4_ignore_client_no_cache_serves_fresh_entries() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start_with_config(&o, dir.path(), "cache:\n  ignoreClientNoCache: true\n");
    let p = "/obj/4k/inc?cc=max-age%3D600";
    dp.get(p);
    for h in [("Cache-Control", "no-cache"), ("Pragma", "no-cache")] {
        let r = dp.request("GET", p, &[h]);
        assert!(r.is_hit(), "{h:?}: {}", r.cache_status());
    }
    // A stale entry is still revalidated.
    advance(&dp, 700);
    assert!(
        !dp.request("GET", p, &[("Cache-Control", "no-cache")])
            .is_hit()
    );
    assert_eq!(o.requests_for(p), 2);
}

#[test]
fn rfc9111_7_3_cookie_policy_store_and_never_store() {
    let o = origin();
    let p = "/obj/4k/ck?cc=max-age%3D600&hdr=Set-Cookie:s%3D1";
    let pp = "/obj/4k/ckp?cc=public%2C%20max-age%3D600&hdr=Set-Cookie:s%3D1";

    let dir = tempfile::tempdir().unwrap();
    let dp = start_with_config(&o, dir.path(), "cache:\n  cookiePolicy: store\n");
    dp.get(p);
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("set-cookie"), "s=1", "stored and replayed");
    drop(dp);

    let dir = tempfile::tempdir().unwrap();
    let dp = start_with_config(&o, dir.path(), "cache:\n  cookiePolicy: never-store\n");
    dp.get(pp);
    assert!(!dp.get(pp).is_hit(), "not even with public");
}

#[test]
fn rfc9211_2_the_cache_name_appears_in_cache_status() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start_with_config(&o, dir.path(), "cache:\n  name: edge-fra1\n");
    let p = "/obj/4k/name";
    let r = dp.get(p);
    assert!(
        r.cache_status().starts_with("edge-fra1; fwd=uri-miss"),
        "{}",
        r.cache_status()
    );
    let r = dp.get(p);
    assert!(
        r.cache_status().starts_with("edge-fra1; hit"),
        "{}",
        r.cache_status()
    );
}
