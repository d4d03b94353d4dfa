//! The stored-response blob: round trips, and garbage never panics.

#![allow(clippy::type_complexity)] // table tests spell their row types inline

mod policy_support;

use edgecache_policy::StoredResponse;
use edgecache_policy::stored::DecodeError;
use policy_support::*;

fn sample() -> StoredResponse {
    StoredResponse::new(
        &get(&[("accept-encoding", "gzip, br"), ("accept-language", "fr")]),
        &resp(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("vary", "Accept-Encoding, Accept-Language, X-Missing"),
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2"),
                ("etag", "\"v1\""),
                ("x-bin", "caf\u{e9}"),
            ],
        ),
        at(-1) + std::time::Duration::from_nanos(123),
        at(0),
    )
}

#[test]
fn policy_round_trip() {
    let s = sample();
    let blob = s.encode();
    assert_eq!(StoredResponse::decode(&blob), Ok(s.clone()));
    let names: Vec<_> = s
        .vary()
        .0
        .iter()
        .map(|(n, v)| (n.as_str(), v.is_some()))
        .collect();
    assert_eq!(
        names,
        [
            ("accept-encoding", true),
            ("accept-language", true),
            ("x-missing", false)
        ]
    );
}

#[test]
fn policy_every_truncation_is_an_error() {
    let blob = sample().encode();
    for len in 0..blob.len() {
        assert!(
            StoredResponse::decode(&blob[..len]).is_err(),
            "prefix of {len} bytes"
        );
    }
    let mut long = blob.to_vec();
    long.push(0);
    assert_eq!(
        StoredResponse::decode(&long),
        Err(DecodeError::TrailingBytes)
    );
}

#[test]
fn policy_header_errors_are_reported() {
    let blob = sample().encode();
    let mut bad = blob.to_vec();
    bad[0] = b'X';
    assert_eq!(StoredResponse::decode(&bad), Err(DecodeError::BadMagic));
    let mut bad = blob.to_vec();
    bad[4] = 9;
    assert_eq!(
        StoredResponse::decode(&bad),
        Err(DecodeError::UnsupportedVersion(9))
    );
    let mut bad = blob.to_vec();
    bad[5..7].copy_from_slice(&42u16.to_be_bytes());
    assert_eq!(StoredResponse::decode(&bad), Err(DecodeError::BadStatus));
    let mut bad = blob.to_vec();
    bad[15..19].copy_from_slice(&2_000_000_000u32.to_be_bytes());
    assert_eq!(StoredResponse::decode(&bad), Err(DecodeError::BadTime));
}

#[test]
fn policy_random_bytes_and_mutations_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let blob = sample().encode().to_vec();
    for i in 0..20_000 {
        let input: Vec<u8> = if i % 2 == 0 {
            let len = (rng.next() % 96) as usize;
            let mut v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if i % 4 == 0 && v.len() >= 5 {
                v[..5].copy_from_slice(b"ECSR\x01");
            }
            v
        } else {
            let mut v = blob.clone();
            for _ in 0..(1 + rng.next() % 4) {
                let at = (rng.next() as usize) % v.len();
                v[at] = rng.next() as u8;
            }
            v
        };
        if let Ok(decoded) = StoredResponse::decode(&input) {
            // Whatever decodes re-encodes to something that decodes to the same value.
            assert_eq!(StoredResponse::decode(&decoded.encode()), Ok(decoded));
        }
    }
}
