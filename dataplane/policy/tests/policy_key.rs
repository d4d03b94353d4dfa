//! Cache keys (RFC 9111 2; RFC 9110 4.2.3), request classes, and invalidation (RFC 9111 4.4).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use edgecache_policy::AuthorityError;
use edgecache_policy::invalidate;
use edgecache_policy::key::KeyError;
use edgecache_policy::request::{self, BypassReason, RequestClass};
use edgecache_policy::{CacheKey, PolicyConfig};
use http::StatusCode;
use policy_support::*;

#[test]
fn policy_primary_key_rfc9111_2_rfc9110_4_2_3() {
    let cases: &[(&str, &str, &[(&str, &str)], Result<&str, KeyError>)] = &[
        (
            "origin-form + Host",
            "/a/b?x=1",
            &[("host", "example.com")],
            Ok("http://example.com/a/b?x=1"),
        ),
        (
            "host lowercased",
            "/",
            &[("host", "ExAmple.COM")],
            Ok("http://example.com/"),
        ),
        (
            "default port removed",
            "/",
            &[("host", "example.com:80")],
            Ok("http://example.com/"),
        ),
        (
            "empty port removed",
            "/",
            &[("host", "example.com:")],
            Ok("http://example.com/"),
        ),
        (
            "other port kept",
            "/",
            &[("host", "example.com:8080")],
            Ok("http://example.com:8080/"),
        ),
        (
            "443 kept for http",
            "/",
            &[("host", "example.com:443")],
            Ok("http://example.com:443/"),
        ),
        (
            "absolute-form wins over Host",
            "http://Origin.example:80/p",
            &[("host", "other")],
            Ok("http://origin.example/p"),
        ),
        (
            "https default port",
            "https://a.example:443/p",
            &[],
            Ok("https://a.example/p"),
        ),
        (
            "query is part of the key",
            "/p?b=2&a=1",
            &[("host", "h")],
            Ok("http://h/p?b=2&a=1"),
        ),
        (
            "unreserved percent-decoded",
            "/%7Euser/%41",
            &[("host", "h")],
            Ok("http://h/~user/A"),
        ),
        (
            "reserved percent-encoding uppercased",
            "/a%2fb?q=%3d",
            &[("host", "h")],
            Ok("http://h/a%2Fb?q=%3D"),
        ),
        (
            "ipv6 host",
            "/",
            &[("host", "[::1]:80")],
            Ok("http://[::1]/"),
        ),
        (
            "ipv6 host with port",
            "/",
            &[("host", "[::1]:8080")],
            Ok("http://[::1]:8080/"),
        ),
        (
            "no host",
            "/",
            &[],
            Err(KeyError::Authority(AuthorityError::Missing)),
        ),
        (
            "bad port",
            "/",
            &[("host", "h:abc")],
            Err(KeyError::Authority(AuthorityError::BadPort)),
        ),
        (
            "a Host outside the RFC 3986 grammar",
            "/",
            &[("host", "%t%d-7..kl")],
            Err(KeyError::Authority(AuthorityError::BadHost)),
        ),
        (
            "a Host with a bracket",
            "/",
            &[("host", "uq]w.")],
            Err(KeyError::Authority(AuthorityError::BadHost)),
        ),
        (
            "a Host with sub-delims is no DNS name",
            "/",
            &[("host", "a-b_c~d!e")],
            Err(KeyError::Authority(AuthorityError::BadHost)),
        ),
        (
            "percent-encodings in the query are uppercased",
            "/?%Aa",
            &[("host", "h")],
            Ok("http://h/?%AA"),
        ),
        (
            "a stray % is encoded, so a decoded neighbour makes no new triplet",
            "/%%41a?%%41a",
            &[("host", "h")],
            Ok("http://h/%25Aa?%25Aa"),
        ),
        (
            "a percent-encoded Host",
            "/",
            &[("host", "%41b")],
            Err(KeyError::Authority(AuthorityError::BadHost)),
        ),
        (
            "two Host fields (RFC 9112 3.2)",
            "/",
            &[("host", "victim.example"), ("host", "attacker.example")],
            Err(KeyError::Authority(AuthorityError::TwoHosts)),
        ),
        (
            "two Host fields, absolute-form target",
            "http://victim.example/",
            &[("host", "victim.example"), ("host", "victim.example")],
            Err(KeyError::Authority(AuthorityError::TwoHosts)),
        ),
        (
            "absolute-form authority wins over Host (RFC 9112 3.2.2)",
            "http://Victim.example:80/x",
            &[("host", "attacker.example")],
            Ok("http://victim.example/x"),
        ),
        (
            "a trailing dot is the same host",
            "/x",
            &[("host", "Example.COM.:80")],
            Ok("http://example.com/x"),
        ),
        (
            "userinfo in Host",
            "/",
            &[("host", "b.example:1@a.example")],
            Err(KeyError::Authority(AuthorityError::Userinfo)),
        ),
        (
            "userinfo in an absolute-form target",
            "http://b.example:1@a.example/x",
            &[("host", "a.example")],
            Err(KeyError::Authority(AuthorityError::Userinfo)),
        ),
        (
            "asterisk-form",
            "*",
            &[("host", "h")],
            Err(KeyError::NotOriginForm),
        ),
    ];
    for (name, uri, fields, want) in cases {
        let method = if *uri == "*" { "OPTIONS" } else { "GET" };
        let got = CacheKey::from_parts(&req_with(method, uri, fields), "http");
        assert_eq!(
            got.as_ref().map(|k| k.as_str()).map_err(|e| *e),
            *want,
            "{name}"
        );
    }
    let k = CacheKey::from_parts(&req_with("GET", "/x", &[("host", "h:81")]), "https").unwrap();
    assert_eq!(k.as_bytes(), b"https://h:81/x");
    assert_eq!(k.origin(), "https://h:81");
}

#[test]
fn policy_request_classes() {
    let cfg = PolicyConfig::default();
    let cases: &[(&str, &[(&str, &str)], RequestClass)] = &[
        ("GET", &[], RequestClass::Cacheable),
        ("HEAD", &[], RequestClass::Cacheable),
        ("POST", &[], RequestClass::Unsafe),
        ("PUT", &[], RequestClass::Unsafe),
        ("DELETE", &[], RequestClass::Unsafe),
        ("PATCH", &[], RequestClass::Unsafe),
        ("PURGEX", &[], RequestClass::Unsafe),
        ("OPTIONS", &[], RequestClass::Bypass(BypassReason::Method)),
        ("TRACE", &[], RequestClass::Bypass(BypassReason::Method)),
        (
            "GET",
            &[("upgrade", "websocket"), ("connection", "upgrade")],
            RequestClass::Bypass(BypassReason::Upgrade),
        ),
    ];
    for (method, fields, want) in cases {
        assert_eq!(
            request::classify(&req_with(method, "/", fields), &cfg),
            *want,
            "{method}"
        );
    }
}

#[test]
fn policy_invalidation_rfc9111_4_4() {
    let cases: &[(&str, &str, u16, &[(&str, &str)], &[&str])] = &[
        ("POST 200", "POST", 200, &[], &["http://h/r"]),
        (
            "PUT 201 + Location",
            "PUT",
            201,
            &[("location", "/new")],
            &["http://h/r", "http://h/new"],
        ),
        (
            "DELETE 204 + Content-Location",
            "DELETE",
            204,
            &[("content-location", "http://h/c")],
            &["http://h/r", "http://h/c"],
        ),
        (
            "relative Location",
            "POST",
            303,
            &[("location", "x?y=1")],
            &["http://h/r", "http://h/x?y=1"],
        ),
        (
            "dot segments",
            "POST",
            200,
            &[("location", "/a/../b/./c")],
            &["http://h/r", "http://h/b/c"],
        ),
        (
            "other origin is not invalidated",
            "POST",
            200,
            &[("location", "http://evil/r2")],
            &["http://h/r"],
        ),
        (
            "other port is another origin",
            "POST",
            200,
            &[("location", "http://h:81/r2")],
            &["http://h/r"],
        ),
        (
            "network-path reference",
            "POST",
            200,
            &[("location", "//h/n")],
            &["http://h/r", "http://h/n"],
        ),
        (
            "fragment dropped",
            "POST",
            200,
            &[("location", "/f#x")],
            &["http://h/r", "http://h/f"],
        ),
        (
            "same URI once",
            "POST",
            200,
            &[("location", "/r")],
            &["http://h/r"],
        ),
        (
            "unknown method is unsafe",
            "FROB",
            200,
            &[],
            &["http://h/r"],
        ),
        ("error status: nothing", "POST", 500, &[], &[]),
        ("4xx: nothing", "DELETE", 404, &[], &[]),
        ("safe method: nothing", "GET", 200, &[], &[]),
    ];
    for (name, method, status, fields, want) in cases {
        let r = req_with(method, "/r", &[("host", "h")]);
        let keys = invalidate::targets(
            &r,
            StatusCode::from_u16(*status).unwrap(),
            &header_map(fields),
            "http",
        );
        let got: Vec<_> = keys.iter().map(|k| k.as_str()).collect();
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn policy_request_class_cache_status_rfc9211_2_2() {
    let cases: &[(RequestClass, Option<&str>)] = &[
        (RequestClass::Cacheable, None),
        (RequestClass::Unsafe, Some("edgecache; fwd=method")),
        (
            RequestClass::Bypass(BypassReason::Method),
            Some("edgecache; fwd=method"),
        ),
        (
            RequestClass::Bypass(BypassReason::Upgrade),
            Some("edgecache; fwd=bypass; detail=upgrade"),
        ),
        (
            RequestClass::Bypass(BypassReason::Connect),
            Some("edgecache; fwd=bypass; detail=connect"),
        ),
    ];
    for (class, want) in cases {
        assert_eq!(
            class
                .cache_status("edgecache")
                .map(|s| s.to_string())
                .as_deref(),
            *want,
            "{class:?}"
        );
    }
}

#[test]
fn policy_strip_for_fill() {
    let mut r = req_with(
        "GET",
        "/",
        &[
            ("range", "bytes=0-1"),
            ("if-range", "\"a\""),
            ("if-none-match", "\"a\""),
            ("if-modified-since", "x"),
            ("if-match", "\"a\""),
            ("accept", "*/*"),
        ],
    );
    request::strip_for_fill(&mut r.headers);
    let mut names: Vec<_> = r.headers.keys().map(|n| n.as_str()).collect();
    names.sort();
    assert_eq!(names, ["accept", "accept-encoding", "if-match"]);
    assert_eq!(r.headers["accept-encoding"], "identity");
}

/// A fill tells the origin only the client's Accept-Encoding bucket, one field line, the value
/// its variant is stored under (issue 33 §1: at most four variants per object).
#[test]
fn policy_fills_send_the_accept_encoding_bucket() {
    for (sent, want) in [
        (&[][..], "identity"),
        (&["gzip, deflate, br, zstd"][..], "zstd"),
        (&["gzip, deflate, br"][..], "br"),
        (&["gzip", "deflate"][..], "gzip"),
        (&["deflate"][..], "identity"),
        (&["br;q=0, gzip;q=0.5"][..], "gzip"),
        (&["gzip"][..], "gzip"),
    ] {
        let fields: Vec<(&str, &str)> = sent.iter().map(|v| ("accept-encoding", *v)).collect();
        let mut r = req_with("GET", "/", &fields);
        request::strip_for_fill(&mut r.headers);
        let got: Vec<_> = r.headers.get_all("accept-encoding").iter().collect();
        assert_eq!(got, [want], "{sent:?}");
    }
}

/// Routing parses the authority once, for the listener's scheme, and leaves it in the request's
/// extensions (and as the head's one Host field); the key takes it from there instead of parsing
/// again. Whatever the listener, the key is the one a parse of the routed head's Host gives
/// (the port dropped when it is the key scheme's default, kept otherwise).
#[test]
fn policy_key_from_the_routed_authority_is_the_parsed_one() {
    use edgecache_policy::Authority;
    let hosts = [
        "a.example",
        "A.Example.:80",
        "a.example:443",
        "a.example:8080",
        "[::1]:80",
        "[::1]:443",
        "10.0.0.1:80",
    ];
    for host in hosts {
        for listener in ["http", "https"] {
            let mut routed = req_with("GET", "/p?q=1", &[("host", host)]);
            let authority = Authority::of_request(&routed, listener).unwrap();
            // As routing leaves the head: Host the normalised authority, the value beside it.
            routed
                .headers
                .insert("host", authority.as_str().parse().unwrap());
            let want = CacheKey::from_parts(&routed, "http").unwrap();
            routed.extensions.insert(authority);
            let got = CacheKey::from_parts(&routed, "http").unwrap();
            assert_eq!(got, want, "Host {host} on an {listener} listener");
        }
    }
}
