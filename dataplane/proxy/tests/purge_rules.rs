//! Purges by prefix, tag and everything, hard and soft, through `POST /purge` on the admin
//! port: they take effect at once for clients, survive a restart, and a repeated id is a no-op.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

const KEY: &str = "http://test.example";

fn purge(dp: &Dataplane, query: &str) -> Resp {
    request(dp.admin, "POST", &format!("/purge?{query}"), &[], b"").unwrap()
}

/// Store `paths`, check each is then a hit.
fn store_all(dp: &Dataplane, paths: &[&str]) {
    for p in paths {
        assert_eq!(dp.get(p).status, 200);
        assert!(dp.get(p).is_hit(), "{p} is stored");
    }
}

#[test]
fn a_prefix_purge_removes_what_it_names_at_once_and_across_a_restart() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), "", 2, &[]);
    let named = ["/obj/4k/img-1", "/obj/4k/img-2?v=3"];
    let other = "/obj/4k/css-1";
    store_all(&dp, &[named[0], named[1], other]);
    let r = purge(
        &dp,
        &format!(
            "id=p1&prefix={}",
            percent_encode(&format!("{KEY}/obj/4k/img-"))
        ),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let answer = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        answer.contains(r#""rules":1"#) && answer.contains(r#""repeated":false"#),
        "{answer}"
    );
    // Named: gone at once (a miss, fetched again); the other: still a hit.
    assert!(dp.get(other).is_hit());
    let r = dp.get(named[1]);
    assert!(!r.is_hit(), "{}", r.cache_status());
    check_body(4096, "img-2", &r.body).unwrap();
    assert_eq!(o.requests_for(named[1]), 2);
    // A copy fetched in a later second than the purge is newer than it: kept. (The purge
    // covers its whole second: stored times are whole seconds.)
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(dp.get(named[1]).status, 200);
    assert!(dp.get(named[1]).is_hit());
    // named[0] was never asked for since the purge; a restart must not bring it back.
    let dp = dp.restart();
    assert!(dp.get(other).is_hit());
    let r = dp.get(named[0]);
    assert!(!r.is_hit(), "{}", r.cache_status());
    assert_eq!(o.requests_for(named[0]), 2);
    assert!(dp.metric(r#"edgecache_dataplane_purge_hits_total{verdict="remove"}"#) >= 1.0);
    // The operator retrying: nothing is done again.
    let r = purge(
        &dp,
        &format!(
            "id=p1&prefix={}",
            percent_encode(&format!("{KEY}/obj/4k/img-"))
        ),
    );
    assert!(String::from_utf8_lossy(&r.body).contains(r#""repeated":true"#));
    assert!(dp.get(named[1]).is_hit());
}

#[test]
fn a_tag_purge_names_surrogate_key_and_cache_tag_lists() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), "", 2, &[]);
    let red_blue = "/obj/4k/t1?hdr=Surrogate-Key:red%20blue";
    let blue = "/obj/4k/t2?hdr=Cache-Tag:green,blue";
    let green = "/obj/4k/t3?hdr=Surrogate-Key:green";
    store_all(&dp, &[red_blue, blue, green]);
    assert_eq!(purge(&dp, "id=tags-1&tag=blue").status, 200);
    assert!(!dp.get(red_blue).is_hit());
    assert!(!dp.get(blue).is_hit());
    assert!(dp.get(green).is_hit());
    assert_eq!(o.requests_for(green), 1);
}

#[test]
fn a_soft_purge_of_everything_makes_the_next_request_revalidate_and_keeps_the_object() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), "", 2, &[]);
    let p = "/obj/4k/soft-1";
    store_all(&dp, &[p]);
    assert_eq!(purge(&dp, "id=all-soft&all&soft").status, 200);
    // Stale now: revalidated with the origin (a 304), then fresh again.
    let r = dp.get(p);
    assert_eq!(r.status, 200);
    check_body(4096, "soft-1", &r.body).unwrap();
    assert!(
        r.cache_status().contains("fwd=stale"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.requests_for(p), 2);
    assert!(dp.metric(r#"edgecache_dataplane_purge_hits_total{verdict="stale"}"#) >= 1.0);
    // Revalidated in a later second than the purge (stored times are whole seconds, and a rule
    // covers its whole second), it is fresh again: hits, and the origin is asked no more.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(dp.get(p).status, 200);
    let asked = o.requests_for(p);
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(o.requests_for(p), asked);
}

/// An object served from the RAM tier, whose copy keeps the stored response decoded by its
/// first RAM hit: a soft purge still makes the next request revalidate (the purge's mark is
/// the request's own, never written into the kept response), and what is served after is the
/// object, fresh again.
#[test]
fn a_soft_purge_reaches_an_object_held_decoded_in_the_ram_tier() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), "", 1, &[]);
    let p = "/obj/4k/soft-ram";
    store_all(&dp, &[p]);
    let ram = r#"edgecache_dataplane_requests_total{cache="hit_ram"}"#;
    for _ in 0..3 {
        let r = dp.get(p);
        assert!(r.is_hit(), "{}", r.cache_status());
        check_body(4096, "soft-ram", &r.body).unwrap();
    }
    assert!(dp.metric(ram) >= 2.0, "served from the RAM tier");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(purge(&dp, "id=ram-soft&all&soft").status, 200);
    let r = dp.get(p);
    check_body(4096, "soft-ram", &r.body).unwrap();
    assert!(
        r.cache_status().contains("fwd=stale"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.requests_for(p), 2);
    // Revalidated again in a later second than the purge's (a rule covers its whole second),
    // then fresh: hits, the origin asked no more.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    check_body(4096, "soft-ram", &dp.get(p).body).unwrap();
    let asked = o.requests_for(p);
    for _ in 0..3 {
        let r = dp.get(p);
        assert!(r.is_hit(), "{}", r.cache_status());
        check_body(4096, "soft-ram", &r.body).unwrap();
    }
    assert_eq!(o.requests_for(p), asked);
}

#[test]
fn a_bad_purge_call_is_refused_with_the_reason() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), "", 1, &[]);
    for (q, why) in [
        ("prefix=x", "id:"),
        ("id=x", "name what to purge"),
        ("id=x&all&color=red", "unknown parameter"),
    ] {
        let r = purge(&dp, q);
        assert_eq!(r.status, 400, "{q}");
        assert!(String::from_utf8_lossy(&r.body).contains(why), "{q}");
    }
}

#[test]
fn a_purge_at_beyond_the_clock_is_refused_and_a_kept_one_is_dropped_at_load() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), "", 1, &[]);
    let p = "/obj/4k/at-1";
    store_all(&dp, &[p]);
    // u64::MAX overflowed the hit path; an hour ahead would disable caching for an hour.
    let in_an_hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    for q in [
        "id=far&all&soft&at=18446744073709551615".to_string(),
        format!("id=hour&all&at={in_an_hour}"),
        "id=zero&all&at=0".to_string(),
    ] {
        let r = purge(&dp, &q);
        assert_eq!(r.status, 400, "{q}: {}", String::from_utf8_lossy(&r.body));
        assert!(String::from_utf8_lossy(&r.body).contains("at:"), "{q}");
    }
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    // A rules file written before the check was made keeps such a rule: it is dropped at load,
    // with a log line, and hits go on.
    let dp = dp.restart_after(|| {
        std::fs::write(
            dir.path().join("cache/purges.jsonl"),
            "{\"id\":\"old\",\"selector\":{\"kind\":\"all\"},\"soft\":true,\
             \"at\":18446744073709551615,\"epoch\":1}\n",
        )
        .unwrap();
    });
    let r = dp.get(p);
    assert_eq!(r.status, 200);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert!(
        dp.log_text().contains("purge rule dropped"),
        "{}",
        dp.log_text()
    );
}

#[test]
fn a_purge_past_the_rule_cap_is_refused_with_507_and_the_reason() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp =
        Dataplane::start_with_yaml(&o.url(), dir.path(), "cache:\n  maxPurgeRules: 3\n", 1, &[]);
    assert_eq!(purge(&dp, "id=a&tag=t1&tag=t2").status, 200);
    let r = purge(&dp, "id=b&tag=t3&tag=t4");
    assert_eq!(r.status, 507, "{}", String::from_utf8_lossy(&r.body));
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("cache.maxPurgeRules") && body.contains('3'),
        "{body}"
    );
    // Within the cap it goes on.
    assert_eq!(purge(&dp, "id=c&tag=t3").status, 200);
}
