//! Every relative link of README.md and docs/ leads somewhere: the file exists, and a `#anchor`
//! into a markdown page names one of its headings (as GitHub makes anchors of them). Code spans
//! and fenced blocks are not links.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::collections::BTreeSet;
use std::path::Path;

use edgecache_e2e::{docs_pages, repo_root};

/// The page's prose: fenced blocks dropped, code spans blanked.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            }
            out.push(if in_code { ' ' } else { c });
        }
        out.push('\n');
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    prose(&text)
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// The targets of the `[text](target)` links of `text`.
fn link_targets(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|t| !t.contains(' '))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut problems = Vec::new();
    let mut count = 0;
    for page in docs_pages().unwrap() {
        let text = prose(&std::fs::read_to_string(&page).unwrap());
        let dir = page.parent().unwrap();
        for target in link_targets(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            count += 1;
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            let rel = page.strip_prefix(repo_root()).unwrap_or(&page).display();
            if !file.exists() {
                problems.push(format!("{rel}: ({target}): no such file"));
            } else if !fragment.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&file).contains(fragment)
            {
                problems.push(format!("{rel}: ({target}): no heading makes #{fragment}"));
            }
        }
    }
    assert!(count > 30, "only {count} links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
