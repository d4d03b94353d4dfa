//! Property tests: the record codec never panics and round-trips; the layout never exceeds the
//! budget; random writes through a real store keep its disk use within the budget.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use bytes::Bytes;
use edgecache_store::EngineChoice;
use edgecache_store::Layout;
use edgecache_store::StoreWorker;
use edgecache_store::record::{self, FIXED, RecordHeader};
use proptest::prelude::*;
use store_support::*;

proptest! {
    #[test]
    fn decode_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..9000), magic in any::<bool>()) {
        if magic && bytes.len() >= 8 {
            bytes[..8].copy_from_slice(&record::RECORD_MAGIC);
        }
        let _ = record::peek(&bytes);
        let _ = record::decode(&bytes, 7);
        let _ = record::decode_segment(&bytes, 7, 0);
        let _ = record::Superblock::decode(&bytes);
    }

    /// A packed record's room for a bigger meta (a 304's headers rewritten in place) comes out
    /// of the padding its last block has anyway: at least `MIN_PACKED_SLACK` bytes, up to
    /// `META_SLACK`, and never a block more than the minimum slack needs.
    #[test]
    fn packed_slack_takes_no_block_of_its_own(
        primary in 0usize..300,
        variant in 0usize..50,
        meta in 0usize..2000,
        body_len in 0u64..(200 << 10),
    ) {
        let hl = record::packed_header_len(primary, variant, body_len, meta);
        prop_assert!(record::is_packed(hl), "{hl}");
        prop_assert_eq!(hl % 8, 0);
        let used = (FIXED + primary + variant + meta) as u64 + 4 * record::block_count(body_len);
        let slack = hl - used;
        prop_assert!(slack >= record::MIN_PACKED_SLACK as u64, "slack {slack}");
        prop_assert!(slack < (record::META_SLACK + 16) as u64, "slack {slack}");
        let least = (used + record::MIN_PACKED_SLACK as u64).next_multiple_of(8);
        let blocks = |h: u64| (h + body_len).div_ceil(4096);
        prop_assert!(blocks(hl) <= blocks(least) + u64::from(least.is_multiple_of(4096)), "{hl} {least}");
    }

    #[test]
    fn header_round_trips(
        primary in proptest::collection::vec(any::<u8>(), 0..300),
        variant in proptest::collection::vec(any::<u8>(), 0..50),
        meta in proptest::collection::vec(any::<u8>(), 0..5000),
        body_len in 0u64..(64 << 20),
        seq in any::<u64>(),
        epoch in any::<u64>(),
    ) {
        let hl = record::header_len_for(primary.len(), variant.len(), body_len, meta.len());
        prop_assert_eq!(hl % 4096, 0);
        let crcs: Vec<u32> = (0..record::block_count(body_len)).map(|i| i as u32 * 31).collect();
        let meta_cap = (hl as usize - FIXED - primary.len() - variant.len() - 4 * crcs.len()) as u32;
        prop_assert!(meta_cap as usize >= meta.len() + record::META_SLACK);
        let h = RecordHeader {
            flags: 0, header_len: hl as u32, nonce: 99, epoch, seq, body_len,
            primary: Bytes::from(primary), variant: Bytes::from(variant),
            crcs, meta: Bytes::from(meta), meta_cap,
        };
        let mut buf = vec![0u8; hl as usize];
        h.encode(&mut buf);
        prop_assert_eq!(record::decode(&buf, 99).unwrap(), h);
    }

    #[test]
    fn layout_within_budget(budget in 0u64..(1u64 << 44)) {
        let l = Layout::plan(budget);
        prop_assert!(l.capacity() <= budget.max(64 << 20));
        prop_assert!((8..=256).contains(&l.segment_count));
        prop_assert_eq!(l.segment_size % (1 << 20), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn random_writes_stay_within_budget(ops in proptest::collection::vec((0u64..40, 0usize..3_000_000, any::<bool>()), 20..120)) {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let budget = 64 * MIB;
        let store = open(dir.path(), budget, EngineChoice::Threads);
        run(EngineChoice::Threads, async {
            let w = StoreWorker::new(store.clone()).unwrap();
            for (i, (key, size, known)) in ops.iter().enumerate() {
                let k = format!("/p{key}");
                put(&w, &k, "", &format!("{i}"), &content(&k, i as u64, *size), *known || *size > 8 << 20, 100_000).await.unwrap();
                let s = store.stats();
                assert!(s.bytes_used <= s.bytes_capacity && s.bytes_capacity <= budget, "{s:?}");
                // The last write of a key is what a read returns.
                let (meta, body) = get(&w, &k).await.unwrap();
                assert_eq!(meta, format!("{i}"));
                assert!(body == content(&k, i as u64, *size));
            }
        });
    }
}
