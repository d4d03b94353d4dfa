//! Proof that a hop (dataplane/serve/src/handler/peer.rs) comes from a node of the same
//! EdgeCache. The nodes share a key (`sharding.peerKeyFile`, mounted from a Secret the operator
//! makes); a node that forwards a miss to its owner adds [`HOP_AUTH`]: a timestamp and an
//! HMAC-SHA256, under that key, of the hop (the sender's node name), the method, the authority, the target and the
//! timestamp. The owner serves the request as a hop only when the HMAC is right and the
//! timestamp within [`MAX_SKEW`] of its clock; otherwise the hop header is removed and the
//! request served as any client's, so a client cannot make a node store keys it does not own or
//! read the peer error marks.
//!
//! A recorded hop replayed within the skew only makes its owner serve that same request again,
//! which any client can ask for anyway.

use std::time::{Duration, SystemTime};

use aws_lc_rs::hmac;
use http::{HeaderValue, header::HeaderName};

/// The proof a hop carries: `v1 UNIX-SECONDS HEX-HMAC`.
pub const HOP_AUTH: HeaderName = HeaderName::from_static("edgecache-hop-auth");

/// How far a hop's timestamp may be from the owner's clock.
pub const MAX_SKEW: Duration = Duration::from_secs(60);

/// The shortest key accepted: 256 bits.
pub const MIN_KEY_BYTES: usize = 32;

/// The key the nodes of one EdgeCache share.
pub struct PeerKey(hmac::Key);

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

/// What a hop's proof covers.
#[derive(Debug, Clone, Copy)]
pub struct Hop<'a> {
    /// The sending node's name (the hop header's value).
    pub node: &'a str,
    pub method: &'a str,
    /// The request's Host (normalised by dataplane/upstream/src/sites.rs on both sides).
    pub authority: &'a str,
    /// The request target (path and query).
    pub target: &'a str,
}

impl<'a> Hop<'a> {
    /// The hop `node` sends as a request head: read the same way where it is signed and where
    /// it is checked, so the two cannot cover different things.
    pub fn of(
        node: &'a str,
        method: &'a http::Method,
        uri: &'a http::Uri,
        headers: &'a http::HeaderMap,
    ) -> Self {
        Hop {
            node,
            method: method.as_str(),
            authority: headers
                .get(http::header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
            target: uri.path_and_query().map_or("/", |p| p.as_str()),
        }
    }
}

/// Why a hop was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Missing,
    Malformed,
    Expired,
    BadMac,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Missing => "missing",
            Refused::Malformed => "malformed",
            Refused::Expired => "expired",
            Refused::BadMac => "bad_mac",
        }
    }
}

impl PeerKey {
    /// The key in `path` (surrounding whitespace ignored, as a Secret's file may end in a
    /// newline): at least [`MIN_KEY_BYTES`] bytes.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let key = bytes.trim_ascii();
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the peer key has {} bytes, at least {MIN_KEY_BYTES} are needed",
                key.len()
            ));
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, key)))
    }

    /// The proof for `hop` sent at `now`.
    pub fn sign(&self, hop: &Hop<'_>, now: SystemTime) -> HeaderValue {
        let ts = unix_seconds(now);
        let tag = hmac::sign(&self.0, &message(hop, ts));
        let text = format!("v1 {ts} {}", hex(tag.as_ref()));
        // Digits, hex and spaces: always a valid field value.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("v1"))
    }

    /// Whether `proof` proves `hop` at `now`.
    pub fn verify(
        &self,
        hop: &Hop<'_>,
        proof: Option<&HeaderValue>,
        now: SystemTime,
    ) -> Result<(), Refused> {
        let proof = proof.ok_or(Refused::Missing)?;
        let text = proof.to_str().map_err(|_| Refused::Malformed)?;
        let mut words = text.split(' ');
        let (Some("v1"), Some(ts), Some(mac), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return Err(Refused::Malformed);
        };
        let ts: u64 = ts.parse().map_err(|_| Refused::Malformed)?;
        let mac = unhex(mac).ok_or(Refused::Malformed)?;
        if unix_seconds(now).abs_diff(ts) > MAX_SKEW.as_secs() {
            return Err(Refused::Expired);
        }
        hmac::verify(&self.0, &message(hop, ts), &mac).map_err(|_| Refused::BadMac)
    }
}

fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The signed bytes: each part on a line of its own (none may hold a newline: a field value
/// and a request target cannot), so no two hops share one message.
fn message(hop: &Hop<'_>, ts: u64) -> Vec<u8> {
    format!(
        "edgecache-hop v1\n{}\n{}\n{}\n{}\n{ts}",
        hop.node, hop.method, hop.authority, hop.target
    )
    .into_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOP: Hop<'static> = Hop {
        node: "n0",
        method: "GET",
        authority: "www.a.test",
        target: "/x?y=1",
    };

    fn key(b: u8) -> PeerKey {
        PeerKey::from_bytes(&[b; 32]).unwrap()
    }

    #[test]
    fn a_signed_hop_verifies_and_nothing_else_does() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let k = key(1);
        let proof = k.sign(&HOP, now);
        assert_eq!(k.verify(&HOP, Some(&proof), now), Ok(()));
        assert_eq!(k.verify(&HOP, Some(&proof), now + MAX_SKEW), Ok(()));
        assert_eq!(
            k.verify(&HOP, Some(&proof), now + MAX_SKEW + Duration::from_secs(1)),
            Err(Refused::Expired)
        );
        assert_eq!(
            key(2).verify(&HOP, Some(&proof), now),
            Err(Refused::BadMac),
            "another EdgeCache's key"
        );
        for other in [
            Hop { node: "n1", ..HOP },
            Hop {
                method: "HEAD",
                ..HOP
            },
            Hop {
                authority: "www.b.test",
                ..HOP
            },
            Hop {
                target: "/x?y=2",
                ..HOP
            },
        ] {
            assert_eq!(k.verify(&other, Some(&proof), now), Err(Refused::BadMac));
        }
        assert_eq!(k.verify(&HOP, None, now), Err(Refused::Missing));
        for bad in ["", "v1", "v2 1 00", "v1 x 00", "v1 1 0g", "v1 1 00 extra"] {
            let v = HeaderValue::from_static(bad);
            assert_eq!(
                k.verify(&HOP, Some(&v), now),
                Err(Refused::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_short_key_is_refused() {
        assert!(PeerKey::from_bytes(&[7; 31]).is_err());
        assert!(PeerKey::from_bytes(b"  short  \n").is_err());
        let mut k = vec![b'k'; 32];
        k.push(b'\n');
        assert!(
            PeerKey::from_bytes(&k).is_ok(),
            "a trailing newline is not key"
        );
    }
}
