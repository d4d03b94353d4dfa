//! Sizing the store from its filesystem (issue 15 item 6), and refusing a size it cannot hold.
//!
//! Segment files are pre-allocated at open, so a size the filesystem cannot hold would otherwise
//! show up later as failed writes (`ENOSPC`, see `store_write_errors`). At open the store adds
//! the filesystem's free space (for unprivileged users: `f_bavail`) to what its own files in the
//! cache directory already take (allocated blocks: a restart reuses them), and:
//! - with `StoreConfig::size_auto`, plans its segments for that, less a reserve of 10% of the
//!   filesystem or 1 GiB, whichever is larger (room for the rest of the node: logs, other
//!   files on a shared disk; and for the filesystem's own metadata);
//! - with a fixed size, refuses to open when the planned segments need more than that
//!   ([`StoreError::NoRoom`], naming both), with no reserve: the operator chose the size.

use std::path::Path;

use super::dir::is_ours;
use super::layout::{Layout, MIN_BUDGET};
use crate::config::StoreConfig;
use crate::error::StoreError;

/// The least kept free with `size_auto`; also at least [`AUTO_RESERVE_PERCENT`] of the
/// filesystem.
pub const AUTO_RESERVE_MIN: u64 = 1 << 30;
pub const AUTO_RESERVE_PERCENT: u64 = 10;

/// What the store may use of its filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// The filesystem's size.
    pub total: u64,
    /// Free to unprivileged users.
    pub free: u64,
    /// Allocated to the store's own files in its directory.
    pub own: u64,
}

impl Space {
    /// The reserve of `size_auto`.
    pub fn reserve(&self) -> u64 {
        (self.total / 100 * AUTO_RESERVE_PERCENT).max(AUTO_RESERVE_MIN)
    }

    /// The layout of `cfg` on this space: pure, for tests.
    pub fn layout(&self, cfg: &StoreConfig) -> Result<Layout, StoreError> {
        let room = self.free + self.own;
        if cfg.size_auto {
            let size = room.saturating_sub(self.reserve());
            if size < MIN_BUDGET {
                return Err(StoreError::NoRoom(format!(
                    "storage size auto: the filesystem of {} has {} free plus {} of the \
                     store's own files, which leaves {} after the reserve of {}; at least {} \
                     is needed",
                    cfg.dir.display(),
                    show(self.free),
                    show(self.own),
                    show(size),
                    show(self.reserve()),
                    show(MIN_BUDGET),
                )));
            }
            return Ok(Layout::plan(size));
        }
        let layout = Layout::plan(cfg.size);
        if layout.capacity() > room {
            return Err(StoreError::NoRoom(format!(
                "storage size {} does not fit in the filesystem of {}: {} free plus {} of the \
                 store's own files",
                show(layout.capacity()),
                cfg.dir.display(),
                show(self.free),
                show(self.own),
            )));
        }
        Ok(layout)
    }
}

/// The space of the filesystem holding `dir` (which exists).
pub fn measure(dir: &Path) -> Result<Space, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let (total, free) = crate::io::file::filesystem_space(dir)?;
    let mut own = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if is_ours(&e.file_name().to_string_lossy()) {
            own += e.metadata()?.blocks() * 512;
        }
    }
    Ok(Space { total, free, own })
}

/// The layout for `cfg` in its directory (see the module doc).
pub(crate) fn plan(cfg: &StoreConfig) -> Result<Layout, StoreError> {
    let space = measure(&cfg.dir)?;
    let layout = space.layout(cfg)?;
    if cfg.size_auto {
        tracing::info!(
            dir = %cfg.dir.display(),
            free = space.free,
            own = space.own,
            reserve = space.reserve(),
            capacity = layout.capacity(),
            "storage size auto"
        );
    }
    Ok(layout)
}

/// Bytes for people: `1.5 GiB (1610612736 bytes)`.
fn show(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    match UNITS.iter().find(|(_, u)| b >= *u) {
        Some((name, u)) => format!("{:.1} {name} ({b} bytes)", b as f64 / *u as f64),
        None => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn cfg(size: u64, auto: bool) -> StoreConfig {
        StoreConfig {
            size,
            size_auto: auto,
            ..StoreConfig::default()
        }
    }

    #[test]
    fn auto_takes_free_plus_own_less_the_reserve() {
        // 100 GiB filesystem, 50 free, the store already holds 20: 70 - 10 (10%).
        let s = Space {
            total: 100 * GIB,
            free: 50 * GIB,
            own: 20 * GIB,
        };
        assert_eq!(s.layout(&cfg(0, true)).unwrap(), Layout::plan(60 * GIB));
        // A small filesystem keeps 1 GiB.
        let s = Space {
            total: 4 * GIB,
            free: 3 * GIB,
            own: 0,
        };
        assert_eq!(s.reserve(), GIB);
        assert_eq!(s.layout(&cfg(0, true)).unwrap(), Layout::plan(2 * GIB));
        let s = Space {
            total: GIB,
            free: GIB,
            own: 0,
        };
        let e = s.layout(&cfg(0, true)).unwrap_err().to_string();
        assert!(
            e.contains("storage size auto") && e.contains("1.0 GiB (1073741824 bytes) free"),
            "{e}"
        );
    }

    #[test]
    fn a_fixed_size_must_fit_with_the_stores_own_files() {
        let s = Space {
            total: 10 * GIB,
            free: GIB,
            own: 2 * GIB,
        };
        assert!(s.layout(&cfg(3 * GIB, false)).is_ok());
        let e = s.layout(&cfg(4 * GIB, false)).unwrap_err().to_string();
        assert!(
            e.contains("storage size 4.0 GiB") && e.contains("1.0 GiB (1073741824 bytes) free"),
            "{e}"
        );
    }
}
