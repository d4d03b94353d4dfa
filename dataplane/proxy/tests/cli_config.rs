//! `check-config` and a bad config given to `serve`, through the real binary.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

#[test]
fn check_config_reports_every_error_with_path_value_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "origin:\n  url: ftp://origin\n  colour: blue\nstorage:\n  size: 1MiB\n  directIoThreshold: 1000\nworkers:\n  queueOffset: 3\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // The unknown field and the invalid values, in one run.
    for needle in [
        "origin.colour: unknown field",
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
    let (err, cache) = serve_with(&cfg);
    assert!(
        err.contains("storage.size: must be a size like 10GiB or 500MiB, or auto (got 12 parsecs)"),
        "{err}"
    );
    assert!(!cache.exists(), "no store was opened");
    assert!(!err.contains("data plane ready"), "it never served: {err}");
}

/// One mistake of each kind: an unknown field, a negative size, a wrong type, a bad enum
/// variant and a bad value.
const FIVE_MISTAKES: &str = "\
origin:
  url: http://127.0.0.1:1
  colour: blue
storage:
  size: -1
  readsInFlight: 0
workers:
  count: lots
  steering: adq
";

const FIVE_MISTAKES_REPORTED: [&str; 5] = [
    "origin.colour: unknown field",
    "storage.size: must be a size like 10GiB or 500MiB, or auto (got -1)",
    "workers.count: must be a whole number (got lots)",
    "workers.steering: must be one of queue, cpu, hash, incoming-cpu, off (got adq)",
    "storage.readsInFlight: must be between 1 and 4096 (got 0)",
];

/// Every mistake is on stderr exactly once, and no line names its field twice.
fn assert_five_mistakes_reported(err: &str) {
    assert!(err.contains("5 errors in config"), "{err}");
    for want in FIVE_MISTAKES_REPORTED {
        assert_eq!(err.matches(want).count(), 1, "{want:?} once in:\n{err}");
    }
    for path in [
        "origin.colour",
        "storage.size",
        "workers.count",
        "workers.steering",
    ] {
        assert_eq!(err.matches(path).count(), 1, "{path} once in:\n{err}");
    }
}

#[test]
fn check_config_reports_every_kind_of_mistake_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, FIVE_MISTAKES).unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_five_mistakes_reported(&String::from_utf8_lossy(&out.stderr));
}

#[test]
fn serve_reports_every_kind_of_mistake_in_its_config_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, FIVE_MISTAKES).unwrap();
    let (err, cache) = serve_with(&cfg);
    assert_five_mistakes_reported(&err);
    assert!(!cache.exists(), "no store was opened");
}

/// Run `serve --config cfg` with a cache dir beside it, which must refuse with status 2:
/// its stderr and the cache dir.
fn serve_with(cfg: &Path) -> (String, PathBuf) {
    let cache = cfg.with_file_name("cache");
    // Port 0: a port picked here could be taken by another test before the child binds it
    // (and a process that has exited listens nowhere anyway): the log shows it never got ready.
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(cfg)
        .args(["--listen", "127.0.0.1:0", "--cache-dir"])
        .arg(&cache)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    (String::from_utf8_lossy(&out.stderr).into_owned(), cache)
}
