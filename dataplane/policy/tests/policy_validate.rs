//! Validation (RFC 9111 4.3): 304 freshening (4.3.3, 4.3.4, 3.2), HEAD (4.3.5), clients'
//! conditional requests (4.3.2), and the header fields sent from storage (4, 5.1, RFC 9213).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use edgecache_policy::conditional::{self, Precondition};
use edgecache_policy::headers;
use edgecache_policy::respond::{self, BodyPart};
use edgecache_policy::validate::{self, Freshen, HeadUpdate};
use edgecache_policy::{PolicyConfig, StoredResponse};
use http::Method;
use policy_support::*;

fn base() -> StoredResponse {
    let d = date(-100);
    stored(&[
        ("cache-control", "max-age=60"),
        ("date", &d),
        ("etag", "\"v1\""),
        ("last-modified", "Tue, 14 Nov 2023 19:26:40 GMT"),
        ("content-length", "10"),
        ("content-type", "text/plain"),
        ("content-encoding", "gzip"),
        ("age", "5"),
        ("x-old", "1"),
    ])
}

fn updated(fields: &[(&str, &str)]) -> Freshen {
    validate::freshen(&base(), &resp(304, fields), at(9), at(10))
}

#[test]
fn policy_selecting_stored_response_for_update_rfc9111_4_3_4() {
    let cases: &[(&str, &[(&str, &str)], bool)] = &[
        ("strong etag matches", &[("etag", "\"v1\"")], true),
        ("strong etag differs", &[("etag", "\"v2\"")], false),
        (
            "weak etag matches by weak comparison",
            &[("etag", "W/\"v1\"")],
            true,
        ),
        (
            "same Last-Modified",
            &[("last-modified", "Tue, 14 Nov 2023 19:26:40 GMT")],
            true,
        ),
        (
            "other Last-Modified",
            &[("last-modified", "Tue, 14 Nov 2023 19:26:41 GMT")],
            false,
        ),
        (
            "no validator: answers the request we sent (deviation, see docs)",
            &[],
            true,
        ),
        ("malformed etag", &[("etag", "v1")], false),
    ];
    for (name, fields, want) in cases {
        assert_eq!(
            matches!(updated(fields), Freshen::Updated(_)),
            *want,
            "{name}"
        );
    }
    let weak_stored = stored(&[("etag", "W/\"v1\"")]);
    let strong_304 = resp(304, &[("etag", "\"v1\"")]);
    assert_eq!(
        validate::freshen(&weak_stored, &strong_304, at(0), at(0)),
        Freshen::Mismatch,
        "strong 304 vs weak stored"
    );
    assert_eq!(
        validate::freshen(&base(), &resp(200, &[]), at(0), at(0)),
        Freshen::Mismatch,
        "not a 304"
    );
}

#[test]
fn policy_updating_stored_fields_rfc9111_3_2() {
    let d = date(10);
    let Freshen::Updated(s) = updated(&[
        ("etag", "\"v1\""),
        ("date", &d),
        ("cache-control", "max-age=120"),
        ("x-new", "2"),
        ("content-length", "0"),
        ("content-encoding", "br"),
        ("connection", "x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=1"),
    ]) else {
        panic!("not updated");
    };
    let h = s.headers();
    assert_eq!(h["cache-control"], "max-age=120", "replaced");
    assert_eq!(h["x-new"], "2", "added");
    assert_eq!(h["x-old"], "1", "kept");
    assert_eq!(
        h["content-length"], "10",
        "3.2: Content-Length is never updated"
    );
    assert_eq!(
        h["content-encoding"], "gzip",
        "the stored body's coding is kept"
    );
    assert!(
        !h.contains_key("x-hop") && !h.contains_key("keep-alive"),
        "3.1 fields not stored"
    );
    assert!(!h.contains_key("age"), "the old Age does not count twice");
    assert_eq!(h["date"], d.as_str());
    assert_eq!((s.request_time(), s.response_time()), (at(9), at(10)));
    let f = s.freshness(at(20), &PolicyConfig::default());
    assert!(f.is_fresh());
    assert_eq!(f.age.as_secs(), 11, "4.2.3: resident 10 + response_delay 1");
}

#[test]
fn policy_update_without_date_uses_receipt_time_rfc9110_6_6_1() {
    let Freshen::Updated(s) = updated(&[("etag", "\"v1\"")]) else {
        panic!()
    };
    assert_eq!(s.headers()["date"], date(10).as_str());
    assert!(s.freshness(at(10), &PolicyConfig::default()).is_fresh());
}

#[test]
fn policy_head_updates_rfc9111_4_3_5() {
    let cases: &[(&str, u16, &[(&str, &str)], &str)] = &[
        (
            "same validators",
            200,
            &[("etag", "\"v1\""), ("content-length", "10"), ("x-new", "1")],
            "updated",
        ),
        ("no validators at all", 200, &[("x-new", "1")], "updated"),
        ("etag differs", 200, &[("etag", "\"v2\"")], "stale"),
        (
            "Last-Modified differs",
            200,
            &[("last-modified", "Tue, 14 Nov 2023 19:26:41 GMT")],
            "stale",
        ),
        (
            "Content-Length differs",
            200,
            &[("etag", "\"v1\""), ("content-length", "11")],
            "stale",
        ),
        ("not a 200", 404, &[], "ignored"),
    ];
    for (name, status, fields, want) in cases {
        let got = match validate::freshen_with_head(&base(), &resp(*status, fields), at(0), at(1)) {
            HeadUpdate::Updated(s) => {
                assert_eq!(s.headers()["x-new"], "1", "{name}");
                "updated"
            }
            HeadUpdate::Stale => "stale",
            HeadUpdate::Ignored => "ignored",
        };
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn policy_client_conditionals_rfc9111_4_3_2() {
    let lm = "Tue, 14 Nov 2023 19:26:40 GMT";
    let cases: &[(&str, &str, &[(&str, &str)], Precondition)] = &[
        (
            "If-None-Match strong",
            "GET",
            &[("if-none-match", "\"v1\"")],
            Precondition::NotModified,
        ),
        (
            "If-None-Match weak comparison",
            "GET",
            &[("if-none-match", "W/\"v1\"")],
            Precondition::NotModified,
        ),
        (
            "If-None-Match list",
            "GET",
            &[("if-none-match", "\"a\", \"v1\"")],
            Precondition::NotModified,
        ),
        (
            "If-None-Match other",
            "GET",
            &[("if-none-match", "\"v2\"")],
            Precondition::Serve,
        ),
        (
            "If-None-Match *",
            "GET",
            &[("if-none-match", "*")],
            Precondition::NotModified,
        ),
        (
            "If-None-Match on HEAD",
            "HEAD",
            &[("if-none-match", "\"v1\"")],
            Precondition::NotModified,
        ),
        (
            "If-None-Match wins over If-Modified-Since",
            "GET",
            &[("if-none-match", "\"v2\""), ("if-modified-since", lm)],
            Precondition::Serve,
        ),
        (
            "If-Modified-Since equal",
            "GET",
            &[("if-modified-since", lm)],
            Precondition::NotModified,
        ),
        (
            "If-Modified-Since later",
            "GET",
            &[("if-modified-since", "Wed, 15 Nov 2023 00:00:00 GMT")],
            Precondition::NotModified,
        ),
        (
            "If-Modified-Since earlier",
            "GET",
            &[("if-modified-since", "Tue, 14 Nov 2023 19:26:39 GMT")],
            Precondition::Serve,
        ),
        (
            "If-Modified-Since invalid",
            "GET",
            &[("if-modified-since", "yesterday")],
            Precondition::Serve,
        ),
        (
            "If-Modified-Since rfc850",
            "GET",
            &[("if-modified-since", "Tuesday, 14-Nov-23 19:26:40 GMT")],
            Precondition::NotModified,
        ),
        (
            "If-Modified-Since asctime",
            "GET",
            &[("if-modified-since", "Tue Nov 14 19:26:40 2023")],
            Precondition::NotModified,
        ),
        (
            "If-Modified-Since in lower case",
            "GET",
            &[("if-modified-since", "tue, 14 nov 2023 19:26:40 gmt")],
            Precondition::NotModified,
        ),
        (
            "If-Modified-Since rfc850 in upper case, earlier",
            "GET",
            &[("if-modified-since", "TUESDAY, 14-NOV-23 19:26:39 GMT")],
            Precondition::Serve,
        ),
        ("no precondition", "GET", &[], Precondition::Serve),
    ];
    let s = base();
    for (name, method, fields, want) in cases {
        let r = req_with(method, "/r", fields);
        assert_eq!(
            conditional::evaluate(&r.method, &r.headers, &s),
            *want,
            "{name}"
        );
    }
    // Without Last-Modified, Date stands in (4.3.2).
    let no_lm = stored(&[("date", &date(0))]);
    let r = get(&[("if-modified-since", &date(0))]);
    assert_eq!(
        conditional::evaluate(&Method::GET, &r.headers, &no_lm),
        Precondition::NotModified
    );
    let r = get(&[("if-modified-since", &date(-1))]);
    assert_eq!(
        conditional::evaluate(&Method::GET, &r.headers, &no_lm),
        Precondition::Serve
    );
}

#[test]
fn policy_fields_sent_from_storage_rfc9111_4_and_5_1() {
    let s = stored(&[
        ("cache-control", "max-age=60"),
        ("cdn-cache-control", "max-age=600"),
        ("edgecache-cache-control", "max-age=6000"),
        ("date", &date(-30)),
        ("age", "100"),
        ("etag", "\"v1\""),
        ("x-a", "1"),
    ]);
    let h = headers::for_client(&s, at(20));
    assert_eq!(
        h["age"], "120",
        "4.2.3: max(apparent 30, Age 100) + resident 20"
    );
    assert_eq!(h["date"], date(-30).as_str(), "Date preserved");
    assert!(!h.contains_key("cdn-cache-control") && !h.contains_key("edgecache-cache-control"));
    assert_eq!(h["cache-control"], "max-age=60");
    assert_eq!(h["x-a"], "1");
    let nm = headers::not_modified(&s, at(20));
    let mut names: Vec<_> = nm.keys().map(|n| n.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["age", "cache-control", "date", "etag"],
        "RFC 9110 15.4.5"
    );
    let mut origin = header_map(&[
        ("cdn-cache-control", "x"),
        ("edgecache-cache-control", "y"),
        ("vary", "a"),
    ]);
    headers::strip_targeted(&mut origin);
    assert_eq!(origin.len(), 1);
}

#[test]
fn policy_responses_built_from_storage() {
    let s = base();
    let cases: &[(&str, &str, &[(&str, &str)], u16, BodyPart, Option<&str>)] = &[
        ("full GET", "GET", &[], 200, BodyPart::Full, None),
        ("HEAD has no body", "HEAD", &[], 200, BodyPart::Empty, None),
        (
            "client 304",
            "GET",
            &[("if-none-match", "\"v1\"")],
            304,
            BodyPart::Empty,
            None,
        ),
        (
            "range",
            "GET",
            &[("range", "bytes=2-5")],
            206,
            BodyPart::Range { start: 2, end: 5 },
            Some("bytes 2-5/10"),
        ),
        (
            "unsatisfiable",
            "GET",
            &[("range", "bytes=10-")],
            416,
            BodyPart::Empty,
            Some("bytes */10"),
        ),
        (
            "HEAD ignores Range",
            "HEAD",
            &[("range", "bytes=2-5")],
            200,
            BodyPart::Empty,
            None,
        ),
    ];
    for (name, method, fields, status, body, content_range) in cases {
        let r = respond::from_cache(&req_with(method, "/r", fields), &s, 10, at(0));
        assert_eq!(r.status.as_u16(), *status, "{name}");
        assert_eq!(r.body, *body, "{name}");
        assert_eq!(
            r.headers.get("content-range").map(|v| v.to_str().unwrap()),
            *content_range,
            "{name}"
        );
        assert!(r.headers.contains_key("age"), "{name}");
    }
}

/// A response the cache compressed (issue 33 §1): revalidated with the origin's own ETag, freshened
/// by the origin's 304 (whose ETag is the identity's), and kept in its compressed form.
#[test]
fn policy_a_compressed_copy_validates_as_the_origin_sent_it() {
    use edgecache_policy::encoding::{self, Coding};
    let d = date(-100);
    let mut h = http::HeaderMap::new();
    for (k, v) in [
        ("cache-control", "max-age=60"),
        ("date", d.as_str()),
        ("etag", "\"v1\""),
        ("content-length", "5000"),
        ("content-type", "text/css"),
        ("vary", "Accept-Language"),
    ] {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    encoding::compressed_fields(&mut h, Coding::Br);
    assert_eq!(h["etag"], "\"v1-br\"");
    assert_eq!(h["content-encoding"], "br");
    assert!(!h.contains_key("content-length"));
    assert_eq!(encoding::coded(&h), Some(Coding::Br));
    let fields: Vec<(String, String)> = h
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let coded = stored(&fields);

    // The conditional request carries the origin's validator.
    let cond = validate::conditional_headers(&coded);
    assert_eq!(cond["if-none-match"], "\"v1\"");
    // The origin's 304 (its identity ETag) selects the compressed copy and keeps it compressed.
    let Freshen::Updated(fresh) = validate::freshen(
        &coded,
        &resp(
            304,
            &[
                ("etag", "\"v1\""),
                ("vary", "Accept-Language"),
                ("x-new", "1"),
            ],
        ),
        at(9),
        at(10),
    ) else {
        panic!("the origin's 304 selects the compressed copy");
    };
    let fh = fresh.headers();
    assert_eq!(fh["etag"], "\"v1-br\"");
    assert_eq!(fh["content-encoding"], "br");
    assert_eq!(fh["x-new"], "1");
    let vary: Vec<_> = fh
        .get_all("vary")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert!(
        vary.iter()
            .any(|v| v.eq_ignore_ascii_case("accept-encoding")),
        "still varies on Accept-Encoding: {vary:?}"
    );
    // A 304 of another representation does not.
    assert_eq!(
        validate::freshen(&coded, &resp(304, &[("etag", "\"v2\"")]), at(9), at(10)),
        Freshen::Mismatch
    );
    // The mark never reaches a client.
    assert!(!fresh.client_fields().contains_key(encoding::CODED));
    // Identity only varies.
    let mut plain = http::HeaderMap::new();
    plain.insert("etag", "\"v1\"".parse().unwrap());
    encoding::compressed_fields(&mut plain, Coding::Identity);
    assert_eq!(plain["etag"], "\"v1\"");
    assert_eq!(plain["vary"], "Accept-Encoding");
    assert_eq!(encoding::coded(&plain), None);
}
