//! A large hit whose stored body fails its checksum after the response has started (issue 14):
//! the rest comes from the origin with a Range request bound to the stored strong validator
//! (If-Range), so the client still gets the whole object; when the origin cannot give that
//! representation's bytes the response ends short, as before, and never mixes two
//! representations.
//!
//! The origin here honours Range and If-Range (strong comparison, RFC 9110 13.1.5), or ignores
//! Range as many origins do: a whole 200 of the same strong entity tag carries the missing
//! bytes too.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use rfc_support::*;

/// 3 MiB: many 64 KiB blocks, several read chunks.
const LEN: usize = 3 << 20;
/// Where the byte is flipped: a later block, well after the first read chunk.
const FLIP_AT: usize = 2_500_000;
const PATH: &str = "/big/repair";

/// The representation the origin has now.
struct Rep {
    etag: String,
    body: Bytes,
}

fn rep(etag: &str, id: &str) -> Rep {
    Rep {
        etag: etag.to_string(),
        body: expected_body(LEN as u64, id),
    }
}

/// `bytes=a-b` or `bytes=a-`, inclusive.
fn single_range(v: &str) -> Option<(usize, usize)> {
    byte_range(v, LEN)
}

/// An origin serving `current`: a single range gets a 206 unless If-Range names another
/// representation (then the whole 200, RFC 9110 13.1.5), anything else the whole 200.
fn range_origin(current: Arc<Mutex<Rep>>) -> Scripted {
    Scripted::start(move |req, _| answer(&current.lock().unwrap(), req))
}

/// What [`range_origin`] answers `req` with when it serves `rep`.
fn answer(rep: &Rep, req: &RawReq) -> Vec<u8> {
    let cc = ("Cache-Control", "public, max-age=3600");
    let bound = req
        .header("if-range")
        .is_none_or(|v| v == rep.etag && !v.starts_with("W/"));
    match req.header("range").and_then(single_range).filter(|_| bound) {
        Some((a, b)) => resp(
            "206 Partial Content",
            &[
                cc,
                ("ETag", &rep.etag),
                ("Content-Range", &format!("bytes {a}-{b}/{LEN}")),
            ],
            &rep.body[a..=b],
        ),
        None => resp("200 OK", &[cc, ("ETag", &rep.etag)], &rep.body),
    }
}

/// A stored object whose body was corrupted on disk, with the origin that served it.
struct Case {
    /// What the origin serves now.
    current: Arc<Mutex<Rep>>,
    o: Scripted,
    dp: Dataplane,
    _dir: tempfile::TempDir,
    /// The bytes that were stored.
    good: Bytes,
}

/// An origin serving `current` that ignores Range: always the whole 200.
fn whole_origin(current: Arc<Mutex<Rep>>) -> Scripted {
    Scripted::start(move |_, _| {
        let rep = current.lock().unwrap();
        let cc = ("Cache-Control", "public, max-age=3600");
        resp("200 OK", &[cc, ("ETag", &rep.etag)], &rep.body)
    })
}

/// Store the object the origin serves as (`etag`, `id`), stop, flip a byte of a later block on
/// disk and start again (so the body is read and checked from disk).
fn stored_then_corrupted(etag: &str, id: &str) -> Case {
    stored_then_corrupted_at(range_origin, etag, id)
}

/// [`stored_then_corrupted`] with the origin `serve` makes.
fn stored_then_corrupted_at(serve: fn(Arc<Mutex<Rep>>) -> Scripted, etag: &str, id: &str) -> Case {
    let current = Arc::new(Mutex::new(rep(etag, id)));
    let o = serve(current.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let r = dp.get(PATH);
    assert_eq!(r.status, 200);
    assert!(r.cache_status().contains("stored"), "{}", r.cache_status());
    let good = Bytes::from(r.body);
    assert_eq!(good.len(), LEN);
    dp.stop();
    flip_stored_byte(dir.path(), &good[FLIP_AT..FLIP_AT + 64], 10);
    Case {
        current,
        o,
        dp: dp.restart(),
        _dir: dir,
        good,
    }
}

/// The corrupt hit, asserted cut short: the stored representation's bytes only, and counted as
/// a failed repair.
fn cut_short(c: &Case) -> Resp {
    let r = c.dp.get(PATH);
    assert_eq!(r.status, 200);
    assert!(r.truncated, "a corrupt hit completed");
    assert!(
        r.body[..] == c.good[..r.body.len()],
        "only bytes of the stored representation were sent"
    );
    assert!(r.body.len() <= FLIP_AT);
    assert_eq!(repairs(&c.dp, "failed"), 1.0, "{}", c.dp.metrics());
    assert_eq!(repairs(&c.dp, "ok"), 0.0);
    r
}

fn repairs(dp: &Dataplane, result: &str) -> f64 {
    dp.metric(&format!(
        "edgecache_dataplane_store_hit_repairs_total{{result=\"{result}\"}}"
    ))
}

#[test]
fn a_corrupt_block_of_a_hit_is_finished_from_the_origin_with_if_range() {
    let Case { o, dp, good, .. } = &stored_then_corrupted("\"v1\"", "repair");
    assert_eq!(o.count(), 1);

    let r = dp.get(PATH);
    assert_eq!(r.status, 200);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("content-length"), LEN.to_string());
    assert!(!r.truncated, "the hit ended after {} bytes", r.body.len());
    assert!(
        r.body[..] == good[..],
        "the client got the whole object, byte exact"
    );

    // One Range request bound to the stored validator, for the bytes from the failed chunk on.
    let reqs = o.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let repair = &reqs[1];
    assert_eq!(repair.method, "GET");
    assert_eq!(repair.target, PATH);
    assert_eq!(repair.header("if-range"), Some("\"v1\""));
    assert_eq!(
        repair.header("host"),
        reqs[0].header("host"),
        "the authority a fill sends"
    );
    assert_eq!(repair.header("if-none-match"), None);
    let (from, to) = repair
        .header("range")
        .and_then(single_range)
        .unwrap_or_else(|| panic!("a Range request: {repair:?}"));
    assert_eq!(to, LEN - 1);
    assert!(
        from > 0 && from <= FLIP_AT && from % (64 << 10) == 0,
        "the range starts at the failed block's chunk: {from}"
    );
    assert_eq!(repairs(dp, "ok"), 1.0, "{}", dp.metrics());
    assert_eq!(repairs(dp, "failed"), 0.0);
    assert!(dp.metric("edgecache_dataplane_store_corrupt_records_total") >= 1.0);

    // The corrupt copy stays dropped (the repaired bytes are not stored): the next request is a
    // miss, fetched whole.
    let again = dp.get(PATH);
    assert!(!again.is_hit(), "{}", again.cache_status());
    assert!(again.body[..] == good[..]);
    let last = o.requests().pop().unwrap();
    assert_eq!(last.header("range"), None, "{last:?}");
    assert_eq!(o.count(), 3);
}

#[test]
fn a_corrupt_hit_whose_representation_changed_at_the_origin_is_cut_short() {
    let c = stored_then_corrupted("\"v1\"", "repair");
    // The origin has another representation now: If-Range fails and it answers the whole 200.
    *c.current.lock().unwrap() = rep("\"v2\"", "repair-v2");
    let r = cut_short(&c);
    assert_eq!(r.header("etag"), "\"v1\"");
    let reqs = c.o.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[1].header("if-range"), Some("\"v1\""));
    assert_eq!(
        reqs[1].header("range").and_then(single_range).map(|r| r.1),
        Some(LEN - 1)
    );
}

#[test]
fn a_corrupt_hit_without_a_strong_validator_is_cut_short_without_asking_the_origin() {
    // A weak entity tag may not bind an If-Range (RFC 9110 13.1.5), nor may a Last-Modified
    // then: the bytes cannot be continued safely.
    let c = stored_then_corrupted("W/\"v1\"", "repair-weak");
    cut_short(&c);
    assert_eq!(c.o.count(), 1, "no repair request: {:?}", c.o.requests());
}

#[test]
fn a_corrupt_block_of_a_range_hit_is_finished_with_the_rest_of_that_range() {
    let Case { o, dp, good, .. } = &stored_then_corrupted("\"v1\"", "repair-range");
    let (a, b) = (1_000_000, 2_999_999);
    let r = dp.request("GET", PATH, &[("Range", &format!("bytes={a}-{b}"))]);
    assert_eq!(r.status, 206, "{}", r.cache_status());
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.header("content-range"), format!("bytes {a}-{b}/{LEN}"));
    assert!(!r.truncated, "the hit ended after {} bytes", r.body.len());
    assert!(r.body[..] == good[a..=b], "the range, byte exact");
    let reqs = o.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let (from, to) = reqs[1].header("range").and_then(single_range).unwrap();
    assert_eq!(to, b, "the rest of the client's range, not of the object");
    assert!(a < from && from <= FLIP_AT, "{from}");
    assert_eq!(repairs(dp, "ok"), 1.0, "{}", dp.metrics());
}

/// The same repair for a miss: the origin's connection closes halfway through the body it
/// declared (as an owner node's would when it dies mid-body). The client's response is finished
/// with a Range request bound to the response's strong validator; nothing is stored from it.
#[test]
fn a_miss_cut_on_its_way_is_finished_from_the_origin_with_if_range() {
    let current = rep("\"v1\"", "cut");
    let good = current.body.clone();
    let cut_at = LEN / 2;
    let o = Scripted::start(move |req, n| {
        if n > 0 {
            return answer(&current, req);
        }
        let len = LEN.to_string();
        resp(
            "200 OK",
            &[
                ("Cache-Control", "public, max-age=3600"),
                ("ETag", "\"v1\""),
                ("Content-Length", &len),
                ("Connection", "close"),
            ],
            &good[..cut_at],
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&o.url(), dir.path()));
    let r = dp.get(PATH);
    assert_eq!(r.status, 200);
    assert!(!r.truncated, "the miss ended after {} bytes", r.body.len());
    let expected = expected_body(LEN as u64, "cut");
    assert!(r.body[..] == expected[..], "the whole object, byte exact");
    let reqs = o.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[1].header("if-range"), Some("\"v1\""));
    let (from, to) = reqs[1].header("range").and_then(single_range).unwrap();
    assert_eq!((to, from <= cut_at), (LEN - 1, true), "from {from}");
    let fill_repairs = |result: &str| {
        dp.metric(&format!(
            "edgecache_dataplane_fill_repairs_total{{result=\"{result}\"}}"
        ))
    };
    assert_eq!(fill_repairs("ok"), 1.0, "{}", dp.metrics());
    // The cut fetch stored nothing: the next request is a miss (the origin's whole 200).
    let again = dp.get(PATH);
    assert!(!again.is_hit(), "{}", again.cache_status());
    assert!(again.body[..] == expected[..]);
}

/// Many origins ignore Range and answer the whole 200 with the same strong entity tag: the
/// missing bytes are in it, from the failed offset on.
#[test]
fn a_corrupt_hit_is_finished_from_an_origin_that_ignores_range() {
    let c = stored_then_corrupted_at(whole_origin, "\"v1\"", "whole");
    let r = c.dp.get(PATH);
    assert_eq!(r.status, 200);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert!(!r.truncated, "the hit ended after {} bytes", r.body.len());
    assert!(r.body[..] == c.good[..], "the whole object, byte exact");
    assert_eq!(repairs(&c.dp, "ok"), 1.0, "{}", c.dp.metrics());
    let reqs = c.o.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[1].header("if-range"), Some("\"v1\""));
}

#[test]
fn a_corrupt_range_hit_is_finished_from_an_origin_that_ignores_range() {
    let c = stored_then_corrupted_at(whole_origin, "\"v1\"", "whole-range");
    let (a, b) = (1_000_000, 2_700_000);
    let r =
        c.dp.request("GET", PATH, &[("Range", &format!("bytes={a}-{b}"))]);
    assert_eq!(r.status, 206, "{}", r.cache_status());
    assert!(!r.truncated, "the hit ended after {} bytes", r.body.len());
    assert!(r.body[..] == c.good[a..=b], "the range, byte exact");
    assert_eq!(repairs(&c.dp, "ok"), 1.0, "{}", c.dp.metrics());
}

#[test]
fn a_whole_200_of_another_representation_still_cuts_the_hit_short() {
    let c = stored_then_corrupted_at(whole_origin, "\"v1\"", "whole-changed");
    *c.current.lock().unwrap() = rep("\"v2\"", "whole-v2");
    cut_short(&c);
}
