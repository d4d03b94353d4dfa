//! Crash recovery: a child process (this test binary, re-run on `crash_child_helper`) writes,
//! replaces, purges and aborts objects with several writes in flight, writes index
//! checkpoints as it goes, and is SIGKILLed at a varying moment; the parent reopens the store
//! (from the last checkpoint and a scan of the segments written since) and checks that every
//! object it returns is byte-exact. 24 rounds per engine, on the same store directory.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgecache_store::EngineChoice;
use edgecache_store::{StoreError, StoreWorker};
use store_support::*;

const KEYS: u64 = 300;
const SIZES: [usize; 7] = [0, 100, 5000, 70_000, 300_000, 1_500_000, 3_000_000];
const ROUNDS: u64 = 24;

fn engine_from(s: &str) -> EngineChoice {
    if s == "uring" {
        EngineChoice::Uring
    } else {
        EngineChoice::Threads
    }
}

/// The child side: only does something when started by `crash_rounds`.
#[test]
#[ignore = "a child process of its parent test, which runs it with --ignored"]
fn crash_child_helper() {
    let (Ok(dir), Ok(engine)) = (
        std::env::var("EC_CRASH_DIR"),
        std::env::var("EC_CRASH_ENGINE"),
    ) else {
        return;
    };
    let engine = engine_from(&engine);
    let store = open(std::path::Path::new(&dir), 64 * MIB, engine);
    let seed0 = u64::from(std::process::id()) << 32;
    let started = Instant::now();
    run(engine, async move {
        let w = StoreWorker::new(store.clone()).unwrap();
        store.checkpoint().unwrap();
        let mut n: u64 = 0;
        // Bounded, in case the parent dies without killing us.
        while started.elapsed() < Duration::from_secs(30) {
            let mut batch = Vec::new();
            for _ in 0..3 {
                n += 1;
                let key = format!("/c{}", (n * 7919) % KEYS);
                let size = SIZES[(n % SIZES.len() as u64) as usize];
                let seed = seed0 + n;
                batch.push((key, seed, size, !n.is_multiple_of(4)));
            }
            let puts = batch.iter().map(|(key, seed, size, known)| {
                let body = content(key, *seed, *size);
                let meta = format!("{seed}:{size}");
                let w = &w;
                async move { put(w, key, "", &meta, &body, *known, 40_000).await }
            });
            for r in futures_util::future::join_all(puts).await {
                r.unwrap();
            }
            if n.is_multiple_of(10) {
                store.remove(format!("/c{}", n % KEYS).as_bytes());
            }
            if n.is_multiple_of(29) {
                // With the other writes of the batch in flight on this worker: none here.
                store.checkpoint().unwrap();
            }
            if n.is_multiple_of(7) {
                // An aborted write (client went away).
                let mut wr = w
                    .begin_write(
                        Bytes::from_static(b"/aborted"),
                        Bytes::new(),
                        Bytes::new(),
                        Some(200_000),
                    )
                    .unwrap();
                wr.write(Bytes::from(vec![9u8; 100_000])).await.unwrap();
            }
        }
    });
}

fn crash_rounds(engine: EngineChoice) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut seen_total = 0u64;
    let mut restored = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_helper",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("EC_CRASH_DIR", dir.path())
            .env(
                "EC_CRASH_ENGINE",
                if engine == EngineChoice::Uring {
                    "uring"
                } else {
                    "threads"
                },
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(150 + (round * 37) % 300));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let store = open(dir.path(), 64 * MIB, engine);
        restored += u32::from(store.restored_from_checkpoint());
        let stats = store.stats();
        assert!(stats.bytes_used <= stats.bytes_capacity);
        let seen = run(engine, async {
            let w = StoreWorker::new(store.clone()).unwrap();
            let mut seen = 0;
            for k in 0..KEYS {
                let key = format!("/c{k}");
                for r in store.lookup(key.as_bytes()) {
                    let obj = match w.open(&r).await {
                        Ok(o) => o,
                        // Restored from a checkpoint: the entry of an object purged since
                        // reads a dead header (a miss, and the entry leaves the index).
                        Err(StoreError::MissingOrReplaced) if store.restored_from_checkpoint() => {
                            continue;
                        }
                        Err(e) => panic!("round {round} {key}: {e}"),
                    };
                    let meta = std::str::from_utf8(&obj.meta).unwrap().to_string();
                    let (seed, size) = meta.split_once(':').unwrap();
                    let (seed, size): (u64, usize) = (seed.parse().unwrap(), size.parse().unwrap());
                    let body = collect(obj, None).await.unwrap();
                    assert!(
                        body == content(&key, seed, size),
                        "round {round} {key}: wrong bytes"
                    );
                    seen += 1;
                }
            }
            assert!(store.lookup(b"/aborted").is_empty());
            seen
        });
        assert_eq!(
            store.stats().corrupt_dropped,
            stats.corrupt_dropped,
            "no read-time corruption"
        );
        eprintln!(
            "round {round}: {seen} objects verified, recovered {}, torn/corrupt headers {}",
            stats.recovered_objects, stats.corrupt_dropped
        );
        seen_total += seen;
    }
    assert!(seen_total > 0, "no object ever survived a crash");
    assert!(restored > 0, "no start restored a checkpoint");
}

#[test]
fn sigkill_mid_writes_uring() {
    crash_rounds(EngineChoice::Uring);
}

#[test]
fn sigkill_mid_writes_threads() {
    crash_rounds(EngineChoice::Threads);
}
