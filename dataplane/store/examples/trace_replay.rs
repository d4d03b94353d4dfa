//! Replay a `key size` trace (`bench/workload/run.sh`, the `.txt` file) through the store API:
//! for each request, look the key up; a hit opens the object and drains its body, a miss writes
//! an object of the trace's size (unless the admission policy refuses it). One request at a time
//! on one worker (a `tokio_uring` runtime), in a fresh store under `/var/tmp`.
//!
//! Prints the object and byte hit ratios, the disk bytes written by kind (the store's own
//! counters, headers, padding and tombstones included) per byte missed and per body byte
//! admitted, and the disk reads, as one JSON line (and a readable summary on stderr).
//!
//! ```text
//! cargo run --release -p edgecache-store --example trace_replay -- \
//!     --trace /var/tmp/edgecache-trace/zipf0.9-ohw0.3-n1500000-k500000-s1.txt \
//!     --size 2GiB --admission second-hit --ram 0 --reinsertion on
//! ```
//!
//! With `--reinsertion on` each request waits until the store's reinsertion pass has looked at
//! the segment in line (it runs on its own thread; one request at a time writes faster than it
//! would keep up with a disk's pace).

#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

use std::io::BufRead;
use std::pin::pin;
use std::time::Instant;

use bytes::Bytes;
use edgecache_store::{Admission, EngineChoice, Store, StoreConfig, StoreError, StoreWorker};
use edgecache_store::{WriteKind, metrics::StoreStats};
use futures_util::StreamExt;

struct Args {
    trace: String,
    size: u64,
    admission: Admission,
    ram: u64,
    engine: EngineChoice,
    limit: u64,
    reinsertion: bool,
}

fn bytes(s: &str) -> u64 {
    let (num, mul) = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .iter()
        .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
        .unwrap_or((s, 1));
    num.parse::<u64>().unwrap() * mul
}

fn parse() -> Args {
    let mut a = Args {
        trace: String::new(),
        size: 2 << 30,
        admission: Admission::All,
        ram: 0,
        engine: EngineChoice::Uring,
        limit: u64::MAX,
        reinsertion: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap();
        match k.as_str() {
            "--trace" => a.trace = v(),
            "--size" => a.size = bytes(&v()),
            "--ram" => a.ram = bytes(&v()),
            "--limit" => a.limit = v().parse().unwrap(),
            "--reinsertion" => a.reinsertion = v() == "on",
            "--admission" => {
                a.admission = match v().as_str() {
                    "all" => Admission::All,
                    "second-hit" => Admission::SecondHit,
                    o => panic!("--admission all|second-hit, not {o}"),
                }
            }
            "--engine" => {
                a.engine = match v().as_str() {
                    "uring" => EngineChoice::Uring,
                    "threads" => EngineChoice::Threads,
                    o => panic!("--engine uring|threads, not {o}"),
                }
            }
            o => panic!("unknown argument {o}"),
        }
    }
    assert!(!a.trace.is_empty(), "--trace FILE is required");
    a
}

#[derive(Default)]
struct Tally {
    requests: u64,
    hits: u64,
    bytes: u64,
    hit_bytes: u64,
    rejected: u64,
    write_failed: u64,
}

fn main() {
    let a = parse();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = Store::open(StoreConfig {
        dir: dir.path().to_path_buf(),
        size: a.size,
        ram_tier_bytes: a.ram,
        engine: a.engine,
        admission: a.admission,
        reinsertion: a.reinsertion,
        ..StoreConfig::default()
    })
    .unwrap();
    let file = std::fs::File::open(&a.trace).unwrap();
    let zeros = Bytes::from(vec![0x5au8; 1 << 20]);
    let started = Instant::now();
    let t = edgecache_store::io::block_on_worker(a.engine, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let mut t = Tally::default();
        for line in std::io::BufReader::new(file).lines() {
            if t.requests >= a.limit {
                break;
            }
            let line = line.unwrap();
            let mut f = line.split_ascii_whitespace();
            let (Some(key), Some(size)) = (f.next(), f.next()) else {
                continue;
            };
            let size: u64 = size.parse().unwrap();
            let key = Bytes::from(format!("/k/{key}"));
            t.requests += 1;
            t.bytes += size;
            // One request at a time is faster than a disk lets the reinsertion pass keep up
            // with; wait for it, as if the writes had come at the disk's pace.
            while !store.reinsertion_caught_up() {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            if let Some(r) = store.lookup(&key).first()
                && let Ok(obj) = w.open(r).await
            {
                let mut body = pin!(obj.body(None));
                let mut n = 0;
                while let Some(c) = body.next().await {
                    n += c.unwrap().len() as u64;
                }
                assert_eq!(n, size, "a hit of the wrong size");
                t.hits += 1;
                t.hit_bytes += size;
                continue;
            }
            match w.begin_write(key, Bytes::new(), Bytes::from_static(b"m"), Some(size)) {
                Ok(mut wr) => {
                    let mut left = size;
                    let mut ok = true;
                    while left > 0 && ok {
                        let n = left.min(zeros.len() as u64);
                        ok = wr.write(zeros.slice(..n as usize)).await.is_ok();
                        left -= n;
                    }
                    if !ok || wr.finish().await.is_err() {
                        t.write_failed += 1;
                    }
                }
                Err(StoreError::NotAdmitted) => t.rejected += 1,
                Err(_) => t.write_failed += 1,
            }
        }
        t
    })
    .unwrap();
    report(&a, &t, &store.stats(), started.elapsed().as_secs_f64());
}

fn report(a: &Args, t: &Tally, s: &StoreStats, secs: f64) {
    let written: u64 = s.disk_write_bytes.iter().sum();
    let missed = t.bytes - t.hit_bytes;
    let by_kind: Vec<String> = WriteKind::ALL
        .iter()
        .map(|k| format!("\"{}\":{}", k.as_str(), s.disk_write_bytes[*k as usize]))
        .collect();
    let ohr = t.hits as f64 / t.requests as f64;
    let bhr = t.hit_bytes as f64 / t.bytes as f64;
    let per_missed = written as f64 / missed as f64;
    let admitted_per_missed = s.admitted_body_bytes as f64 / missed as f64;
    let amplification = written as f64 / s.admitted_body_bytes.max(1) as f64;
    eprintln!(
        "{} size={} ram={} admission={} reinsertion={} (reinserted {}): {} requests in {secs:.1} s; object hit ratio {ohr:.3}, \
         byte hit ratio {bhr:.3}; disk written per byte missed {per_missed:.3} (admitted body \
         per missed {admitted_per_missed:.3}, written per admitted {amplification:.3}); \
         rejected {}, failed writes {}; disk reads {} ({} bytes); evictions {}",
        a.trace,
        a.size,
        a.ram,
        a.admission.as_str(),
        a.reinsertion,
        s.reinserted,
        t.requests,
        t.rejected,
        t.write_failed,
        s.disk_reads,
        s.disk_read_bytes,
        s.evictions,
    );
    println!(
        "{{\"trace\":\"{}\",\"size\":{},\"ram_tier_bytes\":{},\"admission\":\"{}\",\
         \"reinsertion\":{},\"reinserted\":{},\"requests\":{},\"hits\":{},\"bytes\":{},\"hit_bytes\":{},\
         \"object_hit_ratio\":{ohr:.4},\"byte_hit_ratio\":{bhr:.4},\
         \"disk_written_per_byte_missed\":{per_missed:.4},\
         \"admitted_per_byte_missed\":{admitted_per_missed:.4},\
         \"written_per_byte_admitted\":{amplification:.4},\
         \"disk_write_bytes\":{{{}}},\"admitted_body_bytes\":{},\"rejected\":{},\
         \"failed_writes\":{},\"disk_reads\":{},\"disk_read_bytes\":{},\"evictions\":{},\
         \"seconds\":{secs:.1}}}",
        a.trace,
        a.size,
        a.ram,
        a.admission.as_str(),
        a.reinsertion,
        s.reinserted,
        t.requests,
        t.hits,
        t.bytes,
        t.hit_bytes,
        by_kind.join(","),
        s.admitted_body_bytes,
        t.rejected,
        t.write_failed,
        s.disk_reads,
        s.disk_read_bytes,
        s.evictions,
    );
}
