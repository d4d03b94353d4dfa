//! Fuzz target: the record decoder (`store::record`: record header, segment header,
//! superblock) from arbitrary bytes, and from valid headers with random corruption. Corpus:
//! `tests/corpus/record/`, raw header bytes per file (decoded with nonce [`NONCE`]).
//!
//! Invariants: no panic; `peek` bounds hold (`used <= header_len <= MAX_HEADER_LEN`, a multiple
//! of 8: 4096 for a header in blocks of its own, 8 for a packed one); a decoded header's checksum matches its bytes, recomputed here independently; a
//! corrupted valid header decodes to an error or to exactly the header that was encoded.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "../../policy/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use bytes::Bytes;
use edgecache_store::record::{self, FIXED, MAX_HEADER_LEN, RecordHeader};
use proptest::prelude::*;

const TARGET: &str = "record";
/// The store nonce the corpus files are encoded with.
const NONCE: u64 = 7;
const CRC_AT: usize = 72;

fn check(input: &[u8]) {
    let _ = record::decode_segment(input, NONCE, 0);
    let _ = record::Superblock::decode(input);
    let Ok((header_len, used)) = record::peek(input) else {
        assert!(record::decode(input, NONCE).is_err());
        return;
    };
    assert!(header_len % 8 == 0 && header_len <= MAX_HEADER_LEN);
    assert!(FIXED <= used && used as u64 <= header_len);
    let Ok(h) = record::decode(input, NONCE) else {
        return;
    };
    assert_eq!(h.used(), used);
    assert_eq!(u64::from(h.header_len), header_len);
    let mut zeroed = input[..used].to_vec();
    zeroed[CRC_AT..CRC_AT + 4].fill(0);
    let stored = u32::from_le_bytes(input[CRC_AT..CRC_AT + 4].try_into().unwrap());
    assert_eq!(
        crc32c::crc32c(&zeroed),
        stored,
        "decoded with a bad checksum"
    );
    assert!(h.meta.len() <= h.meta_cap as usize);
    assert_eq!(h.meta_at() + h.meta_cap as usize, used);
}

/// A valid encoded header of the given parts.
fn encoded(
    primary: &[u8],
    variant: &[u8],
    meta: &[u8],
    body_len: u64,
    dead: bool,
) -> (RecordHeader, Vec<u8>) {
    let hl = record::header_len_for(primary.len(), variant.len(), body_len, meta.len());
    let crcs: Vec<u32> = (0..record::block_count(body_len))
        .map(|i| i as u32 ^ 0x5a5a)
        .collect();
    let meta_cap = (hl as usize - FIXED - primary.len() - variant.len() - 4 * crcs.len()) as u32;
    let h = RecordHeader {
        flags: u16::from(dead),
        header_len: hl as u32,
        nonce: NONCE,
        epoch: 3,
        seq: 11,
        body_len,
        primary: Bytes::copy_from_slice(primary),
        variant: Bytes::copy_from_slice(variant),
        crcs,
        meta: Bytes::copy_from_slice(meta),
        meta_cap,
    };
    let mut buf = vec![0u8; hl as usize];
    h.encode(&mut buf);
    (h, buf)
}

#[test]
fn fuzz_record_corpus() {
    fuzz_support::replay(TARGET, check);
}

/// Writes the seed files of the corpus; run by hand after a format change:
/// `cargo test -p edgecache-store --test fuzz_record -- --ignored write_record_corpus`.
#[test]
#[ignore = "regenerates tests/corpus/record"]
fn write_record_corpus() {
    let dir = fuzz_support::corpus_dir(TARGET);
    let (_, small) = encoded(b"http://a/", b"", b"status: 200\r\n", 10, false);
    let (_, large) = encoded(b"http://a/big", b"accept=gzip", &[1; 700], 300_000, false);
    let (_, dead) = encoded(b"", b"", b"", 4096, true);
    let mut torn = small.clone();
    torn[FIXED] ^= 1;
    let mut other_store = small.clone();
    other_store[16] ^= 1;
    let mut bad_version = small.clone();
    bad_version[8] = 2;
    let mut too_long = small.clone();
    too_long[12..16].copy_from_slice(&(8u32 << 20).to_le_bytes());
    for (name, bytes) in [
        ("valid_small", &small[..]),
        ("valid_large", &large[..]),
        ("valid_dead", &dead[..]),
        ("torn_key", &torn[..]),
        ("other_store", &other_store[..]),
        ("bad_version", &bad_version[..]),
        ("header_len_too_long", &too_long[..]),
        ("truncated", &small[..FIXED + 3]),
        ("magic_only", &record::RECORD_MAGIC[..]),
        (
            "superblock",
            &record::Superblock {
                nonce: NONCE,
                segment_size: 8 << 20,
                segment_count: 8,
            }
            .encode()[..],
        ),
    ] {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

proptest! {
    #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES))]

    #[test]
    fn fuzz_record_arbitrary(mut bytes in proptest::collection::vec(any::<u8>(), 0..9000), magic in any::<bool>()) {
        if magic && bytes.len() >= 10 {
            bytes[..8].copy_from_slice(&record::RECORD_MAGIC);
            bytes[8..10].copy_from_slice(&record::VERSION.to_le_bytes());
        }
        check(&bytes);
    }

    #[test]
    fn fuzz_record_corrupted_valid_header(
        primary in proptest::collection::vec(any::<u8>(), 0..100),
        meta in proptest::collection::vec(any::<u8>(), 0..600),
        body_len in 0u64..(1 << 22),
        dead in any::<bool>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let (h, mut buf) = encoded(&primary, b"v", &meta, body_len, dead);
        for (at, x) in &flips {
            let i = at.index(buf.len());
            buf[i] ^= x;
        }
        if let Some(cut) = cut {
            buf.truncate(cut.index(buf.len()));
        }
        check(&buf);
        if let Ok(got) = record::decode(&buf, NONCE) {
            prop_assert_eq!(got, h, "a corrupted header decoded to something else");
        }
    }
}
