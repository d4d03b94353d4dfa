//! The disk store seen through the server: both I/O engines, O_DIRECT, restarts, eviction,
//! corruption, a full disk, SIGKILL in the middle of writes, and io_uring denied by seccomp.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../store/tests/store_support/disk.rs"]
mod disk;

use std::path::Path;
use std::time::Duration;

use common::*;

fn byte_exact_through(engine: &str) {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.engine = engine;
    opts.size = "512MiB";
    let dp = Dataplane::start(opts);
    let m = dp.metrics();
    assert!(
        m.contains(&format!(
            "edgecache_dataplane_io_engine_info{{engine=\"{engine}\"}} 1"
        )),
        "{m}"
    );
    // Small (buffered, RAM tier), just below and above the O_DIRECT threshold, and 10 MiB.
    for (size, label) in [
        (1u64, "1"),
        (4096, "4k"),
        (65535, "65535"),
        (65536, "64k"),
        (1 << 20, "1m"),
        (10 << 20, "10m"),
        ((10 << 20) + 123, "10485883"),
    ] {
        let path = format!("/obj/{label}/{engine}");
        let miss = dp.get(&path);
        assert_eq!(miss.status, 200, "{path}");
        check_body(size, engine, &miss.body).unwrap_or_else(|e| panic!("{path} miss: {e}"));
        let hit = dp.get(&path);
        assert!(hit.is_hit(), "{path}: {}", hit.cache_status());
        assert!(!hit.truncated);
        check_body(size, engine, &hit.body).unwrap_or_else(|e| panic!("{path} hit: {e}"));
    }
    // A range of the 10 MiB object, from disk.
    let r = dp.request(
        "GET",
        &format!("/obj/10m/{engine}"),
        &[("Range", "bytes=5000000-5099999")],
    );
    assert_eq!(r.status, 206, "{}", r.cache_status());
    assert_eq!(r.body.len(), 100_000);
    assert_eq!(
        &r.body[..],
        &expected_body(10 << 20, engine)[5_000_000..5_100_000]
    );
}

#[test]
fn ten_mib_objects_are_byte_exact_through_io_uring_and_o_direct() {
    if needs_io_uring("ten_mib_objects_are_byte_exact_through_io_uring_and_o_direct") {
        return;
    }
    byte_exact_through("uring");
}

#[test]
fn ten_mib_objects_are_byte_exact_through_the_thread_pool() {
    byte_exact_through("threads");
}

#[test]
fn a_restart_keeps_the_hits() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    for i in 0..20 {
        dp.get(&format!("/obj/{}k/r{i}", 1 + i * 37));
    }
    let dp = dp.restart();
    assert_eq!(
        dp.metric("edgecache_dataplane_store_recovered_objects_total"),
        20.0,
        "{}",
        dp.metrics()
    );
    // A clean stop wrote the index checkpoint, and the start restored it without a scan.
    assert!(
        dp.log_text().contains("from_checkpoint=true"),
        "{}",
        dp.log_text()
    );
    let hits = |dp: &Dataplane| {
        for i in 0..20 {
            let size = 1 + i * 37;
            let r = dp.get(&format!("/obj/{size}k/r{i}"));
            assert!(r.is_hit(), "object {i} after restart: {}", r.cache_status());
            check_body(size as u64 * 1024, format!("r{i}"), &r.body).unwrap();
        }
    };
    hits(&dp);
    assert_eq!(o.requests(), 20);
    // Killed: the last checkpoint still holds, and the start scans only what was written
    // since it; everything is found, the one stored since too.
    dp.get("/obj/3k/after");
    // A fill's store write lands just after its client is answered; a metrics scrape waits
    // for it (src/landing.rs), so the object is on disk before the kill.
    assert_eq!(dp.metric("edgecache_dataplane_store_objects"), 21.0);
    let mut dp = dp;
    dp.kill9();
    let dp = dp.restart();
    assert!(
        dp.log_text().contains("from_checkpoint=true"),
        "{}",
        dp.log_text()
    );
    hits(&dp);
    assert!(dp.get("/obj/3k/after").is_hit());
    assert_eq!(o.requests(), 21);
}

fn dir_bytes(dir: &Path) -> u64 {
    // Allocated bytes, not apparent size: what the disk really holds.
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let md = e.metadata().unwrap();
        if md.is_dir() {
            total += dir_bytes(&e.path());
        } else {
            use std::os::unix::fs::MetadataExt;
            total += md.blocks() * 512;
        }
    }
    total
}

/// Admit-all (`storage.admission: all`): every miss written, the oldest evicted (FIFO).
#[test]
fn eviction_keeps_the_disk_under_budget() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let yaml = "storage:\n  admission: all\n";
    let dp = Dataplane::start_sized_with_yaml(&o.url(), dir.path(), "64MiB", yaml, 2, &[]);
    let cache = dir.path().join("cache");
    // 200 MiB of 1 MiB objects through a 64 MiB store.
    for i in 0..200 {
        let r = dp.get(&format!("/obj/1m/e{i}"));
        assert_eq!(r.status, 200);
    }
    let used = dir_bytes(&cache);
    assert!(
        used <= 64 << 20 | 1 << 20,
        "the store holds {used} bytes on disk for a 64 MiB budget"
    );
    assert!(
        dp.metric("edgecache_dataplane_store_evictions_total") > 0.0,
        "{}",
        dp.metrics()
    );
    assert!(dp.metric("edgecache_dataplane_store_bytes") <= (64 << 20) as f64);
    // The newest objects are still there, byte-exact.
    let r = dp.get("/obj/1m/e199");
    assert!(r.is_hit(), "{}", r.cache_status());
    check_body(1 << 20, "e199", &r.body).unwrap();
}

/// The defaults (`admission: second-hit`, `reinsertion: true`) through a 64 MiB store: 120 MiB
/// of 100 KiB objects asked for twice each go through it; the disk stays under budget, an object
/// read all along outlives every round of the log (copied ahead of its segment's eviction), and
/// once the store is full a first miss is not written while a second is.
#[test]
fn the_default_store_keeps_what_is_read_and_stays_under_budget() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.size = "64MiB";
    let dp = Dataplane::start(opts);
    assert_eq!(dp.get("/obj/100k/hot").status, 200);
    for i in 0..1200 {
        for _ in 0..2 {
            let r = dp.get(&format!("/obj/100k/d{i}"));
            assert_eq!(r.status, 200);
            check_body(100 << 10, format!("d{i}"), &r.body).unwrap();
        }
        if i % 16 == 0 {
            let hot = dp.get("/obj/100k/hot");
            assert!(hot.is_hit(), "round {i}: {}", hot.cache_status());
            check_body(100 << 10, "hot", &hot.body).unwrap();
        }
    }
    let used = dir_bytes(dir.path());
    assert!(used <= 64 << 20 | 1 << 20, "{used} bytes on disk");
    let m = |n: &str| dp.metric(&format!("edgecache_dataplane_{n}"));
    assert!(m("store_evictions_total") > 0.0, "{}", dp.metrics());
    assert!(m("store_reinserted_total") > 0.0, "{}", dp.metrics());
    assert!(
        m("store_admission_rejected_total") > 0.0,
        "{}",
        dp.metrics()
    );
    assert!(dp.get("/obj/100k/hot").is_hit());
    assert!(dp.get("/obj/100k/d1199").is_hit());
}

/// Small objects filled at once: each is written whole (`store_record_writes_total`), in no
/// more disk writes than records (`store_record_write_ops_total`: records finished together,
/// back to back, share one), and each is then a byte-exact hit.
#[test]
fn small_objects_filled_at_once_are_each_stored_whole() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let dp = Dataplane::start(Opts::new(&url, dir.path()));
    std::thread::scope(|s| {
        for t in 0..16 {
            let dp = &dp;
            s.spawn(move || {
                for i in 0..4 {
                    let r = dp.get(&format!("/obj/4k/w{t}-{i}"));
                    assert_eq!(r.status, 200);
                }
            });
        }
    });
    let m = |n: &str| dp.metric(&format!("edgecache_dataplane_{n}"));
    assert_eq!(m("store_record_writes_total"), 64.0, "{}", dp.metrics());
    let ops = m("store_record_write_ops_total");
    assert!((1.0..=64.0).contains(&ops), "{ops} writes for 64 records");
    for t in 0..16 {
        for i in 0..4 {
            let id = format!("w{t}-{i}");
            let r = dp.get(&format!("/obj/4k/{id}"));
            assert!(r.is_hit(), "{id}: {}", r.cache_status());
            check_body(4096, id, &r.body).unwrap();
        }
    }
}

#[test]
fn a_flipped_byte_on_disk_is_detected_and_never_served() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let mut dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let good = expected_body(1 << 20, "flip");
    assert_eq!(dp.get("/obj/1m/flip").status, 200);
    dp.stop();
    // Flip one byte in the middle of the stored body.
    flip_stored_byte(dir.path(), &good[600_000..600_064], 10);
    let dp = dp.restart();
    let r = dp.get("/obj/1m/flip");
    let served_bad_complete = r.status == 200 && !r.truncated && r.body != good;
    assert!(
        !served_bad_complete,
        "a corrupt object was served as a complete 200"
    );
    if r.status == 200 && !r.truncated {
        // Detected before the head: served fresh from the origin instead.
        assert_eq!(r.body, good);
    }
    assert!(
        dp.metric("edgecache_dataplane_store_corrupt_records_total") >= 1.0,
        "{}",
        dp.metrics()
    );
    let again = dp.get("/obj/1m/flip");
    assert_eq!(again.status, 200);
    assert!(!again.truncated);
    assert_eq!(
        again.body, good,
        "after the corrupt copy is dropped, the object comes whole from the origin"
    );
}

struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!(
            "edgecache-tmpfs-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Write `path` until the filesystem is full, then give back `free` bytes of it.
fn fill_but(path: &std::path::Path, free: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![7u8; 1 << 20];
    let mut len = 0u64;
    while f.write_all(&chunk).is_ok() {
        len += chunk.len() as u64;
    }
    let _ = f.flush();
    f.set_len(len.saturating_sub(free)).unwrap();
}

#[test]
fn a_full_disk_never_gives_a_truncated_200_and_the_store_keeps_working() {
    if needs_root(
        "a_full_disk_never_gives_a_truncated_200_and_the_store_keeps_working",
        "mounting a 96 MiB tmpfs (a disk that fills up)",
    ) {
        return;
    }
    let o = origin();
    let fs = Tmpfs::mount("96m");
    let cache = fs.0.join("cache");
    let url = o.url();
    let mut opts = Opts::new(&url, &cache);
    // The store refuses at start a size its filesystem cannot hold and preallocates its
    // segments, so a disk fills up under it only where that did not take (a filesystem
    // without fallocate): punch the empty segments' space out again, then let another file
    // take all but 8 MiB of the disk.
    opts.size = "64MiB";
    opts.engine = "threads";
    let dp = Dataplane::start(opts);
    disk::punch_out_segments(&cache);
    fill_but(&fs.0.join("filler"), 8 << 20);
    // 60 MiB through 8 MiB of free disk: writes fail with ENOSPC along the way.
    for i in 0..60 {
        let r = dp.get(&format!("/obj/1m/full{i}"));
        assert_eq!(r.status, 200, "object {i}");
        assert!(!r.truncated, "object {i} was truncated");
        check_body(1 << 20, format!("full{i}"), &r.body)
            .unwrap_or_else(|e| panic!("object {i}: {e}"));
    }
    let m = dp.metrics();
    assert!(
        metric_value(&m, "edgecache_dataplane_store_write_errors_total") > 0.0,
        "no write error counted:\n{m}"
    );
    // Whatever is served as a hit is whole. `only-if-cached` asks the store alone, so this pass
    // writes nothing (a second pass of misses would evict the first ones, FIFO, and prove little).
    let mut hits = 0;
    for i in 0..60 {
        let r = dp.request(
            "GET",
            &format!("/obj/1m/full{i}"),
            &[("Cache-Control", "only-if-cached")],
        );
        if r.status == 504 {
            continue;
        }
        assert_eq!(r.status, 200);
        assert!(r.is_hit(), "{}", r.cache_status());
        assert!(!r.truncated);
        check_body(1 << 20, format!("full{i}"), &r.body).unwrap();
        hits += 1;
    }
    assert!(
        hits > 0,
        "the store keeps serving what it could store\n{}",
        dp.metrics()
    );
}

#[test]
fn sigkill_in_the_middle_of_writes_never_leads_to_a_wrong_object() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.size = "128MiB";
    let mut dp = Dataplane::start(opts);
    const SIZES: [u64; 4] = [4096, 100 * 1024, 256 * 1024, 1 << 20];
    let path = move |round: usize, t: usize, j: usize| {
        let sizes = SIZES;
        let size = sizes[(t + j) % sizes.len()];
        (
            size,
            format!("/obj/{size}/k{round}-{t}-{j}?slow_ms=5"),
            format!("k{round}-{t}-{j}"),
        )
    };
    let mut checked = 0;
    let mut kept = 0;
    for round in 0..20 {
        // Writers in flight, each round on new keys...
        let listen = dp.listen;
        let writers: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    for j in 0..6 {
                        let (_, p, _) = path(round, t, j);
                        let _ = get(listen, &p, &[]);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(40 + (round * 37 % 150) as u64));
        // ...then SIGKILL, and a restart on the same store.
        dp.kill9();
        for w in writers {
            let _ = w.join();
        }
        dp = dp.restart();
        // What the last round stored whole before this crash is still there: hits.
        if round > 0 {
            for t in 0..8 {
                for j in 0..6 {
                    let (size, p, id) = path(round - 1, t, j);
                    let r = dp.get(&p);
                    assert!(r.is_hit(), "round {round} {p}: {}", r.cache_status());
                    check_body(size, id, &r.body)
                        .unwrap_or_else(|e| panic!("round {round} {p}: {e}"));
                    kept += 1;
                }
            }
        }
        // Every object the store serves after the crash is byte-exact.
        for t in 0..8 {
            for j in 0..6 {
                let (size, p, id) = path(round, t, j);
                let r = dp.get(&p);
                assert_eq!(r.status, 200, "round {round} {p}");
                assert!(!r.truncated, "round {round} {p}: truncated");
                check_body(size, &id, &r.body).unwrap_or_else(|e| panic!("round {round} {p}: {e}"));
                checked += 1;
                // Stored whole before the next crash: served as a hit once published.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !dp.get(&p).is_hit() {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "round {round} {p} never stored"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    assert_eq!(checked, 20 * 48);
    assert_eq!(kept, 19 * 48);
}

/// Install a seccomp filter that makes io_uring_setup/enter/register fail with EPERM, as the
/// default profiles of containerd 2.0 and Docker 25 do.
fn deny_io_uring(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const BPF_JMP_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let errno = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let filter = vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // arch
        ins(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        ins(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        ins(BPF_LD_W_ABS, 0, 0, 0),    // syscall number
        ins(BPF_JMP_JEQ_K, 3, 0, 425), // io_uring_setup
        ins(BPF_JMP_JEQ_K, 2, 0, 426), // io_uring_enter
        ins(BPF_JMP_JEQ_K, 1, 0, 427), // io_uring_register
        ins(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        ins(BPF_RET_K, 0, 0, errno),
    ];
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before exec and only makes two prctl calls on
    // a filter that lives (moved into the closure) for the whole call.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn io_uring_denied_by_seccomp_falls_back_to_the_thread_pool() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    // `auto` (not the default engine of a test run without root): its probe is what fails.
    opts.engine = "auto";
    let dp = Dataplane::start_with(opts, deny_io_uring);
    let m = dp.metrics();
    assert!(
        m.contains("edgecache_dataplane_io_engine_info{engine=\"threads\"} 1"),
        "{m}"
    );
    assert!(
        dp.log_text().contains("io_uring"),
        "the fallback is logged:\n{}",
        dp.log_text()
    );
    dp.get("/obj/1m/seccomp");
    let r = dp.get("/obj/1m/seccomp");
    assert!(r.is_hit());
    check_body(1 << 20, "seccomp", &r.body).unwrap();
    // And `uring` alone refuses to start under the same filter (port 0, on two loopback
    // addresses: it must fail for io_uring, not for a port another test took meanwhile).
    let dir2 = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["serve", "--origin", &o.url(), "--listen", "127.0.0.1:0"])
        .args([
            "--admin",
            "127.0.0.2:0",
            "--cache-size",
            "64MiB",
            "--io-engine",
            "uring",
        ])
        .arg("--cache-dir")
        .arg(dir2.path());
    deny_io_uring(&mut cmd);
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("io_uring"), "{err}");
}
