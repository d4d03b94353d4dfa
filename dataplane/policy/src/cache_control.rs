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
//! * A targeted field is a Structured Fields Dictionary (RFC 9213 2.1, RFC 8941 3.2), parsed by
//!   [`CacheControl::parse_targeted`]: a directive of the wrong type is ignored, and a field that
//!   does not parse, or has no valid directive left, is treated as absent.

use http::HeaderMap;
use http::header::{CACHE_CONTROL, HeaderName, PRAGMA};

use super::syntax::{self, DELTA_SECONDS_MAX};

mod sf;
use sf::Item;

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
        match arg {
            Some(arg) => Self::of_list(&syntax::unquote(arg)),
            None => Scope::All,
        }
    }

    /// The scope a field-name list names.
    fn of_list(list: &str) -> Self {
        let names = syntax::field_names(list);
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
            // Directive names are case-insensitive; most arrive in lower case already.
            if name.bytes().any(|b| b.is_ascii_uppercase()) {
                cc.apply(&name.to_ascii_lowercase(), arg);
            } else {
                cc.apply(name, arg);
            }
        }
        cc
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        if let Some(slot) = self.delta_slot(name) {
            if slot.is_none() {
                *slot = Some(Delta::parse(arg));
            }
            return;
        }
        if let Some(slot) = self.scope_slot(name) {
            let scope = Scope::parse(arg);
            *slot = Some(match slot.take() {
                Some(prev) => prev.merge(scope),
                None => scope,
            });
            return;
        }
        match name {
            "min-fresh" if self.min_fresh.is_none() => self.min_fresh = Some(Delta::parse(arg)),
            "max-stale" if self.max_stale.is_none() => {
                self.max_stale = match arg {
                    None => Some(MaxStale::Any),
                    Some(a) => syntax::delta_seconds(&syntax::unquote(a)).map(MaxStale::Seconds),
                };
            }
            "only-if-cached" => self.only_if_cached = true,
            _ => {
                if let Some(flag) = self.response_flag(name) {
                    *flag = true;
                }
            }
        }
    }

    /// Parse a targeted field value (RFC 9213 2.1): a Structured Fields Dictionary whose members
    /// are response directives of the type RFC 9213 2.1 maps them to. A member of another type
    /// (`max-age="60"`, `max-age=1.5`, `s-maxage=-1`, `no-store=?0`, `private=set-cookie`), an
    /// unknown directive or a request directive is ignored. `None` when the value does not parse
    /// as a Dictionary or no valid directive is left: the field is then treated as absent.
    pub fn parse_targeted(value: &str) -> Option<Self> {
        let mut cc = CacheControl::default();
        let mut valid = 0;
        for (name, item) in sf::parse_dictionary(value)? {
            if cc.apply_typed(&name, item) {
                valid += 1;
            }
        }
        (valid > 0).then_some(cc)
    }

    /// Apply one Dictionary member; false when it is not a response directive of the right type.
    /// RFC 9213 2.1 maps delta-seconds directives to Integers (here non-negative), directives
    /// without an argument to Booleans (`true`), and `no-cache` and `private` to Booleans or
    /// Strings. Dictionary keys are unique, so each directive is set at most once.
    fn apply_typed(&mut self, name: &str, item: Item) -> bool {
        if let Some(slot) = self.delta_slot(name) {
            let Item::Integer(n) = item else { return false };
            let Ok(secs) = u64::try_from(n) else {
                return false;
            };
            *slot = Some(Delta::Seconds(clamp(secs)));
            return true;
        }
        if let Some(slot) = self.scope_slot(name) {
            *slot = Some(match item {
                Item::Boolean(true) => Scope::All,
                Item::String(list) => Scope::of_list(&list),
                _ => return false,
            });
            return true;
        }
        match self.response_flag(name) {
            Some(flag) if item == Item::Boolean(true) => {
                *flag = true;
                true
            }
            _ => false,
        }
    }

    /// The delta-seconds response directives (RFC 9111 5.2.2.1, 5.2.2.10; RFC 5861).
    fn delta_slot(&mut self, name: &str) -> Option<&mut Option<Delta>> {
        Some(match name {
            "max-age" => &mut self.max_age,
            "s-maxage" => &mut self.s_maxage,
            "stale-while-revalidate" => &mut self.stale_while_revalidate,
            "stale-if-error" => &mut self.stale_if_error,
            _ => return None,
        })
    }

    /// The directives with an optional field list (RFC 9111 5.2.2.4, 5.2.2.7).
    fn scope_slot(&mut self, name: &str) -> Option<&mut Option<Scope>> {
        Some(match name {
            "no-cache" => &mut self.no_cache,
            "private" => &mut self.private,
            _ => return None,
        })
    }

    /// The boolean response directives (RFC 9111 5.2.2, RFC 8246).
    fn response_flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "no-store" => &mut self.no_store,
            "no-transform" => &mut self.no_transform,
            "must-revalidate" => &mut self.must_revalidate,
            "must-understand" => &mut self.must_understand,
            "proxy-revalidate" => &mut self.proxy_revalidate,
            "public" => &mut self.public,
            "immutable" => &mut self.immutable,
            _ => return None,
        })
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
/// [`TARGET_LIST`] order with a valid directive ([`CacheControl::parse_targeted`]); otherwise
/// Cache-Control.
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
            if let Some(cc) =
                syntax::combined(headers, name).and_then(|v| CacheControl::parse_targeted(&v))
            {
                return Self { cc, source };
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

/// Clamp helper for callers adding deltas (RFC 9111 1.2.2: overflow means 2^31).
pub fn clamp(secs: u64) -> u64 {
    secs.min(DELTA_SECONDS_MAX)
}

#[cfg(test)]
mod tests;
