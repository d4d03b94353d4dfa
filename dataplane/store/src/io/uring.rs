//! The io_uring engine: tokio-uring `read_at`/`write_at` on owned buffers, one ring per worker
//! thread. It must be created and used inside `tokio_uring::start` on that thread. Reads of
//! [`READ_PIECE`] bytes or more go to the store's thread pool instead (see there).
//!
//! The store owns the segment descriptors (std `File`s). To avoid one dup per segment per
//! worker (2 x segments x workers descriptors), each worker wraps the store's raw descriptors in
//! tokio-uring `File`s held in `ManuallyDrop`: they are never closed by the worker, and the engine
//! keeps an `Arc` of the store's files, so the descriptors outlive every operation.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Arc;

use tokio_uring::buf::{BoundedBuf, IoBuf, IoBufMut};

use super::file::SegFile;
use super::threads::ThreadsEngine;
use super::{AlignedBuf, FileId, IoEngine, READ_PIECE};

// SAFETY: `stable_ptr` points to an allocation owned by the buffer that does not move when the
// buffer value moves; `bytes_init` (filled length) <= `bytes_total` (capacity) and every byte of
// the capacity is initialised (zeroed at allocation).
#[allow(unsafe_code)]
unsafe impl IoBuf for AlignedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.capacity()
    }
}

// SAFETY: as for `IoBuf`; the mutable pointer is valid for `bytes_total` bytes and `set_init`
// only records how many bytes the kernel filled.
#[allow(unsafe_code)]
unsafe impl IoBufMut for AlignedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr()
    }
    unsafe fn set_init(&mut self, pos: usize) {
        if pos > self.len() {
            self.set_len(pos);
        }
    }
}

struct Pair {
    direct: ManuallyDrop<tokio_uring::fs::File>,
    buffered: ManuallyDrop<tokio_uring::fs::File>,
}

/// One worker's view of the segment files through its thread's io_uring, and the store's
/// thread pool for large reads ([`READ_PIECE`]).
pub struct UringEngine {
    files: Vec<Pair>,
    _owner: Arc<Vec<SegFile>>,
    large_reads: ThreadsEngine,
}

impl UringEngine {
    pub(crate) fn new(owner: Arc<Vec<SegFile>>, large_reads: ThreadsEngine) -> UringEngine {
        let files = owner
            .iter()
            .map(|f| Pair {
                direct: ManuallyDrop::new(borrow(&f.direct)),
                buffered: ManuallyDrop::new(borrow(&f.buffered)),
            })
            .collect();
        UringEngine {
            files,
            _owner: owner,
            large_reads,
        }
    }

    fn file(&self, id: FileId) -> io::Result<&tokio_uring::fs::File> {
        let p = self
            .files
            .get(id.seg as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such segment"))?;
        Ok(if id.direct { &p.direct } else { &p.buffered })
    }
}

#[allow(unsafe_code)]
fn borrow(f: &std::fs::File) -> tokio_uring::fs::File {
    // SAFETY: the descriptor is valid as long as the store's `SegFile` lives; `UringEngine`
    // holds an `Arc` of those files and wraps the result in `ManuallyDrop`, so this second
    // owner never closes the descriptor.
    let std = unsafe { std::fs::File::from_raw_fd(f.as_raw_fd()) };
    tokio_uring::fs::File::from_std(std)
}

impl UringEngine {
    /// One `writev` of the filled bytes of `bufs`, back to back from `off`.
    pub(crate) async fn writev_at(
        &self,
        file: FileId,
        bufs: Vec<AlignedBuf>,
        off: u64,
    ) -> (io::Result<usize>, Vec<AlignedBuf>) {
        match self.file(file) {
            Ok(f) => f.writev_at(bufs, off).await,
            Err(e) => (Err(e), bufs),
        }
    }
}

impl IoEngine for UringEngine {
    async fn read_at(
        &self,
        file: FileId,
        mut buf: AlignedBuf,
        off: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf) {
        if len >= READ_PIECE {
            return self.large_reads.read_at(file, buf, off, len).await;
        }
        buf.clear();
        let len = len.min(buf.capacity());
        match self.file(file) {
            Ok(f) => {
                let (res, slice) = f.read_at(buf.slice(..len), off).await;
                (res, slice.into_inner())
            }
            Err(e) => (Err(e), buf),
        }
    }

    async fn write_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
    ) -> (io::Result<usize>, AlignedBuf) {
        match self.file(file) {
            Ok(f) => f.write_at(buf, off).submit().await,
            Err(e) => (Err(e), buf),
        }
    }
}
