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
    /// Add `site`'s hostnames (an earlier site keeps a name two name).
    pub fn add(&mut self, site: usize, hosts: &[String], default: bool) {
        for h in hosts {
            let h = h.to_ascii_lowercase();
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

    /// The site for a Host field's value (its port and a trailing dot ignored, any case).
    pub fn route(&self, host: Option<&str>) -> Option<usize> {
        if self.exact.is_empty() && self.wildcard.is_empty() {
            // The one-site shorthand: nothing to look up on the hot path.
            return self.default;
        }
        let found = host.and_then(|h| {
            let name = strip_port(h).trim_end_matches('.').to_ascii_lowercase();
            self.exact.get(&name).copied().or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent).copied()
            })
        });
        found.or(self.default)
    }
}

/// A Host field's host without its port (`[::1]:80` keeps its brackets).
pub fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
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
        assert_eq!(t.route(Some("www.a.test")), Some(0));
        assert_eq!(t.route(Some("A.TEST:8080")), Some(0));
        assert_eq!(t.route(Some("a.test.")), Some(0));
        assert_eq!(t.route(Some("img.b.test")), Some(1));
        assert_eq!(t.route(Some("x.img.b.test")), None, "one label only");
        assert_eq!(t.route(Some("b.test")), None);
        assert_eq!(t.route(Some("c.test")), None);
        assert_eq!(t.route(None), None);
        let t = table(true);
        assert_eq!(t.route(Some("c.test")), Some(1));
        assert_eq!(t.route(None), Some(1));
        assert_eq!(HostTable::catch_all(0).route(Some("anything")), Some(0));
    }

    #[test]
    fn a_port_is_stripped_but_not_an_ipv6_address() {
        assert_eq!(strip_port("a.test:8080"), "a.test");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
    }
}
