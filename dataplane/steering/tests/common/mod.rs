//! Shared helpers of the steering integration tests: root check, client threads pinned to a
//! CPU, and an accept loop that records which listener took which client port.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Tests in one binary run one at a time: they pin threads and count connections.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// One client connection: the CPU its thread was pinned to, and its local port.
pub struct Client {
    pub cpu: Option<usize>,
    pub port: u16,
    pub stream: TcpStream,
}

/// Open `count` connections to `addr` from a thread pinned to each of `cpus` (`None` = not
/// pinned), running `prepare` first on each thread (e.g. entering a network namespace).
pub fn connect_from(
    addr: SocketAddr,
    cpus: &[Option<usize>],
    count: usize,
    prepare: impl Fn() + Send + Sync + Clone + 'static,
) -> Vec<Client> {
    let handles: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let prepare = prepare.clone();
            std::thread::spawn(move || {
                prepare();
                if let Some(c) = cpu {
                    edgecache_host::pin_current_thread(c).unwrap();
                }
                (0..count)
                    .map(|_| {
                        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
                        let port = stream.local_addr().unwrap().port();
                        Client { cpu, port, stream }
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Accept on every listener (nonblocking poll loop) until `expected` connections arrived or 10 s
/// passed. Returns client port -> listener index; panics when a port is accepted twice.
pub fn accept_all(listeners: &[&TcpListener], expected: usize) -> HashMap<u16, usize> {
    let mut got = HashMap::new();
    let mut keep = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < expected && Instant::now() < deadline {
        let mut idle = true;
        for (i, l) in listeners.iter().enumerate() {
            match l.accept() {
                Ok((s, peer)) => {
                    idle = false;
                    assert!(
                        got.insert(peer.port(), i).is_none(),
                        "port {} accepted twice",
                        peer.port()
                    );
                    keep.push(s);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("accept on listener {i}: {e}"),
            }
        }
        if idle {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // Nothing more may arrive: every connection is accepted exactly once.
    std::thread::sleep(Duration::from_millis(50));
    for (i, l) in listeners.iter().enumerate() {
        if let Ok((_, peer)) = l.accept() {
            panic!(
                "unexpected extra connection from port {} on listener {i}",
                peer.port()
            );
        }
    }
    got
}

/// Connections per listener.
pub fn histogram(accepted: &HashMap<u16, usize>, n: usize) -> Vec<usize> {
    let mut h = vec![0; n];
    for &l in accepted.values() {
        h[l] += 1;
    }
    h
}

/// The two CPUs the loopback tests pin clients to.
pub fn two_cpus() -> Vec<usize> {
    let cpus = edgecache_host::worker_cpus(0).unwrap();
    assert!(
        cpus.len() >= 2,
        "these tests need 2 CPUs in the affinity mask, have {cpus:?}"
    );
    cpus[..2].to_vec()
}
