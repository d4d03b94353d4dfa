//! Storing responses (RFC 9111 3, 3.1, 3.5, 5.2.2; RFC 9110 15.1) and 1xx (RFC 9110 15.2).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use edgecache_policy::interim::{self, InterimAction};
use edgecache_policy::storable::{NoStoreReason, storable};
use edgecache_policy::{CookiePolicy, PolicyConfig, StoredResponse};
use http::{StatusCode, Version};
use policy_support::*;

type Case<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    u16,
    &'a [(&'a str, &'a str)],
    Result<(), NoStoreReason>,
);

#[test]
fn policy_storable_rfc9111_3() {
    use NoStoreReason::*;
    let ok = Ok(());
    let ma = [("cache-control", "max-age=60")];
    let cases: &[Case] = &[
        ("3 GET 200 max-age", "GET", &[], 200, &ma, ok),
        (
            "3 GET 200 heuristically cacheable without freshness",
            "GET",
            &[],
            200,
            &[],
            ok,
        ),
        (
            "3 HEAD is not stored (4.3.5 updates instead)",
            "HEAD",
            &[],
            200,
            &ma,
            Err(Method),
        ),
        ("3 POST", "POST", &[], 200, &ma, Err(Method)),
        (
            "3 final status only: 100",
            "GET",
            &[],
            100,
            &ma,
            Err(Interim),
        ),
        (
            "3 final status only: 103",
            "GET",
            &[],
            103,
            &ma,
            Err(Interim),
        ),
        (
            "3.3 a 206 with one range of known length is kept as partial content",
            "GET",
            &[("range", "bytes=0-1")],
            206,
            &[
                ("cache-control", "max-age=60"),
                ("content-range", "bytes 0-1/10"),
                ("content-length", "2"),
            ],
            ok,
        ),
        (
            "3.3 a 206 whose length is unknown is not kept",
            "GET",
            &[("range", "bytes=0-1")],
            206,
            &[
                ("cache-control", "max-age=60"),
                ("content-range", "bytes 0-1/*"),
                ("content-length", "2"),
            ],
            Err(PartialContent),
        ),
        (
            "3.3 a multipart/byteranges 206 is not kept",
            "GET",
            &[("range", "bytes=0-1, 4-5")],
            206,
            &[
                ("cache-control", "max-age=60"),
                ("content-type", "multipart/byteranges; boundary=B"),
            ],
            Err(PartialContent),
        ),
        (
            "3 304 updates, is not stored",
            "GET",
            &[],
            304,
            &ma,
            Err(NotModified),
        ),
        (
            "5.2.2.5 no-store",
            "GET",
            &[],
            200,
            &[("cache-control", "no-store, max-age=60")],
            Err(NoStore),
        ),
        (
            "5.2.2.5 NO-STORE case-insensitive",
            "GET",
            &[],
            200,
            &[("cache-control", "NO-STORE")],
            Err(NoStore),
        ),
        (
            "5.2.1.5 request no-store",
            "GET",
            &[("cache-control", "no-store")],
            200,
            &ma,
            Err(RequestNoStore),
        ),
        (
            "5.2.1.5 request pragma is not no-store",
            "GET",
            &[("pragma", "no-cache")],
            200,
            &ma,
            ok,
        ),
        (
            "5.2.2.7 private",
            "GET",
            &[],
            200,
            &[("cache-control", "private, max-age=60")],
            Err(Private),
        ),
        (
            "5.2.2.7 qualified private stores the rest",
            "GET",
            &[],
            200,
            &[("cache-control", "private=\"x-user\", max-age=60")],
            ok,
        ),
        (
            "5.2.2.3 must-understand + understood status ignores no-store",
            "GET",
            &[],
            200,
            &[("cache-control", "must-understand, no-store, max-age=60")],
            ok,
        ),
        (
            "5.2.2.3 must-understand + unknown status",
            "GET",
            &[],
            299,
            &[("cache-control", "must-understand, no-store, max-age=60")],
            Err(MustUnderstand),
        ),
        (
            "5.2.2.3 must-understand + 206 (understood: kept as partial content)",
            "GET",
            &[],
            206,
            &[
                ("cache-control", "must-understand, no-store, max-age=60"),
                ("content-range", "bytes 0-1/10"),
                ("content-length", "2"),
            ],
            ok,
        ),
        (
            "5.2.2.3 must-understand + a 206 this cache cannot keep",
            "GET",
            &[],
            206,
            &[("cache-control", "must-understand, max-age=60")],
            Err(PartialContent),
        ),
        (
            "3 unknown status with explicit freshness",
            "GET",
            &[],
            299,
            &ma,
            ok,
        ),
        (
            "3 unknown status without freshness",
            "GET",
            &[],
            299,
            &[],
            Err(NotCacheable),
        ),
        (
            "15.1 302 without freshness",
            "GET",
            &[],
            302,
            &[],
            Err(NotCacheable),
        ),
        (
            "3 302 with Expires",
            "GET",
            &[],
            302,
            &[("expires", "Tue, 14 Nov 2023 22:15:00 GMT")],
            ok,
        ),
        (
            "3 302 with invalid Expires is still storable (stale)",
            "GET",
            &[],
            302,
            &[("expires", "0")],
            ok,
        ),
        (
            "3 302 with public",
            "GET",
            &[],
            302,
            &[("cache-control", "public")],
            ok,
        ),
        ("3 500 with max-age", "GET", &[], 500, &ma, ok),
        ("15.1 404 heuristically cacheable", "GET", &[], 404, &[], ok),
        ("15.1 410", "GET", &[], 410, &[], ok),
        ("15.1 501", "GET", &[], 501, &[], ok),
        (
            "15.1 503 not heuristically cacheable",
            "GET",
            &[],
            503,
            &[],
            Err(NotCacheable),
        ),
        (
            "3.5 Authorization without permission",
            "GET",
            &[("authorization", "Basic x")],
            200,
            &ma,
            Err(Authorization),
        ),
        (
            "3.5 Authorization + public",
            "GET",
            &[("authorization", "Basic x")],
            200,
            &[("cache-control", "public, max-age=60")],
            ok,
        ),
        (
            "3.5 Authorization + s-maxage",
            "GET",
            &[("authorization", "Basic x")],
            200,
            &[("cache-control", "s-maxage=60")],
            ok,
        ),
        (
            "3.5 Authorization + must-revalidate",
            "GET",
            &[("authorization", "Basic x")],
            200,
            &[("cache-control", "must-revalidate, max-age=60")],
            ok,
        ),
        (
            "3.5 Authorization + proxy-revalidate is not enough",
            "GET",
            &[("authorization", "Basic x")],
            200,
            &[("cache-control", "proxy-revalidate, max-age=60")],
            Err(Authorization),
        ),
        (
            "4.1 Vary: *",
            "GET",
            &[],
            200,
            &[("cache-control", "max-age=60"), ("vary", "*")],
            Err(VaryAny),
        ),
        (
            "4.1 Vary: accept, *",
            "GET",
            &[],
            200,
            &[("cache-control", "max-age=60"), ("vary", "accept, *")],
            Err(VaryAny),
        ),
        (
            "4.1 Vary: accept",
            "GET",
            &[],
            200,
            &[("cache-control", "max-age=60"), ("vary", "accept")],
            ok,
        ),
        (
            "cookie policy default: Set-Cookie not public",
            "GET",
            &[],
            200,
            &[("cache-control", "max-age=60"), ("set-cookie", "a=b")],
            Err(SetCookie),
        ),
        (
            "cookie policy default: Set-Cookie public",
            "GET",
            &[],
            200,
            &[
                ("cache-control", "public, max-age=60"),
                ("set-cookie", "a=b"),
            ],
            ok,
        ),
        (
            "cookie policy: no-cache=set-cookie strips it",
            "GET",
            &[],
            200,
            &[
                ("cache-control", "no-cache=\"Set-Cookie\", max-age=60"),
                ("set-cookie", "a=b"),
            ],
            ok,
        ),
        (
            "RFC 9213 CDN-Cache-Control no-store wins",
            "GET",
            &[],
            200,
            &[
                ("cache-control", "max-age=60"),
                ("cdn-cache-control", "no-store"),
            ],
            Err(NoStore),
        ),
        (
            "RFC 9213 CDN-Cache-Control overrides CC no-store",
            "GET",
            &[],
            200,
            &[
                ("cache-control", "no-store"),
                ("cdn-cache-control", "max-age=60"),
            ],
            ok,
        ),
        (
            "RFC 9213 EdgeCache-Cache-Control private",
            "GET",
            &[],
            200,
            &[
                ("cdn-cache-control", "max-age=60"),
                ("edgecache-cache-control", "private"),
            ],
            Err(Private),
        ),
    ];
    let cfg = PolicyConfig::default();
    for (name, method, req_fields, status, resp_fields, want) in cases {
        let got = storable(
            &req_with(method, "/r", req_fields),
            &resp(*status, resp_fields),
            at(0),
            &cfg,
        )
        .map(|_| ());
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn policy_cookie_policies_config() {
    let public = [
        ("cache-control", "public, max-age=60"),
        ("set-cookie", "a=b"),
    ];
    let plain = [("cache-control", "max-age=60"), ("set-cookie", "a=b")];
    let cases: &[(CookiePolicy, &[(&str, &str)], bool)] = &[
        (CookiePolicy::Store, &plain, true),
        (CookiePolicy::Store, &public, true),
        (CookiePolicy::NoStoreUnlessPublic, &plain, false),
        (CookiePolicy::NoStoreUnlessPublic, &public, true),
        (CookiePolicy::NeverStore, &public, false),
        (
            CookiePolicy::NeverStore,
            &[
                ("cache-control", "private=set-cookie, max-age=60"),
                ("set-cookie", "a=b"),
            ],
            true,
        ),
    ];
    for (policy, fields, want) in cases {
        let cfg = PolicyConfig {
            cookie_policy: *policy,
            ..PolicyConfig::default()
        };
        let got = storable(&get(&[]), &resp(200, fields), at(0), &cfg).is_ok();
        assert_eq!(got, *want, "{policy:?} {fields:?}");
    }
}

#[test]
fn policy_storable_reports_lifetime() {
    let s = storable(
        &get(&[]),
        &resp(200, &[("cache-control", "max-age=60")]),
        at(0),
        &PolicyConfig::default(),
    )
    .unwrap();
    assert_eq!(s.lifetime.secs, 60);
    assert_eq!(NoStoreReason::VaryAny.as_str(), "vary-star");
}

#[test]
fn policy_stored_fields_rfc9111_3_1() {
    let s = StoredResponse::new(
        &get(&[]),
        &resp(
            200,
            &[
                (
                    "cache-control",
                    "max-age=60, private=\"X-User\", no-cache=\"x-debug\"",
                ),
                ("connection", "close, X-Conn-Only"),
                ("x-conn-only", "1"),
                ("keep-alive", "timeout=5"),
                ("transfer-encoding", "chunked"),
                ("te", "trailers"),
                ("upgrade", "h2c"),
                ("proxy-connection", "keep-alive"),
                ("proxy-authenticate", "Basic"),
                ("proxy-authentication-info", "x"),
                ("x-user", "alice"),
                ("x-debug", "1"),
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2"),
                ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
                ("etag", "\"v1\""),
            ],
        ),
        at(0),
        at(0),
    );
    let mut names: Vec<&str> = s.headers().keys().map(|n| n.as_str()).collect();
    names.sort();
    assert_eq!(names, ["cache-control", "date", "etag", "set-cookie"]);
    let cookies: Vec<_> = s.headers().get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"], "field lines keep their order");
    assert_eq!(
        s.headers()["date"],
        "Tue, 14 Nov 2023 22:13:20 GMT",
        "Date preserved"
    );
}

#[test]
fn policy_stored_freshness_is_read_from_the_fields_stored_rfc9111_3_1() {
    use edgecache_policy::freshness::Basis;
    use std::time::Duration;
    let date = ("date", "Tue, 14 Nov 2023 22:13:20 GMT");
    let cc = ("cache-control", "max-age=60");
    // Each response has a field Basis reads that is not stored (or no Date, which is added).
    let cases: &[&[(&str, &str)]] = &[
        &[cc, date, ("connection", "cache-control")],
        &[
            ("cache-control", "max-age=60, no-cache=\"expires\""),
            date,
            ("expires", "0"),
        ],
        &[cc, date, ("age", "100"), ("connection", "Age")],
        &[
            cc,
            date,
            ("cdn-cache-control", "max-age=5"),
            ("connection", "cdn-cache-control"),
        ],
        &[
            ("cache-control", "private=\"last-modified\""),
            date,
            ("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT"),
        ],
        &[cc],
    ];
    let received = at(0) + Duration::from_millis(500);
    for fields in cases {
        let r = resp(200, fields);
        let s = StoredResponse::new(&get(&[]), &r, at(0), received);
        assert_ne!(
            Basis::of(&r.headers, received),
            Basis::of(s.headers(), received),
            "{fields:?}: storing changes what freshness reads"
        );
        assert_eq!(*s.basis(), Basis::of(s.headers(), received), "{fields:?}");
        let with = StoredResponse::from_received(
            &http::HeaderMap::new(),
            r.status,
            &r.headers,
            at(0),
            received,
            Basis::of(&r.headers, received),
        );
        assert_eq!(*with.basis(), *s.basis(), "{fields:?}");
    }
    // With every such field kept, the basis read from what was received is the one stored.
    let r = resp(
        200,
        &[
            cc,
            date,
            ("age", "3"),
            ("x-other", "1"),
            ("connection", "x-other"),
        ],
    );
    let s = StoredResponse::new(&get(&[]), &r, at(0), received);
    assert_eq!(*s.basis(), Basis::of(&r.headers, received));
    assert!(s.headers().get("x-other").is_none());
}

#[test]
fn policy_missing_date_is_added_rfc9110_6_6_1() {
    let s = StoredResponse::new(
        &get(&[]),
        &resp(200, &[("cache-control", "max-age=60")]),
        at(-1),
        at(0),
    );
    assert_eq!(s.headers()["date"], date(0).as_str());
}

#[test]
fn policy_interim_responses_rfc9110_15_2() {
    let cases: &[(u16, Version, bool, InterimAction)] = &[
        (100, Version::HTTP_11, true, InterimAction::Forward),
        (100, Version::HTTP_11, false, InterimAction::Drop),
        (103, Version::HTTP_11, false, InterimAction::Forward),
        (102, Version::HTTP_2, false, InterimAction::Forward),
        (103, Version::HTTP_10, false, InterimAction::Drop),
        (100, Version::HTTP_10, true, InterimAction::Drop),
        (101, Version::HTTP_11, false, InterimAction::Drop),
        (199, Version::HTTP_11, false, InterimAction::Forward),
        (200, Version::HTTP_11, false, InterimAction::Drop),
    ];
    for (status, version, expects, want) in cases {
        let got = interim::action(StatusCode::from_u16(*status).unwrap(), *version, *expects);
        assert_eq!(got, *want, "{status} {version:?} expect={expects}");
    }
}

#[test]
fn policy_close_delimited_bodies_are_not_stored_by_default_rfc9112_6_3() {
    use edgecache_policy::freshness::Basis;
    use edgecache_policy::storable::storable_as_received;
    let cc = ("cache-control", "max-age=60");
    let cases: &[(u16, &[(&str, &str)], bool)] = &[
        (200, &[cc, ("content-length", "10")], true),
        (200, &[cc, ("transfer-encoding", "chunked")], true),
        (200, &[cc], false),
        (404, &[("cache-control", "max-age=60")], false),
        (204, &[cc], true),
    ];
    for (status, fields, want) in cases {
        let r = resp(*status, fields);
        let basis = Basis::of(&r.headers, at(0));
        let got = storable_as_received(&get(&[]), &r, &basis, &PolicyConfig::default());
        assert_eq!(got.is_ok(), *want, "{status} {fields:?}: {got:?}");
        if !want {
            assert_eq!(got.unwrap_err(), NoStoreReason::CloseDelimited);
        }
        let allowed = PolicyConfig {
            store_close_delimited: true,
            ..PolicyConfig::default()
        };
        let got = storable_as_received(&get(&[]), &r, &basis, &allowed);
        assert!(got.is_ok(), "configured to store: {status} {fields:?}");
    }
}

#[test]
fn policy_targeted_field_of_the_wrong_type_falls_back_to_cache_control_rfc9213_2_1() {
    // Every targeted value here has no directive of the right type, so the field is absent
    // and `Cache-Control: no-store` applies.
    let cases: &[(&str, &str)] = &[
        ("cdn-cache-control", "max-age=\"10000\""),
        ("cdn-cache-control", "max-age=abc"),
        ("cdn-cache-control", "max-age=1.5"),
        ("cdn-cache-control", "s-maxage=-1"),
        ("cdn-cache-control", "public=\"1\", max-age=abc"),
        ("edgecache-cache-control", "max-age=\"10000\""),
        ("edgecache-cache-control", "s-maxage=-1"),
    ];
    let cfg = PolicyConfig::default();
    for (field, value) in cases {
        let got = storable(
            &get(&[]),
            &resp(200, &[("cache-control", "no-store"), (field, value)]),
            at(0),
            &cfg,
        )
        .map(|_| ());
        assert_eq!(got, Err(NoStoreReason::NoStore), "{field}: {value}");
    }
    // A valid directive next to an invalid one keeps the field.
    let got = storable(
        &get(&[]),
        &resp(
            200,
            &[
                ("cache-control", "no-store"),
                ("cdn-cache-control", "max-age=\"1\", s-maxage=60"),
            ],
        ),
        at(0),
        &cfg,
    );
    assert!(got.is_ok(), "{got:?}");
}

#[test]
fn policy_hit_for_pass_durations() {
    use edgecache_policy::storable::{PASS_MAX, pass_for};
    use std::time::Duration;
    let ten = Duration::from_secs(10);
    let cases: &[(NoStoreReason, &[(&str, &str)], Option<u64>)] = &[
        (
            NoStoreReason::NoStore,
            &[("cache-control", "no-store")],
            Some(10),
        ),
        (
            NoStoreReason::NoStore,
            &[("cache-control", "no-store, max-age=3")],
            Some(3),
        ),
        (
            NoStoreReason::Private,
            &[("cache-control", "private, max-age=120")],
            Some(120),
        ),
        (
            NoStoreReason::Private,
            &[("cache-control", "private, max-age=999999999")],
            Some(PASS_MAX.as_secs()),
        ),
        // Only private / no-store answers set their own pass time.
        (
            NoStoreReason::SetCookie,
            &[("cache-control", "max-age=120")],
            Some(10),
        ),
        (NoStoreReason::NotCacheable, &[], Some(10)),
        (NoStoreReason::CloseDelimited, &[], Some(10)),
        // Reasons from the request say nothing of the next one.
        (NoStoreReason::RequestNoStore, &[], None),
        (
            NoStoreReason::Authorization,
            &[("cache-control", "no-store")],
            None,
        ),
        (NoStoreReason::Method, &[], None),
    ];
    for (reason, fields, want) in cases {
        let got = pass_for(*reason, &resp(200, fields), ten).map(|d| d.as_secs());
        assert_eq!(got, *want, "{reason:?} {fields:?}");
    }
    assert_eq!(
        pass_for(NoStoreReason::NoStore, &resp(200, &[]), Duration::ZERO),
        None,
        "zero: off"
    );
}
