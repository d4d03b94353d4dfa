//! The test support's own promises, which every data-plane test relies on: each data plane gets
//! ports of its own. The data plane binds its listeners with SO_REUSEPORT, so a port shared by
//! two of them binds without an error and splits their connections: a test would then see
//! another test's cache and origin.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::net::TcpListener;

use common::*;

#[test]
fn free_port_never_hands_out_a_port_twice() {
    // Drawn at random from the ephemeral range, 3,000 ports would repeat one about 150 times.
    let mut seen = HashSet::new();
    for _ in 0..3_000 {
        let p = free_port();
        assert!(seen.insert(p), "port {p} handed out twice");
    }
}

#[test]
fn a_restart_whose_port_was_taken_meanwhile_comes_up_on_another() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    assert_eq!(dp.get("/obj/4k/1").status, 200);
    let (old_listen, old_admin) = (dp.listen, dp.admin);
    let mut squatters = Vec::new();
    let dp = dp.restart_after(|| {
        squatters.push(TcpListener::bind(old_listen).unwrap());
        squatters.push(TcpListener::bind(old_admin).unwrap());
    });
    assert_ne!(dp.listen, old_listen);
    assert_ne!(dp.admin, old_admin);
    let r = dp.get("/obj/4k/1");
    assert_eq!(r.status, 200);
    assert!(
        r.is_hit(),
        "the same cache, restarted: {}",
        r.cache_status()
    );
    check_body(4096, 1, &r.body).unwrap();
}
