//! The live v1 memory controller: a cgroup of our own with a 256 MiB limit, a child process in
//! it reads its limit. Needs root and the v1 memory hierarchy at /sys/fs/cgroup/memory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

const CHILD_ENV: &str = "EDGECACHE_HOST_CGROUP_CHILD";
const V1_MEMORY: &str = "/sys/fs/cgroup/memory";

/// Removes the cgroup when the test ends, also on panic.
struct CgroupGuard(PathBuf);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        // The child has exited; retry briefly in case the kernel still holds it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs in the child only (the parent re-executes this test binary with CHILD_ENV set).
#[test]
#[ignore = "a child process of its parent test, which runs it with --ignored"]
fn child_prints_its_memory_limit() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let cg = edgecache_host::memory_cgroup().unwrap();
    let limit = edgecache_host::read_memory_limit().unwrap();
    let usage = edgecache_host::read_memory_usage().unwrap();
    println!("CGROUP={:?}", cg.map(|c| c.dir));
    println!(
        "LIMIT={}",
        limit.map_or("none".to_string(), |l| l.to_string())
    );
    println!("USAGE={usage:?}");
}

#[test]
fn v1_memory_cgroup_with_256mib_limit() {
    if !is_root() {
        println!("SKIPPED: not root (needs to create a memory cgroup)");
        return;
    }
    assert!(
        Path::new(V1_MEMORY).join("memory.limit_in_bytes").is_file(),
        "no cgroup v1 memory hierarchy at {V1_MEMORY}"
    );
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = PathBuf::from(format!(
        "{V1_MEMORY}/edgecache-host-test-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir(&dir).unwrap();
    let _guard = CgroupGuard(dir.clone());
    std::fs::write(dir.join("memory.limit_in_bytes"), "268435456").unwrap();

    let exe = std::env::current_exe().unwrap();
    // The shell moves itself into the cgroup, then becomes the test binary.
    let script = format!(
        "echo $$ > '{}' && exec '{}' --exact child_prints_its_memory_limit --ignored --nocapture --test-threads=1",
        dir.join("cgroup.procs").display(),
        exe.display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    let limit = stdout
        .lines()
        .find_map(|l| l.split_once("LIMIT=").map(|x| x.1))
        .expect("child printed no LIMIT");
    assert_eq!(limit, "268435456", "{stdout}");
    let cgroup = stdout
        .lines()
        .find_map(|l| l.split_once("CGROUP=").map(|x| x.1))
        .unwrap();
    assert!(cgroup.contains(&*dir.to_string_lossy()), "{cgroup}");
}
