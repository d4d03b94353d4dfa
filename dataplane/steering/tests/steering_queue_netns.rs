//! `queue` mode over a veth pair with 4 TX/RX queues between two network namespaces that this
//! test creates (and removes, also on panic). On the receiving side `skb->queue_mapping` is the
//! sender's TX queue, chosen by flow hash, so the expected worker of each connection comes
//! from what the program saw for its SYN (the `seen` map, keyed by client port):
//! `(queue_mapping - 0) % 4`, offset 0 on veth. Then a worker dies and is replaced.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;

use std::net::{SocketAddr, TcpListener};

use edgecache_testnet::{VethPair, enter_netns};

use common::{Client, accept_all, connect_from, histogram, is_root, serial};
use edgecache_steering::{
    NO_SLOT, Steering, SteeringMode, attach, bind_group, bind_listener, worker_for_queue,
};

const WORKERS: usize = 4;
const CONNS: usize = 48; // 2 threads x 24

/// Run `f` on a thread inside namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter_netns(&ns);
        f()
    })
    .join()
    .unwrap()
}

fn clients(ns: &VethPair, addr: SocketAddr, per_thread: usize) -> Vec<Client> {
    let cli = ns.cli.clone();
    connect_from(addr, &[None, None], per_thread, move || enter_netns(&cli))
}

struct Tally {
    exact: usize,
    fallback: usize,
    queues: [usize; 4],
}

/// Check every connection against the queue its SYN arrived on. Connections whose worker is
/// in `dead` must have been left to the kernel hash (and still accepted, by a live listener).
fn check(
    s: &Steering,
    offset: u32,
    listeners: &[&TcpListener],
    cs: &[Client],
    dead: &[usize],
    label: &str,
) -> Tally {
    let accepted = accept_all(listeners, cs.len());
    assert_eq!(
        accepted.len(),
        cs.len(),
        "{label}: not every connection was accepted"
    );
    let mut t = Tally {
        exact: 0,
        fallback: 0,
        queues: [0; 4],
    };
    for c in cs {
        let o = s
            .observation(c.port)
            .unwrap()
            .unwrap_or_else(|| panic!("{label}: no observation for port {}", c.port));
        t.queues[(o.queue as usize).min(3)] += 1;
        let Some(want) = worker_for_queue(o.queue, offset, WORKERS) else {
            // queue_mapping below the offset: "not recorded", left to the kernel's hash.
            assert_eq!(o.index, NO_SLOT, "{label}: unrecorded queue got an index");
            t.fallback += 1;
            continue;
        };
        if dead.contains(&want) {
            assert_eq!(
                o.index, NO_SLOT,
                "{label}: dead worker {want} still has an index"
            );
            t.fallback += 1;
        } else {
            let got = accepted[&c.port];
            assert_eq!(
                got, want,
                "{label}: port {} queue_mapping {} landed on worker {got}, expected {want}",
                c.port, o.queue
            );
            t.exact += 1;
        }
    }
    println!(
        "VERIFY mode=queue {label}: connections={} exact={} fallback(kernel hash)={} queue histogram={:?} per-listener={:?}",
        cs.len(),
        t.exact,
        t.fallback,
        t.queues,
        histogram(&accepted, listeners.len())
    );
    t
}

#[test]
fn queue_mode_over_a_4_queue_veth() {
    let _g = serial();
    if !is_root() {
        println!("SKIPPED: not root (needs network namespaces and CAP_BPF)");
        return;
    }
    let ns = VethPair::new('x', 7);
    let ip = ns.server_ip.clone();
    let mut ls = in_netns(&ns.srv, move || {
        bind_group(format!("{ip}:0").parse().unwrap(), WORKERS, 1024).unwrap()
    });
    let addr = ls[0].local_addr().unwrap();
    let cpus = vec![0, 1, 0, 1];
    let mut s = attach(&ls, &cpus, SteeringMode::Queue, 0, true).unwrap();
    assert_eq!(s.mode_in_effect(), SteeringMode::Queue);
    s.set_observe(true).unwrap();
    println!("{}", s.mapping());

    // 1. Every connection on the worker of its queue.
    let cs = clients(&ns, addr, CONNS / 2);
    let refs: Vec<_> = ls.iter().collect();
    let t = check(&s, 0, &refs, &cs, &[], "all workers");
    assert_eq!(t.exact, CONNS);
    assert!(
        t.queues.iter().filter(|&&q| q > 0).count() >= 2,
        "flows used one queue only: {:?}",
        t.queues
    );

    // 2. Worker 1 dies. The kernel moves the last listener (worker 3) into its place; the
    //    others must stay exact, worker 1's queue falls back to the hash.
    let dead = ls.remove(1);
    drop(dead);
    s.worker_closed(1).unwrap();
    assert_eq!(s.group_order().unwrap(), [Some(0), None, Some(2), Some(1)]);
    let cs = clients(&ns, addr, CONNS / 2);
    let refs_dead = [&ls[0], &ls[1], &ls[2]]; // workers 0, 2, 3
    let accepted_by_worker = |l: usize| [0, 2, 3][l];
    // Map listener positions back to worker numbers for the check.
    let accepted = accept_all(&refs_dead, cs.len());
    assert_eq!(
        accepted.len(),
        cs.len(),
        "a connection was lost after worker 1 died"
    );
    let (mut exact, mut fallback) = (0, 0);
    for c in &cs {
        let o = s.observation(c.port).unwrap().unwrap();
        let want = worker_for_queue(o.queue, 0, WORKERS).unwrap();
        if want == 1 {
            assert_eq!(o.index, NO_SLOT);
            fallback += 1;
        } else {
            assert_eq!(
                accepted_by_worker(accepted[&c.port]),
                want,
                "port {} queue {}",
                c.port,
                o.queue
            );
            exact += 1;
        }
    }
    println!(
        "VERIFY mode=queue worker 1 closed: connections={} exact={exact} fallback(dead worker)={fallback}",
        cs.len()
    );
    assert_eq!(exact + fallback, cs.len());

    // 3. Replace worker 1: the new listener joins the group last; the mapping is exact again.
    let new1 = in_netns(&ns.srv, move || bind_listener(addr, 1024).unwrap());
    s.replace(1, &new1).unwrap();
    assert_eq!(
        s.group_order().unwrap(),
        [Some(0), Some(3), Some(2), Some(1)]
    );
    ls.insert(1, new1);
    let cs = clients(&ns, addr, CONNS / 2);
    let refs: Vec<_> = ls.iter().collect();
    let t = check(&s, 0, &refs, &cs, &[], "after replace");
    assert_eq!(t.exact, CONNS);
    let counts = s.steered_counts().unwrap();
    println!("steered per worker + kernel-hash: {counts:?}");
    drop(ns);
}

#[test]
fn queue_offset_1_as_on_a_nic_driver() {
    let _g = serial();
    if !is_root() {
        println!("SKIPPED: not root (needs network namespaces and CAP_BPF)");
        return;
    }
    // veth records the raw queue; with offset 1 (what NIC drivers need), queue_mapping 0 reads
    // as "not recorded" (kernel hash) and queue k goes to worker (k - 1) % 4.
    let ns = VethPair::new('x', 7);
    let ip = ns.server_ip.clone();
    let ls = in_netns(&ns.srv, move || {
        bind_group(format!("{ip}:0").parse().unwrap(), WORKERS, 1024).unwrap()
    });
    let addr = ls[0].local_addr().unwrap();
    let mut s = attach(&ls, &[0, 1, 0, 1], SteeringMode::Queue, 1, true).unwrap();
    s.set_observe(true).unwrap();
    let cs = clients(&ns, addr, CONNS / 2);
    let refs: Vec<_> = ls.iter().collect();
    let t = check(&s, 1, &refs, &cs, &[], "offset 1");
    assert_eq!(t.exact + t.fallback, CONNS);
    assert_eq!(t.fallback, t.queues[0], "only queue_mapping 0 falls back");
}
