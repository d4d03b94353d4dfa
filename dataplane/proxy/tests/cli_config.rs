//! `check-config` and a bad config given to `serve`, through the real binary.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::*;

#[test]
fn check_config_reports_every_error_with_path_value_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "origin:\n  url: https://origin\n  colour: blue\nstorage:\n  size: 1MiB\n  directIoThreshold: 1000\nworkers:\n  queueOffset: 3\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // Shape errors first: the unknown field is reported and values are not judged yet.
    assert!(err.contains("origin.colour: unknown field"), "{err}");

    std::fs::write(
        &bad,
        "origin:\n  url: https://origin\nstorage:\n  size: 1MiB\n  directIoThreshold: 1000\nworkers:\n  queueOffset: 3\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "origin.url: must start with http://",
        "storage.size: must be at least 64MiB (got 1MiB)",
        "storage.directIoThreshold: must be a positive multiple of 4096 (got 1000)",
        "workers.queueOffset: must be 0",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }

    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "origin:\n  url: http://127.0.0.1:8000\nstorage:\n  size: 1GiB\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(": ok"));
}

#[test]
fn serve_with_a_bad_config_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "origin:\n  url: http://127.0.0.1:1\nstorage:\n  size: 12 parsecs\n",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    // Port 0: a port picked here could be taken by another test before the child binds it
    // (and a process that has exited listens nowhere anyway): the log shows it never got ready.
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .args(["--listen", "127.0.0.1:0", "--cache-dir"])
        .arg(&cache)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("storage.size") && err.contains("`12 parsecs`"),
        "{err}"
    );
    assert!(!cache.exists(), "no store was opened");
    assert!(!err.contains("data plane ready"), "it never served: {err}");
}
