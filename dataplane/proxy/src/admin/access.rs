//! Who may call what on the admin endpoint: a pure decision from the call, the peer and the
//! presented credentials, plus the token file it is checked against.
//!
//! Mutating calls (PURGE, the debug hooks) need `Authorization: Bearer TOKEN` when a token file
//! is configured; without one they are accepted from loopback peers only, so a node reachable
//! from the network cannot be purged by whoever reaches it. Reads (`/healthz`, `/readyz`) are
//! open; `/metrics` is open unless configured otherwise.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use http::HeaderMap;
use http::header::AUTHORIZATION;

/// How much a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone may call it.
    Open,
    /// The token (or, with no token configured, a loopback peer).
    Token,
}

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// No or a wrong credential: 401.
    Unauthorized,
    /// No token is configured and the peer is not on loopback: 401 too, with another text.
    LoopbackOnly,
    /// The token file cannot be read or is empty: refuse everything that needs it.
    TokenUnavailable,
}

impl Verdict {
    /// For logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Unauthorized => "unauthorized",
            Verdict::LoopbackOnly => "loopback-only",
            Verdict::TokenUnavailable => "token-unavailable",
        }
    }
}

/// The expected token, as known at the time of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// No token file configured.
    None,
    /// The token file's trimmed contents.
    Token(Vec<u8>),
    /// A token file is configured but cannot be used.
    Unavailable,
}

/// Decide one call.
pub fn decide(need: Need, expected: &Expected, peer: IpAddr, headers: &HeaderMap) -> Verdict {
    if need == Need::Open {
        return Verdict::Allow;
    }
    match expected {
        Expected::None if is_loopback(peer) => Verdict::Allow,
        Expected::None => Verdict::LoopbackOnly,
        Expected::Unavailable => Verdict::TokenUnavailable,
        Expected::Token(t) => match bearer(headers) {
            Some(presented) if constant_time_eq(presented, t) => Verdict::Allow,
            _ => Verdict::Unauthorized,
        },
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The credential of `Authorization: Bearer TOKEN` (the scheme is case-insensitive, RFC 9110
/// 11.1); `None` for any other form, or for several Authorization fields.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let v = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let v = v.as_bytes();
    let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Compare without an early exit, so the time taken does not tell how much of a guess matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// The token file, read on every protected call (admin calls are rare; a rotated Secret then
/// applies at once, with no watcher to go wrong).
#[derive(Debug, Clone)]
pub struct TokenSource {
    file: Option<PathBuf>,
}

impl TokenSource {
    pub fn new(file: Option<&str>) -> Self {
        Self {
            file: file.map(PathBuf::from),
        }
    }

    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The token as it is now.
    pub fn expected(&self) -> Expected {
        let Some(path) = &self.file else {
            return Expected::None;
        };
        match std::fs::read(path) {
            Ok(bytes) => {
                let t = bytes.trim_ascii();
                if t.is_empty() {
                    Expected::Unavailable
                } else {
                    Expected::Token(t.to_vec())
                }
            }
            Err(_) => Expected::Unavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn auth(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const POD: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 2, 3));

    #[test]
    fn open_calls_need_nothing() {
        let t = Expected::Token(b"s3cret".to_vec());
        assert_eq!(
            decide(Need::Open, &t, POD, &HeaderMap::new()),
            Verdict::Allow
        );
        assert_eq!(
            decide(Need::Open, &Expected::Unavailable, POD, &HeaderMap::new()),
            Verdict::Allow
        );
    }

    #[test]
    fn a_token_is_checked_exactly() {
        let t = Expected::Token(b"s3cret".to_vec());
        let table = [
            ("Bearer s3cret", Verdict::Allow),
            ("bearer s3cret", Verdict::Allow),
            ("BEARER   s3cret  ", Verdict::Allow),
            ("Bearer s3cre", Verdict::Unauthorized),
            ("Bearer s3cret2", Verdict::Unauthorized),
            ("Bearer S3CRET", Verdict::Unauthorized),
            ("Basic czNjcmV0", Verdict::Unauthorized),
            ("s3cret", Verdict::Unauthorized),
            ("Bearer", Verdict::Unauthorized),
            ("Bearer ", Verdict::Unauthorized),
        ];
        for (header, want) in table {
            assert_eq!(
                decide(Need::Token, &t, POD, &auth(header)),
                want,
                "{header:?}"
            );
        }
        // Loopback is no substitute for the token once one is configured.
        assert_eq!(
            decide(Need::Token, &t, LO, &HeaderMap::new()),
            Verdict::Unauthorized
        );
        let mut two = auth("Bearer s3cret");
        two.append(AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        assert_eq!(decide(Need::Token, &t, POD, &two), Verdict::Unauthorized);
    }

    #[test]
    fn without_a_token_only_loopback_may_mutate() {
        let none = HeaderMap::new();
        assert_eq!(
            decide(Need::Token, &Expected::None, LO, &none),
            Verdict::Allow
        );
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(
            decide(Need::Token, &Expected::None, v6, &none),
            Verdict::Allow
        );
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            decide(Need::Token, &Expected::None, mapped, &none),
            Verdict::Allow
        );
        assert_eq!(
            decide(Need::Token, &Expected::None, POD, &auth("Bearer x")),
            Verdict::LoopbackOnly
        );
    }

    #[test]
    fn an_unreadable_token_file_refuses_every_protected_call() {
        let src = TokenSource::new(Some("/nonexistent/edgecache-token"));
        assert_eq!(src.expected(), Expected::Unavailable);
        assert_eq!(
            decide(Need::Token, &src.expected(), LO, &auth("Bearer x")),
            Verdict::TokenUnavailable
        );
    }

    #[test]
    fn the_file_is_trimmed_and_read_again_after_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let src = TokenSource::new(path.to_str());
        assert_eq!(src.expected(), Expected::Token(b"first".to_vec()));
        std::fs::write(&path, "  second  \n").unwrap();
        assert_eq!(src.expected(), Expected::Token(b"second".to_vec()));
        std::fs::write(&path, "\n").unwrap();
        assert_eq!(src.expected(), Expected::Unavailable);
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"abc", b""));
        // A length difference whose extra bytes are zero is still a difference.
        assert!(!constant_time_eq(b"a", b"a\0"));
    }
}
