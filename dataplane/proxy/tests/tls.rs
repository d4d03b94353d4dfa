//! TLS termination: HTTPS over HTTP/1.1 and HTTP/2 from the same cache as plain HTTP, the
//! certificate chosen by SNI, a renewed certificate picked up without a restart, sessions
//! resumed across workers, the handshake limits, the redirect to HTTPS, and a clear refusal of
//! a bad certificate. Every test makes its own CA.

#![allow(clippy::unwrap_used)]

mod common;
mod tls_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tls_support::*;

/// A data plane with a TLS listener serving `pairs` (cert, key) in order.
fn start_tls(
    origin: &str,
    dir: &Path,
    pairs: &[(std::path::PathBuf, std::path::PathBuf)],
    workers: u32,
    more: &[&str],
) -> (Dataplane, SocketAddr) {
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut opts = Opts::new(origin, dir);
    opts.workers = workers;
    opts.extra = vec!["--tls-listen".into(), tls.to_string()];
    for (c, k) in pairs {
        opts.extra.push("--tls-cert".into());
        opts.extra.push(c.display().to_string());
        opts.extra.push("--tls-key".into());
        opts.extra.push(k.display().to_string());
    }
    opts.extra.extend(more.iter().map(|s| s.to_string()));
    (Dataplane::start(opts), tls)
}

/// An origin, and a data plane with one certificate (for `a.test`) from a CA of its own.
fn one_site(
    workers: u32,
    more: &[&str],
) -> (OriginHandle, tempfile::TempDir, Ca, Dataplane, SocketAddr) {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let pair = ca.issue(dir.path(), "a", &["a.test"]);
    let (dp, tls) = start_tls(&o.url(), &dir.path().join("cache"), &[pair], workers, more);
    (o, dir, ca, dp, tls)
}

#[test]
fn https_over_http1_and_http2_and_plain_h2c_share_one_cache() {
    let (o, _dir, ca, dp, tls) = one_site(2, &[]);
    let rt = runtime();
    rt.block_on(async {
        let h1 = client_config(&ca, &["http/1.1"]);
        let (miss, s) = get_tls(tls, "a.test", &h1, "/obj/100k/1").await;
        assert_eq!(s.alpn.as_deref(), Some("http/1.1"));
        assert_eq!(miss.status, 200);
        assert_eq!(miss.version, http::Version::HTTP_11);
        assert!(
            miss.header("cache-status").contains("fwd=uri-miss"),
            "{miss:?}"
        );
        check_body(100 * 1024, 1, &miss.body).unwrap();

        let h2 = client_config(&ca, &["h2", "http/1.1"]);
        let (hit, s) = get_tls(tls, "a.test", &h2, "/obj/100k/1").await;
        assert_eq!(s.alpn.as_deref(), Some("h2"));
        assert_eq!(hit.version, http::Version::HTTP_2);
        assert_eq!(hit.status, 200);
        assert!(hit.header("cache-status").contains("hit"), "{hit:?}");
        check_body(100 * 1024, 1, &hit.body).unwrap();

        // Prior-knowledge HTTP/2 on the plain listener: the same entry.
        let tcp = tokio::net::TcpStream::connect(dp.listen).await.unwrap();
        let mut c = Client::over(tcp, true).await;
        let plain = c.get("a.test", "/obj/100k/1", &[]).await;
        assert_eq!(plain.version, http::Version::HTTP_2);
        assert!(plain.header("cache-status").contains("hit"), "{plain:?}");
        check_body(100 * 1024, 1, &plain.body).unwrap();
        // Several streams on the one connection.
        for i in 0..5 {
            let r = c.get("a.test", &format!("/obj/4k/h2-{i}"), &[]).await;
            check_body(4096, format!("h2-{i}"), &r.body).unwrap();
        }
    });
    // And HTTP/1.1 in plain sees the same entry.
    assert!(
        dp.request("GET", "/obj/100k/1", &[("host", "a.test")])
            .is_hit()
    );
    assert_eq!(o.requests(), 6, "one origin fetch for the shared object");
    assert!(dp.metric("edgecache_dataplane_tls_handshakes_total{result=\"ok\"}") >= 2.0);
    // The access log says how each request came.
    let log = dp.log_text();
    let line = |protocol: &str, tls: &str| {
        log.lines().any(|l| {
            l.contains("\"path\":\"/obj/100k/1\"")
                && l.contains(&format!("\"protocol\":\"{protocol}\""))
                && l.contains(&format!("\"tls\":{tls}"))
        })
    };
    assert!(line("HTTP/1.1", "\"TLSv1.3\""), "{log}");
    assert!(line("HTTP/2", "\"TLSv1.3\""), "{log}");
    assert!(line("HTTP/2", "null"), "{log}");
}

#[test]
fn sni_chooses_the_certificate_and_an_unknown_name_gets_the_default() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let a = ca.issue(dir.path(), "a", &["a.test", "www.a.test"]);
    let b = ca.issue(dir.path(), "b", &["*.b.test"]);
    let (_dp, tls) = start_tls(&o.url(), &dir.path().join("cache"), &[a, b], 2, &[]);
    let rt = runtime();
    rt.block_on(async {
        let cfg = client_config(&ca, &["http/1.1"]);
        let (_, s) = connect(tls, "www.a.test", &cfg).await.unwrap();
        assert_eq!(s.names, ["a.test", "www.a.test"]);
        let (_, s) = connect(tls, "img.b.test", &cfg).await.unwrap();
        assert_eq!(s.names, ["*.b.test"]);
        // An unknown name gets the default, which the client then refuses.
        assert!(connect(tls, "c.test", &cfg).await.is_err());
    });
}

#[test]
fn a_renewed_certificate_is_served_without_a_restart_and_open_connections_stay() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (cert, key) = ca.issue(dir.path(), "a", &["a.test"]);
    let (dp, tls) = start_tls(
        &o.url(),
        &dir.path().join("cache"),
        &[(cert.clone(), key.clone())],
        2,
        &[],
    );
    let pid = dp.child.id();
    let rt = runtime();
    rt.block_on(async {
        let cfg = client_config(&ca, &["http/1.1"]);
        let (old_conn, s) = connect(tls, "a.test", &cfg).await.unwrap();
        assert_eq!(s.names, ["a.test"]);
        let mut old = Client::over(old_conn, false).await;
        assert_eq!(old.get("a.test", "/obj/4k/1", &[]).await.status, 200);

        // The renewal carries a second name, so the new certificate is told apart. Written
        // as cert-manager's Secret update reaches a pod: both files replaced at once.
        let (new_cert, new_key) = ca.issue_pem(&["a.test", "renewed.a.test"]);
        std::fs::write(dir.path().join("new.crt"), new_cert).unwrap();
        std::fs::write(dir.path().join("new.key"), new_key).unwrap();
        std::fs::rename(dir.path().join("new.key"), &key).unwrap();
        std::fs::rename(dir.path().join("new.crt"), &cert).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let fresh = rt_fresh_names(tls, &cfg, deadline).await;
        assert_eq!(fresh, ["a.test", "renewed.a.test"]);
        // The connection opened before the renewal still serves.
        let again = old.get("a.test", "/obj/4k/1", &[]).await;
        assert_eq!(again.status, 200);
        check_body(4096, 1, &again.body).unwrap();
    });
    assert_eq!(dp.child.id(), pid);
    assert!(dp.metric("edgecache_dataplane_tls_certificate_reloads_total{result=\"ok\"}") >= 1.0);

    // A broken renewal keeps the certificate in force.
    std::fs::write(&cert, "not a certificate").unwrap();
    dp.wait_for_metrics("a failed reload", 15, |m| {
        m.contains("edgecache_dataplane_tls_certificate_reloads_total{result=\"error\"}")
    });
    rt.block_on(async {
        let cfg = client_config(&ca, &["http/1.1"]);
        let (r, s) = get_tls(tls, "a.test", &cfg, "/obj/4k/1").await;
        assert_eq!(r.status, 200);
        assert_eq!(s.names, ["a.test", "renewed.a.test"]);
    });
}

/// The names on new connections, until they are not the first certificate's or `deadline`.
async fn rt_fresh_names(
    tls: SocketAddr,
    cfg: &std::sync::Arc<rustls::ClientConfig>,
    deadline: Instant,
) -> Vec<String> {
    loop {
        let (_, s) = connect(tls, "a.test", cfg).await.unwrap();
        if s.names.len() > 1 || Instant::now() > deadline {
            return s.names;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn sessions_resume_on_any_worker_over_tls_1_3_and_1_2() {
    let (_o, _dir, ca, dp, tls) = one_site(2, &[]);
    let rt = runtime();
    let connections = 24;
    rt.block_on(async {
        for (cfg, version) in [
            (client_config(&ca, &["http/1.1"]), "TLSv1_3"),
            (client_config_tls12(&ca, &["http/1.1"]), "TLSv1_2"),
        ] {
            let mut resumed = 0;
            for i in 0..connections {
                let (r, s) = get_tls(tls, "a.test", &cfg, "/obj/4k/r").await;
                assert_eq!(r.status, 200);
                assert_eq!(s.version, version);
                if i > 0 && s.resumed {
                    resumed += 1;
                }
            }
            assert_eq!(
                resumed,
                connections - 1,
                "{version}: every later connection resumes"
            );
        }
    });
    // The kernel spread the connections over both workers.
    let m = dp.metrics();
    for w in ["0", "1"] {
        let accepted = metric_value(
            &m,
            &format!("edgecache_dataplane_accepted_connections_total{{worker=\"{w}\"}}"),
        );
        assert!(accepted >= 1.0, "worker {w} accepted none:\n{m}");
    }
    assert!(metric_value(&m, "edgecache_dataplane_tls_resumed_total") >= 2.0 * 23.0);
}

#[test]
fn handshakes_in_progress_are_capped_and_a_silent_one_times_out() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (c, k) = ca.issue(dir.path(), "a", &["a.test"]);
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let yaml = format!(
        "tls:\n  listen: {tls}\n  handshakeTimeout: 2s\n  maxHandshakesPerWorker: 4\n  \
         certificates:\n  - {{cert: {}, key: {}}}\n",
        c.display(),
        k.display()
    );
    let dp = Dataplane::start_with_yaml(&o.url(), dir.path(), &yaml, 1, &[]);
    // Four clients that connect and say nothing hold the worker's four handshakes.
    let silent: Vec<_> = (0..4)
        .map(|_| std::net::TcpStream::connect(tls).unwrap())
        .collect();
    dp.wait_for_metrics("the silent ones in progress", 10, |_| true);
    std::thread::sleep(Duration::from_millis(300));
    let rt = runtime();
    let cfg = client_config(&ca, &["http/1.1"]);
    rt.block_on(async {
        // The fifth is closed at once, while the plain listener serves.
        assert!(connect(tls, "a.test", &cfg).await.is_err());
    });
    assert_eq!(dp.get("/obj/4k/plain").status, 200);
    dp.wait_for_metrics("a refused handshake", 5, |m| {
        m.contains("edgecache_dataplane_tls_handshakes_total{result=\"refused\"}")
    });
    // After the timeout the silent ones are dropped, and TLS serves again.
    dp.wait_for_metrics("timed-out handshakes", 10, |m| {
        metric_value(
            m,
            "edgecache_dataplane_tls_handshakes_total{result=\"timeout\"}",
        ) >= 4.0
    });
    for mut s in silent {
        use std::io::Read;
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            s.read(&mut buf).unwrap_or(0),
            0,
            "a silent client is closed"
        );
    }
    rt.block_on(async {
        let (r, _) = get_tls(tls, "a.test", &cfg, "/obj/4k/after").await;
        assert_eq!(r.status, 200);
    });
}

#[test]
fn plain_requests_are_redirected_to_https_when_asked() {
    let (o, _dir, ca, dp, tls) = one_site(1, &["--tls-redirect-http"]);
    let r = dp.request("GET", "/obj/4k/1?x=1", &[("host", "a.test:8080")]);
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        format!("https://a.test:{}/obj/4k/1?x=1", tls.port())
    );
    assert_eq!(o.requests(), 0);
    let rt = runtime();
    rt.block_on(async {
        let (r, _) = get_tls(tls, "a.test", &client_config(&ca, &["h2"]), "/obj/4k/1").await;
        assert_eq!(r.status, 200);
    });
}

#[test]
fn a_bad_certificate_refuses_to_start_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (cert, _) = ca.issue(dir.path(), "a", &["a.test"]);
    let (_, other_key) = ca.issue(dir.path(), "b", &["b.test"]);
    let junk = dir.path().join("junk.crt");
    std::fs::write(&junk, "junk").unwrap();
    let port = free_port();
    for (c, k, says) in [
        (&junk, &other_key, "junk.crt"),
        (&cert, &other_key, "b.key"),
    ] {
        let log = serve_refused(
            &dir.path().join("cache"),
            &[
                "--tls-listen".as_ref(),
                format!("127.0.0.1:{port}").as_ref(),
                "--tls-cert".as_ref(),
                c.as_os_str(),
                "--tls-key".as_ref(),
                k.as_os_str(),
            ],
        );
        assert!(
            log.contains("tls.certificates") && log.contains(says),
            "{log}"
        );
    }
    // A TLS listener without a certificate is a config error.
    let log = serve_refused(
        &dir.path().join("cache"),
        &[
            "--tls-listen".as_ref(),
            format!("127.0.0.1:{port}").as_ref(),
        ],
    );
    assert!(log.contains("tls.certificates"), "{log}");
}
