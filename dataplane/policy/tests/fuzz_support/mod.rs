//! Shared by the `fuzz_*` test files: the number of generated cases and the corpus replay.
//!
//! Each `fuzz_<target>.rs` replays every file of `tests/corpus/<target>/` in plain `cargo test`,
//! then runs a proptest over arbitrary input. `EDGECACHE_FUZZ_CASES` sets how many cases each
//! proptest runs (default [`DEFAULT_CASES`]); a failing input that proptest shrinks is worth
//! saving as a new corpus file.
#![allow(dead_code, clippy::unwrap_used)] // test harness: a panic is the failure report

use std::path::{Path, PathBuf};

use proptest::test_runner::Config;

/// Cases per proptest when `EDGECACHE_FUZZ_CASES` is unset: keeps `cargo test` fast.
pub const DEFAULT_CASES: u32 = 256;

/// The proptest configuration of every fuzz target: `cases` from the environment (or
/// `default`), and no regression files (the corpus folders play that role).
pub fn config(default: u32) -> Config {
    let cases = std::env::var("EDGECACHE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// `tests/corpus/<target>/`.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(target)
}

/// Run `check` on every file of the target's corpus, naming the file that fails.
pub fn replay(target: &str, check: impl Fn(&[u8])) {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no corpus", dir.display());
    for path in files {
        let input = std::fs::read(&path).unwrap();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input)));
        if let Err(panic) = run {
            eprintln!("corpus file {} fails", path.display());
            std::panic::resume_unwind(panic);
        }
    }
}
