//! Issue 15 item 4, "kind to the flash", through the server: the disk bytes written are exported
//! by kind next to the body bytes admitted, and `storage.admission: second-hit` keeps a URL's
//! first fill off the disk while serving it.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

const PFX: &str = "edgecache_dataplane_";

/// One 10 KiB object stored: one segment header, one packed record (its header and body padded
/// together to 4 KiB blocks: at least 12 KiB), 10 KiB admitted; the bytes served are the proxy's response_body_bytes_total.
#[test]
fn disk_writes_are_exported_by_kind() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let r = dp.get("/obj/10000/w");
    assert_eq!(r.status, 200);
    assert!(dp.get("/obj/10000/w").is_hit());
    let text = dp.metrics();
    let v = |n: &str| metric_value(&text, &format!("{PFX}{n}"));
    assert_eq!(
        v("store_disk_write_bytes_total{kind=\"segment_header\"}"),
        4096.0,
        "{text}"
    );
    let record = v("store_disk_write_bytes_total{kind=\"record\"}");
    assert!(record >= 12288.0 && record % 4096.0 == 0.0, "{record}");
    assert_eq!(v("store_disk_write_bytes_total{kind=\"tombstone\"}"), 0.0);
    assert_eq!(
        v("store_disk_write_bytes_total{kind=\"meta_rewrite\"}"),
        0.0
    );
    assert_eq!(v("store_admitted_body_bytes_total"), 10000.0);
    assert_eq!(v("response_body_bytes_total"), 20000.0);
    assert_eq!(v("store_admission_rejected_total"), 0.0);
}

/// `storage.admission: second-hit`: while the store has room every miss is written; once it is
/// full the first miss of a URL is served whole and not written, the second is written, the
/// third is a hit; requests arriving together on a first miss share its fetch (one origin
/// request) although nothing is stored.
#[test]
fn second_hit_admission_serves_a_first_miss_without_writing_it() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let yaml = "storage:\n  admission: second-hit\n";
    let dp = Dataplane::start_sized_with_yaml(&o.url(), dir.path(), "64MiB", yaml, 2, &[]);
    let rejected = || dp.metric(&format!("{PFX}store_admission_rejected_total"));

    // First misses are written while the store has room: fill it with 1 MiB objects until one
    // is refused.
    let mut filled = 0;
    loop {
        let r = dp.get(&format!("/obj/1048576/fill{filled}"));
        assert_eq!(r.status, 200);
        if r.cache_status().contains("not_admitted") {
            break;
        }
        assert!(dp.get(&format!("/obj/1048576/fill{filled}")).is_hit());
        filled += 1;
        assert!(filled < 64, "a 64 MiB store took {filled} MiB");
    }
    assert!(filled >= 40, "written while there was room: {filled}");
    assert_eq!(rejected(), 1.0);
    let written = dp.metric(&format!(
        "{PFX}store_disk_write_bytes_total{{kind=\"record\"}}"
    ));
    let objects = dp.metric(&format!("{PFX}store_objects"));
    let fetched = o.requests();

    // Full: a first miss is served and not written.
    let first = dp.get("/obj/20000/once");
    assert_eq!(first.status, 200);
    check_body(20000, "once", &first.body).unwrap();
    assert!(
        first.cache_status().contains("not_admitted"),
        "{}",
        first.cache_status()
    );
    let text = dp.metrics();
    let v = |n: &str| metric_value(&text, &format!("{PFX}{n}"));
    assert_eq!(v("store_admission_rejected_total"), 2.0, "{text}");
    assert_eq!(v("store_disk_write_bytes_total{kind=\"record\"}"), written);
    assert_eq!(v("store_objects"), objects);
    let second = dp.get("/obj/20000/once");
    assert!(!second.is_hit());
    check_body(20000, "once", &second.body).unwrap();
    let third = dp.get("/obj/20000/once");
    assert!(third.is_hit(), "{}", third.cache_status());
    check_body(20000, "once", &third.body).unwrap();
    assert_eq!(o.requests(), fetched + 2);

    // Four at once on a first miss: one origin fetch, all four served, nothing written.
    let path = "/obj/30000/together?delay_ms=400";
    std::thread::scope(|s| {
        let all: Vec<_> = (0..4).map(|_| s.spawn(|| dp.get(path))).collect();
        for h in all {
            let r = h.join().unwrap();
            assert_eq!(r.status, 200);
            check_body(30000, "together", &r.body).unwrap();
        }
    });
    assert_eq!(o.requests(), fetched + 3, "the first miss was shared");
    assert_eq!(rejected(), 3.0);
}
