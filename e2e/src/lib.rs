//! Shipping checks for EdgeCache.
//!
//! - [`chart`]: finds helm (`charts/install-helm.sh` installs it) and renders the chart, for the
//!   offline chart tests (`tests/chart_render.rs`).
//! - [`cluster`]: the kind end-to-end harness (`tests/kind.rs`, run by `e2e/run.sh`): a kube
//!   client from the current KUBECONFIG, or the reason there is none, one namespace per test,
//!   `eventually`, requests through the API server's pod proxy, diagnostics on failure.
//! - [`dockerfile`]: the runtime stage of a Dockerfile, to prove the shipped and the local image
//!   builds equivalent (`tests/images.rs`).

use std::path::PathBuf;

pub mod chart;
pub mod cluster;
pub mod dockerfile;

/// The repository root (the workspace).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".."))
}
