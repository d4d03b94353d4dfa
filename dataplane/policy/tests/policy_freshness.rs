//! Freshness (RFC 9111 4.2): lifetime (4.2.1, 4.2.2), Age (5.1), current_age (4.2.3).

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use std::time::Duration;

use edgecache_policy::PolicyConfig;
use edgecache_policy::freshness::{Freshness, LifetimeSource, age_value, current_age};
use policy_support::*;

struct Case {
    name: &'static str,
    status: u16,
    fields: Vec<(&'static str, String)>,
    lifetime: u64,
    source: LifetimeSource,
}

fn case(
    name: &'static str,
    status: u16,
    fields: &[(&'static str, &str)],
    lifetime: u64,
    source: LifetimeSource,
) -> Case {
    Case {
        name,
        status,
        fields: fields.iter().map(|(n, v)| (*n, v.to_string())).collect(),
        lifetime,
        source,
    }
}

#[test]
fn policy_freshness_lifetime_rfc9111_4_2_1_and_4_2_2() {
    use LifetimeSource::*;
    let d0 = date(0);
    let cases = [
        case(
            "4.2.1 s-maxage over max-age",
            200,
            &[("cache-control", "max-age=10, s-maxage=20")],
            20,
            SMaxAge,
        ),
        case(
            "4.2.1 max-age over Expires",
            200,
            &[
                ("cache-control", "max-age=10"),
                ("expires", &date(100)),
                ("date", &d0),
            ],
            10,
            MaxAge,
        ),
        case(
            "4.2.1 Expires minus Date",
            200,
            &[("expires", &date(100)), ("date", &d0)],
            100,
            Expires,
        ),
        case(
            "4.2.1 Expires minus Date, Date in the past",
            200,
            &[("expires", &date(100)), ("date", &date(-50))],
            150,
            Expires,
        ),
        case(
            "4.2.1 Expires before Date",
            200,
            &[("expires", &date(-10)), ("date", &d0)],
            0,
            Expires,
        ),
        case(
            "5.3 Expires: 0 is already expired",
            200,
            &[("expires", "0"), ("date", &d0)],
            0,
            Expires,
        ),
        case(
            "5.3 invalid Expires",
            200,
            &[("expires", "soon"), ("date", &d0)],
            0,
            Expires,
        ),
        case(
            "5.3 Expires rfc850",
            200,
            &[
                ("expires", "Tuesday, 14-Nov-23 22:15:00 GMT"),
                ("date", &d0),
            ],
            100,
            Expires,
        ),
        case(
            "5.3 Expires asctime",
            200,
            &[("expires", "Tue Nov 14 22:15:00 2023"), ("date", &d0)],
            100,
            Expires,
        ),
        case(
            "4.2.1 Expires without Date uses response_time",
            200,
            &[("expires", &date(30))],
            30,
            Expires,
        ),
        case(
            "4.2.1 invalid max-age is stale",
            200,
            &[
                ("cache-control", "max-age=-1"),
                ("expires", &date(100)),
                ("date", &d0),
            ],
            0,
            MaxAge,
        ),
        case(
            "4.2.1 max-age=1.5 is stale",
            200,
            &[("cache-control", "max-age=1.5")],
            0,
            MaxAge,
        ),
        case(
            "4.2.1 invalid s-maxage is stale",
            200,
            &[("cache-control", "s-maxage=x, max-age=60")],
            0,
            SMaxAge,
        ),
        case(
            "1.2.2 huge max-age clamps",
            200,
            &[("cache-control", "max-age=99999999999999")],
            1 << 31,
            MaxAge,
        ),
        case(
            "4.2.2 heuristic 10% of Date - Last-Modified",
            200,
            &[("date", &d0), ("last-modified", &date(-1000))],
            100,
            Heuristic,
        ),
        case(
            "4.2.2 heuristic capped at a day",
            200,
            &[("date", &d0), ("last-modified", &date(-100 * 86_400))],
            86_400,
            Heuristic,
        ),
        case(
            "4.2.2 heuristic, Last-Modified in the future",
            200,
            &[("date", &d0), ("last-modified", &date(50))],
            0,
            Heuristic,
        ),
        case(
            "4.2.2 heuristic on 404",
            404,
            &[("date", &d0), ("last-modified", &date(-1000))],
            100,
            Heuristic,
        ),
        case(
            "4.2.2 no heuristic for 302",
            302,
            &[("date", &d0), ("last-modified", &date(-1000))],
            0,
            None,
        ),
        case(
            "4.2.2 public allows heuristic for 302",
            302,
            &[
                ("cache-control", "public"),
                ("date", &d0),
                ("last-modified", &date(-1000)),
            ],
            100,
            Heuristic,
        ),
        case("4.2.2 nothing at all", 200, &[("date", &d0)], 0, None),
        case(
            "4.2.2 invalid Last-Modified",
            200,
            &[("date", &d0), ("last-modified", "yesterday")],
            0,
            None,
        ),
        case(
            "RFC 9213 targeted field wins",
            200,
            &[
                ("cache-control", "max-age=10"),
                ("cdn-cache-control", "max-age=300"),
            ],
            300,
            MaxAge,
        ),
        case(
            "RFC 9213 targeted field ignores Expires",
            200,
            &[
                ("cdn-cache-control", "public"),
                ("expires", &date(100)),
                ("date", &d0),
                ("last-modified", &date(-1000)),
            ],
            100,
            Heuristic,
        ),
        case(
            "RFC 9213 EdgeCache over CDN",
            200,
            &[
                ("cdn-cache-control", "max-age=300"),
                ("edgecache-cache-control", "s-maxage=5"),
            ],
            5,
            SMaxAge,
        ),
    ];
    let cfg = PolicyConfig::default();
    for c in &cases {
        let fields: Vec<(&str, &str)> = c.fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let s = stored_status(c.status, &fields);
        let f = s.freshness(at(0), &cfg);
        assert_eq!(
            (f.lifetime.secs, f.lifetime.source),
            (c.lifetime, c.source),
            "{}",
            c.name
        );
    }
}

#[test]
fn policy_freshness_dates_in_every_format_and_case_rfc9110_5_6_7() {
    // T0 is Tue, 14 Nov 2023 22:13:20 GMT; each Expires is T0 + 100 s.
    let imf_date = date(0);
    let cases: &[(&str, &str)] = &[
        ("Tue, 14 Nov 2023 22:15:00 GMT", &imf_date),
        ("tue, 14 nov 2023 22:15:00 gmt", &imf_date),
        ("TUE, 14 NOV 2023 22:15:00 GMT", &imf_date),
        ("Tuesday, 14-Nov-23 22:15:00 GMT", &imf_date),
        ("tuesday, 14-nov-23 22:15:00 gmt", &imf_date),
        ("Tue Nov 14 22:15:00 2023", &imf_date),
        ("tue nov 14 22:15:00 2023", &imf_date),
        // The Date field in the obsolete formats too.
        (
            "Tue, 14 Nov 2023 22:15:00 GMT",
            "Tuesday, 14-Nov-23 22:13:20 GMT",
        ),
        ("Tue, 14 Nov 2023 22:15:00 GMT", "tue nov 14 22:13:20 2023"),
    ];
    let cfg = PolicyConfig::default();
    for (expires, date) in cases {
        let s = stored(&[("expires", expires), ("date", date)]);
        let f = s.freshness(at(0), &cfg);
        assert_eq!(
            (f.lifetime.secs, f.lifetime.source),
            (100, LifetimeSource::Expires),
            "Expires {expires:?}, Date {date:?}"
        );
        assert!(f.is_fresh(), "Expires {expires:?}, Date {date:?}");
    }
    // Last-Modified in lower case feeds the heuristic (4.2.2): 10% of 1000 s.
    let s = stored(&[
        ("date", &imf_date),
        ("last-modified", "tue, 14 nov 2023 21:56:40 gmt"),
    ]);
    let f = s.freshness(at(0), &cfg);
    assert_eq!(
        (f.lifetime.secs, f.lifetime.source),
        (100, LifetimeSource::Heuristic)
    );
}

#[test]
fn policy_default_ttl_and_heuristic_switches_config() {
    let d0 = date(0);
    let lm = date(-1000);
    let with_lm = [("date", d0.as_str()), ("last-modified", lm.as_str())];
    let no_heuristic = PolicyConfig {
        heuristic_freshness: false,
        ..PolicyConfig::default()
    };
    let ttl = PolicyConfig {
        default_ttl: Some(Duration::from_secs(60)),
        ..PolicyConfig::default()
    };
    let cases: &[(
        &str,
        u16,
        &[(&str, &str)],
        &PolicyConfig,
        u64,
        LifetimeSource,
    )] = &[
        (
            "heuristic off",
            200,
            &with_lm,
            &no_heuristic,
            0,
            LifetimeSource::None,
        ),
        (
            "default ttl over heuristic",
            200,
            &with_lm,
            &ttl,
            60,
            LifetimeSource::DefaultTtl,
        ),
        (
            "default ttl without Last-Modified",
            200,
            &[],
            &ttl,
            60,
            LifetimeSource::DefaultTtl,
        ),
        (
            "default ttl never overrides max-age",
            200,
            &[("cache-control", "max-age=5")],
            &ttl,
            5,
            LifetimeSource::MaxAge,
        ),
        (
            "default ttl never overrides max-age=0",
            200,
            &[("cache-control", "max-age=0")],
            &ttl,
            0,
            LifetimeSource::MaxAge,
        ),
        (
            "default ttl not for 302 (4.2.2)",
            302,
            &[],
            &ttl,
            0,
            LifetimeSource::None,
        ),
        (
            "default ttl for a public 302",
            302,
            &[("cache-control", "public")],
            &ttl,
            60,
            LifetimeSource::DefaultTtl,
        ),
    ];
    for (name, status, fields, cfg, secs, source) in cases {
        let f = stored_status(*status, fields).freshness(at(0), cfg);
        assert_eq!(
            (f.lifetime.secs, f.lifetime.source),
            (*secs, *source),
            "{name}"
        );
    }
}

#[test]
fn policy_age_field_rfc9111_5_1() {
    let cases: &[(&str, u64)] = &[
        ("0", 0),
        ("60", 60),
        ("60, 30", 60),
        ("-5", 0),
        ("1.5", 0),
        ("abc", 0),
        ("", 0),
        ("99999999999999999999", 1 << 31),
    ];
    for (value, want) in cases {
        assert_eq!(
            age_value(&header_map(&[("age", value)])),
            *want,
            "Age: {value:?}"
        );
    }
    assert_eq!(age_value(&header_map(&[])), 0);
}

#[test]
fn policy_current_age_rfc9111_4_2_3() {
    // (name, fields, request_time, response_time, now, expected current_age)
    let cases: &[(&str, Vec<(&str, String)>, i64, i64, i64, u64)] = &[
        ("resident time only", vec![("date", date(0))], 0, 0, 30, 30),
        (
            "Age is added",
            vec![("date", date(0)), ("age", "20".into())],
            0,
            0,
            30,
            50,
        ),
        (
            "response_delay corrects Age",
            vec![("date", date(0)), ("age", "20".into())],
            -5,
            0,
            0,
            25,
        ),
        (
            "apparent age from Date",
            vec![("date", date(-40))],
            0,
            0,
            0,
            40,
        ),
        (
            "apparent age vs corrected age: max",
            vec![("date", date(-40)), ("age", "10".into())],
            -2,
            0,
            0,
            40,
        ),
        (
            "Date in the future: apparent age 0",
            vec![("date", date(100))],
            0,
            0,
            5,
            5,
        ),
        ("no Date: received time", vec![], 0, 0, 7, 7),
        (
            "invalid Age ignored",
            vec![("date", date(0)), ("age", "x".into())],
            0,
            0,
            3,
            3,
        ),
        (
            "clock before response_time",
            vec![("date", date(0))],
            0,
            0,
            -10,
            0,
        ),
    ];
    for (name, fields, req_t, resp_t, now, want) in cases {
        let h = header_map(
            &fields
                .iter()
                .map(|(n, v)| (*n, v.as_str()))
                .collect::<Vec<_>>(),
        );
        let age = current_age(&h, at(*req_t), at(*resp_t), at(*now));
        assert_eq!(age.as_secs(), *want, "{name}");
    }
}

#[test]
fn policy_fresh_while_lifetime_exceeds_age_rfc9111_4_2() {
    let cfg = PolicyConfig::default();
    let d0 = date(0);
    let s = stored(&[("cache-control", "max-age=10"), ("date", &d0)]);
    let cases: &[(i64, bool, i64)] = &[
        (0, true, 10),
        (9, true, 1),
        (10, false, 0),
        (11, false, -1),
        (1000, false, -990),
    ];
    for (now, fresh, ttl) in cases {
        let f: Freshness = s.freshness(at(*now), &cfg);
        assert_eq!((f.is_fresh(), f.ttl()), (*fresh, *ttl), "now=T0+{now}");
    }
    let aged = stored(&[
        ("cache-control", "max-age=10"),
        ("date", &d0),
        ("age", "10"),
    ]);
    assert!(
        !aged.freshness(at(0), &cfg).is_fresh(),
        "5.1 Age counts against max-age"
    );
    let big_age = stored(&[
        ("cache-control", "max-age=10"),
        ("date", &d0),
        ("age", "99999999999"),
    ]);
    assert!(!big_age.freshness(at(0), &cfg).is_fresh(), "5.1 large Age");
}

#[test]
fn policy_freshness_expires_near_misses_are_already_stale_rfc9111_5_3() {
    // T0 is Tue, 14 Nov 2023 22:13:20 GMT. Each value is a near miss of one of the three
    // HTTP-date formats (RFC 9110 5.6.7), meaning T0 + 100 s to a lenient parser: one a
    // recipient cannot parse is a time in the past (RFC 9111 5.3), so the response is stale.
    let cases: &[&str] = &[
        // IMF-fixdate with a space too many, or too few, between parts.
        "Tue,  14 Nov 2023 22:15:00 GMT",
        "Tue, 14  Nov 2023 22:15:00 GMT",
        "Tue, 14 Nov  2023 22:15:00 GMT",
        "Tue, 14 Nov 2023  22:15:00 GMT",
        "Tue, 14 Nov 2023 22:15:00  GMT",
        "Tue,14 Nov 2023 22:15:00 GMT",
        "Tue , 14 Nov 2023 22:15:00 GMT",
        "Tue, 14 Nov 2023\t22:15:00 GMT",
        // Dashes inside IMF-fixdate, a four-digit year in rfc850-date.
        "Tue, 14-Nov-2023 22:15:00 GMT",
        "Tuesday, 14-Nov-2023 22:15:00 GMT",
        // The other format's day name.
        "Tuesday, 14 Nov 2023 22:15:00 GMT",
        "Tue, 14-Nov-23 22:15:00 GMT",
        // asctime with one space before a one-digit day, or extra spaces.
        "Tue Nov 4 22:15:00 2023",
        "Tue  Nov 14 22:15:00 2023",
        "Tue Nov 14 22:15:00  2023",
    ];
    let cfg = PolicyConfig::default();
    let d0 = date(0);
    for expires in cases {
        let s = stored(&[("expires", expires), ("date", &d0)]);
        let f = s.freshness(at(0), &cfg);
        assert_eq!(
            (f.lifetime.secs, f.lifetime.source),
            (0, LifetimeSource::Expires),
            "Expires {expires:?}"
        );
        assert!(!f.is_fresh(), "Expires {expires:?}");
    }
}
