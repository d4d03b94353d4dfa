//! `edgecache-origin`: the loopback origin as a standalone server.

use anyhow::Context;
use clap::Parser;
use edgecache_origin::{OriginHandle, OriginOptions};
use std::net::SocketAddr;
use std::time::Duration;

/// A fast loopback origin: GET /obj/<size>/<id> serves deterministic content,
/// every request is counted (GET /__stats, POST /__reset).
#[derive(Parser, Debug)]
#[command(name = "edgecache-origin", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// max-age of the default Cache-Control header.
    #[arg(long, default_value_t = 3600)]
    max_age: u64,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Delay (ms) before every response head.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Log every request (at debug level; set RUST_LOG=debug).
    #[arg(long)]
    log_requests: bool,
    /// Also serve this directory's files (read at start) under /files/<relative path>,
    /// uncompressed, Content-Type by extension, strong ETag.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let opts = OriginOptions {
        max_age: args.max_age,
        threads: args.threads,
        delay: Duration::from_millis(args.delay_ms),
        log_requests: args.log_requests,
        files_dir: args.dir.clone(),
        ..OriginOptions::default()
    };
    let origin = OriginHandle::start(args.listen, opts)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    // One line on stdout so scripts can wait for readiness.
    println!("edgecache-origin listening on {}", origin.addr());
    tracing::info!(addr = %origin.addr(), "listening");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("signal runtime")?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    })
    .context("waiting for a signal")?;
    tracing::info!(requests = origin.requests(), "shutting down");
    origin.shutdown();
    Ok(())
}
