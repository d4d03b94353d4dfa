//! Which site answers a Host: an exact name, else a one-label wildcard, else the default site.

use std::collections::HashMap;

/// Hostnames to site indexes.
#[derive(Debug, Default, Clone)]
pub struct HostTable {
    exact: HashMap<String, usize>,
    /// `*.example.com` is kept as `example.com`.
    wildcard: HashMap<String, usize>,
    default: Option<usize>,
}

impl HostTable {
    /// Add `site`'s hostnames (an earlier site keeps a name two sites give), in the form
    /// requests' hosts are normalised to: lower case, without a trailing dot.
    pub fn add(&mut self, site: usize, hosts: &[String], default: bool) {
        for h in hosts {
            let h = h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase();
            match h.strip_prefix("*.") {
                Some(parent) => self.wildcard.entry(parent.to_string()).or_insert(site),
                None => self.exact.entry(h).or_insert(site),
            };
        }
        if default && self.default.is_none() {
            self.default = Some(site);
        }
    }

    /// Every Host goes to `site` (the `origin.url` shorthand).
    pub fn catch_all(site: usize) -> Self {
        Self {
            default: Some(site),
            ..Self::default()
        }
    }

    /// The site for a normalised host (`edgecache_policy::Authority::host`: lower-case, no
    /// port, no trailing dot).
    pub fn route(&self, host: &str) -> Option<usize> {
        if self.exact.is_empty() && self.wildcard.is_empty() {
            // The one-site shorthand: nothing to look up on the hot path.
            return self.default;
        }
        let found = self.exact.get(host).copied().or_else(|| {
            let (_, parent) = host.split_once('.')?;
            self.wildcard.get(parent).copied()
        });
        found.or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(default: bool) -> HostTable {
        let mut t = HostTable::default();
        t.add(0, &["www.a.test".into(), "a.test".into()], false);
        t.add(1, &["*.b.test".into()], default);
        t
    }

    #[test]
    fn exact_then_wildcard_then_default() {
        let t = table(false);
        assert_eq!(t.route("www.a.test"), Some(0));
        assert_eq!(t.route("a.test"), Some(0));
        assert_eq!(t.route("img.b.test"), Some(1));
        assert_eq!(t.route("x.img.b.test"), None, "one label only");
        assert_eq!(t.route("b.test"), None);
        assert_eq!(t.route("c.test"), None);
        let t = table(true);
        assert_eq!(t.route("c.test"), Some(1));
        assert_eq!(HostTable::catch_all(0).route("anything"), Some(0));
    }

    #[test]
    fn configured_names_are_matched_in_lower_case() {
        let mut t = HostTable::default();
        t.add(0, &["WWW.A.Test.".into(), "*.B.TEST".into()], false);
        assert_eq!(t.route("www.a.test"), Some(0));
        assert_eq!(t.route("img.b.test"), Some(0));
    }
}
