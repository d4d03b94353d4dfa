//! How large disk reads reach the disk: on both engines, a read of `io::READ_PIECE` (256 KiB)
//! or more runs on the store's pool threads as `pread`s of at most 256 KiB, one after another;
//! smaller reads stay on the worker's engine. Observed from the kernel's per-thread I/O counts
//! (`/proc/self/task/*/io`: `syscr` read calls, `rchar` bytes), so this file holds one test: the
//! pool threads of a parallel test would count too.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use edgecache_store::io::READ_PIECE;
use edgecache_store::{EngineChoice, Source, StoreWorker};
use store_support::*;

/// Read calls and bytes of this process's pool threads (named `ec-io-N`), summed.
fn pool_reads() -> (u64, u64) {
    let mut calls = 0;
    let mut bytes = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("ec-io-") {
            continue;
        }
        let io = std::fs::read_to_string(t.path().join("io")).unwrap_or_default();
        for line in io.lines() {
            if let Some(v) = line.strip_prefix("syscr: ") {
                calls += v.trim().parse::<u64>().unwrap();
            } else if let Some(v) = line.strip_prefix("rchar: ") {
                bytes += v.trim().parse::<u64>().unwrap();
            }
        }
    }
    (calls, bytes)
}

#[test]
fn large_reads_reach_the_disk_in_pieces_from_the_pool_threads() {
    for engine in [EngineChoice::Uring, EngineChoice::Threads] {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let store = open(dir.path(), 256 * MIB, engine);
        run(engine, async {
            let w = StoreWorker::new(store.clone()).unwrap();
            // A 1 MiB object is one read of its whole record (1 MiB + 4 KiB here: five pieces);
            // a 3 MiB one streams in 256 KiB chunks (12 reads of one piece, then a shorter
            // tail); a 100 KiB one is one read under a piece.
            for (key, len) in [
                ("/one", 1 << 20),
                ("/three", 3 << 20),
                ("/small", 100 << 10),
            ] {
                let body = content(key, 3, len);
                put(&w, key, "", "m", &body, true, 64 << 10).await.unwrap();
                let r = &store.lookup(key.as_bytes())[0];
                let (calls0, bytes0) = pool_reads();
                let before = store.stats();
                let o = w.open(r).await.unwrap();
                assert_eq!(o.source, Source::Disk, "{engine:?} {key}");
                assert_eq!(collect(o, None).await.unwrap(), body, "{engine:?} {key}");
                let after = store.stats();
                let (calls, bytes) = pool_reads();
                let (calls, bytes) = (calls - calls0, bytes - bytes0);
                let reads = after.disk_reads - before.disk_reads;
                let read_bytes = after.disk_read_bytes - before.disk_read_bytes;
                let piece = READ_PIECE as u64;
                let uring = engine == EngineChoice::Uring;
                match key {
                    "/one" => {
                        // One store read of the whole record, in five pieces from the pool.
                        assert_eq!(reads, 1, "{engine:?}: a 1 MiB record is one store read");
                        assert_eq!(bytes, read_bytes, "{engine:?}: every byte from the pool");
                        assert_eq!(calls, read_bytes.div_ceil(piece), "{engine:?}: pieces");
                        assert!(calls >= 5, "{engine:?}: {calls} pieces for 1 MiB");
                    }
                    "/three" => {
                        // Chunks of one piece each; the last, shorter than a piece, stays on
                        // io_uring.
                        let (full, tail) = (read_bytes / piece, read_bytes % piece);
                        assert!(
                            full >= 12 && tail > 0,
                            "{read_bytes} bytes in {reads} reads"
                        );
                        assert_eq!(reads, full + 1, "{engine:?}");
                        let want = if uring {
                            (full, full * piece)
                        } else {
                            (reads, read_bytes)
                        };
                        assert_eq!((calls, bytes), want, "{engine:?}: /three");
                    }
                    _ => {
                        let want = if uring { (0, 0) } else { (1, read_bytes) };
                        assert_eq!(reads, 1);
                        assert_eq!((calls, bytes), want, "{engine:?}: a small read");
                    }
                }
            }
        });
    }
}
