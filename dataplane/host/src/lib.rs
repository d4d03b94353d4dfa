//! What the host gives the data plane, read in one place.
//!
//! This crate is the only part of the data plane that reads `/proc` and `/sys`. Every decision
//! made from what it reads is a pure function with a table test:
//! - [`plan_cpus`] turns the affinity mask, the cgroup CPU quota and the configured worker count
//!   into the list of CPUs the workers are pinned to ([`worker_cpus`] reads the inputs);
//! - [`plan_memory`] turns the cgroup memory limit and the memory config into a [`MemoryPlan`]
//!   (RAM tier, I/O buffers, headroom, in-flight bytes), and [`Share`] enforces the bound of
//!   each in-flight [`Part`]; [`read_memory_limit`] reads the limit.
//!
//! - [`huge_pages_only_where_advised`] keeps the kernel from charging 2 MiB for each region of
//!   the heap the process touches, while the store's I/O buffers keep their huge pages
//!   ([`huge_pages`]).
//!
//! # Unsafe
//! The workspace denies `unsafe_code`. Two items in [`cpu`] and two in [`huge_pages`] relax it,
//! because the affinity syscalls (`sched_getaffinity`, `sched_setaffinity`) and `prctl` have no
//! safe wrapper in `std` or `libc`; each block carries a `// SAFETY:` comment.

pub mod cgroup;
pub mod cpu;
pub mod huge_pages;
pub mod memory;

pub use cgroup::{
    CgroupVersion, MemoryCgroup, MemoryUsage, memory_cgroup, memory_cgroup_at, read_memory_limit,
    read_memory_limit_at, read_memory_usage,
};
pub use cpu::{
    CpuQuota, affinity_mask, pin_current_thread, plan_cpus, read_cpu_quota, read_cpu_quota_at,
    worker_cpus,
};
pub use huge_pages::{HugePagesPolicy, huge_pages_only_where_advised, huge_pages_policy_flags};
pub use memory::{
    BASE_RSS, CONNECTION_BYTES, CONNECTIONS_PER_WORKER_MAX, CONNECTIONS_PER_WORKER_MIN, Charge,
    HTTP2_CONNECTIONS_PER_WORKER, HTTP2_STREAM_BYTES, Http2Limits, Http2Settings, IN_FLIGHT_MAX,
    IN_FLIGHT_NO_LIMIT, IN_FLIGHT_SHARE_PERCENT, IO_BUFFERS_MAX_PER_WORKER,
    IO_BUFFERS_MIN_PER_WORKER, IO_BUFFERS_NO_LIMIT_PER_WORKER, IO_BUFFERS_SHARE_DIVISOR,
    LimitSource, MemoryPlan, MemorySettings, NO_LIMIT_RAM_TIER_CAP, Part, RamTierSource, Share,
    connection_budget_per_worker, connections_per_worker, fits, http2_borrowable,
    http2_connection_bytes, http2_connections_per_address, http2_limits, io_buffers_per_worker,
    part_bound, plan_memory, plan_memory_with_ram, read_mem_total, read_mem_total_at,
};
