//! Issue 15 item 6 on a real small filesystem (a tmpfs this test mounts; needs root): the store
//! refuses at open a size its filesystem cannot hold, naming the size and the free space, still
//! opens again on a filesystem its own files filled, and `size_auto` sizes it from the free space
//! less the reserve.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod store_support;

use std::path::PathBuf;
use std::process::Command;

use edgecache_store::space::{self, AUTO_RESERVE_MIN};
use edgecache_store::{EngineChoice, Layout, Store, StoreError};
use store_support::*;

struct Tmpfs(PathBuf);

impl Tmpfs {
    /// A tmpfs of `size` (`mount -o size=`), or why not.
    fn mount(name: &str, size: &str) -> Result<Tmpfs, String> {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("needs root to mount a tmpfs".into());
        }
        let dir =
            std::env::temp_dir().join(format!("edgecache-space-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .map_err(|e| e.to_string())?
            .success();
        if !ok {
            return Err("mount -t tmpfs failed".into());
        }
        Ok(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn tmpfs_or_skip(test: &str, size: &str) -> Option<Tmpfs> {
    match Tmpfs::mount(test, size) {
        Ok(t) => Some(t),
        Err(why) => {
            println!("SKIPPED: {test}: {why}");
            None
        }
    }
}

#[test]
fn a_size_the_filesystem_cannot_hold_is_refused_at_open() {
    let Some(fs) = tmpfs_or_skip("refused", "100m") else {
        return;
    };
    let engine = EngineChoice::Threads;
    let cache = fs.0.join("cache");
    let err = Store::open(cfg(&cache, 256 * MIB, engine)).unwrap_err();
    assert!(matches!(err, StoreError::NoRoom(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("storage size 256.0 MiB") && msg.contains("free") && msg.contains("100.0 MiB"),
        "{msg}"
    );
    // 64 MiB fits; and fits again at the next start, when the store's own files fill the disk.
    drop(Store::open(cfg(&cache, 64 * MIB, engine)).unwrap());
    let s = space::measure(&cache).unwrap();
    assert!(s.own >= 64 * MIB && s.free < 64 * MIB, "{s:?}");
    let store = Store::open(cfg(&cache, 64 * MIB, engine)).unwrap();
    run(engine, async {
        let w = edgecache_store::StoreWorker::new(store.clone()).unwrap();
        put(&w, "/a", "", "m", b"body", true, 4).await.unwrap();
        assert_eq!(get(&w, "/a").await.unwrap().1, b"body");
    });
}

#[test]
fn size_auto_takes_the_free_space_less_the_reserve() {
    // 1100 MiB: the 1 GiB reserve leaves 76 MiB.
    let Some(fs) = tmpfs_or_skip("auto", "1100m") else {
        return;
    };
    let engine = EngineChoice::Threads;
    let cache = fs.0.join("cache");
    let mut c = cfg(&cache, 10 << 30, engine);
    c.size_auto = true;
    std::fs::create_dir_all(&cache).unwrap();
    let before = space::measure(&cache).unwrap();
    let store = Store::open(c.clone()).unwrap();
    let want = Layout::plan(before.free - AUTO_RESERVE_MIN);
    assert_eq!(store.layout(), want);
    assert!(
        want.capacity() >= 64 * MIB && want.capacity() <= 76 * MIB,
        "{want:?}"
    );
    drop(store);
    // Restarted: the same size (its own files count as room).
    assert_eq!(Store::open(c.clone()).unwrap().layout(), want);

    // Too small for anything after the reserve: refused, saying so.
    let Some(small) = tmpfs_or_skip("auto-small", "900m") else {
        return;
    };
    c.dir = small.0.join("cache");
    let msg = Store::open(c).unwrap_err().to_string();
    assert!(
        msg.contains("storage size auto") && msg.contains("reserve"),
        "{msg}"
    );
}
