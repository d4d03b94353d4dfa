//! The outcome of a request as its response's Cache-Status tells it (RFC 9211): the `cache`
//! field of the access log and the `cache` label of the request histograms. Read from the
//! header, the one place every path of the handler writes its outcome, rather than from each
//! path on its own.
//!
//! | this cache's member                                  | label         |
//! |------------------------------------------------------|---------------|
//! | `hit`                                                | `hit`         |
//! | `hit` with a negative `ttl` or `detail=stale-*`      | `stale`       |
//! | `fwd=bypass` or `fwd=method` (hit-for-pass included) | `pass`        |
//! | `fwd=stale` or `fwd=request` with `fwd-status=304`   | `revalidated` |
//! | any other `fwd` with a `fwd-status`                  | `miss`        |
//! | `fwd` without `fwd-status` (the origin never answered) | `error`     |
//! | neither `hit` nor `fwd` (a 400, a 504 only-if-cached)| `synthetic`   |
//! | no member of this cache last in the field            | `none`        |

use http::HeaderMap;

/// How the cache answered, from its Cache-Status member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheOutcome {
    Hit,
    Stale,
    Revalidated,
    Miss,
    Pass,
    Error,
    Synthetic,
    None,
}

impl CacheOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Stale => "stale",
            Self::Revalidated => "revalidated",
            Self::Miss => "miss",
            Self::Pass => "pass",
            Self::Error => "error",
            Self::Synthetic => "synthetic",
            Self::None => "none",
        }
    }
}

/// This cache's member: the last of the response's Cache-Status (a cache appends its own after
/// those of the origin and the caches before it), when it is this cache's (`name` as the member
/// serializes it, e.g. `edgecache`).
pub fn own_member<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let value = headers
        .get_all(edgecache_policy::status::CACHE_STATUS)
        .iter()
        .next_back()?
        .to_str()
        .ok()?;
    let member = split_outside_quotes(value, b',').next_back()?.trim();
    let rest = member.strip_prefix(name)?;
    (rest.is_empty() || rest.trim_start().starts_with(';')).then_some(member)
}

/// The outcome one member of this cache says.
pub fn classify(member: Option<&str>) -> CacheOutcome {
    let Some(member) = member else {
        return CacheOutcome::None;
    };
    if plain_hit(member) {
        return CacheOutcome::Hit;
    }
    classify_params(member)
}

/// [`classify`] by the member's parameters, one by one.
fn classify_params(member: &str) -> CacheOutcome {
    let (mut hit, mut fwd, mut fwd_status, mut stale) = (false, None, None, false);
    // The first piece is the cache's name.
    for param in split_outside_quotes(member, b';').skip(1) {
        let (key, value) = match param.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().trim_matches('"'))),
            None => (param.trim(), None),
        };
        match (key, value) {
            ("hit", _) => hit = true,
            ("fwd", Some(v)) => fwd = Some(v),
            ("fwd-status", Some(v)) => fwd_status = v.parse::<u16>().ok(),
            ("ttl", Some(v)) => stale |= v.starts_with('-'),
            ("detail", Some(v)) => stale |= v.starts_with("stale-"),
            _ => {}
        }
    }
    match (hit, fwd, fwd_status) {
        (true, _, _) if stale => CacheOutcome::Stale,
        (true, _, _) => CacheOutcome::Hit,
        (false, Some("bypass" | "method"), _) => CacheOutcome::Pass,
        (false, Some(_), None) => CacheOutcome::Error,
        (false, Some("stale" | "request"), Some(304)) => CacheOutcome::Revalidated,
        (false, Some(_), Some(_)) => CacheOutcome::Miss,
        (false, None, _) => CacheOutcome::Synthetic,
    }
}

/// A member that says a fresh hit and nothing else (`name; hit` or `name; hit; ttl=N`, N not
/// negative), told without splitting it: most responses. No quote in it, so its first `;` ends
/// the name.
fn plain_hit(member: &str) -> bool {
    let b = member.as_bytes();
    if b.contains(&b'"') {
        return false;
    }
    let Some(i) = b.iter().position(|&c| c == b';') else {
        return false;
    };
    let rest = &b[i..];
    if rest == b"; hit" {
        return true;
    }
    rest.strip_prefix(b"; hit; ttl=")
        .is_some_and(|ttl| !ttl.is_empty() && ttl.iter().all(u8::is_ascii_digit))
}

/// The pieces of `s` between `sep`s that are not inside a quoted string.
fn split_outside_quotes(s: &str, sep: u8) -> Pieces<'_> {
    Pieces {
        s,
        sep,
        // Without a quote every separator cuts: found by a plain (memchr) search.
        quoted: s.as_bytes().contains(&b'"'),
        done: false,
    }
}

struct Pieces<'a> {
    s: &'a str,
    sep: u8,
    quoted: bool,
    done: bool,
}

impl Pieces<'_> {
    fn first_cut(&self) -> Option<usize> {
        if self.quoted {
            cuts(self.s, self.sep).next()
        } else {
            self.s.bytes().position(|b| b == self.sep)
        }
    }

    fn last_cut(&self) -> Option<usize> {
        if self.quoted {
            // Quotes are only known from the front: the last cut is the last of a forward scan.
            cuts(self.s, self.sep).last()
        } else {
            self.s.bytes().rposition(|b| b == self.sep)
        }
    }
}

/// The positions of the `sep`s of `s` outside quoted strings, from the front.
fn cuts(s: &str, sep: u8) -> impl Iterator<Item = usize> + '_ {
    let (mut quoted, mut escaped) = (false, false);
    s.bytes().enumerate().filter_map(move |(i, b)| {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == sep && !quoted => return Some(i),
            _ => {}
        }
        None
    })
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.done {
            return None;
        }
        let s = self.s;
        match self.first_cut() {
            Some(i) => {
                self.s = &s[i + 1..];
                Some(&s[..i])
            }
            None => {
                self.done = true;
                Some(s)
            }
        }
    }
}

impl<'a> DoubleEndedIterator for Pieces<'a> {
    fn next_back(&mut self) -> Option<&'a str> {
        if self.done {
            return None;
        }
        let s = self.s;
        match self.last_cut() {
            Some(i) => {
                self.s = &s[..i];
                Some(&s[i + 1..])
            }
            None => {
                self.done = true;
                Some(s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecache_policy::status::{CacheStatus, Fwd};
    use http::HeaderValue;

    /// Without a quote, the plain search cuts where the quote-aware scan does, from both ends.
    #[test]
    fn the_plain_split_cuts_where_the_scan_does() {
        for text in [
            "",
            ";",
            "a",
            "a;b",
            ";a;;b;",
            "edgecache; hit; ttl=5",
            "x,y, z ,",
        ] {
            for sep in [b';', b','] {
                let scanned: Vec<usize> = cuts(text, sep).collect();
                let plain: Vec<usize> = text
                    .bytes()
                    .enumerate()
                    .filter(|(_, b)| *b == sep)
                    .map(|(i, _)| i)
                    .collect();
                assert_eq!(scanned, plain, "{text:?}");
                let forward: Vec<&str> = split_outside_quotes(text, sep).collect();
                let mut backward: Vec<&str> = split_outside_quotes(text, sep).rev().collect();
                backward.reverse();
                assert_eq!(
                    forward,
                    text.split(sep as char).collect::<Vec<_>>(),
                    "{text:?}"
                );
                assert_eq!(backward, forward, "{text:?}");
            }
        }
    }

    #[test]
    fn members_as_the_handler_writes_them() {
        let n = "edgecache";
        let cases = [
            (CacheStatus::hit(n).ttl(3600), CacheOutcome::Hit),
            (
                CacheStatus::hit(n).ttl(10).collapsed(true),
                CacheOutcome::Hit,
            ),
            (
                CacheStatus::hit(n).ttl(-5).detail("stale-while-revalidate"),
                CacheOutcome::Stale,
            ),
            (
                CacheStatus::hit(n).ttl(-5).detail("stale-if-error"),
                CacheOutcome::Stale,
            ),
            (
                CacheStatus::forward(n, Fwd::UriMiss)
                    .fwd_status(200)
                    .stored(true),
                CacheOutcome::Miss,
            ),
            (
                CacheStatus::forward(n, Fwd::VaryMiss).fwd_status(404),
                CacheOutcome::Miss,
            ),
            (
                CacheStatus::forward(n, Fwd::Partial).fwd_status(206),
                CacheOutcome::Miss,
            ),
            (
                CacheStatus::forward(n, Fwd::Stale).fwd_status(200),
                CacheOutcome::Miss,
            ),
            (
                CacheStatus::forward(n, Fwd::Stale).fwd_status(304),
                CacheOutcome::Revalidated,
            ),
            (
                CacheStatus::forward(n, Fwd::Request).fwd_status(304),
                CacheOutcome::Revalidated,
            ),
            (
                CacheStatus::forward(n, Fwd::Bypass).fwd_status(200),
                CacheOutcome::Pass,
            ),
            (
                CacheStatus::forward(n, Fwd::Method).fwd_status(201),
                CacheOutcome::Pass,
            ),
            (
                CacheStatus::forward(n, Fwd::UriMiss).detail("connect"),
                CacheOutcome::Error,
            ),
            (
                CacheStatus::none(n).detail("bad-request"),
                CacheOutcome::Synthetic,
            ),
        ];
        for (cs, want) in cases {
            let mut h = HeaderMap::new();
            h.append(
                edgecache_policy::status::CACHE_STATUS,
                HeaderValue::from_static("origin-cache; hit, \"other; x\"; fwd=uri-miss"),
            );
            cs.append_to(&mut h);
            let member = own_member(&h, n);
            assert_eq!(member, Some(cs.to_string().as_str()));
            assert_eq!(classify(member), want, "{cs}");
        }
    }

    #[test]
    fn plain_hits_are_told_as_the_parameters_tell_them() {
        for m in [
            "edgecache; hit",
            "edgecache; hit; ttl=0",
            "edgecache; hit; ttl=3600",
            "edgecache; hit; ttl=-5",
            "edgecache; hit; ttl=",
            "edgecache; hit; ttl=5; detail=stale-if-error",
            "edgecache; hit; stored",
            "edgecache;hit",
            "\"edge; hit\"; fwd=uri-miss; fwd-status=200",
            "edgecache; hitx",
        ] {
            assert_eq!(classify(Some(m)), classify_params(m), "{m}");
        }
        assert!(plain_hit("edgecache; hit; ttl=3600"));
        assert!(!plain_hit("edgecache; hit; ttl=-5"));
    }

    #[test]
    fn only_this_caches_member_counts() {
        let mut h = HeaderMap::new();
        assert_eq!(own_member(&h, "edgecache"), None);
        assert_eq!(classify(None), CacheOutcome::None);
        // Another cache's member last (ours missing), or a name that only starts like ours.
        h.append(
            edgecache_policy::status::CACHE_STATUS,
            HeaderValue::from_static("edgecache; hit, edgecache2; hit"),
        );
        assert_eq!(own_member(&h, "edgecache"), None);
        h.append(
            edgecache_policy::status::CACHE_STATUS,
            HeaderValue::from_static("edgecache; fwd=uri-miss; detail=\"a;b, hit\""),
        );
        let m = own_member(&h, "edgecache");
        assert_eq!(m, Some("edgecache; fwd=uri-miss; detail=\"a;b, hit\""));
        assert_eq!(classify(m), CacheOutcome::Error);
        // A quoted name, as CacheStatus writes a name that is not a token.
        let name = CacheStatus::none("edge cache").to_string();
        let mut h = HeaderMap::new();
        CacheStatus::hit("edge cache").append_to(&mut h);
        assert_eq!(classify(own_member(&h, &name)), CacheOutcome::Hit);
    }
}
