//! Transparent huge pages only where the data plane asks for them.
//!
//! The allocator (mimalloc) reserves its arena in large aligned regions. Where the kernel backs
//! them with transparent huge pages, the first byte touched in a 2 MiB region charges the whole
//! 2 MiB to the cgroup: in a 64 MiB cgroup under hostile clients that doubled the process's
//! memory (about 60 MiB at the peak, 30 of them in huge pages, against about 32 without), beyond
//! anything the memory plan bounds. The large I/O buffers, on the other hand, read the disk much
//! faster from huge pages (one device segment per 2 MiB instead of one per 4 KiB page; the
//! store's `io::huge_region`), and they are bounded by the plan. So the allocator is built not to
//! ask for huge pages (mimalloc's `no_thp`), the store asks for them on its buffer regions
//! (`MADV_HUGEPAGE`), and [`huge_pages_only_where_advised`] makes a host whose THP setting is
//! `always` behave as `madvise` does for this process.

use std::io;

/// `PR_THP_DISABLE_EXCEPT_ADVISED` (Linux 6.18): with `PR_SET_THP_DISABLE`, keep huge pages
/// for the ranges advised with `MADV_HUGEPAGE`.
const EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// What [`huge_pages_only_where_advised`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePagesPolicy {
    /// Huge pages back only the ranges the process advised (`MADV_HUGEPAGE`).
    OnlyWhereAdvised,
    /// The kernel has no such policy (before 6.18): the host's setting applies, which on a host
    /// set to `always` puts the whole heap on huge pages.
    HostSetting,
}

/// Ask the kernel to back this process's memory with transparent huge pages only where it
/// advised them (`prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED)`), whatever the
/// host's setting. It holds for every mapping, made before or after; call it first.
#[allow(unsafe_code)]
pub fn huge_pages_only_where_advised() -> io::Result<HugePagesPolicy> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, EXCEPT_ADVISED, 0, 0) };
    if rc == 0 {
        return Ok(HugePagesPolicy::OnlyWhereAdvised);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) {
        Ok(HugePagesPolicy::HostSetting)
    } else {
        Err(e)
    }
}

/// The process's policy as the kernel reports it (`prctl(PR_GET_THP_DISABLE)`): 0 none, 1 no
/// huge pages, 3 only where advised.
#[allow(unsafe_code)]
pub fn huge_pages_policy_flags() -> io::Result<i32> {
    // SAFETY: PR_GET_THP_DISABLE takes no pointer; it returns the flags.
    let rc = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_keeps_huge_pages_only_where_it_advised_them() {
        // The policy is the process's (inherited by children), so set it in a child of its own.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "huge_pages::tests::child",
                "--ignored",
                "--nocapture",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("policy: before 0, OnlyWhereAdvised 3")
                || text.contains("policy: before 0, HostSetting 0"),
            "{text}"
        );
    }

    #[test]
    #[ignore = "run by a_process_keeps_huge_pages_only_where_it_advised_them in its own process"]
    fn child() {
        let before = huge_pages_policy_flags().unwrap();
        let policy = huge_pages_only_where_advised().unwrap();
        let after = huge_pages_policy_flags().unwrap();
        println!("policy: before {before}, {policy:?} {after}");
    }
}
