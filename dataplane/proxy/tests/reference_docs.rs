//! The data plane's generated reference pages (`docs/reference/dataplane-*.md`) must be what
//! `edgecache-dataplane reference` prints today (regenerate: `scripts/reference-docs.sh`), and
//! the metrics page must name every family a running data plane exposes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

mod common;

use common::{Dataplane, Opts, origin};
use edgecache_docgen::metrics::families;
use edgecache_docgen::page::{check_binary_pages, committed_reference_dir};

#[test]
fn committed_reference_pages_are_what_the_binary_generates() {
    let committed = committed_reference_dir(env!("CARGO_MANIFEST_DIR"));
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_edgecache-dataplane"));
    if let Err(stale) = check_binary_pages(binary, &committed) {
        panic!("{stale}");
    }
}

/// The reference registry is filled by the registration functions `serve` calls; a family that
/// `serve` registers some other way would be missing from the page.
#[test]
fn every_family_a_running_data_plane_exposes_is_in_the_metrics_page() {
    let committed = committed_reference_dir(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(committed.join("dataplane-metrics.md")).unwrap();
    let origin = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = Dataplane::start(Opts::new(&origin.url(), dir.path()));
    dp.get("/obj/4k/1");
    let scraped = families(&dp.metrics());
    assert!(scraped.len() > 40, "{scraped:?}");
    let missing: Vec<&str> = scraped
        .iter()
        .map(|f| f.name.as_str())
        .filter(|name| {
            let short = name.trim_start_matches("edgecache_dataplane_");
            !page.contains(&format!("| `{short}` |")) && !page.contains(&format!("| `{name}` |"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "families /metrics exposes but docs/reference/dataplane-metrics.md lacks: {missing:?}; \
         register them through src/reference.rs's registry too, then run \
         scripts/reference-docs.sh"
    );
}
