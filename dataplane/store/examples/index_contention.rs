//! Contention micro-benchmark of the store's index: T threads doing lookups (and a share of
//! inserts) on one shared index, against the same work on one `Mutex<HashMap>` (the index the
//! store had before, which every worker shared under one lock).
//!
//! `cargo run --release -p edgecache-store --example index_contention -- [objects] [secs] [insert%]`
//! (defaults: 1,000,000 objects, 2 s per run, 10% inserts). Prints one line per thread count:
//! million operations per second in total and per thread, for both.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgecache_store::index::{Index, Rec, key_hash};

/// The shape of the store's index before: primary key to its variants.
type OldIndex = HashMap<Vec<u8>, Vec<(Vec<u8>, u64)>>;

fn rec(i: u64) -> Rec {
    Rec {
        block: i as u32,
        blocks: 2,
        epoch_lo: 1,
        verified: false,
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("http://example.com/objects/{i:012}/image.jpg").into_bytes()
}

/// xorshift64*: a cheap per-thread random stream.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn run(threads: usize, secs: f64, op: impl Fn(&mut Rng) + Sync) -> f64 {
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, ops, op) = (&stop, &ops, &op);
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + t as u64 * 7919);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        op(&mut rng);
                    }
                    n += 256;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    ops.load(Ordering::Relaxed) as f64 / secs / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: f64| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let objects = arg(1, 1e6) as u64;
    let secs = arg(2, 2.0);
    let insert_pct = arg(3, 10.0) as u64;
    let seed = 0x5eed;
    let live = |_: Rec| true;
    let age = |r: Rec| u64::from(r.block);

    // Keys built once (the requests' keys exist already when the store is asked).
    let keys: Vec<Vec<u8>> = (0..objects * 2).map(key).collect();
    let t0 = Instant::now();
    let index = Arc::new(Index::new(objects, 1 << 34));
    for i in 0..objects {
        index.insert(
            key_hash(seed, &keys[i as usize]),
            0,
            rec(i),
            32,
            &live,
            &age,
        );
    }
    println!(
        "index: {objects} objects in {:.2} s, {} bytes of slots ({:.1} per object)",
        t0.elapsed().as_secs_f64(),
        index.bytes(),
        index.bytes() as f64 / objects as f64
    );
    let map: Arc<Mutex<OldIndex>> = Arc::new(Mutex::new(
        (0..objects)
            .map(|i| (keys[i as usize].clone(), vec![(Vec::new(), i)]))
            .collect(),
    ));

    println!("threads  index Mops/s (per thread)  mutex+hashmap Mops/s (per thread)");
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    for threads in [1usize, 2, 4, 8] {
        let ix = index.clone();
        let a = run(threads, secs, |rng| {
            let i = rng.next() % (objects * 2);
            let h = key_hash(seed, &keys[i as usize]);
            if rng.next() % 100 < insert_pct {
                ix.insert(h, 0, rec(i), 32, &live, &age);
            } else {
                std::hint::black_box(ix.lookup(h, &live));
            }
        });
        let m = map.clone();
        let b = run(threads, secs, |rng| {
            let i = rng.next() % (objects * 2);
            let k = &keys[i as usize];
            let mut g = match m.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if rng.next() % 100 < insert_pct {
                g.insert(k.clone(), vec![(Vec::new(), i)]);
            } else {
                std::hint::black_box(g.get(k).map(|v| v.len()));
            }
        });
        println!(
            "{threads:>7}  {a:>6.2} ({:>5.2})               {b:>6.2} ({:>5.2}){}",
            a / threads as f64,
            b / threads as f64,
            if threads > cores {
                "   (more threads than cores)"
            } else {
                ""
            }
        );
    }
}
