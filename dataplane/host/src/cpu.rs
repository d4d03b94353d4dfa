//! Which CPUs the workers run on, and pinning a thread to one.
//!
//! Workers run on the CPUs of the process's affinity mask (the pod's cpuset under the static CPU
//! manager, or `taskset`), never blindly on CPUs `0..N-1`; a CPU quota caps their number.

use std::io;
use std::path::Path;

pub use crate::cgroup::{CpuQuota, read_cpu_quota_at};

/// The CPUs each worker is pinned to, worker `i` on `result[i]` (pure; see [`worker_cpus`]).
///
/// - `mask`: the affinity mask (any order, duplicates ignored); an empty mask gives `[0]`.
/// - `quota`: the cgroup CPU quota; it caps the default count at `ceil(quota / period)`.
/// - `requested`: the configured worker count. `0` means the default (one per CPU of the mask,
///   capped by the quota). A positive count is honoured as given: the first `requested` CPUs of
///   the mask, wrapping around (several workers per CPU) when it exceeds the mask. The quota
///   does not cap an explicit count.
pub fn plan_cpus(mask: &[usize], quota: Option<CpuQuota>, requested: u32) -> Vec<usize> {
    let mut cpus = mask.to_vec();
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        cpus.push(0);
    }
    let n = if requested > 0 {
        usize::try_from(requested).unwrap_or(usize::MAX)
    } else {
        quota.map_or(cpus.len(), |q| q.cpus().min(cpus.len()))
    };
    cpus.iter().copied().cycle().take(n).collect()
}

/// The CPUs in this thread's affinity mask (`sched_getaffinity`), ascending.
#[allow(unsafe_code)]
pub fn affinity_mask() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t and we pass its exact size; pid 0 = this thread.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * size_of::<libc::cpu_set_t>();
    // SAFETY: every index is below the set's capacity in bits, and `set` was filled by the kernel.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pin the calling thread to `cpu` (`sched_setaffinity`).
#[allow(unsafe_code)]
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    let max = 8 * size_of::<libc::cpu_set_t>();
    if cpu >= max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cpu {cpu} is beyond the affinity set's {max} CPUs"),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked to be below the set's capacity in bits.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t and we pass its exact size; pid 0 = the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("pin to cpu {cpu}: {e}")));
    }
    Ok(())
}

/// The CPU quota of this process's cgroup on the live system (v2 `cpu.max`, v1 CFS quota).
pub fn read_cpu_quota() -> io::Result<Option<CpuQuota>> {
    read_cpu_quota_at(Path::new("/"))
}

/// The CPUs to pin the workers to: the affinity mask, capped by the cgroup CPU quota, or
/// `requested` of them when `requested > 0` (see [`plan_cpus`]). Under `taskset -c 0` this is
/// `[0]`.
pub fn worker_cpus(requested: u32) -> io::Result<Vec<usize>> {
    let mask = affinity_mask()?;
    // A quota we cannot read is not a reason to refuse to start: no cap.
    let quota = read_cpu_quota().unwrap_or(None);
    Ok(plan_cpus(&mask, quota, requested))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(quota_us: u64, period_us: u64) -> Option<CpuQuota> {
        Some(CpuQuota {
            quota_us,
            period_us,
        })
    }

    #[test]
    fn plan_cpus_table() {
        type Case<'a> = (&'a [usize], Option<CpuQuota>, u32, &'a [usize]);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            // mask          quota                 requested  expected
            (&[0, 1],        None,                 0,         &[0, 1]),
            (&[0],           None,                 0,         &[0]),          // taskset -c 0
            (&[1],           None,                 0,         &[1]),          // taskset -c 1: not CPU 0
            (&[2, 5, 7],     None,                 0,         &[2, 5, 7]),    // a cpuset, not 0..N-1
            (&[7, 2, 5, 2],  None,                 0,         &[2, 5, 7]),    // sorted, deduplicated
            (&[0, 1, 2, 3],  q(200_000, 100_000),  0,         &[0, 1]),       // quota 2 CPUs
            (&[0, 1, 2, 3],  q(150_000, 100_000),  0,         &[0, 1]),       // 1.5 rounds up
            (&[0, 1, 2, 3],  q(10_000, 100_000),   0,         &[0]),          // at least one
            (&[0, 1],        q(800_000, 100_000),  0,         &[0, 1]),       // quota above the mask
            (&[0, 1, 2, 3],  None,                 2,         &[0, 1]),       // explicit count
            (&[4, 6],        None,                 1,         &[4]),
            (&[0, 1],        None,                 4,         &[0, 1, 0, 1]), // more workers than CPUs
            (&[0, 1, 2, 3],  q(100_000, 100_000),  3,         &[0, 1, 2]),    // explicit beats quota
            (&[],            None,                 0,         &[0]),
        ];
        for (mask, quota, requested, expected) in cases {
            assert_eq!(
                plan_cpus(mask, *quota, *requested),
                *expected,
                "mask {mask:?} quota {quota:?} requested {requested}"
            );
        }
    }

    #[test]
    fn live_mask_is_not_empty_and_pinning_works() {
        let mask = affinity_mask().unwrap();
        assert!(!mask.is_empty());
        let cpu = *mask.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            assert_eq!(affinity_mask().unwrap(), [cpu]);
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(1 << 20).is_err());
    }
}
