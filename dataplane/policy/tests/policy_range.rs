//! Range requests from storage (RFC 9110 14, 13.1.5).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use edgecache_policy::range::{self, RangeOutcome, RangeSpec};
use http::Method;
use policy_support::*;

fn outcome(o: &RangeOutcome) -> String {
    match o {
        RangeOutcome::Full => "200".into(),
        RangeOutcome::Partial {
            start,
            end,
            content_range,
        } => {
            format!(
                "206 {start}-{end} {}",
                content_range.to_str().unwrap_or("<opaque>")
            )
        }
        RangeOutcome::Unsatisfiable { content_range } => {
            format!("416 {}", content_range.to_str().unwrap_or("<opaque>"))
        }
    }
}

#[test]
fn policy_ranges_rfc9110_14() {
    let lm = "Tue, 14 Nov 2023 19:26:40 GMT";
    let cases: &[(&str, &[(&str, &str)], u64, &str)] = &[
        ("no Range", &[], 100, "200"),
        (
            "14.1.2 first-last",
            &[("range", "bytes=0-9")],
            100,
            "206 0-9 bytes 0-9/100",
        ),
        (
            "14.1.2 open end",
            &[("range", "bytes=90-")],
            100,
            "206 90-99 bytes 90-99/100",
        ),
        (
            "14.1.2 last beyond length",
            &[("range", "bytes=90-200")],
            100,
            "206 90-99 bytes 90-99/100",
        ),
        (
            "14.1.2 suffix",
            &[("range", "bytes=-10")],
            100,
            "206 90-99 bytes 90-99/100",
        ),
        (
            "14.1.2 suffix longer than body",
            &[("range", "bytes=-500")],
            100,
            "206 0-99 bytes 0-99/100",
        ),
        (
            "14.1.1 unit is case-insensitive",
            &[("range", "BYTES=0-0")],
            100,
            "206 0-0 bytes 0-0/100",
        ),
        (
            "whitespace",
            &[("range", "bytes= 0-1 ")],
            100,
            "206 0-1 bytes 0-1/100",
        ),
        (
            "15.5.17 first beyond length",
            &[("range", "bytes=100-")],
            100,
            "416 bytes */100",
        ),
        (
            "15.5.17 suffix zero",
            &[("range", "bytes=-0")],
            100,
            "416 bytes */100",
        ),
        (
            "14.2 invalid last < first ignored",
            &[("range", "bytes=5-1")],
            100,
            "200",
        ),
        (
            "14.2 other unit ignored",
            &[("range", "items=0-1")],
            100,
            "200",
        ),
        (
            "14.2 garbage ignored",
            &[("range", "bytes=a-b")],
            100,
            "200",
        ),
        ("14.2 empty set ignored", &[("range", "bytes=")], 100, "200"),
        (
            "several ranges: full 200",
            &[("range", "bytes=0-1, 5-6")],
            100,
            "200",
        ),
        (
            "several, one satisfiable",
            &[("range", "bytes=0-1, 500-600")],
            100,
            "206 0-1 bytes 0-1/100",
        ),
        (
            "huge numbers",
            &[("range", "bytes=99999999999999999999999-")],
            100,
            "416 bytes */100",
        ),
        ("empty body", &[("range", "bytes=0-")], 0, "200"),
        (
            "13.1.5 If-Range strong etag matches",
            &[("range", "bytes=0-1"), ("if-range", "\"v1\"")],
            100,
            "206 0-1 bytes 0-1/100",
        ),
        (
            "13.1.5 If-Range other etag",
            &[("range", "bytes=0-1"), ("if-range", "\"v2\"")],
            100,
            "200",
        ),
        (
            "13.1.5 If-Range weak etag never matches",
            &[("range", "bytes=0-1"), ("if-range", "W/\"v1\"")],
            100,
            "200",
        ),
        (
            "13.1.5 If-Range date equal to strong Last-Modified",
            &[("range", "bytes=0-1"), ("if-range", lm)],
            100,
            "206 0-1 bytes 0-1/100",
        ),
        (
            "13.1.5 If-Range other date",
            &[
                ("range", "bytes=0-1"),
                ("if-range", "Tue, 14 Nov 2023 19:26:41 GMT"),
            ],
            100,
            "200",
        ),
        (
            "13.1.5 If-Range garbage",
            &[("range", "bytes=0-1"), ("if-range", "nope")],
            100,
            "200",
        ),
    ];
    let d = date(0);
    let s = stored(&[("etag", "\"v1\""), ("last-modified", lm), ("date", &d)]);
    for (name, fields, len, want) in cases {
        let r = get(fields);
        assert_eq!(
            outcome(&range::evaluate(&r.method, &r.headers, &s, *len)),
            *want,
            "{name}"
        );
    }
    // A weak Last-Modified (less than a second before Date) never satisfies If-Range (8.8.2.2).
    let weak = stored(&[("last-modified", lm), ("date", lm)]);
    let r = get(&[("range", "bytes=0-1"), ("if-range", lm)]);
    assert_eq!(
        outcome(&range::evaluate(&Method::GET, &r.headers, &weak, 100)),
        "200"
    );
    // 14.2: only GET.
    assert_eq!(
        outcome(&range::evaluate(&Method::HEAD, &r.headers, &s, 100)),
        "200"
    );
    let not_ok = stored_status(404, &[]);
    assert_eq!(
        outcome(&range::evaluate(
            &Method::GET,
            &get(&[("range", "bytes=0-1")]).headers,
            &not_ok,
            100
        )),
        "200"
    );
}

#[test]
fn policy_range_spec_parsing_rfc9110_14_1() {
    assert_eq!(
        range::parse("bytes=0-1,-5, 7-"),
        Some(vec![
            RangeSpec::Int {
                first: 0,
                last: Some(1)
            },
            RangeSpec::Suffix(5),
            RangeSpec::Int {
                first: 7,
                last: None
            }
        ])
    );
    assert_eq!(range::parse("bytes=1"), None);
    assert_eq!(range::parse("bytes"), None);
}

mod partial_content {
    use super::policy_support::*;
    use edgecache_policy::partial::{
        self, ContentRange, HeldRanges, PartialOutcome, combinable, combine, combined_fields,
        forwards_range, serve_from_partial, stored_range,
    };
    use http::{Method, StatusCode};

    #[test]
    fn policy_content_range_rfc9110_14_4() {
        let cr = |first, last, complete_length| {
            Some(ContentRange {
                first,
                last,
                complete_length,
            })
        };
        let cases: &[(&str, Option<ContentRange>)] = &[
            ("bytes 0-9/100", cr(0, 9, Some(100))),
            ("bytes 90-99/100", cr(90, 99, Some(100))),
            ("bytes 0-9/*", cr(0, 9, None)),
            ("bytes 9-0/100", None),
            ("bytes 0-100/100", None),
            ("bytes */100", None),
            ("items 0-9/100", None),
            ("bytes 0-9", None),
            ("bytes -1-9/100", None),
        ];
        for (value, want) in cases {
            assert_eq!(ContentRange::parse(value), *want, "{value}");
        }
    }

    #[test]
    fn policy_held_ranges_merge() {
        let mut h = HeldRanges::new();
        h.insert(10, 19);
        h.insert(30, 39);
        assert_eq!(h.ranges(), [(10, 19), (30, 39)]);
        h.insert(20, 29); // adjacent on both sides
        assert_eq!(h.ranges(), [(10, 39)]);
        h.insert(0, 5);
        h.insert(3, 12);
        assert_eq!(h.ranges(), [(0, 39)]);
        assert!(h.contains(0, 39) && !h.contains(0, 40));
        assert!(h.is_complete(40) && !h.is_complete(41));
        h.insert(5, 1); // ignored
        assert_eq!(h.ranges(), [(0, 39)]);
    }

    #[test]
    fn policy_partial_storable_rfc9111_3_3() {
        // One Content-Range with a known complete length and a Content-Length that matches it.
        let cases: &[(&[(&str, &str)], Option<(u64, u64, u64)>)] = &[
            (
                &[("content-range", "bytes 0-9/100"), ("content-length", "10")],
                Some((0, 9, 100)),
            ),
            (
                &[
                    ("content-range", "bytes 90-99/100"),
                    ("content-length", "10"),
                    ("etag", "W/\"v\""),
                ],
                Some((90, 99, 100)),
            ),
            (
                &[("content-range", "bytes 0-9/100"), ("content-length", "9")],
                None,
            ),
            (&[("content-range", "bytes 0-9/100")], None),
            (
                &[("content-range", "bytes 0-9/*"), ("content-length", "10")],
                None,
            ),
            (
                &[("content-range", "bytes */100"), ("content-length", "0")],
                None,
            ),
            (
                &[
                    ("content-range", "bytes 0-9/100"),
                    ("content-range", "bytes 20-29/100"),
                    ("content-length", "10"),
                ],
                None,
            ),
            (
                &[("content-type", "multipart/byteranges; boundary=x")],
                None,
            ),
        ];
        for (fields, want) in cases {
            let got = stored_range(&header_map(fields))
                .map(|cr| (cr.first, cr.last, cr.complete_length.unwrap()));
            assert_eq!(got, *want, "{fields:?}");
        }
    }

    #[test]
    fn policy_forwarding_a_range_to_the_origin() {
        let cases: &[(&str, &[(&str, &str)], bool)] = &[
            ("GET", &[("range", "bytes=0-9")], true),
            ("GET", &[("range", "bytes=-10")], true),
            ("GET", &[("range", "bytes=0-9, 20-29")], false),
            ("GET", &[("range", "items=0-9")], false),
            ("GET", &[], false),
            ("HEAD", &[("range", "bytes=0-9")], false),
        ];
        for (method, fields, want) in cases {
            let r = req_with(method, "/r", fields);
            assert_eq!(
                forwards_range(&r.method, &r.headers),
                *want,
                "{method} {fields:?}"
            );
        }
    }

    #[test]
    fn policy_combining_ranges_rfc9111_3_4() {
        let cr = |first, last| ContentRange {
            first,
            last,
            complete_length: Some(100),
        };
        // Overlapping, touching, inside, covering; disjoint ranges are not combined.
        let c = combine(cr(0, 49), cr(40, 79)).unwrap();
        assert_eq!(
            (c.union, c.before, c.after),
            (cr(0, 79), Some((0, 39)), None)
        );
        assert!(!c.complete());
        let c = combine(cr(50, 99), cr(0, 49)).unwrap();
        assert_eq!(
            (c.union, c.before, c.after),
            (cr(0, 99), None, Some((50, 99)))
        );
        assert!(c.complete());
        let c = combine(cr(0, 99), cr(10, 19)).unwrap();
        assert_eq!((c.before, c.after), (Some((0, 9)), Some((20, 99))));
        let c = combine(cr(10, 19), cr(0, 99)).unwrap();
        assert_eq!((c.union, c.before, c.after), (cr(0, 99), None, None));
        assert_eq!(combine(cr(0, 9), cr(11, 19)), None);
        let other = ContentRange {
            first: 10,
            last: 19,
            complete_length: Some(101),
        };
        assert_eq!(combine(cr(0, 9), other), None);
        // The stored fields: Content-Range and Content-Length of the union, or a complete 200.
        let new = header_map(&[
            ("etag", "\"v\""),
            ("content-range", "bytes 40-79/100"),
            ("content-length", "40"),
        ]);
        let (status, h) = combined_fields(&new, &combine(cr(0, 49), cr(40, 79)).unwrap()).unwrap();
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(h["content-range"], "bytes 0-79/100");
        assert_eq!(h["content-length"], "80");
        let (status, h) = combined_fields(&new, &combine(cr(0, 49), cr(40, 99)).unwrap()).unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(!h.contains_key("content-range"));
        assert_eq!(h["content-length"], "100");
        assert_eq!(h["etag"], "\"v\"");
    }

    #[test]
    fn policy_combining_rfc9111_3_4() {
        let stored = header_map(&[("etag", "\"v\"")]);
        let cases: &[(&[(&str, &str)], bool)] = &[
            (
                &[("etag", "\"v\""), ("content-range", "bytes 10-19/100")],
                true,
            ),
            (
                &[("etag", "\"w\""), ("content-range", "bytes 10-19/100")],
                false,
            ),
            (
                &[("etag", "W/\"v\""), ("content-range", "bytes 10-19/100")],
                false,
            ),
            (
                &[("etag", "\"v\""), ("content-range", "bytes 10-19/101")],
                false,
            ),
            (&[("content-range", "bytes 10-19/100")], false),
        ];
        for (fields, want) in cases {
            assert_eq!(
                combinable(&stored, 100, &header_map(fields)),
                *want,
                "{fields:?}"
            );
        }
        assert!(!combinable(
            &header_map(&[("etag", "W/\"v\"")]),
            100,
            &header_map(&[("etag", "W/\"v\""), ("content-range", "bytes 0-1/100")])
        ));
    }

    #[test]
    fn policy_serving_from_partial_rfc9111_3_3() {
        let stored = header_map(&[("etag", "\"v\"")]);
        let mut held = HeldRanges::new();
        held.insert(0, 49);
        let cases: &[(&str, &[(&str, &str)], &str)] = &[
            ("GET", &[("range", "bytes=0-9")], "206"),
            ("GET", &[("range", "bytes=40-49")], "206"),
            ("GET", &[("range", "bytes=40-50")], "forward"),
            ("GET", &[("range", "bytes=-10")], "forward"),
            ("GET", &[("range", "bytes=100-")], "416"),
            ("GET", &[], "forward"),
            ("HEAD", &[("range", "bytes=0-9")], "forward"),
            (
                "GET",
                &[("range", "bytes=0-9"), ("if-range", "\"other\"")],
                "forward",
            ),
        ];
        for (method, fields, want) in cases {
            let r = req_with(method, "/r", fields);
            let got = match serve_from_partial(
                &Method::from_bytes(method.as_bytes()).unwrap(),
                &r.headers,
                &stored,
                &held,
                100,
            ) {
                PartialOutcome::Serve(edgecache_policy::range::RangeOutcome::Partial {
                    ..
                }) => "206",
                PartialOutcome::Serve(edgecache_policy::range::RangeOutcome::Unsatisfiable {
                    ..
                }) => "416",
                PartialOutcome::Serve(_) => "200",
                PartialOutcome::Forward => "forward",
            };
            assert_eq!(got, *want, "{method} {fields:?}");
        }
        assert_eq!(partial::content_range(0, 9, 100).unwrap(), "bytes 0-9/100");
    }
}
