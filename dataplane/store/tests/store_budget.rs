//! The I/O buffer budget is a hard bound: many concurrent large streams (and writers) through a
//! worker with a small budget share it, wait for it, never exceed it, and every body is byte
//! exact. Memory is measured independently of the store's own accounting: a counting global
//! allocator tracks the live bytes of every 4096-aligned allocation (the store's I/O buffers
//! are the only ones) and their peak.
//!
//! One `#[test]` runs both engines one after the other, so the counter sees one store at a time.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use std::alloc::Layout;
use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use edgecache_store::EngineChoice;
use edgecache_store::StoreWorker;
use futures_util::StreamExt;
use store_support::counting::{self, Counting};
use store_support::*;

fn aligned(l: &Layout) -> bool {
    l.align() == 4096
}

#[global_allocator]
static ALLOC: Counting = Counting(aligned);

const OBJECTS: usize = 32;
const STREAMS: usize = 256;
const BUDGET: u64 = 4 * MIB;

#[test]
fn concurrent_streams_share_a_hard_budget() {
    for engine in [EngineChoice::Uring, EngineChoice::Threads] {
        streams_within_budget(engine);
    }
}

fn streams_within_budget(engine: EngineChoice) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = open(dir.path(), 256 * MIB, engine);
    run(engine, async {
        let w = Rc::new(StoreWorker::with_io_buffer_bytes(store.clone(), BUDGET).unwrap());
        assert_eq!(w.io_budget().capacity(), BUDGET);
        let base = counting::live();
        counting::reset_peak();

        // Writers: all objects at once (1 MiB + 123 bytes each), staging from the budget.
        let bodies: Vec<Vec<u8>> = (0..OBJECTS)
            .map(|i| content(&format!("/b/{i}"), 3, MIB as usize + 123))
            .collect();
        let puts = bodies.iter().enumerate().map(|(i, b)| {
            let w = w.clone();
            async move { put(&w, &format!("/b/{i}"), "", "m", b, true, 100_000).await }
        });
        for r in futures_util::future::join_all(puts).await {
            r.unwrap();
        }
        let write_peak = counting::peak() - base;
        assert!(
            write_peak as u64 <= BUDGET,
            "{engine:?}: writers peaked at {write_peak} aligned bytes, budget {BUDGET}"
        );

        // Readers: 256 streams of 1 MiB at once, each holding every chunk for a while (like
        // hyper waiting for the socket) before dropping it.
        counting::reset_peak();
        w.io_budget().reset_peak();
        let bodies = Rc::new(bodies);
        let reads = (0..STREAMS).map(|s| {
            let (w, bodies) = (w.clone(), bodies.clone());
            async move {
                let i = s % OBJECTS;
                let r = w.store().lookup(format!("/b/{i}").as_bytes()).remove(0);
                let obj = w.open(&r).await.unwrap();
                let mut st = pin!(obj.body(None));
                let mut got = 0;
                while let Some(c) = st.next().await {
                    let c = c.unwrap();
                    assert!(
                        c[..] == bodies[i][got..got + c.len()],
                        "stream {s}: bytes differ at {got}"
                    );
                    got += c.len();
                    for _ in 0..(s % 5) {
                        tokio::task::yield_now().await;
                    }
                    drop(c);
                }
                assert_eq!(got, bodies[i].len(), "stream {s}: short body");
            }
        });
        tokio::time::timeout(
            Duration::from_secs(120),
            futures_util::future::join_all(reads),
        )
        .await
        .expect("streams stalled: the budget must not deadlock");
        let peak = counting::peak() - base;
        let u = w.io_buffer_usage();
        assert!(
            peak as u64 <= BUDGET,
            "{engine:?}: read buffers peaked at {peak} aligned bytes, budget {BUDGET}"
        );
        assert!(u.peak <= BUDGET, "{engine:?}: accounted peak {}", u.peak);
        assert!(
            u.waits > 0,
            "{engine:?}: 256 streams of 1 MiB must have waited for a 4 MiB budget"
        );
        assert!(
            u.allocs < 200,
            "{engine:?}: buffers are recycled ({} fresh allocations)",
            u.allocs
        );
        // Everything came back: only pooled buffers remain, and they are within the budget.
        assert_eq!(u.charged, u.pooled, "{engine:?}: {u:?}");
        eprintln!("{engine:?}: peak {peak} aligned bytes of {BUDGET}; {u:?}");
    });
    drop(store);
}
