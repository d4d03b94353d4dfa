//! Objects larger than `storage.sliceSize` cached as slices (handler/sliced.rs): a 100 MiB
//! object (larger than a store segment) with 1 MiB slices, from a scripted origin that honours
//! Range. Only the touched slices are fetched, hits read only the slices, a changed ETag never
//! yields a mixed body, a SIGKILL mid-fill never a torn one, and a purge reaches every slice.
//! A stale manifest (an ETag or a strong Last-Modified) is revalidated once, by a range or a
//! whole GET, for concurrent requests too, or behind its slices within stale-while-revalidate;
//! a 304 keeps its slices.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use common::*;
use rfc_support::*;

const MIB: usize = 1 << 20;
/// Larger than a 64 MiB segment.
const LEN: usize = 100 * MIB + 12_345;
const SLICE: usize = MIB;

/// Version `v` of the representation: a pattern that shows offset and version mistakes.
fn body(v: usize) -> Vec<u8> {
    (0..LEN)
        .map(|i| ((i / 4099) as u8) ^ ((i % 251) as u8) ^ ((v * 77) as u8))
        .collect()
}

/// `bytes=a-b` or `bytes=a-` over LEN bytes, inclusive.
fn single_range(v: &str) -> Option<(usize, usize)> {
    byte_range(v, LEN)
}

/// An origin serving the body `content()` with ETag `"v<version()>"` (both 1 at first), for
/// 600 s (and stale-if-error for an hour), with a 304 to an If-None-Match of the current
/// ETag, a 503 to everything while the version is 0; a 206 for a single range, a 204 to a
/// POST; what [`Script`] changes of that.
struct Origin {
    s: Scripted,
    version: Arc<AtomicUsize>,
    content: Arc<AtomicUsize>,
    /// Seconds the origin's clock (its Date) is ahead of real time ([`later`]).
    ahead: Arc<AtomicU64>,
}

/// The bodies made so far, by content number (each is made once).
type Bodies = Vec<(usize, Arc<Vec<u8>>)>;

/// How a [`scripted_origin`] departs from the plain one.
#[derive(Clone, Copy)]
struct Script {
    /// If-Range honoured: a 200 when it names another version (else ignored).
    if_range: bool,
    /// The second half of a whole 200 held back until the test opens the gate.
    gate: bool,
    /// Every 304 held back until the test opens the gate.
    hold_304: bool,
    /// The validator: the ETag, or a Last-Modified with a Date (the origin's clock) and no
    /// ETag, the 304 answering an If-Modified-Since of it.
    validator: Validator,
    /// The Cache-Control of every answer.
    cc: &'static str,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            if_range: false,
            gate: false,
            hold_304: false,
            validator: Validator::ETag,
            cc: "max-age=600, stale-if-error=3600",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Validator {
    /// `"v<version>"`.
    ETag,
    /// [`modified`]: strong.
    LastModified,
    /// Half a minute before the Date: weak (RFC 9110 8.8.2.2), so no slicing.
    RecentLastModified,
}

/// The Last-Modified of version `v`: a day apart, long before any Date the origin sends
/// (a strong validator, RFC 9110 8.8.2.2).
fn modified(v: usize) -> String {
    let day = std::time::Duration::from_secs(86_400);
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + day * (20_000 + v as u32))
}

fn range_origin(if_range: bool, gate: bool) -> Origin {
    scripted_origin(Script {
        if_range,
        gate,
        ..Script::default()
    })
}

fn scripted_origin(script: Script) -> Origin {
    let version = Arc::new(AtomicUsize::new(1));
    let content = Arc::new(AtomicUsize::new(1));
    let ahead = Arc::new(AtomicU64::new(0));
    let (v2, c2, a2) = (version.clone(), content.clone(), ahead.clone());
    let bodies: Arc<std::sync::Mutex<Bodies>> = Arc::default();
    let s = Scripted::start(move |req, _| {
        if req.method == "POST" {
            return resp("204 No Content", &[], b"");
        }
        let (v, c) = (v2.load(Ordering::SeqCst), c2.load(Ordering::SeqCst));
        if v == 0 {
            return resp("503 Service Unavailable", &[], b"down");
        }
        let full = {
            let mut b = bodies.lock().unwrap();
            if !b.iter().any(|(k, _)| *k == c) {
                b.push((c, Arc::new(body(c))));
            }
            b.iter().find(|(k, _)| *k == c).unwrap().1.clone()
        };
        let now = std::time::SystemTime::now()
            + std::time::Duration::from_secs(a2.load(Ordering::SeqCst));
        let date = httpdate::fmt_http_date(now);
        let (tag, asked) = match script.validator {
            Validator::ETag => (format!("\"v{v}\""), req.header("if-none-match")),
            Validator::LastModified => (modified(v), req.header("if-modified-since")),
            Validator::RecentLastModified => (
                httpdate::fmt_http_date(now - std::time::Duration::from_secs(30)),
                req.header("if-modified-since"),
            ),
        };
        let mut fields = vec![("Cache-Control", script.cc)];
        if script.validator == Validator::ETag {
            fields.push(("ETag", tag.as_str()));
        } else {
            fields.extend([("Last-Modified", tag.as_str()), ("Date", date.as_str())]);
        }
        let stale_if_range = script.if_range && req.header("if-range").is_some_and(|t| t != tag);
        // The validator's precondition comes before Range (RFC 9110 13.2.2).
        if asked == Some(tag.as_str()) {
            let mut out = if script.hold_304 {
                GATE.to_vec()
            } else {
                Vec::new()
            };
            out.extend(resp("304 Not Modified", &fields, b""));
            return out;
        }
        match req.header("range").and_then(single_range) {
            Some((a, b)) if !stale_if_range => {
                let range = format!("bytes {a}-{b}/{LEN}");
                fields.push(("Content-Range", &range));
                resp("206 Partial Content", &fields, &full[a..=b])
            }
            _ if script.gate => {
                let len = LEN.to_string();
                fields.push(("Content-Length", &len));
                let mut out = resp("200 OK", &fields, &full[..LEN / 2]);
                out.extend_from_slice(GATE);
                out.extend_from_slice(&full[LEN / 2..]);
                out
            }
            _ => resp("200 OK", &fields, &full),
        }
    });
    Origin {
        s,
        version,
        content,
        ahead,
    }
}

/// Move the data plane's clock and the origin's `secs` ahead (they agree on the time).
fn later(o: &Origin, dp: &Dataplane, secs: u64) {
    o.ahead.fetch_add(secs, Ordering::SeqCst);
    advance(dp, secs);
}

fn start(o: &Origin, dir: &std::path::Path) -> Dataplane {
    let url = o.s.url();
    let mut opts = Opts::new(&url, dir);
    opts.size = "512MiB";
    opts.extra = vec!["--slice-size".into(), "1MiB".into()];
    // A movable clock (`advance`), for the stale manifests.
    Dataplane::start_with(opts, |cmd| {
        cmd.env("EDGECACHE_DEBUG_CLOCK", "1");
    })
}

/// A data plane in front of a plain [`range_origin`], and a first range of slices 20 to 22
/// of version 1 fetched through it (`(a, b)`: the range).
fn with_slices_20_to_22() -> (Origin, tempfile::TempDir, Dataplane, (usize, usize)) {
    slices_20_to_22_of(range_origin(false, false))
}

/// [`with_slices_20_to_22`] in front of `o`.
fn slices_20_to_22_of(o: Origin) -> (Origin, tempfile::TempDir, Dataplane, (usize, usize)) {
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let (a, b) = (20 * SLICE + 3, 22 * SLICE + 9);
    assert_part(&get_range(&dp, "/big", a, b), &body(1), a, b);
    assert_eq!(o.s.count(), 1);
    (o, dir, dp, (a, b))
}

/// A data plane in front of a plain [`range_origin`], and a whole GET of version 1 through
/// it: one fetch, byte exact.
fn with_a_whole_fill() -> (Origin, tempfile::TempDir, Dataplane) {
    let o = range_origin(false, false);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let r = dp.get("/big");
    assert_eq!(r.status, 200);
    assert!(!r.truncated);
    assert!(r.body == body(1), "byte-exact");
    assert_eq!(ranges_seen(&o), [None], "one whole fetch");
    (o, dir, dp)
}

fn get_range(dp: &Dataplane, path: &str, a: usize, b: usize) -> Resp {
    dp.request("GET", path, &[("Range", &format!("bytes={a}-{b}"))])
}

fn assert_part(r: &Resp, full: &[u8], a: usize, b: usize) {
    assert_eq!(r.status, 206, "{}", r.cache_status());
    assert_eq!(r.header("content-range"), format!("bytes {a}-{b}/{LEN}"));
    assert!(!r.truncated);
    assert!(r.body == full[a..=b], "bytes {a}-{b}");
}

/// `slices_total{source}`: slices served from the store, from a fetch of them in flight
/// (`waited`), or fetched from the origin for the response.
fn slices(dp: &Dataplane, source: &str) -> f64 {
    dp.metric(&format!(
        "edgecache_dataplane_slices_total{{source=\"{source}\"}}"
    ))
}

/// `slice_manifests_total{event}`: manifests written, freshened by a 304, dropped, and
/// requests that waited for another's revalidation of one (`coalesced`).
fn manifests(dp: &Dataplane, event: &str) -> f64 {
    dp.metric(&manifests_metric(event))
}

/// Requests answered after a 304 (`requests_total{cache="revalidated"}`).
fn revalidated(dp: &Dataplane) -> f64 {
    dp.metric("edgecache_dataplane_requests_total{cache=\"revalidated\"}")
}

fn manifests_metric(event: &str) -> String {
    format!("edgecache_dataplane_slice_manifests_total{{event=\"{event}\"}}")
}

/// Wait (bounded) until the fill's task has stored the manifest and all 101 slices.
fn all_slices_stored(dp: &Dataplane) {
    dp.wait_for_metrics("the manifest and its 101 slices stored", 60, |m| {
        metric_value(m, "edgecache_dataplane_store_objects") >= 102.0
    });
}

/// Wait (at most 30 s) until `ok`.
fn wait_until(what: &str, ok: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `r` was answered after a 304 from the origin.
fn assert_after_304(r: &Resp) {
    let cs = r.cache_status();
    assert!(cs.contains("fwd-status=304"), "{cs}");
}

/// The origin saw `count` requests, the last of them the one conditional request from the
/// manifest's validator (`field: value`, with `range`).
fn assert_conditional(
    o: &Origin,
    count: usize,
    (field, value): (&str, &str),
    range: Option<String>,
) {
    let seen = o.s.requests();
    assert_eq!(
        seen.len(),
        count,
        "one conditional request, no slice fetched again"
    );
    let last = &seen[count - 1];
    assert_eq!(last.header(field), Some(value));
    assert_eq!(last.header("range").map(str::to_string), range);
}

/// [`assert_conditional`], answered 304: the same manifest, freshened.
fn assert_revalidated(
    dp: &Dataplane,
    o: &Origin,
    count: usize,
    validator: (&str, &str),
    range: Option<String>,
) {
    assert_conditional(o, count, validator, range);
    assert_eq!(manifests(dp, "freshened"), 1.0);
    assert_eq!(manifests(dp, "written"), 1.0, "the same manifest");
}

/// `r` is a hit of a fresh stored response.
fn assert_fresh_hit(r: &Resp) {
    let cs = r.cache_status();
    assert!(r.is_hit() && !cs.contains("stale"), "{cs}");
}

/// Wait (bounded) until `slice_manifests_total{event}` is `n`.
fn wait_for_manifests(dp: &Dataplane, event: &str, n: f64) {
    let name = manifests_metric(event);
    dp.wait_for_metrics(&format!("{n} {event}"), 30, |m| metric_value(m, &name) == n);
}

fn ranges_seen(o: &Origin) -> Vec<Option<String>> {
    o.s.requests()
        .iter()
        .map(|r| r.header("range").map(str::to_string))
        .collect()
}

fn aligned(first_slice: usize, last_slice: usize) -> Option<String> {
    Some(format!(
        "bytes={}-{}",
        first_slice * SLICE,
        (last_slice + 1) * SLICE - 1
    ))
}

#[test]
fn a_range_in_the_middle_fetches_only_its_slices_and_later_ranges_hit() {
    let o = range_origin(false, false);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let full = body(1);
    let (a, b) = (50 * SLICE + 100, 52 * SLICE + 5);
    assert_part(&get_range(&dp, "/big", a, b), &full, a, b);
    assert_eq!(
        ranges_seen(&o),
        [aligned(50, 52)],
        "only the touched slices"
    );
    // The fill's own slices: the first waited for (the fill stores it), the rest waited for
    // or already stored; none fetched on its own.
    assert_eq!(manifests(&dp, "written"), 1.0);
    let (waited, stored) = (slices(&dp, "waited"), slices(&dp, "store"));
    assert!(waited >= 1.0 && waited + stored == 3.0, "{waited} {stored}");
    assert_eq!(slices(&dp, "origin"), 0.0);
    // The same range, and others within those slices: from the store.
    for (a, b) in [
        (a, b),
        (50 * SLICE, 53 * SLICE - 1),
        (51 * SLICE + 7, 51 * SLICE + 7),
    ] {
        let r = get_range(&dp, "/big", a, b);
        assert_part(&r, &full, a, b);
        assert!(r.is_hit(), "{a}-{b}: {}", r.cache_status());
    }
    assert_eq!(o.s.count(), 1, "no origin traffic for stored slices");
    // 3 + 3 + 1 slices read from the store.
    assert_eq!(slices(&dp, "store"), stored + 7.0);
    // Partly outside: only the missing slice is fetched, with its own Range.
    let (a, b) = (52 * SLICE + 10, 53 * SLICE + 10);
    assert_part(&get_range(&dp, "/big", a, b), &full, a, b);
    assert_eq!(ranges_seen(&o), [aligned(50, 52), aligned(53, 53)]);
    assert_eq!(slices(&dp, "store"), stored + 8.0);
    assert_eq!(slices(&dp, "origin"), 1.0, "slice 53");
    assert_eq!(manifests(&dp, "written"), 1.0, "under the same manifest");
    let seen = o.s.requests();
    assert_eq!(
        seen[1].header("if-range"),
        Some("\"v1\""),
        "bound to the version"
    );
}

#[test]
fn a_full_get_is_streamed_stored_as_slices_and_served_again_from_them() {
    let (o, _dir, dp) = with_a_whole_fill();
    let full = body(1);
    // The fill stores on its own task: wait until the last slice is in.
    let mut again = dp.get("/big");
    for _ in 0..50 {
        if o.s.count() == 1 && again.body == full {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        again = dp.get("/big");
    }
    assert_eq!(again.status, 200);
    assert!(again.is_hit(), "{}", again.cache_status());
    assert!(again.body == full, "byte-exact from the slices");
    let r = get_range(&dp, "/big", 99 * SLICE, LEN - 1);
    assert_part(&r, &full, 99 * SLICE, LEN - 1);
    assert_eq!(o.s.count(), 1, "no origin traffic once stored");
    assert!(
        dp.metric("edgecache_dataplane_store_objects") > 100.0,
        "a manifest and 101 slices"
    );
}

#[test]
fn an_etag_change_between_slices_never_yields_a_mixed_body() {
    // The origin ignores If-Range: the cache's own check of every slice's ETag must hold.
    let o = range_origin(false, false);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let (v1, v2) = (body(1), body(2));
    let (a, b) = (40 * SLICE, 41 * SLICE - 1);
    assert_part(&get_range(&dp, "/big", a, b), &v1, a, b);
    o.version.store(2, Ordering::SeqCst);
    o.content.store(2, Ordering::SeqCst);
    // Slices 0..40 are missing; slice 0 comes back with "v2": the response must end short.
    let r = dp.get("/big");
    assert_eq!(r.status, 200);
    let n = r.body.len();
    let one_version = r.body == v1[..n] || r.body == v2[..n];
    assert!(one_version, "bytes of two versions in one body");
    assert!(
        r.truncated || r.body == v1,
        "the changed object ends the response short"
    );
    // The manifest was dropped: the next request fetches the new version whole.
    assert_eq!(manifests(&dp, "dropped"), 1.0);
    let r = dp.get("/big");
    assert!(!r.truncated);
    assert!(r.body == v2, "the new version");
    // A range of the old slices is never served again.
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &v2, a, b);
    assert_eq!(manifests(&dp, "written"), 2.0, "one for each version");
}

#[test]
fn a_stale_manifest_is_revalidated_and_a_304_keeps_its_slices() {
    let (o, _dir, dp, (a, b)) = with_slices_20_to_22();
    let full = body(1);
    advance(&dp, 601);
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &full, a, b);
    // One conditional request from the manifest's validator, for the client's slices.
    assert_after_304(&r);
    assert_revalidated(&dp, &o, 2, ("if-none-match", "\"v1\""), aligned(20, 22));
    assert_eq!(slices(&dp, "origin"), 0.0);
    assert_eq!(revalidated(&dp), 1.0);
    // Fresh again for 600 s (its stored headers updated): hits, from the same slices.
    advance(&dp, 300);
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &full, a, b);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert_eq!(o.s.count(), 2);
}

#[test]
fn a_stale_manifest_revalidated_by_a_whole_get_serves_every_stored_slice_after_a_304() {
    let (o, _dir, dp) = with_a_whole_fill();
    let full = body(1);
    all_slices_stored(&dp);
    advance(&dp, 601);
    let from_store = slices(&dp, "store");
    let r = dp.get("/big");
    assert_eq!(r.status, 200, "{}", r.cache_status());
    assert!(!r.truncated);
    assert!(r.body == full, "byte-exact from the stored slices");
    // A whole conditional GET: no Range.
    assert_after_304(&r);
    assert_revalidated(&dp, &o, 2, ("if-none-match", "\"v1\""), None);
    assert_eq!(
        slices(&dp, "store"),
        from_store + 101.0,
        "every slice stored"
    );
    assert_eq!(slices(&dp, "origin"), 0.0);
    // Fresh again: a hit.
    let r = dp.get("/big");
    assert!(r.is_hit() && r.body == full, "{}", r.cache_status());
    assert_eq!(o.s.count(), 2);
}

#[test]
fn a_last_modified_object_is_sliced_and_revalidated_with_if_modified_since() {
    // No ETag: a Last-Modified long before the Date is a strong validator (RFC 9110
    // 8.8.2.2), so the object is sliced, its slices bound to it by If-Range.
    let o = scripted_origin(Script {
        validator: Validator::LastModified,
        if_range: true,
        ..Script::default()
    });
    let (o, _dir, dp, (a, b)) = slices_20_to_22_of(o);
    let (full, lm) = (body(1), modified(1));
    assert_eq!(manifests(&dp, "written"), 1.0, "sliced");
    let (c, d) = (30 * SLICE + 1, 30 * SLICE + 99);
    assert_part(&get_range(&dp, "/big", c, d), &full, c, d);
    let seen = o.s.requests();
    assert_eq!(seen[1].header("if-range"), Some(lm.as_str()));
    assert_eq!(seen[1].header("range").map(str::to_string), aligned(30, 30));
    assert_eq!(slices(&dp, "origin"), 1.0);
    // Stale: one If-Modified-Since for the client's slices; the 304 keeps them.
    later(&o, &dp, 601);
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &full, a, b);
    assert_after_304(&r);
    assert_revalidated(&dp, &o, 3, ("if-modified-since", &lm), aligned(20, 22));
    assert_eq!(o.s.requests()[2].header("if-none-match"), None);
    assert_eq!(slices(&dp, "origin"), 1.0, "no slice fetched again");
    // A whole GET: the stored slices and the missing ones (under the Last-Modified), byte
    // exact, one version.
    let r = dp.get("/big");
    assert_eq!(r.status, 200);
    assert!(r.is_hit(), "fresh after the 304: {}", r.cache_status());
    assert!(!r.truncated);
    assert!(r.body == full, "byte-exact");
    let fetched = &o.s.requests()[3..];
    assert_eq!(fetched.len(), 101 - 4, "only the missing slices");
    assert!(
        fetched
            .iter()
            .all(|q| q.header("if-range") == Some(lm.as_str())),
        "each bound to the Last-Modified"
    );
    assert_eq!(manifests(&dp, "dropped"), 0.0);
}

#[test]
fn an_object_with_a_weak_last_modified_is_not_sliced_and_served_byte_exact() {
    // Without a strong validator slices could not be bound to one version: no manifest.
    let o = scripted_origin(Script {
        validator: Validator::RecentLastModified,
        ..Script::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let full = body(1);
    // The range goes widened to whole slices; the 206 of slices of an object not sliced is
    // dropped and the client's own range asked for, relayed and kept as partial content.
    let (a, b) = (20 * SLICE + 3, 22 * SLICE + 9);
    assert_part(&get_range(&dp, "/big", a, b), &full, a, b);
    let own = Some(format!("bytes={a}-{b}"));
    assert_eq!(ranges_seen(&o), [aligned(20, 22), own.clone()]);
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &full, a, b);
    assert!(r.is_hit(), "from the partial content: {}", r.cache_status());
    assert_eq!(o.s.count(), 2);
    // A whole GET: relayed whole, not stored (larger than a store record).
    let r = dp.get("/big");
    assert_eq!(r.status, 200);
    assert!(!r.truncated);
    assert!(r.body == full, "byte-exact");
    assert!(
        r.cache_status().contains("too_large"),
        "{}",
        r.cache_status()
    );
    assert_eq!(ranges_seen(&o), [aligned(20, 22), own, None]);
    assert_eq!(manifests(&dp, "written"), 0.0, "not sliced");
    assert_eq!(slices(&dp, "origin") + slices(&dp, "store"), 0.0);
}

#[test]
fn concurrent_requests_for_a_stale_manifest_wait_for_one_revalidation() {
    let o = scripted_origin(Script {
        hold_304: true,
        ..Script::default()
    });
    let (o, _dir, dp, (a, b)) = slices_20_to_22_of(o);
    let full = body(1);
    advance(&dp, 601);
    let from_store = slices(&dp, "store");
    let listen = dp.listen;
    let clients: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                get(listen, "/big", &[("Range", &format!("bytes={a}-{b}"))]).unwrap()
            })
        })
        .collect();
    // One of them revalidates, its 304 held at the origin; the three others wait for it.
    wait_for_manifests(&dp, "coalesced", 3.0);
    assert_eq!(o.s.count(), 2, "one conditional request while they wait");
    o.s.open_gate();
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    for r in &answers {
        assert_part(r, &full, a, b);
    }
    let after_304 = answers
        .iter()
        .filter(|r| r.cache_status().contains("fwd-status=304"));
    assert_eq!(
        after_304.count(),
        1,
        "one revalidated, three served after it"
    );
    assert_revalidated(&dp, &o, 2, ("if-none-match", "\"v1\""), aligned(20, 22));
    assert_eq!(slices(&dp, "origin"), 0.0);
    assert_eq!(
        slices(&dp, "store"),
        from_store + 4.0 * 3.0,
        "3 slices each"
    );
    assert_eq!(revalidated(&dp), 1.0);
}

#[test]
fn a_stale_manifest_within_stale_while_revalidate_serves_its_slices_and_revalidates_once_behind() {
    // Fresh for a minute after each 304 (so the last request finds it fresh whatever the
    // test's pace), then stale-while-revalidate for ten.
    let o = scripted_origin(Script {
        hold_304: true,
        cc: "max-age=60, stale-while-revalidate=600",
        ..Script::default()
    });
    let (o, _dir, dp, (a, b)) = slices_20_to_22_of(o);
    let full = body(1);
    advance(&dp, 61);
    let stale = || {
        let r = get_range(&dp, "/big", a, b);
        assert_part(&r, &full, a, b);
        let cs = r.cache_status();
        assert!(r.is_hit() && cs.contains("stale-while-revalidate"), "{cs}");
    };
    stale();
    // The background conditional request reaches the origin, which holds its 304: these
    // answers do not wait for it, and start no other.
    wait_until("the background revalidation", || o.s.count() == 2);
    stale();
    stale();
    o.s.open_gate();
    // The background 304 freshens the manifest.
    wait_for_manifests(&dp, "freshened", 1.0);
    assert_revalidated(&dp, &o, 2, ("if-none-match", "\"v1\""), aligned(20, 22));
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &full, a, b);
    assert_fresh_hit(&r);
    assert_eq!(o.s.count(), 2);
    assert_eq!(slices(&dp, "origin"), 0.0);
    assert_eq!(
        revalidated(&dp),
        0.0,
        "the clients were answered from the store"
    );
}

#[test]
fn a_new_version_found_behind_stale_slices_makes_a_new_manifest_for_the_next_requests() {
    let o = scripted_origin(Script {
        cc: "max-age=60, stale-while-revalidate=600",
        ..Script::default()
    });
    let (o, _dir, dp, (a, b)) = slices_20_to_22_of(o);
    o.version.store(2, Ordering::SeqCst);
    o.content.store(2, Ordering::SeqCst);
    advance(&dp, 61);
    // The old version's slices, at once; the background request finds the new version.
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &body(1), a, b);
    assert!(r.cache_status().contains("stale-while-revalidate"));
    // The new version's manifest.
    wait_for_manifests(&dp, "written", 2.0);
    assert_conditional(&o, 2, ("if-none-match", "\"v1\""), aligned(20, 22));
    // Its slices, stored by the background request's own fill: hits of the new version.
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &body(2), a, b);
    assert_fresh_hit(&r);
    assert_eq!(o.s.count(), 2);
    assert_eq!(manifests(&dp, "freshened"), 0.0);
}

#[test]
fn a_stale_manifest_serves_its_slices_when_the_origin_fails_within_stale_if_error() {
    let (o, _dir, dp, (a, b)) = with_slices_20_to_22();
    o.version.store(0, Ordering::SeqCst);
    advance(&dp, 601);
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &body(1), a, b);
    assert!(
        r.cache_status().contains("stale-if-error"),
        "{}",
        r.cache_status()
    );
    assert_eq!(o.s.count(), 2, "one conditional request, answered 503");
    assert_eq!(manifests(&dp, "freshened"), 0.0);
    // Past stale-if-error: the origin's error.
    advance(&dp, 3600);
    let r = get_range(&dp, "/big", a, b);
    assert_eq!(r.status, 503, "{}", r.cache_status());
}

#[test]
fn a_stale_manifest_of_a_changed_object_is_replaced_and_its_slices_unused() {
    let (o, _dir, dp, (a, b)) = with_slices_20_to_22();
    let v2 = body(2);
    o.version.store(2, Ordering::SeqCst);
    o.content.store(2, Ordering::SeqCst);
    advance(&dp, 601);
    // The conditional request gets the new version's slices: a new manifest.
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &v2, a, b);
    let seen = o.s.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].header("if-none-match"), Some("\"v1\""));
    assert_eq!(manifests(&dp, "written"), 2.0, "a new manifest");
    assert_eq!(manifests(&dp, "freshened"), 0.0);
    // Within the new manifest: hits of the new version, never an old slice.
    for (a, b) in [(a, b), (21 * SLICE, 21 * SLICE + 99)] {
        let r = get_range(&dp, "/big", a, b);
        assert_part(&r, &v2, a, b);
        assert!(r.is_hit(), "{}", r.cache_status());
    }
    // Outside it: fetched under the new validator.
    let (a, b) = (10 * SLICE, 11 * SLICE);
    assert_part(&get_range(&dp, "/big", a, b), &v2, a, b);
    assert_eq!(o.s.requests()[2].header("if-range"), Some("\"v2\""));
    // A whole GET: every byte of the new version.
    let r = dp.get("/big");
    assert!(!r.truncated);
    assert!(r.body == v2, "the new version whole");
}

#[test]
fn a_sigkill_mid_fill_leaves_whole_slices_and_every_answer_byte_exact() {
    let o = range_origin(true, true);
    let dir = tempfile::tempdir().unwrap();
    let mut dp = start(&o, dir.path());
    let full = body(1);
    let listen = dp.listen;
    let client = std::thread::spawn(move || get(listen, "/big", &[]));
    // The origin has sent half the body and waits at its gate: let the slices land.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while dp.metric("edgecache_dataplane_store_objects") < 30.0 {
        assert!(std::time::Instant::now() < deadline, "slices are stored");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    dp.kill9();
    o.s.open_gate();
    let _ = client.join();
    let dp = dp.restart();
    let before = o.s.count();
    let r = dp.get("/big");
    assert_eq!(r.status, 200);
    assert!(!r.truncated);
    assert!(r.body == full, "byte-exact after the restart");
    let after: Vec<_> = ranges_seen(&o)[before..].to_vec();
    assert!(
        after.iter().all(Option::is_some) && after.len() < 101 - 25,
        "only missing slices were fetched, with Range: {after:?}"
    );
    for (a, b) in [
        (0, 10),
        (30 * SLICE - 5, 70 * SLICE + 5),
        (LEN - 100, LEN - 1),
    ] {
        assert_part(&get_range(&dp, "/big", a, b), &full, a, b);
    }
}

#[test]
fn a_purge_or_an_unsafe_method_makes_every_slice_unreachable() {
    let o = range_origin(false, false);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let (a, b) = (10 * SLICE + 1, 12 * SLICE);
    assert_part(&get_range(&dp, "/big", a, b), &body(1), a, b);
    // A new body under the same ETag: only a refetch after the purge can show it.
    o.content.store(3, Ordering::SeqCst);
    let r = request(dp.admin, "PURGE", "/big", &[("Host", "test.example")], b"").unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let n = o.s.count();
    let r = get_range(&dp, "/big", a, b);
    assert_part(&r, &body(3), a, b);
    assert!(
        !r.is_hit(),
        "refetched after the purge: {}",
        r.cache_status()
    );
    assert_eq!(o.s.count(), n + 1);
    assert_eq!(ranges_seen(&o)[n], aligned(10, 12), "as slices again");
    // A POST to the URL invalidates it too (RFC 9111 4.4).
    let r = dp.request("POST", "/big", &[]);
    assert!(r.status < 500, "{}", r.status);
    let n = o.s.count();
    let r = get_range(&dp, "/big", a, b);
    assert!(
        !r.is_hit(),
        "refetched after the POST: {}",
        r.cache_status()
    );
    assert_eq!(o.s.count(), n + 1);
}

#[test]
fn a_first_range_of_a_small_object_asks_for_whole_slices_and_stores_it_whole() {
    // Not a large object: the aligned 206 is the whole representation, stored as its 200.
    let o = Scripted::start(|req, _| {
        let full = b"0123456789".repeat(100);
        let cc = ("Cache-Control", "max-age=600");
        match req.header("range") {
            Some(_) => resp(
                "206 Partial Content",
                &[cc, ("ETag", "\"s\""), ("Content-Range", "bytes 0-999/1000")],
                &full,
            ),
            None => resp("200 OK", &[cc, ("ETag", "\"s\"")], &full),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let url = o.url();
    let mut opts = Opts::new(&url, dir.path());
    opts.extra = vec!["--slice-size".into(), "1MiB".into()];
    let dp = Dataplane::start(opts);
    let r = dp.request("GET", "/small", &[("Range", "bytes=100-199")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), "bytes 100-199/1000");
    assert_eq!(r.body, b"0123456789".repeat(10));
    assert_eq!(o.requests()[0].header("range"), Some("bytes=0-1048575"));
    let r = dp.get("/small");
    assert_eq!(r.status, 200);
    assert!(r.is_hit(), "stored whole: {}", r.cache_status());
    assert_eq!(r.body, b"0123456789".repeat(100));
    assert_eq!(o.count(), 1);
}
