//! Multi-step flows as the proxy drives them, each step a pure call with an explicit `now`.

mod policy_support;

use edgecache_policy::request::{self, RequestClass};
use edgecache_policy::serve::{self, ServeDecision};
use edgecache_policy::status::CacheStatus;
use edgecache_policy::storable::storable;
use edgecache_policy::validate::{self, Freshen};
use edgecache_policy::{CacheKey, PolicyConfig, StoredResponse, invalidate, respond, vary};
use http::StatusCode;
use policy_support::*;

fn fill(req: &http::request::Parts, fields: &[(&str, &str)], t: i64) -> StoredResponse {
    let origin = resp(200, fields);
    storable(req, &origin, at(t), &PolicyConfig::default()).expect("storable");
    StoredResponse::new(req, &origin, at(t), at(t))
}

#[test]
fn policy_stale_while_revalidate_then_background_304_rfc5861_3() {
    let cfg = PolicyConfig::default();
    let req = get(&[("host", "h")]);
    let s = fill(
        &req,
        &[
            ("cache-control", "max-age=10, stale-while-revalidate=20"),
            ("etag", "\"a\""),
        ],
        0,
    );
    let ServeDecision::ServeStale { conditional, .. } = serve::decide(&req, &s, at(15), &cfg)
    else {
        panic!("expected stale-while-revalidate");
    };
    assert_eq!(conditional["if-none-match"], "\"a\"");
    // The background request returns 304 at T0+16: fresh again until T0+25 (the current age
    // counts the 1 s response delay, 4.2.3).
    let Freshen::Updated(s) = validate::freshen(
        &s,
        &resp(304, &[("etag", "\"a\""), ("date", &date(16))]),
        at(15),
        at(16),
    ) else {
        panic!("not freshened");
    };
    assert!(matches!(
        serve::decide(&req, &s, at(24), &cfg),
        ServeDecision::Serve { .. }
    ));
    assert!(matches!(
        serve::decide(&req, &s, at(27), &cfg),
        ServeDecision::ServeStale { .. }
    ));
}

#[test]
fn policy_stale_if_error_then_must_revalidate_rfc5861_4_rfc9111_5_2_2_2() {
    let cfg = PolicyConfig::default();
    let req = get(&[("host", "h")]);
    let s = fill(
        &req,
        &[("cache-control", "max-age=10, stale-if-error=60")],
        0,
    );
    let ServeDecision::Revalidate {
        stale_if_error,
        reason,
        ..
    } = serve::decide(&req, &s, at(30), &cfg)
    else {
        panic!()
    };
    assert!(stale_if_error);
    // The origin answers 503: serve the stale response; Cache-Status says so.
    assert!(serve::is_error_for_stale(StatusCode::SERVICE_UNAVAILABLE));
    assert!(serve::stale_if_error(&req.headers, &s, at(31), &cfg));
    let status = CacheStatus::forward(&cfg.name, reason.fwd())
        .fwd_status(503)
        .detail("stale-if-error");
    assert_eq!(
        status.to_string(),
        "edgecache; fwd=stale; fwd-status=503; detail=stale-if-error"
    );
    let mr = fill(
        &req,
        &[(
            "cache-control",
            "max-age=10, stale-if-error=60, must-revalidate",
        )],
        0,
    );
    assert!(
        !serve::stale_if_error(&req.headers, &mr, at(31), &cfg),
        "5.2.2.2: 504 instead"
    );
}

#[test]
fn policy_unsafe_method_invalidates_rfc9111_4_4() {
    let cfg = PolicyConfig::default();
    let post = req_with("POST", "/r", &[("host", "H:80")]);
    assert_eq!(request::classify(&post, &cfg), RequestClass::Unsafe);
    let keys = invalidate::targets(
        &post,
        StatusCode::CREATED,
        &header_map(&[("location", "/r/1")]),
        "http",
    );
    let get_key = CacheKey::from_parts(&req_with("GET", "/r", &[("host", "h")]), "http").unwrap();
    assert_eq!(keys[0], get_key);
    assert_eq!(keys[1].as_str(), "http://h/r/1");
}

#[test]
fn policy_variants_and_client_conditional_rfc9111_4_1_and_4_3_2() {
    let cfg = PolicyConfig::default();
    let gz = get(&[("accept-encoding", "gzip")]);
    let br = get(&[("accept-encoding", "br")]);
    let fields = [
        ("cache-control", "max-age=60"),
        ("vary", "Accept-Encoding"),
        ("etag", "\"x\""),
    ];
    let variants = [fill(&gz, &fields, 0), fill(&br, &fields, 1)];
    let picked = vary::select(&br, &variants).expect("br variant");
    assert_eq!(picked.response_time(), at(1));
    assert!(vary::select(&get(&[]), &variants).is_none());
    assert!(matches!(
        serve::vary_miss(&get(&[])),
        ServeDecision::Forward { .. }
    ));
    let conditional = get(&[("accept-encoding", "br"), ("if-none-match", "W/\"x\"")]);
    assert!(matches!(
        serve::decide(&conditional, picked, at(5), &cfg),
        ServeDecision::Serve { .. }
    ));
    let r = respond::from_cache(&conditional, picked, 10, at(5));
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    assert_eq!(r.headers["vary"], "Accept-Encoding");
    assert_eq!(r.headers["age"], "4");
}

#[test]
fn policy_decode_then_serve_after_restart() {
    let cfg = PolicyConfig::default();
    let req = get(&[("host", "h")]);
    let s = fill(&req, &[("cache-control", "max-age=60"), ("age", "5")], 0);
    let restored = StoredResponse::decode(&s.encode()).unwrap();
    let ServeDecision::Serve { freshness, .. } = serve::decide(&req, &restored, at(10), &cfg)
    else {
        panic!()
    };
    assert_eq!(freshness.ttl(), 45);
}
