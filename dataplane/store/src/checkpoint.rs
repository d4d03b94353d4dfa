//! The restart checkpoint: the index, each segment's epoch, the segments the log was being
//! written in (the replay set) and the sequence counter, in `index.ckpt` (`Store::checkpoint`),
//! so a start restores the index with one sequential read and scans only the log written
//! since, instead of reading every record header on the disk.
//!
//! It is written while the store runs (and at a clean stop), without stopping the writers:
//! the segments active or pinned by a writer when it starts or ends, or reclaimed meanwhile,
//! are its replay set, and their entries are not trusted. A start that finds a whole
//! checkpoint of this store (magic, nonce, layout and index bound, xxh3 of the file) keeps the
//! entries of every other segment still at the epoch it recorded, and scans the replay set and
//! every segment whose epoch changed since (reclaimed after it: the log written since); the
//! records found there replace the older entries of their objects (one header read per
//! replaced entry). No file, a torn or foreign one: the full scan.
//!
//! Why the kept entries are right: a segment is written only while active (or pinned by a
//! writer), and becomes active again only by a reclaim, which changes its epoch (its header is
//! synced before any record of the new epoch). Outside that, the only writes into a segment are
//! in place over a record's header: a tombstone (a purge, a replacement, an abort) or a meta
//! rewrite. An entry whose record was purged after the checkpoint reads a dead header when it
//! is opened: a miss, and the entry leaves the index. So a purge answered before a kill stays
//! purged, whatever checkpoint the next start finds. The file stays (it is valid until
//! replaced); an older one only means a longer replay.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use xxhash_rust::xxh3::Xxh3;

use super::index::Index;
use super::layout::Layout;

pub(crate) const CKPT_FILE: &str = "index.ckpt";
const MAGIC: &[u8; 8] = b"ECIDXCK2";

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
    /// Segments the log was being written in: scanned whatever their epoch.
    pub replay: Vec<u32>,
    pub max_seq: u64,
    pub index: Index,
}

/// Where the log was when the index was written (taken after it): each segment's epoch and
/// the replay set.
pub(crate) struct LogState {
    pub epochs: Vec<u64>,
    pub replay: Vec<u32>,
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
/// fsynced): the header, the index, then the log state `after` gives once the index is
/// written; its size in bytes.
pub(crate) fn write(
    dir: &Path,
    id: Identity,
    max_seq: u64,
    index: &Index,
    after: impl FnOnce() -> LogState,
) -> io::Result<u64> {
    let tmp = dir.join(format!("{CKPT_FILE}.tmp"));
    let file = File::create(&tmp)?;
    let mut w = Hashed {
        inner: BufWriter::with_capacity(1 << 20, file),
        h: Xxh3::new(),
    };
    write_header(&mut w, id, max_seq)?;
    index.write_to(&mut w)?;
    let log = after();
    for e in &log.epochs {
        w.write_all(&e.to_le_bytes())?;
    }
    w.write_all(&(log.replay.len() as u64).to_le_bytes())?;
    for s in &log.replay {
        w.write_all(&s.to_le_bytes())?;
    }
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
    let index = Index::read_from(&mut r)?;
    let mut epochs = Vec::with_capacity(id.layout.segment_count as usize);
    for _ in 0..id.layout.segment_count {
        let mut b = [0u8; 8];
        r.read_exact(&mut b)?;
        epochs.push(u64::from_le_bytes(b));
    }
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    let n = u64::from_le_bytes(b);
    if n > u64::from(id.layout.segment_count) {
        return Err(bad("replay set"));
    }
    let mut replay = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let mut b = [0u8; 4];
        r.read_exact(&mut b)?;
        let seg = u32::from_le_bytes(b);
        if seg >= id.layout.segment_count {
            return Err(bad("replay set"));
        }
        replay.push(seg);
    }
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
        replay,
        max_seq,
        index,
    })
}
