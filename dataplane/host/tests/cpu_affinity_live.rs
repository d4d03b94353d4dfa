//! worker_cpus() follows the affinity mask: a child started under `taskset -c <cpu>` plans one
//! worker on that CPU (not CPU 0..N-1).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::process::Command;

const CHILD_ENV: &str = "EDGECACHE_HOST_AFFINITY_CHILD";

/// Runs in the child only.
#[test]
#[ignore = "a child process of its parent test, which runs it with --ignored"]
fn child_prints_worker_cpus() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    println!("DEFAULT={:?}", edgecache_host::worker_cpus(0).unwrap());
    println!("REQUESTED3={:?}", edgecache_host::worker_cpus(3).unwrap());
}

#[test]
fn taskset_restricts_the_workers() {
    let mask = edgecache_host::affinity_mask().unwrap();
    let cpu = *mask.last().unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("taskset")
        .args(["-c", &cpu.to_string()])
        .arg(&exe)
        .args([
            "--exact",
            "child_prints_worker_cpus",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run taskset (package util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let line = |p: &str| {
        stdout
            .lines()
            .find_map(|l| l.split_once(p).map(|x| x.1.to_string()))
            .unwrap()
    };
    println!("taskset -c {cpu}: {stdout}");
    assert_eq!(line("DEFAULT="), format!("[{cpu}]"));
    assert_eq!(line("REQUESTED3="), format!("[{cpu}, {cpu}, {cpu}]"));
}
