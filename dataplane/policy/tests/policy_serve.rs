//! Serving from storage (RFC 9111 4, 4.2.4, 5.2.1, 5.2.2; RFC 5861).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use edgecache_policy::PolicyConfig;
use edgecache_policy::serve::{self, Reason, ServeDecision};
use edgecache_policy::status::Fwd;
use http::header::{IF_MODIFIED_SINCE, IF_NONE_MATCH};
use policy_support::*;

/// A compact label for a decision, for table comparisons.
fn label(d: &ServeDecision) -> String {
    match d {
        ServeDecision::Serve { reason, .. } => format!("serve:{}", reason.as_str()),
        ServeDecision::ServeStale { .. } => "serve-stale".into(),
        ServeDecision::Revalidate {
            reason,
            stale_if_error,
            ..
        } => format!(
            "revalidate:{}{}",
            reason.as_str(),
            if *stale_if_error { "+sie" } else { "" }
        ),
        ServeDecision::Forward { reason } => format!("forward:{}", reason.as_str()),
        ServeDecision::GatewayTimeout => "504".into(),
    }
}

#[test]
fn policy_serve_decisions_rfc9111_4() {
    // (name, stored response fields, request method, request fields, now (T0 + s), expected)
    let cases: &[(&str, &[(&str, &str)], &str, &[(&str, &str)], i64, &str)] = &[
        (
            "4.2 fresh",
            &[("cache-control", "max-age=60")],
            "GET",
            &[],
            10,
            "serve:fresh",
        ),
        (
            "4 HEAD served from stored GET",
            &[("cache-control", "max-age=60")],
            "HEAD",
            &[],
            10,
            "serve:fresh",
        ),
        (
            "4.2 stale",
            &[("cache-control", "max-age=60")],
            "GET",
            &[],
            60,
            "revalidate:stale",
        ),
        (
            "4 POST never served",
            &[("cache-control", "max-age=60")],
            "POST",
            &[],
            10,
            "forward:method",
        ),
        (
            "5.2.2.4 no-cache response",
            &[("cache-control", "no-cache, max-age=60")],
            "GET",
            &[],
            10,
            "revalidate:response-no-cache",
        ),
        (
            "5.2.2.4 no-cache=field serves without the field",
            &[("cache-control", "no-cache=\"x-a\", max-age=60")],
            "GET",
            &[],
            10,
            "serve:fresh",
        ),
        (
            "5.2.1.4 request no-cache",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "no-cache")],
            10,
            "revalidate:request-no-cache",
        ),
        (
            "5.4 request Pragma: no-cache",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("pragma", "no-cache")],
            10,
            "revalidate:request-no-cache",
        ),
        (
            "5.4 Pragma ignored with Cache-Control",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("pragma", "no-cache"), ("cache-control", "max-stale")],
            10,
            "serve:fresh",
        ),
        (
            "5.2.1.1 request max-age=0",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "max-age=0")],
            10,
            "revalidate:request-max-age",
        ),
        (
            "5.2.1.1 request max-age satisfied",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "max-age=20")],
            10,
            "serve:fresh",
        ),
        (
            "5.2.1.1 request max-age equal to age",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "max-age=10")],
            10,
            "serve:fresh",
        ),
        (
            "5.2.1.1 request max-age invalid means 0",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "max-age=-1")],
            10,
            "revalidate:request-max-age",
        ),
        (
            "5.2.1.3 min-fresh satisfied",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "min-fresh=50")],
            10,
            "serve:fresh",
        ),
        (
            "5.2.1.3 min-fresh not satisfied",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "min-fresh=51")],
            10,
            "revalidate:request-min-fresh",
        ),
        (
            "5.2.1.2 max-stale any",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "max-stale")],
            1000,
            "serve:max-stale",
        ),
        (
            "5.2.1.2 max-stale within",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "max-stale=30")],
            90,
            "serve:max-stale",
        ),
        (
            "5.2.1.2 max-stale exceeded",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "max-stale=30")],
            91,
            "revalidate:stale",
        ),
        (
            "4.2.4 max-stale vs must-revalidate",
            &[("cache-control", "max-age=60, must-revalidate")],
            "GET",
            &[("cache-control", "max-stale")],
            61,
            "revalidate:stale",
        ),
        (
            "4.2.4 max-stale vs proxy-revalidate",
            &[("cache-control", "max-age=60, proxy-revalidate")],
            "GET",
            &[("cache-control", "max-stale")],
            61,
            "revalidate:stale",
        ),
        (
            "4.2.4 max-stale vs s-maxage",
            &[("cache-control", "s-maxage=60")],
            "GET",
            &[("cache-control", "max-stale")],
            61,
            "revalidate:stale",
        ),
        (
            "5.2.1.7 only-if-cached fresh",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "only-if-cached")],
            10,
            "serve:fresh",
        ),
        (
            "5.2.1.7 only-if-cached stale",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "only-if-cached")],
            70,
            "504",
        ),
        (
            "5.2.1.7 only-if-cached + max-stale",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "only-if-cached, max-stale")],
            70,
            "serve:max-stale",
        ),
        (
            "RFC 5861 3 stale-while-revalidate",
            &[("cache-control", "max-age=60, stale-while-revalidate=30")],
            "GET",
            &[],
            80,
            "serve-stale",
        ),
        (
            "RFC 5861 3 beyond stale-while-revalidate",
            &[("cache-control", "max-age=60, stale-while-revalidate=30")],
            "GET",
            &[],
            91,
            "revalidate:stale",
        ),
        (
            "RFC 5861 3 swr vs must-revalidate",
            &[(
                "cache-control",
                "max-age=60, stale-while-revalidate=30, must-revalidate",
            )],
            "GET",
            &[],
            80,
            "revalidate:stale",
        ),
        (
            "RFC 5861 4 stale-if-error window",
            &[("cache-control", "max-age=60, stale-if-error=30")],
            "GET",
            &[],
            80,
            "revalidate:stale+sie",
        ),
        (
            "RFC 5861 4 beyond stale-if-error",
            &[("cache-control", "max-age=60, stale-if-error=30")],
            "GET",
            &[],
            91,
            "revalidate:stale",
        ),
        (
            "RFC 5861 4 stale-if-error vs no-cache",
            &[("cache-control", "no-cache, max-age=0, stale-if-error=30")],
            "GET",
            &[],
            10,
            "revalidate:response-no-cache",
        ),
        (
            "RFC 5861 4 stale-if-error vs s-maxage",
            &[("cache-control", "s-maxage=60, stale-if-error=30")],
            "GET",
            &[],
            80,
            "revalidate:stale",
        ),
        (
            "RFC 5861 4 request stale-if-error",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("cache-control", "stale-if-error=60")],
            80,
            "revalidate:stale+sie",
        ),
        (
            "3.5 Authorization vs plain entry revalidates",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("authorization", "Bearer t")],
            10,
            "revalidate:authorization",
        ),
        (
            "3.5 Authorization vs public entry",
            &[("cache-control", "public, max-age=60")],
            "GET",
            &[("authorization", "Bearer t")],
            10,
            "serve:fresh",
        ),
        (
            "4.3.2 If-Match forwarded",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("if-match", "\"a\"")],
            10,
            "forward:origin-precondition",
        ),
        (
            "4.3.2 If-Unmodified-Since forwarded",
            &[("cache-control", "max-age=60")],
            "GET",
            &[("if-unmodified-since", "Tue, 14 Nov 2023 22:13:20 GMT")],
            10,
            "forward:origin-precondition",
        ),
        (
            "4.1 Vary mismatch",
            &[("cache-control", "max-age=60"), ("vary", "accept-language")],
            "GET",
            &[("accept-language", "fr")],
            10,
            "forward:vary-miss",
        ),
        (
            "4.1 Vary mismatch + only-if-cached",
            &[("cache-control", "max-age=60"), ("vary", "accept-language")],
            "GET",
            &[
                ("accept-language", "fr"),
                ("cache-control", "only-if-cached"),
            ],
            10,
            "504",
        ),
        (
            "4.2.1 invalid max-age stale at once",
            &[("cache-control", "max-age=1.5")],
            "GET",
            &[],
            0,
            "revalidate:stale",
        ),
        (
            "RFC 9213 CDN-Cache-Control freshness",
            &[
                ("cache-control", "no-cache"),
                ("cdn-cache-control", "max-age=60"),
            ],
            "GET",
            &[],
            10,
            "serve:fresh",
        ),
        (
            "RFC 9213 EdgeCache-Cache-Control no-cache",
            &[
                ("cache-control", "max-age=60"),
                ("edgecache-cache-control", "no-cache"),
            ],
            "GET",
            &[],
            10,
            "revalidate:response-no-cache",
        ),
        (
            "4.2.2 heuristic fresh",
            &[("last-modified", "Tue, 14 Nov 2023 19:26:40 GMT")],
            "GET",
            &[],
            999,
            "serve:fresh",
        ),
        (
            "4.2.2 heuristic stale",
            &[("last-modified", "Tue, 14 Nov 2023 19:26:40 GMT")],
            "GET",
            &[],
            1000,
            "revalidate:stale",
        ),
    ];
    let cfg = PolicyConfig::default();
    for (name, stored_fields, method, req_fields, now, want) in cases {
        let d0 = date(0);
        let mut fields = stored_fields.to_vec();
        fields.push(("date", &d0));
        let s = stored(&fields);
        let d = serve::decide(&req_with(method, "/r", req_fields), &s, at(*now), &cfg);
        assert_eq!(label(&d), *want, "{name}");
    }
}

#[test]
fn policy_ignore_client_no_cache_config() {
    let cfg = PolicyConfig {
        ignore_client_no_cache: true,
        ..PolicyConfig::default()
    };
    let s = stored(&[("cache-control", "max-age=60")]);
    for fields in [[("cache-control", "no-cache")], [("pragma", "no-cache")]] {
        let d = serve::decide(&get(&fields), &s, at(1), &cfg);
        assert_eq!(label(&d), "serve:fresh", "{fields:?}");
    }
}

#[test]
fn policy_revalidation_carries_validators_rfc9111_4_3_1() {
    let lm = "Tue, 14 Nov 2023 19:26:40 GMT";
    let cases: &[(&[(&str, &str)], Option<&str>, Option<&str>)] = &[
        (
            &[("etag", "\"v1\""), ("last-modified", lm)],
            Some("\"v1\""),
            Some(lm),
        ),
        (&[("etag", "W/\"v1\"")], Some("W/\"v1\""), None),
        (&[("last-modified", lm)], None, Some(lm)),
        (&[("etag", "v1-unquoted")], None, None),
        (&[], None, None),
    ];
    for (fields, inm, ims) in cases {
        let mut f = fields.to_vec();
        f.push(("cache-control", "max-age=0"));
        let d = serve::decide(&get(&[]), &stored(&f), at(1), &PolicyConfig::default());
        let ServeDecision::Revalidate { conditional, .. } = d else {
            panic!("{fields:?}: {d:?}");
        };
        assert_eq!(
            conditional.get(IF_NONE_MATCH).map(|v| v.to_str().unwrap()),
            *inm
        );
        assert_eq!(
            conditional
                .get(IF_MODIFIED_SINCE)
                .map(|v| v.to_str().unwrap()),
            *ims
        );
    }
}

#[test]
fn policy_misses_rfc9111_5_2_1_7() {
    assert_eq!(label(&serve::miss(&get(&[]))), "forward:uri-miss");
    assert_eq!(
        label(&serve::miss(&get(&[("cache-control", "only-if-cached")]))),
        "504"
    );
    assert_eq!(label(&serve::vary_miss(&get(&[]))), "forward:vary-miss");
}

#[test]
fn policy_stale_if_error_rechecked_at_error_time_rfc5861_4() {
    let cfg = PolicyConfig::default();
    let s = stored(&[("cache-control", "max-age=60, stale-if-error=30")]);
    let h = get(&[]).headers;
    assert!(serve::stale_if_error(&h, &s, at(90), &cfg));
    assert!(!serve::stale_if_error(&h, &s, at(91), &cfg));
    let mr = stored(&[(
        "cache-control",
        "max-age=60, stale-if-error=30, must-revalidate",
    )]);
    assert!(!serve::stale_if_error(&h, &mr, at(70), &cfg));
    for (status, want) in [
        (500, true),
        (502, true),
        (503, true),
        (504, true),
        (404, false),
        (501, false),
    ] {
        assert_eq!(
            serve::is_error_for_stale(http::StatusCode::from_u16(status).unwrap()),
            want
        );
    }
}

#[test]
fn policy_decisions_map_to_cache_status_rfc9211() {
    let cfg = PolicyConfig::default();
    let s = stored(&[("cache-control", "max-age=60, stale-while-revalidate=60")]);
    let cases: &[(i64, &[(&str, &str)], &str)] = &[
        (10, &[], "edgecache; hit; ttl=50"),
        (70, &[], "edgecache; hit; ttl=-10"),
        (200, &[], "edgecache; fwd=stale"),
        (
            10,
            &[("cache-control", "no-cache")],
            "edgecache; fwd=request",
        ),
        (
            200,
            &[("cache-control", "only-if-cached")],
            "edgecache; detail=only-if-cached",
        ),
    ];
    for (now, fields, want) in cases {
        let d = serve::decide(&get(fields), &s, at(*now), &cfg);
        assert_eq!(
            d.cache_status(&cfg.name).to_string(),
            *want,
            "now={now} {fields:?}"
        );
    }
    assert_eq!(Reason::VaryMiss.fwd(), Fwd::VaryMiss);
}

/// A soft purge (`expired_at`) makes a fresh response stale from that instant: the next
/// request revalidates, and stale-while-revalidate counts from the purge, not from the end of
/// the lifetime the origin gave.
#[test]
fn soft_purged_response_is_stale_from_the_purge_rfc5861() {
    let cfg = PolicyConfig::default();
    let fields = [
        ("date", date(0)),
        (
            "cache-control",
            "max-age=3600, stale-while-revalidate=300".to_string(),
        ),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut s = stored(&fields);
    assert!(matches!(
        serve::decide(&get(&[]), &s, at(200), &cfg),
        ServeDecision::Serve { .. }
    ));
    s.expired_at = Some(at(100));
    // 100 s stale at 200: within stale-while-revalidate.
    assert!(matches!(
        serve::decide(&get(&[]), &s, at(200), &cfg),
        ServeDecision::ServeStale { .. }
    ));
    // 400 s stale at 500: revalidate (and the freshness says so too).
    match serve::decide(&get(&[]), &s, at(500), &cfg) {
        ServeDecision::Revalidate {
            reason, freshness, ..
        } => {
            assert_eq!(reason, Reason::Stale);
            assert_eq!(freshness.staleness().as_secs(), 400);
        }
        d => panic!("{d:?}"),
    }
}
