//! A v1 memory cgroup of a test's own, for running the data plane under a memory limit.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Dataplane, Opts, OriginHandle};

/// A cgroup's memory usage and what it is made of, in bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Breakdown {
    pub usage: u64,
    /// Anonymous memory (the process's heap and stacks).
    pub rss: u64,
    /// Page cache charged to the cgroup (files it read or wrote through the cache).
    pub cache: u64,
    pub dirty: u64,
    /// Kernel memory (slab, page tables, socket buffers when accounted).
    pub kmem: u64,
}

/// The value of `key` in a cgroup file of `key value` lines (`memory.stat`, `memory.oom_control`).
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

impl Breakdown {
    /// `memory.usage_in_bytes` of the cgroup at `dir` and, from `memory.stat` and
    /// `memory.kmem.usage_in_bytes`, its anonymous memory, page cache and kernel memory.
    fn read(dir: &Path) -> Breakdown {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let stat = read("memory.stat");
        let field = |key: &str| stat_field(&stat, key).unwrap_or(0);
        let num = |f: &str| read(f).trim().parse().unwrap_or(0);
        Breakdown {
            usage: num("memory.usage_in_bytes"),
            rss: field("rss"),
            cache: field("cache"),
            dirty: field("dirty"),
            kmem: num("memory.kmem.usage_in_bytes"),
        }
    }
}

impl std::fmt::Display for Breakdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / 1048576.0;
        write!(
            f,
            "usage {:.1} MiB = anon {:.1} + page cache {:.1} (dirty {:.1}) + kernel {:.1}",
            mib(self.usage),
            mib(self.rss),
            mib(self.cache),
            mib(self.dirty),
            mib(self.kmem)
        )
    }
}

/// A test's data plane in a memory cgroup: the cgroup, an origin, and a cache directory on the
/// disk (not a tmpfs: O_DIRECT needs a real file system).
pub struct Setup {
    pub cg: Cgroup,
    pub origin: OriginHandle,
    pub dir: tempfile::TempDir,
}

impl Setup {
    /// `None` when `test` is skipped (not root); a machine without the v1 memory controller fails.
    pub fn new(test: &str, limit: u64) -> Option<Setup> {
        if super::needs_root(test, "a v1 memory cgroup of its own") {
            return None;
        }
        let Some(cg) = Cgroup::new(limit) else {
            panic!("no v1 memory controller at /sys/fs/cgroup/memory (this machine has one)");
        };
        let dir = tempfile::Builder::new()
            .prefix(&format!("edgecache-{test}"))
            .tempdir_in("/var/tmp")
            .unwrap();
        Some(Setup {
            cg,
            origin: super::origin(),
            dir,
        })
    }

    /// Start the data plane in the cgroup.
    pub fn start(&self, o: Opts<'_>) -> Dataplane {
        // Page cache is charged to the cgroup that first touches it: read the (freshly built)
        // binary here first, so what the cgroup is charged for is the store's, not the program's.
        let _ = std::fs::read(super::BIN);
        let dp = Dataplane::start_with(o, |cmd| self.cg.enter_on_exec(cmd));
        let pid = dp.child.id() as i32;
        assert!(
            self.cg.pids().contains(&pid),
            "the data plane is not in the cgroup"
        );
        dp
    }
}

/// Whether process `pid` runs (exists and is no zombie: an OOM-killed child is one until waited).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// A v1 memory cgroup made for one test; its processes are killed and it is removed on drop.
pub struct Cgroup {
    pub dir: PathBuf,
}

impl Cgroup {
    pub fn new(limit: u64) -> Option<Cgroup> {
        let root = PathBuf::from("/sys/fs/cgroup/memory");
        if !root.join("memory.limit_in_bytes").exists() {
            return None;
        }
        let dir = root.join(format!(
            "edgecache-memtest-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir(&dir).unwrap();
        let cg = Cgroup { dir };
        cg.write("memory.limit_in_bytes", &limit.to_string());
        Some(cg)
    }

    pub fn write(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("write {value} to {file}: {e}"));
    }

    pub fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap()
    }

    pub fn num(&self, file: &str) -> u64 {
        self.read(file).trim().parse().unwrap()
    }

    /// A `key value` line of a stat-like file (`memory.stat`, `memory.oom_control`).
    pub fn stat(&self, file: &str, key: &str) -> u64 {
        stat_field(&self.read(file), key).unwrap_or_else(|| panic!("no {key} in {file}"))
    }

    /// What the cgroup's usage is made of now.
    pub fn breakdown(&self) -> Breakdown {
        Breakdown::read(&self.dir)
    }

    /// Samples [`Cgroup::breakdown`] every 10 ms until the returned flag is set; the thread
    /// returns the sample with the highest usage.
    pub fn sample_peak(&self) -> (Arc<AtomicBool>, std::thread::JoinHandle<Breakdown>) {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, dir) = (stop.clone(), self.dir.clone());
        let h = std::thread::spawn(move || {
            let mut peak = Breakdown::default();
            while !flag.load(Ordering::Relaxed) {
                let b = Breakdown::read(&dir);
                if b.usage > peak.usage {
                    peak = b;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        });
        (stop, h)
    }

    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Make the command's child join this cgroup before it execs (v1: writing 0 to
    /// `cgroup.procs` moves the writer).
    #[allow(unsafe_code)]
    pub fn enter_on_exec(&self, cmd: &mut std::process::Command) {
        let path = CString::new(
            self.dir
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: the closure runs in the forked child before exec; it only calls open(2),
        // write(2) and close(2) (async-signal-safe) on a path allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
                Ok(())
            });
        }
    }
}

impl Drop for Cgroup {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: kill(2) on a process of the cgroup this test created (its data plane).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::write(self.dir.join("memory.force_empty"), "0");
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("warning: could not remove {}", self.dir.display());
    }
}
