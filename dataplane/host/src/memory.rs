//! Sizing the RAM tier and I/O buffers from the memory limit (pure), and reading total RAM.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use edgecache_api::ByteSize;

mod http2;
pub use http2::{
    HEADER_LIST_COPIES, HTTP2_CONNECTIONS_PER_WORKER, HTTP2_MAX_CONNECTION_WINDOW,
    HTTP2_MAX_HEADER_LIST, HTTP2_MAX_STREAM_WINDOW, HTTP2_MAX_STREAMS, HTTP2_MIN_HEADER_LIST,
    HTTP2_MIN_STREAMS, HTTP2_MIN_WINDOW, HTTP2_PER_ADDRESS_DIVISOR, HTTP2_STREAM_BYTES,
    Http2Limits, Http2Settings, connection_budget_per_worker, http2_borrowable,
    http2_connection_bytes, http2_connections_per_address, http2_limits,
};

/// Memory the process needs whatever it caches: code, runtimes, index, connections. 32 MiB.
pub const BASE_RSS: u64 = 32 << 20;
/// I/O buffers: O_DIRECT reads and writes use 4096-aligned owned buffers from a per-worker
/// budget (`dataplane/store/src/io/budget.rs`). With a limit, all workers together get
/// [`IO_BUFFERS_SHARE_DIVISOR`]th of it, split evenly and each clamped to
/// [`IO_BUFFERS_MIN_PER_WORKER`]..=[`IO_BUFFERS_MAX_PER_WORKER`]; without one, each worker gets
/// [`IO_BUFFERS_NO_LIMIT_PER_WORKER`].
///
/// Measured (bench/BENCHMARKS.md, tuning log, session 4): one worker, 256 clients, 100 KiB
/// objects. At 8 MiB (64 buffers of 128 KiB) nearly every disk hit waited for a buffer, so disk
/// hits queued behind the budget while RAM hits went by (zipf p99 46-53 ms); at 32 MiB zipf
/// served 20% more at p99 35-36 ms, uniform and 1 MiB unchanged or better, 4 KiB unchanged.
pub const IO_BUFFERS_SHARE_DIVISOR: u64 = 8;
/// Smallest per-worker buffer budget the plan gives.
pub const IO_BUFFERS_MIN_PER_WORKER: u64 = 8 << 20;
/// Largest per-worker buffer budget the plan gives (256 reads of 256 KiB in flight).
pub const IO_BUFFERS_MAX_PER_WORKER: u64 = 64 << 20;
/// Per-worker buffer budget when there is no memory limit.
pub const IO_BUFFERS_NO_LIMIT_PER_WORKER: u64 = 32 << 20;

/// The per-worker I/O buffer budget for `workers` workers under `limit` (pure).
pub fn io_buffers_per_worker(limit: Option<u64>, workers: usize) -> u64 {
    match limit {
        Some(l) => (l / IO_BUFFERS_SHARE_DIVISOR / workers.max(1) as u64)
            .clamp(IO_BUFFERS_MIN_PER_WORKER, IO_BUFFERS_MAX_PER_WORKER),
        None => IO_BUFFERS_NO_LIMIT_PER_WORKER,
    }
}

/// RAM tier when there is no limit at all: 1 GiB, or 1/8 of RAM when that is smaller.
pub const NO_LIMIT_RAM_TIER_CAP: u64 = 1 << 30;

/// Where the limit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// `memory.limit` in the config.
    Config,
    /// The cgroup's limit.
    Cgroup,
    /// No limit anywhere.
    None,
}

impl LimitSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Cgroup => "cgroup",
            Self::None => "none",
        }
    }
}

/// Where the RAM tier size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamTierSource {
    /// `memory.ramTier` in the config (honoured even when it does not fit; see `over_budget`).
    Config,
    /// What is left of the limit after headroom, base and buffers.
    Planned,
    /// No limit: the default cap (`min(1 GiB, RAM / 8)`).
    Capped,
}

impl RamTierSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Planned => "planned",
            Self::Capped => "capped",
        }
    }
}

/// How the memory budget is spent. All sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The limit planned against; `None` = unlimited.
    pub limit: Option<u64>,
    pub limit_source: LimitSource,
    /// Kept free for the allocator, kernel socket buffers and bursts: `headroom_percent` of the
    /// limit (0 without a limit).
    pub headroom: u64,
    pub headroom_percent: u8,
    /// The fixed cost of the process ([`BASE_RSS`]).
    pub base: u64,
    /// I/O buffers for all workers: `workers * io_buffers_per_worker`.
    pub io_buffers: u64,
    pub io_buffers_per_worker: u64,
    pub workers: usize,
    /// Bytes held by requests in flight outside the I/O buffers: unknown-length bodies buffered
    /// for the store, coalescing tails, fill client queues, interim (1xx) queues and the encoders
    /// of compressing fills, each
    /// bounded by its part of this ([`in_flight_bounds`]): [`IN_FLIGHT_SHARE_PERCENT`] of what
    /// is left after headroom, base and buffers, at most [`IN_FLIGHT_MAX`] ([`IN_FLIGHT_NO_LIMIT`]
    /// without a limit).
    pub in_flight: u64,
    /// Reserved for the store's index (about 15 bytes per object, bounded by three quarters of
    /// this: the store evicts at it) and per-connection state (the other quarter), which grow
    /// with the number of objects and clients: half of what is left after headroom, base,
    /// buffers and in-flight bytes ([`INDEX_SHARE_PERCENT`]).
    pub index_reserve: u64,
    /// The in-memory object tier.
    pub ram_tier: u64,
    pub ram_tier_source: RamTierSource,
    /// How far headroom + base + buffers + RAM tier exceed the limit (0 when it fits). Non-zero
    /// only when the limit is too small for the fixed costs, or a configured RAM tier is too big.
    pub over_budget: u64,
}

/// Share of the planned budget (after headroom, base and buffers) for bytes held in flight
/// outside the I/O buffers ([`MemoryPlan::in_flight`]).
pub const IN_FLIGHT_SHARE_PERCENT: u64 = 25;
/// Largest in-flight share the plan gives.
pub const IN_FLIGHT_MAX: u64 = 1 << 30;
/// The in-flight share when there is no memory limit.
pub const IN_FLIGHT_NO_LIMIT: u64 = 512 << 20;

/// A part of the memory plan held by requests in flight, each with a bound of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Bodies of unknown length buffered by the store's writers until their end.
    UnknownLengthBodies,
    /// Response bodies kept in memory by coalesced fetches, for waiters and for the leader's
    /// client to read at its pace.
    CoalescingTails,
    /// Chunks queued from a fill to the client whose request caused it.
    FillClientQueues,
    /// Interim (1xx) responses queued per connection.
    InterimQueues,
    /// The state of the encoders compressing fills (windows, hash tables: a few MiB each at
    /// the default levels, tens at the highest).
    Encoders,
    /// Client connections' own buffers and state ([`CONNECTION_BYTES`] each): bounded by the
    /// connection cap ([`connections_per_worker`]), out of the index reserve.
    Connections,
}

impl Part {
    pub const ALL: [Part; 6] = [
        Part::UnknownLengthBodies,
        Part::CoalescingTails,
        Part::FillClientQueues,
        Part::InterimQueues,
        Part::Encoders,
        Part::Connections,
    ];

    /// The `part` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::UnknownLengthBodies => "unknown_length_bodies",
            Part::CoalescingTails => "coalescing_tails",
            Part::FillClientQueues => "fill_client_queues",
            Part::InterimQueues => "interim_queues",
            Part::Encoders => "encoders",
            Part::Connections => "connections",
        }
    }

    /// Eighths of [`MemoryPlan::in_flight`] the part may hold (0: not in the in-flight share).
    pub fn eighths(self) -> u64 {
        match self {
            Part::UnknownLengthBodies | Part::CoalescingTails | Part::Encoders => 2,
            Part::FillClientQueues | Part::InterimQueues => 1,
            Part::Connections => 0,
        }
    }
}

/// The bound of each [`Part`] under `plan` (pure): its eighths of the in-flight share; for
/// [`Part::Connections`], the connection cap of all workers at [`CONNECTION_BYTES`] each.
pub fn part_bound(plan: &MemoryPlan, part: Part) -> u64 {
    match part {
        Part::Connections => connections_per_worker(plan)
            .saturating_mul(plan.workers.max(1) as u64)
            .saturating_mul(CONNECTION_BYTES),
        p => plan.in_flight / 8 * p.eighths(),
    }
}

/// Whether `want` more bytes may be taken where `held` are, under `bound` (pure): the decision
/// every in-flight part makes before it allocates. Nothing is taken past the bound; a request
/// refused degrades (its body is proxied but not stored, a tail is not kept, a fill waits for
/// its client, an interim response is dropped).
pub fn fits(held: u64, want: u64, bound: u64) -> bool {
    held.checked_add(want).is_some_and(|total| total <= bound)
}

/// The bytes a [`Part`] holds now, and its bound. Shared by every worker; taking and giving back
/// are one atomic operation each.
#[derive(Debug)]
pub struct Share {
    held: AtomicU64,
    bound: AtomicU64,
}

impl Default for Share {
    /// Unbounded until [`Share::set_bound`].
    fn default() -> Self {
        Share::new(u64::MAX)
    }
}

impl Share {
    pub fn new(bound: u64) -> Self {
        Share {
            held: AtomicU64::new(0),
            bound: AtomicU64::new(bound),
        }
    }

    pub fn set_bound(&self, bound: u64) {
        self.bound.store(bound, Ordering::Relaxed);
    }

    pub fn bound(&self) -> u64 {
        self.bound.load(Ordering::Relaxed)
    }

    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Take `n` bytes if they [`fits`].
    pub fn try_take(&self, n: u64) -> bool {
        let bound = self.bound();
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                fits(held, n, bound).then(|| held + n)
            })
            .is_ok()
    }

    /// Take `n` bytes whatever the bound (for bytes bounded elsewhere, or the one chunk that
    /// always fits an empty queue).
    pub fn take(&self, n: u64) {
        self.held.fetch_add(n, Ordering::Relaxed);
    }

    /// Give back `n` bytes taken before.
    pub fn give_back(&self, n: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(n))
            });
    }
}

/// Bytes taken from a [`Share`], given back when dropped.
#[derive(Debug)]
pub struct Charge {
    share: Arc<Share>,
    bytes: u64,
}

impl Charge {
    /// Nothing taken yet.
    pub fn new(share: Arc<Share>) -> Self {
        Charge { share, bytes: 0 }
    }

    /// Hold at least `total` bytes: take what is missing if it fits; false (nothing more taken)
    /// when it does not.
    pub fn cover(&mut self, total: u64) -> bool {
        if total <= self.bytes {
            return true;
        }
        if !self.share.try_take(total - self.bytes) {
            return false;
        }
        self.bytes = total;
        true
    }

    /// Hold exactly `total` bytes, whatever the bound (see [`Share::take`]).
    pub fn set(&mut self, total: u64) {
        if total > self.bytes {
            self.share.take(total - self.bytes);
        } else {
            self.share.give_back(self.bytes - total);
        }
        self.bytes = total;
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.share.give_back(self.bytes);
    }
}

/// Share of the planned budget (after headroom, base, buffers and in-flight bytes) kept for the index and
/// connections rather than the RAM tier. Measured: 100,000 objects of 4 KiB need about 50 MiB of
/// index, which a RAM tier taking everything left pushed over a 256 MiB limit (OOM).
pub const INDEX_SHARE_PERCENT: u64 = 50;

/// What one HTTP/1.1 client connection may hold at most in the plan (an HTTP/2 one holds more:
/// [`http2_connection_bytes`]): hyper's read buffer grows to 64 KiB
/// for a large head, its write buffer and the connection's state take a few KiB more, and the
/// origin connection of a fill it causes reads into a buffer of 64 KiB (the proxy's
/// `ORIGIN_READ_BUF`, which also bounds the body chunk the client's connection is writing).
pub const CONNECTION_BYTES: u64 = 136 * 1024;

/// Bounds of the per-worker connection cap derived from the plan.
pub const CONNECTIONS_PER_WORKER_MIN: u64 = 256;
pub const CONNECTIONS_PER_WORKER_MAX: u64 = 65_536;

/// The default cap on open connections per worker: a quarter of the index-and-connections
/// reserve, at [`CONNECTION_BYTES`] each, shared by the workers, within
/// [`CONNECTIONS_PER_WORKER_MIN`]..=[`CONNECTIONS_PER_WORKER_MAX`]. Without a limit, the
/// maximum.
pub fn connections_per_worker(plan: &MemoryPlan) -> u64 {
    if plan.limit.is_none() {
        return CONNECTIONS_PER_WORKER_MAX;
    }
    let share = plan.index_reserve / 4;
    (share / CONNECTION_BYTES / plan.workers.max(1) as u64)
        .clamp(CONNECTIONS_PER_WORKER_MIN, CONNECTIONS_PER_WORKER_MAX)
}

/// What the memory plan reads of the configuration (the binary fills it from the config file's
/// `memory:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySettings {
    /// The limit to plan for, over the cgroup's.
    pub limit: Option<u64>,
    /// The RAM tier's size, over the planned one.
    pub ram_tier: Option<u64>,
    /// The share of the limit kept free (percent).
    pub headroom_percent: u8,
}

/// Plan memory with no knowledge of total RAM (see [`plan_memory_with_ram`]).
pub fn plan_memory(limit: Option<u64>, cfg: &MemorySettings, workers: usize) -> MemoryPlan {
    plan_memory_with_ram(limit, None, cfg, workers)
}

/// Plan memory (pure).
///
/// - The limit is `cfg.limit` when set, else the cgroup `limit`; a cgroup limit above total RAM
///   (`mem_total`) is capped at it.
/// - With a limit: headroom = `headroom_percent`% of it; then the base and the I/O buffers
///   ([`io_buffers_per_worker`]); of what is left, [`IN_FLIGHT_SHARE_PERCENT`] (at most
///   [`IN_FLIGHT_MAX`]) is for bytes in flight, then [`INDEX_SHARE_PERCENT`] of the rest is
///   reserved for the index and connections and the RAM tier gets the rest (`cfg.ram_tier`
///   overrides it).
/// - Without a limit: no headroom; in flight [`IN_FLIGHT_NO_LIMIT`]; RAM tier = `cfg.ram_tier`,
///   else `min(1 GiB, mem_total / 8)`.
pub fn plan_memory_with_ram(
    limit: Option<u64>,
    mem_total: Option<u64>,
    cfg: &MemorySettings,
    workers: usize,
) -> MemoryPlan {
    let (limit, limit_source) = match (cfg.limit, limit) {
        (Some(l), _) => (Some(l), LimitSource::Config),
        (None, Some(l)) => (Some(mem_total.map_or(l, |t| l.min(t))), LimitSource::Cgroup),
        (None, None) => (None, LimitSource::None),
    };
    let workers = workers.max(1);
    let io_buffers_per_worker = io_buffers_per_worker(limit, workers);
    let io_buffers = io_buffers_per_worker.saturating_mul(workers as u64);
    let headroom_percent = cfg.headroom_percent.min(100);
    let fixed = BASE_RSS.saturating_add(io_buffers);
    let (headroom, in_flight, index_reserve, ram_tier, source, over_budget) = match limit {
        Some(l) => {
            let headroom =
                l / 100 * u64::from(headroom_percent) + l % 100 * u64::from(headroom_percent) / 100;
            let budget = l - headroom;
            let rest = budget.saturating_sub(fixed);
            let in_flight = ((u128::from(rest) * u128::from(IN_FLIGHT_SHARE_PERCENT) / 100) as u64)
                .min(IN_FLIGHT_MAX);
            let rest = rest - in_flight;
            let index_reserve = (u128::from(rest) * u128::from(INDEX_SHARE_PERCENT) / 100) as u64;
            let (ram, source) = match cfg.ram_tier {
                Some(r) => (r, RamTierSource::Config),
                None => (rest - index_reserve, RamTierSource::Planned),
            };
            let over = fixed
                .saturating_add(in_flight)
                .saturating_add(index_reserve)
                .saturating_add(ram)
                .saturating_sub(budget);
            (headroom, in_flight, index_reserve, ram, source, over)
        }
        None => {
            let (ram, source) = match cfg.ram_tier {
                Some(r) => (r, RamTierSource::Config),
                None => (
                    mem_total.map_or(NO_LIMIT_RAM_TIER_CAP, |t| {
                        (t / 8).min(NO_LIMIT_RAM_TIER_CAP)
                    }),
                    RamTierSource::Capped,
                ),
            };
            (0, IN_FLIGHT_NO_LIMIT, 0, ram, source, 0)
        }
    };
    MemoryPlan {
        limit,
        limit_source,
        headroom,
        headroom_percent,
        base: BASE_RSS,
        io_buffers,
        io_buffers_per_worker,
        workers,
        in_flight,
        index_reserve,
        ram_tier,
        ram_tier_source: source,
        over_budget,
    }
}

impl fmt::Display for MemoryPlan {
    /// One line for the start-up log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = ByteSize;
        match self.limit {
            Some(l) => write!(f, "memory limit {} ({})", b(l), self.limit_source.as_str())?,
            None => write!(f, "memory limit none")?,
        }
        write!(
            f,
            ", headroom {} ({}%), base {}, io buffers {} ({} workers x {}), in flight {} (\
             unknown-length bodies {}, coalescing tails {}, fill client queues {}, interim \
             queues {}, encoders {}), index reserve {} (index, and connections up to {}), ram tier {} ({})",
            b(self.headroom),
            self.headroom_percent,
            b(self.base),
            b(self.io_buffers),
            self.workers,
            b(self.io_buffers_per_worker),
            b(self.in_flight),
            b(part_bound(self, Part::UnknownLengthBodies)),
            b(part_bound(self, Part::CoalescingTails)),
            b(part_bound(self, Part::FillClientQueues)),
            b(part_bound(self, Part::InterimQueues)),
            b(part_bound(self, Part::Encoders)),
            b(self.index_reserve),
            b(part_bound(self, Part::Connections)),
            b(self.ram_tier),
            self.ram_tier_source.as_str(),
        )?;
        if self.over_budget > 0 {
            write!(f, ", OVER BUDGET by {}", b(self.over_budget))?;
        }
        Ok(())
    }
}

/// `MemTotal` from `<root>/proc/meminfo`, in bytes.
pub fn read_mem_total_at(root: &Path) -> io::Result<u64> {
    let p = root.join("proc/meminfo");
    let text = std::fs::read_to_string(&p)?;
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("MemTotal:")?;
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kib * 1024)
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: no MemTotal", p.display()),
            )
        })
}

/// Total RAM of the machine, in bytes.
pub fn read_mem_total() -> io::Result<u64> {
    read_mem_total_at(Path::new("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// The RAM tier's share of `rest`: what the in-flight share and the index reserve (half of
    /// what that leaves, rounded down) leave.
    fn planned_ram(rest: u64) -> u64 {
        let rest = rest - (rest / 4).min(IN_FLIGHT_MAX);
        rest - rest / 2
    }

    pub(super) fn cfg(limit: Option<u64>, ram: Option<u64>, headroom: u8) -> MemorySettings {
        MemorySettings {
            limit,
            ram_tier: ram,
            headroom_percent: headroom,
        }
    }

    #[test]
    fn connections_per_worker_follows_the_plan_within_bounds() {
        let plan = |limit: Option<u64>, workers| plan_memory(limit, &cfg(None, None, 10), workers);
        assert_eq!(
            connections_per_worker(&plan(None, 4)),
            CONNECTIONS_PER_WORKER_MAX
        );
        // A small pod still takes a few hundred connections per worker.
        assert_eq!(
            connections_per_worker(&plan(Some(64 * MIB), 1)),
            CONNECTIONS_PER_WORKER_MIN
        );
        // An 8 GiB pod: a quarter of its reserve at CONNECTION_BYTES a connection, over 4 workers.
        let p = plan(Some(8 * GIB), 4);
        let want = p.index_reserve / 4 / CONNECTION_BYTES / 4;
        assert!(want > CONNECTIONS_PER_WORKER_MIN, "{want}");
        assert_eq!(connections_per_worker(&p), want);
        // More workers, fewer each: the total stays in the plan.
        assert!(connections_per_worker(&plan(Some(8 * GIB), 8)) < want);
    }

    #[test]
    fn plan_memory_table() {
        struct Case {
            name: &'static str,
            cgroup: Option<u64>,
            total: Option<u64>,
            cfg: MemorySettings,
            workers: usize,
            limit: Option<u64>,
            source: LimitSource,
            headroom: u64,
            io: u64,
            ram: u64,
            ram_source: RamTierSource,
            over: u64,
        }
        #[rustfmt::skip]
        let cases = [
            // 256 MiB cgroup, 25%: 64 headroom, 32 base, an eighth (2 x 16) buffers -> 128 MiB, a quarter in flight, half of the rest RAM tier.
            Case { name: "v1 256MiB, 2 workers", cgroup: Some(256 * MIB), total: Some(24 * GIB), cfg: cfg(None, None, 25), workers: 2,
                   limit: Some(256 * MIB), source: LimitSource::Cgroup, headroom: 64 * MIB, io: 32 * MIB, ram: 48 * MIB, ram_source: RamTierSource::Planned, over: 0 },
            Case { name: "4 GiB, 10%, 4 workers", cgroup: Some(4 * GIB), total: None, cfg: cfg(None, None, 10), workers: 4,
                   limit: Some(4 * GIB), source: LimitSource::Cgroup, headroom: 4 * GIB / 10, io: 256 * MIB, ram: planned_ram(4 * GIB - 4 * GIB / 10 - 288 * MIB), ram_source: RamTierSource::Planned, over: 0 },
            Case { name: "config limit beats cgroup", cgroup: Some(8 * GIB), total: None, cfg: cfg(Some(512 * MIB), None, 0), workers: 1,
                   limit: Some(512 * MIB), source: LimitSource::Config, headroom: 0, io: 64 * MIB, ram: 156 * MIB, ram_source: RamTierSource::Planned, over: 0 },
            Case { name: "config ram tier honoured", cgroup: Some(GIB), total: None, cfg: cfg(None, Some(100 * MIB), 25), workers: 2,
                   limit: Some(GIB), source: LimitSource::Cgroup, headroom: 256 * MIB, io: 128 * MIB, ram: 100 * MIB, ram_source: RamTierSource::Config, over: 0 },
            Case { name: "config ram tier too big is flagged", cgroup: Some(256 * MIB), total: None, cfg: cfg(None, Some(256 * MIB), 25), workers: 2,
                   limit: Some(256 * MIB), source: LimitSource::Cgroup, headroom: 64 * MIB, io: 32 * MIB, ram: 256 * MIB, ram_source: RamTierSource::Config, over: 208 * MIB },
            Case { name: "tiny limit: no ram tier, over budget", cgroup: Some(32 * MIB), total: None, cfg: cfg(None, None, 25), workers: 2,
                   limit: Some(32 * MIB), source: LimitSource::Cgroup, headroom: 8 * MIB, io: 16 * MIB, ram: 0, ram_source: RamTierSource::Planned, over: 24 * MIB },
            Case { name: "cgroup limit above RAM is capped", cgroup: Some(100 * GIB), total: Some(2 * GIB), cfg: cfg(None, None, 50), workers: 1,
                   limit: Some(2 * GIB), source: LimitSource::Cgroup, headroom: GIB, io: 64 * MIB, ram: planned_ram(GIB - 96 * MIB), ram_source: RamTierSource::Planned, over: 0 },
            Case { name: "no limit, 24 GiB RAM: 1 GiB cap", cgroup: None, total: Some(24 * GIB), cfg: cfg(None, None, 25), workers: 2,
                   limit: None, source: LimitSource::None, headroom: 0, io: 64 * MIB, ram: GIB, ram_source: RamTierSource::Capped, over: 0 },
            Case { name: "no limit, 2 GiB RAM: an eighth", cgroup: None, total: Some(2 * GIB), cfg: cfg(None, None, 25), workers: 1,
                   limit: None, source: LimitSource::None, headroom: 0, io: 32 * MIB, ram: 256 * MIB, ram_source: RamTierSource::Capped, over: 0 },
            Case { name: "no limit, unknown RAM", cgroup: None, total: None, cfg: cfg(None, None, 25), workers: 1,
                   limit: None, source: LimitSource::None, headroom: 0, io: 32 * MIB, ram: GIB, ram_source: RamTierSource::Capped, over: 0 },
            Case { name: "no limit, configured ram tier", cgroup: None, total: None, cfg: cfg(None, Some(3 * GIB), 25), workers: 1,
                   limit: None, source: LimitSource::None, headroom: 0, io: 32 * MIB, ram: 3 * GIB, ram_source: RamTierSource::Config, over: 0 },
            Case { name: "zero workers counts as one", cgroup: Some(GIB), total: None, cfg: cfg(None, None, 0), workers: 0,
                   limit: Some(GIB), source: LimitSource::Cgroup, headroom: 0, io: 64 * MIB, ram: planned_ram(GIB - 96 * MIB), ram_source: RamTierSource::Planned, over: 0 },
        ];
        for c in cases {
            let p = plan_memory_with_ram(c.cgroup, c.total, &c.cfg, c.workers);
            assert_eq!(p.limit, c.limit, "{}: limit", c.name);
            assert_eq!(p.limit_source, c.source, "{}: source", c.name);
            assert_eq!(p.headroom, c.headroom, "{}: headroom", c.name);
            assert_eq!(p.io_buffers, c.io, "{}: io", c.name);
            assert_eq!(p.ram_tier, c.ram, "{}: ram tier", c.name);
            assert_eq!(p.ram_tier_source, c.ram_source, "{}: ram source", c.name);
            assert_eq!(p.over_budget, c.over, "{}: over budget", c.name);
            if let (Some(l), 0) = (p.limit, p.over_budget) {
                assert!(
                    p.headroom + p.base + p.io_buffers + p.in_flight + p.index_reserve + p.ram_tier
                        <= l,
                    "{}: fits",
                    c.name
                );
            }
        }
    }

    #[test]
    fn io_buffers_are_an_eighth_of_the_limit_clamped_per_worker() {
        assert_eq!(io_buffers_per_worker(Some(256 * MIB), 1), 32 * MIB);
        assert_eq!(io_buffers_per_worker(Some(256 * MIB), 2), 16 * MIB);
        assert_eq!(
            io_buffers_per_worker(Some(32 * MIB), 2),
            IO_BUFFERS_MIN_PER_WORKER
        );
        assert_eq!(
            io_buffers_per_worker(Some(64 * GIB), 4),
            IO_BUFFERS_MAX_PER_WORKER
        );
        assert_eq!(
            io_buffers_per_worker(Some(GIB), 0),
            64 * MIB,
            "zero workers counts as one"
        );
        assert_eq!(
            io_buffers_per_worker(None, 3),
            IO_BUFFERS_NO_LIMIT_PER_WORKER
        );
    }

    #[test]
    fn plan_memory_without_ram_uses_the_cap() {
        let p = plan_memory(None, &cfg(None, None, 25), 2);
        assert_eq!(p.ram_tier, NO_LIMIT_RAM_TIER_CAP);
    }

    #[test]
    fn display_is_one_line() {
        let p = plan_memory(Some(256 * MIB), &cfg(None, None, 25), 2);
        let s = p.to_string();
        assert!(!s.contains('\n'));
        assert_eq!(
            s,
            "memory limit 256MiB (cgroup), headroom 64MiB (25%), base 32MiB, io buffers 32MiB (2 workers x 16MiB), \
             in flight 32MiB (unknown-length bodies 8MiB, coalescing tails 8MiB, fill client queues 4MiB, interim queues 4MiB, encoders 8MiB), \
             index reserve 48MiB (index, and connections up to 68MiB), ram tier 48MiB (planned)"
        );
        let over = plan_memory(Some(32 * MIB), &cfg(None, None, 25), 2).to_string();
        assert!(over.ends_with("OVER BUDGET by 24MiB"), "{over}");
    }

    #[test]
    fn in_flight_is_a_quarter_of_the_rest_split_in_eighths() {
        let p = plan_memory(Some(64 * MIB), &cfg(None, None, 25), 1);
        // 64 MiB: 16 headroom, 32 base, 8 buffers: 8 MiB left, 2 of them in flight.
        assert_eq!(p.in_flight, 2 * MIB);
        assert_eq!(part_bound(&p, Part::UnknownLengthBodies), 512 << 10);
        assert_eq!(part_bound(&p, Part::CoalescingTails), 512 << 10);
        assert_eq!(part_bound(&p, Part::FillClientQueues), 256 << 10);
        assert_eq!(part_bound(&p, Part::InterimQueues), 256 << 10);
        assert_eq!(part_bound(&p, Part::Encoders), 512 << 10);
        assert_eq!(
            part_bound(&p, Part::Connections),
            CONNECTIONS_PER_WORKER_MIN * CONNECTION_BYTES
        );
        let in_flight: u64 = Part::ALL
            .iter()
            .map(|&part| part.eighths() * p.in_flight / 8)
            .sum();
        assert_eq!(in_flight, p.in_flight, "the parts share it all");
        // Capped for a large pod; a fixed amount without a limit.
        let big = plan_memory(Some(64 * GIB), &cfg(None, None, 10), 4);
        assert_eq!(big.in_flight, IN_FLIGHT_MAX);
        assert_eq!(
            plan_memory(None, &cfg(None, None, 10), 4).in_flight,
            IN_FLIGHT_NO_LIMIT
        );
        // Too small a limit: nothing in flight, and every part refuses.
        let tiny = plan_memory(Some(32 * MIB), &cfg(None, None, 25), 2);
        assert_eq!(part_bound(&tiny, Part::UnknownLengthBodies), 0);
    }

    #[test]
    fn fits_never_passes_the_bound() {
        assert!(fits(0, 0, 0));
        assert!(fits(0, 10, 10));
        assert!(fits(5, 5, 10));
        assert!(!fits(5, 6, 10));
        assert!(!fits(0, 1, 0));
        assert!(!fits(u64::MAX, 1, u64::MAX), "no overflow");
    }

    #[test]
    fn charges_take_within_the_bound_and_give_back_on_drop() {
        let share = Arc::new(Share::new(100));
        let mut a = Charge::new(share.clone());
        assert!(a.cover(60));
        assert!(a.cover(40), "already covered");
        assert_eq!(share.held(), 60);
        let mut b = Charge::new(share.clone());
        assert!(!b.cover(41), "over the bound: nothing taken");
        assert_eq!(share.held(), 60);
        assert!(b.cover(40));
        assert_eq!(share.held(), 100);
        drop(a);
        assert_eq!(share.held(), 40);
        b.set(0);
        assert_eq!(share.held(), 0);
        b.set(500);
        assert_eq!(share.held(), 500, "set takes whatever the bound");
        drop(b);
        assert_eq!(share.held(), 0);
        assert_eq!(Share::default().bound(), u64::MAX);
    }

    #[test]
    fn live_mem_total() {
        assert!(read_mem_total().unwrap() > 64 * MIB);
    }
}
