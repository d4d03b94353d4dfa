//! The restart checkpoint: a clean stop's index comes back without a scan; a torn or stale
//! checkpoint falls back to the scan; a purge made after a checkpoint stays purged.

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
    assert!(
        !ckpt(dir.path()).exists(),
        "used once: deleted at the start"
    );
    check(&store, n);
    // Written to after the restore, killed (no checkpoint): the scan finds all of it.
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/ck/after", "", "a", b"after", true, 10)
            .await
            .unwrap();
    });
    drop(store);
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(!store.restored_from_checkpoint());
    check(&store, n);
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert_eq!(get(&w, "/ck/after").await.unwrap().1, b"after");
    });
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
fn a_stale_checkpoint_is_not_used_and_a_later_purge_stays_purged() {
    let n = 200;
    let (dir, path, old) = stopped_cleanly(n);
    // Restored, then a purge, then a stop without a checkpoint; the old checkpoint comes back
    // (as if its deletion had been lost). No segment was written since, so it is used: the
    // purged object's entry is in it, and its header on disk is a tombstone.
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
    // Written to after a checkpoint: a segment has a new epoch, and the old checkpoint is
    // stale. The scan finds the new object.
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/ck/new", "", "n", b"new", true, 10).await.unwrap();
    });
    drop(store);
    fs::write(&path, &old).unwrap();
    let store = open(dir.path(), 256 * MIB, ENGINE);
    assert!(
        !store.restored_from_checkpoint(),
        "stale: a segment was written since"
    );
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert_eq!(get(&w, "/ck/new").await.unwrap().1, b"new");
        assert!(get(&w, &key(1)).await.is_none());
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
