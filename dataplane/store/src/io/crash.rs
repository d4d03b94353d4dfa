//! A crash-simulating disk, for crash-consistency tests (test-facing: hidden from the docs; a
//! store opened with [`Store::open`](crate::Store::open) journals nothing and pays one branch per write).
//!
//! [`CrashDisk::open`] opens a store whose every segment write (the workers' writes through
//! either real engine, and the store's synchronous writes: segment headers, tombstones) goes to
//! the real files as usual and is also journaled, in completion order, with its bytes. The
//! model of the disk is volatile-then-durable: a write is durable once a sync of its file
//! followed it, and until then a crash may lose it, keep it, or keep only its first sectors,
//! each write independently of the others (a drive's volatile cache persists in any order: a
//! record's header may reach the medium before its body). The store syncs a segment only
//! after writing its header at a reclaim (see the crate doc, "Recovery"), so every record
//! and tombstone write is volatile here until that segment's next reclaim.
//!
//! A test runs a workload, then picks a crash: one [`Keep`] per write issued before it
//! ([`CrashDisk::prefix`], [`CrashDisk::torn`], [`CrashDisk::reordered`] build the usual ones),
//! and [`CrashDisk::materialize`] writes the disk that crash leaves into a directory: the
//! segment files as they were when the store opened, plus the kept writes in their order; the
//! index checkpoint the store had last written before the crash (it is replaced atomically:
//! fsynced, renamed); the other small files (superblock, claim) as they are. The test then
//! opens a store on that directory (with any engine) and checks what it serves.
//!
//! - "Writes lost after the k-th": `prefix(k)`. With writes journaled in completion order,
//!   this is also what a SIGKILL at that moment leaves (completed writes are in the kernel;
//!   nothing after them was issued), and `torn(k, sectors)` adds the write in flight, cut.
//! - "A header persisted before its body": keep a header write and drop some of the body writes
//!   that precede it ([`WriteInfo::record`] says which writes lie inside a record).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{AlignedBuf, FileId, IoEngine};
use crate::dir::{LOCK_FILE, seg_path};
use crate::record::{self, FLAG_DEAD, RECORD_MAGIC, SEGMENT_MAGIC};

/// The device's sector: the unit a torn write is cut at.
pub const SECTOR: usize = 512;
/// The store's small files whose versions the journal keeps (the others are copied as they
/// are at the crash).
const JOURNALED_FILES: [&str; 1] = [crate::checkpoint::CKPT_FILE];
/// The unit of the base snapshot and of an image's rewrite.
const BLOCK: u64 = 4096;

/// What a journaled write was, from its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A segment header (a reclaim: the segment's new epoch).
    SegmentHeader,
    /// A record header (a publish, or a meta rewrite in place).
    Header,
    /// A tombstone over a record's header (replaced, purged, aborted, corrupt, or a sealed tail).
    Tombstone,
    /// Body bytes of a record.
    Body,
}

/// One journaled write.
#[derive(Debug, Clone)]
pub struct WriteInfo {
    /// Its place in the journal (completion order).
    pub index: usize,
    pub seg: u32,
    pub off: u64,
    pub len: usize,
    pub kind: WriteKind,
    /// For a header or a tombstone: the record's extent `[off, off + len)` in the segment.
    pub record: Option<(u64, u64)>,
    /// The journal's length when a sync of its segment followed it: a crash after that many
    /// writes cannot lose it.
    pub synced_at: Option<usize>,
}

impl WriteInfo {
    /// Whether a crash after `writes` writes keeps this one whatever else it loses.
    pub fn durable_after(&self, writes: usize) -> bool {
        self.synced_at.is_some_and(|t| t <= writes)
    }

    /// Whether this write lies inside the record whose header is `h` (a body write of it).
    pub fn inside(&self, h: &WriteInfo) -> bool {
        h.record.is_some_and(|(start, len)| {
            self.seg == h.seg && self.off > start && self.off < start + len
        })
    }
}

/// What a crash keeps of one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Persisted whole.
    All,
    /// Lost.
    Nothing,
    /// Only its first `n` sectors persisted (a torn write).
    Sectors(usize),
}

struct Entry {
    info: WriteInfo,
    data: Arc<Vec<u8>>,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Entry>,
    /// Small files replaced atomically (fsynced, renamed, the directory fsynced): the journal's
    /// length then, the name, the bytes.
    files: Vec<(usize, String, Arc<Vec<u8>>)>,
    /// The segment files when the store opened: their non-zero 4 KiB blocks.
    base: Vec<BTreeMap<u64, Vec<u8>>>,
    segment_size: u64,
}

/// The journal a recording store writes to (shared by the store and its workers).
#[derive(Default)]
pub(crate) struct Journal {
    inner: Mutex<Inner>,
}

impl Journal {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Record a completed write of `data` at `off` in segment `seg`.
    pub(crate) fn record(&self, seg: u32, off: u64, data: &[u8]) {
        let kind = classify(off, data);
        let record = match kind {
            WriteKind::Header | WriteKind::Tombstone => record::peek(data).ok().map(|(hl, _)| {
                let body_len = u64_at(data, 40);
                (off, record::record_len(hl, body_len))
            }),
            _ => None,
        };
        let mut g = self.lock();
        let index = g.entries.len();
        g.entries.push(Entry {
            info: WriteInfo {
                index,
                seg,
                off,
                len: data.len(),
                kind,
                record,
                synced_at: None,
            },
            data: Arc::new(data.to_vec()),
        });
    }

    /// The store replaced its file `name` (durably, atomically) with `bytes`.
    pub(crate) fn file(&self, name: &str, bytes: Vec<u8>) {
        let mut g = self.lock();
        let at = g.entries.len();
        g.files.push((at, name.to_string(), Arc::new(bytes)));
    }

    /// A sync of segment `seg` completed: its writes so far are durable.
    pub(crate) fn synced(&self, seg: u32) {
        let mut g = self.lock();
        let now = g.entries.len();
        for e in g.entries.iter_mut() {
            if e.info.seg == seg && e.info.synced_at.is_none() {
                e.info.synced_at = Some(now);
            }
        }
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn classify(off: u64, data: &[u8]) -> WriteKind {
    if off == 0 && data.starts_with(&SEGMENT_MAGIC) {
        WriteKind::SegmentHeader
    } else if data.starts_with(&RECORD_MAGIC) && data.len() >= record::FIXED {
        let flags = u16::from_le_bytes([data[10], data[11]]);
        if flags & FLAG_DEAD != 0 {
            WriteKind::Tombstone
        } else {
            WriteKind::Header
        }
    } else {
        WriteKind::Body
    }
}

/// A recording of a store's segment writes, to replay any crash of it (see the module doc).
#[derive(Clone, Default)]
pub struct CrashDisk {
    pub(crate) journal: Arc<Journal>,
}

impl std::fmt::Debug for CrashDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashDisk")
            .field("writes", &self.len())
            .finish()
    }
}

impl CrashDisk {
    pub fn new() -> CrashDisk {
        CrashDisk::default()
    }

    /// Called by the store once its segment files are open, before it writes any.
    pub(crate) fn snapshot_base(
        journal: &Journal,
        dir: &Path,
        count: u32,
        size: u64,
    ) -> io::Result<()> {
        let mut base = Vec::with_capacity(count as usize);
        for seg in 0..count {
            let mut blocks = BTreeMap::new();
            let mut f = File::open(seg_path(dir, seg))?;
            let mut block = vec![0u8; BLOCK as usize];
            let mut off = 0u64;
            loop {
                let n = read_full(&mut f, &mut block)?;
                if n == 0 {
                    break;
                }
                if block[..n].iter().any(|&b| b != 0) {
                    blocks.insert(off, block[..n].to_vec());
                }
                off += n as u64;
            }
            base.push(blocks);
        }
        let mut g = journal.lock();
        g.base = base;
        g.segment_size = size;
        g.entries.clear();
        g.files.clear();
        for name in JOURNALED_FILES {
            match fs::read(dir.join(name)) {
                Ok(b) => g.files.push((0, name.to_string(), Arc::new(b))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The journaled writes so far, in completion order.
    pub fn writes(&self) -> Vec<WriteInfo> {
        self.journal
            .lock()
            .entries
            .iter()
            .map(|e| e.info.clone())
            .collect()
    }

    /// How many writes are journaled so far (a test notes it around each operation).
    pub fn len(&self) -> usize {
        self.journal.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A crash after the first `k` writes, all persisted.
    pub fn prefix(&self, k: usize) -> Vec<Keep> {
        vec![Keep::All; k.min(self.len())]
    }

    /// A crash during write `k`: the ones before persisted, it only its first `sectors`.
    pub fn torn(&self, k: usize, sectors: usize) -> Vec<Keep> {
        let mut keep = self.prefix(k);
        if k < self.len() {
            keep.push(Keep::Sectors(sectors));
        }
        keep
    }

    /// The first `k` writes persisted (as if the drive had flushed its cache then); each later
    /// one persisted whole, lost, or (one time in eight) torn, by a seeded random draw.
    pub fn reordered(&self, k: usize, seed: u64) -> Vec<Keep> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let writes = self.writes();
        writes
            .iter()
            .map(|w| {
                if w.index < k {
                    return Keep::All;
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match x % 16 {
                    0..=6 => Keep::All,
                    7..=13 => Keep::Nothing,
                    _ => Keep::Sectors(1 + (x >> 8) as usize % (w.len / SECTOR).max(1)),
                }
            })
            .collect()
    }

    /// Write the disk a crash leaves into `to`: the store's small files from `from` (its
    /// directory), its segment files as they were at open with the writes `keep` says
    /// persisted applied in order. The crash came after `keep.len()` writes (later ones were
    /// never issued); a write a sync made durable before that is kept whatever `keep` says.
    /// `to` may hold the image of an earlier crash of this disk (its store dropped): only the
    /// blocks the base or a write touched are written again, so nothing is freed and allocated
    /// again (much faster than a fresh directory).
    pub fn materialize(&self, from: &Path, to: &Path, keep: &[Keep]) -> io::Result<()> {
        fs::create_dir_all(to)?;
        for e in fs::read_dir(to)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_segment(&name) && e.file_type()?.is_file() {
                fs::remove_file(e.path())?;
            }
        }
        for e in fs::read_dir(from)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_segment(&name)
                && !JOURNALED_FILES.contains(&name.as_str())
                && name != LOCK_FILE
                && !name.ends_with(".tmp")
                && e.file_type()?.is_file()
            {
                fs::copy(e.path(), to.join(&name))?;
            }
        }
        let g = self.journal.lock();
        // The small files as the crash left them: the last version replaced before it.
        for name in JOURNALED_FILES {
            if let Some((_, _, b)) = g
                .files
                .iter()
                .rev()
                .find(|(at, n, _)| n == name && *at <= keep.len())
            {
                fs::write(to.join(name), &b[..])?;
            }
        }
        // Every block the base or a write touched, with its content after this crash.
        let mut blocks: Vec<BTreeMap<u64, Vec<u8>>> = g.base.clone();
        for e in &g.entries {
            let Some(segment) = blocks.get_mut(e.info.seg as usize) else {
                continue;
            };
            let k = match keep.get(e.info.index) {
                Some(_) if e.info.durable_after(keep.len()) => Keep::All,
                Some(k) => *k,
                None => Keep::Nothing,
            };
            let n = match k {
                Keep::All => e.data.len(),
                Keep::Nothing => 0,
                Keep::Sectors(s) => (s * SECTOR).min(e.data.len()),
            };
            let mut at = 0;
            while at < e.data.len() {
                let off = e.info.off + at as u64;
                let block = off / BLOCK * BLOCK;
                let within = (off - block) as usize;
                let take = (BLOCK as usize - within).min(e.data.len() - at);
                let b = segment
                    .entry(block)
                    .or_insert_with(|| vec![0u8; BLOCK as usize]);
                if at < n {
                    let upto = take.min(n - at);
                    b[within..within + upto].copy_from_slice(&e.data[at..at + upto]);
                }
                at += take;
            }
        }
        for (seg, segment) in blocks.iter().enumerate() {
            let path = seg_path(to, seg as u32);
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)?;
            if f.metadata()?.len() != g.segment_size {
                f.set_len(g.segment_size)?;
            }
            for (off, b) in segment {
                f.write_all_at(b, *off)?;
            }
        }
        Ok(())
    }
}

fn is_segment(name: &str) -> bool {
    name.starts_with("seg-") && name.ends_with(".dat")
}

fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read(&mut buf[done..])? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// A worker's engine that wraps a real one and journals each write it completed.
pub struct CrashIo<E> {
    pub(crate) inner: E,
    pub(crate) journal: Arc<Journal>,
}

impl<E: IoEngine> IoEngine for CrashIo<E> {
    async fn read_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf) {
        self.inner.read_at(file, buf, off, len).await
    }

    async fn write_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
    ) -> (io::Result<usize>, AlignedBuf) {
        let (r, buf) = self.inner.write_at(file, buf, off).await;
        if let Ok(n) = r {
            self.journal
                .record(file.seg, off, &buf.as_slice()[..n.min(buf.len())]);
        }
        (r, buf)
    }
}
