//! The worker supervisor: starts the workers, and repairs the listener group when one dies.
//!
//! Each worker thread owns its SO_REUSEPORT listener (and its TLS listener, the member of a
//! second group steered the same way, when TLS is on; each step below is done for both). When a worker dies (panic or runtime
//! error) its thread drops the runtime, the connection tasks and the listener, then reports the
//! exit. Only then does the supervisor, in this order:
//! 1. tell steering the listener is gone ([`Steering::worker_closed`]): in `queue` mode the
//!    other workers are re-pointed at their shifted group indexes, so their mapping stays exact;
//! 2. bind a fresh listener on the group's address ([`edgecache_steering::bind_listener`]);
//! 3. put it in the dead worker's place ([`Steering::replace`]: sockarray slot refilled, or
//!    the socket-filter group re-pointed), which restores the exact mapping;
//! 4. start a new worker on the same CPU with it.
//!
//! Nothing is restarted during shutdown. A worker that keeps dying soon after its start is
//! restarted with a growing delay (100 ms doubling to 5 s) so a broken worker cannot spin.
//!
//! # Debug hooks (tests only; off unless the environment asks)
//! - `EDGECACHE_DEBUG_WORKER_FAULTS=1` or `=<absolute path>`: SIGUSR1 kills a worker. With a
//!   path, the file (read and removed at the signal) says which and how:
//!   `"<worker> [panic|error] [hold]"`, where `hold` keeps the worker dead (its queues on the
//!   kernel's hash) until a `"<worker> release"` request; without a file (or with `1`) worker 0
//!   panics.
//! - `EDGECACHE_DEBUG_STEERING_OBSERVE=1`: the steering program records every SYN, and each
//!   accepted connection is logged at debug level on target `edgecache::accept` with the queue
//!   and CPU its SYN was seen on (enable with `RUST_LOG=info,edgecache::accept=debug`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use edgecache_steering::{Route, Selector, Steering};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::node::Node;
use crate::server::{self, Fault, FaultSwitch, WorkerEnv, WorkerExit, WorkerListeners};

/// Listen backlog of every worker listener.
pub const BACKLOG: i32 = 4096;
const FAULTS_ENV: &str = "EDGECACHE_DEBUG_WORKER_FAULTS";
const OBSERVE_ENV: &str = "EDGECACHE_DEBUG_STEERING_OBSERVE";
/// A worker that lived shorter than this is "crashing": its next restart waits longer.
const STABLE_AFTER: Duration = Duration::from_secs(10);
const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(5);

type WorkerLabel = [(&'static str, String); 1];
type RouteLabels = [(&'static str, String); 3];

/// The supervisor's metrics.
#[derive(Debug, Clone, Default)]
pub struct SupervisorMetrics {
    /// `worker_restarts_total{worker}`.
    pub restarts: Family<WorkerLabel, Counter>,
    /// `steering_route{selector,worker,cpu}`: 1 while the route's worker listens, 0 while it is
    /// being replaced.
    pub routes: Family<RouteLabels, Gauge>,
    /// `steering_repair_errors_total`: a steering map update that failed during a repair.
    pub repair_errors: Counter,
}

impl SupervisorMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "worker_restarts",
            "Workers restarted after they died (panic or runtime error), by worker",
            m.restarts.clone(),
        );
        registry.register(
            "steering_route",
            "The queue/CPU -> worker mapping in effect: 1 while the worker listens, 0 while it is replaced",
            m.routes.clone(),
        );
        registry.register(
            "steering_repair_errors",
            "Steering updates that failed while repairing the group after a worker died",
            m.repair_errors.clone(),
        );
        m
    }

    /// Export `routes` as `steering_route`.
    pub(crate) fn show(&self, routes: &[Route]) {
        for r in routes {
            self.routes
                .get_or_create(&route_labels(r))
                .set(i64::from(r.live));
        }
    }
}

fn route_labels(r: &Route) -> RouteLabels {
    let selector = match r.selector {
        Selector::Queue {
            queue,
            queue_mapping,
        } => format!("queue {queue} (queue_mapping {queue_mapping})"),
        Selector::Cpu(c) => format!("cpu {c}"),
        Selector::HashBucket { bucket, of } => format!("hash % {of} == {bucket}"),
        Selector::Kernel => "kernel hash".to_string(),
    };
    [
        ("selector", selector),
        ("worker", r.worker.to_string()),
        ("cpu", r.cpu.to_string()),
    ]
}

struct Slot {
    cpu: usize,
    generation: u64,
    started: Instant,
    handle: Option<JoinHandle<()>>,
    faults: Arc<FaultSwitch>,
    /// The delay before the next restart (grows while the worker keeps crashing).
    delay: Duration,
    /// Debug: do not restart after the next death until released.
    hold: bool,
    /// Debug: dead and held.
    held: bool,
}

/// The TLS listeners' group and its steering.
pub struct TlsGroup {
    pub addr: SocketAddr,
    pub steering: Steering,
}

/// Owns the workers and the steering of their listener group.
pub struct Supervisor {
    addr: SocketAddr,
    node: Arc<Node>,
    steering: Arc<Mutex<Steering>>,
    tls: Option<(SocketAddr, Mutex<Steering>)>,
    observe: bool,
    metrics: SupervisorMetrics,
    slots: Vec<Slot>,
    exits_tx: mpsc::UnboundedSender<WorkerExit>,
    exits_rx: mpsc::UnboundedReceiver<WorkerExit>,
    /// Restarts due: worker -> when.
    pending: BTreeMap<usize, Instant>,
}

impl Supervisor {
    /// Start one worker per listener (worker `i` on `cpus[i]` with `listeners[i]`).
    pub fn start(
        listeners: Vec<WorkerListeners>,
        cpus: &[usize],
        steering: Steering,
        tls: Option<TlsGroup>,
        node: Arc<Node>,
        metrics: SupervisorMetrics,
    ) -> anyhow::Result<Self> {
        let addr = listeners
            .first()
            .ok_or_else(|| anyhow::anyhow!("no listeners"))?
            .plain
            .local_addr()?;
        let observe = std::env::var(OBSERVE_ENV).is_ok_and(|v| v == "1");
        let mut steering = steering;
        if observe {
            match steering.set_observe(true) {
                Ok(()) => warn!("{OBSERVE_ENV}=1: every SYN is recorded and every accept logged"),
                Err(e) => warn!("{OBSERVE_ENV}: cannot turn observation on: {e}"),
            }
        }
        for i in 0..listeners.len() {
            drop(metrics.restarts.get_or_create(&[("worker", i.to_string())]));
        }
        metrics.show(&steering.mapping().routes);
        let (exits_tx, exits_rx) = mpsc::unbounded_channel();
        let mut sup = Self {
            addr,
            node,
            steering: Arc::new(Mutex::new(steering)),
            tls: tls.map(|g| (g.addr, Mutex::new(g.steering))),
            observe,
            metrics,
            slots: Vec::with_capacity(listeners.len()),
            exits_tx,
            exits_rx,
            pending: BTreeMap::new(),
        };
        for (i, (listener, &cpu)) in listeners.into_iter().zip(cpus).enumerate() {
            sup.slots.push(Slot {
                cpu,
                generation: 0,
                started: Instant::now(),
                handle: None,
                faults: Arc::default(),
                delay: FIRST_DELAY,
                hold: false,
                held: false,
            });
            sup.launch(i, listener)?;
        }
        Ok(sup)
    }

    fn lock_steering(&self) -> MutexGuard<'_, Steering> {
        // A panic while holding the lock cannot leave Steering half-updated in a way that
        // matters more than not repairing at all; keep going with the inner value.
        self.steering
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn launch(&mut self, i: usize, listener: WorkerListeners) -> std::io::Result<()> {
        let observe = self.observe.then(|| self.steering.clone());
        let slot = &mut self.slots[i];
        slot.generation += 1;
        slot.started = Instant::now();
        slot.faults = Arc::default();
        let env = WorkerEnv {
            index: i,
            generation: slot.generation,
            cpu: slot.cpu,
            faults: slot.faults.clone(),
            exits: self.exits_tx.clone(),
            observe,
        };
        slot.handle = Some(server::spawn_worker(env, listener, self.node.clone())?);
        Ok(())
    }

    /// Supervise until `shutdown` turns true, then wait for every worker to stop.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut faults = debug_fault_signal();
        loop {
            let next = self.pending.values().min().copied();
            tokio::select! {
                Some(exit) = self.exits_rx.recv() => self.on_exit(exit),
                _ = sleep_until(next) => self.restart_due(),
                Some(()) = recv_opt(&mut faults) => self.inject_fault(),
                _ = shutdown.changed() => break,
            }
            if *shutdown.borrow() {
                break;
            }
        }
        // Workers stop by themselves within the grace period.
        let handles: Vec<_> = self
            .slots
            .iter_mut()
            .filter_map(|s| s.handle.take())
            .collect();
        let _ = tokio::task::spawn_blocking(move || {
            for h in handles {
                let _ = h.join();
            }
        })
        .await;
    }

    fn on_exit(&mut self, exit: WorkerExit) {
        let i = exit.index;
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if exit.generation != slot.generation {
            return;
        }
        if let Some(h) = slot.handle.take() {
            // The thread sent its report as the last thing it did.
            let _ = h.join();
        }
        if *self.node.shutdown.borrow() {
            return;
        }
        let lived = slot.started.elapsed();
        slot.delay = if lived >= STABLE_AFTER {
            FIRST_DELAY
        } else {
            slot.delay
        };
        let delay = slot.delay;
        slot.delay = (slot.delay * 2).min(MAX_DELAY);
        let cpu = slot.cpu;
        let held = std::mem::take(&mut slot.hold);
        slot.held = held;
        let why = match &exit.outcome {
            Ok(()) => "stopped unexpectedly".to_string(),
            Err(e) => e.clone(),
        };
        // The thread has closed the listener (its only fd) before reporting: tell steering.
        let mapping = {
            let mut st = self.lock_steering();
            if let Err(e) = st.worker_closed(i) {
                error!(
                    worker = i,
                    "steering: cannot record the closed listener: {e}"
                );
                self.metrics.repair_errors.inc();
            }
            st.mapping()
        };
        if let Some((_, tls)) = &self.tls {
            let mut st = tls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Err(e) = st.worker_closed(i) {
                error!(
                    worker = i,
                    "steering: cannot record the closed TLS listener: {e}"
                );
                self.metrics.repair_errors.inc();
            }
        }
        self.metrics.show(&mapping.routes);
        if held {
            error!(
                worker = i,
                cpu,
                "worker died ({why}); its listener is closed; held dead until released (debug); {mapping}"
            );
            return;
        }
        error!(
            worker = i,
            cpu,
            generation = exit.generation,
            lived_ms = lived.as_millis() as u64,
            "worker died ({why}); its listener is closed; restarting it in {} ms; {mapping}",
            delay.as_millis()
        );
        self.pending.insert(i, Instant::now() + delay);
    }

    fn restart_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .pending
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(w, _)| *w)
            .collect();
        for i in due {
            self.pending.remove(&i);
            if let Err(e) = self.restart(i) {
                let delay = self.slots[i].delay;
                self.slots[i].delay = (delay * 2).min(MAX_DELAY);
                error!(
                    worker = i,
                    "cannot restart the worker: {e:#}; trying again in {} ms",
                    delay.as_millis()
                );
                self.pending.insert(i, Instant::now() + delay);
            }
        }
    }

    fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let listener = edgecache_steering::bind_listener(self.addr, BACKLOG)?;
        let tls = match &self.tls {
            Some((addr, steering)) => {
                let l = edgecache_steering::bind_listener(*addr, BACKLOG)?;
                let mut st = steering
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Err(e) = st.replace(i, &l) {
                    error!(
                        worker = i,
                        "steering: cannot put the new TLS listener in place: {e}"
                    );
                    self.metrics.repair_errors.inc();
                }
                Some(l)
            }
            None => None,
        };
        let mapping = {
            let mut st = self.lock_steering();
            if let Err(e) = st.replace(i, &listener) {
                // The worker still serves: its connections come through the kernel's hash.
                error!(
                    worker = i,
                    "steering: cannot put the new listener in place: {e}"
                );
                self.metrics.repair_errors.inc();
            }
            st.mapping()
        };
        self.launch(
            i,
            WorkerListeners {
                plain: listener,
                tls,
            },
        )?;
        self.metrics
            .restarts
            .get_or_create(&[("worker", i.to_string())])
            .inc();
        self.metrics.show(&mapping.routes);
        let slot = &self.slots[i];
        info!(
            worker = i,
            cpu = slot.cpu,
            generation = slot.generation,
            "worker restarted with a fresh listener; {mapping}"
        );
        Ok(())
    }

    fn inject_fault(&mut self) {
        let req = read_fault_request();
        let Some(slot) = self.slots.get_mut(req.worker) else {
            warn!(worker = req.worker, "debug: no such worker");
            return;
        };
        match req.fault {
            Some(fault) => {
                warn!(
                    worker = req.worker,
                    ?fault,
                    hold = req.hold,
                    "debug: injecting a worker fault"
                );
                slot.hold = req.hold;
                slot.faults.trigger(fault);
            }
            None if slot.held => {
                warn!(worker = req.worker, "debug: releasing the held worker");
                slot.held = false;
                self.pending.insert(req.worker, Instant::now());
            }
            None => warn!(worker = req.worker, "debug: worker is not held"),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

async fn recv_opt(rx: &mut Option<mpsc::UnboundedReceiver<()>>) -> Option<()> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// SIGUSR1 as a stream of fault requests, only when [`FAULTS_ENV`] is set.
fn debug_fault_signal() -> Option<mpsc::UnboundedReceiver<()>> {
    let v = std::env::var(FAULTS_ENV)
        .ok()
        .filter(|v| !v.is_empty() && v != "0")?;
    use tokio::signal::unix::{SignalKind, signal};
    let mut sig = match signal(SignalKind::user_defined1()) {
        Ok(s) => s,
        Err(e) => {
            warn!("{FAULTS_ENV}: cannot handle SIGUSR1: {e}");
            return None;
        }
    };
    warn!("{FAULTS_ENV}={v}: SIGUSR1 kills a worker (debugging and tests only)");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while sig.recv().await.is_some() {
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    Some(rx)
}

/// A debug request: kill `worker` with `fault` (and hold it dead), or release it (`fault` None).
#[derive(Debug, PartialEq, Eq)]
struct FaultRequest {
    worker: usize,
    fault: Option<Fault>,
    hold: bool,
}

/// Which worker to kill and how: from the request file when [`FAULTS_ENV`] is a path.
fn read_fault_request() -> FaultRequest {
    let file = std::env::var(FAULTS_ENV)
        .ok()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let text = file
        .as_ref()
        .and_then(|p| {
            let t = std::fs::read_to_string(p).ok();
            let _ = std::fs::remove_file(p);
            t
        })
        .unwrap_or_default();
    parse_fault_request(&text)
}

/// `"<worker> [panic|error|release] [hold]"`; anything missing means worker 0, panic (pure).
fn parse_fault_request(text: &str) -> FaultRequest {
    let mut words = text.split_whitespace();
    let worker = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    let fault = match words.next() {
        Some("error") => Some(Fault::Error),
        Some("release") => None,
        _ => Some(Fault::Panic),
    };
    let hold = fault.is_some() && words.next() == Some("hold");
    FaultRequest {
        worker,
        fault,
        hold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_requests() {
        let r = |worker, fault, hold| FaultRequest {
            worker,
            fault,
            hold,
        };
        let p = Some(Fault::Panic);
        assert_eq!(parse_fault_request(""), r(0, p, false));
        assert_eq!(parse_fault_request("2"), r(2, p, false));
        assert_eq!(
            parse_fault_request("1 error\n"),
            r(1, Some(Fault::Error), false)
        );
        assert_eq!(parse_fault_request("3 panic hold"), r(3, p, true));
        assert_eq!(parse_fault_request("3 release"), r(3, None, false));
        assert_eq!(parse_fault_request("x"), r(0, p, false));
    }

    #[test]
    fn route_labels_name_the_selector() {
        let r = Route {
            selector: Selector::Queue {
                queue: 2,
                queue_mapping: 3,
            },
            worker: 2,
            cpu: 0,
            live: true,
        };
        let l = route_labels(&r);
        assert_eq!(l[0].1, "queue 2 (queue_mapping 3)");
        assert_eq!(l[1].1, "2");
        assert_eq!(l[2].1, "0");
    }
}
