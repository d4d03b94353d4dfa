//! The primary cache key (RFC 9111 2): the target URI, normalized as RFC 9110 4.2.3 allows:
//! scheme lowercased, the authority as [`crate::authority`] normalises it (host lowercased
//! without a trailing dot, the scheme's default port removed), an empty path made `/`,
//! percent-encoded octets of unreserved characters decoded and other percent-encodings
//! uppercased. The query is part of the key, as received.
//!
//! The key holds no method: only GET responses are stored ([`super::storable::storable`]), and
//! HEAD is answered from them.

use std::fmt;

use http::{Uri, request};

use crate::authority::{Authority, AuthorityError};

/// A primary cache key: `scheme://host[:port]/path[?query]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

/// Why a request has no cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// No authority it may be keyed under ([`crate::authority`]).
    Authority(AuthorityError),
    /// The target is `*` or an authority-form (CONNECT).
    NotOriginForm,
}

impl KeyError {
    /// For logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyError::Authority(e) => e.as_str(),
            KeyError::NotOriginForm => "not-origin-form",
        }
    }
}

impl From<AuthorityError> for KeyError {
    fn from(e: AuthorityError) -> Self {
        KeyError::Authority(e)
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
    /// targets, where the scheme is the connection's. The authority is the request's one: the
    /// [`Authority`] in its extensions when routing put it there (normalised for the key's
    /// scheme, without parsing again), else [`Authority::of_request`] (an absolute-form
    /// target's, else Host's).
    pub fn from_parts(req: &request::Parts, default_scheme: &str) -> Result<Self, KeyError> {
        let uri = &req.uri;
        let path = uri.path();
        if path == "*" || (uri.authority().is_some() && uri.scheme().is_none()) {
            return Err(KeyError::NotOriginForm);
        }
        let scheme = uri.scheme_str().unwrap_or(default_scheme);
        if uri.authority().is_none()
            && let Some(routed) = req.extensions.get::<Authority>()
        {
            return Ok(Self::new(
                scheme,
                &routed.for_scheme(scheme),
                path,
                uri.query(),
            ));
        }
        let authority = Authority::of_request(req, scheme)?;
        Ok(Self::new(scheme, &authority, path, uri.query()))
    }

    /// The key of an absolute URI (for invalidation of Location and Content-Location).
    pub fn from_uri(uri: &Uri) -> Result<Self, KeyError> {
        let scheme = uri.scheme_str().ok_or(KeyError::NotOriginForm)?;
        let authority = uri.authority().ok_or(AuthorityError::Missing)?;
        let authority = Authority::parse(authority.as_str(), scheme)?;
        Ok(Self::new(scheme, &authority, uri.path(), uri.query()))
    }

    /// The key of `path` and `query` under an authority already normalised for `scheme`.
    pub fn new(scheme: &str, authority: &Authority, path: &str, query: Option<&str>) -> Self {
        let host = authority.as_str();
        let mut key = String::with_capacity(scheme.len() + host.len() + path.len() + 8);
        key.extend(scheme.chars().map(|c| c.to_ascii_lowercase()));
        key.push_str("://");
        key.push_str(host);
        if path.is_empty() {
            key.push('/');
        } else {
            normalize_percent(path, &mut key);
        }
        if let Some(q) = query {
            key.push('?');
            normalize_percent(q, &mut key);
        }
        CacheKey(key)
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
    // Most targets have no `%` at all: they are their own normal form, copied as they are.
    if !s.as_bytes().contains(&b'%') {
        out.push_str(s);
        return;
    }
    normalize_triplets(s, out);
}

/// [`normalize_percent`] of text that has a `%`, byte by byte.
fn normalize_triplets(s: &str, out: &mut String) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_without_a_percent_is_copied_as_the_triplet_pass_writes_it() {
        for s in [
            "",
            "/",
            "/a/b.css",
            "/Mixed/Case-_.~!$&'()*+,;=:@",
            "/é/ü",
            "a=1&b=two",
            "/%41",
            "/%zz%",
        ] {
            let (mut fast, mut general) = (String::new(), String::new());
            normalize_percent(s, &mut fast);
            normalize_triplets(s, &mut general);
            assert_eq!(fast, general, "{s}");
        }
    }
}
