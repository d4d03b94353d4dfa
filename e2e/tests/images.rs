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

/// The `-p` packages of the `cargo build` in images/build-local.sh: the binaries the local images
/// carry, built in one cargo invocation (so with their features unified).
fn build_local_packages() -> Vec<String> {
    let script = std::fs::read_to_string(repo_root().join("images/build-local.sh")).unwrap();
    let joined = script.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.contains("cargo build --release") && l.contains(" -p "))
        .expect("images/build-local.sh has a `cargo build --release` line");
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "-p")
        .map(|w| w[1].trim_end_matches(')').to_string())
        .collect()
}

/// Builds `packages` in one cargo invocation (the debug profile: cargo resolves features the same
/// way for every profile) and returns the path of the executable `bin`.
fn build_together(packages: &[String], bin: &str) -> std::path::PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(repo_root()).args([
        "build",
        "--locked",
        "--message-format=json-render-diagnostics",
    ]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd.stderr(std::process::Stdio::inherit()).output().unwrap();
    assert!(out.status.success(), "cargo build {packages:?} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == bin)
        .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
        .unwrap_or_else(|| panic!("cargo built no executable {bin}"))
}

/// Defect 19 of issue 35: built together with the data plane (as images/build-local.sh builds
/// the images), the operator had two rustls crypto providers compiled in and none installed, and
/// panicked in `kube::Client::try_default` ("Could not automatically determine the process-level
/// CryptoProvider"). Against a cluster it cannot reach it must say so and exit, not panic.
#[test]
fn the_operator_built_with_the_images_binaries_reports_an_unreachable_cluster() {
    let packages = build_local_packages();
    assert!(
        packages.iter().any(|p| p == "edgecache-operator")
            && packages.iter().any(|p| p == "edgecache-dataplane"),
        "{packages:?}"
    );
    let bin = build_together(&packages, "edgecache-operator");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: bogus\n\
         clusters:\n- name: bogus\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\n\
         users:\n- name: bogus\n  user:\n    token: not-a-token\n\
         contexts:\n- name: bogus\n  context:\n    cluster: bogus\n    user: bogus\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(&bin)
        .args(["run", "--admin-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after 30 s against https://127.0.0.1:1; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("CryptoProvider"),
        "{stderr}"
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the Kubernetes API server at https://127.0.0.1:1"),
        "{stderr}"
    );
}
