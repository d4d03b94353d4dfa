//! Field-value syntax shared by the policy modules (RFC 9110 5.6): lists, tokens, quoted strings,
//! delta-seconds (RFC 9111 1.2.2), HTTP-dates (RFC 9110 5.6.7) and entity tags (RFC 9110 8.8.3).

use std::borrow::Cow;
use std::time::SystemTime;

use http::HeaderMap;
use http::header::{AsHeaderName, HeaderName};

/// The largest delta-seconds value a cache must represent; larger values clamp to it (RFC 9111
/// 1.2.2: "the cache MUST consider the value to be 2147483648 (2^31)").
pub const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// `delta-seconds = 1*DIGIT` (RFC 9111 1.2.2), clamped to 2^31. Anything else (a sign, a
/// fraction, an empty string) is `None`.
pub fn delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Overflow of u64 means the value is certainly above 2^31.
    Some(
        s.parse::<u64>()
            .map_or(DELTA_SECONDS_MAX, |v| v.min(DELTA_SECONDS_MAX)),
    )
}

/// `tchar` (RFC 9110 5.6.2).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `token = 1*tchar` (RFC 9110 5.6.2).
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// Split a list-based field value (`#element`, RFC 9110 5.6.1) on the commas that are outside
/// quoted strings, trimming optional whitespace and skipping empty elements.
pub fn split_list(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        loop {
            if rest.is_empty() {
                return None;
            }
            let end = end_of_element(rest);
            let (element, tail) = rest.split_at(end);
            rest = tail.strip_prefix(',').unwrap_or(tail);
            let element = element.trim_matches([' ', '\t']);
            if !element.is_empty() {
                return Some(element);
            }
        }
    })
}

/// Index of the first comma outside a quoted string (or the length).
fn end_of_element(s: &str) -> usize {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if in_quotes {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quotes = false;
            }
        } else if b == b'"' {
            in_quotes = true;
        } else if b == b',' {
            return i;
        }
    }
    s.len()
}

/// The content of a `quoted-string` with its quoted-pairs undone, or the input unchanged when it
/// is not quoted (RFC 9110 5.6.4).
pub fn unquote(s: &str) -> Cow<'_, str> {
    let Some(inner) = s
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .filter(|_| s.len() >= 2)
    else {
        return Cow::Borrowed(s);
    };
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// All field lines of `name` combined into one value with `", "` (RFC 9110 5.3), or `None` when
/// the field is absent. Bytes outside visible ASCII are replaced, so callers that compare values
/// see a stable string.
pub fn combined<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Option<String> {
    let mut out: Option<String> = None;
    for v in headers.get_all(name) {
        let s = String::from_utf8_lossy(v.as_bytes());
        match &mut out {
            Some(acc) => {
                acc.push_str(", ");
                acc.push_str(&s);
            }
            None => out = Some(s.into_owned()),
        }
    }
    out
}

/// The first field line of `name` as text, if it is valid visible ASCII.
pub fn first<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Field names listed in a list-valued field (Connection, Vary, `no-cache="..."`), lowercased;
/// elements that are not valid field names are skipped.
pub fn field_names(list: &str) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = Vec::new();
    for element in split_list(list) {
        if let Ok(name) = HeaderName::from_bytes(element.as_bytes())
            && !names.contains(&name)
        {
            names.push(name);
        }
    }
    names
}

/// `HTTP-date` in any of the three formats a recipient must accept (RFC 9110 5.6.7): IMF-fixdate,
/// rfc850-date and asctime-date. `None` for anything else.
pub fn http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

/// Format an IMF-fixdate for a Date field; `None` outside 1970..=9999, which httpdate cannot
/// represent.
pub fn http_date_value(t: SystemTime) -> Option<http::HeaderValue> {
    const YEAR_10000: u64 = 253_402_300_800;
    let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    if secs >= YEAR_10000 {
        return None;
    }
    http::HeaderValue::from_str(&httpdate::fmt_http_date(t)).ok()
}

/// A parsed field that holds one HTTP-date (Date, Expires, Last-Modified, If-Modified-Since).
/// Only the first field line is used.
pub fn date_field<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Option<SystemTime> {
    headers
        .get(name)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(http_date)
}

/// An entity tag (RFC 9110 8.8.3): `[W/] "opaque"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityTag<'a> {
    /// `W/` was present.
    pub weak: bool,
    /// The opaque-tag including its double quotes.
    pub opaque: &'a str,
}

impl<'a> EntityTag<'a> {
    /// Parse one entity tag; `None` when it is malformed.
    pub fn parse(s: &'a str) -> Option<Self> {
        let s = s.trim_matches([' ', '\t']);
        let (weak, opaque) = match s.strip_prefix("W/") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let valid = opaque.len() >= 2
            && opaque.starts_with('"')
            && opaque.ends_with('"')
            && opaque[1..opaque.len() - 1]
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80);
        valid.then_some(Self { weak, opaque })
    }

    /// Strong comparison (RFC 9110 8.8.3.2): both strong and the opaque tags identical.
    pub fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }

    /// Weak comparison (RFC 9110 8.8.3.2): the opaque tags identical.
    pub fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_seconds_rfc9111_1_2_2() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("60", Some(60)),
            ("007", Some(7)),
            ("2147483648", Some(DELTA_SECONDS_MAX)),
            ("2147483649", Some(DELTA_SECONDS_MAX)),
            ("99999999999999999999999999", Some(DELTA_SECONDS_MAX)),
            ("-1", None),
            ("1.5", None),
            ("", None),
            ("+5", None),
            (" 5", None),
            ("5s", None),
        ];
        for (input, want) in cases {
            assert_eq!(delta_seconds(input), *want, "{input:?}");
        }
    }

    #[test]
    fn list_splitting_respects_quotes_rfc9110_5_6_1() {
        let cases: &[(&str, &[&str])] = &[
            ("a, b,c", &["a", "b", "c"]),
            (" , ,a,, ", &["a"]),
            (
                r#"no-cache="a, b", max-age=5"#,
                &[r#"no-cache="a, b""#, "max-age=5"],
            ),
            (r#"x="a\", b", y"#, &[r#"x="a\", b""#, "y"]),
            ("", &[]),
            ("\t a \t", &["a"]),
        ];
        for (input, want) in cases {
            assert_eq!(split_list(input).collect::<Vec<_>>(), *want, "{input:?}");
        }
    }

    #[test]
    fn unquote_rfc9110_5_6_4() {
        assert_eq!(unquote(r#""abc""#), "abc");
        assert_eq!(unquote(r#""a\"b""#), "a\"b");
        assert_eq!(unquote("abc"), "abc");
        assert_eq!(unquote("\""), "\"");
        assert_eq!(unquote(r#""""#), "");
    }

    #[test]
    fn http_date_three_formats_rfc9110_5_6_7() {
        let want = http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(want));
        assert_eq!(http_date("Sun Nov  6 08:49:37 1994"), Some(want));
        assert_eq!(http_date("  Sun, 06 Nov 1994 08:49:37 GMT "), Some(want));
        for bad in ["0", "", "-1", "yesterday", "Sun, 32 Nov 1994 08:49:37 GMT"] {
            assert_eq!(http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn entity_tags_rfc9110_8_8_3() {
        let strong = EntityTag::parse(r#""xyzzy""#).unwrap();
        let weak = EntityTag::parse(r#"W/"xyzzy""#).unwrap();
        assert!(!strong.weak && weak.weak);
        assert!(strong.weak_eq(&weak));
        assert!(!strong.strong_eq(&weak));
        assert!(strong.strong_eq(&strong));
        assert!(!weak.strong_eq(&weak));
        for bad in ["xyzzy", "\"", "W/xyzzy", "\"a\"b\"", ""] {
            assert!(EntityTag::parse(bad).is_none(), "{bad:?}");
        }
    }
}
