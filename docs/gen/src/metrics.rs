//! A metrics reference from a Prometheus text exposition (what a registry encodes, so what a
//! scrape of `/metrics` shows): each family's name as scraped, type, labels and help.

use crate::page::cell;

/// One metric family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// The name as a scrape shows it: counters with `_total`, info metrics with `_info`.
    pub name: String,
    pub kind: String,
    /// Label names seen on its samples (not `le`), in order of first appearance.
    pub labels: Vec<String>,
    pub help: String,
}

/// The families of `exposition`, in the order they are exposed.
pub fn families(exposition: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_string(),
                kind: String::new(),
                labels: Vec::new(),
                help: help.to_string(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let (Some(family), Some((_, kind))) = (out.last_mut(), rest.split_once(' ')) {
                family.kind = kind.to_string();
                family.name = scraped_name(&family.name, kind);
            }
        } else if !line.starts_with('#')
            && let Some(family) = out.last_mut()
        {
            for label in sample_labels(line) {
                if label != "le" && !family.labels.contains(&label) {
                    family.labels.push(label);
                }
            }
        }
    }
    out
}

/// The name samples of a family carry (OpenMetrics adds `_total` to counters, `_info` to info).
fn scraped_name(name: &str, kind: &str) -> String {
    match kind {
        "counter" => format!("{name}_total"),
        "info" => format!("{name}_info"),
        _ => name.to_string(),
    }
}

/// The label names of one sample line, `name{a="x",b="y"} 1`.
fn sample_labels(line: &str) -> Vec<String> {
    let Some((_, rest)) = line.split_once('{') else {
        return Vec::new();
    };
    let mut labels = Vec::new();
    let mut in_value = false;
    let mut escaped = false;
    let mut name = String::new();
    for c in rest.chars() {
        if in_value {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => in_value = false,
                _ => escaped = false,
            }
            continue;
        }
        match c {
            '=' => labels.push(std::mem::take(&mut name)),
            '"' => in_value = true,
            ',' => {}
            '}' => break,
            c => name.push(c),
        }
    }
    labels
}

/// The families as one markdown table.
pub fn table(families: &[Family]) -> String {
    let mut out = String::from("| Metric | Type | Labels | Help |\n|---|---|---|---|\n");
    for f in families {
        let labels = f
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            f.name,
            f.kind,
            labels,
            cell(&f.help)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_take_names_types_labels_and_help_from_the_exposition() {
        let text = "# HELP ec_requests Requests (label cache).\n# TYPE ec_requests counter\n\
                    ec_requests_total{cache=\"hit\"} 1\nec_requests_total{cache=\"a,\\\"b\"} 2\n\
                    # HELP ec_up Up.\n# TYPE ec_up gauge\nec_up 1\n\
                    # HELP ec_engine Engine.\n# TYPE ec_engine info\nec_engine_info{engine=\"uring\"} 1\n\
                    # HELP ec_t Time.\n# TYPE ec_t histogram\nec_t_bucket{le=\"0.5\",site=\"x\"} 1\n# EOF\n";
        let f = families(text);
        let got: Vec<_> = f
            .iter()
            .map(|f| (f.name.as_str(), f.kind.as_str(), f.labels.join(",")))
            .collect();
        assert_eq!(
            got,
            [
                ("ec_requests_total", "counter", "cache".to_string()),
                ("ec_up", "gauge", String::new()),
                ("ec_engine_info", "info", "engine".to_string()),
                ("ec_t", "histogram", "site".to_string()),
            ]
        );
        assert_eq!(f[0].help, "Requests (label cache).");
    }
}
