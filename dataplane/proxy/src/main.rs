//! `edgecache-dataplane`: the EdgeCache data plane.
//!
//! `serve` loads the config (file and flags), reads the cgroup limits, plans memory, opens the
//! disk store (rebuilding its index), binds one SO_REUSEPORT listener per worker, attaches
//! connection steering, starts the pinned workers and the admin endpoint, then waits for
//! SIGTERM or SIGINT. `check-config FILE` reports every problem in a config file. `reference
//! PAGE` prints a page of docs/reference/ (src/reference.rs).

mod admin;
mod config;
mod connection;
mod contract;
mod index_budget;
mod metrics;
mod node;
mod reap;
mod reference;
mod server;
mod startup;
mod supervisor;

// Modules that moved to crates of their own, under the paths the binary's files still name
// them by.
use edgecache_fleet::sharding;
use edgecache_purge::purges;
use edgecache_serve::{body, clock, coalesce, compress, handler, landing, shared};
use edgecache_upstream::{interim, key, origin, sites};

use std::process::ExitCode;

/// mimalloc instead of glibc malloc: the RAM tier's churn (an object copied in on a disk hit,
/// another evicted) left glibc's free lists fragmented; `unlink_chunk`, `malloc_consolidate`
/// and friends took about 16% of a worker's CPU at 4 KiB hits (perf, bench/BENCHMARKS.md
/// tuning log). Built with `no_thp`: it never asks the kernel for transparent huge pages (the
/// store does, for its I/O buffers; see `main`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "edgecache-dataplane",
    version,
    about = "EdgeCache data plane: an HTTP edge cache on NVMe with io_uring"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the cache server.
    Serve(Box<config::ServeFlags>),
    /// Check a config file and report every error with its field path.
    CheckConfig {
        /// The YAML file to check.
        file: std::path::PathBuf,
    },
    /// Print one of this binary's reference pages (markdown, as committed in docs/reference/),
    /// or write them all.
    Reference {
        /// Which page.
        #[arg(required_unless_present = "write")]
        page: Option<reference::Page>,
        /// Write every page into this directory instead (scripts/reference-docs.sh).
        #[arg(long, value_name = "DIR", conflicts_with = "page")]
        write: Option<std::path::PathBuf>,
    },
}

fn main() -> ExitCode {
    // First, before the allocator touches more of its arena: transparent huge pages only where
    // the store asks for them (its I/O buffers), not under the whole heap, where each would
    // charge 2 MiB of the memory limit for a few bytes (edgecache_host::huge_pages).
    let huge_pages = edgecache_host::huge_pages_only_where_advised();
    // The process-wide rustls provider (the workspace's only one), before any TLS config is built.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    match cli.command {
        Command::Reference { page, write } => {
            let done = match (page, write) {
                (Some(page), _) => reference::render(page, Cli::command())
                    .map(|text| print!("{text}"))
                    .map_err(anyhow::Error::from),
                (None, Some(dir)) => reference::write_all(&dir, &Cli::command()).map(|_| ()),
                (None, None) => Err(anyhow::anyhow!("name a page or --write DIR")),
            };
            match done {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("edgecache-dataplane: reference: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { file } => match config::check_file(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Serve(flags) => {
            let cfg = match config::load(&flags) {
                Ok(cfg) => cfg,
                Err(e) => {
                    eprintln!("edgecache-dataplane: {e}");
                    return ExitCode::from(2);
                }
            };
            edgecache_observe::tracing_log::init(&cfg.log);
            match huge_pages {
                Ok(edgecache_host::HugePagesPolicy::OnlyWhereAdvised) => {
                    tracing::info!("transparent huge pages only under the I/O buffers")
                }
                Ok(edgecache_host::HugePagesPolicy::HostSetting) => tracing::warn!(
                    "this kernel (before 6.18) cannot keep transparent huge pages to the I/O \
                     buffers: where the host's setting is `always`, the whole heap is on them and \
                     the process uses more memory than its plan counts"
                ),
                Err(e) => tracing::warn!("transparent huge pages: prctl failed: {e}"),
            }
            let result = startup::serve(cfg);
            if let Err(e) = &result {
                tracing::error!("{e:#}");
            }
            // The log's last lines, before the process goes.
            edgecache_observe::tracing_log::flush(std::time::Duration::from_secs(2));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("edgecache-dataplane: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
