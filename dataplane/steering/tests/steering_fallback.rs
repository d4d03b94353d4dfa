//! Without CAP_BPF: a child process with CAP_BPF and CAP_SYS_ADMIN dropped (capsh, package
//! libcap2-bin) attaches the BPF modes. Not required: it falls back to `off` with a reason and
//! still serves; required: an error. SO_INCOMING_CPU needs no capability and still works.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;

use std::process::Command;

use common::{accept_all, connect_from, is_root, serial};
use edgecache_steering::{SteeringMode, attach, bind_group};

const CHILD_ENV: &str = "EDGECACHE_STEERING_FALLBACK_CHILD";
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

fn cap_eff() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

/// Runs only in the child (the parent re-executes this test binary under capsh).
#[test]
#[ignore = "a child process of its parent test, which runs it with --ignored"]
fn child_attach_without_cap_bpf() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let eff = cap_eff();
    println!("CAPEFF={eff:#x}");
    assert_eq!(eff & (1 << CAP_BPF), 0, "CAP_BPF still effective");
    assert_eq!(
        eff & (1 << CAP_SYS_ADMIN),
        0,
        "CAP_SYS_ADMIN still effective"
    );
    let cpus = [0, 1];
    for mode in [SteeringMode::Cpu, SteeringMode::Hash, SteeringMode::Queue] {
        let ls = bind_group("127.0.0.1:0".parse().unwrap(), 2, 128).unwrap();
        let s = attach(&ls, &cpus, mode, 0, false).unwrap();
        println!(
            "MODE {mode} IN_EFFECT={} REASON={}",
            s.mode_in_effect(),
            s.fallback_reason().unwrap_or("-")
        );
        // The group still serves, on the kernel's hash.
        let addr = ls[0].local_addr().unwrap();
        let cs = connect_from(addr, &[Some(0), Some(1)], 5, || {});
        let refs: Vec<_> = ls.iter().collect();
        let accepted = accept_all(&refs, cs.len());
        println!("MODE {mode} SERVED={}/{}", accepted.len(), cs.len());

        let ls = bind_group("127.0.0.1:0".parse().unwrap(), 2, 128).unwrap();
        match attach(&ls, &cpus, mode, 0, true) {
            Ok(s) => println!("MODE {mode} REQUIRED_OK={}", s.mode_in_effect()),
            Err(e) => println!("MODE {mode} REQUIRED_ERR={} {e}", e.category()),
        }
    }
    let ls = bind_group("127.0.0.1:0".parse().unwrap(), 2, 128).unwrap();
    let s = attach(&ls, &cpus, SteeringMode::IncomingCpu, 0, true).unwrap();
    println!("MODE incoming-cpu IN_EFFECT={}", s.mode_in_effect());
}

#[test]
fn without_cap_bpf_falls_back_to_off_or_refuses_when_required() {
    let _g = serial();
    if !is_root() {
        println!("SKIPPED: not root (needs to drop capabilities it has)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("capsh")
        .arg("--drop=cap_bpf,cap_sys_admin")
        .arg("--")
        .arg("-c")
        .arg(format!(
            "exec '{}' --exact child_attach_without_cap_bpf --ignored --nocapture --test-threads=1",
            exe.display()
        ))
        .env(CHILD_ENV, "1")
        .output()
        .expect("run capsh (apt-get install -y libcap2-bin)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.split_once(prefix).map(|x| x.1.to_string()))
            .unwrap_or_else(|| panic!("child printed no `{prefix}`: {stdout}"))
    };
    for mode in ["cpu", "hash", "queue"] {
        assert_eq!(
            line(&format!("MODE {mode} IN_EFFECT=")).split(' ').next(),
            Some("off")
        );
        let reason = line(&format!("MODE {mode} IN_EFFECT=off REASON="));
        assert!(
            reason.contains("CAP_BPF"),
            "{mode}: reason does not name CAP_BPF: {reason}"
        );
        assert_eq!(line(&format!("MODE {mode} SERVED=")), "10/10");
        let err = line(&format!("MODE {mode} REQUIRED_ERR="));
        assert!(err.starts_with("unavailable "), "{mode}: {err}");
    }
    assert_eq!(line("MODE incoming-cpu IN_EFFECT="), "incoming-cpu");
}
