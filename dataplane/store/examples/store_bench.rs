//! Store read micro-benchmark: CPU per hit, throughput, and I/O buffer memory.
//!
//! Opens a store in a temporary directory under `/var/tmp`, writes `--count` objects of
//! `--size` bytes, then reads them in a loop from `--conc` concurrent tasks on one worker (a
//! `tokio_uring` runtime, or a tokio current-thread runtime for `--engine threads`) for
//! `--secs` seconds. Each task opens a uniformly random object and drains its body stream, the
//! way the proxy hands it to hyper (chunks are dropped as soon as they are "sent").
//!
//! Prints reads/s, MB/s, process CPU (user + sys, the pool threads included) per read, and the
//! peak of the worker's I/O buffer bytes.
//!
//! ```text
//! cargo run --release -p edgecache-store --example store_bench -- \
//!     --size 102400 --count 2000 --conc 64 --secs 5 --engine uring --drop-cache
//! ```
//! `--drop-cache` drops the page cache after writing (root only), so buffered reads of small
//! objects go to the disk at first; `--budget BYTES` sets the worker's I/O buffer budget.

#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

use std::cell::Cell;
use std::pin::pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgecache_store::EngineChoice;
use edgecache_store::{Store, StoreConfig, StoreWorker};
use futures_util::StreamExt;

mod support;
use support::rss_kib;

struct Args {
    size: usize,
    count: usize,
    conc: usize,
    secs: f64,
    engine: EngineChoice,
    budget: Option<u64>,
    threshold: u64,
    drop_cache: bool,
    ram: u64,
}

fn parse() -> Args {
    let mut a = Args {
        size: 100 * 1024,
        count: 1000,
        conc: 64,
        secs: 5.0,
        engine: EngineChoice::Uring,
        budget: None,
        threshold: 64 * 1024,
        drop_cache: false,
        ram: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap();
        match k.as_str() {
            "--size" => a.size = v().parse().unwrap(),
            "--count" => a.count = v().parse().unwrap(),
            "--conc" => a.conc = v().parse().unwrap(),
            "--secs" => a.secs = v().parse().unwrap(),
            "--budget" => a.budget = Some(v().parse().unwrap()),
            "--threshold" => a.threshold = v().parse().unwrap(),
            "--ram" => a.ram = v().parse().unwrap(),
            "--drop-cache" => a.drop_cache = true,
            "--engine" => {
                a.engine = match v().as_str() {
                    "threads" => EngineChoice::Threads,
                    _ => EngineChoice::Uring,
                }
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // getrusage only writes into the struct we own.
    #[allow(unsafe_code)]
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_SELF is a valid `who`.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// xorshift: a cheap deterministic choice of the next key.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() {
    let a = parse();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let size = (a.count as u64 * (a.size as u64 + 8192) * 5 / 4).max(256 << 20);
    let store = Store::open(StoreConfig {
        dir: dir.path().to_path_buf(),
        size,
        size_auto: false,
        direct_io_threshold: a.threshold,
        max_object_size: 512 << 20,
        ram_tier_bytes: a.ram,
        engine: a.engine,
        reads_in_flight: 64,
        verify_every_read: false,
        max_variants_per_key: 32,
        index_bytes: 0,
        admission: edgecache_store::Admission::All,
        reinsertion: false,
    })
    .unwrap();
    let run = async {
        let w = match a.budget {
            Some(b) => StoreWorker::with_io_buffer_bytes(store.clone(), b).unwrap(),
            None => StoreWorker::new(store.clone()).unwrap(),
        };
        let body = Bytes::from(vec![0x5a_u8; a.size]);
        for i in 0..a.count {
            let key = format!("/bench/{i}");
            let mut wr = w
                .begin_write(
                    Bytes::from(key.into_bytes()),
                    Bytes::new(),
                    Bytes::from_static(
                        b"status: 200\r\ncontent-type: application/octet-stream\r\n",
                    ),
                    Some(a.size as u64),
                )
                .unwrap();
            for c in body.chunks(16 * 1024) {
                wr.write(body.slice_ref(c)).await.unwrap();
            }
            wr.finish().await.unwrap();
        }
        eprintln!("after writing {} objects: VmRSS {} KiB", a.count, rss_kib());
        if a.drop_cache {
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
        }
        let keys: Rc<Vec<Bytes>> = Rc::new(
            (0..a.count)
                .map(|i| Bytes::from(format!("/bench/{i}").into_bytes()))
                .collect(),
        );
        let w = Rc::new(w);
        let stop = Rc::new(Cell::new(false));
        let reads = Rc::new(Cell::new(0u64));
        let bytes = Rc::new(Cell::new(0u64));
        let t0 = Instant::now();
        let c0 = cpu_time();
        let mut tasks = Vec::new();
        for t in 0..a.conc {
            let (w, keys, stop, reads, bytes) = (
                w.clone(),
                keys.clone(),
                stop.clone(),
                reads.clone(),
                bytes.clone(),
            );
            tasks.push(tokio::task::spawn_local(async move {
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1);
                while !stop.get() {
                    let k = &keys[(next(&mut x) % keys.len() as u64) as usize];
                    let refs = w.store().lookup(k);
                    let obj = w.open(&refs[0]).await.unwrap();
                    let mut s = pin!(obj.body(None));
                    let mut n = 0;
                    while let Some(c) = s.next().await {
                        n += c.unwrap().len() as u64;
                    }
                    assert_eq!(n, a.size as u64);
                    reads.set(reads.get() + 1);
                    bytes.set(bytes.get() + n);
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs_f64(a.secs)).await;
        stop.set(true);
        for t in tasks {
            t.await.unwrap();
        }
        let wall = t0.elapsed().as_secs_f64();
        let cpu = (cpu_time() - c0).as_secs_f64();
        let n = reads.get() as f64;
        let u = w.io_buffer_usage();
        let (in_use, peak, cap) = (u.charged - u.pooled, u.peak, u.capacity);
        let st = w.store().stats();
        eprintln!(
            "ram tier {} KiB ({} objects), index {} KiB",
            st.ram_tier_bytes >> 10,
            st.ram_tier_objects,
            w.store().index_bytes() >> 10
        );
        println!(
            "engine={:?} size={} conc={} reads/s={:.0} MB/s={:.0} cpu_us/read={:.2} cores={:.2} \
             buf_peak={} KiB buf_cap={} KiB buf_in_use_end={} rss={} KiB",
            a.engine,
            a.size,
            a.conc,
            n / wall,
            bytes.get() as f64 / wall / 1e6,
            cpu / n * 1e6,
            cpu / wall,
            peak >> 10,
            cap >> 10,
            in_use,
            rss_kib(),
        );
    };
    edgecache_store::io::block_on_worker(a.engine, run).unwrap();
}
