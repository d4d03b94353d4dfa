//! The Cache-Status response field (RFC 9211): one list member per cache, appended to what the
//! origin and the caches before this one wrote (2: "caches SHOULD preserve the existing field
//! value").
//!
//! ```
//! use edgecache_policy::status::{CacheStatus, Fwd};
//! assert_eq!(CacheStatus::hit("edgecache").ttl(42).to_string(), "edgecache; hit; ttl=42");
//! assert_eq!(
//!     CacheStatus::forward("edgecache", Fwd::UriMiss).stored(true).to_string(),
//!     "edgecache; fwd=uri-miss; stored"
//! );
//! assert_eq!(
//!     CacheStatus::forward("edgecache", Fwd::Stale).fwd_status(304).to_string(),
//!     "edgecache; fwd=stale; fwd-status=304"
//! );
//! ```

use std::fmt;

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

/// The field name.
pub const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// Why the request went forward (RFC 9211 2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// The cache was configured not to handle this request.
    Bypass,
    /// The request method's semantics require forwarding.
    Method,
    /// No stored response for the URI.
    UriMiss,
    /// Stored responses for the URI, none selected by Vary.
    VaryMiss,
    /// No usable stored response (when uri-miss and vary-miss cannot be told apart).
    Miss,
    /// A fresh response was selected, but the request's directives did not allow it.
    Request,
    /// A stale response was selected (or one requiring validation).
    Stale,
    /// A partial response was selected, lacking requested ranges.
    Partial,
}

impl Fwd {
    /// The parameter value.
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::Bypass => "bypass",
            Fwd::Method => "method",
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Miss => "miss",
            Fwd::Request => "request",
            Fwd::Stale => "stale",
            Fwd::Partial => "partial",
        }
    }
}

/// One Cache-Status list member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStatus {
    name: String,
    hit: bool,
    fwd: Option<Fwd>,
    fwd_status: Option<u16>,
    ttl: Option<i64>,
    stored: bool,
    collapsed: bool,
    key: Option<String>,
    detail: Option<String>,
}

impl CacheStatus {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            hit: false,
            fwd: None,
            fwd_status: None,
            ttl: None,
            stored: false,
            collapsed: false,
            key: None,
            detail: None,
        }
    }

    /// Served from storage without going forward.
    pub fn hit(name: &str) -> Self {
        Self {
            hit: true,
            ..Self::new(name)
        }
    }

    /// Went forward towards the origin.
    pub fn forward(name: &str, fwd: Fwd) -> Self {
        Self {
            fwd: Some(fwd),
            ..Self::new(name)
        }
    }

    /// Neither hit nor forwarded (e.g. a 504 for only-if-cached); usually with a detail.
    pub fn none(name: &str) -> Self {
        Self::new(name)
    }

    /// The status code the next hop answered with.
    pub fn fwd_status(mut self, status: u16) -> Self {
        self.fwd_status = Some(status);
        self
    }

    /// Remaining freshness in seconds; negative when served stale.
    pub fn ttl(mut self, secs: i64) -> Self {
        self.ttl = Some(secs);
        self
    }

    /// Whether the forwarded response was stored.
    pub fn stored(mut self, stored: bool) -> Self {
        self.stored = stored;
        self
    }

    /// Whether the request was collapsed into another one going forward.
    pub fn collapsed(mut self, collapsed: bool) -> Self {
        self.collapsed = collapsed;
        self
    }

    /// The cache key (for debugging).
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_string());
        self
    }

    /// Implementation-specific detail, e.g. a [`super::storable::NoStoreReason`] string.
    pub fn detail(mut self, detail: &str) -> Self {
        self.detail = Some(detail.to_string());
        self
    }

    /// The field value (always valid: names and strings are serialized as sf-token or
    /// sf-string, dropping bytes a string cannot carry).
    pub fn header_value(&self) -> HeaderValue {
        // Written once into a buffer sized for it, then handed over without another copy. A
        // plain hit (`name; hit; ttl=N`, most responses) is written without the formatter.
        let plain_hit = self.hit
            && self.fwd.is_none()
            && self.fwd_status.is_none()
            && !self.stored
            && !self.collapsed
            && self.key.is_none()
            && self.detail.is_none()
            && is_sf_token(&self.name);
        if plain_hit {
            return plain_hit_value(&self.name, self.ttl);
        }
        let mut text = String::with_capacity(self.name.len() + 48);
        if fmt::Write::write_fmt(&mut text, format_args!("{self}")).is_err() {
            return HeaderValue::from_static("edgecache");
        }
        HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
            .unwrap_or(HeaderValue::from_static("edgecache"))
    }

    /// Append this member to the response's Cache-Status.
    pub fn append_to(&self, headers: &mut HeaderMap) {
        headers.append(CACHE_STATUS, self.header_value());
    }
}

/// `name; hit` or `name; hit; ttl=N` (`name` an sf-token), written into a buffer of exactly its
/// length: `Bytes` takes such a buffer over without a second allocation.
fn plain_hit_value(name: &str, ttl: Option<i64>) -> HeaderValue {
    let mut digits = [0u8; 20];
    let ttl = ttl.map(|t| (t < 0, super::syntax::decimal(t.unsigned_abs(), &mut digits)));
    let len = name.len()
        + "; hit".len()
        + ttl.map_or(0, |(minus, d)| {
            "; ttl=".len() + usize::from(minus) + d.len()
        });
    let mut text = Vec::with_capacity(len);
    text.extend_from_slice(name.as_bytes());
    text.extend_from_slice(b"; hit");
    if let Some((minus, d)) = ttl {
        text.extend_from_slice(b"; ttl=");
        if minus {
            text.push(b'-');
        }
        text.extend_from_slice(d);
    }
    HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
        .unwrap_or(HeaderValue::from_static("edgecache"))
}

fn is_sf_token(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'*')
        && b.iter()
            .all(|&c| super::syntax::is_tchar(c) || c == b':' || c == b'/')
}

fn write_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            f.write_str("\\")?;
        }
        write!(f, "{c}")?;
    }
    f.write_str("\"")
}

fn write_token_or_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    if is_sf_token(s) {
        f.write_str(s)
    } else {
        write_string(f, s)
    }
}

impl fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_token_or_string(f, &self.name)?;
        if self.hit {
            f.write_str("; hit")?;
        }
        if let Some(fwd) = self.fwd {
            write!(f, "; fwd={}", fwd.as_str())?;
        }
        if let Some(s) = self.fwd_status {
            write!(f, "; fwd-status={s}")?;
        }
        if let Some(ttl) = self.ttl {
            write!(f, "; ttl={ttl}")?;
        }
        if self.stored {
            f.write_str("; stored")?;
        }
        if self.collapsed {
            f.write_str("; collapsed")?;
        }
        if let Some(key) = &self.key {
            f.write_str("; key=")?;
            write_string(f, key)?;
        }
        if let Some(detail) = &self.detail {
            f.write_str("; detail=")?;
            write_token_or_string(f, detail)?;
        }
        Ok(())
    }
}
