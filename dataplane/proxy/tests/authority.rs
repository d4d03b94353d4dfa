//! One authority for a request (RFC 9112 3.2.2): with an absolute-form target the target's
//! authority replaces Host, for the cache key, the Host the origin sees and PURGE alike, so
//! `GET http://victim/x` with `Host: attacker` can never store the attacker's page under the
//! victim's key. A request with two Host fields is refused (RFC 9112 3.2).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

/// A request with an exact request target and exact Host lines.
fn raw_get(dp: &Dataplane, method: &str, target: &str, hosts: &[&str]) -> Resp {
    raw_to(dp.listen, method, target, hosts)
}

fn raw_to(addr: std::net::SocketAddr, method: &str, target: &str, hosts: &[&str]) -> Resp {
    use std::io::{BufReader, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\n");
    for h in hosts {
        req.push_str(&format!("Host: {h}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    read_response(&mut BufReader::new(s), method == "HEAD").unwrap()
}

const P: &str = "/obj/4k/auth?echo_host=1";

#[test]
fn an_absolute_target_wins_over_host_for_the_key_and_the_origin() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    // The attacker's request: absolute-form naming the victim, Host naming the attacker.
    let r = raw_get(
        &dp,
        "GET",
        &format!("http://victim.example{P}"),
        &["attacker.example"],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-origin-host"),
        "victim.example",
        "the origin saw the target's authority"
    );
    // The victim's own request is a hit of what the origin sent for the victim.
    let r = raw_get(&dp, "GET", P, &["victim.example"]);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("x-origin-host"), "victim.example");
    // The attacker's host has nothing stored.
    let r = raw_get(&dp, "GET", P, &["attacker.example"]);
    assert!(!r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("x-origin-host"), "attacker.example");
    assert_eq!(o.requests_for(P), 2);
}

#[test]
fn origin_form_first_then_absolute_form_is_the_same_key() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let r = raw_get(&dp, "GET", P, &["victim.example"]);
    assert!(!r.is_hit());
    // An absolute-form request for the victim with any Host is the victim's entry ...
    let r = raw_get(
        &dp,
        "GET",
        &format!("http://victim.example{P}"),
        &["attacker.example"],
    );
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("x-origin-host"), "victim.example");
    // ... and one for the attacker with the victim's Host is the attacker's, fetched as such.
    let r = raw_get(
        &dp,
        "GET",
        &format!("http://attacker.example{P}"),
        &["victim.example"],
    );
    assert!(!r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("x-origin-host"), "attacker.example");
    let r = raw_get(&dp, "GET", P, &["victim.example"]);
    assert!(r.is_hit());
    assert_eq!(
        r.header("x-origin-host"),
        "victim.example",
        "the victim's entry is intact"
    );
}

#[test]
fn ports_in_the_target_are_part_of_the_authority() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let r = raw_get(
        &dp,
        "GET",
        &format!("http://victim.example:8080{P}"),
        &["victim.example"],
    );
    assert_eq!(r.header("x-origin-host"), "victim.example:8080");
    // Not the port-less entry ...
    assert!(!raw_get(&dp, "GET", P, &["victim.example"]).is_hit());
    // ... but the same as Host with that port, and the default port is no port.
    assert!(raw_get(&dp, "GET", P, &["victim.example:8080"]).is_hit());
    let r = raw_get(
        &dp,
        "GET",
        &format!("http://victim.example:80{P}"),
        &["attacker.example:8080"],
    );
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("x-origin-host"), "victim.example");
}

#[test]
fn two_host_fields_are_refused() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    for hosts in [
        ["victim.example", "attacker.example"],
        ["attacker.example", "victim.example"],
    ] {
        let r = raw_get(&dp, "GET", P, &hosts);
        assert_eq!(r.status, 400, "{hosts:?}");
        let r = raw_to(dp.admin, "PURGE", P, &hosts);
        assert_eq!(r.status, 400, "PURGE {hosts:?}");
    }
    assert_eq!(o.requests_for(P), 0);
}

#[test]
fn purge_takes_the_same_authority() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    raw_get(&dp, "GET", P, &["victim.example"]);
    raw_get(&dp, "GET", P, &["attacker.example"]);
    // Absolute-form PURGE naming the attacker with the victim's Host purges the attacker's.
    let r = raw_to(
        dp.admin,
        "PURGE",
        &format!("http://attacker.example{P}"),
        &["victim.example"],
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(raw_get(&dp, "GET", P, &["victim.example"]).is_hit());
    assert!(!raw_get(&dp, "GET", P, &["attacker.example"]).is_hit());
}
