//! Segment files: two descriptors per segment (O_DIRECT and buffered), pre-allocation, and the
//! synchronous helpers used by recovery and by the rare synchronous writes (segment headers,
//! tombstones).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::AlignedBuf;

/// The descriptors of one segment file.
#[derive(Debug)]
pub(crate) struct SegFile {
    /// Opened with O_DIRECT, or a second buffered descriptor when the file system refuses it.
    pub direct: File,
    /// Buffered descriptor (reads of small objects go through the page cache).
    pub buffered: File,
    /// Whether `direct` really is O_DIRECT.
    pub direct_ok: bool,
}

impl SegFile {
    pub fn get(&self, direct: bool) -> &File {
        if direct { &self.direct } else { &self.buffered }
    }
}

/// Open (creating if needed) a segment file of exactly `size` bytes. A file of another size is
/// resized. Space is reserved with `fallocate` so a full disk shows up now rather than mid-write;
/// where that fails (tmpfs full, unsupported file system) the file is left sparse.
pub(crate) fn open_segment(path: &Path, size: u64) -> io::Result<SegFile> {
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let len = buffered.metadata()?.len();
    if len != size {
        buffered.set_len(size)?;
    }
    if let Err(e) = fallocate(&buffered, size) {
        tracing::debug!(path = %path.display(), error = %e, "fallocate failed; segment stays sparse");
    }
    let (direct, direct_ok) = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => (f, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::warn!(path = %path.display(), "O_DIRECT not supported here; using buffered I/O");
            (buffered.try_clone()?, false)
        }
        Err(e) => return Err(e),
    };
    Ok(SegFile {
        direct,
        buffered,
        direct_ok,
    })
}

#[allow(unsafe_code)]
fn fallocate(f: &File, size: u64) -> io::Result<()> {
    let len =
        libc::off_t::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain syscall on a descriptor we own for the duration of the call; no pointers.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The space of the filesystem holding `dir`: (total bytes, bytes free to unprivileged users).
#[allow(unsafe_code)]
pub(crate) fn filesystem_space(dir: &std::path::Path) -> io::Result<(u64, u64)> {
    let d = File::open(dir)?;
    // SAFETY: all-zero bytes are a valid `statvfs` (plain integers).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we own for the duration of the call, and a pointer to a live
    // `statvfs` the kernel fills.
    let r = unsafe { libc::fstatvfs(d.as_raw_fd(), &mut st) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok((st.f_blocks as u64 * unit, st.f_bavail as u64 * unit))
}

/// Synchronous read filling `buf`'s capacity (short at end of file).
pub(crate) fn pread(f: &File, buf: &mut AlignedBuf, off: u64) -> io::Result<usize> {
    let mut done = 0;
    let cap = buf.capacity();
    while done < cap {
        let n = f.read_at(&mut buf.full_mut()[done..cap], off + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.set_len(done);
    Ok(done)
}

/// Synchronous write of all filled bytes.
pub(crate) fn pwrite_all(f: &File, buf: &AlignedBuf, off: u64) -> io::Result<()> {
    f.write_all_at(buf.as_slice(), off)
}
