//! The cgroup readers against fixture trees (cgroup v2 cannot be exercised on the CI machine,
//! whose memory controller is on v1).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::fs;
use std::path::Path;

use edgecache_host::{
    CgroupVersion, CpuQuota, memory_cgroup_at, read_cpu_quota_at, read_memory_limit_at,
};

const MIB: u64 = 1 << 20;

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

const V2_MOUNTINFO: &str = "24 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n\
                            25 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n";

#[test]
fn v2_leaf_limit() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/self/mountinfo", V2_MOUNTINFO);
    write(r, "proc/self/cgroup", "0::/kubepods.slice/pod1/ctr\n");
    write(
        r,
        "sys/fs/cgroup/cgroup.controllers",
        "cpuset cpu io memory pids\n",
    );
    write(r, "sys/fs/cgroup/kubepods.slice/memory.max", "max\n");
    write(r, "sys/fs/cgroup/kubepods.slice/pod1/memory.max", "max\n");
    write(
        r,
        "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.max",
        "268435456\n",
    );
    let cg = memory_cgroup_at(r).unwrap().unwrap();
    assert_eq!(cg.version, CgroupVersion::V2);
    assert_eq!(cg.dir, r.join("sys/fs/cgroup/kubepods.slice/pod1/ctr"));
    assert_eq!(read_memory_limit_at(r).unwrap(), Some(256 * MIB));
}

#[test]
fn v2_parent_walk_takes_the_minimum() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/self/mountinfo", V2_MOUNTINFO);
    write(r, "proc/self/cgroup", "0::/kubepods.slice/pod1/ctr\n");
    write(r, "sys/fs/cgroup/kubepods.slice/memory.max", "1073741824\n");
    write(
        r,
        "sys/fs/cgroup/kubepods.slice/pod1/memory.max",
        "134217728\n",
    ); // pod: 128 MiB
    write(
        r,
        "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.max",
        "max\n",
    );
    write(
        r,
        "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.current",
        "1000\n",
    );
    write(
        r,
        "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.peak",
        "5000\n",
    );
    write(
        r,
        "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.stat",
        "anon 10\nfile 4096\n",
    );
    write(
        r,
        "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.events",
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
    );
    assert_eq!(read_memory_limit_at(r).unwrap(), Some(128 * MIB));
    let u = memory_cgroup_at(r).unwrap().unwrap().usage().unwrap();
    assert_eq!(
        (u.current, u.peak, u.failcnt, u.page_cache, u.oom_kills),
        (1000, Some(5000), Some(3), Some(4096), Some(1))
    );
}

#[test]
fn v2_unlimited_everywhere() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/self/mountinfo", V2_MOUNTINFO);
    write(r, "proc/self/cgroup", "0::/a\n");
    write(r, "sys/fs/cgroup/a/memory.max", "max\n");
    assert_eq!(read_memory_limit_at(r).unwrap(), None);
}

#[test]
fn v2_cgroup_namespace() {
    // Inside a cgroup namespace the process sees "0::/" and the mount's root is "/".
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/self/mountinfo", V2_MOUNTINFO);
    write(r, "proc/self/cgroup", "0::/\n");
    write(r, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    write(r, "sys/fs/cgroup/memory.max", "536870912\n");
    assert_eq!(read_memory_limit_at(r).unwrap(), Some(512 * MIB));
}

#[test]
fn v2_mount_of_a_subtree() {
    // A container without its own cgroup namespace: mountinfo's root is the container's cgroup,
    // mounted at /sys/fs/cgroup; /proc/self/cgroup shows the full path.
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(
        r,
        "proc/self/mountinfo",
        "30 20 0:26 /system.slice/docker-abc.scope /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n",
    );
    write(r, "proc/self/cgroup", "0::/system.slice/docker-abc.scope\n");
    write(r, "sys/fs/cgroup/memory.max", "268435456\n");
    assert_eq!(read_memory_limit_at(r).unwrap(), Some(256 * MIB));
    // The namespace-relative form ("/" while the mount root is the subtree) also resolves to
    // the mount point.
    write(r, "proc/self/cgroup", "0::/\n");
    assert_eq!(read_memory_limit_at(r).unwrap(), Some(256 * MIB));
}

const HYBRID_MOUNTINFO: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                                32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                                35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                                41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

#[test]
fn v1_hybrid_like_this_machine() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/self/mountinfo", HYBRID_MOUNTINFO);
    write(r, "proc/self/cgroup", "4:memory:/job/x\n1:cpu:/job\n0::/\n");
    write(r, "sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
    let d = "sys/fs/cgroup/memory/job/x/";
    write(
        r,
        &format!("{d}memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    write(
        r,
        &format!("{d}memory.stat"),
        "cache 1000\nhierarchical_memory_limit 536870912\n",
    );
    write(r, &format!("{d}memory.usage_in_bytes"), "2000\n");
    write(r, &format!("{d}memory.max_usage_in_bytes"), "3000\n");
    write(r, &format!("{d}memory.failcnt"), "7\n");
    write(
        r,
        &format!("{d}memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    );
    let cg = memory_cgroup_at(r).unwrap().unwrap();
    assert_eq!(cg.version, CgroupVersion::V1);
    // Own limit unlimited, the parent's 512 MiB comes through hierarchical_memory_limit.
    assert_eq!(cg.limit().unwrap(), Some(512 * MIB));
    let u = cg.usage().unwrap();
    assert_eq!(
        (u.current, u.peak, u.failcnt, u.page_cache, u.oom_kills),
        (2000, Some(3000), Some(7), Some(1000), Some(0))
    );
    // Own limit tighter than the hierarchy's.
    write(r, &format!("{d}memory.limit_in_bytes"), "268435456\n");
    assert_eq!(cg.limit().unwrap(), Some(256 * MIB));
    // CPU quota walks v1 ancestors: /job has 1.5 CPUs.
    write(r, "sys/fs/cgroup/cpu/job/cpu.cfs_quota_us", "150000\n");
    write(r, "sys/fs/cgroup/cpu/job/cpu.cfs_period_us", "100000\n");
    write(r, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
    let q = read_cpu_quota_at(r).unwrap().unwrap();
    assert_eq!(
        q,
        CpuQuota {
            quota_us: 150_000,
            period_us: 100_000
        }
    );
    assert_eq!(q.cpus(), 2);
}

#[test]
fn v1_docker_without_cgroupns() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(
        r,
        "proc/self/mountinfo",
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
    );
    write(r, "proc/self/cgroup", "4:memory:/docker/abc\n");
    write(
        r,
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
        "268435456\n",
    );
    assert_eq!(read_memory_limit_at(r).unwrap(), Some(256 * MIB));
}

#[test]
fn no_memory_controller() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(
        r,
        "proc/self/mountinfo",
        "25 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n",
    );
    write(r, "proc/self/cgroup", "0::/\n");
    assert_eq!(memory_cgroup_at(r).unwrap(), None);
    assert_eq!(read_memory_limit_at(r).unwrap(), None);
    assert_eq!(read_cpu_quota_at(r).unwrap(), None);
}

#[test]
fn v2_cpu_max_walk() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/self/mountinfo", V2_MOUNTINFO);
    write(r, "proc/self/cgroup", "0::/pod/ctr\n");
    write(r, "sys/fs/cgroup/pod/cpu.max", "300000 100000\n");
    write(r, "sys/fs/cgroup/pod/ctr/cpu.max", "max 100000\n");
    let q = read_cpu_quota_at(r).unwrap().unwrap();
    assert_eq!(q.cpus(), 3);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/self/mountinfo", V2_MOUNTINFO);
    write(r, "proc/self/cgroup", "0::/a\n");
    write(r, "sys/fs/cgroup/a/memory.max", "lots\n");
    assert!(read_memory_limit_at(r).is_err());
    // Missing /proc files: an error naming the path.
    let empty = tempfile::tempdir().unwrap();
    let e = read_memory_limit_at(empty.path()).unwrap_err();
    assert!(e.to_string().contains("proc/self/cgroup"), "{e}");
}
