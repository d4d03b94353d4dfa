//! The cache directory: lock file, superblock (nonce and layout), segment file names, and the
//! cleanup done at open.

use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};

use super::layout::Layout;
use super::record::Superblock;

pub(crate) const SUPER_FILE: &str = "store.super";
pub(crate) const LOCK_FILE: &str = "store.lock";
/// The marker that says this directory is an EdgeCache store: created when the store first
/// opens an empty directory, required before it touches anything else in it.
pub(crate) const CLAIM_FILE: &str = "edgecache-store";
const CLAIM_TEXT: &[u8] = b"EdgeCache disk store: the files here are EdgeCache's own.\n";

/// Whether `name` is a file the store creates (and so may delete).
pub(crate) fn is_ours(name: &str) -> bool {
    let seg = name
        .strip_prefix("seg-")
        .and_then(|n| n.strip_suffix(".dat"))
        .is_some_and(|n| n.len() == 4 && n.bytes().all(|b| b.is_ascii_digit()));
    seg || [
        SUPER_FILE,
        LOCK_FILE,
        CLAIM_FILE,
        super::checkpoint::CKPT_FILE,
    ]
    .iter()
    .any(|ours| name == *ours || name.strip_suffix(".tmp") == Some(*ours))
}

/// Claim `dir` for the store: a claimed directory is used as it is; an unclaimed one is claimed
/// only when it holds nothing but the store's own file names (empty, or a store from before
/// the marker existed); anything else is refused, and nothing in it is touched.
pub(crate) fn claim(dir: &Path) -> Result<(), crate::error::StoreError> {
    if dir.join(CLAIM_FILE).is_file() {
        return Ok(());
    }
    let mut foreign = Vec::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if !is_ours(&name) {
            foreign.push(name);
        }
    }
    if !foreign.is_empty() {
        foreign.sort();
        let more = foreign.len().saturating_sub(5);
        foreign.truncate(5);
        let mut names = foreign.join(", ");
        if more > 0 {
            names.push_str(&format!(" and {more} more"));
        }
        return Err(crate::error::StoreError::NotOurs {
            dir: dir.to_path_buf(),
            names,
        });
    }
    let tmp = dir.join(format!("{CLAIM_FILE}.tmp"));
    fs::write(&tmp, CLAIM_TEXT)?;
    fs::rename(&tmp, dir.join(CLAIM_FILE))?;
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

pub(crate) fn random_nonce() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish() | 1
}

pub(crate) fn seg_path(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("seg-{i:04}.dat"))
}

/// Read the superblock, or write a new one (and delete old segments) when it is missing or
/// describes another layout.
pub(crate) fn load_or_init_superblock(dir: &Path, layout: Layout) -> io::Result<u64> {
    let path = dir.join(SUPER_FILE);
    if let Ok(b) = fs::read(&path)
        && let Some(s) = Superblock::decode(&b)
    {
        if s.segment_size == layout.segment_size && s.segment_count == layout.segment_count {
            return Ok(s.nonce);
        }
        tracing::warn!(old = ?s, new = ?layout, "store layout changed; starting an empty cache");
    }
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("seg-") && name.ends_with(".dat") {
            fs::remove_file(e.path())?;
        }
    }
    let sb = Superblock {
        nonce: random_nonce(),
        segment_size: layout.segment_size,
        segment_count: layout.segment_count,
    };
    let tmp = dir.join(format!("{SUPER_FILE}.tmp"));
    fs::write(&tmp, sb.encode())?;
    fs::File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, &path)?;
    fs::File::open(dir)?.sync_all()?;
    Ok(sb.nonce)
}

/// Delete the store's own temporary files left by a crash (never another name).
pub(crate) fn remove_temp_files(dir: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp") && is_ours(&name) {
            fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stores_own_names_are_ours() {
        for ours in [
            "store.super",
            "store.lock",
            "store.super.tmp",
            "seg-0000.dat",
            "seg-1234.dat",
            "edgecache-store",
            "edgecache-store.tmp",
        ] {
            assert!(is_ours(ours), "{ours}");
        }
        for theirs in [
            "passwd",
            "kubelet.tmp",
            "seg-1.dat",
            "seg-abcd.dat",
            "seg-0000.dat.bak",
            "store.superx",
            "x.tmp",
        ] {
            assert!(!is_ours(theirs), "{theirs}");
        }
    }

    #[test]
    fn a_directory_with_other_files_is_refused_and_left_alone() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("important.tmp"), b"x").unwrap();
        fs::write(d.path().join("passwd"), b"x").unwrap();
        let e = claim(d.path()).unwrap_err();
        assert_eq!(e.kind(), "not_ours");
        assert!(e.to_string().contains("important.tmp, passwd"), "{e}");
        assert!(!d.path().join(CLAIM_FILE).exists());
        remove_temp_files(d.path()).unwrap();
        assert!(d.path().join("important.tmp").exists(), "not ours: kept");
    }

    #[test]
    fn an_empty_or_old_store_directory_is_claimed_once() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("seg-0000.dat"), b"").unwrap();
        fs::write(d.path().join("store.super.tmp"), b"").unwrap();
        claim(d.path()).unwrap();
        assert!(d.path().join(CLAIM_FILE).is_file());
        // Claimed: later files (an operator's note, say) do not make it foreign.
        fs::write(d.path().join("README"), b"x").unwrap();
        claim(d.path()).unwrap();
        remove_temp_files(d.path()).unwrap();
        assert!(!d.path().join("store.super.tmp").exists());
        assert!(d.path().join("README").exists());
    }
}
