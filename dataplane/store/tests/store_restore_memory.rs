//! A start from the index checkpoint takes the index's RAM and little more (issue 15 items 1
//! and 2: the memory plan bounds the index, and a pod must not need twice its index to
//! start). Measured with a counting global allocator (every allocation), independently of the
//! store's own accounting. One test in this binary, so the counter sees one store.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use edgecache_store::{EngineChoice, Store, StoreWorker};
use store_support::counting::{self, Counting};
use store_support::*;

#[global_allocator]
static ALLOC: Counting = Counting(|_| true);

const ENGINE: EngineChoice = EngineChoice::Uring;

/// 196,000 small objects, a checkpoint, then a start from it: the allocations alive at the
/// start's peak are the index plus buffers of fixed size (the checkpoint's reader, the
/// recovery window of the segment scanned again), not a list of every entry (the accounting
/// once gathered every entry, 12 bytes each, in one growing vector: 8.7 MB at the peak for a
/// 3.9 MB index here, 5.0 MB now).
#[test]
fn a_start_from_the_checkpoint_takes_the_index_and_fixed_buffers() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (n, stored) = {
        let store = Store::open(cfg(dir.path(), 1024 * MIB, ENGINE)).unwrap();
        let n = store.layout().capacity() / 4096 * 3 / 4;
        let filled = store.clone();
        run(ENGINE, async move {
            let w = std::rc::Rc::new(StoreWorker::new(filled).unwrap());
            fill_small(&w, "/m/", n, 16).await;
        });
        let before = store.stats();
        store.checkpoint().unwrap();
        (n, before.objects)
    };
    let base = counting::live();
    counting::reset_peak();
    let store = Store::open(cfg(dir.path(), 1024 * MIB, ENGINE)).unwrap();
    let peak = (counting::peak() - base) as u64;
    assert!(store.restored_from_checkpoint());
    let s = store.stats();
    // Every object the index held (all but the few it dropped early, counted then).
    assert_eq!(s.objects, stored, "{n} written: {s:?}");
    let index = store.index_bytes();
    let limit = index + index / 8 + 2 * MIB;
    println!(
        "objects {} index {index} B, peak at the start {peak} B (limit {limit})",
        s.objects
    );
    assert!(
        peak <= limit,
        "a start took {peak} bytes at its peak for an index of {index}: {s:?}"
    );
}
