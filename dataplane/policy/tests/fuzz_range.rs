//! Fuzz target: the Range field (RFC 9110 14.1.2, 14.2) from arbitrary bytes. Corpus:
//! `tests/corpus/range/`, one field value per file.
//!
//! Invariants: no panic; parsing is deterministic; a parsed set is non-empty and every
//! `first-last` spec has `first <= last`; a resolved spec lies inside the representation.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod fuzz_support;

use edgecache_policy::range::{self, RangeSpec};
use proptest::prelude::*;

const TARGET: &str = "range";

fn check(input: &[u8]) {
    let s = String::from_utf8_lossy(input);
    let specs = range::parse(&s);
    assert_eq!(specs, range::parse(&s), "deterministic");
    let Some(specs) = specs else { return };
    assert!(!specs.is_empty());
    for spec in specs {
        if let RangeSpec::Int {
            first,
            last: Some(last),
        } = spec
        {
            assert!(first <= last, "{spec:?}");
        }
        for len in [0, 1, 2, 100, 4096, u64::MAX - 1, u64::MAX] {
            if let Some((first, last)) = spec.resolve(len) {
                assert!(
                    first <= last && last < len,
                    "{spec:?} in {len}: {first}-{last}"
                );
            }
        }
    }
}

#[test]
fn fuzz_range_corpus() {
    fuzz_support::replay(TARGET, check);
}

proptest! {
    #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES))]

    #[test]
    fn fuzz_range_arbitrary(
        input in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..120),
            r"[ ]?(bytes|BYTES|items)?[ ]?=?([ \t]*[0-9]{0,21}[ ]?-?[ ]?[0-9]{0,21}[ \t]*,?){0,5}"
                .prop_map(String::into_bytes),
        ],
    ) {
        check(&input);
    }
}
