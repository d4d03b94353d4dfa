//! Partial content from the origin (RFC 9111 3.3, 3.4; RFC 9110 14, 15.3.7): a single-range
//! GET that nothing complete answers goes to the origin with its Range; the 206 is stored as
//! partial content, answers later ranges within it, is combined with a following 206 of the
//! same representation, and becomes a complete stored 200 once the union is whole.
//!
//! Run with slicing off (see [`NO_SLICES`]).
//!
//! The origin here honours Range (the bench origin ignores it; tests/rfc_range.rs covers that
//! case: the 200 is stored whole and the range cut from it).

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use rfc_support::*;

const LEN: usize = 1000;

/// Slicing off (`storage.sliceSize: 0`): with it on, a first range request asks for whole
/// slices and this small representation comes back whole, stored as its 200
/// (tests/serve_slices.rs). The rules tested here still hold with slicing off, and for a large
/// object without a strong validator (never sliced).
const NO_SLICES: &[&str] = &["--slice-size", "0"];

/// The representation: LEN bytes of a pattern that shows any offset mistake.
fn body() -> Vec<u8> {
    (0..LEN).map(|i| (i % 251) as u8).collect()
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` over LEN bytes, inclusive; `None` otherwise.
fn single_range(v: &str) -> Option<(usize, usize)> {
    let spec = v.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    if a.is_empty() {
        let n: usize = b.parse().ok()?;
        return Some((LEN - n.min(LEN), LEN - 1));
    }
    let a: usize = a.parse().ok()?;
    let b = if b.is_empty() {
        LEN - 1
    } else {
        b.parse::<usize>().ok()?.min(LEN - 1)
    };
    Some((a, b))
}

/// An origin that answers a single range with a 206 and anything else with the whole 200,
/// with the entity tag `etag()` gives at the time.
fn range_origin(etag: impl Fn() -> String + Send + Sync + 'static) -> Scripted {
    Scripted::start(move |req, _| {
        let full = body();
        let tag = etag();
        let cc = ("Cache-Control", "max-age=600");
        match req.header("range").and_then(single_range) {
            Some((a, b)) => resp(
                "206 Partial Content",
                &[
                    cc,
                    ("ETag", &tag),
                    ("Content-Range", &format!("bytes {a}-{b}/{LEN}")),
                ],
                &full[a..=b],
            ),
            None => resp("200 OK", &[cc, ("ETag", &tag)], &full),
        }
    })
}

fn get_range(dp: &Dataplane, path: &str, range: &str) -> Resp {
    dp.request("GET", path, &[("Range", range)])
}

fn assert_part(r: &Resp, a: usize, b: usize) {
    assert_eq!(r.status, 206, "{}", r.cache_status());
    assert_eq!(r.header("content-range"), format!("bytes {a}-{b}/{LEN}"));
    assert_eq!(r.header("content-length"), (b - a + 1).to_string());
    assert!(!r.truncated);
    assert_eq!(r.body, &body()[a..=b], "bytes {a}-{b}");
}

#[test]
fn rfc9111_3_3_a_206_is_stored_and_answers_ranges_wholly_within_it() {
    let o = range_origin(|| "\"v1\"".into());
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), NO_SLICES);
    let p = "/p/within";
    let r = get_range(&dp, p, "bytes=100-299");
    assert_part(&r, 100, 299);
    assert!(r.cache_status().contains("stored"), "{}", r.cache_status());
    assert_eq!(
        o.requests()[0].header("range"),
        Some("bytes=100-299"),
        "the range went to the origin, not a whole fetch"
    );
    for (range, a, b) in [
        ("bytes=100-299", 100, 299),
        ("bytes=150-199", 150, 199),
        ("bytes=299-299", 299, 299),
    ] {
        let r = get_range(&dp, p, range);
        assert!(r.is_hit(), "{range}: {}", r.cache_status());
        assert_part(&r, a, b);
    }
    assert_eq!(o.count(), 1);
    // Not wholly within: forwarded with its own range.
    let r = get_range(&dp, p, "bytes=600-699");
    assert!(
        r.cache_status().contains("fwd=partial"),
        "{}",
        r.cache_status()
    );
    assert_part(&r, 600, 699);
    assert_eq!(o.requests()[1].header("range"), Some("bytes=600-699"));
    // An unsatisfiable range is answered from the known complete length.
    let r = get_range(&dp, p, "bytes=5000-");
    assert_eq!(r.status, 416, "{}", r.cache_status());
    assert_eq!(r.header("content-range"), format!("bytes */{LEN}"));
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9111_3_4_touching_206s_are_combined_and_become_a_complete_200() {
    let o = range_origin(|| "\"v1\"".into());
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), NO_SLICES);
    let p = "/p/combine";
    assert_part(&get_range(&dp, p, "bytes=200-499"), 200, 499);
    // Overlapping on the left: held 200-499 + new 100-249 = 100-499.
    assert_part(&get_range(&dp, p, "bytes=100-249"), 100, 249);
    let r = get_range(&dp, p, "bytes=100-499");
    assert!(r.is_hit(), "combined: {}", r.cache_status());
    assert_part(&r, 100, 499);
    // Touching on the right: 500-999, then the left end: 0-99 makes it whole.
    assert_part(&get_range(&dp, p, "bytes=500-"), 500, 999);
    let r = get_range(&dp, p, "bytes=150-650");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_part(&r, 150, 650);
    assert_part(&get_range(&dp, p, "bytes=0-99"), 0, 99);
    assert_eq!(o.count(), 4);
    // Complete now: a plain GET is a hit with the whole 200, no Content-Range.
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-range"), "");
    assert_eq!(r.header("content-length"), LEN.to_string());
    assert_eq!(r.header("etag"), "\"v1\"");
    assert_eq!(r.body, body());
    let r = get_range(&dp, p, "bytes=-10");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_part(&r, 990, 999);
    let r = dp.request("HEAD", p, &[]);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(
        o.count(),
        4,
        "no origin request after the union became whole"
    );
}

#[test]
fn rfc9111_3_4_a_206_with_another_validator_replaces_the_held_bytes() {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    // Every response carries a new strong validator: nothing may be combined.
    let o = range_origin(move || format!("\"v{}\"", n2.fetch_add(1, Ordering::SeqCst)));
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), NO_SLICES);
    let p = "/p/other-etag";
    assert_part(&get_range(&dp, p, "bytes=0-499"), 0, 499);
    assert_part(&get_range(&dp, p, "bytes=500-999"), 500, 999);
    // The newest 206 alone is held: 0-499 went with the old representation.
    let r = get_range(&dp, p, "bytes=600-699");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("etag"), "\"v1\"");
    let r = get_range(&dp, p, "bytes=0-99");
    assert!(!r.is_hit(), "{}", r.cache_status());
    assert_part(&r, 0, 99);
    assert_eq!(o.count(), 3);
    let r = dp.get(p);
    assert_eq!(r.status, 200);
    assert!(
        !r.is_hit(),
        "never a whole 200 from parts of two representations"
    );
    assert_eq!(o.count(), 4);
}

#[test]
fn rfc9111_3_3_a_request_without_range_on_partial_content_fetches_the_whole_representation() {
    let o = range_origin(|| "\"v1\"".into());
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), NO_SLICES);
    let p = "/p/whole";
    assert_part(&get_range(&dp, p, "bytes=-100"), 900, 999);
    let r = get_range(&dp, p, "bytes=-50");
    assert!(r.is_hit(), "suffix range within: {}", r.cache_status());
    assert_part(&r, 950, 999);
    // Incomplete content never answers a request for the whole representation (3.3).
    let r = dp.get(p);
    assert_eq!(r.status, 200);
    assert!(
        r.cache_status().contains("fwd=partial"),
        "{}",
        r.cache_status()
    );
    assert_eq!(r.body, body());
    assert_eq!(o.requests()[1].header("range"), None, "fetched whole");
    let r = dp.get(p);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.body, body());
    // A complete stored response answers ranges itself: nothing more goes to the origin.
    let r = get_range(&dp, p, "bytes=10-19");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_part(&r, 10, 19);
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9111_3_3_a_206_that_does_not_match_its_content_range_is_relayed_not_stored() {
    // Content-Range says 10 bytes, the body has 5: storing it could serve torn ranges later.
    let o = Scripted::start(|_, _| {
        resp(
            "206 Partial Content",
            &[
                ("Cache-Control", "max-age=600"),
                ("ETag", "\"v1\""),
                ("Content-Range", "bytes 0-9/100"),
            ],
            b"01234",
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), NO_SLICES);
    for _ in 0..2 {
        let r = get_range(&dp, "/p/torn", "bytes=0-9");
        assert_eq!(r.status, 206);
        assert_eq!(r.body, b"01234", "relayed as received");
        assert!(!r.is_hit(), "{}", r.cache_status());
        assert!(
            r.cache_status().contains("detail=partial-content"),
            "{}",
            r.cache_status()
        );
    }
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc9110_14_2_several_ranges_on_a_miss_fetch_the_whole_representation() {
    let o = range_origin(|| "\"v1\"".into());
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), NO_SLICES);
    let p = "/p/multi";
    let r = get_range(&dp, p, "bytes=0-9, 20-29");
    assert_eq!(r.status, 200, "several ranges get the whole 200");
    assert_eq!(r.body, body());
    assert_eq!(o.requests()[0].header("range"), None);
    let r = get_range(&dp, p, "bytes=20-29");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_part(&r, 20, 29);
    assert_eq!(o.count(), 1);
}
