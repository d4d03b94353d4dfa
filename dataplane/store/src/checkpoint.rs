//! The restart checkpoint. At a clean stop the store writes its index, each segment's epoch and
//! its sequence counter to `index.ckpt` (`Store::checkpoint`), so the next start restores the
//! index with one sequential read instead of reading every record header on the disk.
//!
//! The file is used at most once: the start that finds it deletes it before the store writes
//! anything. It is trusted only whole and current: the magic, the store's nonce, the segment
//! layout and the index bound must be this store's, the xxh3 of the file must match, and every
//! segment's header on disk must still carry the epoch the checkpoint recorded (a segment
//! written since has a new epoch). Anything else, or no file (a kill, a crash), is the full
//! scan. Purges stay purged either way: a removal writes its tombstone over the record's header
//! before it is answered, and an opened record whose header is dead is a miss.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use xxhash_rust::xxh3::Xxh3;

use super::index::Index;
use super::layout::Layout;

pub(crate) const CKPT_FILE: &str = "index.ckpt";
const MAGIC: &[u8; 8] = b"ECIDXCK1";

/// What a checkpoint is of: all must match the store that reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub nonce: u64,
    pub layout: Layout,
    /// `StoreConfig::index_bytes` (the index's bound comes from it and the layout).
    pub index_bytes: u64,
}

/// A checkpoint read back.
pub(crate) struct Loaded {
    pub epochs: Vec<u64>,
    pub max_seq: u64,
    pub index: Index,
}

/// Everything written goes through the hash.
struct Hashed<T> {
    inner: T,
    h: Xxh3,
}

impl<W: Write> Write for Hashed<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(b)?;
        self.h.update(&b[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Hashed<R> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(b)?;
        self.h.update(&b[..n]);
        Ok(n)
    }
}

fn write_header(w: &mut impl Write, id: Identity, max_seq: u64) -> io::Result<()> {
    w.write_all(MAGIC)?;
    for v in [
        id.nonce,
        id.layout.segment_size,
        u64::from(id.layout.segment_count),
        id.index_bytes,
        max_seq,
    ] {
        w.write_all(&v.to_le_bytes())?;
    }
    Ok(())
}

/// Write the checkpoint (a temporary file, fsynced, renamed into place, the directory
/// fsynced); its size in bytes.
pub(crate) fn write(
    dir: &Path,
    id: Identity,
    epochs: &[u64],
    max_seq: u64,
    index: &Index,
) -> io::Result<u64> {
    let tmp = dir.join(format!("{CKPT_FILE}.tmp"));
    let file = File::create(&tmp)?;
    let mut w = Hashed {
        inner: BufWriter::with_capacity(1 << 20, file),
        h: Xxh3::new(),
    };
    write_header(&mut w, id, max_seq)?;
    for e in epochs {
        w.write_all(&e.to_le_bytes())?;
    }
    index.write_to(&mut w)?;
    let sum = w.h.digest();
    let mut file = w.inner.into_inner().map_err(|e| e.into_error())?;
    file.write_all(&sum.to_le_bytes())?;
    file.sync_all()?;
    let len = file.metadata()?.len();
    drop(file);
    fs::rename(&tmp, dir.join(CKPT_FILE))?;
    File::open(dir)?.sync_all()?;
    Ok(len)
}

/// Read the checkpoint of `id`'s store, if there is one and it is whole; `Err` says why not
/// (`NotFound`: none).
pub(crate) fn load(dir: &Path, id: Identity) -> io::Result<Loaded> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let file = File::open(dir.join(CKPT_FILE))?;
    let len = file.metadata()?.len();
    let mut r = Hashed {
        inner: BufReader::with_capacity(1 << 20, file.take(len.saturating_sub(8))),
        h: Xxh3::new(),
    };
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(bad("not an index checkpoint"));
    }
    let mut fields = [0u64; 5];
    for f in &mut fields {
        let mut b = [0u8; 8];
        r.read_exact(&mut b)?;
        *f = u64::from_le_bytes(b);
    }
    let [nonce, segment_size, segment_count, index_bytes, max_seq] = fields;
    let theirs = (nonce, segment_size, segment_count, index_bytes);
    let ours = (
        id.nonce,
        id.layout.segment_size,
        u64::from(id.layout.segment_count),
        id.index_bytes,
    );
    if theirs != ours {
        return Err(bad(
            "another store's, another layout's or another index bound's",
        ));
    }
    let mut epochs = Vec::with_capacity(id.layout.segment_count as usize);
    for _ in 0..id.layout.segment_count {
        let mut b = [0u8; 8];
        r.read_exact(&mut b)?;
        epochs.push(u64::from_le_bytes(b));
    }
    let index = Index::read_from(&mut r)?;
    // Nothing may follow the index but the checksum.
    if r.read(&mut [0u8; 1])? != 0 {
        return Err(bad("trailing bytes"));
    }
    let sum = r.h.digest();
    let mut file = r.inner.into_inner().into_inner();
    let mut want = [0u8; 8];
    file.read_exact(&mut want)?;
    if u64::from_le_bytes(want) != sum {
        return Err(bad("checksum mismatch (torn or damaged)"));
    }
    Ok(Loaded {
        epochs,
        max_seq,
        index,
    })
}

/// Delete the checkpoint (and make that durable), so it is used at most once.
pub(crate) fn remove(dir: &Path) -> io::Result<()> {
    match fs::remove_file(dir.join(CKPT_FILE)) {
        Ok(()) => File::open(dir)?.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
