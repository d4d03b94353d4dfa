//! Rendering the Helm chart with the helm binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize as _;

use crate::repo_root;

/// `charts/edgecache`.
pub fn chart_dir() -> PathBuf {
    repo_root().join("charts").join("edgecache")
}

/// Where `charts/install-helm.sh` caches helm.
pub fn cached_helm() -> PathBuf {
    let tools = std::env::var_os("EDGECACHE_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/edgecache-tools"));
    tools.join("helm")
}

/// The helm binary: `$HELM`, the cached one, or `helm` on PATH. `Err` says where it looked.
pub fn helm() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(h) = std::env::var_os("HELM") {
        candidates.push(PathBuf::from(h));
    }
    candidates.push(cached_helm());
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("helm")));
    }
    for c in &candidates {
        let ok = Command::new(c)
            .args(["version", "--short"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Ok(c.clone());
        }
    }
    Err(format!(
        "looked at $HELM, {} and PATH; install it with charts/install-helm.sh",
        cached_helm().display()
    ))
}

/// The outcome of one helm invocation.
#[derive(Debug)]
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Run helm with `args`.
pub fn run(helm: &Path, args: &[&str]) -> Output {
    match Command::new(helm).args(args).output() {
        Ok(o) => Output {
            success: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        },
        Err(e) => Output {
            success: false,
            stdout: String::new(),
            stderr: format!("cannot run {}: {e}", helm.display()),
        },
    }
}

/// `helm template RELEASE charts/edgecache --namespace NS --include-crds -f VALUES... --set ...`.
pub fn template(helm: &Path, namespace: &str, values: &[PathBuf], sets: &[&str]) -> Output {
    let chart = chart_dir();
    let chart = chart.to_string_lossy();
    let mut args: Vec<String> = vec![
        "template".into(),
        "ec".into(),
        chart.into_owned(),
        "--namespace".into(),
        namespace.into(),
        "--include-crds".into(),
    ];
    for v in values {
        args.push("--values".into());
        args.push(v.to_string_lossy().into_owned());
    }
    for s in sets {
        args.push("--set".into());
        args.push((*s).into());
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(helm, &refs)
}

/// Every document of a YAML stream as JSON (empty documents skipped).
pub fn documents(stream: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(stream) {
        let v = yaml_serde::Value::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        out.push(serde_json::to_value(v)?);
    }
    Ok(out)
}

/// The chart's CI values files (`charts/edgecache/ci/*.yaml`), sorted.
pub fn ci_values() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}
