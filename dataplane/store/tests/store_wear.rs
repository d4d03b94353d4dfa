//! Disk write accounting (issue 15 item 4, "kind to the flash"): every byte the store writes is
//! counted by what it was for, and the body bytes of the records it wrote, so that bytes written
//! per byte admitted (write amplification) can be read from the counters.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use bytes::Bytes;
use edgecache_store::EngineChoice;
use edgecache_store::StoreWorker;
use edgecache_store::metrics::WriteKind;
use edgecache_store::record::{header_len_for, packed_header_len, record_len};
use store_support::*;

fn written(s: &edgecache_store::StoreStats, k: WriteKind) -> u64 {
    s.disk_write_bytes[k as usize]
}

/// A record is counted with its header and its body's padding; the first write of a fresh store
/// reclaims a segment (one 4 KiB segment header); an abandoned write leaves its body writes and a
/// tombstone; a purge a tombstone; a meta rewrite its header; only the published body counts as
/// admitted.
fn counts_every_write(engine: EngineChoice) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = open(dir.path(), 64 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let body = content("/a", 1, 10_000);
        put(&w, "/a", "", "m", &body, true, 3000).await.unwrap();
        let s = store.stats();
        let rec = record_len(packed_header_len(2, 0, 10_000, 1), 10_000);
        assert_eq!(written(&s, WriteKind::Record), rec, "{s:?}");
        assert_eq!(written(&s, WriteKind::SegmentHeader), 4096);
        assert_eq!(written(&s, WriteKind::Tombstone), 0);
        assert_eq!(written(&s, WriteKind::MetaRewrite), 0);
        assert_eq!(s.admitted_body_bytes, 10_000);

        // Abandoned after 300 KiB of a 1 MiB body: the first 256 KiB piece reached the disk
        // (its write is not waited for by the writer: waited for here), then a tombstone.
        let begin = |key: &'static [u8]| {
            w.begin_write(
                Bytes::from_static(key),
                Bytes::new(),
                Bytes::new(),
                Some(MIB),
            )
            .unwrap()
        };
        let mut wr = begin(b"/b");
        wr.write(Bytes::from(vec![1u8; 300 << 10])).await.unwrap();
        let piece = rec + (256 << 10);
        for _ in 0..500 {
            if written(&store.stats(), WriteKind::Record) == piece {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        drop(wr);
        let s = store.stats();
        assert_eq!(written(&s, WriteKind::Record), piece);
        assert_eq!(written(&s, WriteKind::Tombstone), 4096);

        // Abandoned before its first piece's write was made: that write is not made.
        let mut wr = begin(b"/c");
        wr.write(Bytes::from(vec![2u8; 300 << 10])).await.unwrap();
        drop(wr);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let s = store.stats();
        assert_eq!(written(&s, WriteKind::Record), piece);
        assert_eq!(written(&s, WriteKind::Tombstone), 2 * 4096);
        assert_eq!(
            s.admitted_body_bytes, 10_000,
            "an abandoned body is not admitted"
        );

        // A 304's meta rewrite: the header again, in place.
        let r = store.lookup(b"/a").remove(0);
        w.update_meta(&r, Bytes::from_static(b"n")).await.unwrap();
        let hl = header_len_for(2, 0, 10_000, 1);
        assert_eq!(written(&store.stats(), WriteKind::MetaRewrite), hl);

        // A purge: one tombstone more.
        assert_eq!(store.remove(b"/a"), 1);
        assert_eq!(written(&store.stats(), WriteKind::Tombstone), 3 * 4096);
    });
}

#[test]
fn uring_counts_every_write() {
    counts_every_write(EngineChoice::Uring);
}

#[test]
fn threads_counts_every_write() {
    counts_every_write(EngineChoice::Threads);
}
