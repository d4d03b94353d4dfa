//! The operator's switches over the policy: plain settings, which the binary fills from its
//! config file (this crate knows no deployment schema).

use std::time::Duration;

/// What to do with responses that carry Set-Cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CookiePolicy {
    /// Store them as any other response (RFC 9111 allows it); Set-Cookie is stored and replayed.
    Store,
    /// Do not store responses that set cookies, unless they are explicitly `public`.
    #[default]
    NoStoreUnlessPublic,
    /// Never store responses that set cookies.
    NeverStore,
}

/// Policy settings. [`PolicyConfig::default`] conforms to RFC 9111.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Freshness lifetime for responses that may be given a heuristic one (RFC 9111 4.2.2) but
    /// carry no explicit freshness. Takes precedence over the Last-Modified heuristic. Default:
    /// none.
    pub default_ttl: Option<Duration>,
    /// Ignore `Cache-Control: no-cache` and `Pragma: no-cache` in requests. Default: false.
    pub ignore_client_no_cache: bool,
    /// What to do with responses carrying Set-Cookie. Default: store only when `public`.
    pub cookie_policy: CookiePolicy,
    /// Allow heuristic freshness from Last-Modified (RFC 9111 4.2.2). Default: true.
    pub heuristic_freshness: bool,
    /// The heuristic fraction of (Date - Last-Modified), in percent. Default: 10 (the RFC's
    /// "typical setting").
    pub heuristic_percent: u32,
    /// Upper bound of a heuristic lifetime. Default: one day.
    pub heuristic_max: Duration,
    /// This cache's name in Cache-Status (RFC 9211). Default: `edgecache`.
    pub name: String,
    /// Store responses whose body ends when the origin closes the connection (no
    /// Content-Length, not chunked). Default: false: such a body cannot be told from a cut one.
    pub store_close_delimited: bool,
    /// How long later requests for a key whose response could not be stored go straight to the
    /// origin, without coalescing (hit-for-pass, [`super::storable::pass_for`]). Zero: off.
    /// Default: 10 s.
    pub hit_for_pass: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            default_ttl: None,
            ignore_client_no_cache: false,
            cookie_policy: CookiePolicy::NoStoreUnlessPublic,
            heuristic_freshness: true,
            heuristic_percent: 10,
            heuristic_max: Duration::from_secs(24 * 60 * 60),
            name: "edgecache".into(),
            store_close_delimited: false,
            hit_for_pass: Duration::from_secs(10),
        }
    }
}
