use std::collections::HashMap;

use super::*;

fn rec(block: u32) -> Rec {
    Rec {
        block,
        blocks: 2,
        epoch_lo: 1,
        verified: false,
    }
}

fn all_live(_: Rec) -> bool {
    true
}

fn by_block(r: Rec) -> u64 {
    u64::from(r.block)
}

/// A well-spread 64-bit hash of `i` (splitmix64), standing in for `key_hash`.
fn h(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn a_miss_finds_nothing_and_a_hit_finds_its_record() {
    let ix = Index::new(1000, 1 << 20);
    assert!(ix.lookup(h(1), &all_live).is_empty());
    let d = ix.insert(h(1), 0, rec(7), 32, &all_live, &by_block);
    assert_eq!(d, Displaced::default());
    assert_eq!(
        ix.lookup(h(1), &all_live),
        [Found {
            vtag: 0,
            rec: rec(7)
        }]
    );
    assert!(ix.lookup(h(2), &all_live).is_empty());
    assert_eq!(ix.len(), 1);
}

#[test]
fn the_same_tags_replace_and_other_variants_stay_beside() {
    let ix = Index::new(1000, 1 << 20);
    ix.insert(h(1), 3, rec(10), 32, &all_live, &by_block);
    ix.insert(h(1), 4, rec(11), 32, &all_live, &by_block);
    let d = ix.insert(h(1), 3, rec(12), 32, &all_live, &by_block);
    assert_eq!(d.replaced, Some(rec(10)));
    let mut found: Vec<_> = ix
        .lookup(h(1), &all_live)
        .iter()
        .map(|f| (f.vtag, f.rec.block))
        .collect();
    found.sort();
    assert_eq!(found, [(3, 12), (4, 11)]);
    assert_eq!(ix.remove(h(1), Some(4), None), [rec(11)]);
    assert_eq!(ix.remove(h(1), None, None), [rec(12)]);
    assert!(ix.is_empty());
}

#[test]
fn past_the_variant_cap_the_oldest_variant_goes() {
    let ix = Index::new(1000, 1 << 20);
    for v in 1..=5u8 {
        ix.insert(h(9), v, rec(u32::from(v)), 3, &all_live, &by_block);
    }
    let mut blocks: Vec<_> = ix
        .lookup(h(9), &all_live)
        .iter()
        .map(|f| f.rec.block)
        .collect();
    blocks.sort();
    assert_eq!(blocks, [3, 4, 5]);
}

#[test]
fn stale_entries_are_invisible_and_give_their_slot() {
    let ix = Index::new(1000, 1 << 20);
    ix.insert(h(1), 0, rec(5), 32, &all_live, &by_block);
    let none = |_: Rec| false;
    assert!(ix.lookup(h(1), &none).is_empty());
    assert_eq!(ix.sweep(shard_of(h(1)), &none), 1);
    assert!(ix.is_empty());
}

#[test]
fn verified_is_kept_per_record() {
    let ix = Index::new(1000, 1 << 20);
    ix.insert(h(1), 0, rec(5), 32, &all_live, &by_block);
    assert!(!ix.set_verified(h(1), 6));
    assert!(ix.set_verified(h(1), 5));
    assert!(ix.lookup(h(1), &all_live)[0].rec.verified);
}

#[test]
fn it_grows_to_its_bound_and_then_evicts_the_oldest_and_says_so() {
    // Starts with room for 1,000 objects and may take 64 KiB per shard at most.
    let max = 64 * SHARDS as u64 * 1024;
    let ix = Index::new(1000, max);
    let first = ix.bytes();
    let (mut evicted, mut replaced) = (0, 0);
    let n = 200_000u64;
    for i in 0..n {
        let d = ix.insert(h(i), 0, rec(i as u32), 32, &all_live, &by_block);
        evicted += d.evicted.len();
        replaced += usize::from(d.replaced.is_some());
    }
    // A 24-bit tag collision in a window looks like the same object: rare.
    assert!(replaced < 10, "{replaced} tag collisions");
    assert!(ix.bytes() > first, "it grew");
    assert!(
        ix.bytes() <= max,
        "within its bound: {} > {max}",
        ix.bytes()
    );
    assert_eq!(ix.bytes(), ix.max_bytes());
    assert!(evicted > 0);
    assert_eq!(
        ix.len() + (evicted + replaced) as u64,
        n,
        "every insert is indexed or counted evicted"
    );
    // The newest are all there (eviction takes the oldest of a window).
    let recent = (n - 1000..n)
        .filter(|&i| !ix.lookup(h(i), &all_live).is_empty())
        .count();
    assert!(recent >= 990, "{recent} of the 1,000 newest found");
}

#[test]
fn every_object_is_found_after_the_doublings() {
    let ix = Index::new(10_000, 1 << 30);
    let n = 300_000u64;
    for i in 0..n {
        ix.insert(
            h(i),
            (i % 100) as u8,
            rec(i as u32),
            32,
            &all_live,
            &by_block,
        );
    }
    let found = (0..n)
        .filter(|&i| {
            let f = ix.lookup(h(i), &all_live);
            f.iter()
                .any(|f| f.rec.block == i as u32 && f.vtag == (i % 100) as u8)
        })
        .count() as u64;
    assert!(found > n - n / 1000, "{} of {n} lost", n - found);
    // Grown from 10,000 to 300,000 by doublings: within twice the full table's 13.7 bytes.
    let per = ix.bytes() as f64 / n as f64;
    assert!(per <= 28.0, "{per} bytes per object");
}

#[test]
fn sixteen_bytes_per_object_at_a_million() {
    // Sized from its first guess, as the store does, then filled.
    let n = 1_000_000u64;
    let ix = Index::new(n, 1 << 30);
    let mut lost = 0;
    for i in 0..n {
        let d = ix.insert(h(i), 0, rec(i as u32), 32, &all_live, &by_block);
        lost += d.evicted.len() + usize::from(d.replaced.is_some());
    }
    assert_eq!(ix.len() + lost as u64, n);
    assert!(
        lost < 1000,
        "{lost} of a million evicted by full windows or tag collisions"
    );
    let per = ix.bytes() as f64 / n as f64;
    assert!(per <= 16.0, "{per} bytes per object");
}

#[test]
fn misses_rarely_find_a_false_candidate() {
    let n = 100_000u64;
    let ix = Index::new(n, 1 << 30);
    for i in 0..n {
        ix.insert(h(i), 0, rec(i as u32), 32, &all_live, &by_block);
    }
    let false_hits = (n..3 * n)
        .filter(|&i| !ix.lookup(h(i), &all_live).is_empty())
        .count();
    // 32 slots against a 24-bit tag: about 1 in 500,000.
    assert!(
        false_hits < 5,
        "{false_hits} of 200,000 misses found a candidate"
    );
}

#[test]
fn shards_are_used_by_many_threads_at_once() {
    let ix = std::sync::Arc::new(Index::new(10_000, 1 << 28));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let ix = ix.clone();
            std::thread::spawn(move || {
                let mut displaced = 0;
                for i in 0..20_000u64 {
                    let k = (t << 32) | i;
                    let d = ix.insert(h(k), 0, rec(k as u32), 32, &all_live, &by_block);
                    displaced += d.evicted.len() as u64 + u64::from(d.replaced.is_some());
                    assert!(!ix.lookup(h(k), &all_live).is_empty());
                }
                displaced
            })
        })
        .collect();
    let mut displaced = 0;
    for t in threads {
        displaced += t.join().unwrap_or(u64::MAX / 2);
    }
    assert_eq!(ix.len() + displaced, 160_000);
    assert!(displaced < 160, "{displaced} displaced while growing 16x");
}

#[test]
fn records_pack_and_unpack() {
    let r = Rec {
        block: u32::MAX - 3,
        blocks: MAX_BLOCKS,
        epoch_lo: 0xab,
        verified: true,
    };
    let p = Packed::new(r, 0x55, 0x2a, 3, 0x77);
    assert_eq!(
        (p.rec(), p.vtag(), p.ext(), p.place(), p.tag_lo()),
        (r, 0x55, 0x2a, 3, 0x77)
    );
    let long = Rec {
        blocks: u32::MAX,
        ..r
    };
    assert_eq!(Packed::new(long, 0, 0, 0, 0).rec().blocks, MAX_BLOCKS);
}

proptest::proptest! {
    /// Against a map model: what was inserted and not removed or displaced is found, and
    /// nothing else under its key.
    #[test]
    fn it_agrees_with_a_map(ops in proptest::collection::vec((0u8..3, 0u64..64, 0u8..4), 1..400)) {
        let ix = Index::new(16, 1 << 24);
        let mut model: HashMap<(u64, u8), u32> = HashMap::new();
        for (n, (op, k, v)) in ops.into_iter().enumerate() {
            let block = n as u32;
            match op {
                0 | 1 => {
                    let d = ix.insert(h(k), v, rec(block), 0, &all_live, &by_block);
                    proptest::prop_assert_eq!(d.replaced.map(|r| r.block), model.insert((k, v), block));
                    proptest::prop_assert!(d.evicted.is_empty());
                }
                _ => {
                    let got: Vec<u32> = ix.remove(h(k), Some(v), None).iter().map(|r| r.block).collect();
                    let want: Vec<u32> = model.remove(&(k, v)).into_iter().collect();
                    proptest::prop_assert_eq!(got, want);
                }
            }
        }
        for (&(k, v), &block) in &model {
            let f = ix.lookup(h(k), &all_live);
            let want = Found { vtag: v, rec: rec(block) };
            proptest::prop_assert!(f.contains(&want));
        }
        proptest::prop_assert_eq!(ix.len(), model.len() as u64);
    }
}
