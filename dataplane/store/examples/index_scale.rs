//! The store's index at scale: RAM per object, lookup cost, disk reads per miss.
//!
//! Store mode (the default) fills a store in a temporary directory under `/var/tmp`, sized to
//! hold them, with `--count` objects of `--body` bytes under 60-byte keys through the store API
//! (one worker, io_uring), then reports the process RSS growth per object, the index's own
//! bytes per object, the time of a lookup (hits and misses, index only), the time of a hit
//! opened and read, and the disk reads of the misses; then the time to open the store again
//! after a clean stop (from the index checkpoint), after a kill with `--after` objects
//! (10,000) written since the checkpoint (the checkpoint and a scan of the segments written
//! since), and with no checkpoint (the scan of every segment). The directory is deleted at the
//! end.
//!
//! The fill is a bulk fill: `--writers` tasks (32) write at once on the worker, as a busy data
//! plane's misses do, so millions of objects take minutes. `--dir DIR` fills a store there and
//! keeps it (sized as printed), for a data plane to be started on (`bench/store_scale.sh`).
//!
//! `--index-only` inserts `--count` entries into an `Index` directly (no disk): what the index
//! costs at counts the test machine's disk cannot hold (10 million 4 KiB records are 80 GB).
//!
//! ```text
//! cargo run --release -p edgecache-store --example index_scale -- --count 1000000 --body 4096
//! cargo run --release -p edgecache-store --example index_scale -- --count 10000000 --index-only
//! ```

#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use edgecache_store::index::{self, Index, Rec};
use edgecache_store::record;
use edgecache_store::{EngineChoice, Store, StoreConfig, StoreWorker};
use futures_util::StreamExt;

mod support;
use support::rss_kib;

struct Args {
    count: u64,
    body: usize,
    index_only: bool,
    /// Objects written after the checkpoint before the kill.
    after: u64,
    /// Writer tasks at once.
    writers: u64,
    /// Fill a store here and keep it (else a temporary directory, deleted at the end).
    dir: Option<std::path::PathBuf>,
}

fn parse() -> Args {
    let mut a = Args {
        count: 1_000_000,
        body: 4096,
        index_only: false,
        after: 10_000,
        writers: 32,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        match k.as_str() {
            "--count" => a.count = it.next().unwrap().parse().unwrap(),
            "--body" => a.body = it.next().unwrap().parse().unwrap(),
            "--index-only" => a.index_only = true,
            "--after" => a.after = it.next().unwrap().parse().unwrap(),
            "--writers" => a.writers = it.next().unwrap().parse::<u64>().unwrap().max(1),
            "--dir" => a.dir = Some(it.next().unwrap().into()),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// A 60-byte key.
fn key(i: u64) -> String {
    format!("GET www.example.com/assets/images/thumbs/obj-{i:014}.jpg")
}

/// Look every key up: nanoseconds per lookup, and the candidates found in all.
fn time_lookups(keys: &[String], find: impl Fn(&[u8]) -> usize) -> (f64, usize) {
    let t = Instant::now();
    let found = keys.iter().map(|k| find(k.as_bytes())).sum();
    (t.elapsed().as_nanos() as f64 / keys.len() as f64, found)
}

fn per_object(bytes: u64, n: u64) -> f64 {
    bytes as f64 / n as f64
}

fn index_only(a: &Args) {
    let rss0 = rss_kib();
    // Sized from a sixteenth of the count, as a store's first guess for a disk of small
    // records, then grown by doublings.
    let ix = Index::new(a.count / 16, 1 << 34);
    let live = |_: Rec| true;
    let age = |r: Rec| u64::from(r.block);
    let seed = 0x5eed;
    let t = Instant::now();
    let mut lost = 0;
    for i in 0..a.count {
        let rec = Rec {
            block: i as u32,
            blocks: 2,
            epoch_lo: 1,
            verified: false,
        };
        let d = ix.insert(
            index::key_hash(seed, key(i).as_bytes()),
            0,
            rec,
            32,
            &live,
            &age,
        );
        lost += d.evicted.len() + usize::from(d.replaced.is_some());
    }
    let insert_ns = t.elapsed().as_nanos() as f64 / a.count as f64;
    let rss = (rss_kib() - rss0) * 1024;
    let n = 1_000_000.min(a.count);
    // Keys made before the clock starts; the newest `n` (the oldest are the likeliest to have
    // been evicted by full windows).
    let hits: Vec<String> = (a.count - n..a.count).map(key).collect();
    let misses: Vec<String> = (a.count..a.count + n).map(key).collect();
    let find = |k: &[u8]| ix.lookup(index::key_hash(seed, k), &live).len();
    let (hit_ns, found) = time_lookups(&hits, find);
    let (miss_ns, false_candidates) = time_lookups(&misses, find);
    println!(
        "index-only count={} rss_growth/object={:.1} B index_bytes/object={:.1} B lost={} \
         insert={:.0} ns hit_lookup={:.0} ns (found {found} of {n}) miss_lookup={:.0} ns \
         false_candidates={false_candidates} of {n}",
        a.count,
        per_object(rss, a.count),
        per_object(ix.bytes(), a.count),
        lost,
        insert_ns,
        hit_ns,
        miss_ns,
    );
}

/// Bytes on disk of one record of this example's keys and meta: packed (header and body in
/// one run of 4 KiB blocks) when it fits a staging buffer, else a header block and the body.
fn record_bytes(body: usize) -> u64 {
    let body = body as u64;
    let packed = record::record_len(record::packed_header_len(60, 0, body, 39), body);
    if packed <= 256 << 10 {
        packed
    } else {
        record::record_len(record::header_len_for(60, 0, body, 39), body)
    }
}

/// A fill of `keys` (`count` of them from `first`) by `writers` tasks at once on this worker.
async fn fill(w: &Rc<StoreWorker>, first: u64, count: u64, writers: u64, body: Bytes, meta: Bytes) {
    let tasks: Vec<_> = (0..writers)
        .map(|t| {
            let (w, body, meta) = (w.clone(), body.clone(), meta.clone());
            tokio::task::spawn_local(async move {
                for i in (first + t..first + count).step_by(writers as usize) {
                    let mut wr = w
                        .begin_write(
                            Bytes::from(key(i).into_bytes()),
                            Bytes::new(),
                            meta.clone(),
                            Some(body.len() as u64),
                        )
                        .unwrap();
                    wr.write(body.clone()).await.unwrap();
                    wr.finish().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

fn store(a: &Args) {
    let record = record_bytes(a.body);
    // Room for every record and a spare segment or two.
    let size = (a.count * record + a.count * record / 50 + (256 << 20)).next_multiple_of(1 << 20);
    let dir = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d).unwrap();
            tempfile::TempDir::with_prefix_in("index-scale-", d).unwrap()
        }
        None => tempfile::tempdir_in("/var/tmp").unwrap(),
    };
    let rss0 = rss_kib();
    let cfg = || StoreConfig {
        dir: dir.path().to_path_buf(),
        size,
        engine: EngineChoice::Uring,
        // The store's own bound (no memory plan): room for its disk in 4 KiB records.
        index_bytes: 0,
        // Every fill written, however full the store: the count is what is measured.
        admission: edgecache_store::Admission::All,
        reinsertion: false,
        ..StoreConfig::default()
    };
    let store = Store::open(cfg()).unwrap();
    let rss_open = rss_kib();
    let run = async {
        let w = Rc::new(StoreWorker::new(store.clone()).unwrap());
        let body = Bytes::from(vec![0x5a_u8; a.body]);
        let meta = Bytes::from_static(b"status: 200\r\ncontent-type: image/jpeg\r\n");
        let t = Instant::now();
        fill(&w, 0, a.count, a.writers, body, meta).await;
        let fill_s = t.elapsed().as_secs_f64();
        let rss_filled = rss_kib();
        let s = store.stats();
        let n = 1_000_000.min(a.count);
        // Lookups alone (the index): hits, then misses; keys made before the clock starts.
        let hits: Vec<String> = (a.count - n..a.count).map(key).collect();
        let misses: Vec<String> = (a.count..a.count + n).map(key).collect();
        let find = |k: &[u8]| store.lookup(k).len();
        let (hit_ns, candidates) = time_lookups(&hits, find);
        let reads = store.stats().disk_reads;
        let (miss_ns, false_candidates) = time_lookups(&misses, find);
        let miss_reads = store.stats().disk_reads - reads;
        // Hits opened and read whole (one read of header and body each).
        let opened = 20_000.min(a.count);
        let step = a.count / opened;
        let reads = store.stats().disk_reads;
        let t = Instant::now();
        let mut lost = 0;
        for j in 0..opened {
            let Some(r) = store.lookup(key(j * step).as_bytes()).into_iter().next() else {
                lost += 1;
                continue;
            };
            let obj = w.open(&r).await.unwrap();
            let mut b = std::pin::pin!(obj.body(None));
            while let Some(c) = b.next().await {
                c.unwrap();
            }
        }
        let open_us = t.elapsed().as_secs_f64() * 1e6 / (opened - lost) as f64;
        let hit_reads = store.stats().disk_reads - reads;
        let opened = opened - lost;
        println!(
            "store count={} body={} objects={} index_evictions={} fill={:.1} s ({:.0} objects/s, {} writers) \
             rss_growth/object={:.1} B (open {} KiB, filled {} KiB) index_bytes/object={:.1} B \
             index_bytes={} bound={} hit_lookup={:.0} ns (candidates {candidates} of {n}) \
             miss_lookup={:.0} ns miss_disk_reads={miss_reads} of {n} false_candidates={false_candidates} \
             hit_open_read={:.1} us disk_reads/hit={:.2} (of {opened}, {lost} not found)",
            a.count,
            a.body,
            s.objects,
            s.index_evictions,
            fill_s,
            a.count as f64 / fill_s,
            a.writers,
            per_object((rss_filled - rss_open) * 1024, a.count),
            rss_open - rss0,
            rss_filled - rss0,
            per_object(s.index_bytes, s.objects),
            s.index_bytes,
            s.index_bound_bytes,
            hit_ns,
            miss_ns,
            open_us,
            hit_reads as f64 / opened as f64,
        );
    };
    tokio_uring::start(run);
    // Time to a usable store: after a clean stop (the checkpoint; the segment active at the
    // stop is scanned again), after a kill with `--after` objects written since the
    // checkpoint (the checkpoint and a scan of the segments written since), and with no
    // checkpoint (the scan of every segment).
    let t = Instant::now();
    let ckpt_bytes = store.checkpoint().unwrap();
    let write_s = t.elapsed().as_secs_f64();
    drop(store);
    let t = Instant::now();
    let store = Store::open(cfg()).unwrap();
    let restore_s = t.elapsed().as_secs_f64();
    assert!(store.restored_from_checkpoint());
    let restored = store.stats().recovered_objects;
    let replayed = store.replayed_segments();
    let after = a.after;
    let writer = store.clone();
    tokio_uring::start(async move {
        let w = Rc::new(StoreWorker::new(writer).unwrap());
        let body = Bytes::from(vec![0x6b_u8; a.body]);
        let meta = Bytes::from_static(b"status: 200\r\n");
        fill(&w, 0, after, a.writers, body, meta).await;
    });
    // A kill: no checkpoint since.
    drop(store);
    let t = Instant::now();
    let store = Store::open(cfg()).unwrap();
    let replay_s = t.elapsed().as_secs_f64();
    assert!(store.restored_from_checkpoint());
    let replay_recovered = store.stats().recovered_objects;
    let replay_segments = store.replayed_segments();
    drop(store);
    std::fs::remove_file(dir.path().join("index.ckpt")).unwrap();
    let t = Instant::now();
    let store = Store::open(cfg()).unwrap();
    let scan_s = t.elapsed().as_secs_f64();
    assert!(!store.restored_from_checkpoint());
    println!(
        "restart count={} checkpoint_write={write_s:.2} s checkpoint_bytes={ckpt_bytes} \
         open_from_checkpoint={restore_s:.2} s (recovered {restored}, segments scanned \
         {replayed}) open_after_kill={replay_s:.2} s ({after} objects written since the \
         checkpoint; recovered {replay_recovered}, segments scanned {replay_segments} of {}) \
         open_by_scan={scan_s:.2} s (recovered {})",
        a.count,
        store.layout().segment_count,
        store.stats().recovered_objects,
    );
    if a.dir.is_some() {
        // Kept for a data plane to start on: with a checkpoint, as after a clean stop.
        store.checkpoint().unwrap();
        drop(store);
        let kept = dir.keep();
        println!(
            "kept {} size={size} (--cache-size {}MiB)",
            kept.display(),
            size >> 20
        );
        return;
    }
    drop(store);
    dir.close().unwrap();
}

fn main() {
    let a = parse();
    if a.index_only {
        index_only(&a);
    } else {
        store(&a);
    }
}
