//! Engine resolution when io_uring is denied, as under containerd's default seccomp profile:
//! a child process (this test binary, re-run on `seccomp_child`) installs a seccomp filter that
//! makes `io_uring_setup` fail with EPERM, then checks that `probe_uring` reports it, that
//! `auto` falls back to the thread pool and works end to end, and that `uring` is refused.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use std::process::Command;

use edgecache_store::EngineChoice;
use edgecache_store::{EngineKind, Store, StoreWorker, probe_uring};
use store_support::*;

/// Deny `io_uring_setup` with EPERM for this thread and the threads it creates later.
#[allow(unsafe_code)]
fn deny_io_uring() {
    let nr = libc::SYS_io_uring_setup as u32;
    let mut filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(r, 0);
    // SAFETY: `prog` points to a valid filter array that outlives the call; the kernel copies it.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

#[test]
#[ignore = "a child process of its parent test, which runs it with --ignored"]
fn seccomp_child() {
    let Ok(dir) = std::env::var("EC_SECCOMP_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    probe_uring().unwrap();
    deny_io_uring();
    let e = probe_uring().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");

    let refused = Store::open(cfg(&dir, 64 * MIB, EngineChoice::Uring)).unwrap_err();
    assert_eq!(refused.kind(), "engine");

    let store = Store::open(cfg(&dir, 64 * MIB, EngineChoice::Auto)).unwrap();
    assert_eq!(store.engine(), EngineKind::Threads);
    assert_eq!(store.stats().engine, "threads");
    run(EngineChoice::Threads, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        let body = content("/fallback", 0, 300_000);
        put(&w, "/fallback", "", "m", &body, true, 65_536)
            .await
            .unwrap();
        assert!(get(&w, "/fallback").await.unwrap().1 == body);
    });
    println!("SECCOMP-CHILD-OK");
}

#[test]
fn auto_falls_back_to_threads_when_io_uring_is_denied() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "seccomp_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EC_SECCOMP_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("SECCOMP-CHILD-OK"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the filter, auto picks io_uring on this machine.
    let store = Store::open(cfg(dir.path(), 64 * MIB, EngineChoice::Auto)).unwrap();
    assert_eq!(store.engine(), EngineKind::Uring);
    assert_eq!(
        store.lookup(b"/fallback").len(),
        1,
        "the child's object is recovered"
    );
}
