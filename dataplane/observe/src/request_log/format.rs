//! One access-log line, as JSON (one object a line) or in the combined log format with
//! EdgeCache's fields appended as `key=value`. Pure: the caller gives every value, the time
//! included.

use std::fmt::Write;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest request target, Host, User-Agent and Referer written (in bytes; longer ones are
/// cut and end with `...`), so a line stays near one atomic pipe write (`PIPE_BUF`).
pub const MAX_TARGET: usize = 2048;
pub const MAX_HEADER: usize = 512;

/// Everything one line says.
#[derive(Debug, Clone)]
pub struct Line<'a> {
    /// When the request's head was read.
    pub time: SystemTime,
    pub client: SocketAddr,
    pub method: &'a str,
    /// The site: the target's authority, or Host.
    pub host: &'a str,
    /// Path and query as received.
    pub target: &'a str,
    pub protocol: &'static str,
    pub tls: Option<&'static str>,
    pub status: u16,
    /// Body bytes handed to the connection.
    pub bytes: u64,
    /// The outcome label (src/request_log/outcome.rs).
    pub cache: &'static str,
    /// This cache's Cache-Status member.
    pub cache_status: Option<&'a str>,
    /// To the response head; `None` when there was none.
    pub ttfb: Option<Duration>,
    /// To the end of the body (or its drop).
    pub total: Duration,
    pub origin: Option<SocketAddr>,
    /// The node that owns the key, when the miss went there (sharding).
    pub peer: Option<SocketAddr>,
    /// The body went out whole.
    pub completed: bool,
    pub user_agent: Option<&'a str>,
    pub referer: Option<&'a str>,
}

/// `line` as one JSON object and a newline, appended to `out`.
pub fn json(l: &Line<'_>, out: &mut String) {
    out.push_str("{\"time\":\"");
    rfc3339_ms(l.time, out);
    let _ = write!(
        out,
        "\",\"client\":\"{}\",\"client_port\":{},\"method\":",
        l.client.ip(),
        l.client.port()
    );
    json_str(l.method, MAX_HEADER, out);
    out.push_str(",\"host\":");
    json_str(l.host, MAX_HEADER, out);
    out.push_str(",\"path\":");
    json_str(l.target, MAX_TARGET, out);
    let _ = write!(out, ",\"protocol\":\"{}\",\"tls\":", l.protocol);
    json_opt(l.tls, MAX_HEADER, out);
    let _ = write!(
        out,
        ",\"status\":{},\"bytes\":{},\"cache\":\"{}\",\"cache_status\":",
        l.status, l.bytes, l.cache
    );
    json_opt(l.cache_status, MAX_HEADER, out);
    out.push_str(",\"ttfb_ms\":");
    match l.ttfb {
        Some(t) => millis(t, out),
        None => out.push_str("null"),
    }
    out.push_str(",\"total_ms\":");
    millis(l.total, out);
    out.push_str(",\"origin\":");
    json_addr(l.origin, out);
    out.push_str(",\"peer\":");
    json_addr(l.peer, out);
    let _ = write!(out, ",\"completed\":{},\"user_agent\":", l.completed);
    json_opt(l.user_agent, MAX_HEADER, out);
    out.push_str(",\"referer\":");
    json_opt(l.referer, MAX_HEADER, out);
    out.push_str("}\n");
}

/// `line` in the combined log format
/// (`%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i"`, time in UTC), then EdgeCache's
/// fields: `host cache cache_status ttfb_ms total_ms origin peer tls completed`, `-` for none.
pub fn combined(l: &Line<'_>, out: &mut String) {
    let _ = write!(out, "{} - - [", l.client.ip());
    clf_time(l.time, out);
    out.push_str("] \"");
    clf_escaped(l.method, MAX_HEADER, out);
    out.push(' ');
    clf_escaped(l.target, MAX_TARGET, out);
    let _ = write!(out, " {}\" {} {} ", l.protocol, l.status, l.bytes);
    clf_quoted(l.referer, out);
    out.push(' ');
    clf_quoted(l.user_agent, out);
    out.push_str(" host=");
    clf_quoted(Some(l.host), out);
    let _ = write!(out, " cache={} cache_status=", l.cache);
    clf_quoted(l.cache_status, out);
    out.push_str(" ttfb_ms=");
    match l.ttfb {
        Some(t) => millis(t, out),
        None => out.push('-'),
    }
    out.push_str(" total_ms=");
    millis(l.total, out);
    for (name, addr) in [(" origin=", l.origin), (" peer=", l.peer)] {
        out.push_str(name);
        match addr {
            Some(a) => {
                let _ = write!(out, "{a}");
            }
            None => out.push('-'),
        }
    }
    let _ = writeln!(
        out,
        " tls={} completed={}",
        l.tls.unwrap_or("-"),
        u8::from(l.completed)
    );
}

/// Milliseconds with three decimals (microseconds).
fn millis(d: Duration, out: &mut String) {
    let us = d.as_micros();
    let _ = write!(out, "{}.{:03}", us / 1000, us % 1000);
}

fn json_addr(a: Option<SocketAddr>, out: &mut String) {
    match a {
        Some(a) => {
            let _ = write!(out, "\"{a}\"");
        }
        None => out.push_str("null"),
    }
}

fn json_opt(s: Option<&str>, max: usize, out: &mut String) {
    match s {
        Some(s) => json_str(s, max, out),
        None => out.push_str("null"),
    }
}

/// `s` cut to `max` bytes (at a character boundary, marked with `...`).
fn cut(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// A JSON string: `"` and `\` escaped, control characters as `\u00XX`.
fn json_str(s: &str, max: usize, out: &mut String) {
    let (s, cut_off) = cut(s, max);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    if cut_off {
        out.push_str("...");
    }
    out.push('"');
}

/// The combined format's escaping (nginx `escape=default`): `"`, `\`, control characters and
/// bytes outside printable ASCII as `\xHH`.
fn clf_escaped(s: &str, max: usize, out: &mut String) {
    let (s, cut_off) = cut(s, max);
    for b in s.bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
    if cut_off {
        out.push_str("...");
    }
}

fn clf_quoted(s: Option<&str>, out: &mut String) {
    out.push('"');
    match s {
        Some(s) => clf_escaped(s, MAX_HEADER, out),
        None => out.push('-'),
    }
    out.push('"');
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (days since the epoch, seconds into the day, milliseconds); times before 1970 are the epoch.
fn split(t: SystemTime) -> (i64, u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    ((secs / 86_400) as i64, secs % 86_400, d.subsec_millis())
}

/// RFC 3339 in UTC with milliseconds: `2026-12-01T21:20:35.123Z`.
pub fn rfc3339_ms(t: SystemTime, out: &mut String) {
    let (days, s, ms) = split(t);
    let (y, mo, d) = civil(days);
    let _ = write!(
        out,
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    );
}

/// The common log format's time in UTC: `01/Dec/2026:21:20:35 +0000`.
pub fn clf_time(t: SystemTime, out: &mut String) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (days, s, _) = split(t);
    let (y, mo, d) = civil(days);
    let month = MONTHS.get(mo as usize - 1).copied().unwrap_or("Jan");
    let _ = write!(
        out,
        "{d:02}/{month}/{y:04}:{:02}:{:02}:{:02} +0000",
        s / 3600,
        s / 60 % 60,
        s % 60
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(secs * 1000 + ms)
    }

    fn line() -> Line<'static> {
        Line {
            time: at(1_796_160_035, 123),
            client: "10.1.2.3:5555".parse().unwrap(),
            method: "GET",
            host: "www.example",
            target: "/a/b?c=\"d\"",
            protocol: "HTTP/1.1",
            tls: None,
            status: 200,
            bytes: 1024,
            cache: "hit",
            cache_status: Some("edgecache; hit; ttl=3600"),
            ttfb: Some(Duration::from_micros(412)),
            total: Duration::from_micros(1_530),
            origin: None,
            peer: None,
            completed: true,
            user_agent: Some("curl/7.88.1"),
            referer: None,
        }
    }

    #[test]
    fn times() {
        let cases = [
            (
                0,
                0,
                "1970-01-01T00:00:00.000Z",
                "01/Jan/1970:00:00:00 +0000",
            ),
            (
                951_782_400,
                7,
                "2000-02-29T00:00:00.007Z",
                "29/Feb/2000:00:00:00 +0000",
            ),
            (
                1_796_160_035,
                123,
                "2026-12-01T21:20:35.123Z",
                "01/Dec/2026:21:20:35 +0000",
            ),
            (
                4_107_542_399,
                999,
                "2100-02-28T23:59:59.999Z",
                "28/Feb/2100:23:59:59 +0000",
            ),
        ];
        for (secs, ms, rfc, clf) in cases {
            let (mut a, mut b) = (String::new(), String::new());
            rfc3339_ms(at(secs, ms), &mut a);
            clf_time(at(secs, ms), &mut b);
            assert_eq!((a.as_str(), b.as_str()), (rfc, clf), "{secs}");
        }
    }

    #[test]
    fn a_json_line_parses_with_every_field() {
        let mut out = String::new();
        json(&line(), &mut out);
        assert!(out.ends_with("}\n") && !out[..out.len() - 1].contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["time"], "2026-12-01T21:20:35.123Z");
        assert_eq!(v["client"], "10.1.2.3");
        assert_eq!(v["client_port"], 5555);
        assert_eq!(v["path"], "/a/b?c=\"d\"");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes"], 1024);
        assert_eq!(v["cache"], "hit");
        assert_eq!(v["ttfb_ms"], 0.412);
        assert_eq!(v["total_ms"], 1.53);
        assert!(v["tls"].is_null() && v["origin"].is_null() && v["referer"].is_null());
        assert_eq!(v["completed"], true);

        let mut l = line();
        l.ttfb = None;
        l.origin = Some("127.0.0.1:8000".parse().unwrap());
        l.user_agent = Some("evil\n\"agent\"\u{1}");
        let mut out = String::new();
        json(&l, &mut out);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(v["ttfb_ms"].is_null());
        assert_eq!(v["origin"], "127.0.0.1:8000");
        assert_eq!(v["user_agent"], "evil\n\"agent\"\u{1}");
    }

    #[test]
    fn a_combined_line() {
        let mut out = String::new();
        combined(&line(), &mut out);
        assert_eq!(
            out,
            "10.1.2.3 - - [01/Dec/2026:21:20:35 +0000] \"GET /a/b?c=\\x22d\\x22 HTTP/1.1\" 200 \
             1024 \"-\" \"curl/7.88.1\" host=\"www.example\" cache=hit \
             cache_status=\"edgecache; hit; ttl=3600\" ttfb_ms=0.412 total_ms=1.530 origin=- \
             peer=- tls=- completed=1\n"
        );
    }

    #[test]
    fn long_values_are_cut() {
        let mut l = line();
        let long = "é".repeat(MAX_HEADER);
        l.user_agent = Some(&long);
        let mut out = String::new();
        json(&l, &mut out);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let ua = v["user_agent"].as_str().unwrap();
        assert!(
            ua.ends_with("...") && ua.len() <= MAX_HEADER + 3,
            "{}",
            ua.len()
        );
    }
}
