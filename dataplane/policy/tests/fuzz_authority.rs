//! Fuzz target: the request's one authority ([`Authority::parse`]) from arbitrary Host bytes.
//! Corpus: `tests/corpus/authority/`, each file one Host field value.
//!
//! Invariants: no panic; deterministic; what is accepted holds no userinfo, no upper case and
//! no trailing dot, is an authority `http::Uri` accepts, and parses to itself (so routing,
//! the key and the origin's Host, which all take the normalised value, agree); a request whose
//! Host is the raw value keys the same as one whose Host is the normalised value.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod fuzz_support;

use edgecache_policy::{Authority, CacheKey};
use http::HeaderValue;
use proptest::prelude::*;

const TARGET: &str = "authority";

fn key_with_host(host: &str) -> Option<CacheKey> {
    let req = http::Request::get("/p")
        .header(http::header::HOST, HeaderValue::from_str(host).ok()?)
        .body(())
        .ok()?;
    CacheKey::from_parts(&req.into_parts().0, "http").ok()
}

fn check(input: &[u8]) {
    let Ok(raw) = std::str::from_utf8(input) else {
        return;
    };
    for scheme in ["http", "https"] {
        let got = Authority::parse(raw, scheme);
        assert_eq!(got, Authority::parse(raw, scheme), "deterministic");
        let Ok(a) = got else { continue };
        let text = a.as_str();
        assert!(!text.contains('@'), "{raw:?} -> {text:?}");
        assert!(!text.bytes().any(|b| b.is_ascii_uppercase()), "{text:?}");
        assert!(!a.host().ends_with('.'), "{text:?}");
        assert!(text.starts_with(a.host()), "{text:?}");
        text.parse::<http::uri::Authority>()
            .unwrap_or_else(|e| panic!("{raw:?} -> {text:?} is no authority: {e}"));
        assert_eq!(Authority::parse(text, scheme).as_ref(), Ok(&a), "{raw:?}");
        if scheme == "http" {
            assert_eq!(key_with_host(raw), key_with_host(text), "{raw:?}");
        }
    }
}

#[test]
fn fuzz_authority_corpus() {
    fuzz_support::replay(TARGET, check);
}

proptest! {
    #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES))]

    #[test]
    fn fuzz_authority_arbitrary(
        host in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..40),
            r"([A-Za-z0-9_~!$%]{0,8}(:[0-9]{0,3})?@)?[A-Za-z0-9.%_-]{0,20}\.{0,2}(:[0-9+-]{0,7}){0,2}"
                .prop_map(String::into_bytes),
            r"\[[0-9a-fA-F:.%v]{0,24}\]{0,2}(:[0-9]{0,6})?".prop_map(String::into_bytes),
        ],
    ) {
        check(&host);
    }
}
