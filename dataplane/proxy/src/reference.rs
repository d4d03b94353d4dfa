//! `edgecache-dataplane reference PAGE`: this binary's reference pages (`docs/reference/`), made
//! from what the binary itself uses, so they cannot drift from it: the command line from clap's
//! model of it, the config file from the config type's schema (its doc comments, serde names and
//! `Default`), the metrics from a registry filled by the same registration code `serve` runs.
//! `tests/reference_docs.rs` fails when a committed page differs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use edgecache_api::DataplaneConfig;
use edgecache_docgen::page::{generated, write_pages};
use edgecache_docgen::{cli, metrics as metrics_page, schema};
use edgecache_store::StoreStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::metrics::{self, ManifestEvent, MemoryParts, Metrics, Outcome, PlanFacts, SliceSource};

/// The pages this binary generates.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Page {
    /// docs/reference/dataplane-cli.md: every subcommand's --help.
    Cli,
    /// docs/reference/dataplane-config.md: every field of the YAML config file.
    Config,
    /// docs/reference/dataplane-metrics.md: every metric family of the admin port's /metrics.
    Metrics,
}

impl Page {
    /// Its file under docs/reference/.
    pub fn file(self) -> &'static str {
        match self {
            Page::Cli => "dataplane-cli.md",
            Page::Config => "dataplane-config.md",
            Page::Metrics => "dataplane-metrics.md",
        }
    }
}

/// Every page of this binary, written into `dir`; the paths written.
pub fn write_all(dir: &Path, cli: &clap::Command) -> anyhow::Result<Vec<PathBuf>> {
    let mut pages = Vec::new();
    for page in <Page as clap::ValueEnum>::value_variants() {
        pages.push((page.file(), render(*page, cli.clone())?));
    }
    Ok(write_pages(dir, pages)?)
}

/// The markdown of `page`; `cli` is this binary's command.
pub fn render(page: Page, cli: clap::Command) -> Result<String, std::fmt::Error> {
    Ok(match page {
        Page::Cli => generated(
            "edgecache-dataplane command line",
            "edgecache-dataplane reference cli",
            "Flags of `serve` override the config file (`--config`, \
             [dataplane-config.md](dataplane-config.md)).",
            &cli::help_pages(cli),
        ),
        Page::Config => {
            let root = edgecache_api::schema::dataplane_config_schema();
            let formats = &edgecache_api::schema::QUANTITY_FORMATS;
            let intro = format!(
                "The YAML file of `edgecache-dataplane serve --config FILE`, which the operator \
                 writes into each EdgeCache's ConfigMap. Keys are camelCase; every field has a \
                 default except `origin.url` (or `sites`); unknown fields are errors \
                 (`edgecache-dataplane check-config FILE` lists them all). Values:\n\n{}",
                schema::formats_legend(formats)
            );
            generated(
                "Data-plane config file",
                "edgecache-dataplane reference config",
                &intro,
                &schema::table(&schema::fields(&root, &root, "", formats)),
            )
        }
        Page::Metrics => {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &reference_registry())?;
            generated(
                "Data-plane metrics",
                "edgecache-dataplane reference metrics",
                "What the admin port's `/metrics` exposes (Prometheus text format), every name \
                 prefixed `edgecache_dataplane_`, in the order of a scrape. A labelled family \
                 appears with its first series; the `tls_*` families exist only with a TLS \
                 listener.",
                &metrics_page::table(&metrics_page::families(&text)),
            )
        }
    })
}

/// Every metric `serve` registers, through the same registration functions, for a process with
/// a TLS listener and one origin; the store's and the plan's values are zeros. A family shows
/// on `/metrics` only once it has a series, so each gets one ([`sample_every_family`]).
fn reference_registry() -> Registry {
    let mut registry = Registry::with_prefix(metrics::PREFIX);
    let m = Metrics::register_with(&mut registry, MemoryParts::default());
    registry.register_collector(Box::new(StatsSnapshot(StoreStats::default())));
    metrics::register_plan(&mut registry, &PlanFacts::default());
    metrics::register_steering(&mut registry, edgecache_api::SteeringMode::default());
    let tls = edgecache_edge::tls::TlsMetrics::register(&mut registry);
    let supervisor = crate::supervisor::SupervisorMetrics::register(&mut registry);
    let cfg = DataplaneConfig {
        origin: edgecache_api::dataplane::OriginConfig {
            url: "http://origin.example".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    if let Ok(sites) = crate::sites::Sites::from_config(&crate::contract::sites(&cfg)) {
        registry.register_collector(Box::new(crate::sites::SitesCollector(Arc::new(sites))));
    }
    sample_every_family(&m, &tls, &supervisor);
    registry
}

/// One series in every labelled family, through the methods the data plane records with where
/// there is one, so that the page shows each family and its label names. A family registered
/// but not sampled here fails `every_registered_metric_is_on_the_page` below.
fn sample_every_family(
    m: &Metrics,
    tls: &edgecache_edge::tls::TlsMetrics,
    supervisor: &crate::supervisor::SupervisorMetrics,
) {
    m.request(Outcome::HitRam);
    m.origin_error("connect");
    let _ = m.accepted_on(0);
    m.write_abort("too_large");
    m.compressed
        .get_or_create(&[("coding", "gzip".into())])
        .inc();
    m.interim
        .interim(edgecache_policy::interim::InterimAction::Forward);
    m.connection_closed("idle_timeout");
    m.connection_refused("per_ip");
    m.hit_repair(true);
    m.fill_repair(true);
    m.peer_forward("ok");
    m.peer_hop_refused("missing");
    m.sharding
        .peers
        .get_or_create(&[("state", "up".into())])
        .set(0);
    m.sharding
        .reloads
        .get_or_create(&[("result", "ok".into())])
        .inc();
    m.purge_hits
        .get_or_create(&[("verdict", "remove".into())])
        .inc();
    let request = [("cache", "hit"), ("status", "2xx"), ("site", "default")];
    let _ = m.request_duration.get_or_create(&request);
    let _ = m.request_first_byte.get_or_create(&request);
    let _ = m.served_bytes.get_or_create(&request);
    let log = m.request_log();
    let _ = log.access_log_dropped("queue_full");
    let _ = m.trace();
    let _ = log.http2_streams("completed");
    m.http2_connection_error("io");
    m.slice(SliceSource::Store);
    m.slice_manifest(ManifestEvent::Written);
    tls.handshake("ok");
    tls.reloads.get_or_create(&[("result", "ok".into())]).inc();
    let _ = supervisor.restarts.get_or_create(&[("worker", "0".into())]);
    supervisor.show(&[edgecache_steering::Route {
        selector: edgecache_steering::Selector::Kernel,
        worker: 0,
        cpu: 0,
        live: true,
    }]);
}

/// The store's metrics from fixed stats, for a registry with no store behind it.
#[derive(Debug)]
struct StatsSnapshot(StoreStats);

impl Collector for StatsSnapshot {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        metrics::encode_store_stats(&self.0, encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the registry holds, from its `Debug` (prometheus-client keeps them private).
    fn registered_names(registry: &Registry) -> Vec<String> {
        let debug = format!("{registry:?}");
        debug
            .split("Descriptor { name: \"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_registered_metric_is_on_the_page() {
        let registry = reference_registry();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let names = registered_names(&registry);
        assert!(names.len() > 30, "{names:?}");
        let missing: Vec<&String> = names
            .iter()
            .filter(|name| !text.contains(&format!("# TYPE {}_{name} ", metrics::PREFIX)))
            .collect();
        assert!(
            missing.is_empty(),
            "registered but without a series, so not on docs/reference/dataplane-metrics.md: \
             {missing:?}; give each one in sample_every_family"
        );
    }
}
