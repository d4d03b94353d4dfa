//! `edgecache-operator reference PAGE`: the operator's reference pages (`docs/reference/`), made
//! from what the binary itself uses: the command line from clap's model of it, the resources
//! from the CRDs it installs (their names, printer columns, schemas with doc comments and
//! defaults, CEL rules). `tests/reference_docs.rs` fails when a committed page differs.

use std::path::{Path, PathBuf};

use edgecache_docgen::page::{cell, generated, write_pages};
use edgecache_docgen::{cli, schema};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// The pages this binary generates.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Page {
    /// docs/reference/operator-cli.md: every subcommand's --help.
    Cli,
    /// docs/reference/crds.md: the EdgeCache and EdgeCachePurge resources, field by field.
    Crds,
}

impl Page {
    /// Its file under docs/reference/.
    pub fn file(self) -> &'static str {
        match self {
            Page::Cli => "operator-cli.md",
            Page::Crds => "crds.md",
        }
    }
}

/// Every page of the operator, written into `dir`; the paths written.
pub fn write_all(dir: &Path, cli: &clap::Command) -> anyhow::Result<Vec<PathBuf>> {
    let mut pages = Vec::new();
    for page in <Page as clap::ValueEnum>::value_variants() {
        pages.push((page.file(), render(*page, cli.clone())?));
    }
    Ok(write_pages(dir, pages)?)
}

/// The markdown of `page`; `cli` is the operator's command.
pub fn render(page: Page, cli: clap::Command) -> Result<String, serde_json::Error> {
    Ok(match page {
        Page::Cli => generated(
            "edgecache-operator command line",
            "edgecache-operator reference cli",
            "The chart runs `edgecache-operator run` with the flags its values set \
             (`charts/edgecache/values.yaml`).",
            &cli::help_pages(cli),
        ),
        Page::Crds => {
            let mut body = String::new();
            for crd in [
                edgecache_api::schema::edgecache_crd(),
                edgecache_api::schema::edgecache_purge_crd(),
            ] {
                body.push_str(&crd_section(&crd)?);
            }
            let intro = format!(
                "The custom resources of `edgecache.dev`, from the CRDs the chart installs \
                 (`crds/`, `edgecache-operator crd`). A field's default is what the API server \
                 fills in; the rules are checked by the API server at `kubectl apply`. \
                 Values:\n\n{}",
                schema::formats_legend(&edgecache_api::schema::QUANTITY_FORMATS)
            );
            generated(
                "EdgeCache and EdgeCachePurge resources",
                "edgecache-operator reference crds",
                &intro,
                &body,
            )
        }
    })
}

/// One CRD: its names, printer columns, fields and validation rules.
fn crd_section(crd: &CustomResourceDefinition) -> Result<String, serde_json::Error> {
    let names = &crd.spec.names;
    let mut out = format!("## {}\n\n", names.kind);
    out.push_str(&format!(
        "`{}` (plural `{}`, short name {}), namespaced.\n\n",
        crd.spec.group,
        names.plural,
        names
            .short_names
            .iter()
            .flatten()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for version in &crd.spec.versions {
        out.push_str(&format!("### {}/{}\n\n", crd.spec.group, version.name));
        let columns: Vec<String> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| format!("{} (`{}`)", c.name, c.json_path))
            .collect();
        if !columns.is_empty() {
            out.push_str(&format!(
                "`kubectl get {}` shows: {}.\n\n",
                names.plural,
                columns.join(", ")
            ));
        }
        let root = serde_json::to_value(
            version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref()),
        )?;
        let formats = &edgecache_api::schema::QUANTITY_FORMATS;
        out.push_str(&schema::table(&schema::fields(&root, &root, "", formats)));
        let rules = validation_rules(&root, "");
        if !rules.is_empty() {
            out.push_str("\nValidation rules:\n\n| Field | Rule | Message |\n|---|---|---|\n");
            for (path, rule, message) in rules {
                out.push_str(&format!(
                    "| `{}` | `{}` | {} |\n",
                    if path.is_empty() {
                        "(the resource)"
                    } else {
                        &path
                    },
                    cell(&rule),
                    cell(&message)
                ));
            }
        }
        out.push('\n');
    }
    Ok(out)
}

/// Every `x-kubernetes-validations` rule below `schema`: (field path, rule, message).
fn validation_rules(schema: &Value, path: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = |k: &str| {
            rule.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        out.push((path.to_string(), text("rule"), text("message")));
    }
    for (name, sub) in schema::sorted_properties(schema) {
        let child = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        out.extend(validation_rules(sub, &child));
        if let Some(items) = sub.get("items") {
            out.extend(validation_rules(items, &format!("{child}[]")));
        }
    }
    out
}
