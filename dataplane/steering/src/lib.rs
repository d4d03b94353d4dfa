//! Connection steering over an SO_REUSEPORT listener group: which worker accepts a new
//! connection.
//!
//! Worker `i` owns listener `i`, is pinned to `cpus[i]`, and owns NIC queue `i` (and every
//! `n`-th after it). Modes ([`SteeringMode`]):
//! - `queue`: a socket-filter program (SO_ATTACH_REUSEPORT_EBPF) picks worker
//!   `(skb->queue_mapping - queue_offset) % n` (Intel ADQ-style; drivers record queue + 1, so
//!   the offset is 1 there and 0 on veth). Needs CAP_BPF.
//! - `cpu`: an SK_REUSEPORT program picks the worker pinned to the CPU that processed the SYN,
//!   through a REUSEPORT_SOCKARRAY. Needs CAP_BPF.
//! - `hash`: the same program picks slot `flow hash % n` of the sockarray. Needs CAP_BPF.
//! - `incoming-cpu`: SO_INCOMING_CPU on each listener; no BPF, no privilege.
//! - `off`: the kernel's own reuseport hash.
//!
//! When a BPF mode cannot be set up (no CAP_BPF, an old kernel), [`attach`] either falls back
//! to `off` with one warning and a [`Steering::fallback_reason`], or, when steering is
//! required, fails.
//!
//! # Repairing the group when a worker dies
//! - `cpu`/`hash`: the dead listener's sockarray slot empties by itself when the socket closes;
//!   its connections fall back to the kernel's hash over the listeners still open, and the
//!   others keep their exact mapping. [`Steering::replace`] puts the new listener in the slot.
//! - `queue`: the socket filter returns an index into the group's `socks[]`, and the kernel
//!   moves the *last* socket into a closed socket's place. So the program maps worker -> group
//!   index through a map, and this crate keeps a model of the kernel's order:
//!   [`Steering::worker_closed`] (call it right after the dead listener's last fd is closed)
//!   re-points every worker at its new index, leaving the dead worker's queues to the kernel's
//!   hash; [`Steering::replace`] (after the new listener has joined the group with
//!   `listen()`) appends it and restores the exact mapping. No whole-group rebuild, so no
//!   listener's accept queue is dropped.
//!
//! # Unsafe
//! The workspace denies `unsafe_code`. The only unsafe items are the two `unsafe impl
//! aya::Pod` in [`bpf`] for the structs shared with the C program (plain `#[repr(C)]`
//! integers, see their `// SAFETY:` lines). Socket options go through socket2 and aya.

pub mod bpf;

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;

use aya::maps::MapError;
use aya::programs::SkReuseport;
use socket2::{Domain, Protocol, SockRef, Socket, Type};

pub use bpf::{MAX_CPUS, MAX_WORKERS, NO_SLOT, Observation};
pub use edgecache_api::SteeringMode;

use bpf::{Config, LoadError, Loaded, MODE_CPU, MODE_HASH, MODE_QUEUE};

/// Errors of this crate. `category()` gives a bounded label for metrics.
#[derive(Debug, thiserror::Error)]
pub enum SteeringError {
    /// The arguments do not describe a group (mismatched lengths, too many workers, ...).
    #[error("invalid steering setup: {0}")]
    Invalid(String),
    /// The mode cannot be set up here and steering is required.
    #[error("steering mode `{mode}` is required but unavailable: {reason}")]
    Unavailable { mode: SteeringMode, reason: String },
    /// A map operation failed after attach.
    #[error("steering map `{map}`: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: MapError,
    },
    /// A socket option or program attach failed after the initial attach.
    #[error("steering: {op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// `worker` is not one of the group's workers.
    #[error("no worker {worker} in a group of {n}")]
    NoSuchWorker { worker: usize, n: usize },
}

impl SteeringError {
    pub fn category(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid",
            Self::Unavailable { .. } => "unavailable",
            Self::Map { .. } => "map",
            Self::Io { .. } => "io",
            Self::NoSuchWorker { .. } => "no_such_worker",
        }
    }
}

/// Bind `n` listeners to `addr` with SO_REUSEADDR and SO_REUSEPORT, nonblocking, in order
/// (listener `i` is worker `i`'s). With port 0, the first bind picks the port and the others
/// reuse it.
pub fn bind_group(addr: SocketAddr, n: usize, backlog: i32) -> io::Result<Vec<TcpListener>> {
    let mut out = Vec::with_capacity(n);
    let mut addr = addr;
    for _ in 0..n {
        let l = bind_listener(addr, backlog)?;
        if addr.port() == 0 {
            addr = l.local_addr()?;
        }
        out.push(l);
    }
    Ok(out)
}

/// One nonblocking SO_REUSEPORT listener on `addr` (a member of `addr`'s group, or a
/// replacement for a dead one; see [`Steering::replace`]).
pub fn bind_listener(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let ctx = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what} {addr}: {e}"));
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| ctx("socket for", e))?;
    s.set_reuse_address(true)
        .map_err(|e| ctx("SO_REUSEADDR on", e))?;
    s.set_reuse_port(true)
        .map_err(|e| ctx("SO_REUSEPORT on", e))?;
    s.set_nonblocking(true)
        .map_err(|e| ctx("O_NONBLOCK on", e))?;
    s.bind(&addr.into()).map_err(|e| ctx("bind", e))?;
    s.listen(backlog).map_err(|e| ctx("listen on", e))?;
    Ok(s.into())
}

/// What picks a worker, in [`Mapping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    /// NIC queues `queue + k * n` (`skb->queue_mapping` = queue + offset).
    Queue { queue: u32, queue_mapping: u32 },
    /// SYNs processed on this CPU.
    Cpu(usize),
    /// Connections whose flow hash % `of` == `bucket`.
    HashBucket { bucket: usize, of: usize },
    /// The kernel's reuseport hash (mode `off`).
    Kernel,
}

/// One line of the mapping: `selector` -> worker (pinned to `cpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub selector: Selector,
    pub worker: usize,
    pub cpu: usize,
    /// False while the worker's listener is closed and not yet replaced.
    pub live: bool,
}

/// The explicit queue/CPU -> worker mapping, for the start-up log and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub mode: SteeringMode,
    pub routes: Vec<Route>,
}

impl fmt::Display for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "steering {}:", self.mode)?;
        for (i, r) in self.routes.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            match r.selector {
                Selector::Queue {
                    queue,
                    queue_mapping,
                } => write!(f, "{sep}queue {queue} (queue_mapping {queue_mapping})")?,
                Selector::Cpu(c) => write!(f, "{sep}syn on cpu {c}")?,
                Selector::HashBucket { bucket, of } => write!(f, "{sep}hash%{of}=={bucket}")?,
                Selector::Kernel => write!(f, "{sep}kernel hash")?,
            }
            write!(f, " -> worker {} (cpu {})", r.worker, r.cpu)?;
            if !r.live {
                write!(f, " [closed]")?;
            }
        }
        Ok(())
    }
}

/// The worker a connection should land on in `queue` mode (pure): `(queue_mapping - offset) %
/// n`, or `None` (kernel hash) when the queue was not recorded (`queue_mapping < offset`).
pub fn worker_for_queue(queue_mapping: u32, offset: u32, n: usize) -> Option<usize> {
    if n == 0 || queue_mapping < offset {
        return None;
    }
    usize::try_from(queue_mapping - offset).ok().map(|q| q % n)
}

/// The worker pinned to `cpu` (the first one when several share it), for `cpu` and
/// `incoming-cpu` modes (pure).
pub fn worker_for_cpu(cpus: &[usize], cpu: usize) -> Option<usize> {
    cpus.iter().position(|&c| c == cpu)
}

/// Steering attached to a listener group. Keep it alive as long as the group: it owns the BPF
/// maps used to repair the group.
pub struct Steering {
    requested: SteeringMode,
    in_effect: SteeringMode,
    fallback: Option<String>,
    cpus: Vec<usize>,
    queue_offset: u32,
    /// Per worker: is its listener open (as far as we were told)?
    live: Vec<bool>,
    bpf: Option<BpfState>,
}

struct BpfState {
    loaded: Loaded,
    config: Config,
    /// `queue` mode: our model of the kernel's `socks[]` (group index -> worker).
    group: Vec<usize>,
}

impl fmt::Debug for Steering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Steering")
            .field("requested", &self.requested)
            .field("in_effect", &self.in_effect)
            .field("fallback", &self.fallback)
            .field("cpus", &self.cpus)
            .field("queue_offset", &self.queue_offset)
            .field("live", &self.live)
            .field("bpf", &self.bpf.as_ref().map(|b| &b.group))
            .finish()
    }
}

/// Set up `mode` on `listeners` (the whole group, in bind order, as [`bind_group`] returns
/// it); worker `i` owns `listeners[i]` and is pinned to `cpus[i]`.
///
/// When the mode cannot be set up (no CAP_BPF, old kernel, SO_INCOMING_CPU refused):
/// `required` = false logs one warning and returns a `Steering` in mode `off` with a
/// [`Steering::fallback_reason`]; `required` = true returns [`SteeringError::Unavailable`].
/// Invalid arguments are an error either way.
pub fn attach(
    listeners: &[TcpListener],
    cpus: &[usize],
    mode: SteeringMode,
    queue_offset: u32,
    required: bool,
) -> Result<Steering, SteeringError> {
    let n = listeners.len();
    if n == 0 {
        return Err(SteeringError::Invalid("no listeners".into()));
    }
    if cpus.len() != n {
        return Err(SteeringError::Invalid(format!(
            "{n} listeners but {} cpus (one cpu per worker)",
            cpus.len()
        )));
    }
    if n > MAX_WORKERS {
        return Err(SteeringError::Invalid(format!(
            "{n} workers; at most {MAX_WORKERS}"
        )));
    }
    let far_cpu = cpus.iter().find(|&&c| c >= MAX_CPUS);
    if let (SteeringMode::Cpu, Some(c)) = (mode, far_cpu) {
        return Err(SteeringError::Invalid(format!(
            "cpu {c} is beyond the {MAX_CPUS} CPUs `cpu` mode can map"
        )));
    }
    let mut s = Steering {
        requested: mode,
        in_effect: mode,
        fallback: None,
        cpus: cpus.to_vec(),
        queue_offset,
        live: vec![true; n],
        bpf: None,
    };
    let result = match mode {
        SteeringMode::Off => Ok(()),
        SteeringMode::IncomingCpu => set_incoming_cpu(listeners, cpus),
        SteeringMode::Queue | SteeringMode::Cpu | SteeringMode::Hash => {
            match setup_bpf(listeners, cpus, mode, queue_offset) {
                Ok(state) => {
                    s.bpf = Some(state);
                    Ok(())
                }
                Err(e) => Err(describe(&e)),
            }
        }
    };
    match result {
        Ok(()) => {
            tracing::info!(mode = %mode, workers = n, "{}", s.mapping());
            Ok(s)
        }
        Err(reason) if required => Err(SteeringError::Unavailable { mode, reason }),
        Err(reason) => {
            tracing::warn!(
                requested = %mode,
                in_effect = "off",
                "steering fallback: mode `{mode}` unavailable, using the kernel's reuseport hash (off): {reason}"
            );
            s.in_effect = SteeringMode::Off;
            s.fallback = Some(reason);
            Ok(s)
        }
    }
}

/// SO_INCOMING_CPU(cpus[i]) on listener i; on failure, undo (-1) and say why.
fn set_incoming_cpu(listeners: &[TcpListener], cpus: &[usize]) -> Result<(), String> {
    for (i, (l, &cpu)) in listeners.iter().zip(cpus).enumerate() {
        if let Err(e) = SockRef::from(l).set_cpu_affinity(cpu) {
            for l in &listeners[..i] {
                // usize::MAX becomes -1 as a C int: "no CPU".
                let _ = SockRef::from(l).set_cpu_affinity(usize::MAX);
            }
            return Err(format!(
                "{}setsockopt(SO_INCOMING_CPU, {cpu}) on listener {i}: {e}",
                prefix(classify_io(&e))
            ));
        }
    }
    Ok(())
}

fn setup_bpf(
    listeners: &[TcpListener],
    cpus: &[usize],
    mode: SteeringMode,
    queue_offset: u32,
) -> Result<BpfState, LoadError> {
    let n = listeners.len();
    let mut loaded = Loaded::load()?;
    let at = |step: &'static str| {
        move |e: MapError| LoadError {
            step,
            source: Box::new(e),
        }
    };
    let config = Config {
        mode: match mode {
            SteeringMode::Queue => MODE_QUEUE,
            SteeringMode::Cpu => MODE_CPU,
            _ => MODE_HASH,
        },
        n: u32::try_from(n).unwrap_or(u32::MAX),
        queue_offset,
        observe: 0,
    };
    let group: Vec<usize> = (0..n).collect();
    if mode == SteeringMode::Queue {
        for w in 0..n {
            loaded
                .group_index
                .set(w as u32, w as u32, 0)
                .map_err(at("fill group_index"))?;
        }
    } else {
        for (i, l) in listeners.iter().enumerate() {
            loaded
                .socks
                .set(i as u32, l, 0)
                .map_err(at("fill socks (REUSEPORT_SOCKARRAY)"))?;
        }
        for (w, &cpu) in cpus.iter().enumerate().rev() {
            // Reverse, so the first worker on a CPU wins. The value is worker + 1: the fresh
            // array's zeros mean "no worker on this CPU" (kernel hash).
            if cpu < MAX_CPUS {
                loaded
                    .cpu_worker
                    .set(cpu as u32, w as u32 + 1, 0)
                    .map_err(at("fill cpu_worker"))?;
            }
        }
    }
    loaded.cfg.set(0, config, 0).map_err(at("write cfg"))?;
    let first = &listeners[0];
    let step = "attach program (SO_ATTACH_REUSEPORT_EBPF)";
    if mode == SteeringMode::Queue {
        loaded
            .queue_program()?
            .attach(first.as_fd())
            .map_err(|e| LoadError {
                step,
                source: Box::new(e),
            })?;
    } else {
        loaded
            .select_program()?
            .attach(first.as_fd())
            .map_err(|e| LoadError {
                step,
                source: Box::new(e),
            })?;
    }
    Ok(BpfState {
        loaded,
        config,
        group,
    })
}

/// "hint: " or "".
fn prefix(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!("{hint}: ")
    }
}

/// A hint for an OS error that has a usual cause ("" when none).
fn classify_io(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "missing capability (BPF needs CAP_BPF or CAP_SYS_ADMIN)"
        }
        Some(libc::EINVAL)
        | Some(libc::ENOSYS)
        | Some(libc::EOPNOTSUPP)
        | Some(libc::ENOPROTOOPT) => "kernel too old or built without this feature",
        _ => "",
    }
}

/// One line: a hint from the first OS error in the chain, the failed step, the error chain.
fn describe(e: &LoadError) -> String {
    let mut text = format!("{}: {}", e.step, e.source);
    let mut hint = "";
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e.source.as_ref());
    while let Some(err) = cur {
        let s = err.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        if let (true, Some(io)) = (hint.is_empty(), err.downcast_ref::<io::Error>()) {
            hint = classify_io(io);
        }
        cur = err.source();
    }
    // Verifier logs are long; keep the line a line.
    let mut text = text.replace('\n', " | ");
    if text.len() > 600 {
        let mut cut = 600;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    prefix(hint) + &text
}

impl Steering {
    /// The mode the config asked for.
    pub fn requested_mode(&self) -> SteeringMode {
        self.requested
    }

    /// The mode actually in effect (`off` after a fallback).
    pub fn mode_in_effect(&self) -> SteeringMode {
        self.in_effect
    }

    /// Why the requested mode fell back to `off`, when it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Number of workers in the group.
    pub fn workers(&self) -> usize {
        self.cpus.len()
    }

    /// The CPU each worker is pinned to.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The explicit mapping from queues/CPUs/hash buckets to workers, for the start-up log and
    /// metrics.
    pub fn mapping(&self) -> Mapping {
        let n = self.cpus.len();
        let routes = self
            .cpus
            .iter()
            .enumerate()
            .map(|(w, &cpu)| Route {
                selector: match self.in_effect {
                    SteeringMode::Queue => Selector::Queue {
                        queue: w as u32,
                        queue_mapping: w as u32 + self.queue_offset,
                    },
                    SteeringMode::Cpu | SteeringMode::IncomingCpu => Selector::Cpu(cpu),
                    SteeringMode::Hash => Selector::HashBucket { bucket: w, of: n },
                    SteeringMode::Off => Selector::Kernel,
                },
                worker: w,
                cpu,
                live: self.live[w],
            })
            .collect();
        Mapping {
            mode: self.in_effect,
            routes,
        }
    }

    /// `queue` mode: the group index each worker's listener has now (`None` while closed), from
    /// our model of the kernel's `socks[]`.
    pub fn group_order(&self) -> Option<Vec<Option<usize>>> {
        let b = self
            .bpf
            .as_ref()
            .filter(|_| self.in_effect == SteeringMode::Queue)?;
        Some(
            (0..self.cpus.len())
                .map(|w| b.group.iter().position(|&x| x == w))
                .collect(),
        )
    }

    fn check_worker(&self, worker: usize) -> Result<(), SteeringError> {
        if worker >= self.cpus.len() {
            return Err(SteeringError::NoSuchWorker {
                worker,
                n: self.cpus.len(),
            });
        }
        Ok(())
    }

    /// Tell steering that worker `worker`'s listener has been closed (its last fd). `cpu`/`hash`:
    /// the kernel already emptied the slot; this clears it anyway. `queue`: re-points the other
    /// workers at their shifted group indexes (the kernel moved the last socket into the closed
    /// one's place), so their mapping stays exact; the dead worker's queues go to the kernel's
    /// hash until [`Steering::replace`]. Idempotent.
    pub fn worker_closed(&mut self, worker: usize) -> Result<(), SteeringError> {
        self.check_worker(worker)?;
        if !self.live[worker] {
            return Ok(());
        }
        self.live[worker] = false;
        let in_effect = self.in_effect;
        let Some(b) = self.bpf.as_mut() else {
            return Ok(());
        };
        match in_effect {
            SteeringMode::Queue => {
                if let Some(i) = b.group.iter().position(|&w| w == worker) {
                    // What the kernel does in __reuseport_detach_sock().
                    b.group.swap_remove(i);
                }
                write_group_index(b, self.cpus.len())
            }
            _ => match b.loaded.socks.clear_index(&(worker as u32)) {
                Ok(()) => Ok(()),
                // Already emptied by the kernel.
                Err(MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
                {
                    Ok(())
                }
                Err(MapError::KeyNotFound) | Err(MapError::ElementNotFound) => Ok(()),
                Err(e) => Err(SteeringError::Map {
                    map: "socks",
                    source: e,
                }),
            },
        }
    }

    /// Give worker `worker` a new listener after its old one closed (every fd of it). The new
    /// listener must already be listening on the group's address with SO_REUSEPORT (see
    /// [`bind_listener`]), which makes it the group's last member.
    /// - `cpu`/`hash`: fills sockarray slot `worker`.
    /// - `queue`: records the close (if [`Steering::worker_closed`] was not called) and the
    ///   new member, and re-points the program.
    /// - `incoming-cpu`: sets SO_INCOMING_CPU on it. `off`: nothing.
    ///
    /// The program is attached again through the new listener, which also covers a group whose
    /// members had all closed.
    pub fn replace(&mut self, worker: usize, listener: &TcpListener) -> Result<(), SteeringError> {
        self.check_worker(worker)?;
        let cpu = self.cpus[worker];
        match self.in_effect {
            SteeringMode::Off => {}
            SteeringMode::IncomingCpu => {
                SockRef::from(listener)
                    .set_cpu_affinity(cpu)
                    .map_err(|source| SteeringError::Io {
                        op: "SO_INCOMING_CPU",
                        source,
                    })?;
            }
            SteeringMode::Queue => {
                self.worker_closed(worker)?;
                let n = self.cpus.len();
                if let Some(b) = self.bpf.as_mut() {
                    b.group.push(worker);
                    write_group_index(b, n)?;
                    let p = b.loaded.queue_program().map_err(load_err_to_io)?;
                    p.attach(listener.as_fd()).map_err(|e| SteeringError::Io {
                        op: "re-attach socket filter",
                        source: io::Error::other(e),
                    })?;
                }
            }
            SteeringMode::Cpu | SteeringMode::Hash => {
                if let Some(b) = self.bpf.as_mut() {
                    b.loaded
                        .socks
                        .set(worker as u32, listener, 0)
                        .map_err(|source| SteeringError::Map {
                            map: "socks",
                            source,
                        })?;
                    let p = b.loaded.select_program().map_err(load_err_to_io)?;
                    p.attach(listener.as_fd()).map_err(|e| SteeringError::Io {
                        op: "re-attach sk_reuseport program",
                        source: io::Error::other(e),
                    })?;
                }
            }
        }
        self.live[worker] = true;
        tracing::info!(
            worker,
            cpu,
            "steering: worker's listener replaced; {}",
            self.mapping()
        );
        Ok(())
    }

    /// Record every steered SYN in the program's `seen` map (keyed by client port), for tests
    /// and debugging. Off by default: it costs a map update per SYN.
    pub fn set_observe(&mut self, on: bool) -> Result<(), SteeringError> {
        if let Some(b) = self.bpf.as_mut() {
            b.config.observe = u32::from(on);
            b.loaded
                .cfg
                .set(0, b.config, 0)
                .map_err(|source| SteeringError::Map { map: "cfg", source })?;
        }
        Ok(())
    }

    /// What the program recorded for the connection from `client_port` (needs
    /// [`Steering::set_observe`]); `None` when nothing was recorded or no program runs.
    pub fn observation(&self, client_port: u16) -> Result<Option<Observation>, SteeringError> {
        let Some(b) = self.bpf.as_ref() else {
            return Ok(None);
        };
        match b.loaded.seen.get(&u32::from(client_port), 0) {
            Ok(o) => Ok(Some(o)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(source) => Err(SteeringError::Map {
                map: "seen",
                source,
            }),
        }
    }

    /// SYNs the program steered to each worker, and those it left to the kernel's hash (the
    /// last element). Empty without a program.
    pub fn steered_counts(&self) -> Result<Vec<u64>, SteeringError> {
        let Some(b) = self.bpf.as_ref() else {
            return Ok(Vec::new());
        };
        let keys = (0..self.cpus.len() as u32).chain([MAX_WORKERS as u32]);
        keys.map(|k| {
            b.loaded
                .stats
                .get(&k, 0)
                .map(|v| v.iter().sum())
                .map_err(|source| SteeringError::Map {
                    map: "stats",
                    source,
                })
        })
        .collect()
    }
}

fn load_err_to_io(e: LoadError) -> SteeringError {
    SteeringError::Io {
        op: e.step,
        source: io::Error::other(describe(&e)),
    }
}

/// `group_index[w]` = w's position in our model of `socks[]`, or NO_SLOT.
fn write_group_index(b: &mut BpfState, n: usize) -> Result<(), SteeringError> {
    for w in 0..n {
        let idx = b
            .group
            .iter()
            .position(|&x| x == w)
            .map_or(NO_SLOT, |i| i as u32);
        b.loaded
            .group_index
            .set(w as u32, idx, 0)
            .map_err(|source| SteeringError::Map {
                map: "group_index",
                source,
            })?;
    }
    Ok(())
}

/// Detach whatever program steers `listener`'s group (SO_DETACH_REUSEPORT_BPF); the group
/// goes back to the kernel's hash. `EINVAL`/`ENOENT` (nothing attached) is not an error.
pub fn detach(listener: &TcpListener) -> Result<(), SteeringError> {
    // Both program types use the same socket option.
    match SkReuseport::detach(listener.as_fd()) {
        Ok(()) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            let benign = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<io::Error>())
                .and_then(io::Error::raw_os_error)
                .is_some_and(|c| c == libc::ENOENT || c == libc::EINVAL);
            if benign {
                Ok(())
            } else {
                Err(SteeringError::Io {
                    op: "SO_DETACH_REUSEPORT_BPF",
                    source: io::Error::other(text),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_worker_table() {
        #[rustfmt::skip]
        let cases = [
            // qm, offset, n, expected
            (0, 0, 4, Some(0)), (3, 0, 4, Some(3)), (5, 0, 4, Some(1)),
            (0, 1, 4, None),    (1, 1, 4, Some(0)), (4, 1, 4, Some(3)), (5, 1, 4, Some(0)),
            (3, 0, 2, Some(1)), (7, 0, 1, Some(0)), (0, 0, 0, None),
        ];
        for (qm, off, n, want) in cases {
            assert_eq!(
                worker_for_queue(qm, off, n),
                want,
                "qm {qm} offset {off} n {n}"
            );
        }
    }

    #[test]
    fn cpu_worker_lookup() {
        assert_eq!(worker_for_cpu(&[0, 1], 1), Some(1));
        assert_eq!(worker_for_cpu(&[2, 5], 5), Some(1));
        assert_eq!(worker_for_cpu(&[0, 1, 0, 1], 0), Some(0));
        assert_eq!(worker_for_cpu(&[0, 1], 3), None);
    }

    #[test]
    fn mapping_display() {
        let m = Mapping {
            mode: SteeringMode::Queue,
            routes: vec![
                Route {
                    selector: Selector::Queue {
                        queue: 0,
                        queue_mapping: 1,
                    },
                    worker: 0,
                    cpu: 2,
                    live: true,
                },
                Route {
                    selector: Selector::Queue {
                        queue: 1,
                        queue_mapping: 2,
                    },
                    worker: 1,
                    cpu: 3,
                    live: false,
                },
            ],
        };
        assert_eq!(
            m.to_string(),
            "steering queue: queue 0 (queue_mapping 1) -> worker 0 (cpu 2), queue 1 (queue_mapping 2) -> worker 1 (cpu 3) [closed]"
        );
    }

    #[test]
    fn invalid_arguments_are_errors_even_when_not_required() {
        let ls = bind_group("127.0.0.1:0".parse().unwrap(), 2, 16).unwrap();
        let e = attach(&ls, &[0], SteeringMode::Off, 0, false).unwrap_err();
        assert_eq!(e.category(), "invalid");
        assert!(attach(&[], &[], SteeringMode::Off, 0, false).is_err());
        let s = attach(&ls, &[0, 1], SteeringMode::Off, 0, true).unwrap();
        assert_eq!(s.mode_in_effect(), SteeringMode::Off);
        assert_eq!(s.fallback_reason(), None);
        assert_eq!(s.mapping().routes.len(), 2);
    }

    #[test]
    fn bind_group_shares_the_picked_port() {
        let ls = bind_group("127.0.0.1:0".parse().unwrap(), 3, 16).unwrap();
        let port = ls[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        assert!(ls.iter().all(|l| l.local_addr().unwrap().port() == port));
    }
}

#[cfg(test)]
mod send_sync {
    fn assert_send<T: Send>() {}

    #[test]
    fn steering_can_move_to_a_supervisor_thread() {
        assert_send::<super::Steering>();
        assert_send::<super::SteeringError>();
    }
}
