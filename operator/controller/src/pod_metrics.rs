//! Pure: what `status.nodes` shows of a pod's own `/metrics` (Prometheus text): the disk I/O
//! engine and steering mode in effect, the disk store's bytes and objects, and the hit ratio
//! since the pod started.

use std::collections::BTreeMap;

const PREFIX: &str = "edgecache_dataplane_";

/// The request outcomes (`requests_total{cache}`) that were looked up in the cache, and those
/// of them that were hits. Bypasses, synthetic answers and origin errors are left out.
const LOOKUPS: &[&str] = &[
    "hit_ram",
    "hit_disk",
    "miss",
    "coalesced",
    "revalidated",
    "peer",
];
const HITS: &[&str] = &["hit_ram", "hit_disk"];

/// One pod's figures; a field is `None` when the pod does not export it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodMetrics {
    pub io_engine: Option<String>,
    pub steering: Option<String>,
    pub disk_bytes: Option<i64>,
    pub objects: Option<i64>,
    /// Hits over lookups, rounded to three decimals; `None` before the first lookup.
    pub hit_ratio: Option<f64>,
}

/// One sample: the metric name (without the prefix), its labels and its value.
fn sample(line: &str) -> Option<(&str, BTreeMap<&str, &str>, f64)> {
    let line = line.trim();
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let labels = labels
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.trim(), v.trim().trim_matches('"')))
        })
        .collect();
    Some((name.strip_prefix(PREFIX)?, labels, value))
}

/// Read the figures out of a `/metrics` body.
pub fn parse(text: &str) -> PodMetrics {
    let mut m = PodMetrics::default();
    let (mut hits, mut lookups) = (0.0, 0.0);
    let whole = |v: f64| (v.is_finite() && v >= 0.0).then_some(v as i64);
    for (name, labels, value) in text.lines().filter_map(sample) {
        match name {
            "io_engine_info" => m.io_engine = labels.get("engine").map(|s| s.to_string()),
            "steering_info" => m.steering = labels.get("mode").map(|s| s.to_string()),
            "store_bytes" => m.disk_bytes = whole(value),
            "store_objects" => m.objects = whole(value),
            "requests_total" => {
                let cache = labels.get("cache").copied().unwrap_or("");
                if LOOKUPS.contains(&cache) {
                    lookups += value;
                }
                if HITS.contains(&cache) {
                    hits += value;
                }
            }
            _ => {}
        }
    }
    if lookups > 0.0 {
        m.hit_ratio = Some((hits / lookups * 1000.0).round() / 1000.0);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_steering_store_and_hit_ratio() {
        let text = "# HELP edgecache_dataplane_io_engine_info The disk I/O engine in use.\n\
            # TYPE edgecache_dataplane_io_engine_info info\n\
            edgecache_dataplane_io_engine_info{engine=\"uring\"} 1\n\
            edgecache_dataplane_steering_info{mode=\"cpu\"} 1\n\
            edgecache_dataplane_store_bytes 1048576\n\
            edgecache_dataplane_store_objects 12\n\
            edgecache_dataplane_requests_total{cache=\"hit_ram\"} 5\n\
            edgecache_dataplane_requests_total{cache=\"hit_disk\"} 1\n\
            edgecache_dataplane_requests_total{cache=\"miss\"} 2\n\
            edgecache_dataplane_requests_total{cache=\"peer\"} 1\n\
            edgecache_dataplane_requests_total{cache=\"bypass\"} 100\n\
            other_metric 7\n\
            # EOF\n";
        assert_eq!(
            parse(text),
            PodMetrics {
                io_engine: Some("uring".into()),
                steering: Some("cpu".into()),
                disk_bytes: Some(1_048_576),
                objects: Some(12),
                hit_ratio: Some(0.667),
            }
        );
    }

    #[test]
    fn nothing_known_is_nothing() {
        assert_eq!(parse(""), PodMetrics::default());
        assert_eq!(
            parse("edgecache_dataplane_requests_total{cache=\"bypass\"} 3\ngarbage\n"),
            PodMetrics::default(),
            "no lookup yet: no ratio"
        );
    }
}
