//! docs/security.md's table "What the operator may touch" is the RBAC the chart grants, rule by
//! rule: the same API groups, resources and verbs as the ClusterRole `helm template` renders with
//! the default values. Without helm the test prints `SKIPPED: <reason>`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::collections::BTreeSet;

use edgecache_e2e::chart::{self, documents, template};
use edgecache_e2e::repo_root;
use serde_json::Value;

/// One rule for one API group: (group, `core` for the empty one; resources; verbs), sorted.
type Rule = (String, Vec<String>, Vec<String>);

const PAGE: &str = "docs/security.md";
const SECTION: &str = "## What the operator may touch";

fn sorted(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = items.collect();
    v.sort();
    v
}

/// The rows of the page's table under [`SECTION`].
fn rules_in_page() -> BTreeSet<Rule> {
    let text = std::fs::read_to_string(repo_root().join(PAGE)).unwrap();
    let section = text.split(SECTION).nth(1).unwrap_or_else(|| {
        panic!("{PAGE} has no section {SECTION:?}");
    });
    let list = |cell: &str| {
        sorted(
            cell.split(',')
                .map(|s| s.trim().trim_matches('`').to_string())
                .filter(|s| !s.is_empty()),
        )
    };
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its separator
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            assert!(cells.len() >= 3, "{PAGE}: a short row: {row}");
            (
                cells[0].trim().trim_matches('`').to_string(),
                list(cells[1]),
                list(cells[2]),
            )
        })
        .collect()
}

/// The rules of the ClusterRole the chart renders with its default values.
fn rules_in_chart(helm: &std::path::Path) -> BTreeSet<Rule> {
    let out = template(helm, "edgecache-system", &[], &[]);
    assert!(out.success, "{}", out.stderr);
    let docs = documents(&out.stdout).unwrap();
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("the chart renders a ClusterRole");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let mut rules = BTreeSet::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        for group in strings(&rule["apiGroups"]) {
            let group = if group.is_empty() {
                "core".into()
            } else {
                group
            };
            rules.insert((
                group,
                sorted(strings(&rule["resources"]).into_iter()),
                sorted(strings(&rule["verbs"]).into_iter()),
            ));
        }
    }
    rules
}

#[test]
fn the_security_page_lists_exactly_the_rbac_the_chart_grants() {
    let helm = match chart::helm() {
        Ok(h) => h,
        Err(reason) => {
            println!("SKIPPED: docs_rbac: helm not installed ({reason})");
            return;
        }
    };
    let page = rules_in_page();
    let chart = rules_in_chart(&helm);
    assert!(chart.len() > 10, "{chart:?}");
    let missing: Vec<&Rule> = chart.difference(&page).collect();
    let extra: Vec<&Rule> = page.difference(&chart).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{PAGE} ({SECTION}) differs from charts/edgecache/templates/rbac.yaml:\n\
         granted but not on the page: {missing:?}\non the page but not granted: {extra:?}"
    );
}
