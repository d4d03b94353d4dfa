//! The data plane in a v1 memory cgroup of its own with a 256 MiB limit, serving a working set
//! four times the limit (1 GiB of 1 MiB objects, read back with O_DIRECT from the disk store)
//! under concurrent load: no OOM kill, peak usage below the limit, page cache charged to the
//! cgroup near zero, every body byte-exact, and the memory plan made from the 256 MiB limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::cgroup::Setup;
use common::{Opts, check_body, metric_value};

const LIMIT: u64 = 256 << 20;
const OBJECT: u64 = 1 << 20;
const OBJECTS: usize = 1024; // 1 GiB: 4x the limit
const CLIENTS: usize = 8;
const CACHE_LIMIT: u64 = 32 << 20;

/// Fetch every object of `ids` with `CLIENTS` threads; every body byte-exact. Returns how many
/// were cache hits.
fn load(listen: std::net::SocketAddr, ids: &[usize], tag: &str) -> usize {
    let hits = Arc::new(AtomicU64::new(0));
    let chunks: Vec<Vec<usize>> = (0..CLIENTS)
        .map(|c| ids.iter().copied().skip(c).step_by(CLIENTS).collect())
        .collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let hits = hits.clone();
            let tag = tag.to_string();
            std::thread::spawn(move || {
                for id in chunk {
                    let path = format!("/obj/{OBJECT}/m{id}");
                    let r = common::get(listen, &path, &[])
                        .unwrap_or_else(|e| panic!("{tag} GET {path}: {e}"));
                    assert_eq!(r.status, 200, "{tag} GET {path}");
                    assert!(!r.truncated, "{tag} GET {path}: truncated");
                    check_body(OBJECT, format!("m{id}"), &r.body)
                        .unwrap_or_else(|e| panic!("{tag} GET {path}: {e}"));
                    if r.is_hit() {
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    hits.load(Ordering::Relaxed) as usize
}

#[test]
fn a_working_set_4x_the_cgroup_limit_stays_out_of_page_cache() {
    let Some(setup) = Setup::new("memory_cgroup", LIMIT) else {
        return;
    };
    let (cg, origin) = (&setup.cg, &setup.origin);
    let url = origin.url();
    let mut o = Opts::new(&url, setup.dir.path());
    o.size = "1536MiB";
    o.workers = 2;
    o.extra = vec!["--direct-io-threshold".into(), "64KiB".into()];
    let dp = setup.start(o);
    let pid = dp.child.id() as i32;

    // The plan comes from the cgroup's limit.
    let m = dp.metrics();
    assert_eq!(
        metric_value(&m, "edgecache_dataplane_memory_limit_bytes"),
        LIMIT as f64,
        "{m}"
    );
    let ram_tier = metric_value(&m, "edgecache_dataplane_ram_tier_capacity_bytes");
    assert!(
        ram_tier > 0.0 && ram_tier < LIMIT as f64,
        "ram tier {ram_tier}"
    );
    let log = dp.log_text();
    let plan = log
        .lines()
        .find(|l| l.contains("memory plan:"))
        .expect("memory plan logged");
    assert!(plan.contains("memory limit 256MiB (cgroup)"), "{plan}");

    // Sample the cgroup's page cache while the load runs.
    let stop = Arc::new(AtomicBool::new(false));
    let peak_cache = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak_cache.clone());
        let stat = cg.dir.join("memory.stat");
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let cache = std::fs::read_to_string(&stat)
                    .ok()
                    .and_then(|t| {
                        t.lines()
                            .find_map(|l| l.strip_prefix("cache ")?.trim().parse::<u64>().ok())
                    })
                    .unwrap_or(0);
                peak.fetch_max(cache, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let ids: Vec<usize> = (0..OBJECTS).collect();
    let t0 = Instant::now();
    let miss_hits = load(dp.listen, &ids, "fill");
    let fill = t0.elapsed();
    let origin_requests = origin.requests();
    assert_eq!(
        origin_requests, OBJECTS as u64,
        "each object fetched from the origin once"
    );
    let reads_before = metric_value(&dp.metrics(), "edgecache_dataplane_disk_reads_total");
    // Read everything back, in another order, as hits.
    let mut again = ids.clone();
    again.reverse();
    let t1 = Instant::now();
    let hits = load(dp.listen, &again, "reread");
    let reread = t1.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let m = dp.metrics();
    let disk_reads = metric_value(&m, "edgecache_dataplane_disk_reads_total") - reads_before;

    let still_running = matches!(
        std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .status(),
        Ok(s) if s.success()
    );
    let oom_kills = cg.stat("memory.oom_control", "oom_kill");
    let under_oom = cg.stat("memory.oom_control", "under_oom");
    let failcnt = cg.num("memory.failcnt");
    let max_usage = cg.num("memory.max_usage_in_bytes");
    let cache = cg.stat("memory.stat", "cache");
    let rss = cg.stat("memory.stat", "rss");
    let peak = peak_cache.load(Ordering::Relaxed);
    println!(
        "VERIFY memory cgroup limit={} MiB working set={} MiB ({OBJECTS} x 1 MiB, {CLIENTS} clients): \
         fill {:.1}s ({miss_hits} hits), reread {:.1}s ({hits}/{OBJECTS} hits, {disk_reads} disk reads); \
         max_usage={:.1} MiB failcnt={failcnt} oom_kill={oom_kills} under_oom={under_oom} \
         cache now={:.1} MiB peak={:.1} MiB rss={:.1} MiB ram tier={:.1} MiB",
        LIMIT >> 20,
        (OBJECTS as u64 * OBJECT) >> 20,
        fill.as_secs_f64(),
        reread.as_secs_f64(),
        max_usage as f64 / 1048576.0,
        cache as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        rss as f64 / 1048576.0,
        ram_tier / 1048576.0,
    );
    assert!(still_running, "the data plane died:\n{}", dp.log_text());
    assert_eq!(oom_kills, 0, "OOM kills in the cgroup");
    assert_eq!(failcnt, 0, "the cgroup hit its limit");
    assert!(
        max_usage < LIMIT,
        "peak usage {max_usage} reached the limit {LIMIT}"
    );
    assert!(
        cache < CACHE_LIMIT && peak < CACHE_LIMIT,
        "page cache charged to the cgroup: now {cache}, peak {peak}"
    );
    assert_eq!(hits, OBJECTS, "every object re-read as a hit");
    assert!(
        disk_reads > 0.0,
        "the re-read should come (mostly) from the disk store"
    );
    drop(dp);
    drop(setup);
}
