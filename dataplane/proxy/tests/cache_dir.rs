//! The data plane only creates, opens and deletes its own files: it claims its cache directory
//! with a marker file, and refuses a non-empty directory it has not claimed (a hostPath such as
//! `/etc` or `/var/lib/kubelet`), touching nothing in it.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;

#[test]
fn a_directory_with_someone_elses_files_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    for (name, body) in [
        ("kubelet.tmp", "a"),
        ("config.json", "b"),
        ("notes.txt", "c"),
    ] {
        std::fs::write(theirs.join(name), body).unwrap();
    }
    let err = serve_refused(&theirs, &[]);
    assert!(
        err.contains("refusing to use") && err.contains("config.json, kubelet.tmp, notes.txt"),
        "{err}"
    );
    let mut left: Vec<_> = std::fs::read_dir(&theirs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["config.json", "kubelet.tmp", "notes.txt"],
        "nothing created or deleted"
    );
}

#[test]
fn an_empty_directory_is_claimed_and_reopened() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let url = o.url();
    let dp = Dataplane::start(Opts::new(&url, &cache));
    assert!(
        cache.join("edgecache-store").is_file(),
        "claimed with a marker"
    );
    dp.get("/obj/4k/claimed");
    let dp = dp.restart();
    assert!(dp.get("/obj/4k/claimed").is_hit());
}
