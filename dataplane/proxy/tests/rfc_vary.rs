//! RFC 9111 4.1 (Vary) through the server: several variants per URL, `Vary: *`, odd Vary values.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use rfc_support::*;

/// An origin whose body and Content-Encoding depend on Accept-Encoding, with `vary` as Vary.
fn encoding_origin(vary: &'static str) -> Scripted {
    Scripted::start(move |req, _| {
        let gzip = req
            .header("accept-encoding")
            .is_some_and(|v| v.contains("gzip"));
        let mut h = vec![("Cache-Control", "max-age=600"), ("Vary", vary)];
        if gzip {
            h.push(("Content-Encoding", "gzip"));
        }
        let body: &[u8] = if gzip {
            b"gzip-variant"
        } else {
            b"identity-variant"
        };
        resp("200 OK", &h, body)
    })
}

#[test]
fn rfc9111_4_1_two_variants_of_one_url_are_stored_and_each_served_to_its_requests() {
    let o = encoding_origin("Accept-Encoding");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let gz = [("Accept-Encoding", "gzip")];
    let id = [("Accept-Encoding", "identity")];
    let r = dp.request("GET", "/v", &gz);
    assert_eq!(r.body, b"gzip-variant");
    let r = dp.request("GET", "/v", &id);
    assert_eq!(r.body, b"identity-variant");
    assert!(
        r.cache_status().contains("fwd=vary-miss"),
        "{}",
        r.cache_status()
    );
    for _ in 0..2 {
        let r = dp.request("GET", "/v", &gz);
        assert!(r.is_hit(), "{}", r.cache_status());
        assert_eq!(r.body, b"gzip-variant");
        assert_eq!(r.header("content-encoding"), "gzip");
        let r = dp.request("GET", "/v", &id);
        assert!(r.is_hit(), "{}", r.cache_status());
        assert_eq!(r.body, b"identity-variant");
        assert_eq!(r.header("content-encoding"), "");
    }
    // A request without the header is in the identity bucket too (fills send the bucket,
    // `Accept-Encoding: identity`, so the origin chose for it): the same variant.
    let r = dp.get("/v");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.body, b"identity-variant");
    assert_eq!(o.count(), 2, "one origin fetch per variant");
}

#[test]
fn rfc9111_4_1_vary_star_never_matches() {
    let o = Scripted::start(|_, n| {
        resp(
            "200 OK",
            &[("Cache-Control", "max-age=600"), ("Vary", "*")],
            format!("n{n}").as_bytes(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    for i in 0..3 {
        let r = dp.get("/star");
        assert_eq!(r.status, 200);
        assert!(!r.is_hit(), "{}", r.cache_status());
        assert_eq!(r.body, format!("n{i}").as_bytes());
    }
    assert_eq!(o.count(), 3);
    // Vary: * inside a list is still *.
    let o = Scripted::start(|_, _| {
        resp(
            "200 OK",
            &[("Cache-Control", "max-age=600"), ("Vary", "Accept, *")],
            b"x",
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.get("/star2");
    assert!(!dp.get("/star2").is_hit());
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9111_4_1_odd_vary_values_mixed_case_whitespace_repeated_and_empty() {
    // Mixed case, extra whitespace and a repeated name select on Accept-Encoding alone.
    let o = encoding_origin("  aCCept-encoding ,ACCEPT-ENCODING,  ");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let gz = [("Accept-Encoding", "gzip")];
    dp.request("GET", "/odd", &gz);
    let r = dp.request("GET", "/odd", &gz);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.body, b"gzip-variant");
    let r = dp.request("GET", "/odd", &[("Accept-Encoding", "br")]);
    assert!(!r.is_hit(), "{}", r.cache_status());
    assert_eq!(o.count(), 2);

    // An empty Vary selects nothing: one entry for everyone.
    let o = encoding_origin("");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.request("GET", "/empty", &gz);
    let r = dp.request("GET", "/empty", &[("Accept-Encoding", "br")]);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.body, b"gzip-variant");
    assert_eq!(o.count(), 1);
}

#[test]
fn rfc9111_4_1_a_new_response_for_a_variant_replaces_only_that_variant() {
    let o = Scripted::start(|req, n| {
        let lang = req.header("accept-language").unwrap_or("-").to_string();
        resp(
            "200 OK",
            &[
                ("Cache-Control", "max-age=600"),
                ("Vary", "Accept-Language"),
            ],
            format!("{lang}-{n}").as_bytes(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let en = [("Accept-Language", "en")];
    let fr = [("Accept-Language", "fr")];
    assert_eq!(dp.request("GET", "/l", &en).body, b"en-0");
    assert_eq!(dp.request("GET", "/l", &fr).body, b"fr-1");
    // A client no-cache on the en variant refetches (the origin sends no validators) and
    // replaces just that variant.
    let r = dp.request(
        "GET",
        "/l",
        &[("Accept-Language", "en"), ("Cache-Control", "no-cache")],
    );
    assert_eq!(r.body, b"en-2");
    assert_eq!(dp.request("GET", "/l", &en).body, b"en-2");
    assert_eq!(dp.request("GET", "/l", &fr).body, b"fr-1");
    assert_eq!(o.count(), 3);
}

#[test]
fn rfc9111_4_1_request_values_are_normalized_before_matching() {
    let o = encoding_origin("Accept-Encoding");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.request("GET", "/n", &[("Accept-Encoding", "gzip, deflate")]);
    for same in ["gzip,deflate", "GZIP ,  Deflate", "gzip,\tdeflate"] {
        let r = dp.request("GET", "/n", &[("Accept-Encoding", same)]);
        assert!(r.is_hit(), "{same:?}: {}", r.cache_status());
        assert_eq!(r.body, b"gzip-variant");
    }
    // Two field lines are one list (RFC 9110 5.3).
    let r = dp.request(
        "GET",
        "/n",
        &[("Accept-Encoding", "gzip"), ("Accept-Encoding", "deflate")],
    );
    assert!(r.is_hit(), "{}", r.cache_status());
    // Accept-Encoding is matched by its bucket (issue 33 §1): another order, or codings the
    // cache does not bucket, are the same gzip variant...
    for same in ["deflate, gzip", "gzip;q=0.5, compress"] {
        let r = dp.request("GET", "/n", &[("Accept-Encoding", same)]);
        assert!(r.is_hit(), "{same:?}: {}", r.cache_status());
        assert_eq!(r.body, b"gzip-variant");
    }
    assert_eq!(o.count(), 1);
    // ... and a client that accepts none of zstd, br and gzip is the identity one.
    let r = dp.request("GET", "/n", &[("Accept-Encoding", "deflate")]);
    assert_eq!(r.body, b"identity-variant");
    assert_eq!(o.count(), 2, "{}", r.cache_status());
}
