//! Transparent huge pages, turned off for the data plane's own memory.
//!
//! The allocator (mimalloc) reserves its arena in large aligned regions. Where the kernel backs
//! them with transparent huge pages (THP `always`, or `madvise` and an allocator that asks for
//! them), the first byte touched in a 2 MiB region charges the whole 2 MiB to the cgroup. In a
//! 64 MiB cgroup under hostile clients that doubled the process's memory (about 60 MiB at the
//! peak, 30 of them in huge pages, against about 32 without), and the memory plan cannot bound
//! what it does not see.

use std::io;

/// Tell the kernel never to back this process's memory with transparent huge pages
/// (`prctl(PR_SET_THP_DISABLE)`): it holds for every mapping, made before or after, and for
/// whatever the host's THP setting is. Huge pages already faulted in stay; call it first.
#[allow(unsafe_code)]
pub fn disable_transparent_huge_pages() -> io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether transparent huge pages are off for this process (`prctl(PR_GET_THP_DISABLE)`).
#[allow(unsafe_code)]
pub fn transparent_huge_pages_disabled() -> io::Result<bool> {
    // SAFETY: PR_GET_THP_DISABLE takes no pointer; it returns the flag.
    let rc = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_turns_huge_pages_off_reads_them_off() {
        // The flag is the process's (inherited by children), so set it in a child of its own.
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
        assert!(text.contains("THP off: before false, after true"), "{text}");
    }

    #[test]
    #[ignore = "run by a_process_that_turns_huge_pages_off_reads_them_off in a process of its own"]
    fn child() {
        let before = transparent_huge_pages_disabled().unwrap();
        disable_transparent_huge_pages().unwrap();
        let after = transparent_huge_pages_disabled().unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(status.contains("THP_enabled:\t0"), "{status}");
        println!("THP off: before {before}, after {after}");
    }
}
