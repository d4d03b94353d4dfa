//! Cache-Control (RFC 9111 5.2), the targeted fields CDN-Cache-Control (RFC 9213) and
//! `EdgeCache-Cache-Control`, and Pragma (RFC 9111 5.4).
//!
//! * Directive names are case-insensitive; arguments may be tokens or quoted strings, whatever
//!   the directive prefers (5.2: "recipients ought to accept both forms").
//! * A duplicated directive with an argument keeps its first occurrence (4.2.1: "either the first
//!   occurrence should be used or the response should be considered stale"). `no-cache` and
//!   `private` merge their occurrences to the most restrictive (4.2.1: "the most restrictive
//!   directive should be honored").
//! * An invalid delta-seconds argument (`max-age=-1`, `max-age=1.5`, `max-age=`) is kept as
//!   [`Delta::Invalid`]: as a freshness directive it makes the response stale (4.2.1: "consider
//!   responses that have invalid freshness information ... to be stale"). Values beyond 2^31
//!   clamp to 2^31 (1.2.2).

use http::HeaderMap;
use http::header::{CACHE_CONTROL, HeaderName, PRAGMA};

use super::syntax::{self, DELTA_SECONDS_MAX};

/// `CDN-Cache-Control` (RFC 9213): targeted at every CDN cache.
pub const CDN_CACHE_CONTROL: HeaderName = HeaderName::from_static("cdn-cache-control");
/// `EdgeCache-Cache-Control`: targeted at EdgeCache only, it wins over CDN-Cache-Control.
pub const EDGECACHE_CACHE_CONTROL: HeaderName = HeaderName::from_static("edgecache-cache-control");

/// The targeted fields this cache obeys, in precedence order (RFC 9213 2.2, "target list").
pub const TARGET_LIST: [HeaderName; 2] = [EDGECACHE_CACHE_CONTROL, CDN_CACHE_CONTROL];

/// A delta-seconds directive argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    /// A valid value in seconds, at most 2^31.
    Seconds(u64),
    /// Missing or not `1*DIGIT`.
    Invalid,
}

impl Delta {
    fn parse(arg: Option<&str>) -> Self {
        arg.map(syntax::unquote)
            .and_then(|s| syntax::delta_seconds(&s))
            .map_or(Delta::Invalid, Delta::Seconds)
    }

    /// The value, or `None` when invalid.
    pub fn seconds(self) -> Option<u64> {
        match self {
            Delta::Seconds(s) => Some(s),
            Delta::Invalid => None,
        }
    }
}

/// The scope of `no-cache` or `private`: the whole response, or only the listed fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Unqualified: applies to the whole response.
    All,
    /// Qualified with field names (RFC 9111 5.2.2.4, 5.2.2.7), lowercased.
    Fields(Vec<HeaderName>),
}

impl Scope {
    fn parse(arg: Option<&str>) -> Self {
        let Some(arg) = arg else { return Scope::All };
        let names = syntax::field_names(&syntax::unquote(arg));
        // `no-cache=""` names nothing usable: treat it as unqualified, the restrictive reading.
        if names.is_empty() {
            Scope::All
        } else {
            Scope::Fields(names)
        }
    }

    fn merge(self, other: Scope) -> Scope {
        match (self, other) {
            (Scope::Fields(mut a), Scope::Fields(b)) => {
                for n in b {
                    if !a.contains(&n) {
                        a.push(n);
                    }
                }
                Scope::Fields(a)
            }
            _ => Scope::All,
        }
    }

    /// The listed fields, empty for [`Scope::All`].
    pub fn fields(&self) -> &[HeaderName] {
        match self {
            Scope::All => &[],
            Scope::Fields(f) => f,
        }
    }
}

/// The request directive `max-stale` (RFC 9111 5.2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxStale {
    /// No argument: any staleness is acceptable.
    Any,
    /// Stale by at most this many seconds.
    Seconds(u64),
}

/// Parsed Cache-Control directives, request or response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age` (5.2.1.1 request, 5.2.2.1 response).
    pub max_age: Option<Delta>,
    /// `s-maxage` (5.2.2.10).
    pub s_maxage: Option<Delta>,
    /// `max-stale` (5.2.1.2). An invalid argument drops the directive.
    pub max_stale: Option<MaxStale>,
    /// `min-fresh` (5.2.1.3).
    pub min_fresh: Option<Delta>,
    /// `no-cache` (5.2.1.4 request, 5.2.2.4 response).
    pub no_cache: Option<Scope>,
    /// `no-store` (5.2.1.5, 5.2.2.5).
    pub no_store: bool,
    /// `no-transform` (5.2.1.6, 5.2.2.6).
    pub no_transform: bool,
    /// `only-if-cached` (5.2.1.7).
    pub only_if_cached: bool,
    /// `must-revalidate` (5.2.2.2).
    pub must_revalidate: bool,
    /// `must-understand` (5.2.2.3).
    pub must_understand: bool,
    /// `private` (5.2.2.7).
    pub private: Option<Scope>,
    /// `proxy-revalidate` (5.2.2.8).
    pub proxy_revalidate: bool,
    /// `public` (5.2.2.9).
    pub public: bool,
    /// `immutable` (RFC 8246); recorded, not acted upon.
    pub immutable: bool,
    /// `stale-while-revalidate` (RFC 5861 3).
    pub stale_while_revalidate: Option<Delta>,
    /// `stale-if-error` (RFC 5861 4).
    pub stale_if_error: Option<Delta>,
}

impl CacheControl {
    /// Parse one (combined) field value. Unknown directives are ignored (5.2.3).
    pub fn parse(value: &str) -> Self {
        let mut cc = CacheControl::default();
        for element in syntax::split_list(value) {
            // `token [ "=" ( token / quoted-string ) ]` (5.2): no whitespace around "=", so
            // `max-age = 5` names an unknown directive and is ignored.
            let (name, arg) = match element.split_once('=') {
                Some((n, a)) => (n, Some(a)),
                None => (element, None),
            };
            cc.apply(&name.to_ascii_lowercase(), arg);
        }
        cc
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        fn first(slot: &mut Option<Delta>, arg: Option<&str>) {
            if slot.is_none() {
                *slot = Some(Delta::parse(arg));
            }
        }
        match name {
            "max-age" => first(&mut self.max_age, arg),
            "s-maxage" => first(&mut self.s_maxage, arg),
            "min-fresh" => first(&mut self.min_fresh, arg),
            "stale-while-revalidate" => first(&mut self.stale_while_revalidate, arg),
            "stale-if-error" => first(&mut self.stale_if_error, arg),
            "max-stale" if self.max_stale.is_none() => {
                self.max_stale = match arg {
                    None => Some(MaxStale::Any),
                    Some(a) => syntax::delta_seconds(&syntax::unquote(a)).map(MaxStale::Seconds),
                };
            }
            "no-cache" => {
                let scope = Scope::parse(arg);
                self.no_cache = Some(match self.no_cache.take() {
                    Some(prev) => prev.merge(scope),
                    None => scope,
                });
            }
            "private" => {
                let scope = Scope::parse(arg);
                self.private = Some(match self.private.take() {
                    Some(prev) => prev.merge(scope),
                    None => scope,
                });
            }
            "no-store" => self.no_store = true,
            "no-transform" => self.no_transform = true,
            "only-if-cached" => self.only_if_cached = true,
            "must-revalidate" => self.must_revalidate = true,
            "must-understand" => self.must_understand = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "public" => self.public = true,
            "immutable" => self.immutable = true,
            _ => {}
        }
    }

    /// Parse every field line of `name`, or `None` when the field is absent.
    pub fn from_field(headers: &HeaderMap, name: &HeaderName) -> Option<Self> {
        syntax::combined(headers, name).map(|v| Self::parse(&v))
    }

    /// True when the stale response must not be served without validation by a shared cache
    /// (RFC 9111 4.2.4 and 5.2.2.2, 5.2.2.8, 5.2.2.10; RFC 5861 4).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate
            || self.proxy_revalidate
            || self.s_maxage.is_some()
            || self.no_cache == Some(Scope::All)
    }
}

/// Where the response directives this cache obeys came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `EdgeCache-Cache-Control`.
    EdgeCache,
    /// `CDN-Cache-Control` (RFC 9213).
    Cdn,
    /// `Cache-Control`.
    CacheControl,
    /// No cache directives at all.
    None,
}

impl Source {
    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::EdgeCache => "edgecache-cache-control",
            Source::Cdn => "cdn-cache-control",
            Source::CacheControl => "cache-control",
            Source::None => "none",
        }
    }

    /// True for a targeted field: then Expires is ignored too (RFC 9213 2.2).
    pub fn is_targeted(self) -> bool {
        matches!(self, Source::EdgeCache | Source::Cdn)
    }
}

/// The response directives that apply to this cache (RFC 9213 2.2): the first targeted field in
/// [`TARGET_LIST`] order with a valid value; otherwise Cache-Control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseDirectives {
    /// The directives.
    pub cc: CacheControl,
    /// Which field they came from.
    pub source: Source,
}

impl ResponseDirectives {
    /// Select and parse the directives of a response.
    pub fn of(headers: &HeaderMap) -> Self {
        for (name, source) in TARGET_LIST.iter().zip([Source::EdgeCache, Source::Cdn]) {
            if let Some(value) = syntax::combined(headers, name)
                && is_valid_targeted_value(&value)
            {
                return Self {
                    cc: CacheControl::parse(&value),
                    source,
                };
            }
        }
        match CacheControl::from_field(headers, &CACHE_CONTROL) {
            Some(cc) => Self {
                cc,
                source: Source::CacheControl,
            },
            None => Self {
                cc: CacheControl::default(),
                source: Source::None,
            },
        }
    }

    /// Whether Expires applies (it does not under a targeted field, RFC 9213 2.2).
    pub fn uses_expires(&self) -> bool {
        !self.source.is_targeted()
    }
}

/// The request directives (RFC 9111 5.2.1), with `Pragma: no-cache` standing in for
/// `Cache-Control: no-cache` when the request has no Cache-Control (5.4).
pub fn request_directives(headers: &HeaderMap) -> CacheControl {
    if let Some(cc) = CacheControl::from_field(headers, &CACHE_CONTROL) {
        return cc;
    }
    let mut cc = CacheControl::default();
    if let Some(pragma) = syntax::combined(headers, PRAGMA)
        && syntax::split_list(&pragma).any(|p| p.eq_ignore_ascii_case("no-cache"))
    {
        cc.no_cache = Some(Scope::All);
    }
    cc
}

/// A targeted field's value is a structured-field Dictionary (RFC 9213 2.1, RFC 8941 3.2); one
/// that does not parse as one is ignored, and the next field in the target list applies.
pub fn is_valid_targeted_value(value: &str) -> bool {
    let mut members = 0;
    for member in value.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() || !is_sf_member(member) {
            return false;
        }
        members += 1;
    }
    members > 0
}

fn is_sf_key(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_lowercase() || b[0] == b'*')
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(&c))
}

fn is_sf_bare_item(s: &str) -> bool {
    let b = s.as_bytes();
    match b.first() {
        None => false,
        Some(b'"') => {
            s.len() >= 2
                && s.ends_with('"')
                && b[1..b.len() - 1].iter().all(|&c| (0x20..0x7f).contains(&c))
        }
        Some(b'?') => s == "?0" || s == "?1",
        Some(b':') => s.len() >= 2 && s.ends_with(':'),
        Some(c) if c.is_ascii_digit() || *c == b'-' => {
            let digits = s.strip_prefix('-').unwrap_or(s);
            !digits.is_empty()
                && digits.len() <= 16
                && digits.bytes().all(|c| c.is_ascii_digit() || c == b'.')
                && digits.bytes().filter(|&c| c == b'.').count() <= 1
        }
        Some(c) if c.is_ascii_alphabetic() || *c == b'*' => s
            .bytes()
            .all(|c| syntax::is_tchar(c) || c == b':' || c == b'/'),
        Some(_) => false,
    }
}

fn is_sf_member(member: &str) -> bool {
    // A quoted string may contain `;`; parameters are rare in cache directives, so split only
    // outside quotes.
    let mut parts = Vec::new();
    let mut start = 0;
    let mut in_quotes = false;
    for (i, c) in member.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            ';' if !in_quotes => {
                parts.push(&member[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&member[start..]);
    parts.iter().enumerate().all(|(i, part)| {
        let part = if i == 0 {
            *part
        } else {
            part.trim_start_matches(' ')
        };
        match part.split_once('=') {
            Some((k, v)) => is_sf_key(k) && is_sf_bare_item(v),
            None => is_sf_key(part),
        }
    })
}

/// Clamp helper for callers adding deltas (RFC 9111 1.2.2: overflow means 2^31).
pub fn clamp(secs: u64) -> u64 {
    secs.min(DELTA_SECONDS_MAX)
}

#[cfg(test)]
mod tests;
