//! Issue 15 item 4, "kind to the flash", through the server: the disk bytes written are exported
//! by kind next to the body bytes admitted, and `storage.admission: second-hit` keeps a URL's
//! first fill off the disk while serving it.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

const PFX: &str = "edgecache_dataplane_";

/// One 10 KiB object stored: one segment header, one record of 4 KiB header plus 12 KiB padded
/// body, 10 KiB admitted; the bytes served are the proxy's response_body_bytes_total.
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
    assert!(record >= 16384.0 && record % 4096.0 == 0.0, "{record}");
    assert_eq!(v("store_disk_write_bytes_total{kind=\"tombstone\"}"), 0.0);
    assert_eq!(
        v("store_disk_write_bytes_total{kind=\"meta_rewrite\"}"),
        0.0
    );
    assert_eq!(v("store_admitted_body_bytes_total"), 10000.0);
    assert_eq!(v("response_body_bytes_total"), 20000.0);
    assert_eq!(v("store_admission_rejected_total"), 0.0);
}
