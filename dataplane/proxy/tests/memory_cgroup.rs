//! The data plane in a v1 memory cgroup of its own with a 256 MiB limit, serving a working set
//! four times the limit (1 GiB of 1 MiB objects, read back with O_DIRECT from the disk store)
//! under concurrent load: no OOM kill, peak usage below the limit, page cache charged to the
//! cgroup near zero, every body byte-exact, and the memory plan made from the 256 MiB limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Dataplane, Opts, check_body, metric_value};

const LIMIT: u64 = 256 << 20;
const OBJECT: u64 = 1 << 20;
const OBJECTS: usize = 1024; // 1 GiB: 4x the limit
const CLIENTS: usize = 8;
const CACHE_LIMIT: u64 = 32 << 20;

/// A v1 memory cgroup made for this test; its processes are killed and it is removed on drop.
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    fn new(limit: u64) -> Option<Cgroup> {
        let root = PathBuf::from("/sys/fs/cgroup/memory");
        if !root.join("memory.limit_in_bytes").exists() {
            return None;
        }
        let dir = root.join(format!(
            "edgecache-memtest-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir(&dir).unwrap();
        let cg = Cgroup { dir };
        cg.write("memory.limit_in_bytes", &limit.to_string());
        Some(cg)
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("write {value} to {file}: {e}"));
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap()
    }

    fn num(&self, file: &str) -> u64 {
        self.read(file).trim().parse().unwrap()
    }

    /// A `key value` line of a stat-like file (`memory.stat`, `memory.oom_control`).
    fn stat(&self, file: &str, key: &str) -> u64 {
        self.read(file)
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no {key} in {file}"))
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Make the command's child join this cgroup before it execs (v1: writing 0 to
    /// `cgroup.procs` moves the writer).
    #[allow(unsafe_code)]
    fn enter_on_exec(&self, cmd: &mut std::process::Command) {
        let path = CString::new(
            self.dir
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: the closure runs in the forked child before exec; it only calls open(2),
        // write(2) and close(2) (async-signal-safe) on a path allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
                Ok(())
            });
        }
    }
}

impl Drop for Cgroup {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: kill(2) on a process of the cgroup this test created (its data plane).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::write(self.dir.join("memory.force_empty"), "0");
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("warning: could not remove {}", self.dir.display());
    }
}

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
    if common::needs_root("memory_cgroup", "a v1 memory cgroup of its own") {
        return;
    }
    let Some(cg) = Cgroup::new(LIMIT) else {
        panic!("no v1 memory controller at /sys/fs/cgroup/memory (this machine has one)");
    };
    let origin = common::origin();
    // On the disk (not a tmpfs): O_DIRECT needs a real file system.
    let dir = tempfile::Builder::new()
        .prefix("edgecache-memtest")
        .tempdir_in("/var/tmp")
        .unwrap();
    let url = origin.url();
    let mut o = Opts::new(&url, dir.path());
    o.size = "1536MiB";
    o.workers = 2;
    o.extra = vec!["--direct-io-threshold".into(), "64KiB".into()];
    // Page cache is charged to the cgroup that first touches it: read the (freshly built)
    // binary here first, so what the cgroup is charged for is the store's, not the program's.
    let _ = std::fs::read(common::BIN);
    let dp = Dataplane::start_with(o, |cmd| cg.enter_on_exec(cmd));
    let pid = dp.child.id() as i32;
    assert!(
        cg.pids().contains(&pid),
        "the data plane is not in the cgroup"
    );

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
    drop(cg);
}
