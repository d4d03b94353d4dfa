//! Field-value syntax shared by the policy modules (RFC 9110 5.6): lists, tokens, quoted strings,
//! delta-seconds (RFC 9111 1.2.2), HTTP-dates (RFC 9110 5.6.7) and entity tags (RFC 9110 8.8.3).

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use http::header::{AsHeaderName, HeaderName, HeaderValue};

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

/// The Content-Length of a response, when it has one valid value.
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
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
/// One field line (most fields have one) is borrowed, not copied.
pub fn combined<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Option<Cow<'_, str>> {
    let mut lines = headers.get_all(name).into_iter();
    let mut out = String::from_utf8_lossy(lines.next()?.as_bytes());
    for v in lines {
        let acc = out.to_mut();
        acc.push_str(", ");
        acc.push_str(&String::from_utf8_lossy(v.as_bytes()));
    }
    Some(out)
}

/// The decimal digits of `n`, written at the end of `buf`: the part of it they fill.
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// `n` in decimal, pushed onto `out` without the formatter.
pub(crate) fn push_decimal(out: &mut String, n: u64) {
    let mut digits = [0u8; 20];
    // ASCII digits: always UTF-8.
    out.push_str(std::str::from_utf8(decimal(n, &mut digits)).unwrap_or_default());
}

/// A field value of `n` in decimal (Content-Length), in one allocation: `HeaderValue::from`
/// an integer makes a second one for the buffer it writes into.
pub fn decimal_value(n: u64) -> HeaderValue {
    let mut digits = [0u8; 20];
    HeaderValue::from_bytes(decimal(n, &mut digits)).unwrap_or_else(|_| HeaderValue::from(n))
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

/// `HTTP-date` (RFC 9110 5.6.7) in exactly the three formats a recipient MUST accept:
/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), rfc850-date (`Sunday, 06-Nov-94 08:49:37 GMT`)
/// and asctime-date (`Sun Nov  6 08:49:37 1994`). `None` for anything else, near misses too
/// (two spaces between parts, dashes in an IMF-fixdate, a four-digit rfc850 year, the other
/// format's day name): RFC 9111 5.3 makes an Expires that cannot be parsed a time in the past.
/// Every date the policy reads (Date, Expires, Last-Modified, If-Modified-Since, If-Range) goes
/// through here.
///
/// Day and month names and `GMT` are matched without regard to case; whitespace around the
/// whole value (not part of a field value, RFC 9110 5.5) is ignored; the day of the week is
/// checked to be a day name but not against the date. An rfc850-date's two-digit year is placed
/// by [`http_date_at`] against the system clock: this is the one place the policy reads a clock,
/// and its answer only changes once a year.
pub fn http_date(s: &str) -> Option<SystemTime> {
    http_date_at(s, SystemTime::now())
}

/// [`http_date`] with the clock passed in: a two-digit year that would put the date more than 50
/// years after `now`'s year is in the previous century (RFC 9110 5.6.7). A stored Date is parsed
/// at every hit: this allocates nothing.
pub fn http_date_at(s: &str, now: SystemTime) -> Option<SystemTime> {
    let s = s.trim_matches([' ', '\t']);
    imf_fixdate(s.as_bytes()).or_else(|| any_date_format(s, now))
}

/// [`http_date_at`] of a value without surrounding whitespace, in any of the three formats.
fn any_date_format(s: &str, now: SystemTime) -> Option<SystemTime> {
    let (year, month, day, time) = match s.split_once(", ") {
        // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
        Some((weekday, rest)) if weekday.len() == 3 => {
            short_day_name(weekday)?;
            let [day, month, year, time, gmt] = fields(rest, b' ', [2, 3, 4, 8, 3])?;
            gmt.eq_ignore_ascii_case("GMT").then_some(())?;
            (four_digits(year)?, month, day, time)
        }
        // rfc850-date: `Sunday, 06-Nov-94 08:49:37 GMT`.
        Some((weekday, rest)) => {
            long_day_name(weekday)?;
            let [date, time, gmt] = fields(rest, b' ', [9, 8, 3])?;
            gmt.eq_ignore_ascii_case("GMT").then_some(())?;
            let [day, month, yy] = fields(date, b'-', [2, 3, 2])?;
            (century_of(digits(yy)?, now), month, day, time)
        }
        // asctime-date: `Sun Nov  6 08:49:37 1994` (a one-digit day after two spaces).
        None => {
            let (head, day, tail) = (s.get(..8)?, s.get(8..10)?, s.get(10..)?);
            let [weekday, month] = fields(head.get(..7)?, b' ', [3, 3])?;
            short_day_name(weekday)?;
            (head.as_bytes().get(7) == Some(&b' ')).then_some(())?;
            let day = day.strip_prefix(' ').unwrap_or(day);
            let [_, time, year] = fields(tail, b' ', [0, 8, 4])?;
            (four_digits(year)?, month, day, time)
        }
    };
    let month = month_index(month)?;
    let day = digits(day)?;
    civil_time(year, month, day, time_of_day(time)?)
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, what current senders write) read at its
/// fixed offsets, without searching the text. `None` when `s` is not a valid one: then the
/// general parse in [`http_date_at`] decides (it gives the same time for every value this
/// accepts, and `None` for the invalid ones).
fn imf_fixdate(s: &[u8]) -> Option<SystemTime> {
    let s: &[u8; 29] = s.try_into().ok()?;
    let at = |i: usize, b: u8| s[i] == b;
    if !(at(3, b',')
        && at(4, b' ')
        && at(7, b' ')
        && at(11, b' ')
        && at(16, b' ')
        && at(19, b':')
        && at(22, b':')
        && at(25, b' ')
        && s[26..].eq_ignore_ascii_case(b"GMT"))
    {
        return None;
    }
    let two = |i: usize| -> Option<u32> {
        let (a, b) = (s[i], s[i + 1]);
        (a.is_ascii_digit() && b.is_ascii_digit())
            .then(|| u32::from(a - b'0') * 10 + u32::from(b - b'0'))
    };
    let weekday = std::str::from_utf8(&s[..3]).ok()?;
    short_day_name(weekday)?;
    let month = month_index(std::str::from_utf8(&s[8..11]).ok()?)?;
    let year = i64::from(two(12)? * 100 + two(14)?);
    let (h, m, sec) = (two(17)?, two(20)?, two(23)?);
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    civil_time(year, month, two(5)?, h * 3600 + m * 60 + sec)
}

/// The time of a proleptic Gregorian date and a second of its day; `None` for a day the month
/// does not have (or a time `SystemTime` cannot hold).
fn civil_time(year: i64, month: u32, day: u32, seconds: u32) -> Option<SystemTime> {
    if day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + i64::from(seconds);
    match u64::try_from(secs) {
        Ok(after) => UNIX_EPOCH.checked_add(Duration::from_secs(after)),
        Err(_) => UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs())),
    }
}

/// `s` cut at each `sep` into exactly `N` parts of the given lengths in bytes; `None` otherwise
/// (a date is parsed at every hit: no allocation).
fn fields<const N: usize>(s: &str, sep: u8, lens: [usize; N]) -> Option<[&str; N]> {
    let mut out = [""; N];
    let mut at = 0;
    for (i, len) in lens.into_iter().enumerate() {
        if i > 0 {
            (s.as_bytes().get(at) == Some(&sep)).then_some(())?;
            at += 1;
        }
        *out.get_mut(i)? = s.get(at..at + len)?;
        at += len;
    }
    (at == s.len()).then_some(out)
}

const DAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// 0 to 6 for a short day name (`Sun`), in any letter case.
fn short_day_name(name: &str) -> Option<usize> {
    DAYS.iter().position(|d| name.eq_ignore_ascii_case(&d[..3]))
}

/// 0 to 6 for a long day name (`Sunday`), in any letter case.
fn long_day_name(name: &str) -> Option<usize> {
    DAYS.iter().position(|d| name.eq_ignore_ascii_case(d))
}

/// 1 to 12 for a month name (`Nov`), in any letter case.
fn month_index(name: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let i = MONTHS.iter().position(|m| name.eq_ignore_ascii_case(m))?;
    u32::try_from(i + 1).ok()
}

/// A run of ASCII digits (at most 4) as a number.
fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn four_digits(s: &str) -> Option<i64> {
    (s.len() == 4).then(|| digits(s)).flatten().map(i64::from)
}

/// `hour ":" minute ":" second`, two digits each; 60 seconds is a leap second (RFC 9110 5.6.7).
fn time_of_day(s: &str) -> Option<u32> {
    let mut fields = s.split(':');
    let mut next = |max: u32| {
        fields
            .next()
            .filter(|f| f.len() == 2)
            .and_then(digits)
            .filter(|&v| v <= max)
    };
    let (h, m, sec) = (next(23)?, next(59)?, next(60)?);
    fields.next().is_none().then_some(h * 3600 + m * 60 + sec)
}

/// The year ending in `yy` that is at most 50 years after `now`'s year (RFC 9110 5.6.7).
fn century_of(yy: u32, now: SystemTime) -> i64 {
    let latest = year_of_day(unix_secs(now).div_euclid(86_400)) + 50;
    latest - (latest - i64::from(yy)).rem_euclid(100)
}

/// Seconds since the epoch, negative before it.
fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The year of a day counted from 1970-01-01 (H. Hinnant's `civil_from_days`).
fn year_of_day(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let year = yoe + era * 400;
    if mp >= 10 { year + 1 } else { year }
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
    fn decimal_values_are_the_values_integers_make() {
        let mut edges = vec![
            0,
            1,
            9,
            10,
            99,
            100,
            4095,
            4096,
            65_535,
            1 << 20,
            u64::MAX - 1,
        ];
        edges.push(u64::MAX);
        edges.extend((0..20).map(|p| 10u64.pow(p)));
        edges.extend((1..20).map(|p| 10u64.pow(p) - 1));
        for n in edges {
            assert_eq!(decimal_value(n), HeaderValue::from(n), "{n}");
        }
    }

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
    fn the_imf_fixdate_fast_path_answers_what_the_general_parse_does() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut values = vec![
            "Sun, 06 Nov 1994 08:49:37 GMT".to_string(),
            "sun, 06 nov 1994 08:49:37 gmt".to_string(),
            "Tue, 29 Feb 2000 00:00:00 GMT".to_string(),
            "Thu, 29 Feb 2001 00:00:00 GMT".to_string(),
            "Sat, 31 Dec 2016 23:59:60 GMT".to_string(),
            "Fri, 31 Dec 9999 23:59:59 GMT".to_string(),
            "Thu, 01 Jan 0000 00:00:00 GMT".to_string(),
        ];
        // Every byte of a valid date replaced in turn by a digit, a letter, a space, a colon, a
        // comma and a dash.
        let base = "Sun, 06 Nov 1994 08:49:37 GMT";
        for i in 0..base.len() {
            for b in ['0', '9', 'x', 'G', ' ', ':', ',', '-'] {
                let mut v = base.as_bytes().to_vec();
                v[i] = b as u8;
                values.push(String::from_utf8(v).unwrap());
            }
        }
        let mut fast = 0;
        for v in &values {
            if let Some(t) = imf_fixdate(v.as_bytes()) {
                fast += 1;
                assert_eq!(Some(t), any_date_format(v, now), "{v:?}");
            }
            assert_eq!(
                http_date_at(v, now),
                any_date_format(v.trim_matches([' ', '\t']), now),
                "{v:?}"
            );
        }
        assert!(imf_fixdate(base.as_bytes()).is_some());
        assert!(fast > 10, "{fast}");
    }

    #[test]
    fn http_date_three_formats_any_case_rfc9110_5_6_7() {
        // 1994-11-06T08:49:37Z.
        let t = |secs: u64| Some(UNIX_EPOCH + Duration::from_secs(secs));
        let sunday = t(784_111_777);
        let cases: &[(&str, Option<SystemTime>)] = &[
            ("Sun, 06 Nov 1994 08:49:37 GMT", sunday),
            ("Sunday, 06-Nov-94 08:49:37 GMT", sunday),
            ("Sun Nov  6 08:49:37 1994", sunday),
            ("Sun Nov 06 08:49:37 1994", sunday),
            ("  Sun, 06 Nov 1994 08:49:37 GMT ", sunday),
            // Letter case (names are case-insensitive, RFC 9110 5.6.7).
            ("sun, 06 nov 1994 08:49:37 gmt", sunday),
            ("SUN, 06 NOV 1994 08:49:37 GMT", sunday),
            ("sunday, 06-nov-94 08:49:37 Gmt", sunday),
            ("SUN NOV  6 08:49:37 1994", sunday),
            ("Sun, 6 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06-Nov-1994 08:49:37 GMT", None),
            // The day name is not checked against the date.
            ("Mon, 06 Nov 1994 08:49:37 GMT", sunday),
            ("Thu, 01 Jan 1970 00:00:00 GMT", t(0)),
            (
                "Wed, 31 Dec 1969 23:59:59 GMT",
                UNIX_EPOCH.checked_sub(Duration::from_secs(1)),
            ),
            ("Tue, 29 Feb 2000 00:00:00 GMT", t(951_782_400)),
            ("Fri, 31 Dec 9999 23:59:59 GMT", t(253_402_300_799)),
            ("Sat, 31 Dec 2016 23:59:60 GMT", t(1_483_228_800)),
            ("0", None),
            ("", None),
            ("-1", None),
            ("yesterday", None),
            ("Sun, 32 Nov 1994 08:49:37 GMT", None),
            ("Sun, 00 Nov 1994 08:49:37 GMT", None),
            ("Thu, 29 Feb 2001 00:00:00 GMT", None),
            ("Sun, 06 Nov 1994 24:00:00 GMT", None),
            ("Sun, 06 Nov 1994 08:60:00 GMT", None),
            ("Sun, 06 Nov 1994 08:49:61 GMT", None),
            ("Sun, 06 Nov 1994 8:49:37 GMT", None),
            ("Sun, 06 Nov 1994 08:49 GMT", None),
            ("Sun, 06 Nov 1994 08:49:37 UTC", None),
            ("Sun, 06 Nov 1994 08:49:37", None),
            ("Sun, 06 Nov 94 08:49:37 GMT", None),
            ("Sun, 06 Nov 1994 08:49:37 GMT x", None),
            ("Sun, 06 Noe 1994 08:49:37 GMT", None),
            ("Sunny, 06 Nov 1994 08:49:37 GMT", None),
            ("Sunday, 06-Nov-94-1 08:49:37 GMT", None),
            ("Sunday, 06-Nov-9 08:49:37 GMT", None),
            ("Sun Nov  6 08:49:37 94", None),
            ("Sun Nov  6 08:49:37", None),
            ("Sun Nov  6 08:49:37 1994 GMT", None),
            ("Sun, 06 Nov", None),
            ("Sun Nov  6 08:49:37 1994 GMT", None),
            ("Sun, +6 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06 Nov 1994 08:49:37 GMT\u{e9}", None),
            // Near misses of each format: one space too many or too few, a tab for a space,
            // the other format's day name or date separator, a day of the wrong width.
            ("Sun,  06 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06  Nov 1994 08:49:37 GMT", None),
            ("Sun, 06 Nov  1994 08:49:37 GMT", None),
            ("Sun, 06 Nov 1994  08:49:37 GMT", None),
            ("Sun, 06 Nov 1994 08:49:37  GMT", None),
            ("Sun,06 Nov 1994 08:49:37 GMT", None),
            ("Sun , 06 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06 Nov 1994\t08:49:37 GMT", None),
            ("Sun, 06 Nov 1994 08:49:37 GMT,", None),
            ("Sunday, 06 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06-Nov-94 08:49:37 GMT", None),
            ("Sunday,  06-Nov-94 08:49:37 GMT", None),
            ("Sunday, 06-Nov-94  08:49:37 GMT", None),
            ("Sunday, 6-Nov-94 08:49:37 GMT", None),
            ("Sunday, 06 Nov 94 08:49:37 GMT", None),
            ("Sunday, 06-Nov-1994 08:49:37 GMT", None),
            ("Sun Nov 6 08:49:37 1994", None),
            ("Sun  Nov  6 08:49:37 1994", None),
            ("Sun Nov   6 08:49:37 1994", None),
            ("Sun Nov  6  08:49:37 1994", None),
            ("Sun Nov  6 08:49:37  1994", None),
            ("Sun Nov 6  08:49:37 1994", None),
            ("Sun Nov 06 08:49:37 GMT 1994", None),
            ("Sunday Nov  6 08:49:37 1994", None),
            ("Sun, Nov  6 08:49:37 1994", None),
            ("Sun\u{e9}Nov  6 08:49:37 1994", None),
            ("\u{e9}\u{e9}\u{e9}\u{e9}, 06 Nov 1994 08:49:37 GMT", None),
        ];
        for (input, want) in cases {
            assert_eq!(http_date(input), *want, "{input:?}");
        }
    }

    #[test]
    fn rfc850_two_digit_years_at_most_50_years_ahead_rfc9110_5_6_7() {
        let year = |date: &str, now_year: i64| {
            let now =
                UNIX_EPOCH + Duration::from_secs(days_from_civil(now_year, 6, 1) as u64 * 86_400);
            http_date_at(date, now).map(|t| year_of_day(unix_secs(t).div_euclid(86_400)))
        };
        let cases: &[(&str, i64, i64)] = &[
            ("Sunday, 06-Nov-94 08:49:37 GMT", 2026, 1994),
            ("Thursday, 01-Jan-70 00:00:00 GMT", 2026, 2070),
            ("Thursday, 01-Jan-76 00:00:00 GMT", 2026, 2076),
            ("Thursday, 01-Jan-77 00:00:00 GMT", 2026, 1977),
            ("Thursday, 01-Jan-00 00:00:00 GMT", 2026, 2000),
            ("Thursday, 01-Jan-26 00:00:00 GMT", 2026, 2026),
            ("Thursday, 01-Jan-69 00:00:00 GMT", 1990, 1969),
            ("Thursday, 01-Jan-40 00:00:00 GMT", 1990, 2040),
            ("Thursday, 01-Jan-41 00:00:00 GMT", 1990, 1941),
            ("Thursday, 01-Jan-49 00:00:00 GMT", 2099, 2149),
            ("Thursday, 01-Jan-50 00:00:00 GMT", 2099, 2050),
        ];
        for (date, now_year, want) in cases {
            assert_eq!(year(date, *now_year), Some(*want), "{date} in {now_year}");
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
