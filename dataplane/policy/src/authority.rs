//! The one authority of a request (RFC 9112 3.2.2, RFC 9113 8.3.1): the absolute-form target's
//! authority, else the Host field (an HTTP/2 request's `:authority` arrives as Host), parsed
//! once into a normalised `host[:port]` that site routing, the cache key, the origin's Host,
//! purges, logs and metrics all take. Two parsers of one value are how a request for one site
//! becomes a cache entry of another; so this is the only one.
//!
//! What it accepts is narrower than RFC 3986's `authority`, on purpose:
//! - no userinfo (RFC 9110 4.2.4: a recipient should treat it as an error; it is how
//!   `b.test:1@a.test` once meant `b.test` to one parser and `a.test` to another);
//! - a DNS name of ASCII labels (letters, digits, `-`, `_`), each 1 to 63 octets, at most 253
//!   in all, lower-cased, one trailing dot removed; internationalised names only as A-labels
//!   (`xn--...`), never as raw UTF-8 or percent-encoded octets;
//! - or an IPv4 address, or an IPv6 address in brackets (no zone, no IPvFuture);
//! - a port of 1 to 65535 digits, dropped when it is the scheme's default.

use std::fmt;
use std::net::Ipv6Addr;

use http::header::{HOST, HeaderMap};
use http::{Uri, request};

/// A normalised authority: `host` or `host:port`, the port only when it is not the scheme's
/// default.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Authority {
    text: String,
    /// The end of the host in `text`.
    host_end: usize,
}

/// Why a request has no authority it may be served under: each is a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorityError {
    /// Neither an absolute-form target nor a Host field.
    Missing,
    /// More than one Host field (RFC 9112 3.2).
    TwoHosts,
    /// `user@host`.
    Userinfo,
    /// Not a DNS name of ASCII labels nor an IP literal.
    BadHost,
    /// Not a port number.
    BadPort,
}

impl AuthorityError {
    /// For logs, metrics and the 400's text.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorityError::Missing => "no-host",
            AuthorityError::TwoHosts => "two-hosts",
            AuthorityError::Userinfo => "userinfo",
            AuthorityError::BadHost => "bad-host",
            AuthorityError::BadPort => "bad-port",
        }
    }
}

impl fmt::Display for AuthorityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for AuthorityError {}

/// The default port of a scheme (`http` and `https`; others have none here).
pub fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

impl Authority {
    /// The authority of a request head: its absolute-form target's authority (which wins over
    /// Host, RFC 9112 3.2.2), else its one Host field. `scheme` is the listener's (`http` or
    /// `https`), whose default port is dropped.
    pub fn of_request(parts: &request::Parts, scheme: &str) -> Result<Self, AuthorityError> {
        Self::of_head(&parts.uri, &parts.headers, scheme)
    }

    /// [`Authority::of_request`] of a head's target and fields.
    pub fn of_head(uri: &Uri, headers: &HeaderMap, scheme: &str) -> Result<Self, AuthorityError> {
        let mut hosts = headers.get_all(HOST).iter();
        let host = hosts.next();
        if hosts.next().is_some() {
            return Err(AuthorityError::TwoHosts);
        }
        if let Some(a) = uri.authority() {
            return Self::parse(a.as_str(), scheme);
        }
        let host = host.ok_or(AuthorityError::Missing)?;
        let text = host.to_str().map_err(|_| AuthorityError::BadHost)?;
        Self::parse(text, scheme)
    }

    /// Parse and normalise `raw` (`host[:port]`, as a Host field or a URI's authority holds it).
    pub fn parse(raw: &str, scheme: &str) -> Result<Self, AuthorityError> {
        if raw.is_empty() {
            return Err(AuthorityError::Missing);
        }
        if raw.as_bytes().contains(&b'@') {
            return Err(AuthorityError::Userinfo);
        }
        let (host, port) = split_port(raw)?;
        let mut text = String::with_capacity(raw.len());
        if let Some(v6) = host.strip_prefix('[') {
            let inner = v6.strip_suffix(']').ok_or(AuthorityError::BadHost)?;
            // No zone (`%25eth0`) and no IPvFuture: only an address std can read.
            let addr: Ipv6Addr = inner.parse().map_err(|_| AuthorityError::BadHost)?;
            text.push('[');
            text.push_str(&addr.to_string());
            text.push(']');
        } else {
            let name = host.strip_suffix('.').unwrap_or(host);
            if !dns_name(name) {
                return Err(AuthorityError::BadHost);
            }
            text.push_str(name);
            text.make_ascii_lowercase();
        }
        let host_end = text.len();
        if let Some(p) = port
            && Some(p) != default_port(scheme)
        {
            text.push(':');
            crate::syntax::push_decimal(&mut text, u64::from(p));
        }
        Ok(Self { text, host_end })
    }

    /// The same authority normalised for `scheme` instead of the one it was parsed for: without
    /// its port when that is `scheme`'s default (`a.test:80` parsed for `https` is `a.test` for
    /// `http`). No parsing: the host is already normal.
    pub fn for_scheme(&self, scheme: &str) -> std::borrow::Cow<'_, Authority> {
        match self.port() {
            Some(p) if Some(p) == default_port(scheme) => std::borrow::Cow::Owned(Authority {
                text: self.text[..self.host_end].to_string(),
                host_end: self.host_end,
            }),
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// `host` or `host:port`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host alone: a lower-case name without a trailing dot, or `[v6]`.
    pub fn host(&self) -> &str {
        &self.text[..self.host_end]
    }

    /// The port, when it is not the scheme's default.
    pub fn port(&self) -> Option<u16> {
        self.text[self.host_end..]
            .strip_prefix(':')
            .and_then(|p| p.parse().ok())
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `host` and its port, if any (an empty port is none: RFC 9110 4.2.3).
fn split_port(raw: &str) -> Result<(&str, Option<u16>), AuthorityError> {
    let (host, port) = if raw.starts_with('[') {
        let end = raw.find(']').ok_or(AuthorityError::BadHost)?;
        let rest = &raw[end + 1..];
        match rest.strip_prefix(':') {
            Some(p) => (&raw[..=end], p),
            None if rest.is_empty() => (raw, ""),
            None => return Err(AuthorityError::BadHost),
        }
    } else {
        match raw.bytes().position(|b| b == b':') {
            Some(i) => (&raw[..i], &raw[i + 1..]),
            None => (raw, ""),
        }
    };
    if port.is_empty() {
        return Ok((host, None));
    }
    if port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthorityError::BadPort);
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(AuthorityError::BadPort),
        Ok(p) => Ok((host, Some(p))),
    }
}

/// Labels of ASCII letters, digits, `-` and `_`, each 1 to 63 octets, at most 253 in all.
/// (A dotted IPv4 address is such a name too.)
fn dns_name(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    // One pass over the bytes: the length of the label so far.
    let mut label = 0usize;
    for b in name.bytes() {
        if b == b'.' {
            if label == 0 {
                return false;
            }
            label = 0;
        } else if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            label += 1;
            if label > 63 {
                return false;
            }
        } else {
            return false;
        }
    }
    label > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str, scheme: &str) -> String {
        Authority::parse(raw, scheme)
            .unwrap_or_else(|e| panic!("{raw}: {e}"))
            .to_string()
    }

    fn err(raw: &str) -> AuthorityError {
        Authority::parse(raw, "http").expect_err(raw)
    }

    #[test]
    fn names_are_lower_cased_without_one_trailing_dot_or_the_default_port() {
        for (raw, scheme, want) in [
            ("www.a.test", "http", "www.a.test"),
            ("WWW.A.Test", "http", "www.a.test"),
            ("www.a.test.", "http", "www.a.test"),
            ("www.a.test:80", "http", "www.a.test"),
            ("www.a.test.:80", "http", "www.a.test"),
            ("www.a.test:080", "http", "www.a.test"),
            ("www.a.test:", "http", "www.a.test"),
            ("www.a.test:443", "http", "www.a.test:443"),
            ("www.a.test:443", "https", "www.a.test"),
            ("www.a.test:80", "https", "www.a.test:80"),
            ("www.a.test:8080", "http", "www.a.test:8080"),
            ("xn--bcher-kva.test", "http", "xn--bcher-kva.test"),
            ("_dmarc.a.test", "http", "_dmarc.a.test"),
            ("127.0.0.1:18080", "http", "127.0.0.1:18080"),
            ("localhost", "http", "localhost"),
            ("[::1]", "http", "[::1]"),
            ("[::1]:80", "http", "[::1]"),
            ("[0:0::1]:8080", "http", "[::1]:8080"),
            ("[2001:DB8::A]", "http", "[2001:db8::a]"),
            ("[::ffff:1.2.3.4]", "http", "[::ffff:1.2.3.4]"),
        ] {
            assert_eq!(ok(raw, scheme), want, "{raw} over {scheme}");
        }
        let a = Authority::parse("WWW.A.test.:8080", "http").unwrap();
        assert_eq!((a.host(), a.port()), ("www.a.test", Some(8080)));
        let a = Authority::parse("[::1]:80", "http").unwrap();
        assert_eq!((a.host(), a.port()), ("[::1]", None));
    }

    #[test]
    fn every_port_is_written_as_the_formatter_writes_it() {
        for p in 1..=u16::MAX {
            let want = if p == 80 {
                "a.test".to_string()
            } else {
                format!("a.test:{p}")
            };
            assert_eq!(ok(&format!("a.test:{p}"), "http"), want);
            // A leading zero is not written back (five digits at most).
            if p < 10_000 {
                assert_eq!(ok(&format!("a.test:0{p}"), "http"), want);
            }
        }
    }

    #[test]
    fn hostile_forms_are_refused() {
        use AuthorityError::*;
        for (raw, want) in [
            ("", Missing),
            ("www.b.test:1@www.a.test", Userinfo),
            ("x@www.a.test", Userinfo),
            ("@www.a.test", Userinfo),
            ("www.a.test@", Userinfo),
            ("user:pass@www.a.test:80", Userinfo),
            ("www.a.test..", BadHost),
            ("..", BadHost),
            (".", BadHost),
            (".www.a.test", BadHost),
            ("www..a.test", BadHost),
            ("www.a.test%2e", BadHost),
            ("www%2ea.test", BadHost),
            ("%77ww.a.test", BadHost),
            ("www.a.test/x", BadHost),
            ("www.a.test\\x", BadHost),
            ("www.a.test?x", BadHost),
            ("www.a.test#x", BadHost),
            ("www.a.test x", BadHost),
            ("www.a.test,www.b.test", BadHost),
            ("www.a.test;x", BadHost),
            ("bücher.test", BadHost),
            ("www.a.test:1:2", BadPort),
            ("www.a.test:x", BadPort),
            ("www.a.test:-1", BadPort),
            ("www.a.test:+80", BadPort),
            ("www.a.test:0", BadPort),
            ("www.a.test:65536", BadPort),
            ("www.a.test:000080", BadPort),
            (":80", BadHost),
            ("[::1", BadHost),
            ("::1", BadPort),
            ("[::1]x", BadHost),
            ("[::1]:x", BadPort),
            ("[]", BadHost),
            ("[fe80::1%25eth0]", BadHost),
            ("[v1.fe80::a+en1]", BadHost),
            ("[1.2.3.4]", BadHost),
            ("[::1]]", BadHost),
        ] {
            assert_eq!(err(raw), want, "{raw:?}");
        }
        let long = format!("{}.test", "a".repeat(64));
        assert_eq!(err(&long), AuthorityError::BadHost);
        let long = vec!["a".repeat(63); 5].join(".");
        assert_eq!(err(&long), AuthorityError::BadHost, "over 253 octets");
        let fits = format!("{}.{}", vec!["a".repeat(63); 3].join("."), "a".repeat(61));
        assert_eq!(ok(&fits, "http").len(), 253);
    }

    fn head(target: &str, hosts: &[&str]) -> request::Parts {
        let mut b = http::Request::get(target);
        for h in hosts {
            b = b.header(HOST, *h);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_absolute_form_target_wins_over_host_and_two_hosts_are_refused() {
        let a = |t, h: &[&str]| Authority::of_request(&head(t, h), "http");
        assert_eq!(a("/x", &["www.a.test"]).unwrap().as_str(), "www.a.test");
        assert_eq!(
            a("http://www.b.test/x", &["www.a.test"]).unwrap().as_str(),
            "www.b.test"
        );
        assert_eq!(
            a("http://www.b.test/x", &[]).unwrap().as_str(),
            "www.b.test"
        );
        assert_eq!(
            a("http://www.b.test:1@www.a.test/x", &["www.a.test"]),
            Err(AuthorityError::Userinfo)
        );
        assert_eq!(
            a("/x", &["www.a.test", "www.a.test"]),
            Err(AuthorityError::TwoHosts)
        );
        assert_eq!(
            a("http://www.a.test/x", &["www.a.test", "www.b.test"]),
            Err(AuthorityError::TwoHosts)
        );
        assert_eq!(a("/x", &[]), Err(AuthorityError::Missing));
    }

    #[test]
    fn a_normalised_authority_parses_to_itself() {
        for raw in ["a.test", "a.test:8080", "[::1]", "[::1]:8", "1.2.3.4:5"] {
            let a = Authority::parse(raw, "http").unwrap();
            assert_eq!(Authority::parse(a.as_str(), "http").unwrap(), a);
        }
    }
}
