//! Many sites: the Host picks the site and its origin pool (`--site HOST=URL[,URL...]` and
//! `sites:` in the config), an unknown Host gets 421 or the default site, a pool spreads its
//! requests and routes around an origin that is down (retries, passive and active health
//! checks), and a site's cache policy and query rules apply to it alone.

#![allow(clippy::unwrap_used)]

mod common;
mod tls_support;

use std::time::Duration;

use common::*;

fn host(dp: &Dataplane, host: &str, path: &str) -> Resp {
    dp.request("GET", path, &[("host", host)])
}

/// A data plane with `yaml` as its config file, its cache in `dir`.
fn start_with_config(dir: &std::path::Path, yaml: &str) -> Dataplane {
    let cache = dir.join("cache");
    let config = dir.join("dp.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut opts = Opts::new("", &cache);
    opts.extra = vec!["--config".into(), config.display().to_string()];
    Dataplane::start(opts)
}

/// A loopback address nothing listens on (connections are refused).
fn dead_origin() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

#[test]
fn the_host_picks_the_site_and_the_default_takes_the_rest() {
    let (a, b, fallback) = (origin(), origin(), origin());
    let dir = tempfile::tempdir().unwrap();
    let url = fallback.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.extra = vec![
        "--site".into(),
        format!("a.test={}", a.url()),
        "--site".into(),
        format!("*.b.test={}", b.url()),
    ];
    let dp = Dataplane::start(opts);
    assert_eq!(host(&dp, "a.test", "/obj/4k/1").status, 200);
    assert_eq!(host(&dp, "A.TEST:8080", "/obj/4k/2").status, 200);
    assert_eq!(host(&dp, "img.b.test", "/obj/4k/3").status, 200);
    assert_eq!(host(&dp, "other.test", "/obj/4k/4").status, 200);
    assert_eq!((a.requests(), b.requests(), fallback.requests()), (2, 1, 1));
    // Each site has its own entries: the same path on another site is another object.
    assert!(host(&dp, "a.test", "/obj/4k/1").is_hit());
    assert!(!host(&dp, "img.b.test", "/obj/4k/1").is_hit());
    assert_eq!(b.requests(), 2);
}

#[test]
fn without_a_default_site_an_unknown_host_gets_421() {
    let a = origin();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = Opts::new("", dir.path());
    opts.extra = vec!["--site".into(), format!("a.test={}", a.url())];
    let dp = Dataplane::start(opts);
    let r = host(&dp, "b.test", "/obj/4k/1");
    assert_eq!(r.status, 421);
    assert!(
        r.cache_status().contains("detail=no-site"),
        "{}",
        r.cache_status()
    );
    assert_eq!(host(&dp, "a.test", "/obj/4k/1").status, 200);
    assert_eq!(a.requests(), 1);
}

#[test]
fn a_pool_spreads_requests_and_routes_around_an_origin_that_is_down() {
    let (a1, a2) = (origin(), origin());
    let dir = tempfile::tempdir().unwrap();
    let mut opts = Opts::new("", dir.path());
    opts.workers = 1;
    opts.extra = vec!["--site".into(), format!("a.test={},{}", a1.url(), a2.url())];
    let dp = Dataplane::start(opts);
    for i in 0..10 {
        assert_eq!(host(&dp, "a.test", &format!("/obj/4k/rr-{i}")).status, 200);
    }
    assert_eq!((a1.requests(), a2.requests()), (5, 5), "round robin");
    // a1 goes away: every request is still answered (retried on a2), and a1 leaves the pool
    // after three failures in a row.
    let gone = a1.addr();
    a1.shutdown();
    for i in 0..10 {
        let r = host(&dp, "a.test", &format!("/obj/4k/down-{i}"));
        assert_eq!(r.status, 200, "request {i} while an origin is down");
    }
    assert_eq!(a2.requests(), 15);
    let m = dp.metrics();
    assert_eq!(
        metric_value(
            &m,
            &format!("edgecache_dataplane_origin_up{{site=\"a.test\",origin=\"{gone}\"}}")
        ),
        0.0,
        "{m}"
    );
    let retries = metric_value(
        &m,
        "edgecache_dataplane_origin_retries_total{site=\"a.test\"}",
    );
    assert!((3.0..=4.0).contains(&retries), "{retries} retries:\n{m}");
}

/// An origin that answers the first request of each connection (kept alive) and resets the
/// connection at the next one, as an origin that goes away under a pooled connection does.
fn resetting_origin() -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut read_head = || {
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                        if line == "\r\n" {
                            return true;
                        }
                        line.clear();
                    }
                    false
                };
                if !read_head() {
                    return;
                }
                let body = "x".repeat(10);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncache-control: max-age=60\r\n\r\n",
                    body.len()
                );
                let mut w = &conn;
                w.write_all(head.as_bytes()).unwrap();
                w.write_all(body.as_bytes()).unwrap();
                if read_head() {
                    // SO_LINGER 0: the close sends a reset, not a FIN.
                    socket2::SockRef::from(&conn)
                        .set_linger(Some(Duration::ZERO))
                        .unwrap();
                }
            });
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_get_reset_on_a_pooled_connection_is_sent_to_another_origin() {
    let good = origin();
    let flaky = resetting_origin();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = Opts::new("", dir.path());
    opts.workers = 1;
    opts.extra = vec!["--site".into(), format!("a.test={flaky},{}", good.url())];
    let dp = Dataplane::start(opts);
    // Round robin: the flaky origin gets every other request, each on its pooled connection
    // after the first; every one is reset and retried on the other origin.
    for i in 0..8 {
        let r = host(&dp, "a.test", &format!("/obj/10/reset-{i}"));
        assert_eq!(r.status, 200, "request {i}: {}", r.cache_status());
    }
}

#[test]
fn active_health_checks_keep_a_dead_origin_out_and_a_site_keeps_its_own_policy() {
    let a = origin();
    let dead = dead_origin();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "sites:\n\
         - hosts: [a.test]\n  origins: [{dead}, {a}]\n  retries: 0\n  \
         healthCheck: {{path: /obj/10/health, interval: 200ms, timeout: 1s, unhealthyAfter: 1}}\n  \
         cache: {{dropQuery: [utm_*], sortQuery: true, defaultTtl: 1h}}\n\
         - hosts: [b.test]\n  origins: [{a}]\n",
        a = a.url()
    );
    let dp = start_with_config(dir.path(), &yaml);
    let dead_authority = dead.trim_start_matches("http://");
    dp.wait_for_metrics("the dead origin out of the pool", 10, |m| {
        metric_value(
            m,
            &format!(
                "edgecache_dataplane_origin_up{{site=\"a.test\",origin=\"{dead_authority}\"}}"
            ),
        ) == 0.0
            && m.contains("edgecache_dataplane_origin_up")
    });
    // No retries allowed, yet no request fails: none is sent to the dead origin.
    for i in 0..6 {
        let r = host(&dp, "a.test", &format!("/obj/4k/hc-{i}"));
        assert_eq!(r.status, 200, "request {i}");
    }
    assert!(
        a.requests_for("/obj/10/health") >= 1,
        "the live origin is checked too"
    );
    // The site's query rules: utm_* dropped and the rest sorted, for the key and the origin.
    std::thread::sleep(Duration::from_millis(10));
    let before = a.requests_for("/obj/4k/q?a=1&b=2");
    assert_eq!(
        host(&dp, "a.test", "/obj/4k/q?utm_source=x&b=2&a=1").status,
        200
    );
    assert_eq!(a.requests_for("/obj/4k/q?a=1&b=2"), before + 1);
    assert!(host(&dp, "a.test", "/obj/4k/q?a=1&b=2&utm_medium=y").is_hit());
    // The other site keeps the query as it is.
    assert_eq!(host(&dp, "b.test", "/obj/4k/q?b=2&a=1").status, 200);
    assert_eq!(a.requests_for("/obj/4k/q?b=2&a=1"), 1);
}

#[test]
fn site_mistakes_are_reported_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "sites:\n- hosts: [A.test:80]\n  origins: []\n  default: true\n\
         - hosts: [b.test]\n  origins: [ftp://x]\n  default: true\n  \
         healthCheck: {path: health}\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["check-config"])
        .arg(dir.path().join("bad.yaml"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for want in [
        "sites: 2 sites are the default",
        "sites[0].hosts[0]",
        "sites[0].origins",
        "sites[1].origins[0]",
        "sites[1].healthCheck.path",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
}

/// A data plane terminating TLS for `origin.test` in front of `o` (an HTTPS origin for the
/// data plane under test), its cache in `dir/front`: it, its TLS address, and the file of the
/// CA that signed its certificate.
fn https_front(o: &OriginHandle, dir: &std::path::Path) -> (Dataplane, String, std::path::PathBuf) {
    let ca = tls_support::Ca::new();
    let (cert, key) = ca.issue(dir, "origin", &["origin.test"]);
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let tls = format!("127.0.0.1:{}", free_port());
    let (url, front_cache) = (o.url(), dir.join("front"));
    let mut opts = Opts::new(&url, &front_cache);
    opts.extra = [
        "--tls-listen",
        &tls,
        "--tls-cert",
        &cert.display().to_string(),
        "--tls-key",
        &key.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    (Dataplane::start(opts), tls, ca_file)
}

/// Two data planes in a row: the first (the "origin" here) terminates TLS in front of the bench
/// origin, the second reaches it over HTTPS, trusting the test's CA by `originTls.caFile`.
#[test]
fn an_https_origin_is_reached_over_tls_and_http2_multiplexes_its_requests() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let (front, tls, ca_file) = https_front(&o, dir.path());

    let yaml = format!(
        "sites:\n\
         - hosts: [a.test]\n  origins: [\"https://{tls}\"]\n  originHttp2: true\n  \
         originTls: {{caFile: {}, serverName: origin.test}}\n",
        ca_file.display()
    );
    std::fs::write(dir.path().join("edge.yaml"), yaml).unwrap();
    let edge_cache = dir.path().join("edge");
    let mut opts = Opts::new("", &edge_cache);
    // One worker: one client, so one connection to the origin.
    opts.workers = 1;
    opts.extra = vec![
        "--config".into(),
        dir.path().join("edge.yaml").display().to_string(),
    ];
    let edge = Dataplane::start(opts);
    // Eight misses at once: over HTTP/2 they share one TLS connection.
    std::thread::scope(|s| {
        for i in 0..8 {
            let edge = &edge;
            s.spawn(move || {
                let r = host(edge, "a.test", &format!("/obj/100k/tls-{i}"));
                assert_eq!(r.status, 200);
                check_body(100 * 1024, format!("tls-{i}"), &r.body).unwrap();
            });
        }
    });
    assert_eq!(o.requests(), 8);
    let handshakes = front.metric("edgecache_dataplane_tls_handshakes_total{result=\"ok\"}");
    assert_eq!(
        handshakes, 1.0,
        "one multiplexed HTTPS connection to the origin"
    );
    // Both caches append to Cache-Status: the edge's own entry, the last, is a hit (once the
    // fill has written its copy, which ends just after the client's response: until then a
    // request joins the fill, `collapsed`).
    let mut again = host(&edge, "a.test", "/obj/100k/tls-0");
    for _ in 0..100 {
        let last = again.cache_status().rsplit(", ").next().unwrap_or("");
        if !last.contains("; collapsed") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        again = host(&edge, "a.test", "/obj/100k/tls-0");
    }
    let last = again.cache_status().rsplit(", ").next().unwrap_or("");
    assert!(last.contains("; hit"), "{}", again.cache_status());

    // A CA that did not sign the origin's certificate: the origin is refused (502).
    let other = tls_support::Ca::new();
    std::fs::write(&ca_file, &other.pem).unwrap();
    let edge2_cache = dir.path().join("edge2");
    let mut opts = Opts::new("", &edge2_cache);
    opts.extra = vec![
        "--config".into(),
        dir.path().join("edge.yaml").display().to_string(),
    ];
    let edge2 = Dataplane::start(opts);
    assert_eq!(host(&edge2, "a.test", "/obj/100k/untrusted").status, 502);
    assert_eq!(o.requests(), 8);
}

#[test]
fn a_site_default_ttl_applies_to_it_alone_and_purges_follow_its_query_rules() {
    let a = origin();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "sites:\n\
         - hosts: [a.test]\n  origins: [{a}]\n  \
         cache: {{dropQuery: [utm_*], sortQuery: true, defaultTtl: 1h}}\n\
         - hosts: [b.test]\n  origins: [{a}]\n",
        a = a.url()
    );
    let dp = start_with_config(dir.path(), &yaml);
    // No Cache-Control from the origin: a.test's defaultTtl is the copy's lifetime; b.test has
    // none, so its copy gets the heuristic one (from Last-Modified, up to a day).
    for h in ["a.test", "b.test"] {
        assert_eq!(host(&dp, h, "/obj/4k/ttl?cc=none").status, 200);
    }
    let ttl = |h: &str| {
        let r = host(&dp, h, "/obj/4k/ttl?cc=none");
        assert!(r.is_hit(), "{}", r.cache_status());
        let cs = r.cache_status().to_string();
        let v = cs
            .split("ttl=")
            .nth(1)
            .and_then(|t| t.split(';').next()?.trim().parse::<i64>().ok());
        v.unwrap_or_else(|| panic!("no ttl in {cs}"))
    };
    let (ta, tb) = (ttl("a.test"), ttl("b.test"));
    assert!((3590..=3600).contains(&ta), "a.test ttl {ta}");
    assert!(tb > 3600, "b.test ttl {tb}");
    assert_eq!(a.requests_for("/obj/4k/ttl?cc=none"), 2);

    // PURGE of the URL as a client would write it (a tracking parameter, another order) removes
    // the copy its site's query rules made of it.
    assert_eq!(host(&dp, "a.test", "/obj/4k/q?b=2&a=1").status, 200);
    assert!(host(&dp, "a.test", "/obj/4k/q?a=1&b=2").is_hit());
    let r = request(
        dp.admin,
        "PURGE",
        "/obj/4k/q?utm_source=mail&b=2&a=1",
        &[("host", "a.test")],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(!host(&dp, "a.test", "/obj/4k/q?a=1&b=2").is_hit());
    assert_eq!(a.requests_for("/obj/4k/q?a=1&b=2"), 2);

    // So does a purge rule naming the URL.
    assert!(host(&dp, "a.test", "/obj/4k/q?a=1&b=2").is_hit());
    let url = "http://a.test/obj/4k/q?utm_campaign=x&b=2&a=1";
    let enc = percent_encode(url);
    let r = request(
        dp.admin,
        "POST",
        &format!("/purge?id=site-url&url={enc}"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert!(body.contains(r#""objects":1"#), "{body}");
    assert!(!host(&dp, "a.test", "/obj/4k/q?a=1&b=2").is_hit());
}

/// Active health checks reach an HTTPS origin the way its requests do (its CA, its server
/// name): a live one stays in the pool, one that goes down is taken out, and it is put back
/// when it returns. (They were sent over plain HTTP, so a live HTTPS origin was always out.)
#[test]
fn active_health_checks_reach_an_https_origin_that_goes_down_and_comes_back() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let (front, tls, ca_file) = https_front(&o, dir.path());
    let health = "/obj/10/health?cc=no-store";
    let yaml = format!(
        "sites:\n\
         - hosts: [a.test]\n  origins: [\"https://{tls}\"]\n  retries: 0\n  \
         originTls: {{caFile: {}, serverName: origin.test}}\n  \
         healthCheck: {{path: \"{health}\", interval: 200ms, timeout: 1s, unhealthyAfter: 1, healthyAfter: 1}}\n",
        ca_file.display()
    );
    let edge = start_with_config(dir.path(), &yaml);
    let up = format!("edgecache_dataplane_origin_up{{site=\"a.test\",origin=\"{tls}\"}}");
    // Checked, over TLS, and in the pool.
    edge.wait_for_metrics("three checks through the HTTPS origin", 10, |_| {
        o.requests_for(health) >= 3
    });
    assert_eq!(edge.metric(&up), 1.0, "{}", edge.log_text());
    assert_eq!(host(&edge, "a.test", "/obj/4k/h1").status, 200);
    // Down: out of the pool; back: in again.
    let front = front.restart_after(|| {
        edge.wait_for_metrics("the stopped origin out of the pool", 10, |m| {
            metric_value(m, &up) == 0.0
        });
    });
    edge.wait_for_metrics("the returned origin back in the pool", 10, |m| {
        metric_value(m, &up) == 1.0
    });
    assert_eq!(host(&edge, "a.test", "/obj/4k/h2").status, 200);
    drop(front);
}
