//! The primary cache key (RFC 9111 2): the target URI, normalized as RFC 9110 4.2.3 allows:
//! scheme and host lowercased, the scheme's default port removed, an empty path made `/`,
//! percent-encoded octets of unreserved characters decoded and other percent-encodings
//! uppercased. The query is part of the key, as received.
//!
//! The key holds no method: only GET responses are stored ([`super::storable::storable`]), and
//! HEAD is answered from them.

use std::fmt;

use http::header::HOST;
use http::{Uri, request};

/// A primary cache key: `scheme://host[:port]/path[?query]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

/// Why a request has no cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// Neither an absolute-form target nor a Host field.
    NoHost,
    /// The host is not a valid authority.
    BadHost,
    /// The target is `*` or an authority-form (CONNECT).
    NotOriginForm,
}

impl KeyError {
    /// For logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyError::NoHost => "no-host",
            KeyError::BadHost => "bad-host",
            KeyError::NotOriginForm => "not-origin-form",
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for KeyError {}

impl CacheKey {
    /// The key of a request. `default_scheme` (`"http"` or `"https"`) applies to origin-form
    /// targets, where the scheme is the connection's. The host comes from an absolute-form target,
    /// else from Host (RFC 9112 3.2.2: an absolute-form target's authority wins).
    pub fn from_parts(req: &request::Parts, default_scheme: &str) -> Result<Self, KeyError> {
        let uri = &req.uri;
        // RFC 9112 3.2: more than one Host field is a 400 (two parsers could each pick another).
        if req.headers.get_all(HOST).iter().nth(1).is_some() {
            return Err(KeyError::BadHost);
        }
        let scheme = uri.scheme_str().unwrap_or(default_scheme);
        let authority = match uri.authority() {
            Some(a) => a.as_str().to_string(),
            None => req
                .headers
                .get(HOST)
                .ok_or(KeyError::NoHost)?
                .to_str()
                .map_err(|_| KeyError::BadHost)?
                .to_string(),
        };
        let path = uri.path();
        if path == "*" || (uri.authority().is_some() && uri.scheme().is_none()) {
            return Err(KeyError::NotOriginForm);
        }
        Self::build(scheme, &authority, path, uri.query())
    }

    /// The key of an absolute URI (for invalidation of Location and Content-Location).
    pub fn from_uri(uri: &Uri) -> Result<Self, KeyError> {
        let scheme = uri.scheme_str().ok_or(KeyError::NotOriginForm)?;
        let authority = uri.authority().ok_or(KeyError::NoHost)?;
        Self::build(scheme, authority.as_str(), uri.path(), uri.query())
    }

    fn build(
        scheme: &str,
        authority: &str,
        path: &str,
        query: Option<&str>,
    ) -> Result<Self, KeyError> {
        let scheme = scheme.to_ascii_lowercase();
        let host = normalize_authority(&scheme, authority)?;
        let mut key = String::with_capacity(scheme.len() + host.len() + path.len() + 8);
        key.push_str(&scheme);
        key.push_str("://");
        key.push_str(&host);
        if path.is_empty() {
            key.push('/');
        } else {
            normalize_percent(path, &mut key);
        }
        if let Some(q) = query {
            key.push('?');
            normalize_percent(q, &mut key);
        }
        Ok(CacheKey(key))
    }

    /// The key as bytes, for the store.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `scheme://host[:port]`: the origin (RFC 6454) of the key, for same-origin checks.
    pub fn origin(&self) -> &str {
        let after_scheme = self.0.find("://").map_or(0, |i| i + 3);
        let end = self.0[after_scheme..]
            .find('/')
            .map_or(self.0.len(), |i| after_scheme + i);
        &self.0[..end]
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn default_port(scheme: &str) -> Option<&'static str> {
    match scheme {
        "http" => Some("80"),
        "https" => Some("443"),
        _ => None,
    }
}

fn normalize_authority(scheme: &str, authority: &str) -> Result<String, KeyError> {
    // userinfo is not part of the identity of a resource for caching purposes.
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if authority.is_empty() {
        return Err(KeyError::NoHost);
    }
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(end) => {
                let rest = &authority[end + 1..];
                match rest.strip_prefix(':') {
                    Some(p) => (&authority[..=end], Some(p)),
                    None if rest.is_empty() => (authority, None),
                    None => return Err(KeyError::BadHost),
                }
            }
            None => return Err(KeyError::BadHost),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if !valid_host(host) {
        return Err(KeyError::BadHost);
    }
    let mut out = host.to_ascii_lowercase();
    match port {
        // RFC 9110 4.2.3: an empty port or the default port is the same as no port.
        None | Some("") => {}
        Some(p) if !p.bytes().all(|b| b.is_ascii_digit()) => return Err(KeyError::BadHost),
        Some(p) => {
            let p = p.trim_start_matches('0');
            let p = if p.is_empty() { "0" } else { p };
            if Some(p) != default_port(scheme) {
                out.push(':');
                out.push_str(p);
            }
        }
    }
    Ok(out)
}

/// RFC 3986 3.2.2: `IP-literal` (brackets around an IPv6 address or IPvFuture: checked to
/// their allowed characters) or `reg-name` of unreserved characters and sub-delims. A
/// percent-encoded host (which no DNS name needs, and which `http::Uri` refuses) is refused
/// too, so a key is always a URI.
fn valid_host(host: &str) -> bool {
    let b = host.as_bytes();
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return !inner.is_empty()
            && inner.bytes().all(|c| {
                c.is_ascii_hexdigit() || b":.vV".contains(&c) || is_unreserved(c) || is_sub_delim(c)
            });
    }
    if b.is_empty() {
        return false;
    }
    b.iter().all(|&c| is_unreserved(c) || is_sub_delim(c))
}

fn is_sub_delim(b: u8) -> bool {
    b"!$&'()*+,;=".contains(&b)
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decode `%XX` of unreserved characters, uppercase the hex digits of the others (RFC 3986
/// 6.2.2.1 and 6.2.2.2), and encode a stray `%` as `%25`.
fn normalize_percent(s: &str, out: &mut String) {
    let b = s.as_bytes();
    let mut bytes = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            let byte = h * 16 + l;
            if is_unreserved(byte) {
                bytes.push(byte);
            } else {
                bytes.extend_from_slice(&[
                    b'%',
                    b[i + 1].to_ascii_uppercase(),
                    b[i + 2].to_ascii_uppercase(),
                ]);
            }
            i += 3;
            continue;
        }
        if b[i] == b'%' {
            // A `%` that starts no triplet is the octet itself: encoded, so that a decoded
            // neighbour (`%%41` is `%` then `A`) cannot make a new triplet of it, and
            // normalizing a key again gives the same key.
            bytes.extend_from_slice(b"%25");
        } else {
            bytes.push(b[i]);
        }
        i += 1;
    }
    out.push_str(&String::from_utf8_lossy(&bytes));
}
