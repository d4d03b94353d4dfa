//! The shipped multi-stage Dockerfiles and the local (no-pull) ones build equivalent images: the
//! same runtime stage (files, user, entrypoint, command, ports), only the base and where the
//! binary comes from differ. The container tier (`e2e/container-tier.sh`) builds the local ones
//! and runs them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use edgecache_e2e::dockerfile::{runtime_base, runtime_stage};
use edgecache_e2e::repo_root;

fn read(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("images").join(name))
        .unwrap_or_else(|e| panic!("images/{name}: {e}"))
}

fn check(image: &str, shipped_base: &str, user: &str) {
    let shipped = read(&format!("{image}.Dockerfile"));
    let local = read(&format!("{image}.local.Dockerfile"));
    assert_eq!(
        runtime_base(&shipped).as_deref(),
        Some(shipped_base),
        "{image}"
    );
    assert_eq!(runtime_base(&local).as_deref(), Some("${BASE}"), "{image}");
    let a = runtime_stage(&shipped);
    let b = runtime_stage(&local);
    assert_eq!(
        a, b,
        "images/{image}.Dockerfile and images/{image}.local.Dockerfile runtime stages differ"
    );
    let bin = format!("edgecache-{image}");
    assert!(
        a.contains(&format!("COPY {bin} /usr/local/bin/{bin}")),
        "{a:?}"
    );
    assert!(a.contains(&format!("USER {user}")), "{a:?}");
    assert!(
        a.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{bin}\"]")),
        "{a:?}"
    );
    // The builder: the pinned toolchain, clang and libbpf-dev for the eBPF object, a locked build.
    assert!(shipped.contains("FROM rust:1.95-bookworm AS builder"));
    assert!(shipped.contains("clang libbpf-dev"));
    assert!(shipped.contains(&format!("cargo build --release --locked -p {bin}")));
    assert!(
        !shipped.contains(":latest") && !local.contains(":latest"),
        "no floating tags"
    );
}

#[test]
fn dataplane_images_are_equivalent() {
    check("dataplane", "debian:bookworm-slim", "0:0");
}

#[test]
fn operator_images_are_equivalent_and_non_root() {
    check(
        "operator",
        "gcr.io/distroless/cc-debian12:nonroot",
        "65532:65532",
    );
}

#[test]
fn the_operator_image_user_matches_the_chart() {
    // The chart runs the operator as 65532 (distroless `nonroot`), the image's USER.
    let deployment =
        std::fs::read_to_string(repo_root().join("charts/edgecache/templates/deployment.yaml"))
            .unwrap();
    assert!(deployment.contains("runAsUser: 65532"));
    assert!(deployment.contains("runAsGroup: 65532"));
}
