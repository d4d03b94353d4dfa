//! The `site` label of the request histograms: the request's host, lowercased and without its
//! port, for the first [`MAX_SITES`] hosts seen since the start; any later host is `other`, so
//! a client sending random Host fields cannot grow /metrics. A host with characters a DNS name
//! or an IP literal cannot have is `other` too; a request without a host is `none`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::RwLock;

/// Distinct sites labelled by name; the rest are `other`.
pub const MAX_SITES: usize = 64;

/// The sites seen so far, each name kept once for the process's life.
#[derive(Debug)]
pub struct Sites {
    known: RwLock<HashMap<Box<str>, &'static str>>,
    max: usize,
}

impl Sites {
    pub fn new(max: usize) -> Self {
        Self {
            known: RwLock::new(HashMap::new()),
            max,
        }
    }

    /// The label of `host` (a Host field value or an authority).
    #[cfg(test)]
    pub fn label(&self, host: &str) -> &'static str {
        if host.is_empty() {
            return "none";
        }
        match normalize(host) {
            Some(site) => self.label_of(site),
            None => "other",
        }
    }

    /// The label of a [`normalize`]d host: its name if it is known or there is room for it.
    pub fn label_of(&self, site: Cow<'_, str>) -> &'static str {
        if let Some(l) = self.read().get(&*site) {
            return l;
        }
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = known.get(&*site) {
            return l;
        }
        if known.len() >= self.max {
            return "other";
        }
        // At most `max` names are ever leaked: the label set of a histogram family is
        // `&'static str` throughout, so no label costs an allocation per request.
        let name: &'static str = Box::leak(site.into_owned().into_boxed_str());
        known.insert(name.into(), name);
        name
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Box<str>, &'static str>> {
        self.known.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// `host` lowercased, without its port (`[v6]:port` keeps its brackets); `None` when it holds
/// anything but letters, digits, `.`, `-` (or, in brackets, an IPv6 literal).
pub fn normalize(host: &str) -> Option<Cow<'_, str>> {
    let name = if let Some(v6) = host.strip_prefix('[') {
        let (inside, rest) = v6.split_once(']')?;
        let port_ok = rest.is_empty() || rest.strip_prefix(':').is_some_and(is_port);
        let ok = port_ok
            && !inside.is_empty()
            && inside
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !ok {
            return None;
        }
        &host[..inside.len() + 2]
    } else {
        let name = match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return None,
            None => host,
        };
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !ok {
            return None;
        }
        name
    };
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Some(Cow::Owned(name.to_ascii_lowercase()))
    } else {
        Some(Cow::Borrowed(name))
    }
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_to_sites() {
        let sites = Sites::new(MAX_SITES);
        let cases = [
            ("www.example", "www.example"),
            ("WWW.Example:8080", "www.example"),
            ("www.example:", "other"),
            ("127.0.0.1:80", "127.0.0.1"),
            ("[::1]:8080", "[::1]"),
            ("[2001:DB8::1]", "[2001:db8::1]"),
            ("[::1", "other"),
            ("[zz]", "other"),
            ("a\"b", "other"),
            ("a b", "other"),
            ("a_b.example", "other"),
            ("", "none"),
            (":80", "other"),
        ];
        for (host, want) in cases {
            assert_eq!(sites.label(host), want, "{host:?}");
        }
    }

    #[test]
    fn at_most_max_sites_then_other() {
        let sites = Sites::new(3);
        for i in 0..3 {
            assert_eq!(
                sites.label(&format!("s{i}.example")),
                format!("s{i}.example")
            );
        }
        assert_eq!(sites.label("s3.example"), "other");
        // Those seen keep their label, whatever case or port they come with.
        assert_eq!(sites.label("S1.EXAMPLE:443"), "s1.example");
        assert_eq!(sites.read().len(), 3);
    }
}
