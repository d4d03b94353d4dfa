//! Hit-for-pass: once the origin's response for a key cannot be stored, later requests for the
//! key go straight to the origin (Cache-Status `fwd=bypass`) instead of queueing behind one
//! another's fetch, for `cache.hitForPass` (default 10 s) or the response's own max-age when it
//! is `private` or `no-store`.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;

fn start(o: &OriginHandle, dir: &std::path::Path, yaml: &str) -> Dataplane {
    Dataplane::start_with_yaml(&o.url(), dir, yaml, 2, &[])
}

#[test]
fn an_uncacheable_answer_sends_later_requests_straight_to_the_origin_for_a_while() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path(), "cache:\n  hitForPass: 1s\n");
    let p = "/obj/4k/hfp?cc=no-store";
    let first = dp.get(p);
    assert!(
        first.cache_status().contains("fwd=uri-miss"),
        "{}",
        first.cache_status()
    );
    for _ in 0..3 {
        let r = dp.get(p);
        assert_eq!(r.status, 200);
        check_body(4096, "hfp", &r.body).unwrap();
        let cs = r.cache_status();
        assert!(
            cs.contains("fwd=bypass") && cs.contains("detail=no-store"),
            "{cs}"
        );
    }
    // Past the pass, a request may lead a coalesced fetch again.
    std::thread::sleep(Duration::from_millis(1300));
    let r = dp.get(p);
    assert!(
        r.cache_status().contains("fwd=uri-miss"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.requests_for(p), 5);
    // A storable response's key never enters a pass.
    let q = "/obj/4k/hfp-ok";
    dp.get(q);
    assert!(dp.get(q).is_hit());
}

#[test]
fn a_private_answer_passes_for_its_own_max_age_and_zero_turns_it_off() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path(), "cache:\n  hitForPass: 1s\n");
    let p = "/obj/4k/priv?cc=private%2C%20max-age%3D3";
    dp.get(p);
    std::thread::sleep(Duration::from_millis(1500));
    let r = dp.get(p);
    assert!(
        r.cache_status().contains("fwd=bypass"),
        "{}",
        r.cache_status()
    );
    drop(dp);

    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path(), "cache:\n  hitForPass: 0s\n");
    let p = "/obj/4k/off?cc=no-store";
    dp.get(p);
    let r = dp.get(p);
    assert!(
        r.cache_status().contains("fwd=uri-miss"),
        "{}",
        r.cache_status()
    );
}

#[test]
fn a_request_side_reason_starts_no_pass() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path(), "");
    let p = "/obj/4k/reqns";
    // The client's own no-store says nothing of the response for others.
    let r = dp.request("GET", p, &[("Cache-Control", "no-store")]);
    assert_eq!(r.status, 200);
    let r = dp.get(p);
    assert!(
        r.cache_status().contains("fwd=uri-miss"),
        "{}",
        r.cache_status()
    );
    assert!(dp.get(p).is_hit());
}
