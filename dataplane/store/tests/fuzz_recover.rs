//! Fuzz target: the recovery scan at `Store::open` (`store/recover.rs`) over a segment file that
//! is arbitrary bytes, or the records of a real store with random corruption. Corpus:
//! `tests/corpus/recover/`, one program per file: the first byte picks the mode, the rest is
//! its argument.
//!
//! * mode 0 (`raw`): the bytes after segment 0's header are replaced by the argument.
//! * mode 1 (`edits`): 6-byte edits of the written records: `u32 LE offset`, `kind`, `value`;
//!   kind 0 flips bits, 1 zeroes the 4 KiB block, 2 zeroes from the offset on (a torn tail),
//!   3 copies the block `value` to the offset's block.
//!
//! Invariants: opening never panics or fails; the index holds at most the keys written; what a
//! lookup finds has the meta that was written for its key, and a read returns either an error
//! or exactly the body that was written (record and body checksums are never bypassed).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "../../policy/tests/fuzz_support/mod.rs"]
mod fuzz_support;
mod store_support;

use std::path::Path;
use std::sync::OnceLock;

use edgecache_store::EngineChoice;
use edgecache_store::StoreWorker;
use proptest::prelude::*;
use store_support::*;

const TARGET: &str = "recover";
const ENGINE: EngineChoice = EngineChoice::Threads;
const BUDGET: u64 = 64 * MIB;
const KEYS: usize = 6;
const SEG0: &str = "seg-0000.dat";
const SUPER: &str = "store.super";

fn key(i: usize) -> String {
    format!("/k{i}")
}

fn meta(i: usize) -> String {
    format!("meta {i}")
}

fn body(i: usize) -> Vec<u8> {
    content(
        &key(i),
        i as u64,
        [10, 5000, 70_000, 200_000, 1, 4096][i % 6],
    )
}

/// A store with [`KEYS`] objects, closed: its superblock and segment 0's written prefix.
fn template() -> &'static (Vec<u8>, Vec<u8>) {
    static T: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    T.get_or_init(|| {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let store = open(dir.path(), BUDGET, ENGINE);
        run(ENGINE, async {
            let w = StoreWorker::new(store.clone()).unwrap();
            for i in 0..KEYS {
                put(&w, &key(i), "", &meta(i), &body(i), i % 2 == 0, 3000)
                    .await
                    .unwrap();
            }
        });
        drop(store);
        let seg = std::fs::read(dir.path().join(SEG0)).unwrap();
        let written = seg.iter().rposition(|&b| b != 0).map_or(4096, |p| p + 1);
        let prefix = seg[..written.div_ceil(4096) * 4096 + 4096].to_vec();
        (std::fs::read(dir.path().join(SUPER)).unwrap(), prefix)
    })
}

/// Segment 0's prefix after the program `input`.
fn mutate(prefix: &[u8], input: &[u8]) -> Vec<u8> {
    let mut seg = prefix.to_vec();
    let Some((&mode, arg)) = input.split_first() else {
        return seg;
    };
    if mode % 2 == 0 {
        seg.truncate(4096);
        seg.extend_from_slice(arg);
        return seg;
    }
    let len = seg.len();
    for edit in arg.chunks_exact(6) {
        let at = u32::from_le_bytes([edit[0], edit[1], edit[2], edit[3]]) as usize % len;
        let block = at / 4096 * 4096;
        match edit[4] % 4 {
            0 => seg[at] ^= edit[5] | 1,
            1 => seg[block..(block + 4096).min(len)].fill(0),
            2 => seg[at..].fill(0),
            _ => {
                let from = usize::from(edit[5]) * 4096 % len / 4096 * 4096;
                let n = 4096.min(len - from).min(len - block);
                seg.copy_within(from..from + n, block);
            }
        }
    }
    seg
}

fn check_dir(dir: &Path, intact: bool) {
    let store = open(dir, BUDGET, ENGINE);
    let stats = store.stats();
    assert!(stats.objects <= KEYS as u64, "{stats:?}");
    if intact {
        assert_eq!(
            stats.objects, KEYS as u64,
            "an untouched segment recovers every record"
        );
    }
    run(ENGINE, async {
        let w = StoreWorker::new(store.clone()).unwrap();
        for i in 0..KEYS {
            for r in store.lookup(key(i).as_bytes()) {
                if let Ok(o) = w.open(&r).await {
                    let r = &o.object_ref;
                    assert!(r.variant.is_empty(), "{i}: {:?}", r.variant);
                    assert_eq!(r.meta, meta(i).as_bytes(), "{i}");
                }
            }
            if let Some((m, b)) = get(&w, &key(i)).await {
                assert_eq!(m, meta(i).as_bytes(), "{i}");
                assert!(b == body(i), "{i}: a read returned another body");
            }
        }
    });
}

fn check(input: &[u8]) {
    let (superblock, prefix) = template();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(dir.path().join(SUPER), superblock).unwrap();
    std::fs::write(dir.path().join(SEG0), mutate(prefix, input)).unwrap();
    let no_edits = input.len() <= 1 && input.first().is_none_or(|mode| mode % 2 == 1);
    check_dir(dir.path(), no_edits);
}

#[test]
fn fuzz_recover_corpus() {
    fuzz_support::replay(TARGET, check);
}

proptest! {
    // A case opens a store: fewer of them by default.
    #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES / 8))]

    #[test]
    fn fuzz_recover_arbitrary(
        mode in any::<u8>(),
        arg in proptest::collection::vec(any::<u8>(), 0..30_000),
        magic_every in proptest::option::of(1usize..8),
    ) {
        let mut arg = arg;
        if mode % 2 == 0 && let Some(n) = magic_every {
            // Our magic and version at block starts, so the scan reaches the header decoder.
            for at in (0..arg.len().saturating_sub(10)).step_by(4096 * n) {
                arg[at..at + 8].copy_from_slice(b"ECRECRD1");
                arg[at + 8..at + 10].copy_from_slice(&1u16.to_le_bytes());
            }
        }
        let mut input = vec![mode];
        input.extend_from_slice(&arg);
        check(&input);
    }
}
