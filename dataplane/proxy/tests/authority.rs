//! One authority for a request (RFC 9112 3.2.2): with an absolute-form target the target's
//! authority replaces Host, for the cache key, the Host the origin sees and PURGE alike, so
//! `GET http://victim/x` with `Host: attacker` can never store the attacker's page under the
//! victim's key. A request with two Host fields is refused (RFC 9112 3.2).
//!
//! With many sites, one parser decides the authority for routing, the key, the origin's Host,
//! purges and labels (edgecache-upstream `route_head`): no hostile authority form, over HTTP/1.1,
//! h2c or HTTP/2 over TLS, makes one site's response an entry of another's.

#![allow(clippy::unwrap_used, clippy::type_complexity)] // table tests spell their row types inline

mod common;
mod tls_support;

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

/// Two sites whose origins tell themselves apart by their `max-age`, a TLS listener for both.
struct TwoSites {
    a: OriginHandle,
    b: OriginHandle,
    ca: tls_support::Ca,
    tls: std::net::SocketAddr,
    dp: Dataplane,
    _dir: tempfile::TempDir,
}

const A_AGE: &str = "max-age=1111";
const B_AGE: &str = "max-age=2222";

fn two_sites() -> TwoSites {
    let age = |max_age| {
        origin_with(OriginOptions {
            max_age,
            ..OriginOptions::default()
        })
    };
    let (a, b) = (age(1111), age(2222));
    let dir = tempfile::tempdir().unwrap();
    let ca = tls_support::Ca::new();
    let (cert, key) = ca.issue(dir.path(), "ab", &["www.a.test", "www.b.test"]);
    let tls: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cache = dir.path().join("cache");
    let mut opts = Opts::new("", &cache);
    opts.extra = vec![
        "--site".into(),
        format!("www.a.test={}", a.url()),
        "--site".into(),
        format!("www.b.test={}", b.url()),
        "--tls-listen".into(),
        tls.to_string(),
        "--tls-cert".into(),
        cert.display().to_string(),
        "--tls-key".into(),
        key.display().to_string(),
    ];
    let dp = Dataplane::start(opts);
    TwoSites {
        a,
        b,
        ca,
        tls,
        dp,
        _dir: dir,
    }
}

impl TwoSites {
    /// After an attack on `path`: a plain request for each site gets that site's response
    /// (its origin's `max-age`), hit or not.
    fn each_site_gets_its_own(&self, path: &str, attack: &str) {
        for (host, age, other) in [("www.a.test", A_AGE, B_AGE), ("www.b.test", B_AGE, A_AGE)] {
            let r = raw_get(&self.dp, "GET", path, &[host]);
            assert_eq!(r.status, 200, "{attack}: then {host}");
            let cc = r.header("cache-control");
            assert!(
                cc.contains(age) && !cc.contains(other),
                "{attack}: then a plain request for {host} got {cc:?} ({})",
                r.cache_status()
            );
        }
        assert!(self.a.requests_for(path) <= 2 && self.b.requests_for(path) <= 2);
    }
}

/// One request over HTTP/2 with exactly this `:authority` (from `uri`) and these fields.
async fn h2_get<S>(io: S, uri: &str, fields: &[(&str, &str)]) -> Option<u16>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .ok()?;
    tokio::spawn(conn);
    let mut b = http::Request::get(uri);
    for (k, v) in fields {
        b = b.header(*k, *v);
    }
    let req = b.body(http_body_util::Empty::<bytes::Bytes>::new()).ok()?;
    // A server may refuse a malformed request with a stream reset: that is a refusal too.
    let resp = send.send_request(req).await.ok()?;
    Some(resp.status().as_u16())
}

#[test]
fn no_hostile_authority_makes_one_sites_page_anothers_over_http1() {
    let t = two_sites();
    // (what the attacker sends, whether a site may answer it: 200 is fine when it is keyed
    // and fetched as one site, consistently; what matters is what follows)
    let cases: &[(&str, &str, &[&str])] = &[
        ("userinfo with port", "/u1", &["www.b.test:1@www.a.test"]),
        (
            "userinfo with port, reversed",
            "/u2",
            &["www.a.test:1@www.b.test"],
        ),
        ("userinfo", "/u3", &["x@www.a.test"]),
        (
            "userinfo with a password",
            "/u4",
            &["www.b.test:x@www.a.test:80"],
        ),
        ("empty userinfo", "/u5", &["@www.a.test"]),
        ("case and trailing dot", "/c1", &["WWW.A.TEST."]),
        ("two trailing dots", "/c2", &["www.a.test.."]),
        ("default port", "/c3", &["www.a.test:80"]),
        ("percent-encoded dot", "/p1", &["www%2ea.test"]),
        ("percent-encoded letter", "/p2", &["%77ww.a.test"]),
        ("two Hosts", "/h1", &["www.a.test", "www.b.test"]),
        ("two Hosts, reversed", "/h2", &["www.b.test", "www.a.test"]),
        ("IPv6 literal", "/v1", &["[::1]"]),
        ("IPv6 literal with a zone", "/v2", &["[fe80::1%25lo]"]),
        ("a path in the host", "/s1", &["www.a.test/x"]),
        ("a comma list", "/s2", &["www.b.test,www.a.test"]),
        ("a bad port", "/s3", &["www.a.test:1:2"]),
    ];
    for (name, path, hosts) in cases {
        let r = raw_get(&t.dp, "GET", &format!("/obj/1k{path}"), hosts);
        assert!(r.status == 200 || r.status >= 400, "{name}: {}", r.status);
        t.each_site_gets_its_own(&format!("/obj/1k{path}"), name);
    }
    // Absolute-form targets, with and without Host, in both orders.
    let absolute: &[(&str, &str, &[&str])] = &[
        (
            "userinfo in the target",
            "http://www.b.test:1@www.a.test/obj/1k/a1",
            &["www.a.test"],
        ),
        (
            "userinfo in the target, no Host",
            "http://www.b.test:1@www.a.test/obj/1k/a2",
            &[],
        ),
        (
            "userinfo in the target, reversed",
            "http://www.a.test:1@www.b.test/obj/1k/a3",
            &["www.b.test"],
        ),
        (
            "the target wins over Host",
            "http://www.a.test/obj/1k/a4",
            &["www.b.test"],
        ),
        (
            "the target wins over Host, reversed",
            "http://www.b.test/obj/1k/a5",
            &["www.a.test"],
        ),
        (
            "case and dot in the target",
            "http://WWW.A.TEST.:80/obj/1k/a6",
            &["www.b.test"],
        ),
        (
            "https target on the plain port",
            "https://www.a.test:443/obj/1k/a7",
            &["www.b.test"],
        ),
    ];
    for (name, target, hosts) in absolute {
        let r = raw_get(&t.dp, "GET", target, hosts);
        assert!(r.status == 200 || r.status >= 400, "{name}: {}", r.status);
        let path = &target[target.find("/obj").unwrap()..];
        t.each_site_gets_its_own(path, name);
    }
    // Userinfo is refused outright, not routed anywhere.
    for hosts in [&["www.b.test:1@www.a.test"][..], &["x@www.a.test"]] {
        assert_eq!(
            raw_get(&t.dp, "GET", "/obj/1k/r", hosts).status,
            400,
            "{hosts:?}"
        );
    }
    let r = raw_get(&t.dp, "GET", "http://www.b.test:1@www.a.test/obj/1k/r", &[]);
    assert_eq!(r.status, 400);
    assert_eq!(
        t.a.requests_for("/obj/1k/r") + t.b.requests_for("/obj/1k/r"),
        0
    );
}

/// The `:authority` forms an HTTP/2 client can send (hyper's client sends the URI's
/// authority as it is, userinfo included).
const H2_FORMS: &[(&str, &str, &[(&str, &str)])] = &[
    (
        "userinfo with port",
        "http://www.b.test:1@www.a.test/obj/1k/X1",
        &[],
    ),
    ("userinfo", "http://x@www.a.test/obj/1k/X2", &[]),
    (
        "userinfo, reversed",
        "http://www.a.test:1@www.b.test/obj/1k/X3",
        &[],
    ),
    (
        "case and trailing dot",
        "http://WWW.A.TEST.:80/obj/1k/X4",
        &[],
    ),
    (
        ":authority and another Host",
        "http://www.a.test/obj/1k/X5",
        &[("host", "www.b.test")],
    ),
    (
        ":authority and another Host, reversed",
        "http://www.b.test/obj/1k/X6",
        &[("host", "www.a.test")],
    ),
    ("IPv6 literal", "http://[::1]/obj/1k/X7", &[]),
];

fn h2_forms_are_harmless(t: &TwoSites, tls: bool) {
    let rt = tls_support::runtime();
    let tag = if tls { "tls" } else { "h2c" };
    for (name, uri, fields) in H2_FORMS {
        let uri = uri.replace("X", tag);
        let status = rt.block_on(async {
            if tls {
                let cfg = tls_support::client_config(&t.ca, &["h2"]);
                let (io, s) = tls_support::connect(t.tls, "www.a.test", &cfg)
                    .await
                    .unwrap();
                assert_eq!(s.alpn.as_deref(), Some("h2"));
                h2_get(io, &uri, fields).await
            } else {
                let io = tokio::net::TcpStream::connect(t.dp.listen).await.unwrap();
                h2_get(io, &uri, fields).await
            }
        });
        if let Some(s) = status {
            assert!(s == 200 || s >= 400, "{tag} {name}: {s}");
        }
        let path = &uri[uri.find("/obj").unwrap()..];
        t.each_site_gets_its_own(path, &format!("{tag} {name}"));
    }
}

#[test]
fn no_hostile_authority_makes_one_sites_page_anothers_over_h2c() {
    let t = two_sites();
    h2_forms_are_harmless(&t, false);
}

#[test]
fn no_hostile_authority_makes_one_sites_page_anothers_over_tls_h2() {
    let t = two_sites();
    h2_forms_are_harmless(&t, true);
}

#[test]
fn a_trailing_dot_is_the_same_entry_for_purges() {
    let t = two_sites();
    let p = "/obj/1k/dot";
    assert_eq!(raw_get(&t.dp, "GET", p, &["WWW.A.TEST."]).status, 200);
    assert!(raw_get(&t.dp, "GET", p, &["www.a.test"]).is_hit());
    // A purge rule by URL names the host as users write it.
    let r = raw_to(
        t.dp.admin,
        "POST",
        "/purge?id=dot&url=http%3A%2F%2Fwww.a.test%2Fobj%2F1k%2Fdot",
        &["localhost"],
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(!raw_get(&t.dp, "GET", p, &["www.a.test."]).is_hit());
    // A purge URL with userinfo is refused, not stored as a rule that matches nothing.
    let r = raw_to(
        t.dp.admin,
        "POST",
        "/purge?id=userinfo&url=http%3A%2F%2Fx%40www.a.test%2Fobj%2F1k%2Fdot",
        &["localhost"],
    );
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn the_site_label_is_the_routed_site_not_the_clients_host() {
    let t = two_sites();
    for i in 0..70 {
        let host = format!("s{i}.example");
        assert_eq!(raw_get(&t.dp, "GET", "/obj/1k/x", &[&host]).status, 421);
    }
    assert_eq!(
        raw_get(&t.dp, "GET", "/obj/1k/x", &["WWW.A.Test."]).status,
        200
    );
    let m = t.dp.metrics();
    assert!(
        !m.contains("s0.example") && !m.contains("s69.example"),
        "{m}"
    );
    let count = |cache: &str, status: &str, site: &str| {
        metric_value(
            &m,
            &format!(
                r#"edgecache_dataplane_request_duration_seconds_count{{cache="{cache}",status="{status}",site="{site}"}}"#
            ),
        )
    };
    assert_eq!(count("synthetic", "4xx", "unknown"), 70.0, "{m}");
    assert_eq!(count("miss", "2xx", "www.a.test"), 1.0, "{m}");
}
