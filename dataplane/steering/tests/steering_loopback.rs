//! Steering on loopback, checked per connection: a group of listeners on 127.0.0.1, client
//! threads pinned to each CPU, and the accepting listener of every connection (matched by the
//! client's port) compared with the one the mode promises. As root nothing skips.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;

use std::net::{SocketAddr, TcpListener};

use common::{Client, accept_all, connect_from, histogram, is_root, serial, two_cpus};
use edgecache_steering::{SteeringMode, attach, bind_group, bind_listener, detach, worker_for_cpu};

const PER_CPU: usize = 20; // 2 CPUs x 20 = 40 connections per check

fn group(n: usize) -> (Vec<TcpListener>, SocketAddr) {
    let ls = bind_group("127.0.0.1:0".parse().unwrap(), n, 1024).unwrap();
    let addr = ls[0].local_addr().unwrap();
    (ls, addr)
}

fn clients(addr: SocketAddr, cpus: &[usize]) -> Vec<Client> {
    let pins: Vec<_> = cpus.iter().map(|&c| Some(c)).collect();
    connect_from(addr, &pins, PER_CPU, || {})
}

/// Every client landed on `expected(client)`; returns the number checked.
fn check_exact(
    mode: &str,
    listeners: &[&TcpListener],
    clients: &[Client],
    expected: impl Fn(&Client) -> usize,
) -> usize {
    let accepted = accept_all(listeners, clients.len());
    assert_eq!(
        accepted.len(),
        clients.len(),
        "{mode}: not every connection was accepted"
    );
    let mut exact = 0;
    for c in clients {
        let got = accepted[&c.port];
        let want = expected(c);
        assert_eq!(
            got, want,
            "{mode}: client port {} on cpu {:?} landed on listener {got}, expected {want}",
            c.port, c.cpu
        );
        exact += 1;
    }
    println!(
        "VERIFY mode={mode} connections={} exact={exact} ({}%) per-listener={:?}",
        clients.len(),
        exact * 100 / clients.len(),
        histogram(&accepted, listeners.len())
    );
    exact
}

fn skip_unless_root() -> bool {
    if !is_root() {
        println!("SKIPPED: not root (BPF steering needs CAP_BPF)");
        return true;
    }
    false
}

#[test]
fn cpu_mode_lands_on_the_clients_cpu() {
    let _g = serial();
    if skip_unless_root() {
        return;
    }
    let cpus = two_cpus();
    let (ls, addr) = group(2);
    let s = attach(&ls, &cpus, SteeringMode::Cpu, 0, true).unwrap();
    assert_eq!(s.mode_in_effect(), SteeringMode::Cpu);
    println!("{}", s.mapping());
    let cs = clients(addr, &cpus);
    let refs: Vec<_> = ls.iter().collect();
    let n = check_exact("cpu", &refs, &cs, |c| {
        worker_for_cpu(&cpus, c.cpu.unwrap()).unwrap()
    });
    assert!(n >= 40);
    let counts = s.steered_counts().unwrap();
    assert_eq!(counts[..2].iter().sum::<u64>(), 40, "{counts:?}");
}

#[test]
fn incoming_cpu_mode_lands_on_the_clients_cpu() {
    let _g = serial();
    // SO_INCOMING_CPU needs no privilege: runs as any user.
    let cpus = two_cpus();
    let (ls, addr) = group(2);
    let s = attach(&ls, &cpus, SteeringMode::IncomingCpu, 0, true).unwrap();
    assert_eq!(s.mode_in_effect(), SteeringMode::IncomingCpu);
    let cs = clients(addr, &cpus);
    let refs: Vec<_> = ls.iter().collect();
    let n = check_exact("incoming-cpu", &refs, &cs, |c| {
        worker_for_cpu(&cpus, c.cpu.unwrap()).unwrap()
    });
    assert!(n >= 40);
}

#[test]
fn hash_mode_lands_on_hash_mod_n() {
    let _g = serial();
    if skip_unless_root() {
        return;
    }
    let cpus = two_cpus();
    let (ls, addr) = group(2);
    let mut s = attach(&ls, &cpus, SteeringMode::Hash, 0, true).unwrap();
    s.set_observe(true).unwrap();
    let cs = clients(addr, &cpus);
    let refs: Vec<_> = ls.iter().collect();
    // The hash is the kernel's (seeded), so the expected listener comes from what the program
    // saw for each SYN: hash % n, and the selection must have succeeded.
    let n = check_exact("hash", &refs, &cs, |c| {
        let o = s
            .observation(c.port)
            .unwrap()
            .expect("program saw no SYN for this port");
        assert_eq!(o.err, 0, "selection failed for port {}", c.port);
        assert_eq!(o.worker, o.hash % 2);
        o.worker as usize
    });
    assert!(n >= 40);
}

#[test]
fn off_mode_accepts_each_connection_once() {
    let _g = serial();
    let cpus = two_cpus();
    let (ls, addr) = group(2);
    let s = attach(&ls, &cpus, SteeringMode::Off, 0, true).unwrap();
    assert_eq!(s.mode_in_effect(), SteeringMode::Off);
    let cs = clients(addr, &cpus);
    let refs: Vec<_> = ls.iter().collect();
    let accepted = accept_all(&refs, cs.len());
    assert_eq!(accepted.len(), cs.len());
    for c in &cs {
        assert!(
            accepted.contains_key(&c.port),
            "port {} never accepted",
            c.port
        );
    }
    println!(
        "VERIFY mode=off connections={} accepted-once={} per-listener={:?} (kernel hash)",
        cs.len(),
        accepted.len(),
        histogram(&accepted, 2)
    );
}

#[test]
fn cpu_mode_survives_a_dead_worker_and_replace_restores_it() {
    let _g = serial();
    if skip_unless_root() {
        return;
    }
    let cpus = two_cpus();
    let (mut ls, addr) = group(2);
    let mut s = attach(&ls, &cpus, SteeringMode::Cpu, 0, true).unwrap();
    s.set_observe(true).unwrap();

    // Worker 0 dies: its listener closes, its sockarray slot empties by itself.
    let dead = ls.remove(0);
    drop(dead);
    s.worker_closed(0).unwrap();
    let cs = clients(addr, &cpus);
    let accepted = accept_all(&[&ls[0]], cs.len());
    assert_eq!(
        accepted.len(),
        cs.len(),
        "a connection was lost after the worker died"
    );
    let mut exact = 0;
    for c in &cs {
        let o = s.observation(c.port).unwrap().expect("no observation");
        if c.cpu == Some(cpus[1]) {
            // The survivor's mapping stays exact.
            assert_eq!(o.err, 0);
            assert_eq!(o.worker, 1);
            exact += 1;
        } else {
            // The dead worker's slot is empty: the kernel's hash over what is left.
            assert_ne!(o.err, 0, "selected an empty slot?");
        }
    }
    println!(
        "VERIFY mode=cpu worker 0 closed: connections={} accepted={} survivor-exact={exact}/{PER_CPU}",
        cs.len(),
        accepted.len()
    );
    assert_eq!(exact, PER_CPU);

    // Repair: a new listener for worker 0 fills slot 0 again.
    let new0 = bind_listener(addr, 1024).unwrap();
    s.replace(0, &new0).unwrap();
    assert!(s.mapping().routes.iter().all(|r| r.live));
    let cs = clients(addr, &cpus);
    let refs = [&new0, &ls[0]];
    let n = check_exact("cpu-after-replace", &refs, &cs, |c| {
        worker_for_cpu(&cpus, c.cpu.unwrap()).unwrap()
    });
    assert!(n >= 40);
}

#[test]
fn hash_mode_dead_worker_keeps_the_others_exact() {
    let _g = serial();
    if skip_unless_root() {
        return;
    }
    let cpus = vec![0, 1, 0, 1];
    let (mut ls, addr) = group(4);
    let mut s = attach(&ls, &cpus, SteeringMode::Hash, 0, true).unwrap();
    s.set_observe(true).unwrap();
    drop(std::mem::replace(
        &mut ls[1],
        bind_listener(addr, 1024).unwrap(),
    ));
    // ls[1] is now a fresh listener that steering does not know yet: connections of bucket 1 go
    // to the kernel hash over all live listeners; the other buckets stay exact.
    let cs = connect_from(addr, &[Some(0), Some(1)], 30, || {});
    let refs: Vec<_> = ls.iter().collect();
    let accepted = accept_all(&refs, cs.len());
    assert_eq!(accepted.len(), cs.len());
    let (mut exact, mut fallback) = (0, 0);
    for c in &cs {
        let o = s.observation(c.port).unwrap().expect("no observation");
        if o.hash % 4 == 1 {
            assert_ne!(o.err, 0);
            fallback += 1;
        } else {
            assert_eq!(o.err, 0);
            assert_eq!(accepted[&c.port], o.worker as usize);
            exact += 1;
        }
    }
    println!(
        "VERIFY mode=hash worker 1 closed: connections={} exact={exact} fallback(bucket 1)={fallback}",
        cs.len()
    );
    s.replace(1, &ls[1]).unwrap();
    let cs = connect_from(addr, &[Some(0), Some(1)], 20, || {});
    let n = check_exact("hash-after-replace", &refs, &cs, |c| {
        let o = s.observation(c.port).unwrap().unwrap();
        assert_eq!(o.err, 0);
        o.worker as usize
    });
    assert!(n >= 40);
}

#[test]
fn detach_returns_the_group_to_the_kernel_hash() {
    let _g = serial();
    if skip_unless_root() {
        return;
    }
    let cpus = two_cpus();
    let (ls, addr) = group(2);
    let s = attach(&ls, &cpus, SteeringMode::Cpu, 0, true).unwrap();
    detach(&ls[1]).unwrap(); // any member detaches the whole group
    let cs = clients(addr, &cpus);
    let refs: Vec<_> = ls.iter().collect();
    let accepted = accept_all(&refs, cs.len());
    assert_eq!(accepted.len(), cs.len());
    assert_eq!(
        s.steered_counts().unwrap().iter().sum::<u64>(),
        0,
        "program still ran"
    );
    // Detaching twice is not an error.
    detach(&ls[0]).unwrap();
}
