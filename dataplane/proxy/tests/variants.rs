//! Variants per key are capped (`storage.maxVariantsPerKey`, default 32): `Vary: User-Agent` and
//! a stream of random agents cannot grow one URL without bound; the oldest variant goes, the
//! newest stay hits, and the cap holds across a restart (the recovery scan applies it too).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

#[test]
fn the_oldest_variant_goes_past_the_cap_and_the_cap_survives_a_restart() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let yaml = "storage:\n  maxVariantsPerKey: 4\n";
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), yaml, 2, &[]);
    let p = "/obj/4k/vary?hdr=Vary:User-Agent";
    for i in 0..10 {
        let ua = format!("agent-{i}");
        let r = dp.request("GET", p, &[("User-Agent", &ua)]);
        assert!(!r.is_hit(), "{ua}");
    }
    assert_eq!(dp.metric("edgecache_dataplane_store_objects"), 4.0);
    assert_eq!(
        dp.metric("edgecache_dataplane_store_variants_trimmed_total"),
        6.0
    );
    let hit = |dp: &Dataplane, i: u32| {
        dp.request("GET", p, &[("User-Agent", &format!("agent-{i}"))])
            .is_hit()
    };
    // The four newest are hits; the oldest went.
    for i in 6..10 {
        assert!(hit(&dp, i), "agent-{i}");
    }
    let dp = dp.restart();
    assert_eq!(
        dp.metric("edgecache_dataplane_store_objects"),
        4.0,
        "after the restart"
    );
    for i in 6..10 {
        assert!(hit(&dp, i), "agent-{i} after the restart");
    }
    assert!(!hit(&dp, 0), "agent-0 was dropped and stays dropped");
    assert_eq!(o.requests_for(p), 11);
}
