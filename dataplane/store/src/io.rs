//! Disk I/O behind a narrow owned-buffer interface, with two engines.
//!
//! - [`uring`]: tokio-uring, one ring per worker thread. The buffer is moved into the kernel
//!   operation and handed back with the result (`(io::Result<usize>, buf)`), so a dropped
//!   future cannot leave the kernel writing into freed memory.
//! - [`threads`]: a pool of std threads doing `pread`/`pwrite` (nginx's `aio threads`), answering
//!   over a tokio oneshot channel, so it works inside any tokio current-thread runtime. It is the
//!   required fallback: containerd's default seccomp profile denies `io_uring_setup` (EPERM), and
//!   `kernel.io_uring_disabled` can too. The io_uring engine sends it its large reads
//!   ([`READ_PIECE`]).
//!
//! Both engines share the same semantics, which the store relies on:
//! - `read_at` fills the first `len` bytes of the buffer (`len` at most its capacity, a multiple
//!   of 4096 for O_DIRECT) starting at `off`, sets the buffer's length to the count read and
//!   returns it; it is short only at the end of the file.
//!
//! Buffers come from a worker's [`budget::IoBudget`] (a hard bound on buffer memory, with
//! recycling); see that module. Those of 64 KiB and more sit on transparent huge pages, in a
//! region of the budget's own ([`huge_region`]).
//! - `write_at` writes the buffer's filled bytes at `off`; a short write is reported as an error
//!   (`WriteZero`), because with O_DIRECT it only happens when the disk is full.
//!
//! Unsafe code in this crate is limited to [`aligned`] (the aligned allocation), [`huge_region`]
//! (its mapping), [`uring`] (the tokio-uring buffer traits and borrowing the store's file
//! descriptors) and [`file`] (`fallocate`). Each item that needs it carries `#[allow(unsafe_code)]` and each block a
//! `// SAFETY:` comment.

pub mod aligned;
pub mod budget;
#[doc(hidden)]
pub mod crash;
pub(crate) mod file;
pub mod huge_region;
pub mod threads;
pub mod uring;

use std::future::Future;
use std::io;

pub use aligned::{ALIGN, AlignedBuf, align_up};
pub use budget::{IoBudget, IoBufferUsage};

/// Disk reads of at least this many bytes (a whole 1 MiB record, a 256 KiB chunk of a larger
/// one) go to the pool's threads on either engine, and a thread reads them in pieces of this
/// size, one after another: the disk sees at most [`threads::POOL_THREADS`] such reads in flight,
/// each at most 256 KiB, and a thread that finishes a piece starts the next at once. That is
/// Traffic Server's pattern (16 AIO threads, 256 KiB fragments), and this VM's disk gave 1 MiB
/// uniform hits 1.03-1.58x the rate of the same bodies read whole through io_uring in the same
/// rounds, which kept about 30 reads of 1 MiB in flight, each waiting 10-20 ms, and submitted and
/// reaped them a few ms late on a worker busy with its sockets (bench/BENCHMARKS.md, session 29).
/// Smaller reads (4 KiB to 128 KiB hits) stay on io_uring, whose batching costs less CPU per read.
pub const READ_PIECE: usize = 256 << 10;

/// Which I/O engine to use, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineChoice {
    /// io_uring when [`probe_uring`] succeeds, else the thread pool.
    #[default]
    Auto,
    /// io_uring, or fail to start.
    Uring,
    /// The thread pool.
    Threads,
}

/// The resolved I/O engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// io_uring through tokio-uring, one ring per worker thread.
    Uring,
    /// A pool of threads doing pread/pwrite.
    Threads,
}

impl EngineKind {
    /// The metric and log label: `"uring"` or `"threads"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Uring => "uring",
            EngineKind::Threads => "threads",
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Try to create a tiny io_uring. Fails with EPERM when seccomp or `kernel.io_uring_disabled`
/// deny it, ENOSYS on kernels without io_uring.
pub fn probe_uring() -> io::Result<()> {
    io_uring::IoUring::new(2).map(drop)
}

/// Resolve the configured engine. `Auto` picks uring when [`probe_uring`] succeeds, else threads;
/// `Uring` fails when the probe fails.
pub fn resolve(kind: EngineChoice) -> io::Result<EngineKind> {
    match kind {
        EngineChoice::Threads => Ok(EngineKind::Threads),
        EngineChoice::Uring => probe_uring().map(|()| EngineKind::Uring),
        EngineChoice::Auto => match probe_uring() {
            Ok(()) => Ok(EngineKind::Uring),
            Err(e) => {
                tracing::warn!(error = %e, "io_uring is not available, using the thread-pool engine");
                Ok(EngineKind::Threads)
            }
        },
    }
}

/// Run `f` to completion on this thread, inside the runtime a store worker of this engine
/// needs ([`resolve`]d first): `tokio_uring::start` for uring; for threads, a tokio
/// current-thread runtime with every driver and a `LocalSet` (so `spawn_local` works on both).
/// For tests, tools and examples; the proxy builds its own worker runtimes.
pub fn block_on_worker<F: Future>(kind: EngineChoice, f: F) -> io::Result<F::Output> {
    match resolve(kind)? {
        EngineKind::Uring => Ok(tokio_uring::start(f)),
        EngineKind::Threads => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(tokio::task::LocalSet::new().block_on(&rt, f))
        }
    }
}

/// Which file an operation targets: a segment, through its O_DIRECT or its buffered descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    /// Segment index.
    pub seg: u32,
    /// Use the O_DIRECT descriptor (falls back to the buffered one where O_DIRECT is unsupported).
    pub direct: bool,
}

/// The owned-buffer I/O interface both engines implement (see the module doc for semantics).
pub trait IoEngine {
    /// Read `len` bytes (at most the capacity of `buf`) into `buf` at `off`.
    fn read_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
        len: usize,
    ) -> impl Future<Output = (io::Result<usize>, AlignedBuf)>;
    /// Write the filled bytes of `buf` at `off`.
    fn write_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
    ) -> impl Future<Output = (io::Result<usize>, AlignedBuf)>;
}

/// A worker's engine: one of the two implementations, chosen at run time.
pub enum WorkerIo {
    Uring(uring::UringEngine),
    Threads(threads::ThreadsEngine),
    /// A real engine whose writes are journaled for crash tests ([`crash`]).
    CrashUring(crash::CrashIo<uring::UringEngine>),
    CrashThreads(crash::CrashIo<threads::ThreadsEngine>),
}

impl IoEngine for WorkerIo {
    async fn read_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf) {
        match self {
            WorkerIo::Uring(e) => e.read_at(file, buf, off, len).await,
            WorkerIo::Threads(e) => e.read_at(file, buf, off, len).await,
            WorkerIo::CrashUring(e) => e.read_at(file, buf, off, len).await,
            WorkerIo::CrashThreads(e) => e.read_at(file, buf, off, len).await,
        }
    }

    async fn write_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
    ) -> (io::Result<usize>, AlignedBuf) {
        match self {
            WorkerIo::Uring(e) => e.write_at(file, buf, off).await,
            WorkerIo::Threads(e) => e.write_at(file, buf, off).await,
            WorkerIo::CrashUring(e) => e.write_at(file, buf, off).await,
            WorkerIo::CrashThreads(e) => e.write_at(file, buf, off).await,
        }
    }
}

impl WorkerIo {
    /// Whether [`write_vectored_at`](Self::write_vectored_at) is one operation (io_uring).
    pub fn writes_vectored(&self) -> bool {
        matches!(self, WorkerIo::Uring(_))
    }

    /// Write `bufs` back to back from `off`: one `writev` on io_uring; on the thread pool and
    /// the crash-test engines, one write per buffer in order, stopping at the first failure.
    /// Returns the bytes written (fewer than all of them when a write came up short).
    pub async fn write_vectored_at(
        &self,
        file: FileId,
        bufs: Vec<AlignedBuf>,
        off: u64,
    ) -> (io::Result<usize>, Vec<AlignedBuf>) {
        if let WorkerIo::Uring(e) = self {
            return e.writev_at(file, bufs, off).await;
        }
        let mut done = 0;
        let mut out = Vec::with_capacity(bufs.len());
        let mut rest = bufs.into_iter();
        for buf in rest.by_ref() {
            let want = buf.len();
            let (r, buf) = self.write_at(file, buf, off + done as u64).await;
            out.push(buf);
            match r {
                Ok(n) if n == want => done += n,
                Ok(n) => {
                    done += n;
                    break;
                }
                Err(e) => {
                    out.extend(rest);
                    return (Err(e), out);
                }
            }
        }
        out.extend(rest);
        (Ok(done), out)
    }
}

/// Write all of `buf` at `off`; a short write is an error.
pub async fn write_all_at<E: IoEngine>(
    engine: &E,
    file: FileId,
    buf: AlignedBuf,
    off: u64,
) -> (io::Result<()>, AlignedBuf) {
    let want = buf.len();
    let (res, buf) = engine.write_at(file, buf, off).await;
    let res = match res {
        Ok(n) if n == want => Ok(()),
        Ok(n) => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write: {n} of {want} bytes"),
        )),
        Err(e) => Err(e),
    };
    (res, buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_runs_as_root_here() {
        // The CI machine allows io_uring; the probe must say so.
        probe_uring().unwrap();
        assert_eq!(
            resolve(EngineChoice::Auto).unwrap(),
            EngineKind::Uring,
            "auto resolves to uring when allowed"
        );
        assert_eq!(resolve(EngineChoice::Threads).unwrap(), EngineKind::Threads);
    }
}
