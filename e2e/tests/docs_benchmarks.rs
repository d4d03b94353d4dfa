//! The README's benchmark table is a copy of figures in bench/BENCHMARKS.md: every number in it
//! must be there too, so a regenerated BENCHMARKS.md cannot leave the front page quoting figures
//! it no longer has.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use edgecache_e2e::repo_root;

#[test]
fn every_figure_of_the_readme_benchmark_table_is_in_benchmarks_md() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let source = std::fs::read_to_string(repo_root().join("bench/BENCHMARKS.md")).unwrap();
    let section = readme
        .split("## Benchmarks")
        .nth(1)
        .expect("README.md has a Benchmarks section");
    let figures: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its separator
        .flat_map(|row| row.split('|').skip(3)) // past the objects and distribution
        .map(|cell| cell.trim().trim_matches('*'))
        .filter(|cell| cell.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert!(figures.len() > 20, "{figures:?}");
    let missing: Vec<&&str> = figures
        .iter()
        .filter(|f| !source.contains(&format!(" {f} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's benchmark table quotes figures bench/BENCHMARKS.md does not have: \
         {missing:?}; copy the current ones"
    );
}
