//! Workers: one thread per CPU, pinned, each running its own runtime (tokio-uring when the store
//! uses io_uring, a plain current-thread tokio runtime for the thread-pool engine) with its own
//! SO_REUSEPORT listener. hyper serves HTTP/1.1 with keep-alive on tokio's epoll sockets; disk
//! I/O goes through the store's per-thread engine.
//!
//! Shutdown: when the shutdown signal turns true each worker drops its listener (no new
//! connections), asks every open connection to finish its in-flight response and close, and
//! waits for them up to the grace period.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use edgecache_cache::{EngineKind, Store, StoreWorker};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Notify, watch};
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::coalesce::Coalescer;
use crate::handler::{self, Ctx};
use crate::metrics::Metrics;
use crate::origin::Origin;
use edgecache_api::DataplaneConfig;

/// What every worker shares.
pub struct Shared {
    pub cfg: DataplaneConfig,
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub coalescer: Arc<Coalescer>,
    pub clock: Arc<Clock>,
    pub shutdown: watch::Receiver<bool>,
}

/// Start worker `index` on `cpu`, serving `listener`. Returns when the worker has stopped.
pub fn spawn_worker(
    index: usize,
    cpu: usize,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("worker-{index}"))
        .spawn(move || {
            if let Err(e) = edgecache_host::pin_current_thread(cpu) {
                warn!(worker = index, cpu, "cannot pin worker to its CPU: {e}");
            }
            let engine = shared.store.engine();
            let result = match engine {
                EngineKind::Uring => {
                    let mut b = tokio_uring::builder();
                    b.entries(1024);
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        b.start(run_worker(index, listener, shared.clone()))
                    }))
                    .map_err(|_| std::io::Error::other("worker runtime panicked"))
                    .and_then(|r| r)
                }
                EngineKind::Threads => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|rt| {
                        tokio::task::LocalSet::new()
                            .block_on(&rt, run_worker(index, listener, shared.clone()))
                    }),
            };
            if let Err(e) = result {
                error!(worker = index, "worker stopped with an error: {e}");
            }
        })
}

async fn run_worker(
    index: usize,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let store = StoreWorker::new(shared.store.clone()).map_err(std::io::Error::other)?;
    let origin =
        Origin::new(&shared.cfg.origin, &shared.cfg.cache.name).map_err(std::io::Error::other)?;
    let ctx = Rc::new(Ctx::new(shared.clone(), store, origin));
    let accepted = shared.metrics.accepted_on(index);
    let open = Rc::new(OpenConns::default());
    let mut shutdown = shared.shutdown.clone();
    debug!(worker = index, "worker serving");
    loop {
        tokio::select! {
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    accepted.inc();
                    let _ = stream.set_nodelay(true);
                    let ctx = ctx.clone();
                    let guard = open.enter(&shared.metrics);
                    let shutdown = shared.shutdown.clone();
                    tokio::task::spawn_local(async move {
                        serve_connection(ctx, stream, peer, shutdown).await;
                        drop(guard);
                    });
                }
                Err(e) => {
                    // EMFILE and friends: back off briefly rather than spin.
                    warn!(worker = index, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let grace = shared.cfg.shutdown_grace.get();
    if tokio::time::timeout(grace, open.drained()).await.is_err() {
        warn!(
            worker = index,
            open = open.count.get(),
            "shutdown grace period over; closing open connections"
        );
    }
    info!(worker = index, "worker stopped");
    Ok(())
}

async fn serve_connection(
    ctx: Rc<Ctx>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let svc_ctx = ctx.clone();
    let svc = service_fn(move |req| handler::handle(svc_ctx.clone(), req, peer));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(Duration::from_secs(30))
        .max_buf_size(64 * 1024)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let res = tokio::select! {
        res = conn.as_mut() => res,
        _ = shutdown.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = res {
        debug!(%peer, "connection ended: {e}");
    }
}

/// Counts a worker's open connections so shutdown can wait for them.
#[derive(Default)]
struct OpenConns {
    count: Cell<usize>,
    zero: Notify,
}

struct OpenGuard {
    open: Rc<OpenConns>,
    metrics: Arc<Metrics>,
}

impl OpenConns {
    fn enter(self: &Rc<Self>, metrics: &Arc<Metrics>) -> OpenGuard {
        self.count.set(self.count.get() + 1);
        metrics.active_connections.inc();
        OpenGuard {
            open: self.clone(),
            metrics: metrics.clone(),
        }
    }
    async fn drained(&self) {
        while self.count.get() > 0 {
            self.zero.notified().await;
        }
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let n = self.open.count.get().saturating_sub(1);
        self.open.count.set(n);
        self.metrics.active_connections.dec();
        if n == 0 {
            self.open.zero.notify_waiters();
        }
    }
}
