//! The storage test suite, run against both I/O engines (uring inside `tokio_uring::start`,
//! threads inside a tokio current-thread runtime). Real files, no mocks.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use edgecache_store::EngineChoice;
use edgecache_store::{Source, StoreError, StoreWorker};
use store_support::*;

macro_rules! engine_suite {
    ($($name:ident),* $(,)?) => {
        mod uring {
            $( #[test] fn $name() { super::$name(edgecache_store::EngineChoice::Uring) } )*
        }
        mod threads {
            $( #[test] fn $name() { super::$name(edgecache_store::EngineChoice::Threads) } )*
        }
    };
}

engine_suite!(
    roundtrip_sizes_and_ranges,
    variants_replace_purge_and_meta,
    variants_whose_tags_collide_both_stay,
    ram_tier_serves_second_hit,
    large_records_enter_the_ram_tier_when_streamed_whole,
    a_1_mib_object_is_one_read_and_larger_ones_stream_in_chunks,
    reopen_keeps_objects,
    eviction_stays_within_budget,
    flipped_body_byte_is_not_served,
    torn_header_is_not_served,
    enospc_fails_the_write_only,
    direct_reads_leave_no_page_cache,
    concurrent_writers_and_threads,
    reader_racing_eviction_gets_an_error,
    one_read_slot_serves_concurrent_streams,
    body_checks_stop_after_a_whole_read_until_restart,
    verify_every_read_checks_every_read,
    an_invalidation_during_a_write_is_not_undone_by_its_publish,
    a_body_streams_to_readers_while_it_is_written,
    a_failed_write_fails_its_readers_past_the_disk,
    meta_rewrites_racing_reads_never_drop_the_object,
    unknown_length_bodies_stay_within_their_bound,
    small_records_finished_together_share_a_write,
    small_objects_stage_in_buffers_of_their_own_size,
    a_large_fill_holds_a_bounded_number_of_pieces,
);

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn roundtrip_sizes_and_ranges(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 256 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let sizes = [
            0usize,
            1,
            4096,
            100 * 1024,
            MIB as usize + 123,
            10 * MIB as usize,
        ];
        let mut stored = 0;
        for &n in &sizes {
            for known in [true, false] {
                let key = format!("/obj/{n}/{known}");
                let body = content(&key, 1, n);
                let res = put(&w, &key, "", "meta", &body, known, 7919).await;
                if !known && n as u64 > edgecache_store::UNKNOWN_LENGTH_CAP {
                    assert!(matches!(res, Err(StoreError::TooLarge { .. })), "{res:?}");
                    assert!(store.lookup(key.as_bytes()).is_empty());
                    continue;
                }
                res.unwrap();
                stored += 1;
                let (meta, got) = get(&w, &key).await.unwrap();
                assert_eq!(meta, "meta");
                assert!(
                    got == body,
                    "{key}: body differs ({} vs {} bytes)",
                    got.len(),
                    body.len()
                );
                let n = n as u64;
                for r in [
                    0..1,
                    n / 2..n,
                    n / 3..(n / 3 + 100_000),
                    65_535..65_537,
                    1_048_570..2_000_000,
                ] {
                    let r = r.start.min(n)..r.end.min(n);
                    let obj = w.open(&store.lookup(key.as_bytes())[0]).await.unwrap();
                    let part = collect(obj, Some(r.clone())).await.unwrap();
                    assert!(
                        part[..] == body[r.start as usize..r.end as usize],
                        "{key} range {r:?}"
                    );
                }
            }
        }
        let s = store.stats();
        assert_eq!(s.objects, stored);
        assert!(
            s.direct_io,
            "O_DIRECT must be available on the test file system"
        );
        assert!(s.disk_reads > 0 && s.disk_read_latency.count() == s.disk_reads);
        assert!(s.bytes_used <= s.bytes_capacity && s.bytes_capacity <= 256 * MIB);
        // One process (one Store) per directory.
        let again = edgecache_store::Store::open(cfg(dir.path(), 256 * MIB, engine));
        assert_eq!(again.unwrap_err().kind(), "locked");
        // Too large for max_object_size: refused up front.
        let e = w
            .begin_write(
                Bytes::from_static(b"huge"),
                Bytes::new(),
                Bytes::new(),
                Some(600 * MIB),
            )
            .unwrap_err();
        assert_eq!(e.kind(), "too_large");
        // Wrong length: finish fails, nothing published.
        let mut wr = w
            .begin_write(
                Bytes::from_static(b"short"),
                Bytes::new(),
                Bytes::new(),
                Some(10),
            )
            .unwrap();
        wr.write(Bytes::from_static(b"12345")).await.unwrap();
        assert_eq!(wr.finish().await.unwrap_err().kind(), "length_mismatch");
        assert!(store.lookup(b"short").is_empty());
    });
}

fn variants_replace_purge_and_meta(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 64 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/v", "gzip", "m-gz", b"gz body", true, 3)
            .await
            .unwrap();
        put(&w, "/v", "br", "m-br", b"br body", true, 3)
            .await
            .unwrap();
        assert_eq!(store.lookup(b"/v").len(), 2);
        let both = refs(&w, "/v").await;
        assert_eq!(both.len(), 2);
        for r in &both {
            let want: &[u8] = if r.variant == "gzip" {
                b"m-gz"
            } else {
                b"m-br"
            };
            assert_eq!(r.meta, want);
        }
        // A replacement becomes visible only at finish.
        let mut wr = w
            .begin_write(
                Bytes::from_static(b"/v"),
                Bytes::from_static(b"gzip"),
                Bytes::from_static(b"m2"),
                Some(3),
            )
            .unwrap();
        wr.write(Bytes::from_static(b"new")).await.unwrap();
        let before = variant_ref(&w, "/v", "gzip").await;
        assert_eq!(before.meta, "m-gz");
        wr.finish().await.unwrap();
        let after = variant_ref(&w, "/v", "gzip").await;
        assert_eq!(after.meta, "m2");
        assert!(matches!(
            w.open(&before).await,
            Err(StoreError::MissingOrReplaced)
        ));
        assert_eq!(
            collect(w.open(&after).await.unwrap(), None).await.unwrap(),
            b"new"
        );
        // Meta rewritten in place after a 304.
        w.update_meta(&after, Bytes::from_static(b"revalidated"))
            .await
            .unwrap();
        let r = variant_ref(&w, "/v", "gzip").await;
        assert_eq!(r.meta, "revalidated");
        assert_eq!(w.open(&r).await.unwrap().meta, "revalidated");
        let big = Bytes::from(vec![b'x'; 10_000]);
        assert_eq!(
            w.update_meta(&r, big).await.unwrap_err().kind(),
            "meta_too_large"
        );
        // Purges.
        let br = variant_ref(&w, "/v", "br").await;
        assert!(store.remove_object(&br));
        assert!(!store.remove_object(&br));
        assert_eq!(store.lookup(b"/v").len(), 1);
        put(&w, "/gone", "", "", b"x", true, 1).await.unwrap();
        assert_eq!(store.remove(b"/v"), 1);
        assert!(store.lookup(b"/v").is_empty());
        // Large meta stays out of the index but comes back from the header.
        let meta = "h".repeat(6000);
        put(&w, "/bigmeta", "", &meta, b"body", false, 2)
            .await
            .unwrap();
        let r = &store.lookup(b"/bigmeta")[0];
        assert!(!r.is_complete() && r.meta.is_empty() && r.body_len().is_none());
        assert_eq!(w.open(r).await.unwrap().meta, meta.as_bytes());
        assert_eq!(store.remove(b"/gone"), 1);
    });
    drop(store);
    // Replacements, purges and meta updates survive a restart.
    let store = open(dir.path(), 64 * MIB, engine);
    assert!(store.lookup(b"/v").is_empty(), "purged object came back");
    assert!(store.lookup(b"/gone").is_empty(), "purged object came back");
    assert_eq!(store.stats().recovered_objects, 1);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let (meta, _) = get(&w, "/bigmeta").await.unwrap();
        assert_eq!(meta.len(), 6000);
    });
}

/// The index keeps 7 bits of a variant key: one pair of variants in 128 shares a tag. Neither
/// a fill of one, nor its replacement, nor a restart may take the other's place.
fn variants_whose_tags_collide_both_stay(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 64 * MIB, engine);
    let tag = store.variant_tag(b"gzip");
    let other = (0..10_000)
        .map(|i| format!("v{i}"))
        .find(|v| store.variant_tag(v.as_bytes()) == tag)
        .unwrap();
    let variants = |refs: Vec<edgecache_store::ObjectRef>| {
        let mut v: Vec<(String, String)> = refs
            .iter()
            .map(|r| {
                (
                    String::from_utf8_lossy(&r.variant).into_owned(),
                    String::from_utf8_lossy(&r.meta).into_owned(),
                )
            })
            .collect();
        v.sort();
        v
    };
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/c", "gzip", "gz1", b"gz body", true, 3)
            .await
            .unwrap();
        put(&w, "/c", &other, "other1", b"other body", true, 3)
            .await
            .unwrap();
        assert_eq!(
            variants(refs(&w, "/c").await),
            [
                ("gzip".into(), "gz1".into()),
                (other.clone(), "other1".into())
            ]
        );
        // The same variant again replaces only itself.
        put(&w, "/c", "gzip", "gz2", b"gz body 2", true, 3)
            .await
            .unwrap();
        assert_eq!(store.lookup(b"/c").len(), 2);
        assert_eq!(
            variants(refs(&w, "/c").await),
            [
                ("gzip".into(), "gz2".into()),
                (other.clone(), "other1".into())
            ]
        );
    });
    drop(store);
    let store = open(dir.path(), 64 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert_eq!(
            variants(refs(&w, "/c").await),
            [
                ("gzip".into(), "gz2".into()),
                (other.clone(), "other1".into())
            ],
            "a restart keeps both colliding variants, the newest of each"
        );
    });
}

fn ram_tier_serves_second_hit(engine: EngineChoice) {
    let dir = tmp();
    let mut c = cfg(dir.path(), 64 * MIB, engine);
    c.ram_tier_bytes = MIB;
    let store = edgecache_store::Store::open(c).unwrap();
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let body = content("/hot", 1, 3000);
        put(&w, "/hot", "", "m", &body, true, 1000).await.unwrap();
        let r = &store.lookup(b"/hot")[0];
        let first = w.open(r).await.unwrap();
        assert_eq!(first.source, Source::Disk);
        assert_eq!(collect(first, None).await.unwrap(), body);
        let reads = store.stats().disk_reads;
        let second = w.open(r).await.unwrap();
        assert_eq!(second.source, Source::Ram);
        // Its bytes at hand, as the stream gives them (a range past the end clamped alike).
        assert_eq!(second.in_memory(None).unwrap(), body);
        assert_eq!(second.in_memory(Some(10..20)).unwrap(), &body[10..20]);
        assert_eq!(second.in_memory(Some(2990..5000)).unwrap(), &body[2990..]);
        assert!(second.in_memory(Some(4000..5000)).unwrap().is_empty());
        assert_eq!(collect(second, Some(10..20)).await.unwrap(), &body[10..20]);
        let s = store.stats();
        assert_eq!(s.disk_reads, reads, "a RAM hit does no disk read");
        assert_eq!(s.ram_tier_objects, 1);
        assert!(s.ram_tier_bytes >= 3000 && s.ram_tier_bytes <= MIB);
        // Large objects never enter the RAM tier; many small ones stay within its budget.
        for i in 0..400 {
            let k = format!("/s{i}");
            put(&w, &k, "", "", &content(&k, 0, 8000), true, 8000)
                .await
                .unwrap();
            get(&w, &k).await.unwrap();
            assert!(store.stats().ram_tier_bytes <= MIB);
        }
        assert_eq!(store.remove(b"/hot"), 1);
        assert!(w.open(r).await.is_err());
    });
}

/// A 1 MiB object's record (its header and body) is one disk read with the default I/O
/// budget, and a larger record streams in reads of one chunk (256 KiB), every byte the same.
fn a_1_mib_object_is_one_read_and_larger_ones_stream_in_chunks(engine: EngineChoice) {
    let dir = tmp();
    let store = edgecache_store::Store::open(cfg(dir.path(), 256 * MIB, engine)).unwrap();
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let chunk = 256 << 10;
        assert_eq!(w.read_chunk(), chunk);
        // 3 MiB: the first chunk brings the header and three 64 KiB blocks, twelve more the rest.
        for (key, len, want_reads) in [("/one", 1 << 20, 1), ("/three", 3 << 20, 13)] {
            let body = content(key, 5, len);
            put(&w, key, "", "m", &body, true, 64 << 10).await.unwrap();
            let r = &store.lookup(key.as_bytes())[0];
            let before = store.stats();
            let o = w.open(r).await.unwrap();
            assert_eq!(o.source, Source::Disk);
            assert_eq!(collect(o, None).await.unwrap(), body, "{key}");
            let after = store.stats();
            assert_eq!(
                after.disk_reads - before.disk_reads,
                want_reads,
                "{key}: reads"
            );
            // The first read's body part is cut at a 64 KiB block: at most that is read twice.
            assert!(
                after.disk_read_bytes - before.disk_read_bytes <= r.record_len + (64 << 10),
                "{key}: {} bytes read for a record of {}",
                after.disk_read_bytes - before.disk_read_bytes,
                r.record_len
            );
        }
    });
}

/// A 256 MiB store with a RAM tier of `tier` bytes.
fn with_ram_tier(
    engine: EngineChoice,
    tier: u64,
) -> (tempfile::TempDir, std::sync::Arc<edgecache_store::Store>) {
    let dir = tmp();
    let mut c = cfg(dir.path(), 256 * MIB, engine);
    c.ram_tier_bytes = tier;
    let store = edgecache_store::Store::open(c).unwrap();
    (dir, store)
}

/// A worker, and `/big` (2,500,000 bytes, three read chunks) stored through it.
async fn put_big(
    store: &std::sync::Arc<edgecache_store::Store>,
    seed: u64,
) -> (StoreWorker, Vec<u8>) {
    let w = StoreWorker::new(store.clone()).unwrap();
    let body = content("/big", seed, 2_500_000);
    put(&w, "/big", "", "m", &body, true, 64 << 10)
        .await
        .unwrap();
    (w, body)
}

/// A record larger than one read chunk enters the RAM tier from a disk hit that streamed its
/// whole body (verified chunk by chunk), never from a range or a stream dropped part way, and
/// only when it is a small part of the tier; later hits are RAM hits with every byte the same.
fn large_records_enter_the_ram_tier_when_streamed_whole(engine: EngineChoice) {
    let (_dir, store) = with_ram_tier(engine, 256 * MIB);
    run(engine, async {
        let (w, body) = put_big(&store, 7).await;
        let r = &store.lookup(b"/big")[0];
        // A range, and a whole stream dropped after its first chunk: still on disk only. A
        // range holds nothing of the tier for a copy (it would push entries out for nothing);
        // a whole stream holds the body's bytes from its start.
        let held = store.stats().ram_tier_bytes;
        let part = w.open(r).await.unwrap();
        assert_eq!(part.source, Source::Disk);
        let ranged = part.body(Some(300_000..300_100));
        assert_eq!(
            store.stats().ram_tier_bytes,
            held,
            "a range reserves nothing"
        );
        drop(ranged);
        let whole = w.open(r).await.unwrap().body(None);
        assert!(store.stats().ram_tier_bytes >= held + 2_500_000);
        drop(whole);
        assert_eq!(
            store.stats().ram_tier_bytes,
            held,
            "given back when dropped"
        );
        let part = w.open(r).await.unwrap();
        assert_eq!(
            collect(part, Some(300_000..300_100)).await.unwrap(),
            &body[300_000..300_100]
        );
        {
            let cut = w.open(r).await.unwrap();
            let mut s = std::pin::pin!(cut.body(None));
            assert!(futures_util::StreamExt::next(&mut s).await.unwrap().is_ok());
        }
        let whole = w.open(r).await.unwrap();
        assert_eq!(
            whole.source,
            Source::Disk,
            "not in RAM before a whole stream"
        );
        assert_eq!(collect(whole, None).await.unwrap(), body);
        let reads = store.stats().disk_reads;
        let again = w.open(r).await.unwrap();
        assert_eq!(again.source, Source::Ram, "streamed whole: copied in");
        assert_eq!(collect(again, None).await.unwrap(), body);
        assert_eq!(
            store.stats().disk_reads,
            reads,
            "a RAM hit does no disk read"
        );
        assert_eq!(store.stats().ram_tier_objects, 1);
        assert_eq!(store.remove(b"/big"), 1);
        assert!(w.open(r).await.is_err(), "purged: gone from RAM too");
    });
    // In a small tier a large record is too big a share: it stays on disk.
    let (_dir, store) = with_ram_tier(engine, 8 * MIB);
    run(engine, async {
        let (w, body) = put_big(&store, 8).await;
        let r = &store.lookup(b"/big")[0];
        for _ in 0..3 {
            let o = w.open(r).await.unwrap();
            assert_eq!(o.source, Source::Disk);
            assert_eq!(collect(o, None).await.unwrap(), body);
        }
        assert_eq!(store.stats().ram_tier_objects, 0);
    });
}

fn reopen_keeps_objects(engine: EngineChoice) {
    let dir = tmp();
    let sizes = [0usize, 1, 777, 4096, 70_000, 300_000, 2_000_000];
    {
        let store = open(dir.path(), 128 * MIB, engine);
        run(engine, async {
            let w = StoreWorker::new(store.clone()).unwrap();
            for i in 0..50 {
                let k = format!("/k{i}");
                let n = sizes[i % sizes.len()];
                put(
                    &w,
                    &k,
                    "",
                    &format!("{i}"),
                    &content(&k, 1, n),
                    i % 3 != 0,
                    65_536,
                )
                .await
                .unwrap();
            }
            // Replace one, purge one, abort one.
            put(&w, "/k1", "", "v2", &content("/k1", 2, 5000), true, 100)
                .await
                .unwrap();
            assert_eq!(store.remove(b"/k2"), 1);
            let mut wr = w
                .begin_write(
                    Bytes::from_static(b"/aborted"),
                    Bytes::new(),
                    Bytes::new(),
                    Some(100_000),
                )
                .unwrap();
            wr.write(Bytes::from(vec![1u8; 70_000])).await.unwrap();
            drop(wr);
            put(&w, "/after-abort", "", "", b"still here", true, 4)
                .await
                .unwrap();
        });
    }
    for restart in 0..2 {
        let store = open(dir.path(), 128 * MIB, engine);
        let s = store.stats();
        // 50 written - 1 purged + "/after-abort", then "/k-new" from the first restart.
        assert_eq!(s.recovered_objects, 50 + restart, "{s:?}");
        assert_eq!(s.corrupt_dropped, 0);
        run(engine, async {
            let w = StoreWorker::new(store.clone()).unwrap();
            for i in 0..50 {
                let k = format!("/k{i}");
                let got = get(&w, &k).await;
                match i {
                    1 => assert_eq!(
                        got.unwrap(),
                        (Bytes::from_static(b"v2"), content("/k1", 2, 5000))
                    ),
                    2 => assert!(got.is_none()),
                    _ => {
                        let (meta, body) = got.unwrap();
                        assert_eq!(meta, format!("{i}"));
                        assert!(body == content(&k, 1, sizes[i % sizes.len()]), "{k}");
                    }
                }
            }
            assert!(store.lookup(b"/aborted").is_empty());
            assert_eq!(get(&w, "/after-abort").await.unwrap().1, b"still here");
            // New writes after a restart go to a fresh segment and are kept too.
            put(&w, "/k-new", "", "", b"new", true, 1).await.unwrap();
        });
    }
}

fn dir_allocated_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

fn eviction_stays_within_budget(engine: EngineChoice) {
    let dir = tmp();
    let budget = 64 * MIB;
    let store = open(dir.path(), budget, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        // 3x the budget.
        for i in 0..192 {
            let k = format!("/e{i}");
            put(
                &w,
                &k,
                "",
                "",
                &content(&k, 0, MIB as usize),
                true,
                256 * 1024,
            )
            .await
            .unwrap();
            let s = store.stats();
            assert!(s.bytes_used <= s.bytes_capacity && s.bytes_capacity <= budget);
        }
        let s = store.stats();
        assert!(s.evictions >= 100, "{s:?}");
        assert!(s.objects >= 40 && s.objects < 64, "{s:?}");
        assert!(store.lookup(b"/e0").is_empty(), "oldest evicted first");
        for i in 185..192 {
            let k = format!("/e{i}");
            assert!(get(&w, &k).await.unwrap().1 == content(&k, 0, MIB as usize));
        }
        assert!(dir_allocated_bytes(dir.path()) <= budget + 64 * 1024);
    });
    drop(store);
    let store = open(dir.path(), budget, engine);
    assert!(store.stats().recovered_objects >= 40);
    assert!(store.lookup(b"/e191").len() == 1 && store.lookup(b"/e0").is_empty());
}

fn flip_byte(path: &Path, off: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, off).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, off).unwrap();
    f.sync_all().unwrap();
}

fn flipped_body_byte_is_not_served(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let big = content("/big", 0, 3 * MIB as usize + 5);
        put(&w, "/big", "", "", &big, true, 100_000).await.unwrap();
        let small = content("/small", 0, 10_000);
        put(&w, "/small", "", "", &small, true, 100_000)
            .await
            .unwrap();

        // Large object: the stream yields verified chunks, then an error at the bad block.
        let r = &opened(&w, "/big").await;
        let loc = r.location();
        flip_byte(
            &store.segment_path(loc.segment),
            loc.body_offset + 2 * MIB + 17,
        );
        let obj = w.open(r).await.unwrap();
        let mut s = std::pin::pin!(obj.body(None));
        let mut good = Vec::new();
        let err = loop {
            use futures_util::StreamExt;
            match s.next().await {
                Some(Ok(c)) => good.extend_from_slice(&c),
                Some(Err(e)) => break e,
                None => panic!("corrupt body streamed to the end"),
            }
        };
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(good.len() as u64 <= 2 * MIB && good[..] == big[..good.len()]);
        assert!(store.lookup(b"/big").is_empty(), "corrupt object dropped");
        assert_eq!(store.stats().corrupt_dropped, 1);

        // Small object: verified at open.
        let r = &opened(&w, "/small").await;
        let loc = r.location();
        flip_byte(&store.segment_path(loc.segment), loc.body_offset + 9_999);
        assert_eq!(w.open(r).await.unwrap_err().kind(), "corrupt");
        assert!(store.lookup(b"/small").is_empty());
        assert_eq!(store.stats().corrupt_dropped, 2);
    });
    drop(store);
    // The dropped records stay dropped after a restart.
    let store = open(dir.path(), 128 * MIB, engine);
    assert!(store.lookup(b"/big").is_empty() && store.lookup(b"/small").is_empty());
}

fn torn_header_is_not_served(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    let (path_a, loc_a, path_c, loc_c, loc_b) = run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        for k in ["/a", "/b", "/c", "/d"] {
            put(&w, k, "", "", &content(k, 0, 5000), true, 5000)
                .await
                .unwrap();
        }
        let a = opened(&w, "/a").await.location();
        let c = opened(&w, "/c").await.location();
        let b = opened(&w, "/b").await.location();
        assert_eq!((a.segment, b.segment), (c.segment, c.segment));
        (
            store.segment_path(a.segment),
            a,
            store.segment_path(c.segment),
            c,
            b,
        )
    });
    // At run time: a header byte flipped (the key) is detected, the object dropped.
    flip_byte(&path_a, loc_a.offset + 82);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let r = &store.lookup(b"/a")[0];
        assert_eq!(w.open(r).await.unwrap_err().kind(), "corrupt");
        assert!(store.lookup(b"/a").is_empty());
        assert_eq!(store.stats().corrupt_dropped, 1);
    });
    drop(store);
    // At recovery: a corrupt header is counted and skipped, never indexed; a header that never
    // reached the disk (zeros) is skipped; records after both are still found.
    flip_byte(&path_c, loc_c.offset + 40);
    let f = OpenOptions::new().write(true).open(&path_c).unwrap();
    f.write_all_at(&[0u8; 4096], loc_b.offset).unwrap();
    drop(f);
    let store = open(dir.path(), 128 * MIB, engine);
    let s = store.stats();
    assert_eq!(s.corrupt_dropped, 1, "{s:?}");
    assert_eq!(s.recovered_objects, 1, "{s:?}");
    for k in ["/a", "/b", "/c"] {
        assert!(store.lookup(k.as_bytes()).is_empty(), "{k}");
    }
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        assert_eq!(get(&w, "/d").await.unwrap().1, content("/d", 0, 5000));
    });
}

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn enospc_fails_the_write_only(engine: EngineChoice) {
    let base = tmp();
    let mnt = base.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=96m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs (needs root)");
    let _guard = Mount(mnt.clone());
    let dir = mnt.join("cache");
    // The store refuses a size its filesystem cannot hold and preallocates its segments: punch
    // their space out again (as on a filesystem without fallocate), then fill the disk.
    let store = open(&dir, 64 * MIB, engine);
    disk::punch_out_segments(&dir);
    let mut filler = File::create(mnt.join("filler")).unwrap();
    let chunk = vec![7u8; 64 * 1024];
    let mut len = 0u64;
    while filler
        .write_all(&chunk)
        .and_then(|()| filler.sync_all())
        .is_ok()
    {
        len += chunk.len() as u64;
    }
    // Leave 8 MiB: some writes fit, then the disk is full.
    filler.set_len(len.saturating_sub(8 * MIB)).unwrap();
    drop(filler);
    let failed_key = run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let mut ok = Vec::new();
        let mut err = None;
        for i in 0..64 {
            let k = format!("/f{i}");
            match put(&w, &k, "", "", &content(&k, 0, MIB as usize), true, 300_000).await {
                Ok(()) => ok.push(k),
                Err(e) => {
                    err = Some((k, e));
                    break;
                }
            }
        }
        let (k, e) = err.expect("the disk never filled up");
        assert_eq!(e.kind(), "io", "{e}");
        assert!(!ok.is_empty());
        let s = store.stats();
        assert!(s.write_errors >= 1, "{s:?}");
        assert!(
            store.lookup(k.as_bytes()).is_empty(),
            "partial object published"
        );
        // Reads still work.
        for k in &ok {
            assert!(
                get(&w, k).await.unwrap().1 == content(k, 0, MIB as usize),
                "{k}"
            );
        }
        // Space comes back: later writes work again.
        fs::remove_file(mnt.join("filler")).unwrap();
        let mut done = false;
        for attempt in 0..4 {
            let k = format!("/later{attempt}");
            if put(&w, &k, "", "", &content(&k, 0, 100_000), true, 50_000)
                .await
                .is_ok()
            {
                assert_eq!(get(&w, &k).await.unwrap().1, content(&k, 0, 100_000));
                done = true;
                break;
            }
        }
        assert!(done, "store did not recover from ENOSPC");
        k
    });
    drop(store);
    let store = open(&dir, 64 * MIB, engine);
    assert!(store.lookup(failed_key.as_bytes()).is_empty());
    assert_eq!(store.lookup(b"/f0").len(), 1);
    drop(store);
}

#[allow(unsafe_code)]
fn cached_pages(path: &Path, off: u64, len: u64) -> usize {
    use std::os::fd::AsRawFd;
    let f = File::open(path).unwrap();
    let page = 4096u64;
    let start = off / page * page;
    let map_len = ((off + len - start).div_ceil(page) * page) as usize;
    // SAFETY: a read-only shared mapping of an open file; it is only passed to mincore and
    // unmapped below, never dereferenced.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            start as libc::off_t,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let mut vec = vec![0u8; map_len / page as usize];
    // SAFETY: `p` is a live mapping of `map_len` bytes and `vec` has one byte per page.
    let r = unsafe { libc::mincore(p, map_len, vec.as_mut_ptr()) };
    // SAFETY: unmapping the mapping created above, exactly once.
    unsafe { libc::munmap(p, map_len) };
    assert_eq!(r, 0);
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

fn direct_reads_leave_no_page_cache(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let big = content("/big", 0, 8 * MIB as usize);
        put(&w, "/big", "", "", &big, true, 1 << 20).await.unwrap();
        let small = content("/small", 0, 40_000);
        put(&w, "/small", "", "", &small, true, 1 << 20)
            .await
            .unwrap();
        for _ in 0..2 {
            assert!(get(&w, "/big").await.unwrap().1 == big);
            assert!(get(&w, "/small").await.unwrap().1 == small);
        }
        let b = opened(&w, "/big").await.location();
        let cached = cached_pages(
            &store.segment_path(b.segment),
            b.offset,
            b.header_len + 8 * MIB,
        );
        assert!(
            cached <= 2,
            "{cached} pages of the O_DIRECT object are in page cache"
        );
        // The check itself works: the small object is read through the page cache.
        let s = opened(&w, "/small").await.location();
        let cached = cached_pages(&store.segment_path(s.segment), s.body_offset, 40_000);
        assert!(cached >= 9, "buffered read left only {cached} pages cached");
    });
}

fn concurrent_writers_and_threads(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                run(engine, async move {
                    let w = StoreWorker::new(store.clone()).unwrap();
                    for round in 0..10 {
                        let keys: Vec<String> =
                            (0..4).map(|i| format!("/t{t}/r{round}/{i}")).collect();
                        let bodies: Vec<Vec<u8>> = keys
                            .iter()
                            .enumerate()
                            .map(|(i, k)| content(k, 0, 30_000 * (i + 1) * (round + 1)))
                            .collect();
                        let puts = keys
                            .iter()
                            .zip(&bodies)
                            .map(|(k, b)| put(&w, k, "", "", b, round % 2 == 0, 16_384));
                        for r in futures_util::future::join_all(puts).await {
                            r.unwrap();
                        }
                        // Readers interleaved with writers of the same key.
                        let hot = format!("/shared/{round}");
                        let hb = content(&hot, t, 200_000);
                        let (p, g) = futures_util::future::join(
                            put(&w, &hot, "", &format!("{t}"), &hb, true, 10_000),
                            get(&w, &keys[3]),
                        )
                        .await;
                        p.unwrap();
                        assert!(g.unwrap().1 == bodies[3]);
                    }
                })
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        for round in 0..10 {
            let hot = format!("/shared/{round}");
            let (meta, body) = get(&w, &hot).await.unwrap();
            let t: u64 = std::str::from_utf8(&meta).unwrap().parse().unwrap();
            assert!(
                body == content(&hot, t, 200_000),
                "latest write wins, whole"
            );
        }
    });
    assert_eq!(store.stats().objects, 2 * 10 * 4 + 10);
}

fn reader_racing_eviction_gets_an_error(engine: EngineChoice) {
    use futures_util::StreamExt;
    let dir = tmp();
    let store = open(dir.path(), 64 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let big = content("/big", 0, 5 * MIB as usize);
        put(&w, "/big", "", "", &big, true, MIB as usize)
            .await
            .unwrap();
        let obj = w.open(&store.lookup(b"/big")[0]).await.unwrap();
        let mut s = std::pin::pin!(obj.body(None));
        let first = s.next().await.unwrap().unwrap();
        assert!(first[..] == big[..first.len()]);
        // Wrap the whole log: the segment holding /big is reclaimed and overwritten.
        for i in 0..70 {
            let k = format!("/w{i}");
            put(
                &w,
                &k,
                "",
                "",
                &content(&k, 0, MIB as usize),
                true,
                MIB as usize,
            )
            .await
            .unwrap();
        }
        assert!(store.lookup(b"/big").is_empty());
        let mut got = first.len();
        loop {
            match s.next().await {
                Some(Ok(c)) => {
                    assert!(
                        c[..] == big[got..got + c.len()],
                        "wrong bytes after reclaim"
                    );
                    got += c.len();
                }
                Some(Err(_)) => break,
                None => panic!("stream completed after its segment was reclaimed"),
            }
        }
    });
}

/// `reads_in_flight: 1`: every read waits for the one slot, a read-ahead only starts when it is
/// free, and a finished read-ahead gives it back even while its stream is not being read (a
/// slow client must not stall everyone else's reads). Bodies stay byte-exact.
fn one_read_slot_serves_concurrent_streams(engine: EngineChoice) {
    use futures_util::StreamExt;
    let dir = tmp();
    let mut c = cfg(dir.path(), 128 * MIB, engine);
    c.reads_in_flight = 1;
    let store = edgecache_store::Store::open(c).unwrap();
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let len = 3 * MIB as usize / 2;
        let keys: Vec<String> = (0..6).map(|i| format!("/big/{i}")).collect();
        for k in &keys {
            put(&w, k, "", "", &content(k, 7, len), true, 1 << 20)
                .await
                .unwrap();
        }
        // A stream stopped after its first chunk (its read-ahead was started).
        let r = &store.lookup(b"/big/0")[0];
        let mut stalled = std::pin::pin!(w.open(r).await.unwrap().body(None));
        let first = stalled.next().await.unwrap().unwrap();
        assert!(!first.is_empty());
        // Everyone else still gets the disk, concurrently.
        let others = keys[1..].iter().map(|k| get(&w, k));
        let all = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            futures_util::future::join_all(others),
        )
        .await
        .expect("reads stalled behind a read-ahead nobody consumes");
        for (k, got) in keys[1..].iter().zip(all) {
            assert!(got.unwrap().1 == content(k, 7, len), "{k} byte-exact");
        }
        // The stalled stream finishes intact.
        let mut body = first.to_vec();
        while let Some(c) = stalled.next().await {
            body.extend_from_slice(&c.unwrap());
        }
        assert!(body == content("/big/0", 7, len));
    });
}

/// A record's body is checked against its block checksums until one read has passed it whole;
/// later reads in the same run skip them (counted), and a restart checks every record again.
fn body_checks_stop_after_a_whole_read_until_restart(engine: EngineChoice) {
    let dir = tmp();
    let big = content("/big", 3, 3 * MIB as usize + 5);
    let small = content("/small", 3, 10_000);
    let store = open(dir.path(), 128 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put_big_and_small(&w, &big, &small).await;
        // Parts of the body (one not from the start, one not to the end) do not make it trusted.
        for range in [MIB..2 * MIB, 0..MIB] {
            let r = &store.lookup(b"/big")[0];
            let got = collect(w.open(r).await.unwrap(), Some(range.clone()))
                .await
                .unwrap();
            assert!(got[..] == big[range.start as usize..range.end as usize]);
        }
        assert_eq!(store.stats().body_checks_skipped, 0);
        // The first whole read checks; the second trusts.
        for round in 0..2 {
            assert!(get(&w, "/big").await.unwrap().1 == big);
            assert!(get(&w, "/small").await.unwrap().1 == small);
            assert_eq!(store.stats().body_checks_skipped, 2 * round);
        }
        assert_eq!(store.stats().corrupt_dropped, 0);
        flip_big_and_small(&w).await;
    });
    drop(store);
    // After a restart nothing is trusted: both bad bodies are found and dropped.
    let store = open(dir.path(), 128 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let r = &store.lookup(b"/big")[0];
        let err = collect(w.open(r).await.unwrap(), None).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        let r = &store.lookup(b"/small")[0];
        assert_eq!(w.open(r).await.unwrap_err().kind(), "corrupt");
        let s = store.stats();
        assert_eq!((s.corrupt_dropped, s.body_checks_skipped), (2, 0));
        assert!(store.lookup(b"/big").is_empty() && store.lookup(b"/small").is_empty());
    });
}

/// With `verify_every_read`, a body that went bad after it was read whole is still caught.
fn verify_every_read_checks_every_read(engine: EngineChoice) {
    let dir = tmp();
    let mut c = cfg(dir.path(), 128 * MIB, engine);
    c.verify_every_read = true;
    let store = edgecache_store::Store::open(c).unwrap();
    let big = content("/big", 4, 2 * MIB as usize);
    let small = content("/small", 4, 10_000);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put_big_and_small(&w, &big, &small).await;
        for _ in 0..2 {
            assert!(get(&w, "/big").await.unwrap().1 == big);
            assert!(get(&w, "/small").await.unwrap().1 == small);
        }
        flip_big_and_small(&w).await;
        assert!(get(&w, "/big").await.is_none(), "bad big body not served");
        assert!(
            get(&w, "/small").await.is_none(),
            "bad small body not served"
        );
        let s = store.stats();
        assert_eq!((s.corrupt_dropped, s.body_checks_skipped), (2, 0));
    });
}

async fn put_big_and_small(w: &StoreWorker, big: &[u8], small: &[u8]) {
    put(w, "/big", "", "", big, true, 1 << 20).await.unwrap();
    put(w, "/small", "", "", small, true, 1 << 20)
        .await
        .unwrap();
}

/// Flip a byte in the first 64 KiB block of both bodies.
async fn flip_big_and_small(w: &StoreWorker) {
    for key in ["/big", "/small"] {
        let loc = opened(w, key).await.location();
        flip_byte(
            &w.store().segment_path(loc.segment),
            loc.body_offset + 9_000,
        );
    }
}

/// A purge (or an unsafe method's invalidation) that lands while a write runs, however late,
/// wins: the write is not published, even when it finishes afterwards; a write that began after
/// the invalidation publishes as usual.
fn an_invalidation_during_a_write_is_not_undone_by_its_publish(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    let body = content("/inv", 1, 300_000);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        put(&w, "/inv", "", "old", &body, true, 65536)
            .await
            .unwrap();
        let begin = |mark| {
            let mut wr = w
                .begin_write(
                    Bytes::from_static(b"/inv"),
                    Bytes::new(),
                    Bytes::from_static(b"new"),
                    Some(body.len() as u64),
                )
                .unwrap();
            wr.publish_only_if_unchanged(mark);
            wr
        };
        // The mark is taken when the origin request goes out, before the write begins.
        let mark = store.invalidation_mark(b"/inv");
        let mut wr = begin(mark);
        wr.write(Bytes::copy_from_slice(&body)).await.unwrap();
        // The invalidation lands after the last byte, just before finish() publishes.
        assert_eq!(store.remove(b"/inv"), 1);
        wr.finish().await.unwrap();
        assert!(store.lookup(b"/inv").is_empty(), "the purge stays");
        assert_eq!(store.stats().publishes_invalidated, 1);
        // A fill that starts after the invalidation is stored.
        let mut wr = begin(store.invalidation_mark(b"/inv"));
        wr.write(Bytes::copy_from_slice(&body)).await.unwrap();
        wr.finish().await.unwrap();
        let (meta, got) = get(&w, "/inv").await.unwrap();
        assert_eq!((&meta[..], got == body), (&b"new"[..], true));
        // Another key's invalidation does not stop this one (unless they share a slot).
        let mark = store.invalidation_mark(b"/inv");
        let mut wr = begin(mark);
        wr.write(Bytes::copy_from_slice(&body)).await.unwrap();
        store.remove(b"/other");
        wr.finish().await.unwrap();
        assert_eq!(store.lookup(b"/inv").len(), 1);
    });
}

/// Readers on this worker and on another thread get a body being written as it reaches the
/// disk, all of it or a range of it, before the writer has finished; the last bytes only once
/// it is published.
fn a_body_streams_to_readers_while_it_is_written(engine: EngineChoice) {
    use futures_util::StreamExt;
    let dir = tmp();
    let store = open(dir.path(), 256 * MIB, engine);
    let len = 5 * MIB as usize + 123;
    let body = content("/growing", 3, len);
    let (g_tx, g_rx) = std::sync::mpsc::channel();
    let other = {
        let store = store.clone();
        std::thread::spawn(move || {
            run(engine, async move {
                let w = StoreWorker::new(store).unwrap();
                let g = g_rx.recv().unwrap();
                let mut out = Vec::new();
                let mut s = std::pin::pin!(w.read_growing(g, None));
                while let Some(c) = s.next().await {
                    out.extend_from_slice(&c.unwrap());
                }
                out
            })
        })
    };
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let mut wr = w
            .begin_write(
                Bytes::from_static(b"/growing"),
                Bytes::new(),
                Bytes::from_static(b"meta"),
                Some(len as u64),
            )
            .unwrap();
        let g = wr.readable().unwrap();
        g_tx.send(g.clone()).unwrap();
        let got = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let reader = {
            let (got, g) = (got.clone(), g.clone());
            let s = w.read_growing(g, None);
            tokio::task::spawn_local(async move {
                let mut s = std::pin::pin!(s);
                while let Some(c) = s.next().await {
                    got.borrow_mut().extend_from_slice(&c.unwrap());
                }
            })
        };
        let range = 1_000_001..3_000_000u64;
        let ranged = tokio::task::spawn_local({
            let s = w.read_growing(g.clone(), Some(range.clone()));
            async move {
                let mut out = Vec::new();
                let mut s = std::pin::pin!(s);
                while let Some(c) = s.next().await {
                    out.extend_from_slice(&c.unwrap());
                }
                out
            }
        });
        // Half the body written: the reader has part of it, not all.
        for c in body[..len / 2].chunks(100_000) {
            wr.write(Bytes::copy_from_slice(c)).await.unwrap();
        }
        for _ in 0..50 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            if got.borrow().len() >= MIB as usize {
                break;
            }
        }
        let part = got.borrow().len();
        assert!(
            (MIB as usize..=len / 2).contains(&part),
            "read {part} bytes of the first {} written",
            len / 2
        );
        assert_eq!(
            got.borrow()[..],
            body[..part],
            "the bytes read so far are right"
        );
        for c in body[len / 2..].chunks(100_000) {
            wr.write(Bytes::copy_from_slice(c)).await.unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            got.borrow().len() < len,
            "the last block waits for the publish"
        );
        wr.finish().await.unwrap();
        reader.await.unwrap();
        assert!(*got.borrow() == body, "the whole body, in order");
        let r = ranged.await.unwrap();
        assert!(r[..] == body[range.start as usize..range.end as usize]);
        let (meta, stored) = get(&w, "/growing").await.unwrap();
        assert_eq!((&meta[..], stored == body), (&b"meta"[..], true));
    });
    assert!(other.join().unwrap() == body, "a reader on another worker");
}

/// A writer dropped half way: what reached the disk is still read correctly, a reader past it
/// gets an error (never a short body that looks complete), and nothing is published. (The
/// writer does not wait for its pieces' writes: the prefix is read once they have landed,
/// before the drop.)
fn a_failed_write_fails_its_readers_past_the_disk(engine: EngineChoice) {
    use futures_util::StreamExt;
    let dir = tmp();
    let store = open(dir.path(), 256 * MIB, engine);
    let len = 4 * MIB as usize;
    let body = content("/failing", 4, len);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let mut wr = w
            .begin_write(
                Bytes::from_static(b"/failing"),
                Bytes::new(),
                Bytes::new(),
                Some(len as u64),
            )
            .unwrap();
        let g = wr.readable().unwrap();
        wr.write(Bytes::copy_from_slice(&body[..2 * MIB as usize]))
            .await
            .unwrap();
        let collect = |range| {
            let s = w.read_growing(g.clone(), Some(range));
            async move {
                let mut out = Vec::new();
                let mut s = std::pin::pin!(s);
                while let Some(c) = s.next().await {
                    out.extend_from_slice(&c?);
                }
                Ok::<_, std::io::Error>(out)
            }
        };
        let prefix = collect(0..MIB).await.unwrap();
        drop(wr);
        assert!(prefix[..] == body[..MIB as usize]);
        let prefix = collect(0..MIB).await.unwrap();
        assert!(
            prefix[..] == body[..MIB as usize],
            "read again after the drop"
        );
        assert!(collect(0..len as u64).await.is_err(), "the rest never came");
        assert!(store.lookup(b"/failing").is_empty());
    });
}

/// The meta blob of rewrite number `n` (0: as first stored): its number, then bytes derived
/// from it, `len` bytes in all, so a mixture of two versions is told from either.
fn versioned_meta(n: u64, len: usize) -> String {
    let head = format!("{n:08}:");
    let tail =
        (0..len - head.len()).map(|i| char::from(b'a' + ((n * 31 + i as u64 * 7) % 26) as u8));
    head.chars().chain(tail).collect()
}

/// The version of a meta blob made by [`versioned_meta`], if it is one whole.
fn meta_version(m: &[u8], len: usize) -> Option<u64> {
    let n = std::str::from_utf8(m.get(..8)?).ok()?.parse().ok()?;
    (m.len() == len && m == versioned_meta(n, len).as_bytes()).then_some(n)
}

/// Issue 14: `update_meta` rewrites headers in place on one worker thread while readers on two
/// others open the same objects. Every open must return a meta blob of one version whole
/// (never an error), no object may be dropped as corrupt, and once the rewrites are done the
/// index, the header and the RAM tier all have the last version. Headers of about 200 KiB
/// (large meta blobs) are many blocks; a small body (buffered reads) and a large one (O_DIRECT
/// reads). On ext4 in the test VM no read was seen torn in this race (the deterministic torn
/// header is `store::worker::tests`); this checks the whole path across threads.
fn meta_rewrites_racing_reads_never_drop_the_object(engine: EngineChoice) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const META: usize = 200 * 1024;
    const REWRITES: u64 = 150;
    let dir = tmp();
    let mut c = cfg(dir.path(), 64 * MIB, engine);
    c.ram_tier_bytes = 32 * MIB;
    let store = edgecache_store::Store::open(c).unwrap();
    let keys = [("/meta/small", 8_000usize), ("/meta/large", 300_000)];
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        for (k, n) in keys {
            let meta = versioned_meta(0, META);
            put(&w, k, "", &meta, &content(k, 0, n), true, 65_536)
                .await
                .unwrap();
        }
    });
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            run(engine, async move {
                let w = StoreWorker::new(store.clone()).unwrap();
                for n in 1..=REWRITES {
                    for (k, _) in keys {
                        let r = &store.lookup(k.as_bytes())[0];
                        w.update_meta(r, Bytes::from(versioned_meta(n, META)))
                            .await
                            .unwrap();
                    }
                }
                done.store(true, Ordering::Release);
            })
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                run(engine, async move {
                    let w = StoreWorker::new(store.clone()).unwrap();
                    let mut opens = 0u64;
                    while !done.load(Ordering::Acquire) {
                        for (k, n) in keys {
                            let refs = store.lookup(k.as_bytes());
                            let r = refs.first().unwrap_or_else(|| panic!("{k} was dropped"));
                            let obj = w
                                .open(r)
                                .await
                                .unwrap_or_else(|e| panic!("{k}: open failed: {e}"));
                            assert!(
                                meta_version(&obj.meta, META).is_some(),
                                "{k}: a meta blob that is no version whole"
                            );
                            let body = collect(obj, None).await.unwrap();
                            assert!(body == content(k, 0, n), "{k}: body differs");
                            opens += 1;
                        }
                    }
                    opens
                })
            })
        })
        .collect();
    writer.join().unwrap();
    let opens: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(opens > 0);
    let s = store.stats();
    assert_eq!(s.corrupt_dropped, 0, "{s:?}");
    assert_eq!(s.objects, 2);
    // Settled: the index, the header and the RAM tier all have the last version.
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        for (k, _) in keys {
            for _ in 0..3 {
                let r = &store.lookup(k.as_bytes())[0];
                assert_eq!(meta_version(&r.meta, META), None, "a candidate has no meta");
                let obj = w.open(r).await.unwrap();
                assert_eq!(meta_version(&obj.meta, META), Some(REWRITES), "{k}");
            }
        }
    });
}

/// Unknown-length bodies buffered by all writers together stay within the store's bound; one
/// that would pass it fails (`MemoryBound`: proxied, not stored) and gives its bytes back.
fn unknown_length_bodies_stay_within_their_bound(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    let share = store.unknown_length_bodies().clone();
    share.set_bound(300_000);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let begin = |key: &str| {
            w.begin_write(
                Bytes::copy_from_slice(key.as_bytes()),
                Bytes::new(),
                Bytes::new(),
                None,
            )
            .unwrap()
        };
        let mut a = begin("/a");
        a.write(Bytes::from(vec![1u8; 200_000])).await.unwrap();
        assert_eq!(share.held(), 200_000);
        let mut b = begin("/b");
        b.write(Bytes::from(vec![2u8; 50_000])).await.unwrap();
        let e = b.write(Bytes::from(vec![2u8; 60_000])).await.unwrap_err();
        assert!(matches!(e, StoreError::MemoryBound), "{e}");
        assert_eq!(e.as_str(), "memory_bound");
        drop(b);
        assert_eq!(
            share.held(),
            200_000,
            "the failed writer gave its bytes back"
        );
        a.finish().await.unwrap();
        assert_eq!(share.held(), 0, "written and published: nothing held");
        // Known lengths stream to disk: not counted.
        put(&w, "/known", "", "", &[3u8; 400_000], true, 65_536)
            .await
            .unwrap();
        assert_eq!(share.held(), 0);
        assert!(get(&w, "/a").await.is_some());
        assert!(get(&w, "/b").await.is_none());
    });
}

/// Small objects whose fills end together lie back to back on disk: on io_uring they go out
/// in one vectored write (`src/combine.rs`), each still whole and readable, also after a
/// restart; the thread pool writes them one by one.
fn small_records_finished_together_share_a_write(engine: EngineChoice) {
    let dir = tmp();
    let keys: Vec<String> = (0..32).map(|i| format!("/small/{i}")).collect();
    let body = |k: &str, i: usize| content(k, 3, 1000 + 97 * i);
    {
        let store = open(dir.path(), 128 * MIB, engine);
        run(engine, async {
            let w = StoreWorker::new(store.clone()).unwrap();
            let data: Vec<(String, Vec<u8>)> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (format!("m{i}"), body(k, i)))
                .collect();
            let puts = keys
                .iter()
                .zip(&data)
                .enumerate()
                .map(|(i, (k, (m, b)))| put(&w, k, "", m, b, i % 4 != 0, 4096));
            for r in futures_util::future::join_all(puts).await {
                r.unwrap();
            }
            let s = store.stats();
            assert_eq!(s.record_writes, 32, "{s:?}");
            match engine {
                EngineChoice::Uring => assert!(
                    s.record_write_ops <= 4,
                    "32 records finished together, {} writes",
                    s.record_write_ops
                ),
                _ => assert_eq!(s.record_write_ops, 32),
            }
            for (i, k) in keys.iter().enumerate() {
                let (meta, got) = get(&w, k).await.unwrap();
                assert_eq!(&meta[..], format!("m{i}").as_bytes());
                assert!(got == body(k, i), "{k} whole");
            }
        });
    }
    let store = open(dir.path(), 128 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        for (i, k) in keys.iter().enumerate() {
            let (_, got) = get(&w, k).await.expect("kept across a restart");
            assert!(got == body(k, i), "{k} whole after a restart");
        }
    });
}

/// A small object is staged for its write in a buffer of its record's size, not a whole
/// staging buffer (256 KiB): 32 fills of 4 KiB at once charge the worker's I/O budget (the
/// `io_buffer_bytes` metric) a few blocks each, so fills do not wait for buffer memory.
fn small_objects_stage_in_buffers_of_their_own_size(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::with_io_buffer_bytes(store.clone(), 32 * MIB).unwrap();
        let keys: Vec<String> = (0..32).map(|i| format!("/stage/{i}")).collect();
        let bodies: Vec<Vec<u8>> = keys.iter().map(|k| content(k, 5, 4096)).collect();
        let puts = keys
            .iter()
            .zip(&bodies)
            .enumerate()
            .map(|(i, (k, b))| put(&w, k, "", "m", b, i % 2 == 0, 4096));
        for r in futures_util::future::join_all(puts).await {
            r.unwrap();
        }
        let peak = w.io_budget().usage().peak;
        assert!(
            peak <= 32 * 16 * 1024,
            "32 fills of 4 KiB peaked at {peak} bytes of I/O buffers"
        );
        assert_eq!(w.io_budget().usage().waits, 0);
        for (k, b) in keys.iter().zip(&bodies) {
            let (_, got) = get(&w, k).await.unwrap();
            assert!(&got == b, "{k} whole");
        }
    });
}

/// A large body's pieces are written without the writer waiting, but no more than four at once:
/// a fill fed faster than its pieces are written holds at most five staging buffers (four in
/// flight, one filling) of the worker's I/O budget, which its hits share.
fn a_large_fill_holds_a_bounded_number_of_pieces(engine: EngineChoice) {
    let dir = tmp();
    let store = open(dir.path(), 128 * MIB, engine);
    run(engine, async {
        let w = StoreWorker::with_io_buffer_bytes(store.clone(), 32 * MIB).unwrap();
        let len = 8 * MIB as usize;
        let body = content("/large", 6, len);
        // Fed in one go: nothing else runs until a write call waits.
        put(&w, "/large", "", "m", &body, true, 64 * 1024)
            .await
            .unwrap();
        let peak = w.io_budget().usage().peak;
        assert!(
            peak <= 5 * 256 * 1024 + 64 * 1024,
            "an 8 MiB fill peaked at {peak} bytes of I/O buffers"
        );
        let (_, got) = get(&w, "/large").await.unwrap();
        assert!(got == body, "whole");
    });
}
