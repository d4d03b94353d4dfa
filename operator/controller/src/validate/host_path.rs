//! Which node directories an EdgeCache may use as its cache: a path is normalized lexically and
//! allowed when it is equal to or below one of the prefixes the operator was installed with
//! (chart value `dataplane.allowedHostPaths`, flag `--allowed-host-path`). Pure.
//!
//! Lexical only: a symlink on the node (say `/mnt/etc -> /etc`) is not seen here; the allowed
//! prefixes should be directories only administrators write to.

use std::fmt;

/// The allow-list when none is configured: the chart's default.
pub const DEFAULT_ALLOWED_HOST_PATHS: [&str; 2] = ["/var/cache/edgecache", "/mnt"];

/// `path` as an absolute path without empty or `.` components and without a trailing slash;
/// refused when relative, `/` itself, with a `..` component or a NUL byte.
pub fn normalize(path: &str) -> Result<String, String> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(format!("must be an absolute directory path (got {path:?})"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("must not contain `..` (got {path:?})")),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(format!("must be a directory other than / (got {path:?})"));
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The normalized prefixes a hostPath must be equal to or below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHostPaths(Vec<String>);

impl AllowedHostPaths {
    /// Normalize every entry; the first bad one is refused with its reason.
    pub fn new<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        entries
            .iter()
            .map(|e| normalize(e.as_ref()).map_err(|why| format!("allowed host path {why}")))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether the normalized `path` is one of the prefixes or below one (component-wise:
    /// `/mnt` allows `/mnt/nvme0`, not `/mntx`).
    pub fn allows(&self, path: &str) -> bool {
        self.0.iter().any(|prefix| {
            path == prefix
                || path
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }
}

impl Default for AllowedHostPaths {
    fn default() -> Self {
        Self(DEFAULT_ALLOWED_HOST_PATHS.map(String::from).to_vec())
    }
}

impl fmt::Display for AllowedHostPaths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.0.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization() {
        for (raw, want) in [
            ("/mnt/nvme0", "/mnt/nvme0"),
            ("/mnt/nvme0/", "/mnt/nvme0"),
            ("/mnt//nvme0/./", "/mnt/nvme0"),
            ("//mnt/.", "/mnt"),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(want), "{raw}");
        }
        for bad in [
            "",
            "mnt/x",
            "./mnt",
            "/",
            "//",
            "/.",
            "/mnt/../etc",
            "/mnt/x/..",
            "/a\0b",
        ] {
            assert!(normalize(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn equal_to_or_below_a_prefix() {
        let allowed = AllowedHostPaths::default();
        for ok in [
            "/mnt",
            "/mnt/nvme0/edgecache",
            "/var/cache/edgecache",
            "/var/cache/edgecache/a",
        ] {
            assert!(allowed.allows(ok), "{ok}");
        }
        for refused in [
            "/etc",
            "/var/lib/kubelet",
            "/mntx",
            "/var/cache",
            "/var/cache/edgecache2",
        ] {
            assert!(!allowed.allows(refused), "{refused}");
        }
        assert_eq!(allowed.to_string(), "[/var/cache/edgecache, /mnt]");
    }

    #[test]
    fn entries_are_normalized_and_checked() {
        let a = AllowedHostPaths::new(&["/data/", "/srv/./cache"]).unwrap();
        assert!(a.allows("/data/x") && a.allows("/srv/cache"));
        assert!(AllowedHostPaths::new(&["data"]).is_err());
        assert!(AllowedHostPaths::new(&["/data/../etc"]).is_err());
    }
}
