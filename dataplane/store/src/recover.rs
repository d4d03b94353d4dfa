//! Recovery at open: walk every segment with synchronous O_DIRECT reads.
//!
//! A segment is `[segment header][record][record]...`. The walk starts after the segment header
//! and jumps from a valid header to the next by its `record_len`, so the bodies of valid records
//! are never looked into. Where no valid record of the segment's epoch starts (a torn record
//! whose header never reached the disk, the tail of the log, data left from an older epoch), it
//! steps forward 4 KiB at a time, so records written after a torn one are still found. Headers
//! with our magic whose checksum fails are counted as torn/corrupt. Tombstones (dead headers)
//! are skipped by their length.
//!
//! Why scanning forward cannot pick up a forged header: a header is only accepted with the
//! store's random 64-bit nonce (never exposed) and the segment's current epoch, and within an
//! epoch a region is written once (a torn region only holds the torn record's own body or older
//! epochs' bytes).

use std::fs::File;

use super::layout::SEGMENT_HEADER;
use super::record::{self, HeaderError, RecordHeader};
use crate::io::AlignedBuf;
use crate::io::file::pread;

/// Read window: most small records are parsed from one 1 MiB read.
const WINDOW: usize = 1 << 20;

/// A record found by the scan.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub off: u64,
    pub header: RecordHeader,
}

#[derive(Debug, Default)]
pub(crate) struct SegScan {
    /// The segment's epoch, 0 when it has no valid segment header (never written).
    pub epoch: u64,
    pub records: Vec<Found>,
    /// Headers with our magic that failed their checksum.
    pub corrupt: u64,
    pub max_seq: u64,
}

struct Window {
    buf: AlignedBuf,
    start: u64,
    valid: usize,
}

impl Window {
    /// Make `[off, off + len)` available; returns a slice of it, or `None` past end of file.
    fn get<'a>(&'a mut self, f: &File, off: u64, len: usize) -> std::io::Result<Option<&'a [u8]>> {
        let covered = off >= self.start && off + len as u64 <= self.start + self.valid as u64;
        if !covered {
            if self.buf.capacity() < len {
                self.buf = AlignedBuf::new(len);
            }
            self.start = off;
            self.valid = pread(f, &mut self.buf, off)?;
            if self.valid < len {
                return Ok(None);
            }
        }
        let at = (off - self.start) as usize;
        Ok(Some(&self.buf.as_slice()[at..at + len]))
    }
}

/// The epoch in a segment's header (0: no valid header, never written).
pub(crate) fn segment_epoch(f: &File, seg: u32, nonce: u64) -> std::io::Result<u64> {
    let mut buf = AlignedBuf::new(4096);
    pread(f, &mut buf, 0)?;
    Ok(record::decode_segment(buf.as_slice(), nonce, seg).unwrap_or(0))
}

/// Scan one segment.
pub(crate) fn scan_segment(
    f: &File,
    seg: u32,
    seg_size: u64,
    nonce: u64,
) -> std::io::Result<SegScan> {
    let mut out = SegScan::default();
    let mut w = Window {
        buf: AlignedBuf::new(WINDOW),
        start: 0,
        valid: 0,
    };
    w.valid = pread(f, &mut w.buf, 0)?;
    let Some(epoch) = record::decode_segment(w.buf.as_slice(), nonce, seg) else {
        return Ok(out);
    };
    out.epoch = epoch;
    let mut off = SEGMENT_HEADER;
    while off + 4096 <= seg_size {
        match probe(f, &mut w, off, seg_size, nonce, epoch)? {
            Probe::Record(h, len) => {
                out.max_seq = out.max_seq.max(h.seq);
                if !h.is_dead() {
                    out.records.push(Found { off, header: h });
                }
                off += len;
            }
            Probe::Corrupt => {
                out.corrupt += 1;
                off += 4096;
            }
            Probe::Nothing => off += 4096,
            Probe::End => break,
        }
    }
    Ok(out)
}

enum Probe {
    /// A valid header of this epoch, and its record length.
    Record(RecordHeader, u64),
    /// Our magic, bad checksum or bounds: a torn or corrupt header.
    Corrupt,
    /// No record of this epoch starts here.
    Nothing,
    /// End of file.
    End,
}

fn probe(
    f: &File,
    w: &mut Window,
    off: u64,
    seg_size: u64,
    nonce: u64,
    epoch: u64,
) -> std::io::Result<Probe> {
    let Some(first) = w.get(f, off, 4096)? else {
        return Ok(Probe::End);
    };
    let (header_len, used) = match record::peek(first) {
        Ok(x) => x,
        Err(HeaderError::Corrupt) => return Ok(Probe::Corrupt),
        Err(_) => return Ok(Probe::Nothing),
    };
    if off + header_len > seg_size {
        return Ok(Probe::Corrupt);
    }
    // A packed header's checksum covers its whole last block.
    let Some(whole) = w.get(f, off, crate::io::align_up(used as u64).max(4096) as usize)? else {
        return Ok(Probe::End);
    };
    let h = match record::decode(whole, nonce) {
        Ok(h) => h,
        Err(HeaderError::Corrupt) => return Ok(Probe::Corrupt),
        Err(_) => return Ok(Probe::Nothing),
    };
    if h.epoch != epoch {
        return Ok(Probe::Nothing);
    }
    let len = record::record_len(header_len, h.body_len);
    if off + len > seg_size {
        return Ok(Probe::Corrupt);
    }
    Ok(Probe::Record(h, len))
}
