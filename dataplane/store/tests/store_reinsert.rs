//! Reinsertion (issue 15 item 4, `StoreConfig::reinsertion`): objects read since they were
//! written are copied ahead of their segment's reclaim, so an object asked for in every round
//! of the log outlives it, where FIFO alone evicts it with its segment; a copy never replaces
//! a newer response, and copies survive a restart. Over both I/O engines.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgecache_store::{EngineChoice, Store, StoreWorker, WriteKind};
use store_support::*;

const HOT: usize = 12;
const LEN: usize = 200 << 10;
/// Cold objects written in all: more than three times the 64 MiB store.
const COLD: usize = 1_100;

fn store(dir: &std::path::Path, engine: EngineChoice, reinsertion: bool) -> Arc<Store> {
    let mut c = cfg(dir, 64 * MIB, engine);
    c.reinsertion = reinsertion;
    Store::open(c).unwrap()
}

/// Wait until the reinsertion pass has looked at every segment in line so far (the test
/// writes faster than the pass would keep up on a disk).
fn settle(s: &Store) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.reinsertion_caught_up() {
        assert!(
            Instant::now() < deadline,
            "the reinsertion pass fell behind"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn hot(i: usize) -> String {
    format!("/hot/{i}")
}

/// Write the hot objects, then `COLD` cold ones, reading every hot object after each 20 cold
/// ones (a tenth of a segment). Returns how many hot objects were still stored at the end.
async fn workload(w: &StoreWorker) -> usize {
    for i in 0..HOT {
        put(
            w,
            &hot(i),
            "",
            "m",
            &content(&hot(i), 1, LEN),
            true,
            64 << 10,
        )
        .await
        .unwrap();
    }
    let mut alive = HOT;
    for c in 0..COLD {
        let key = format!("/cold/{c}");
        put(w, &key, "", "m", &content(&key, 1, LEN), true, 64 << 10)
            .await
            .unwrap();
        settle(w.store());
        if c % 20 == 0 {
            alive = 0;
            for i in 0..HOT {
                if let Some((_, body)) = get(w, &hot(i)).await {
                    assert!(body == content(&hot(i), 1, LEN), "{} byte exact", hot(i));
                    alive += 1;
                }
            }
        }
    }
    alive
}

fn hot_objects_outlive_the_log(engine: EngineChoice) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let s = store(dir.path(), engine, true);
    let alive = run(engine, {
        let s = s.clone();
        async move { workload(&StoreWorker::new(s).unwrap()).await }
    });
    let st = s.stats();
    assert_eq!(alive, HOT, "every hot object survived: {st:?}");
    assert!(st.evictions > 0, "the log wrapped: {st:?}");
    assert!(st.reinserted >= 3 * HOT as u64, "{st:?}");
    assert_eq!(st.reinserted_bytes, st.reinserted * LEN as u64);
    assert!(st.disk_write_bytes[WriteKind::Reinsert as usize] > st.reinserted_bytes);
    // Only hot objects were read: no cold one was copied.
    run(engine, {
        let s = s.clone();
        async move {
            let w = StoreWorker::new(s).unwrap();
            assert!(
                get(&w, "/cold/0").await.is_none(),
                "cold objects go by FIFO"
            );
        }
    });
    // The copies are records like any other: a restart finds them, one of each.
    drop(s);
    let s = store(dir.path(), engine, true);
    run(engine, async move {
        let w = StoreWorker::new(s.clone()).unwrap();
        for i in 0..HOT {
            assert_eq!(s.lookup(hot(i).as_bytes()).len(), 1, "{}", hot(i));
            let (_, body) = get(&w, &hot(i)).await.unwrap();
            assert!(body == content(&hot(i), 1, LEN));
        }
    });

    // The same workload without reinsertion: FIFO evicts them with their segment.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let s = store(dir.path(), engine, false);
    let alive = run(engine, {
        let s = s.clone();
        async move { workload(&StoreWorker::new(s).unwrap()).await }
    });
    assert_eq!(alive, 0, "{:?}", s.stats());
    assert_eq!(s.stats().reinserted, 0);
}

#[test]
fn uring_hot_objects_outlive_the_log() {
    hot_objects_outlive_the_log(EngineChoice::Uring);
}

#[test]
fn threads_hot_objects_outlive_the_log() {
    hot_objects_outlive_the_log(EngineChoice::Threads);
}

/// A copy is not made of a key another writer is storing (that writer's response may be newer
/// and would lose to the copy by reservation order), nor of a record the index replaced.
fn a_copy_never_wins_over_a_newer_response(engine: EngineChoice) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let s = store(dir.path(), engine, true);
    run(engine, {
        let s = s.clone();
        async move {
            let w = StoreWorker::new(s.clone()).unwrap();
            let (v1, v2) = (content("/k", 1, LEN), content("/k", 2, LEN));
            put(&w, "/k", "", "v1", &v1, true, 64 << 10).await.unwrap();
            put(&w, "/r", "", "r1", &v1, true, 64 << 10).await.unwrap();
            assert!(get(&w, "/k").await.is_some() && get(&w, "/r").await.is_some());
            // A new version of /k begins (its record reserved) and stays in flight; /r is
            // replaced outright.
            let mut wr = w
                .begin_write(
                    Bytes::from_static(b"/k"),
                    Bytes::new(),
                    Bytes::from_static(b"v2"),
                    Some(LEN as u64),
                )
                .unwrap();
            put(&w, "/r", "", "r2", &v2, true, 64 << 10).await.unwrap();
            // Fill the store past the segment that holds the originals.
            for c in 0..40 {
                let key = format!("/cold/{c}");
                put(&w, &key, "", "m", &content(&key, 1, LEN), true, 64 << 10)
                    .await
                    .unwrap();
                settle(&s);
            }
            let st = s.stats();
            assert_eq!(st.reinserted, 0, "{st:?}");
            wr.write(Bytes::from(v2.clone())).await.unwrap();
            wr.finish().await.unwrap();
            let (meta, body) = get(&w, "/k").await.unwrap();
            assert_eq!((&meta[..], body == v2), (&b"v2"[..], true));
            let (meta, body) = get(&w, "/r").await.unwrap();
            assert_eq!((&meta[..], body == v2), (&b"r2"[..], true));
        }
    });
}

#[test]
fn uring_a_copy_never_wins_over_a_newer_response() {
    a_copy_never_wins_over_a_newer_response(EngineChoice::Uring);
}

#[test]
fn threads_a_copy_never_wins_over_a_newer_response() {
    a_copy_never_wins_over_a_newer_response(EngineChoice::Threads);
}
