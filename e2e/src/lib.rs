//! Shipping checks for EdgeCache.
//!
//! - [`chart`]: finds helm (`charts/install-helm.sh` installs it) and renders the chart, for the
//!   offline chart tests (`tests/chart_render.rs`).
//! - [`cluster`]: the kind end-to-end harness (`tests/kind.rs`, run by `e2e/run.sh`): a kube
//!   client from the current KUBECONFIG, or the reason there is none, one namespace per test,
//!   `eventually`, requests through the API server's pod proxy, diagnostics on failure.
//! - [`scenarios`]: the EdgeCaches of the kind scenarios, also checked offline against the CRD's
//!   CEL rules (`tests/scenarios_offline.rs`).
//! - [`dockerfile`]: the runtime stage of a Dockerfile, to prove the shipped and the local image
//!   builds equivalent (`tests/images.rs`).
//! - [`docs_pages`]: README.md and docs/, for the docs' tests (`tests/docs_*.rs`).

use std::path::PathBuf;

pub mod chart;
pub mod cluster;
pub mod dockerfile;
pub mod scenarios;

/// The repository root (the workspace): the nearest directory holding `Cargo.lock` above the
/// package cargo runs the test for. Cargo sets `CARGO_MANIFEST_DIR` when it runs a test, so the
/// files read are those of the checkout under test even when the test binary was reused from a
/// shared target directory built in another checkout; the compile-time value is the fallback.
pub fn repo_root() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let start = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| built.clone(), PathBuf::from);
    start
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .map_or_else(|| built.join(".."), PathBuf::from)
}

/// README.md and every markdown page under `docs/`, sorted: what the docs' tests read.
pub fn docs_pages() -> std::io::Result<Vec<PathBuf>> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}
