//! Range requests (RFC 9110 14, RFC 9111 3.3/3.4) through the server: 206 for one range of a
//! stored object, 416, several ranges (answered with a full 200, the policy's choice), If-Range,
//! and a Range request on a miss to an origin that ignores Range (the whole 200 is stored; the
//! client gets 206). Partial content from an origin that honours Range: tests/rfc_partial.rs.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

#[test]
fn rfc9110_14_2_a_single_range_of_a_stored_object_is_a_206() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/100k/rg";
    dp.get(p);
    let full = expected_body(100 * 1024, "rg");
    for (range, start, end) in [
        ("bytes=10-19", 10usize, 19usize),
        ("bytes=0-0", 0, 0),
        ("bytes=102000-", 102000, 102399),
        ("bytes=-100", 102300, 102399),
        ("bytes=70000-999999999", 70000, 102399),
    ] {
        let r = dp.request("GET", p, &[("Range", range)]);
        assert_eq!(r.status, 206, "{range}");
        assert!(r.is_hit(), "{range}: {}", r.cache_status());
        assert_eq!(
            r.header("content-range"),
            format!("bytes {start}-{end}/102400"),
            "{range}"
        );
        assert_eq!(r.header("content-length"), (end - start + 1).to_string());
        assert_eq!(r.body, &full[start..=end], "{range}");
    }
    assert_eq!(o.requests_for(p), 1);
}

#[test]
fn rfc9110_15_5_17_an_unsatisfiable_range_is_a_416() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/1000/r416";
    dp.get(p);
    let r = dp.request("GET", p, &[("Range", "bytes=5000-")]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), "bytes */1000");
    assert!(r.body.is_empty());
    // A syntactically invalid or non-bytes range is ignored: the whole object.
    for range in ["bytes=x-y", "items=0-1", "bytes=5-2"] {
        let r = dp.request("GET", p, &[("Range", range)]);
        assert_eq!(r.status, 200, "{range}");
        check_body(1000, "r416", &r.body).unwrap();
    }
    assert_eq!(o.requests_for(p), 1);
}

#[test]
fn rfc9110_14_6_several_ranges_get_the_whole_object() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/1000/multi";
    dp.get(p);
    let r = dp.request("GET", p, &[("Range", "bytes=0-9,20-29")]);
    assert_eq!(
        r.status, 200,
        "multipart/byteranges is optional; a 200 is allowed"
    );
    assert_eq!(r.header("content-range"), "");
    check_body(1000, "multi", &r.body).unwrap();
}

#[test]
fn rfc9110_13_1_5_if_range_with_the_stored_etag_or_date() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/1000/ifr";
    let etag = dp.get(p).header("etag").to_string();
    let full = expected_body(1000, "ifr");
    let r = dp.request("GET", p, &[("Range", "bytes=0-9"), ("If-Range", &etag)]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &full[0..10]);
    let r = dp.request("GET", p, &[("Range", "bytes=0-9"), ("If-Range", "\"old\"")]);
    assert_eq!(
        r.status, 200,
        "If-Range does not match: the whole representation"
    );
    check_body(1000, "ifr", &r.body).unwrap();
    // An HTTP-date If-Range: the stored Last-Modified (strong: a second older than Date).
    let lm = "Thu, 01 Jan 2026 00:00:00 GMT";
    let r = dp.request("GET", p, &[("Range", "bytes=0-9"), ("If-Range", lm)]);
    assert_eq!(r.status, 206);
    let r = dp.request(
        "GET",
        p,
        &[
            ("Range", "bytes=0-9"),
            ("If-Range", "Fri, 02 Jan 2026 00:00:00 GMT"),
        ],
    );
    assert_eq!(r.status, 200, "only an exact date match");
    let weak = format!("W/{etag}");
    let r = dp.request("GET", p, &[("Range", "bytes=0-9"), ("If-Range", &weak)]);
    assert_eq!(r.status, 200, "If-Range needs a strong match");
    assert_eq!(o.requests_for(p), 1);
}

#[test]
fn rfc9111_3_4_a_range_request_on_a_miss_gets_a_206_and_the_whole_object_is_stored() {
    // The Range goes to the origin (tests/rfc_partial.rs); this origin ignores it and sends the
    // whole 200, which is stored whole while the range is cut from it for the client.
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let full = expected_body(300 * 1024, "rmiss");
    let p = "/obj/300k/rmiss";
    let r = dp.request("GET", p, &[("Range", "bytes=100000-100099")]);
    assert_eq!(r.status, 206, "{}", r.cache_status());
    assert_eq!(r.header("content-range"), "bytes 100000-100099/307200");
    assert_eq!(r.header("content-length"), "100");
    assert_eq!(r.body, &full[100000..100100]);
    assert!(!r.truncated);
    assert_eq!(
        stat(&o, "body_bytes"),
        300 * 1024,
        "the whole object was fetched"
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        dp.metric("edgecache_dataplane_response_body_bytes_total"),
        100.0,
        "only the range was sent to the client"
    );
    // It is stored whole.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut r = dp.get(p);
    while !r.is_hit() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        r = dp.get(p);
    }
    assert!(r.is_hit(), "{}", r.cache_status());
    check_body(300 * 1024, "rmiss", &r.body).unwrap();
    assert_eq!(o.requests_for(p), 1);
    // An unsatisfiable range on a miss: 416 from the fetched object.
    let r = dp.request("GET", "/obj/1000/rmiss416", &[("Range", "bytes=5000-")]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), "bytes */1000");
    check_body(1000, "rmiss416", &dp.get("/obj/1000/rmiss416").body).unwrap();
    assert_eq!(o.requests_for("/obj/1000/rmiss416"), 1);
}

#[test]
fn rfc9111_3_4_a_range_request_on_a_chunked_miss_gets_the_whole_200() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    // Without a Content-Length the length is unknown until the end: the range is ignored.
    let p = "/obj/10k/rch?chunked=1";
    let r = dp.request("GET", p, &[("Range", "bytes=0-9")]);
    assert_eq!(r.status, 200);
    check_body(10240, "rch", &r.body).unwrap();
    let r = dp.request("GET", p, &[("Range", "bytes=0-9")]);
    assert_eq!(
        r.status,
        206,
        "a hit answers the range: {}",
        r.cache_status()
    );
    assert_eq!(r.body, &expected_body(10240, "rch")[0..10]);
}
