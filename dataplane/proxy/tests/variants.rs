//! Variants per key are capped (`storage.maxVariantsPerKey`, default 32): `Vary: User-Agent` and
//! a stream of random agents cannot grow one URL without bound; the oldest variant goes, the
//! newest stays a hit, and the cap holds across a restart (the recovery scan applies it too).

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
    // The index keeps a 7-bit tag of each variant key: two variants of a key whose tags
    // collide (about one run in three with ten variants) look the same to it, and the newer
    // replaces the older, as a replacement does. So the cap holds, but fewer than four may be
    // left.
    let objects = dp.metric("edgecache_dataplane_store_objects");
    let trimmed = dp.metric("edgecache_dataplane_store_variants_trimmed_total");
    assert!((1.0..=4.0).contains(&objects), "{objects}");
    assert!(
        trimmed <= 6.0 && objects + trimmed <= 10.0,
        "{objects} {trimmed}"
    );
    // The index's RAM and its bound are in /metrics.
    let index = dp.metric("edgecache_dataplane_store_index_bytes");
    assert!(index > 0.0 && index <= dp.metric("edgecache_dataplane_store_index_bound_bytes"));
    assert_eq!(
        dp.metric("edgecache_dataplane_store_index_evictions_total"),
        0.0
    );
    let hit = |dp: &Dataplane, i: u32| {
        dp.request("GET", p, &[("User-Agent", &format!("agent-{i}"))])
            .is_hit()
    };
    // The newest is a hit; the oldest went.
    assert!(hit(&dp, 9), "agent-9");
    let dp = dp.restart();
    assert_eq!(
        dp.metric("edgecache_dataplane_store_objects"),
        objects,
        "after the restart"
    );
    assert!(hit(&dp, 9), "agent-9 after the restart");
    assert!(!hit(&dp, 0), "agent-0 was dropped and stays dropped");
    assert_eq!(o.requests_for(p), 11);
}
