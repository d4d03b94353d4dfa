//! The blocks of README.md and docs/ that a reader would paste (`docs/gen/src/shell_blocks.rs`
//! says how they are marked): every shell block is marked; `<!-- needs: ... -->` blocks parse
//! (`bash -n`); `<!-- test: run -->` blocks run from the repository's root, with the workspace's
//! freshly built binaries and helm on `PATH`; YAML blocks marked `check-config` pass
//! `edgecache-dataplane check-config`, those marked `render` pass `edgecache-operator render`, and
//! those marked `in FILE` are a part of that file (a sample the repository tests otherwise).
//! Without the binaries (they are built by `cargo test --workspace`, or
//! `cargo build -p edgecache-dataplane -p edgecache-operator`) or helm, the blocks that need them
//! print `SKIPPED: <reason>`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use edgecache_docgen::shell_blocks::{Block, Marker, blocks};
use edgecache_e2e::{chart, docs_pages, repo_root};

/// The longest a `test: run` block may take: they are meant to be cheap.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// README.md and every page under docs/, with their blocks.
fn pages() -> Vec<(PathBuf, Vec<Block>)> {
    docs_pages()
        .unwrap()
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, blocks(&text))
        })
        .collect()
}

/// `file:line` of a block, relative to the repository.
fn place(file: &Path, block: &Block) -> String {
    let rel = file.strip_prefix(repo_root()).unwrap_or(file);
    format!("{}:{}", rel.display(), block.line)
}

/// The workspace's binaries: this test runs as target/debug/deps/docs_shell-HASH, and cargo
/// puts the binaries in target/debug. `None`, said in a `SKIPPED:` line, when they are not built.
fn bin_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?.to_path_buf();
    let built = ["edgecache-dataplane", "edgecache-operator"]
        .iter()
        .all(|b| dir.join(b).is_file());
    if !built {
        println!(
            "SKIPPED: docs_shell: edgecache-dataplane and edgecache-operator not built \
             (cargo build -p edgecache-dataplane -p edgecache-operator)"
        );
    }
    built.then_some(dir)
}

/// `PATH` with the binaries' and helm's directories first.
fn path_with(dirs: &[PathBuf]) -> std::ffi::OsString {
    let mut all: Vec<PathBuf> = dirs.to_vec();
    all.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(all).unwrap()
}

/// Run `cmd` to its end or `limit`, whichever is first (then it is killed).
fn run_within(mut cmd: Command, limit: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let started = Instant::now();
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().map_err(|e| e.to_string())
}

fn failed(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn every_shell_block_is_marked_and_parses() {
    let mut problems = Vec::new();
    let mut count = 0;
    for (file, blocks) in pages() {
        for block in blocks.iter().filter(|b| b.is_shell()) {
            count += 1;
            let at = place(&file, block);
            match &block.marker {
                Marker::Unmarked => problems.push(format!(
                    "{at}: mark the block: `<!-- test: run -->` if it is cheap and needs nothing, \
                     else `<!-- needs: WHAT -->`"
                )),
                Marker::Test(t) if t != "run" => {
                    problems.push(format!("{at}: a shell block's test is `run`, not `{t}`"))
                }
                _ => {}
            }
            let out = Command::new("bash")
                .args(["-n", "-c", &block.script])
                .output()
                .unwrap();
            if !out.status.success() {
                problems.push(failed(&format!("{at}: bash -n"), &out));
            }
        }
    }
    assert!(count > 20, "only {count} shell blocks found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn cheap_shell_blocks_run() {
    let Some(bins) = bin_dir() else {
        return;
    };
    let helm = chart::helm().ok();
    let mut dirs = vec![bins];
    dirs.extend(
        helm.as_ref()
            .and_then(|h| h.parent())
            .map(Path::to_path_buf),
    );
    let path = path_with(&dirs);
    let mut problems = Vec::new();
    let mut ran = 0;
    for (file, blocks) in pages() {
        for block in blocks
            .iter()
            .filter(|b| b.is_shell() && b.marker == Marker::Test("run".into()))
        {
            let at = place(&file, block);
            if helm.is_none() && block.script.contains("helm ") {
                println!("SKIPPED: docs_shell: {at}: helm not installed (charts/install-helm.sh)");
                continue;
            }
            let mut cmd = Command::new("bash");
            cmd.args(["-euo", "pipefail", "-c", &block.script])
                .current_dir(repo_root())
                .env("PATH", &path);
            match run_within(cmd, RUN_LIMIT) {
                Ok(out) if out.status.success() => ran += 1,
                Ok(out) => problems.push(failed(&at, &out)),
                Err(e) => problems.push(format!("{at}: {e}")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(ran >= 5, "only {ran} blocks ran");
}

#[test]
fn marked_yaml_blocks_are_valid() {
    let Some(bins) = bin_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, blocks) in pages() {
        for (i, block) in blocks.iter().enumerate() {
            let Marker::Test(test) = &block.marker else {
                continue;
            };
            let at = place(&file, block);
            if let Some(source) = test.strip_prefix("in ") {
                // A copy of (part of) a file the repository tests otherwise.
                let text = std::fs::read_to_string(repo_root().join(source)).unwrap_or_default();
                if text.contains(&block.script) {
                    checked += 1;
                } else {
                    problems.push(format!("{at}: the block is not (a part of) {source}"));
                }
                continue;
            }
            let (bin, args): (&str, &[&str]) = match (block.lang.as_str(), test.as_str()) {
                (_, "run") if block.is_shell() => continue,
                ("yaml", "check-config") => ("edgecache-dataplane", &["check-config"]),
                ("yaml", "render") => ("edgecache-operator", &["render", "-f"]),
                (lang, other) => {
                    problems.push(format!("{at}: no test `{other}` for a `{lang}` block"));
                    continue;
                }
            };
            let input = dir.path().join(format!("block-{i}.yaml"));
            std::fs::write(&input, &block.script).unwrap();
            let out = Command::new(bins.join(bin))
                .args(args)
                .arg(&input)
                .output()
                .unwrap();
            if out.status.success() {
                checked += 1;
            } else {
                problems.push(failed(&format!("{at}: {bin} {}", args.join(" ")), &out));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 4, "only {checked} YAML blocks checked");
}
