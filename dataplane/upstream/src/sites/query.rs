//! A site's query rules: parameters dropped (exact names, or prefixes ending in `*`) and the
//! rest optionally sorted, applied to the request target before the cache key is made, so the
//! key and the origin request agree.

/// The rules of one site.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryRules {
    pub drop: Vec<String>,
    pub sort: bool,
}

impl QueryRules {
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && !self.sort
    }

    fn drops(&self, name: &str) -> bool {
        self.drop.iter().any(|d| match d.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == d,
        })
    }

    /// `query` with the rules applied; `None` when nothing is left of it.
    pub fn apply(&self, query: &str) -> Option<String> {
        let mut kept: Vec<&str> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .filter(|p| !self.drops(p.split_once('=').map_or(*p, |(k, _)| k)))
            .collect();
        if self.sort {
            // Stable: repeated names keep their order.
            kept.sort_by_key(|p| p.split_once('=').map_or(*p, |(k, _)| k));
        }
        (!kept.is_empty()).then(|| kept.join("&"))
    }

    /// A path-and-query with the rules applied to its query.
    pub fn apply_to_target(&self, target: &str) -> String {
        match target.split_once('?') {
            Some((path, q)) => match self.apply(q) {
                Some(q) => format!("{path}?{q}"),
                None => path.to_string(),
            },
            None => target.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_by_name_and_prefix_and_sorts_stably() {
        let r = QueryRules {
            drop: vec!["utm_*".into(), "fbclid".into()],
            sort: true,
        };
        assert_eq!(
            r.apply_to_target("/a?utm_source=x&b=2&fbclid=9&a=1&b=1"),
            "/a?a=1&b=2&b=1"
        );
        assert_eq!(r.apply_to_target("/a?utm_x=1"), "/a");
        assert_eq!(r.apply_to_target("/a"), "/a");
        assert_eq!(r.apply_to_target("/a?fbclidx=1"), "/a?fbclidx=1");
        let keep = QueryRules::default();
        assert!(keep.is_empty());
        assert_eq!(keep.apply_to_target("/a?b=1&a=2"), "/a?b=1&a=2");
    }
}
