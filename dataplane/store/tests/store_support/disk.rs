//! Filling a store's disk under it, for the ENOSPC tests of the store and the proxy (the proxy's
//! includes this file by path).

use std::path::Path;
use std::process::Command;

/// Punch the space of every segment file in `dir` out again past its 4 KiB header
/// (`fallocate --punch-hole`), as on a filesystem without fallocate: the store refuses at
/// start a size its filesystem cannot hold and preallocates its segments, so a disk fills up
/// under a store only where that preallocation did not take.
pub fn punch_out_segments(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "dat") {
            let len = std::fs::metadata(&p).unwrap().len();
            let st = Command::new("fallocate")
                .args(["--punch-hole", "--offset", "4096", "--length"])
                .arg((len - 4096).to_string())
                .arg(&p)
                .status()
                .unwrap();
            assert!(st.success(), "fallocate --punch-hole {}", p.display());
        }
    }
}
