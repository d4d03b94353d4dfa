//! The operator's generated reference pages (`docs/reference/operator-cli.md`, `crds.md`) must be
//! what `edgecache-operator reference` prints today (regenerate: `scripts/reference-docs.sh`).
#![allow(clippy::panic)] // tests may panic

use edgecache_docgen::page::{check_binary_pages, committed_reference_dir};

#[test]
fn committed_reference_pages_are_what_the_binary_generates() {
    let committed = committed_reference_dir(env!("CARGO_MANIFEST_DIR"));
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_edgecache-operator"));
    if let Err(stale) = check_binary_pages(binary, &committed) {
        panic!("{stale}");
    }
}
