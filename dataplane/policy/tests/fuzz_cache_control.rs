//! Fuzz target: Cache-Control (RFC 9111 5.2) and the targeted fields (RFC 9213, parsed as
//! RFC 8941 Dictionaries) from arbitrary bytes. Corpus: `tests/corpus/cache_control/`, one field
//! value per file.
//!
//! Invariants: no panic; parsing is deterministic; no delta exceeds 2^31 (RFC 9111 1.2.2); a
//! targeted value is insensitive to surrounding spaces (RFC 8941 4.2) and, with valid
//! directives, is what [`ResponseDirectives::of`] selects over `Cache-Control: no-store`;
//! otherwise Cache-Control applies.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod fuzz_support;

use edgecache_policy::cache_control::{
    CacheControl, Delta, ResponseDirectives, Source, request_directives,
};
use edgecache_policy::syntax::DELTA_SECONDS_MAX;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

const TARGET: &str = "cache_control";

fn deltas_in_range(cc: &CacheControl) {
    for d in [
        cc.max_age,
        cc.s_maxage,
        cc.min_fresh,
        cc.stale_while_revalidate,
        cc.stale_if_error,
    ]
    .into_iter()
    .flatten()
    {
        if let Delta::Seconds(s) = d {
            assert!(s <= DELTA_SECONDS_MAX, "{cc:?}");
        }
    }
}

fn check(input: &[u8]) {
    let s = String::from_utf8_lossy(input);
    let cc = CacheControl::parse(&s);
    assert_eq!(cc, CacheControl::parse(&s), "deterministic");
    deltas_in_range(&cc);
    let targeted = CacheControl::parse_targeted(&s);
    assert_eq!(targeted, CacheControl::parse_targeted(&s), "deterministic");
    assert_eq!(
        targeted,
        CacheControl::parse_targeted(&format!("  {s} ")),
        "surrounding SP is discarded (RFC 8941 4.2)"
    );
    if let Some(t) = &targeted {
        deltas_in_range(t);
    }
    let Ok(value) = HeaderValue::from_bytes(input) else {
        return;
    };
    for name in ["cache-control", "pragma"] {
        let mut h = HeaderMap::new();
        h.insert(HeaderName::from_static(name), value.clone());
        let _ = request_directives(&h);
    }
    let mut h = HeaderMap::new();
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert("cdn-cache-control", value);
    let d = ResponseDirectives::of(&h);
    match targeted {
        Some(t) => assert_eq!((d.source, d.cc), (Source::Cdn, t)),
        None => assert_eq!(
            (d.source, d.cc),
            (Source::CacheControl, CacheControl::parse("no-store"))
        ),
    }
}

#[test]
fn fuzz_cache_control_corpus() {
    fuzz_support::replay(TARGET, check);
}

fn directive_like() -> impl Strategy<Value = Vec<u8>> {
    let member = r#"[a-zA-Z*-]{1,16}(=([0-9.-]{1,18}|"[ -~]{0,12}"|[a-zA-Z:/*]{1,6}|\?[01x]|:[A-Za-z0-9+/=]{0,8}:|\([0-9a-z" ]{0,8}\)))?(;[a-z*]{1,3}(=[0-9a-z"?]{1,3})?)?"#;
    proptest::collection::vec(
        (
            member,
            "[ \t]{0,2}",
            prop_oneof![Just(","), Just(""), Just(";")],
        ),
        0..6,
    )
    .prop_map(|members| {
        let mut out = String::new();
        for (m, ws, sep) in members {
            out.push_str(&m);
            out.push_str(&ws);
            out.push_str(sep);
            out.push_str(&ws);
        }
        out.into_bytes()
    })
}

proptest! {
    #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES))]

    #[test]
    fn fuzz_cache_control_arbitrary(
        input in prop_oneof![proptest::collection::vec(any::<u8>(), 0..200), directive_like()],
    ) {
        check(&input);
    }
}
