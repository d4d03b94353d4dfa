//! Finding this process's cgroups and reading their memory and CPU limits.
//!
//! Everything takes the filesystem root as a parameter (`*_at(root)`), so tests run against
//! fixture trees: `<root>/proc/self/cgroup`, `<root>/proc/self/mountinfo`, and the mount points
//! found there, re-rooted under `<root>`. The `*_at(Path::new("/"))` forms read the live system.
//!
//! Algorithm (see docs/dataplane-recipes.md section 5):
//! 1. Parse `/proc/self/cgroup`.
//! 2. cgroup v2 (`0::<path>`, a `cgroup2` mount): the memory controller is there when the leaf has
//!    `memory.max` (or the process is in the v2 root and `cgroup.controllers` lists `memory`).
//!    v2 has no hierarchical value, so the limit is the minimum of `memory.max` over the leaf and
//!    every ancestor up to the mount root (`max` = unlimited).
//! 3. Otherwise cgroup v1: the line whose controller list holds `memory`, the `cgroup` mount whose
//!    super options hold `memory`. The limit is the minimum of `memory.limit_in_bytes` and
//!    `hierarchical_memory_limit` from `memory.stat` (which already covers the ancestors);
//!    values at or above 2^60 mean unlimited (the kernel writes 9223372036854771712).
//! 4. Mount points come from `/proc/self/mountinfo` (field 5). When the mount's root (field 4) is
//!    not `/` (a bind-mounted subtree, or a cgroup namespace), it is stripped from the process's
//!    cgroup path; when the path does not lie under it, the mount point itself is the cgroup.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Values at or above this are "no limit" (v1 writes `PAGE_COUNTER_MAX * PAGE_SIZE`).
const UNLIMITED_AT: u64 = 1 << 60;

/// Which cgroup hierarchy a controller lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        }
    }
}

/// The memory cgroup this process is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCgroup {
    pub version: CgroupVersion,
    /// The cgroup's directory (under the injected root).
    pub dir: PathBuf,
    /// The hierarchy's mount point (under the injected root); the v2 parent walk stops here.
    pub mount: PathBuf,
}

/// Memory usage of a cgroup, for metrics. Fields a version lacks are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// v1 `memory.usage_in_bytes`, v2 `memory.current`.
    pub current: u64,
    /// v1 `memory.max_usage_in_bytes`, v2 `memory.peak` (kernel 5.19+).
    pub peak: Option<u64>,
    /// v1 `memory.failcnt`; v2 the `max` count of `memory.events`.
    pub failcnt: Option<u64>,
    /// Page cache charged to the cgroup: v1 `cache`, v2 `file` of `memory.stat`.
    pub page_cache: Option<u64>,
    /// OOM kills in the cgroup: v1 `oom_kill` of `memory.oom_control`, v2 of `memory.events`.
    pub oom_kills: Option<u64>,
}

/// One line of `/proc/self/mountinfo`, the fields we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub root: String,
    pub mount_point: String,
    pub fstype: String,
    pub super_options: String,
}

impl Mount {
    fn has_super_option(&self, opt: &str) -> bool {
        self.super_options.split(',').any(|o| o == opt)
    }
}

/// One line of `/proc/self/cgroup`: `hierarchy-id:controller-list:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupEntry {
    pub hierarchy: u32,
    pub controllers: Vec<String>,
    pub path: String,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn read(path: &Path) -> io::Result<String> {
    fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Read a file; `Ok(None)` when it does not exist.
fn read_opt(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

/// Undo mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(c) = u8::try_from(v) {
                out.push(c);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            if l.len() < 5 || r.len() < 3 {
                return None;
            }
            Some(Mount {
                root: unescape(l[3]),
                mount_point: unescape(l[4]),
                fstype: r[0].to_string(),
                super_options: r[2].to_string(),
            })
        })
        .collect()
}

pub(crate) fn parse_proc_cgroup(text: &str) -> Vec<CgroupEntry> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(3, ':');
            let hierarchy = it.next()?.parse().ok()?;
            let controllers = it.next()?;
            let path = it.next()?;
            Some(CgroupEntry {
                hierarchy,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// `root` + an absolute path from the (possibly injected) system.
fn under(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

/// Candidate directories for a cgroup `path` on `mount`, best first (see the module doc, step 4).
fn candidate_dirs(root: &Path, mount: &Mount, path: &str) -> Vec<PathBuf> {
    let mp = under(root, &mount.mount_point);
    let mut out = Vec::new();
    let rel = if mount.root == "/" {
        Some(path)
    } else {
        path.strip_prefix(mount.root.as_str())
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if let Some(rel) = rel {
        out.push(under(&mp, rel));
    }
    if mount.root != "/" {
        // A cgroup namespace shows paths relative to its own root; the mount point is then the
        // best guess for the process's own cgroup.
        out.push(mp.clone());
    }
    out.dedup();
    out
}

/// What `/proc/self/cgroup` and `/proc/self/mountinfo` say, read once.
struct Layout {
    cgroups: Vec<CgroupEntry>,
    mounts: Vec<Mount>,
}

impl Layout {
    fn read(root: &Path) -> io::Result<Self> {
        Ok(Self {
            cgroups: parse_proc_cgroup(&read(&root.join("proc/self/cgroup"))?),
            mounts: parse_mountinfo(&read(&root.join("proc/self/mountinfo"))?),
        })
    }

    /// The v2 cgroup: (dir, mount point) candidates.
    fn v2(&self, root: &Path) -> Vec<(PathBuf, PathBuf)> {
        let Some(entry) = self
            .cgroups
            .iter()
            .find(|c| c.hierarchy == 0 && c.controllers.is_empty())
        else {
            return Vec::new();
        };
        self.candidates(root, &entry.path, |m| m.fstype == "cgroup2")
    }

    /// The v1 cgroup of `controller`: (dir, mount point) candidates.
    fn v1(&self, root: &Path, controller: &str) -> Vec<(PathBuf, PathBuf)> {
        let Some(entry) = self
            .cgroups
            .iter()
            .find(|c| c.hierarchy != 0 && c.controllers.iter().any(|x| x == controller))
        else {
            return Vec::new();
        };
        self.candidates(root, &entry.path, |m| {
            m.fstype == "cgroup" && m.has_super_option(controller)
        })
    }

    /// (dir, mount point) candidates for the cgroup at `path` on the mounts `keep` selects.
    fn candidates(
        &self,
        root: &Path,
        path: &str,
        keep: impl Fn(&Mount) -> bool,
    ) -> Vec<(PathBuf, PathBuf)> {
        self.mounts
            .iter()
            .filter(|m| keep(m))
            .flat_map(|m| {
                let mp = under(root, &m.mount_point);
                candidate_dirs(root, m, path)
                    .into_iter()
                    .map(move |d| (d, mp.clone()))
            })
            .collect()
    }
}

/// Parse a limit file's content: a number, or `max` (v2) / a huge number (v1) for "none".
fn parse_limit(s: &str, file: &Path) -> io::Result<Option<u64>> {
    let s = s.trim();
    if s == "max" {
        return Ok(None);
    }
    let v: u64 = s
        .parse()
        .map_err(|_| invalid(format!("{}: not a number: {s:?}", file.display())))?;
    Ok((v < UNLIMITED_AT).then_some(v))
}

fn min_limit(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A `key value` line from a flat-keyed file such as `memory.stat` or `memory.events`.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

fn read_u64_opt(path: &Path) -> io::Result<Option<u64>> {
    read_opt(path)?
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| invalid(format!("{}: not a number: {:?}", path.display(), s.trim())))
        })
        .transpose()
}

/// Find this process's memory cgroup under `root`. `Ok(None)` when no memory controller is
/// mounted (or the process's cgroup cannot be found on it).
pub fn memory_cgroup_at(root: &Path) -> io::Result<Option<MemoryCgroup>> {
    let layout = Layout::read(root)?;
    for (dir, mount) in layout.v2(root) {
        let has_max = dir.join("memory.max").is_file();
        let root_with_memory = dir == mount
            && read_opt(&dir.join("cgroup.controllers"))?
                .is_some_and(|c| c.split_whitespace().any(|x| x == "memory"));
        if has_max || root_with_memory {
            return Ok(Some(MemoryCgroup {
                version: CgroupVersion::V2,
                dir,
                mount,
            }));
        }
    }
    for (dir, mount) in layout.v1(root, "memory") {
        if dir.join("memory.limit_in_bytes").is_file() {
            return Ok(Some(MemoryCgroup {
                version: CgroupVersion::V1,
                dir,
                mount,
            }));
        }
    }
    Ok(None)
}

/// This process's memory cgroup on the live system.
pub fn memory_cgroup() -> io::Result<Option<MemoryCgroup>> {
    memory_cgroup_at(Path::new("/"))
}

impl MemoryCgroup {
    /// The memory limit in bytes; `None` when unlimited.
    pub fn limit(&self) -> io::Result<Option<u64>> {
        match self.version {
            CgroupVersion::V2 => {
                // No hierarchical value in v2: walk up to the mount root and take the minimum.
                let mut limit = None;
                let mut dir = self.dir.as_path();
                loop {
                    let f = dir.join("memory.max");
                    if let Some(s) = read_opt(&f)? {
                        limit = min_limit(limit, parse_limit(&s, &f)?);
                    }
                    if dir == self.mount {
                        break;
                    }
                    match dir.parent() {
                        Some(p) if p.starts_with(&self.mount) => dir = p,
                        _ => break,
                    }
                }
                Ok(limit)
            }
            CgroupVersion::V1 => {
                let f = self.dir.join("memory.limit_in_bytes");
                let own = parse_limit(&read(&f)?, &f)?;
                let stat = read_opt(&self.dir.join("memory.stat"))?.unwrap_or_default();
                let hier = keyed(&stat, "hierarchical_memory_limit").filter(|&v| v < UNLIMITED_AT);
                Ok(min_limit(own, hier))
            }
        }
    }

    /// Current usage, peak, failures and page cache, for metrics.
    pub fn usage(&self) -> io::Result<MemoryUsage> {
        let d = &self.dir;
        match self.version {
            CgroupVersion::V1 => {
                let cur = d.join("memory.usage_in_bytes");
                let stat = read_opt(&d.join("memory.stat"))?.unwrap_or_default();
                let oom = read_opt(&d.join("memory.oom_control"))?.unwrap_or_default();
                Ok(MemoryUsage {
                    current: read_u64_opt(&cur)?
                        .ok_or_else(|| invalid(format!("{}: missing", cur.display())))?,
                    peak: read_u64_opt(&d.join("memory.max_usage_in_bytes"))?,
                    failcnt: read_u64_opt(&d.join("memory.failcnt"))?,
                    page_cache: keyed(&stat, "cache"),
                    oom_kills: keyed(&oom, "oom_kill"),
                })
            }
            CgroupVersion::V2 => {
                let stat = read_opt(&d.join("memory.stat"))?.unwrap_or_default();
                let events = read_opt(&d.join("memory.events"))?.unwrap_or_default();
                Ok(MemoryUsage {
                    // The v2 root cgroup has no memory.current.
                    current: read_u64_opt(&d.join("memory.current"))?.unwrap_or(0),
                    peak: read_u64_opt(&d.join("memory.peak"))?,
                    failcnt: keyed(&events, "max"),
                    page_cache: keyed(&stat, "file"),
                    oom_kills: keyed(&events, "oom_kill"),
                })
            }
        }
    }
}

/// This process's cgroup memory limit, reading the tree under `root`. `None` = no limit (or no
/// memory controller).
pub fn read_memory_limit_at(root: &Path) -> io::Result<Option<u64>> {
    match memory_cgroup_at(root)? {
        Some(cg) => cg.limit(),
        None => Ok(None),
    }
}

/// This process's cgroup memory limit on the live system. `None` = no limit.
pub fn read_memory_limit() -> io::Result<Option<u64>> {
    read_memory_limit_at(Path::new("/"))
}

/// This process's cgroup memory usage on the live system; `None` without a memory cgroup.
pub fn read_memory_usage() -> io::Result<Option<MemoryUsage>> {
    memory_cgroup()?.map(|cg| cg.usage()).transpose()
}

/// CPU bandwidth limit: `quota_us` of CPU time per `period_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    pub quota_us: u64,
    pub period_us: u64,
}

impl CpuQuota {
    /// Whole CPUs the quota pays for, rounded up, at least 1.
    pub fn cpus(self) -> usize {
        if self.period_us == 0 {
            return 1;
        }
        let n = self.quota_us.div_ceil(self.period_us).max(1);
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    fn tighter(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => {
                // Compare quota/period without floating point.
                let lhs = u128::from(a.quota_us) * u128::from(b.period_us);
                let rhs = u128::from(b.quota_us) * u128::from(a.period_us);
                Some(if lhs <= rhs { a } else { b })
            }
            (a, b) => a.or(b),
        }
    }
}

fn parse_cpu_max(s: &str, file: &Path) -> io::Result<Option<CpuQuota>> {
    let mut it = s.split_whitespace();
    let quota = it.next().unwrap_or("max");
    let period = it.next().unwrap_or("100000");
    if quota == "max" {
        return Ok(None);
    }
    let bad = || invalid(format!("{}: cannot parse {:?}", file.display(), s.trim()));
    Ok(Some(CpuQuota {
        quota_us: quota.parse().map_err(|_| bad())?,
        period_us: period.parse().map_err(|_| bad())?,
    }))
}

fn read_v1_quota(dir: &Path) -> io::Result<Option<CpuQuota>> {
    let qf = dir.join("cpu.cfs_quota_us");
    let Some(q) = read_opt(&qf)? else {
        return Ok(None);
    };
    let q: i64 = q
        .trim()
        .parse()
        .map_err(|_| invalid(format!("{}: not a number: {:?}", qf.display(), q.trim())))?;
    if q < 0 {
        return Ok(None);
    }
    let period = read_u64_opt(&dir.join("cpu.cfs_period_us"))?.unwrap_or(100_000);
    Ok(Some(CpuQuota {
        quota_us: q.unsigned_abs(),
        period_us: period,
    }))
}

/// Walk from `dir` up to `mount` (inclusive), combining each level's quota with `read_one`.
fn walk_quota(
    dir: &Path,
    mount: &Path,
    read_one: impl Fn(&Path) -> io::Result<Option<CpuQuota>>,
) -> io::Result<Option<CpuQuota>> {
    let mut best = None;
    let mut d = dir;
    loop {
        best = CpuQuota::tighter(best, read_one(d)?);
        if d == mount {
            break;
        }
        match d.parent() {
            Some(p) if p.starts_with(mount) => d = p,
            _ => break,
        }
    }
    Ok(best)
}

/// The tightest CPU quota over this process's cgroup and its ancestors (v2 `cpu.max`, v1
/// `cpu.cfs_quota_us`/`cpu.cfs_period_us`), reading the tree under `root`. `None` = no quota.
pub fn read_cpu_quota_at(root: &Path) -> io::Result<Option<CpuQuota>> {
    let layout = Layout::read(root)?;
    for (dir, mount) in layout.v2(root) {
        if dir.join("cpu.max").is_file() {
            return walk_quota(&dir, &mount, |d| {
                let f = d.join("cpu.max");
                match read_opt(&f)? {
                    Some(s) => parse_cpu_max(&s, &f),
                    None => Ok(None),
                }
            });
        }
    }
    for (dir, mount) in layout.v1(root, "cpu") {
        if dir.join("cpu.cfs_quota_us").is_file() {
            return walk_quota(&dir, &mount, read_v1_quota);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime master:7 - cgroup cgroup rw,memory\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    50 31 0:40 / /mnt/with\\040space rw - ext4 /dev/x rw\n\
                    garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[1].root, "/docker/abc");
        assert_eq!(m[1].mount_point, "/sys/fs/cgroup/memory");
        assert_eq!(m[1].fstype, "cgroup");
        assert!(m[1].has_super_option("memory"));
        assert!(!m[0].has_super_option("memory"));
        assert_eq!(m[2].fstype, "cgroup2");
        assert_eq!(m[3].mount_point, "/mnt/with space");
    }

    #[test]
    fn proc_cgroup_lines() {
        let e =
            parse_proc_cgroup("4:memory:/a/b\n2:cpu,cpuacct:/\n0::/x.slice/y\n1:name=systemd:/\n");
        assert_eq!(e.len(), 4);
        assert_eq!(e[0].controllers, ["memory"]);
        assert_eq!(e[0].path, "/a/b");
        assert_eq!(e[1].controllers, ["cpu", "cpuacct"]);
        assert_eq!(e[2].hierarchy, 0);
        assert!(e[2].controllers.is_empty());
    }

    #[test]
    fn candidate_dirs_strip_the_mount_root() {
        let root = Path::new("/r");
        let m = |r: &str| Mount {
            root: r.into(),
            mount_point: "/sys/fs/cgroup/memory".into(),
            fstype: "cgroup".into(),
            super_options: "rw,memory".into(),
        };
        // root "/": path appended, with its slash kept (the prototype's bug).
        assert_eq!(
            candidate_dirs(root, &m("/"), "/a/b"),
            [PathBuf::from("/r/sys/fs/cgroup/memory/a/b")]
        );
        assert_eq!(
            candidate_dirs(root, &m("/"), "/"),
            [PathBuf::from("/r/sys/fs/cgroup/memory/")]
        );
        // bind-mounted subtree: the root is stripped.
        assert_eq!(
            candidate_dirs(root, &m("/docker/abc"), "/docker/abc/sub")[0],
            PathBuf::from("/r/sys/fs/cgroup/memory/sub")
        );
        assert_eq!(
            candidate_dirs(root, &m("/docker/abc"), "/docker/abc"),
            [PathBuf::from("/r/sys/fs/cgroup/memory/")]
        );
        // not a prefix at a path boundary: only the mount point.
        assert_eq!(
            candidate_dirs(root, &m("/docker/abc"), "/docker/abcdef"),
            [PathBuf::from("/r/sys/fs/cgroup/memory")]
        );
    }

    #[test]
    fn limits_parse() {
        let f = Path::new("f");
        assert_eq!(parse_limit("max\n", f).ok(), Some(None));
        assert_eq!(parse_limit("268435456\n", f).ok(), Some(Some(268_435_456)));
        assert_eq!(parse_limit("9223372036854771712\n", f).ok(), Some(None));
        assert!(parse_limit("lots", f).is_err());
        assert_eq!(min_limit(Some(3), None), Some(3));
        assert_eq!(min_limit(Some(3), Some(2)), Some(2));
        assert_eq!(min_limit(None, None), None);
    }

    #[test]
    fn cpu_quota_math() {
        let q = |quota_us, period_us| CpuQuota {
            quota_us,
            period_us,
        };
        assert_eq!(q(150_000, 100_000).cpus(), 2);
        assert_eq!(q(100_000, 100_000).cpus(), 1);
        assert_eq!(q(10_000, 100_000).cpus(), 1);
        assert_eq!(q(400_000, 100_000).cpus(), 4);
        assert_eq!(
            CpuQuota::tighter(Some(q(200_000, 100_000)), Some(q(50_000, 50_000))),
            Some(q(50_000, 50_000))
        );
        assert_eq!(CpuQuota::tighter(None, Some(q(1, 2))), Some(q(1, 2)));
        let f = Path::new("cpu.max");
        assert_eq!(parse_cpu_max("max 100000\n", f).ok(), Some(None));
        assert_eq!(
            parse_cpu_max("250000 100000\n", f).ok(),
            Some(Some(q(250_000, 100_000)))
        );
        assert!(parse_cpu_max("x 100000", f).is_err());
    }
}
