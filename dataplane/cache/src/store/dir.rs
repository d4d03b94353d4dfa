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

pub(crate) fn remove_temp_files(dir: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().to_string_lossy().ends_with(".tmp") {
            fs::remove_file(e.path())?;
        }
    }
    Ok(())
}
