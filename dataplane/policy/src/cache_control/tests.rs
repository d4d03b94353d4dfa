use super::*;
use http::HeaderValue;

fn headers(fields: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in fields {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn max_age_arguments_rfc9111_5_2_and_1_2_2() {
    let cases: &[(&str, Option<Delta>)] = &[
        ("max-age=60", Some(Delta::Seconds(60))),
        ("MAX-AGE=60", Some(Delta::Seconds(60))),
        ("Max-Age=60", Some(Delta::Seconds(60))),
        // 5.2: recipients accept the quoted-string form.
        ("max-age=\"60\"", Some(Delta::Seconds(60))),
        ("max-age=0", Some(Delta::Seconds(0))),
        // 4.2.1: invalid freshness information.
        ("max-age=-1", Some(Delta::Invalid)),
        ("max-age=1.5", Some(Delta::Invalid)),
        ("max-age=", Some(Delta::Invalid)),
        ("max-age", Some(Delta::Invalid)),
        ("max-age=abc", Some(Delta::Invalid)),
        // 1.2.2: clamp to 2^31.
        (
            "max-age=2147483648",
            Some(Delta::Seconds(DELTA_SECONDS_MAX)),
        ),
        (
            "max-age=99999999999999999999999",
            Some(Delta::Seconds(DELTA_SECONDS_MAX)),
        ),
        // 4.2.1: first occurrence of a duplicate wins.
        ("max-age=10, max-age=20", Some(Delta::Seconds(10))),
        ("max-age=10,max-age=-1", Some(Delta::Seconds(10))),
        ("public", None),
        ("", None),
        ("maxage=5", None),
        ("max-age =5", None),
        ("max-age= 5", Some(Delta::Invalid)),
    ];
    for (value, want) in cases {
        assert_eq!(CacheControl::parse(value).max_age, *want, "{value:?}");
    }
}

#[test]
fn boolean_directives_case_insensitive_rfc9111_5_2() {
    let cc = CacheControl::parse(
        "No-Store, PUBLIC, must-revalidate, Proxy-Revalidate, must-understand, no-transform, only-if-cached, immutable",
    );
    assert!(cc.no_store && cc.public && cc.must_revalidate && cc.proxy_revalidate);
    assert!(cc.must_understand && cc.no_transform && cc.only_if_cached && cc.immutable);
    let none = CacheControl::parse("nostore, publicx, foo=bar, x=\"no-store\"");
    assert_eq!(none, CacheControl::default());
}

#[test]
fn no_cache_and_private_scopes_rfc9111_5_2_2_4_and_5_2_2_7() {
    let cases: &[(&str, Option<Scope>)] = &[
        ("no-cache", Some(Scope::All)),
        (
            "no-cache=\"Set-Cookie\"",
            Some(Scope::Fields(vec![HeaderName::from_static("set-cookie")])),
        ),
        (
            "no-cache=\"set-cookie, X-Foo\"",
            Some(Scope::Fields(vec![
                HeaderName::from_static("set-cookie"),
                HeaderName::from_static("x-foo"),
            ])),
        ),
        (
            "no-cache=Set-Cookie",
            Some(Scope::Fields(vec![HeaderName::from_static("set-cookie")])),
        ),
        ("no-cache=\"\"", Some(Scope::All)),
        // 4.2.1: conflicting occurrences resolve to the most restrictive.
        ("no-cache=\"a\", no-cache", Some(Scope::All)),
        (
            "no-cache=\"a\", no-cache=\"b\"",
            Some(Scope::Fields(vec![
                HeaderName::from_static("a"),
                HeaderName::from_static("b"),
            ])),
        ),
        ("max-age=5", None),
    ];
    for (value, want) in cases {
        assert_eq!(CacheControl::parse(value).no_cache, *want, "{value:?}");
        let private = value.replace("no-cache", "private");
        assert_eq!(CacheControl::parse(&private).private, *want, "{private:?}");
    }
}

#[test]
fn request_directives_rfc9111_5_2_1() {
    let cc = CacheControl::parse("max-stale, min-fresh=5, max-age=0");
    assert_eq!(cc.max_stale, Some(MaxStale::Any));
    assert_eq!(cc.min_fresh, Some(Delta::Seconds(5)));
    assert_eq!(cc.max_age, Some(Delta::Seconds(0)));
    assert_eq!(
        CacheControl::parse("max-stale=30").max_stale,
        Some(MaxStale::Seconds(30))
    );
    // An invalid max-stale is dropped rather than read as "any staleness".
    assert_eq!(CacheControl::parse("max-stale=-3").max_stale, None);
    assert_eq!(
        CacheControl::parse("min-fresh=x").min_fresh,
        Some(Delta::Invalid)
    );
}

#[test]
fn rfc5861_directives() {
    let cc = CacheControl::parse("max-age=1, stale-while-revalidate=30, stale-if-error=\"60\"");
    assert_eq!(cc.stale_while_revalidate, Some(Delta::Seconds(30)));
    assert_eq!(cc.stale_if_error, Some(Delta::Seconds(60)));
}

#[test]
fn multiple_field_lines_combine_rfc9110_5_3() {
    let h = headers(&[
        ("cache-control", "max-age=5"),
        ("cache-control", "no-store"),
    ]);
    let cc = CacheControl::from_field(&h, &CACHE_CONTROL).unwrap();
    assert_eq!(cc.max_age, Some(Delta::Seconds(5)));
    assert!(cc.no_store);
}

#[test]
fn forbids_stale_rfc9111_4_2_4() {
    let cases: &[(&str, bool)] = &[
        ("max-age=5", false),
        ("max-age=5, must-revalidate", true),
        ("max-age=5, proxy-revalidate", true),
        ("s-maxage=5", true),
        ("no-cache", true),
        ("no-cache=\"x\"", false),
    ];
    for (v, want) in cases {
        assert_eq!(CacheControl::parse(v).forbids_stale(), *want, "{v}");
    }
}

#[test]
fn targeted_fields_take_precedence_rfc9213_2_2() {
    type Case<'a> = (&'a [(&'a str, &'a str)], Source, Option<Delta>);
    let cases: &[Case] = &[
        (
            &[("cache-control", "max-age=10")],
            Source::CacheControl,
            Some(Delta::Seconds(10)),
        ),
        (
            &[
                ("cache-control", "max-age=10"),
                ("cdn-cache-control", "max-age=20"),
            ],
            Source::Cdn,
            Some(Delta::Seconds(20)),
        ),
        (
            &[
                ("cache-control", "max-age=10"),
                ("cdn-cache-control", "max-age=20"),
                ("edgecache-cache-control", "max-age=30"),
            ],
            Source::EdgeCache,
            Some(Delta::Seconds(30)),
        ),
        // An invalid targeted field is ignored: the next one applies.
        (
            &[
                ("cache-control", "max-age=10"),
                ("cdn-cache-control", "max-age=20"),
                ("edgecache-cache-control", "Max-Age=30"),
            ],
            Source::Cdn,
            Some(Delta::Seconds(20)),
        ),
        (
            &[("cache-control", "max-age=10"), ("cdn-cache-control", "")],
            Source::CacheControl,
            Some(Delta::Seconds(10)),
        ),
        (
            &[
                ("cache-control", "max-age=10"),
                ("cdn-cache-control", "max-age=@@"),
            ],
            Source::CacheControl,
            Some(Delta::Seconds(10)),
        ),
        // A valid targeted field without max-age still overrides Cache-Control.
        (
            &[
                ("cache-control", "max-age=10"),
                ("cdn-cache-control", "no-store"),
            ],
            Source::Cdn,
            None,
        ),
        (&[], Source::None, None),
    ];
    for (fields, source, max_age) in cases {
        let d = ResponseDirectives::of(&headers(fields));
        assert_eq!(d.source, *source, "{fields:?}");
        assert_eq!(d.cc.max_age, *max_age, "{fields:?}");
        assert_eq!(d.uses_expires(), !source.is_targeted());
    }
}

#[test]
fn targeted_directives_of_the_wrong_type_are_ignored_rfc9213_2_1() {
    // (targeted value, parsed directives or None when the field counts as absent)
    let seconds = |n| CacheControl {
        max_age: Some(Delta::Seconds(n)),
        ..CacheControl::default()
    };
    let no_store = CacheControl {
        no_store: true,
        ..CacheControl::default()
    };
    let cases: &[(&str, Option<CacheControl>)] = &[
        ("max-age=60", Some(seconds(60))),
        ("max-age=60;foo=bar", Some(seconds(60))),
        ("max-age=0", Some(seconds(0))),
        ("max-age=999999999999999", Some(seconds(DELTA_SECONDS_MAX))),
        // Wrong types: String, Token, Decimal, negative Integer, Boolean, inner list.
        ("max-age=\"10000\"", None),
        ("max-age=abc", None),
        ("max-age=1.5", None),
        ("s-maxage=-1", None),
        ("max-age", None),
        ("max-age=(1 2)", None),
        ("no-store=?0", None),
        ("no-store=1", None),
        ("public=\"yes\"", None),
        ("private=set-cookie", None),
        ("no-cache=:AAAA:", None),
        // Not parseable as a Dictionary: the whole field is ignored.
        ("Max-Age=30", None),
        ("max-age=5 6", None),
        ("max-age=1000000000000000", None),
        ("no-store, max-age=@@", None),
        ("", None),
        ("a,,b", None),
        // Unknown and request-only directives are ignored too.
        ("foo, x=1", None),
        ("min-fresh=5, only-if-cached, max-stale", None),
        // A valid directive survives its invalid neighbours.
        ("max-age=\"10000\", no-store", Some(no_store.clone())),
        ("no-store, max-age=1.5", Some(no_store.clone())),
        ("no-store=?1", Some(no_store)),
        // A repeated key keeps its last value (RFC 8941 4.2.2).
        ("max-age=10, max-age=20", Some(seconds(20))),
        ("max-age=10, max-age=\"20\"", None),
        (
            "private=\"set-cookie\", no-cache",
            Some(CacheControl {
                private: Some(Scope::Fields(vec![http::header::SET_COOKIE])),
                no_cache: Some(Scope::All),
                ..CacheControl::default()
            }),
        ),
        (
            "s-maxage=5, stale-while-revalidate=7, stale-if-error=9, must-revalidate, \
             proxy-revalidate, must-understand, no-transform, immutable",
            Some(CacheControl {
                s_maxage: Some(Delta::Seconds(5)),
                stale_while_revalidate: Some(Delta::Seconds(7)),
                stale_if_error: Some(Delta::Seconds(9)),
                must_revalidate: true,
                proxy_revalidate: true,
                must_understand: true,
                no_transform: true,
                immutable: true,
                ..CacheControl::default()
            }),
        ),
    ];
    for (value, want) in cases {
        assert_eq!(CacheControl::parse_targeted(value), *want, "{value:?}");
    }
}

#[test]
fn a_targeted_field_without_valid_directives_is_absent_rfc9213_2_1() {
    type Case<'a> = (&'a [(&'a str, &'a str)], Source, CacheControl);
    let cc = |v| CacheControl::parse(v);
    let cases: &[Case] = &[
        (
            &[
                ("cache-control", "no-store"),
                ("cdn-cache-control", "max-age=\"10000\""),
            ],
            Source::CacheControl,
            cc("no-store"),
        ),
        (
            &[
                ("cache-control", "no-store"),
                ("edgecache-cache-control", "max-age=abc"),
            ],
            Source::CacheControl,
            cc("no-store"),
        ),
        (
            &[
                ("cache-control", "no-store"),
                ("edgecache-cache-control", "s-maxage=-1"),
                ("cdn-cache-control", "max-age=1.5"),
            ],
            Source::CacheControl,
            cc("no-store"),
        ),
        // The first targeted field with a valid directive wins.
        (
            &[
                ("cache-control", "no-store"),
                ("edgecache-cache-control", "max-age=\"1\""),
                ("cdn-cache-control", "max-age=20"),
            ],
            Source::Cdn,
            cc("max-age=20"),
        ),
        // Field lines combine before parsing (RFC 8941 4.2): one bad line fails the field.
        (
            &[
                ("cache-control", "no-store"),
                ("cdn-cache-control", "max-age=20"),
                ("cdn-cache-control", "max-age=20 x"),
            ],
            Source::CacheControl,
            cc("no-store"),
        ),
        (
            &[("cdn-cache-control", "max-age=\"10000\"")],
            Source::None,
            CacheControl::default(),
        ),
    ];
    for (fields, source, want) in cases {
        let d = ResponseDirectives::of(&headers(fields));
        assert_eq!((d.source, &d.cc), (*source, want), "{fields:?}");
    }
}

#[test]
fn pragma_no_cache_only_without_cache_control_rfc9111_5_4() {
    let cases: &[(&[(&str, &str)], bool)] = &[
        (&[("pragma", "no-cache")], true),
        (&[("pragma", "No-Cache")], true),
        (&[("pragma", "foo, no-cache")], true),
        (
            &[("pragma", "no-cache"), ("cache-control", "max-age=5")],
            false,
        ),
        (&[("pragma", "x-no-cache")], false),
        (&[], false),
    ];
    for (fields, want) in cases {
        let cc = request_directives(&headers(fields));
        assert_eq!(cc.no_cache.is_some(), *want, "{fields:?}");
    }
}
