//! The restart checkpoint: a clean stop's index comes back without a scan; after a kill, a
//! checkpoint plus a scan of the segments written since; a torn or damaged checkpoint falls
//! back to the full scan; a purge made after a checkpoint stays purged.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use std::fs;
use std::path::Path;

use edgecache_store::{EngineChoice, Store, StoreWorker};
use store_support::*;

const ENGINE: EngineChoice = EngineChoice::Threads;
const CKPT: &str = "index.ckpt";

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn key(i: usize) -> String {
    format!("/ck/{i}")
}

/// `n` objects (a few with two variants), then `/ck/0` purged.
fn fill(store: &std::sync::Arc<Store>, n: usize) {
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        for i in 0..n {
            let k = key(i);
            put(
                &w,
                &k,
                "",
                &format!("m{i}"),
                &content(&k, 0, 100 + i * 37),
                true,
                4096,
            )
            .await
            .unwrap();
        }
        for v in ["gzip", "br"] {
            put(&w, "/ck/var", v, v, v.as_bytes(), true, 10)
                .await
                .unwrap();
        }
        assert_eq!(store.remove(key(0).as_bytes()), 1);
    });
}

/// Every object of [`fill`] is there, whole, and `/ck/0` is not.
fn check(store: &std::sync::Arc<Store>, n: usize) {
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert!(get(&w, &key(0)).await.is_none(), "the purge holds");
        for i in 1..n {
            let k = key(i);
            let (meta, body) = get(&w, &k).await.unwrap_or_else(|| panic!("{k} lost"));
            assert_eq!(meta, format!("m{i}").as_bytes());
            assert!(body == content(&k, 0, 100 + i * 37), "{k}");
        }
        let mut vars: Vec<_> = refs(&w, "/ck/var")
            .await
            .into_iter()
            .map(|r| r.variant)
            .collect();
        vars.sort();
        assert_eq!(vars, ["br", "gzip"]);
    });
}

fn ckpt(dir: &Path) -> std::path::PathBuf {
    dir.join(CKPT)
}

/// A store of [`fill`]'s `n` objects after a clean stop: its directory, its checkpoint's path
/// and the checkpoint's bytes.
fn stopped_cleanly(n: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tmp();
    let store = open(dir.path(), 256 * MIB, ENGINE);
    fill(&store, n);
    store.checkpoint().unwrap();
    drop(store);
    let path = ckpt(dir.path());
    let bytes = fs::read(&path).unwrap();
    (dir, path, bytes)
}

#[test]
fn a_clean_stop_comes_back_from_its_checkpoint_without_a_scan() {
    let dir = tmp();
    let n = 500;
    let store = open(dir.path(), 256 * MIB, ENGINE);
    fill(&store, n);
    let objects = store.stats().objects;
    assert!(store.checkpoint().unwrap() > 0);
    drop(store);
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(store.restored_from_checkpoint());
    assert_eq!(store.stats().recovered_objects, objects);
    assert_eq!(store.stats().objects, objects);
    assert_eq!(
        store.replayed_segments(),
        1,
        "the segment active at the stop"
    );
    assert!(ckpt(dir.path()).exists(), "valid until replaced");
    check(&store, n);
    // Written to after the restore, killed (no checkpoint since): the checkpoint, and a scan of
    // the segment written since, find all of it.
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/ck/after", "", "a", b"after", true, 10)
            .await
            .unwrap();
    });
    drop(store);
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(store.restored_from_checkpoint());
    assert_eq!(store.replayed_segments(), 2);
    check(&store, n);
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert_eq!(get(&w, "/ck/after").await.unwrap().1, b"after");
    });
    // Without the checkpoint: the full scan, the same objects.
    drop(store);
    fs::remove_file(ckpt(dir.path())).unwrap();
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(!store.restored_from_checkpoint());
    assert_eq!(store.replayed_segments(), 0);
    check(&store, n);
}

#[test]
fn a_torn_or_damaged_checkpoint_falls_back_to_the_scan() {
    let n = 200;
    let (dir, path, whole) = stopped_cleanly(n);
    for damage in ["flip", "torn"] {
        let mut b = whole.clone();
        if damage == "flip" {
            let at = b.len() / 2;
            b[at] ^= 0x40;
        } else {
            b.truncate(b.len() - 1000);
        }
        fs::write(&path, &b).unwrap();
        let store = open(dir.path(), 256 * MIB, ENGINE);
        assert!(!store.restored_from_checkpoint(), "{damage}");
        check(&store, n);
        assert!(!path.exists());
        drop(store);
    }
}

#[test]
fn an_older_checkpoint_replays_the_log_since_and_a_later_purge_stays_purged() {
    let n = 200;
    let (dir, path, old) = stopped_cleanly(n);
    // Restored, then a purge, then a kill: the checkpoint is used, and the purged object's
    // entry is in it, but its header on disk is a tombstone.
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert_eq!(store.remove(key(1).as_bytes()), 1);
    drop(store);
    fs::write(&path, &old).unwrap();
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(store.restored_from_checkpoint());
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert!(
            get(&w, &key(1)).await.is_none(),
            "purged after the checkpoint"
        );
        assert!(get(&w, &key(2)).await.is_some());
    });
    // Written to after the checkpoint (a reclaim: a segment has a new epoch), /ck/2 replaced
    // and /ck/3 purged; killed. The old checkpoint, and a scan of that segment: the new
    // objects, the replacement (not the entry of the old record) and both purges.
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/ck/new", "", "n", b"new", true, 10).await.unwrap();
        put(&w, &key(2), "", "m2b", b"two again", true, 10)
            .await
            .unwrap();
        assert_eq!(store.remove(key(3).as_bytes()), 1);
    });
    drop(store);
    fs::write(&path, &old).unwrap();
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(store.restored_from_checkpoint());
    assert!(store.replayed_segments() >= 1);
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert_eq!(get(&w, "/ck/new").await.unwrap().1, b"new");
        let r = refs(&w, &key(2)).await;
        assert_eq!(r.len(), 1, "one record of /ck/2 left");
        assert_eq!(get(&w, &key(2)).await.unwrap().1, b"two again");
        assert!(get(&w, &key(1)).await.is_none());
        assert!(get(&w, &key(3)).await.is_none());
        assert!(get(&w, &key(4)).await.is_some());
    });
}

#[test]
fn another_index_bound_scans() {
    let dir = tmp();
    let store = open(dir.path(), 256 * MIB, ENGINE);
    fill(&store, 50);
    store.checkpoint().unwrap();
    drop(store);
    let mut c = cfg(dir.path(), 256 * MIB, ENGINE);
    c.index_bytes = 1 << 20;
    let store = Store::open(c).unwrap();
    assert!(!store.restored_from_checkpoint());
    check(&store, 50);
}

#[test]
fn a_checkpoint_is_due_after_a_few_reclaims() {
    let dir = tmp();
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(!store.checkpoint_due());
    let seg = store.layout().segment_size as usize;
    let body = vec![7u8; seg / 2];
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let mut i = 0;
        while !store.checkpoint_due() {
            put(&w, &format!("/due/{i}"), "", "m", &body, true, 1 << 20)
                .await
                .unwrap();
            i += 1;
        }
        // Four reclaims: a segment holds one such body.
        assert_eq!(i, 4);
        store.checkpoint().unwrap();
        assert!(!store.checkpoint_due());
    });
}
