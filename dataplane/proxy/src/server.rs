//! Workers: one thread per CPU, pinned, each running its own runtime (tokio-uring when the store
//! uses io_uring, a plain current-thread tokio runtime for the thread-pool engine) with its own
//! SO_REUSEPORT listener. hyper serves HTTP/1.1 with keep-alive on tokio's epoll sockets; disk
//! I/O goes through the store's per-thread engine. Each connection's IO is wrapped in an
//! [`InterimIo`] so 1xx responses from the origin can be forwarded (edgecache-upstream).
//!
//! Shutdown: when the shutdown signal turns true each worker drops its listener (no new
//! connections), asks every open connection to finish its in-flight response and close, and
//! waits for them, and for the store writes of fills already answered (dataplane/serve/src/landing.rs), up to
//! the grace period.
//!
//! Death: a worker that panics or whose loop fails drops its runtime, its connections and its
//! listener (the thread is the listener's only owner), then reports a [`WorkerExit`]; the
//! supervisor (src/supervisor.rs) repairs the steering group and starts a new worker.

use std::cell::Cell;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use edgecache_store::{EngineKind, StoreWorker};
use tokio::sync::Notify;
use tracing::{debug, error, info, warn};

use crate::connection::{self, Protocol};
use crate::handler::Ctx;
use crate::node::Node;
use crate::origin::Origin;

/// A worker's listeners: the plain one, and the TLS one when TLS is on. Each is the worker's
/// member of its SO_REUSEPORT group.
pub struct WorkerListeners {
    pub plain: std::net::TcpListener,
    pub tls: Option<std::net::TcpListener>,
}

/// How a worker ended, sent to the supervisor from the worker's thread after its runtime, its
/// listener (every fd of it) and its connections are gone.
#[derive(Debug)]
pub struct WorkerExit {
    pub index: usize,
    pub generation: u64,
    /// `Ok` for a normal stop (shutdown); the error or panic message otherwise.
    pub outcome: Result<(), String>,
}

/// A fault the supervisor can inject into a worker (debug builds of a deployment only: see
/// `EDGECACHE_DEBUG_WORKER_FAULTS` in the supervisor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The worker panics (unwinds through its runtime).
    Panic,
    /// The worker's serve loop returns an error.
    Error,
}

/// The supervisor's handle into one running worker.
#[derive(Debug, Default)]
pub struct FaultSwitch {
    fault: std::sync::Mutex<Option<Fault>>,
    wake: Notify,
}

impl FaultSwitch {
    pub fn trigger(&self, fault: Fault) {
        if let Ok(mut f) = self.fault.lock() {
            *f = Some(fault);
        }
        self.wake.notify_one();
    }

    async fn wait(&self) -> Fault {
        loop {
            if let Some(f) = self.fault.lock().ok().and_then(|f| *f) {
                return f;
            }
            self.wake.notified().await;
        }
    }
}

/// What one worker generation gets besides the listener and `Shared`.
pub struct WorkerEnv {
    pub index: usize,
    pub generation: u64,
    pub cpu: usize,
    pub faults: Arc<FaultSwitch>,
    pub exits: tokio::sync::mpsc::UnboundedSender<WorkerExit>,
    /// When set, every accepted connection is logged (target `edgecache::accept`, debug) with
    /// what the steering program saw for its SYN.
    pub observe: Option<Arc<std::sync::Mutex<edgecache_steering::Steering>>>,
}

/// Sends the exit report when the worker thread ends, however it ends. Declared before
/// everything the thread owns, so it is dropped (and reports) last.
struct ExitReport {
    index: usize,
    generation: u64,
    exits: tokio::sync::mpsc::UnboundedSender<WorkerExit>,
    outcome: Option<Result<(), String>>,
}

impl Drop for ExitReport {
    fn drop(&mut self) {
        let outcome = self
            .outcome
            .take()
            .unwrap_or_else(|| Err("worker thread ended abnormally".into()));
        let _ = self.exits.send(WorkerExit {
            index: self.index,
            generation: self.generation,
            outcome,
        });
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic with a non-string payload".into())
}

/// A worker thread's stack. Polling a connection nests hyper's, the handler's and the body's
/// futures; unoptimised builds lay them out on the stack at several times their release size,
/// and at the std default of 2 MiB `tests/memory_hostile.rs` overflowed worker-0's stack in
/// about one debug run in two. Untouched stack pages cost no memory.
const WORKER_STACK: usize = 8 << 20;

/// Start a worker on `env.cpu`, serving `listener`. The thread owns the listener: when the
/// worker stops, panics or fails, the listener is closed before the exit is reported on
/// `env.exits`.
pub fn spawn_worker(
    env: WorkerEnv,
    listener: WorkerListeners,
    node: Arc<Node>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let index = env.index;
    std::thread::Builder::new()
        .name(format!("worker-{index}"))
        .stack_size(WORKER_STACK)
        .spawn(move || {
            let mut report = ExitReport {
                index,
                generation: env.generation,
                exits: env.exits.clone(),
                outcome: None,
            };
            let listener = listener;
            let cpu = env.cpu;
            if let Err(e) = edgecache_host::pin_current_thread(cpu) {
                warn!(worker = index, cpu, "cannot pin worker to its CPU: {e}");
            }
            let engine = node.serve.store.engine();
            // The listener moves into the worker future; a panic unwinds through the runtime,
            // which drops the future (closing the listener) and every connection task before
            // catch_unwind returns.
            let run = std::panic::AssertUnwindSafe(|| match engine {
                EngineKind::Uring => {
                    let mut b = tokio_uring::builder();
                    b.entries(URING_SQ_ENTRIES);
                    b.uring_builder(tokio_uring::uring_builder().setup_cqsize(URING_CQ_ENTRIES));
                    b.start(run_worker(env, listener, node.clone()))
                }
                EngineKind::Threads => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|rt| {
                        tokio::task::LocalSet::new()
                            .block_on(&rt, run_worker(env, listener, node.clone()))
                    }),
            });
            let outcome = match std::panic::catch_unwind(run) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => {
                    error!(worker = index, "worker stopped with an error: {e}");
                    Err(e.to_string())
                }
                Err(p) => {
                    let msg = panic_message(p.as_ref());
                    error!(worker = index, "worker panicked: {msg}");
                    Err(format!("panicked: {msg}"))
                }
            };
            report.outcome = Some(outcome);
        })
}

/// Submission queue size of a worker's io_uring. tokio-uring submits queued reads when the
/// runtime parks (goes idle) or when the submission queue is full, so under full load this size
/// is how many disk reads wait for a submission. 1024 let reads sit queued behind RAM hits until
/// the worker went idle; at 16 a busy worker submits at least every 16 reads, still batching the
/// kernel entries (one per read costs a virtio doorbell each and cut 4 KiB zipf by a third).
/// Measured (lab, one worker, wrk -c256, 12 s alternating rounds; bench/BENCHMARKS.md tuning
/// log): 4 KiB uniform 48.0-49.7k req/s against 34.8-36.4k at 1024, zipf p99 9 ms against 17-18
/// (12-13 at 64 entries).
pub const URING_SQ_ENTRIES: u32 = 16;
/// Completion queue size: room for every read in flight (`storage.readsInFlight` is at most
/// 4096) so completions do not overflow into the kernel's backlog.
pub const URING_CQ_ENTRIES: u32 = 4096;

async fn run_worker(
    env: WorkerEnv,
    listeners: WorkerListeners,
    node: Arc<Node>,
) -> std::io::Result<()> {
    let index = env.index;
    let shared = &node.serve;
    let listener = tokio::net::TcpListener::from_std(listeners.plain)?;
    let tls_listener = match listeners.tls {
        Some(l) => Some(tokio::net::TcpListener::from_std(l)?),
        None => None,
    };
    let handshakes = Rc::new(Cell::new(0usize));
    let store = StoreWorker::new(shared.store.clone()).map_err(std::io::Error::other)?;
    let origin = crate::contract::origin(&node.cfg.origin);
    let origins = (shared.sites.list.iter())
        .map(|site| Origin::for_site(&origin, site, &node.cfg.cache.name))
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let peers = match &shared.sharding {
        Some(s) => Some(
            s.client(&origin, &node.cfg.cache.name)
                .map_err(std::io::Error::other)?,
        ),
        None => None,
    };
    let policy = crate::contract::policy_config(&node.cfg.cache);
    let ctx = Rc::new(Ctx::new(shared.clone(), store, origins, peers, policy));
    let budget = ctx.store.io_budget().clone();
    let released = shared.metrics.paced_chunks_released.clone();
    tokio::task::spawn_local(ctx.keepers.clone().run(
        move || budget.has_waiters(),
        move |n| {
            released.inc_by(n as u64);
        },
    ));
    let open = Rc::new(OpenConns::default());
    let mut shutdown = node.shutdown.clone();
    let faults = env.faults.clone();
    debug!(
        worker = index,
        generation = env.generation,
        "worker serving"
    );
    let taker = Taker {
        accepted: shared.metrics.accepted_on(index),
        env: &env,
        node: &node,
        ctx: &ctx,
        open: &open,
        handshakes: &handshakes,
    };
    loop {
        tokio::select! {
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    taker.take(stream, peer, false);
                }
                Err(e) => accept_failed(index, e).await,
            },
            res = accept_opt(tls_listener.as_ref()) => match res {
                Ok((stream, peer)) => {
                    taker.take(stream, peer, true);
                }
                Err(e) => accept_failed(index, e).await,
            },
            fault = faults.wait() => {
                warn!(worker = index, ?fault, "injected worker fault");
                match fault {
                    Fault::Panic => panic!("injected fault: worker {index} panics"),
                    Fault::Error => {
                        return Err(std::io::Error::other(format!(
                            "injected fault: worker {index} fails"
                        )));
                    }
                }
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    drop(tls_listener);
    let grace = node.cfg.shutdown_grace.get();
    let deadline = tokio::time::Instant::now() + grace;
    if tokio::time::timeout(grace, open.drained()).await.is_err() {
        warn!(
            worker = index,
            open = open.count.get(),
            "shutdown grace period over; closing open connections"
        );
    }
    // Fills already answered finish their store writes (dataplane/serve/src/landing.rs): a clean stop keeps
    // every object a client was served as stored.
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if !shared.landing.settled(left).await {
        warn!(
            worker = index,
            "shutdown grace period over; answered fills not all stored"
        );
    }
    info!(worker = index, "worker stopped");
    Ok(())
}

/// Accept from `l`, or wait forever without one.
async fn accept_opt(
    l: Option<&tokio::net::TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

async fn accept_failed(worker: usize, e: std::io::Error) {
    // EMFILE and friends: back off briefly rather than spin.
    warn!(worker, "accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// What a worker needs to take its accepted connections.
struct Taker<'a> {
    accepted: prometheus_client::metrics::counter::Counter,
    env: &'a WorkerEnv,
    node: &'a Arc<Node>,
    ctx: &'a Rc<Ctx>,
    open: &'a Rc<OpenConns>,
    handshakes: &'a Rc<Cell<usize>>,
}

impl Taker<'_> {
    /// Take an accepted connection under the caps, and serve it on a task of its own.
    fn take(&self, stream: tokio::net::TcpStream, peer: SocketAddr, is_tls: bool) {
        let Taker {
            env,
            node,
            ctx,
            open,
            handshakes,
            ..
        } = *self;
        self.accepted.inc();
        log_accept(env, peer);
        // Over a cap: refuse the new connection (closed at once), never slow the ones being
        // served.
        let shared = &node.serve;
        let Some(mut guard) = open.enter(node) else {
            shared.metrics.connection_refused("per_worker");
            return;
        };
        let from_peer = shared
            .sharding
            .as_ref()
            .is_some_and(|s| s.is_peer_ip(peer.ip()));
        let ip_guard = if from_peer {
            None
        } else {
            let Some(g) = node.per_ip.try_enter(peer.ip()) else {
                shared.metrics.connection_refused("per_ip");
                return;
            };
            Some(g)
        };
        let _ = stream.set_nodelay(true);
        let ctx = ctx.clone();
        let node = node.clone();
        let shutdown = node.shutdown.clone();
        let handshakes = handshakes.clone();
        tokio::task::spawn_local(crate::reap::reaping(async move {
            let fd = stream.as_raw_fd();
            if is_tls {
                let Some(tls) = node.tls.clone() else {
                    return;
                };
                if let Some((stream, info)) = tls.accept(stream, &handshakes).await {
                    let protocol = match info.alpn.as_deref() {
                        Some("h2") => Protocol::Http2,
                        _ => Protocol::Http1,
                    };
                    if !guard.charge(protocol, peer, from_peer) {
                        return;
                    }
                    connection::serve(ctx, &node, stream, fd, peer, Some(info), protocol, shutdown)
                        .await;
                }
            } else {
                let protocol = if node.cfg.http2.enabled {
                    let limits = &node.cfg.clients;
                    let (idle, head) = (limits.idle_timeout.get(), limits.header_timeout.get());
                    match connection::sniff(&stream, idle, head).await {
                        Some(p) => p,
                        None => {
                            ctx.shared.metrics.connection_closed("idle_timeout");
                            return;
                        }
                    }
                } else {
                    Protocol::Http1
                };
                if !guard.charge(protocol, peer, from_peer) {
                    return;
                }
                connection::serve(ctx, &node, stream, fd, peer, None, protocol, shutdown).await;
            }
            drop(guard);
            drop(ip_guard);
        }));
    }
}

/// The per-connection debug line: which worker accepted whom, and (when observing) what the
/// steering program saw for the SYN.
fn log_accept(env: &WorkerEnv, peer: SocketAddr) {
    if !tracing::enabled!(target: "edgecache::accept", tracing::Level::DEBUG) {
        return;
    }
    let seen = env.observe.as_ref().and_then(|s| {
        s.lock()
            .ok()
            .and_then(|s| s.observation(peer.port()).ok().flatten())
    });
    match seen {
        Some(o) => debug!(
            target: "edgecache::accept",
            worker = env.index,
            %peer,
            queue = o.queue,
            syn_cpu = o.cpu,
            hash = o.hash,
            chosen = o.worker,
            index = o.index,
            err = o.err,
            "accepted"
        ),
        None => debug!(target: "edgecache::accept", worker = env.index, %peer, "accepted"),
    }
}

/// Counts a worker's open connections so shutdown can wait for them, and the bytes they may
/// hold, within the worker's connection budget.
#[derive(Default)]
struct OpenConns {
    count: Cell<usize>,
    bytes: Cell<u64>,
    zero: Notify,
}

/// An open connection, and the bytes of the budget it is charged.
struct OpenGuard {
    open: Rc<OpenConns>,
    node: Arc<Node>,
    bytes: u64,
    /// An HTTP/2 connection's place among its address's.
    http2_ip: Option<edgecache_edge::client_caps::IpGuard>,
}

impl OpenConns {
    /// A new connection, charged an HTTP/1.1 connection's bytes; `None` when they do not fit the
    /// worker's budget.
    fn enter(self: &Rc<Self>, node: &Arc<Node>) -> Option<OpenGuard> {
        let mut guard = OpenGuard {
            open: self.clone(),
            node: node.clone(),
            bytes: 0,
            http2_ip: None,
        };
        self.count.set(self.count.get() + 1);
        node.serve.metrics.active_connections.inc();
        // Refused: the guard's drop counts the connection out again.
        let budget = node.connection_budget_per_worker;
        guard
            .cover(edgecache_host::CONNECTION_BYTES, budget)
            .then_some(guard)
    }
    async fn drained(&self) {
        while self.count.get() > 0 {
            self.zero.notified().await;
        }
    }
}

impl OpenGuard {
    /// Charge what a connection of `protocol` from `peer` can hold; false (and counted as
    /// refused) when an HTTP/2 connection's worst case does not fit the worker's budget, or its
    /// address has all the HTTP/2 connections it always gets (not a sharding peer's) and the
    /// worker has no room to lend past the quarter it keeps for others
    /// (`edgecache_host::http2_borrowable`): it is closed.
    fn charge(&mut self, protocol: Protocol, peer: SocketAddr, from_peer: bool) -> bool {
        if protocol == Protocol::Http1 {
            return true;
        }
        let budget = self.node.connection_budget_per_worker;
        if !from_peer {
            match self.node.per_ip_http2.try_enter(peer.ip()) {
                Some(g) => self.http2_ip = Some(g),
                None => {
                    let room = edgecache_host::http2_borrowable(budget);
                    if self.cover(self.node.http2_connection_bytes, room) {
                        return true;
                    }
                    self.node.serve.metrics.connection_refused("per_ip");
                    return false;
                }
            }
        }
        if self.cover(self.node.http2_connection_bytes, budget) {
            return true;
        }
        self.node.serve.metrics.connection_refused("per_worker");
        false
    }

    /// Hold at least `total` bytes of the budget, if the worker's connections then hold no more
    /// than `bound` of it.
    fn cover(&mut self, total: u64, bound: u64) -> bool {
        let extra = total.saturating_sub(self.bytes);
        let held = self.open.bytes.get();
        if !edgecache_host::fits(held, extra, bound) {
            return false;
        }
        self.open.bytes.set(held + extra);
        // Bounded by the budget, not refused here.
        self.node.serve.metrics.memory.connections.take(extra);
        self.bytes += extra;
        true
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.open
            .bytes
            .set(self.open.bytes.get().saturating_sub(self.bytes));
        self.node
            .serve
            .metrics
            .memory
            .connections
            .give_back(self.bytes);
        let n = self.open.count.get().saturating_sub(1);
        self.open.count.set(n);
        self.node.serve.metrics.active_connections.dec();
        if n == 0 {
            self.open.zero.notify_waiters();
        }
    }
}
