//! The embedded eBPF object (bpf/steer.bpf.c, built by build.rs) and its typed maps.
//!
//! The `#[repr(C)]` structs here are the Rust twins of `struct steer_cfg` and
//! `struct steer_obs` in bpf/steer.bpf.c; change both together.

use aya::Ebpf;
use aya::maps::{Array, HashMap, MapData, MapError, PerCpuArray, ReusePortSockArray};
use aya::programs::{ReusePortSocketFilter, SkReuseport};

/// The object file, 8-byte aligned as the ELF parser wants it.
pub(crate) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/steer.bpf.o"));

/// Most workers a group can have (`MAX_WORKERS` in the C program).
pub const MAX_WORKERS: usize = 1024;
/// Highest CPU id + 1 that `cpu` mode can map (`MAX_CPUS` in the C program).
pub const MAX_CPUS: usize = 4096;
/// "No worker / no slot" in the maps (`NO_SLOT`).
pub const NO_SLOT: u32 = u32::MAX;

pub(crate) const MODE_QUEUE: u32 = 0;
pub(crate) const MODE_CPU: u32 = 1;
pub(crate) const MODE_HASH: u32 = 2;

/// Twin of `struct steer_cfg`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Config {
    pub mode: u32,
    pub n: u32,
    pub queue_offset: u32,
    pub observe: u32,
}

// SAFETY: `Config` is `#[repr(C)]`, made only of `u32` fields with no padding, so every bit
// pattern is valid and it can be copied to and from the kernel as plain bytes.
#[allow(unsafe_code)]
unsafe impl aya::Pod for Config {}

/// One steered SYN as the program recorded it (twin of `struct steer_obs`), keyed by the
/// client's TCP port. Recorded only while observation is on ([`crate::Steering::set_observe`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observation {
    /// `skb->queue_mapping` (socket-filter program, `queue` mode); [`NO_SLOT`] otherwise.
    pub queue: u32,
    /// The CPU that processed the SYN.
    pub cpu: u32,
    /// The kernel's flow hash (`md->hash`, `cpu`/`hash` modes); 0 in `queue` mode.
    pub hash: u32,
    /// The worker the program chose; [`NO_SLOT`] when it left the choice to the kernel's hash.
    pub worker: u32,
    /// `queue` mode: the group index returned; `cpu`/`hash`: the sockarray slot.
    pub index: u32,
    /// `bpf_sk_select_reuseport()`'s result (`cpu`/`hash`); non-zero = kernel hash fallback
    /// (e.g. `-ENOENT` for a slot emptied by a closed listener).
    pub err: i32,
}

// SAFETY: `Observation` is `#[repr(C)]`, six 4-byte integer fields, no padding; every bit
// pattern is valid.
#[allow(unsafe_code)]
unsafe impl aya::Pod for Observation {}

/// The loaded object and the maps user space writes.
pub(crate) struct Loaded {
    /// Owns the programs; keeping it alive keeps them loaded (the group holds its own reference
    /// once attached).
    pub ebpf: Ebpf,
    pub cfg: Array<MapData, Config>,
    pub socks: ReusePortSockArray<MapData>,
    pub cpu_worker: Array<MapData, u32>,
    pub group_index: Array<MapData, u32>,
    pub stats: PerCpuArray<MapData, u64>,
    pub seen: HashMap<MapData, u32, Observation>,
}

/// Why loading or attaching failed, with the step that failed.
pub(crate) struct LoadError {
    pub step: &'static str,
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl LoadError {
    fn at<E: std::error::Error + Send + Sync + 'static>(
        step: &'static str,
    ) -> impl FnOnce(E) -> Self {
        move |e| Self {
            step,
            source: Box::new(e),
        }
    }
}

fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, LoadError>
where
    T: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf.take_map(name).ok_or_else(|| LoadError {
        step: "find map",
        source: format!("map `{name}` missing from the object").into(),
    })?;
    T::try_from(map).map_err(LoadError::at("open map"))
}

impl Loaded {
    /// Create the maps (this is where a missing CAP_BPF shows: EPERM).
    pub fn load() -> Result<Self, LoadError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(LoadError::at("load object (create maps)"))?;
        Ok(Self {
            cfg: take(&mut ebpf, "cfg")?,
            socks: take(&mut ebpf, "socks")?,
            cpu_worker: take(&mut ebpf, "cpu_worker")?,
            group_index: take(&mut ebpf, "group_index")?,
            stats: take(&mut ebpf, "stats")?,
            seen: take(&mut ebpf, "seen")?,
            ebpf,
        })
    }

    /// The socket-filter program (`queue` mode), loaded into the kernel.
    pub fn queue_program(&mut self) -> Result<&mut ReusePortSocketFilter, LoadError> {
        let p: &mut ReusePortSocketFilter = self
            .ebpf
            .program_mut("steer_queue")
            .ok_or_else(|| LoadError {
                step: "find program",
                source: "steer_queue missing".into(),
            })?
            .try_into()
            .map_err(LoadError::at("program type"))?;
        if p.fd().is_err() {
            p.load()
                .map_err(LoadError::at("load program steer_queue"))?;
        }
        Ok(p)
    }

    /// The SK_REUSEPORT program (`cpu`, `hash` modes), loaded into the kernel.
    pub fn select_program(&mut self) -> Result<&mut SkReuseport, LoadError> {
        let p: &mut SkReuseport = self
            .ebpf
            .program_mut("steer_select")
            .ok_or_else(|| LoadError {
                step: "find program",
                source: "steer_select missing".into(),
            })?
            .try_into()
            .map_err(LoadError::at("program type"))?;
        if p.fd().is_err() {
            p.load()
                .map_err(LoadError::at("load program steer_select"))?;
        }
        Ok(p)
    }
}
