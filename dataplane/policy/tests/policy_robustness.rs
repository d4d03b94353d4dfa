//! Every parser takes arbitrary field values without panicking (style habit 9).

mod policy_support;

use edgecache_policy::cache_control::{CacheControl, ResponseDirectives};
use edgecache_policy::range;
use edgecache_policy::respond;
use edgecache_policy::serve;
use edgecache_policy::syntax::{self, EntityTag};
use edgecache_policy::vary::Vary;
use edgecache_policy::{CacheKey, PolicyConfig, StoredResponse, invalidate};
use http::{HeaderMap, HeaderValue, StatusCode};
use policy_support::*;

impl Rng {
    /// A field value made of pieces that matter to the parsers.
    fn value(&mut self) -> String {
        const PIECES: &[&str] = &[
            "max-age",
            "s-maxage",
            "=",
            "\"",
            ",",
            ";",
            " ",
            "-",
            "1",
            "0",
            "99999999999999999999",
            "no-cache",
            "private",
            "W/",
            "*",
            "bytes",
            "a",
            "\\",
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "%",
            "%4",
            "%41",
            "/",
            "..",
            "?",
            "#",
            "[",
            "]",
            ":",
            "//",
            "\t",
            "é",
        ];
        let n = self.next() % 12;
        (0..n).map(|_| self.pick(PIECES)).collect()
    }
}

#[test]
fn policy_parsers_never_panic() {
    let mut rng = Rng(42);
    let cfg = PolicyConfig::default();
    for _ in 0..20_000 {
        let v = rng.value();
        let _ = CacheControl::parse(&v);
        let _ = range::parse(&v);
        let _ = edgecache_policy::partial::ContentRange::parse(&v);
        let _ = syntax::http_date(&v);
        let _ = EntityTag::parse(&v);
        let _ = syntax::split_list(&v).count();
        let _ = syntax::unquote(&v);
        let _ = invalidate::resolve("http://h/a/b", &v);
        let Ok(hv) = HeaderValue::from_str(&v) else {
            continue;
        };
        let mut h = HeaderMap::new();
        for name in [
            "cache-control",
            "cdn-cache-control",
            "vary",
            "age",
            "expires",
            "date",
            "last-modified",
            "etag",
        ] {
            h.insert(name, hv.clone());
        }
        let _ = ResponseDirectives::of(&h);
        let _ = Vary::of(&h);
        let s = StoredResponse::from_fields(&h, StatusCode::OK, &h, at(0), at(0));
        let mut req = get(&[]);
        for name in [
            "cache-control",
            "range",
            "if-range",
            "if-none-match",
            "if-modified-since",
            "pragma",
            "host",
        ] {
            req.headers.insert(name, hv.clone());
        }
        let _ = serve::decide(&req, &s, at(5), &cfg);
        let _ = respond::from_cache(&req, &s, rng.next() % 3, at(5));
        let _ = CacheKey::from_parts(&req, "http");
        let _ = StoredResponse::decode(&s.encode());
    }
}
