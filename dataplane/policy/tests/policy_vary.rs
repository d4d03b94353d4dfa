//! Vary (RFC 9111 4.1).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use edgecache_policy::StoredResponse;
use edgecache_policy::vary::{self, Vary};
use http::HeaderName;
use policy_support::*;

#[test]
fn policy_parsing_odd_vary_values_rfc9111_4_1() {
    let h = |v: &'static str| HeaderName::from_static(v);
    let cases: &[(&[(&str, &str)], Vary)] = &[
        (&[], Vary::None),
        (&[("vary", "")], Vary::None),
        (&[("vary", " , ,")], Vary::None),
        (&[("vary", "*")], Vary::Any),
        (&[("vary", "Accept, *")], Vary::Any),
        (&[("vary", "accept"), ("vary", "*")], Vary::Any),
        (
            &[("vary", "Accept-Encoding")],
            Vary::Fields(vec![h("accept-encoding")]),
        ),
        (
            &[("vary", "ACCEPT-encoding, accept-Encoding")],
            Vary::Fields(vec![h("accept-encoding")]),
        ),
        (
            &[("vary", " accept ,\tx-a ")],
            Vary::Fields(vec![h("accept"), h("x-a")]),
        ),
        (
            &[("vary", "accept"), ("vary", "x-a")],
            Vary::Fields(vec![h("accept"), h("x-a")]),
        ),
        (&[("vary", "bad name, x-a")], Vary::Fields(vec![h("x-a")])),
    ];
    for (fields, want) in cases {
        assert_eq!(Vary::of(&header_map(fields)), *want, "{fields:?}");
    }
}

fn variant(vary: &str, req: &[(&str, &str)]) -> StoredResponse {
    StoredResponse::new(
        &get(req),
        &resp(200, &[("vary", vary), ("cache-control", "max-age=60")]),
        at(0),
        at(0),
    )
}

#[test]
fn policy_matching_with_normalisation_rfc9111_4_1() {
    // (vary, stored request fields, new request fields, matches)
    let cases: &[(&str, &[(&str, &str)], &[(&str, &str)], bool)] = &[
        (
            "accept-encoding",
            &[("accept-encoding", "gzip")],
            &[("accept-encoding", "gzip")],
            true,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip")],
            &[("accept-encoding", "br")],
            false,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip, br")],
            &[("accept-encoding", "gzip,br")],
            true,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip, br")],
            &[("accept-encoding", "GZIP, BR")],
            true,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip, br")],
            &[("accept-encoding", "gzip"), ("accept-encoding", "br")],
            true,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip;q=1.0, br")],
            &[("accept-encoding", "gzip ; q=1.0,br")],
            true,
        ),
        // Accept-Encoding by its bucket: the order of a list does not change it, and two
        // lists of one bucket match (issue 33 §1).
        (
            "accept-encoding",
            &[("accept-encoding", "gzip, br")],
            &[("accept-encoding", "br, gzip")],
            true,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip, deflate, br")],
            &[("accept-encoding", "br")],
            true,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip, deflate")],
            &[("accept-encoding", "gzip, deflate, br")],
            false,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "deflate")],
            &[],
            true,
        ),
        (
            "accept-language",
            &[("accept-language", "en-US")],
            &[("accept-language", "en-us")],
            true,
        ),
        ("accept-encoding", &[], &[], true),
        (
            "accept-encoding",
            &[],
            &[("accept-encoding", "gzip")],
            false,
        ),
        (
            "accept-encoding",
            &[("accept-encoding", "gzip")],
            &[],
            false,
        ),
        ("accept-encoding", &[("accept-encoding", "")], &[], true),
        (
            "x-custom",
            &[("x-custom", "A")],
            &[("x-custom", "a")],
            false,
        ),
        (
            "x-custom",
            &[("x-custom", " A ")],
            &[("x-custom", "A")],
            true,
        ),
        (
            "Accept-Encoding, X-A",
            &[("accept-encoding", "gzip"), ("x-a", "1")],
            &[("x-a", "1"), ("accept-encoding", "gzip")],
            true,
        ),
        (
            "Accept-Encoding, X-A",
            &[("accept-encoding", "gzip"), ("x-a", "1")],
            &[("accept-encoding", "gzip"), ("x-a", "2")],
            false,
        ),
        ("", &[("x-a", "1")], &[("x-a", "2")], true),
    ];
    for (vary, stored_req, new_req, want) in cases {
        let s = variant(vary, stored_req);
        assert_eq!(
            s.matches(&get(new_req).headers),
            *want,
            "Vary: {vary} {stored_req:?} vs {new_req:?}"
        );
    }
}

#[test]
fn policy_vary_star_never_matches_rfc9111_4_1() {
    let s = StoredResponse::new(&get(&[]), &resp(200, &[("vary", "*")]), at(0), at(0));
    assert!(!s.matches(&get(&[]).headers));
}

#[test]
fn policy_several_variants_most_recent_wins_rfc9111_4_1() {
    let gzip = [("accept-encoding", "gzip")];
    let older = StoredResponse::new(
        &get(&gzip),
        &resp(
            200,
            &[
                ("vary", "accept-encoding"),
                ("date", &date(-10)),
                ("x-v", "old"),
            ],
        ),
        at(0),
        at(0),
    );
    let newer = StoredResponse::new(
        &get(&gzip),
        &resp(
            200,
            &[
                ("vary", "accept-encoding"),
                ("date", &date(0)),
                ("x-v", "new"),
            ],
        ),
        at(0),
        at(0),
    );
    let br = StoredResponse::new(
        &get(&[("accept-encoding", "br")]),
        &resp(
            200,
            &[
                ("vary", "accept-encoding"),
                ("date", &date(5)),
                ("x-v", "br"),
            ],
        ),
        at(0),
        at(0),
    );
    let all = [older.clone(), newer.clone(), br.clone()];
    let pick = |req: &[(&str, &str)]| {
        vary::select(&get(req), &all).map(|s| s.headers()["x-v"].to_str().unwrap().to_string())
    };
    assert_eq!(pick(&gzip).as_deref(), Some("new"));
    assert_eq!(pick(&[("accept-encoding", "br")]).as_deref(), Some("br"));
    assert_eq!(pick(&[("accept-encoding", "zstd")]), None);
    assert!(vary::same_variant(&older, &newer));
    assert!(!vary::same_variant(&older, &br));
    assert_ne!(older.vary().to_bytes(), br.vary().to_bytes());
}

/// The proxy opens only the stored variants whose index tag is that of the request's variant
/// key for the newest stored response's Vary fields: the request's key equals a stored
/// response's own exactly when that response matches the request. 32 variants by User-Agent
/// and one under another Vary list, normalized (case-insensitive Accept-Encoding).
#[test]
fn the_requests_variant_key_is_that_of_the_variants_that_match() {
    let stored: Vec<StoredResponse> = (0..32)
        .map(|i| {
            StoredResponse::new(
                &get(&[("user-agent", &format!("agent/{i}"))]),
                &resp(200, &[("vary", "User-Agent")]),
                at(0),
                at(0),
            )
        })
        .chain([StoredResponse::new(
            &get(&[("accept-encoding", "GZIP")]),
            &resp(200, &[("vary", "accept-encoding, user-agent")]),
            at(0),
            at(0),
        )])
        .collect();
    let req = |h: &[(&str, &str)]| get(h).headers;
    for (h, want) in [
        (&[("user-agent", "agent/17")][..], vec![17]),
        (&[("accept-encoding", "gzip")][..], vec![32]),
        (&[("user-agent", "other")][..], vec![]),
    ] {
        let r = req(h);
        let same_key: Vec<usize> = (0..stored.len())
            .filter(|&i| {
                let Vary::Fields(names) = Vary::of(stored[i].headers()) else {
                    return false;
                };
                vary::VaryKey::for_request(&names, &r).to_bytes() == stored[i].vary().to_bytes()
            })
            .collect();
        let matching: Vec<usize> = (0..stored.len())
            .filter(|&i| stored[i].matches(&r))
            .collect();
        assert_eq!(same_key, want, "{h:?}");
        assert_eq!(matching, want, "{h:?}");
    }
}
