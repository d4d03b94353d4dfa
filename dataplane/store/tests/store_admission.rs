//! `StoreConfig::admission` (issue 15 item 4): with second-hit admission, once the store is full,
//! a key's first fill is refused before anything is reserved or written, its second is written,
//! and a key already stored is always admitted; while the store has room every fill is written;
//! with `All` every fill is written.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use edgecache_store::{Admission, EngineChoice, Store, StoreError, StoreWorker, WriteKind};
use store_support::*;

fn second_hit(engine: EngineChoice) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut c = cfg(dir.path(), 64 * MIB, engine);
    c.admission = Admission::SecondHit;
    let store = Store::open(c).unwrap();
    let layout = store.layout();
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        // While the store has room, first fills are written: up to its capacity less two
        // segments, in 256 KiB objects.
        let fill = vec![3u8; 256 << 10];
        let mut n = 0;
        while store.stats().bytes_used + 2 * layout.segment_size < layout.capacity() {
            put(&w, &format!("/fill{n}"), "", "m", &fill, true, 4096)
                .await
                .unwrap();
            n += 1;
        }
        assert!(n > 10, "{n}");
        let before = store.stats();
        assert_eq!(before.admission_rejected, 0);
        assert_eq!(before.admitted_body_bytes, n * (256 << 10));

        // Full: a first fill is refused, and nothing is written for it.
        let body = content("/a", 1, 5000);
        let first = put(&w, "/a", "", "m", &body, true, 4096).await;
        assert!(matches!(first, Err(StoreError::NotAdmitted)), "{first:?}");
        let s = store.stats();
        assert_eq!(s.admission_rejected, 1);
        assert_eq!(
            s.disk_write_bytes, before.disk_write_bytes,
            "nothing written, not even a segment header"
        );
        assert!(store.lookup(b"/a").is_empty());
        // The second miss is admitted and stored.
        put(&w, "/a", "", "m", &body, true, 4096).await.unwrap();
        assert_eq!(get(&w, "/a").await.unwrap().1, body);
        // A stored key's next fill (a refetch after expiry, another variant) is admitted even
        // when the doorkeeper has not seen it: here, a variant never filled before.
        put(&w, "/a", "gzip", "m", &body, true, 4096).await.unwrap();
        let s = store.stats();
        assert_eq!(s.admission_rejected, 1);
        assert_eq!(s.admitted_body_bytes, before.admitted_body_bytes + 10_000);
        assert!(
            s.disk_write_bytes[WriteKind::Record as usize]
                > before.disk_write_bytes[WriteKind::Record as usize]
        );
        // Unknown length: refused at begin as well.
        let unknown = put(&w, "/b", "", "m", &body, false, 4096).await;
        assert!(matches!(unknown, Err(StoreError::NotAdmitted)));
    });
}

#[test]
fn uring_second_hit_keeps_first_fills_off_the_disk() {
    second_hit(EngineChoice::Uring);
}

#[test]
fn threads_second_hit_keeps_first_fills_off_the_disk() {
    second_hit(EngineChoice::Threads);
}

#[test]
fn admission_all_writes_every_fill() {
    let engine = EngineChoice::Threads;
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = Store::open(cfg(dir.path(), 64 * MIB, engine)).unwrap();
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/a", "", "m", b"x", true, 1).await.unwrap();
        assert!(get(&w, "/a").await.is_some());
        assert_eq!(store.stats().admission_rejected, 0);
    });
}

/// What a store keeps in RAM for admission and reinsertion is what the memory plan is told
/// (`edgecache_store::side_table_bytes`), and nothing with the plain FIFO log.
#[test]
fn side_tables_are_what_the_plan_is_told() {
    for (size, admission, reinsertion) in [
        (64 * MIB, Admission::SecondHit, true),
        (512 * MIB, Admission::SecondHit, false),
        (512 * MIB, Admission::All, true),
        (256 * MIB, Admission::All, false),
    ] {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut c = cfg(dir.path(), size, EngineChoice::Threads);
        c.admission = admission;
        c.reinsertion = reinsertion;
        let store = Store::open(c).unwrap();
        let planned =
            edgecache_store::side_table_bytes(store.layout().capacity(), admission, reinsertion);
        assert_eq!(
            store.side_table_bytes(),
            planned,
            "{size} {admission:?} {reinsertion}"
        );
        if admission == Admission::All && !reinsertion {
            assert_eq!(planned, 0);
        } else {
            assert!(planned > 0);
        }
    }
    // A 2 GiB store: a 1.25 MiB filter and 64 KiB of bits; the filter stops at 16 MiB.
    assert_eq!(
        edgecache_store::side_table_bytes(2 << 30, Admission::SecondHit, true),
        1_310_720 + 65_536
    );
    assert_eq!(
        edgecache_store::side_table_bytes(1 << 40, Admission::SecondHit, false),
        16 << 20
    );
}
