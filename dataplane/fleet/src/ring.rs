//! Sharding's pure half: the peer list (parsed from the peers file) and the rendezvous hash that
//! names each key's owner among the peers. No I/O here: [`crate::sharding`] reads
//! and reloads the file, keeps peer health and asks [`Ring::owner`].
//!
//! Rendezvous (highest random weight) hashing: every peer scores every key, the highest score
//! owns it. A change of membership moves only the keys of the peer that left (to the others,
//! evenly) or the keys the new peer wins (from each of the others, evenly): about 1/N of them,
//! and never a key between two peers that stayed. Scores depend on peer names alone, not on the
//! order of the file nor on addresses, so every node that reads the same names agrees, and a
//! pod that comes back at another address keeps its keys (the names are Kubernetes node names:
//! the cache lives on the node's disk). O(N) per lookup, which is nothing next to a miss for the
//! handful to hundreds of nodes one EdgeCache runs on.
//!
//! The hash is this file's own, not std's `DefaultHasher` (whose algorithm may change between
//! Rust releases: two builds of the data plane in one rolling update must agree) nor a crate's:
//! a word-at-a-time mix with xxHash64's primes and splitmix64's finalizer, whose avalanche is
//! what the uniformity and movement tests below measure.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;

/// One node of the EdgeCache: its stable name and the address of its data-plane listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    pub addr: SocketAddr,
}

/// A mistake in the peers file, with the line it is on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Parse a peers file: one `NAME ADDRESS` a line (`ADDRESS` is `IP:PORT` of the node's
/// data-plane listener); blank lines and `#` comments (to the end of the line) are allowed.
/// Names and addresses are unique. The first mistake is reported with its line.
pub fn parse(text: &str) -> Result<Vec<Peer>, ParseError> {
    let mut peers: Vec<Peer> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut addrs: HashMap<SocketAddr, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let bad = |reason: String| ParseError { line, reason };
        let content = raw.split_once('#').map_or(raw, |(before, _)| before);
        let fields: Vec<&str> = content.split_whitespace().collect();
        let (name, addr) = match fields.as_slice() {
            [] => continue,
            [name, addr] => (*name, *addr),
            _ => {
                return Err(bad(format!(
                    "expected `NAME ADDRESS` (e.g. `node-a 10.0.0.7:8080`), got {} field{}",
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                )));
            }
        };
        edgecache_api::dataplane::check_node_name(name)
            .map_err(|why| bad(format!("node name `{name}` {why}")))?;
        let addr: SocketAddr = addr.parse().map_err(|_| {
            bad(format!(
                "`{addr}` is not an address like 10.0.0.7:8080 (IP and port)"
            ))
        })?;
        if addr.port() == 0 || addr.ip().is_unspecified() {
            return Err(bad(format!("`{addr}` cannot be connected to")));
        }
        if let Some(first) = seen.insert(name.to_string(), line) {
            return Err(bad(format!("node `{name}` is already on line {first}")));
        }
        if let Some(first) = addrs.insert(addr, line) {
            return Err(bad(format!("address {addr} is already on line {first}")));
        }
        peers.push(Peer {
            name: name.to_string(),
            addr,
        });
    }
    Ok(peers)
}

/// The peers and their name hashes, ready for owner lookups.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    peers: Vec<(Peer, u64)>,
}

impl Ring {
    pub fn new(peers: Vec<Peer>) -> Self {
        let peers = peers
            .into_iter()
            .map(|p| {
                let h = hash64(p.name.as_bytes());
                (p, h)
            })
            .collect();
        Ring { peers }
    }

    pub fn peers(&self) -> impl Iterator<Item = &Peer> {
        self.peers.iter().map(|(p, _)| p)
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.peers.iter().any(|(p, _)| p.name == name)
    }

    /// The owner of the key whose [`key_hash`] is `key`: the peer with the highest score (ties,
    /// which a 64-bit score makes all but impossible, go to the smaller name). `None` for an
    /// empty ring.
    pub fn owner(&self, key: u64) -> Option<&Peer> {
        self.owner_among(key, |_| true)
    }
}

impl Ring {
    /// The owner of `key` among the peers `alive` accepts: with the owner down, the peer that
    /// scores next, and so on (rendezvous hashing's natural successor). Every node that sees the
    /// same peers down hands each of a down peer's keys to one survivor, the same one.
    pub fn owner_among(&self, key: u64, alive: impl Fn(&Peer) -> bool) -> Option<&Peer> {
        self.peers
            .iter()
            .filter(|(p, _)| alive(p))
            .max_by(|(a, ha), (b, hb)| {
                score(*ha, key)
                    .cmp(&score(*hb, key))
                    .then_with(|| b.name.cmp(&a.name))
            })
            .map(|(p, _)| p)
    }
}

/// The hash of a cache key that [`Ring::owner`] takes.
pub fn key_hash(key: &[u8]) -> u64 {
    hash64(key)
}

/// A peer's score for a key.
fn score(peer: u64, key: u64) -> u64 {
    mix64(peer ^ mix64(key ^ 0x2545_F491_4F6C_DD1D))
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// splitmix64's finalizer: a bijection in which every input bit flips about half the output
/// bits.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable 64-bit hash of bytes: eight at a time (the last word zero-padded; the length is
/// mixed in first, so padding is unambiguous), each word mixed before it is folded in.
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h = (bytes.len() as u64).wrapping_mul(P1) ^ P2;
    let fold = |h: u64, w: u64| {
        (h ^ mix64(w))
            .rotate_left(27)
            .wrapping_mul(P1)
            .wrapping_add(P2)
    };
    let mut words = bytes.chunks_exact(8);
    for c in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = fold(h, u64::from_le_bytes(w));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = fold(h, u64::from_le_bytes(w));
    }
    mix64(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(names: &[&str]) -> Ring {
        Ring::new(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Peer {
                    name: (*n).to_string(),
                    addr: SocketAddr::from(([127, 0, 0, 1], 9000 + i as u16)),
                })
                .collect(),
        )
    }

    fn keys(n: usize) -> impl Iterator<Item = u64> {
        (0..n).map(|i| key_hash(format!("http://www.example/obj/{i}?v=1").as_bytes()))
    }

    fn owners(r: &Ring, n: usize) -> Vec<String> {
        keys(n)
            .map(|k| r.owner(k).map(|p| p.name.clone()).unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_peers_file_with_comments_and_blank_lines() {
        let text = "# the fleet\n\nnode-a 127.0.0.1:8080\n  node-b\t127.0.0.2:8080   # second\n[::1]x [::1]:8081\n";
        let peers = parse(text).unwrap();
        let names: Vec<_> = peers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["node-a", "node-b", "[::1]x"]);
        assert_eq!(peers[1].addr, "127.0.0.2:8080".parse().unwrap());
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("# nobody yet\n").unwrap(), vec![]);
    }

    #[test]
    fn each_mistake_names_its_line() {
        for (text, want) in [
            (
                "a 127.0.0.1:1\nb\n",
                "line 2: expected `NAME ADDRESS` (e.g. `node-a 10.0.0.7:8080`), got 1 field",
            ),
            (
                "a 127.0.0.1:1 127.0.0.1:2\n",
                "line 1: expected `NAME ADDRESS` (e.g. `node-a 10.0.0.7:8080`), got 3 fields",
            ),
            (
                "\n\na localhost:80\n",
                "line 3: `localhost:80` is not an address like 10.0.0.7:8080 (IP and port)",
            ),
            (
                "a 127.0.0.1\n",
                "line 1: `127.0.0.1` is not an address like 10.0.0.7:8080 (IP and port)",
            ),
            (
                "a 127.0.0.1:1\nb\u{e9} 127.0.0.1:2\n",
                "line 2: node name `b\u{e9}` must be 1 to 253 visible ASCII characters other than `#`",
            ),
            (
                "a 127.0.0.1:0\n",
                "line 1: `127.0.0.1:0` cannot be connected to",
            ),
            (
                "a 0.0.0.0:80\n",
                "line 1: `0.0.0.0:80` cannot be connected to",
            ),
            (
                "a 127.0.0.1:1\n# c\na 127.0.0.1:2\n",
                "line 3: node `a` is already on line 1",
            ),
            (
                "a 127.0.0.1:1\nb 127.0.0.1:1\n",
                "line 2: address 127.0.0.1:1 is already on line 1",
            ),
        ] {
            assert_eq!(parse(text).unwrap_err().to_string(), want, "{text:?}");
        }
    }

    #[test]
    fn the_hash_is_stable() {
        // Nodes of two builds must agree: these values are the contract (checked against an
        // independent implementation of the same steps).
        assert_eq!(hash64(b""), 0x6885_0AC7_4E2E_5A26);
        assert_eq!(hash64(b"http://www.example/"), 0x5DA2_2388_B256_1044);
        // Every byte counts, padding included.
        assert_ne!(hash64(b"a"), hash64(b"a\0"));
        assert_ne!(hash64(b"abcdefgh"), hash64(b"abcdefgh\0"));
    }

    #[test]
    fn owners_do_not_depend_on_the_order_of_the_file_or_the_addresses() {
        let a = ring(&["n0", "n1", "n2"]);
        let mut b = ring(&["n2", "n0", "n1"]);
        b.peers[0].0.addr = "10.9.9.9:1".parse().unwrap();
        assert_eq!(owners(&a, 10_000), owners(&b, 10_000));
        assert!(Ring::default().owner(1).is_none());
    }

    #[test]
    fn keys_spread_evenly() {
        for n in [2usize, 3, 4, 7] {
            let names: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let r = ring(&names);
            let total = 100_000;
            let mut counts: HashMap<String, usize> = HashMap::new();
            for o in owners(&r, total) {
                *counts.entry(o).or_default() += 1;
            }
            assert_eq!(counts.len(), n);
            let fair = total as f64 / n as f64;
            for (name, c) in counts {
                let off = (c as f64 - fair).abs() / fair;
                assert!(off < 0.03, "{name}: {c} of {total} keys for {n} peers");
            }
        }
    }

    /// The share of keys whose owner differs, and whether every moved key moved to or from
    /// `changed` (the peer added or removed).
    fn moved(before: &Ring, after: &Ring, changed: &str, total: usize) -> f64 {
        let (b, a) = (owners(before, total), owners(after, total));
        let mut moved = 0;
        for (x, y) in b.iter().zip(&a) {
            if x != y {
                moved += 1;
                assert!(x == changed || y == changed, "{x} -> {y}");
            }
        }
        moved as f64 / total as f64
    }

    #[test]
    fn a_change_of_membership_moves_about_one_key_in_n() {
        let total = 100_000;
        let three = ring(&["node-a", "node-b", "node-c"]);
        let four = ring(&["node-a", "node-b", "node-c", "node-d"]);
        // 3 -> 4: the new peer takes about a quarter; 4 -> 3: the leaving one's quarter moves.
        let added = moved(&three, &four, "node-d", total);
        assert!(added <= 0.25 + 0.05 && added > 0.20, "3 -> 4 moved {added}");
        let removed = moved(
            &four,
            &ring(&["node-a", "node-c", "node-d"]),
            "node-b",
            total,
        );
        assert!(
            removed <= 0.25 + 0.05 && removed > 0.20,
            "4 -> 3 moved {removed}"
        );
        let five = ring(&["node-a", "node-b", "node-c", "node-d", "node-e"]);
        let added = moved(&four, &five, "node-e", total);
        assert!(added <= 0.20 + 0.05 && added > 0.15, "4 -> 5 moved {added}");
    }
}
