//! Fuzz target: the request head to cache key ([`CacheKey::from_parts`]) from arbitrary method,
//! request-target and Host bytes, wherever `http` accepts them. Corpus: `tests/corpus/cache_key/`,
//! each file `METHOD\nTARGET[\nHOST]` (none of the three may hold a newline).
//!
//! Invariants: no panic; the key is deterministic; a key is `scheme://authority/...`, its
//! origin is a prefix of it, and re-normalizing it (parsing it as an absolute URI and keying
//! that) gives the same key; an absolute-form target keys the same whatever the default scheme.
//! The key of an authority that is no valid RFC 3986 authority need not be a URI (see `check`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod fuzz_support;

use edgecache_policy::CacheKey;
use http::{HeaderValue, Method, Uri, request};
use proptest::prelude::*;

const TARGET: &str = "cache_key";

fn parts(method: &[u8], target: &[u8], host: Option<&[u8]>) -> Option<request::Parts> {
    let mut b = http::Request::builder()
        .method(Method::from_bytes(method).ok()?)
        .uri(Uri::try_from(target).ok()?);
    if let Some(host) = host {
        b = b.header(http::header::HOST, HeaderValue::from_bytes(host).ok()?);
    }
    Some(b.body(()).ok()?.into_parts().0)
}

fn check(method: &[u8], target: &[u8], host: Option<&[u8]>) {
    let Some(req) = parts(method, target, host) else {
        return;
    };
    let key = CacheKey::from_parts(&req, "http");
    assert_eq!(key, CacheKey::from_parts(&req, "http"), "deterministic");
    let Ok(key) = key else { return };
    let text = key.as_str();
    assert!(text.starts_with(key.origin()), "{text}");
    assert!(
        text.starts_with("http://") || req.uri.scheme().is_some(),
        "{text}"
    );
    if req.uri.scheme().is_some() {
        assert_eq!(CacheKey::from_parts(&req, "https").as_ref(), Ok(&key));
    }
    // Hosts are checked against the RFC 3986 grammar, so every key is a URI (the corpus holds
    // `%t` in a Host and `uq]w.` in an absolute-form authority, which once keyed to non-URIs),
    // and re-keying it is the identity.
    let uri = text
        .parse::<Uri>()
        .unwrap_or_else(|e| panic!("the key {text:?} is not a URI: {e}"));
    assert_eq!(
        CacheKey::from_uri(&uri).as_ref(),
        Ok(&key),
        "re-normalizing {text:?}"
    );
}

fn check_file(input: &[u8]) {
    let mut fields = input.split(|&b| b == b'\n');
    let method = fields.next().unwrap_or_default();
    let target = fields.next().unwrap_or_default();
    check(method, target, fields.next());
}

#[test]
fn fuzz_cache_key_corpus() {
    fuzz_support::replay(TARGET, check_file);
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

proptest! {
    #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES))]

    #[test]
    fn fuzz_cache_key_arbitrary(
        method in prop_oneof![bytes(12), "(GET|HEAD|get|POST|[A-Z~!]{1,8})".prop_map(String::into_bytes)],
        target in prop_oneof![
            bytes(80),
            r"((HTTP|https?|[a-z+.-]{1,6})://[A-Za-z0-9.%@:\[\]_-]{0,20})?(/|\*)?[A-Za-z0-9/%.~!$&'()*+,;=:@_-]{0,30}(\?[A-Za-z0-9/%?=&.-]{0,20})?(#[a-z]{0,4})?"
                .prop_map(String::into_bytes),
        ],
        host in proptest::option::of(prop_oneof![
            bytes(40),
            r"[A-Za-z0-9.%_-]{0,20}(:[0-9]{0,6})?|\[[0-9a-fA-F:.]{0,20}\](:[0-9]{0,6})?"
                .prop_map(String::into_bytes),
        ]),
    ) {
        check(&method, &target, host.as_deref());
    }
}
