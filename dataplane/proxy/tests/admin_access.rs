//! The admin endpoint's access rules through the real server: PURGE and the debug hooks need the
//! bearer token of `--admin-token-file` (re-read when it changes); without a token file they are
//! accepted from loopback only, which a peer in another network namespace is not.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use edgecache_testnet::{VethPair, enter_netns};

fn purge(dp: &Dataplane, path: &str, auth: Option<&str>) -> Resp {
    let mut h = vec![("Host", "test.example")];
    if let Some(a) = auth {
        h.push(("Authorization", a));
    }
    request(dp.admin, "PURGE", path, &h, b"").unwrap()
}

#[test]
fn purge_needs_the_token_from_the_file_and_follows_its_rotation() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "first-token\n").unwrap();
    let cache = dir.path().join("cache");
    let url = o.url();
    let mut opts = Opts::new(&url, &cache);
    opts.extra = vec!["--admin-token-file".into(), token.display().to_string()];
    let dp = Dataplane::start(opts);
    let p = "/obj/4k/adm";
    dp.get(p);
    assert!(dp.get(p).is_hit());

    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer first-toke"),
        Some("Basic Zmlyc3QtdG9rZW4="),
    ] {
        let r = purge(&dp, p, auth);
        assert_eq!(
            r.status,
            401,
            "{auth:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            r.header("www-authenticate").starts_with("Bearer"),
            "{auth:?}"
        );
        assert!(
            dp.get(p).is_hit(),
            "a refused PURGE removed nothing ({auth:?})"
        );
    }
    // Reads stay open: probes and Prometheus need no token.
    assert_eq!(get(dp.admin, "/readyz", &[]).unwrap().status, 200);
    assert_eq!(get(dp.admin, "/metrics", &[]).unwrap().status, 200);

    let r = purge(&dp, p, Some("Bearer first-token"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(!dp.get(p).is_hit());

    // A rotated Secret applies at once: the old token stops working, the new one works.
    std::fs::write(&token, "second-token").unwrap();
    assert_eq!(purge(&dp, p, Some("Bearer first-token")).status, 401);
    assert!(dp.get(p).is_hit());
    assert_eq!(purge(&dp, p, Some("Bearer second-token")).status, 200);

    // The debug hooks are mutating calls too (here off: 401 before 404/405 tells nothing).
    let r = request(dp.admin, "POST", "/debug/clock?advance=5", &[], b"").unwrap();
    assert_eq!(r.status, 401);
    assert!(
        dp.log_text().contains("admin call refused"),
        "refusals are logged"
    );
}

#[test]
fn metrics_can_be_made_private() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0k").unwrap();
    let dp = Dataplane::start_with_yaml(
        &o.url(),
        dir.path(),
        "adminAccess:\n  metricsPublic: false\n",
        2,
        &["--admin-token-file".into(), token.display().to_string()],
    );
    assert_eq!(get(dp.admin, "/metrics", &[]).unwrap().status, 401);
    let r = get(dp.admin, "/metrics", &[("Authorization", "Bearer t0k")]).unwrap();
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("edgecache_dataplane_ready"));
    // Probes stay open.
    assert_eq!(get(dp.admin, "/healthz", &[]).unwrap().status, 200);
}

#[test]
fn a_missing_token_file_stops_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent");
    let err = serve_refused(
        &dir.path().join("cache"),
        &["--admin-token-file".as_ref(), absent.as_os_str()],
    );
    assert!(
        err.contains("adminAccess.tokenFile") && err.contains("absent"),
        "{err}"
    );
}

/// A data plane in the server namespace of `ns`, its admin port on the veth address.
struct NsDataplane {
    child: std::process::Child,
    admin: SocketAddr,
}

impl Drop for NsDataplane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_in(ns: &VethPair, dir: &std::path::Path, extra: &[String]) -> NsDataplane {
    let listen: SocketAddr = format!("{}:8080", ns.server_ip).parse().unwrap();
    let admin: SocketAddr = format!("{}:9090", ns.server_ip).parse().unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.srv, BIN, "serve"])
        .args(["--origin", "http://127.0.0.1:1"])
        .args([
            "--listen",
            &listen.to_string(),
            "--admin",
            &admin.to_string(),
        ])
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .args(["--cache-size", "64MiB", "--workers", "1"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dp = NsDataplane { child, admin };
    let deadline = Instant::now() + Duration::from_secs(30);
    while from_client(ns, admin, "GET", "/readyz", None).map(|r| r.status) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "data plane in {} not ready",
            ns.srv
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    dp
}

/// One admin request from the client namespace (a peer that is not on loopback).
fn from_client(
    ns: &VethPair,
    admin: SocketAddr,
    method: &'static str,
    path: &'static str,
    auth: Option<String>,
) -> Option<Resp> {
    let cli = ns.cli.clone();
    std::thread::spawn(move || {
        enter_netns(&cli);
        let mut h = vec![("Host", "test.example")];
        if let Some(a) = &auth {
            h.push(("Authorization", a.as_str()));
        }
        request(admin, method, path, &h, b"").ok()
    })
    .join()
    .unwrap()
}

#[test]
fn without_a_token_file_a_remote_peer_cannot_purge() {
    if needs_root(
        "without_a_token_file_a_remote_peer_cannot_purge",
        "network namespaces (a veth pair, so the peer is not loopback)",
    ) {
        return;
    }
    let ns = VethPair::new('a', 31);
    let dir = tempfile::tempdir().unwrap();
    let dp = start_in(&ns, dir.path(), &[]);
    let r = from_client(&ns, dp.admin, "PURGE", "/obj/4k/x", None).unwrap();
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("loopback"));
    let r = from_client(&ns, dp.admin, "GET", "/metrics", None).unwrap();
    assert_eq!(r.status, 200);
    drop(dp);

    // With a token file the same remote peer may purge with the token.
    let token = dir.path().join("token");
    std::fs::write(&token, "remote-ok").unwrap();
    let dp = start_in(
        &ns,
        dir.path(),
        &["--admin-token-file".into(), token.display().to_string()],
    );
    let r = from_client(&ns, dp.admin, "PURGE", "/obj/4k/x", None).unwrap();
    assert_eq!(r.status, 401);
    let r = from_client(
        &ns,
        dp.admin,
        "PURGE",
        "/obj/4k/x",
        Some("Bearer remote-ok".into()),
    )
    .unwrap();
    // Nothing stored under that key: 404, but past the check.
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
}

/// `GET /healthz` on a fresh connection, given at most `within` to answer.
fn healthz_within(admin: SocketAddr, within: Duration) -> std::io::Result<u16> {
    use std::io::{BufReader, Write};
    let mut s = std::net::TcpStream::connect_timeout(&admin, within)?;
    s.set_read_timeout(Some(within))?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")?;
    Ok(read_response(&mut BufReader::new(s), false)?.status)
}

#[test]
fn idle_connections_from_one_address_leave_room_for_probes_and_few_log_lines() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), "", 1, &[]);
    // 100 connections from 127.0.0.1 that never send a byte: more than the listener holds.
    let idle: Vec<std::net::TcpStream> = (0..100)
        .map(|_| std::net::TcpStream::connect(dp.admin).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // A probe from the same address still gets its answer, at once.
    let t = Instant::now();
    let status = healthz_within(dp.admin, Duration::from_secs(2));
    let first = t.elapsed();
    assert_eq!(
        status.as_ref().ok(),
        Some(&200),
        "{status:?} after {:?}; log:\n{}",
        t.elapsed(),
        dp.log_text()
    );
    // The attack goes on, opening and dropping connections for two seconds: probes keep
    // answering, and the log gets a bounded number of lines about it.
    let until = Instant::now() + Duration::from_secs(2);
    let mut opened = 0;
    while Instant::now() < until {
        if std::net::TcpStream::connect(dp.admin).is_ok() {
            opened += 1;
        }
    }
    assert_eq!(
        healthz_within(dp.admin, Duration::from_secs(2)).ok(),
        Some(200)
    );
    let log = dp.log_text();
    let lines = log
        .lines()
        .filter(|l| l.contains("admin connection"))
        .count();
    eprintln!(
        "healthz answered in {first:?} past 100 idle connections; {opened} more opened in 2 s; \
         {lines} log line(s)"
    );
    assert!(
        lines <= 3,
        "{lines} log lines for {opened} connections opened:\n{log}"
    );
    drop(idle);
}
