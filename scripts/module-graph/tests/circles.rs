//! No circle between the workspace's crates, and no circle between the modules of a data-plane
//! crate larger than the one left when the data plane was split (issue 32): circles can only
//! shrink. `scripts/module-graph.sh` prints the graph.

use std::path::{Path, PathBuf};

use edgecache_module_graph::{Crate, circles, crate_graph, crates_under};

/// The largest circle between the top-level modules of each target allowed today (crate, root
/// file, modules); every target not named here has none. Lower a figure when a circle shrinks
/// (this test says so).
const LIMITS: &[(&str, &str, usize)] = &[];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn workspace_crates() -> Vec<Crate> {
    let root = root();
    let mut crates = Vec::new();
    for dir in ["dataplane", "operator", "bench", "docs", "e2e", "scripts"] {
        crates.extend(crates_under(&root.join(dir)).expect("read the crates"));
    }
    crates
}

#[test]
fn no_circle_between_crates() {
    let crates = workspace_crates();
    assert!(
        crates.iter().any(|c| c.name == "edgecache-dataplane"),
        "the data plane's crate was not found"
    );
    let found = circles(&crate_graph(&crates));
    assert!(
        found.is_empty(),
        "crates that depend on each other: {found:?}"
    );
}

#[test]
fn module_circles_only_shrink() {
    let crates = crates_under(&root().join("dataplane")).expect("read the crates");
    let mut problems = Vec::new();
    for c in &crates {
        for t in &c.targets {
            let root = t.root.display().to_string();
            let limit = LIMITS
                .iter()
                .find(|(name, r, _)| *name == c.name && *r == root)
                .map_or(0, |l| l.2);
            let found = circles(&t.top);
            let biggest = found.first().map_or(0, Vec::len);
            if biggest > limit {
                problems.push(format!(
                    "{} ({root}): a circle of {biggest} modules, more than the {limit} allowed: {:?}",
                    c.name, found[0]
                ));
            } else if biggest < limit {
                problems.push(format!(
                    "{} ({root}): its biggest circle is down to {biggest} modules: lower its \
                     figure in LIMITS (tests/circles.rs) from {limit} to {biggest}",
                    c.name
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n(scripts/module-graph.sh --edges prints the graph)",
        problems.join("\n")
    );
}
