//! On-disk formats: record header, segment header, superblock. Pure byte codecs.
//!
//! A record is `[header: header_len bytes][body, padded to 4096]`. Either `header_len` is a
//! multiple of 4096 and the body starts at a block of its own (large records, read in
//! aligned chunks), or the record is *packed*: `header_len` is a multiple of 8, the body follows
//! it in the same block and the record is padded to 4096 as a whole (small records, at most one
//! staging buffer, always read whole; that saves the padding of the header's block, 2 to 4 KiB
//! a record). A packed header's checksum covers the rest of its last block too (the body's
//! first bytes and any padding), so a torn write of that block never leaves a valid header over
//! a torn body start. The header (all integers little endian):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0 | 8 | magic `ECRECRD1` |
//! | 8 | 2 | version (1) |
//! | 10 | 2 | flags (bit 0: dead, a tombstone that only says how long the record is) |
//! | 12 | 4 | header_len |
//! | 16 | 8 | store nonce (random per store; records of another store or layout never match) |
//! | 24 | 8 | segment epoch (must equal the segment header's epoch) |
//! | 32 | 8 | sequence number (store-wide, increasing; the latest write of a key wins) |
//! | 40 | 8 | body_len |
//! | 48 | 4 | primary key length |
//! | 52 | 4 | variant key length |
//! | 56 | 4 | meta length |
//! | 60 | 4 | meta capacity (bytes reserved for meta; `update_meta` rewrites in place up to it) |
//! | 64 | 4 | block count (one crc32c per 64 KiB body block) |
//! | 68 | 4 | block size (65536) |
//! | 72 | 4 | crc32c of bytes `[0, used)` with this field zeroed (packed: `[0, align_up(header_len))`) |
//! | 76 | 4 | reserved (0) |
//! | 80 | .. | primary key, variant key, block crcs (4 bytes each), meta (meta capacity bytes) |
//!
//! The per-block body checksums live in the header, not in a trailer: the header is written
//! last anyway, and then a small hit reads header and body in one read at a known offset, and
//! a large one learns every checksum from its first read.

use bytes::Bytes;

use crate::align::align_up;

pub const RECORD_MAGIC: [u8; 8] = *b"ECRECRD1";
pub const SEGMENT_MAGIC: [u8; 8] = *b"ECSEGMT1";
pub const SUPER_MAGIC: [u8; 8] = *b"ECSUPER1";
pub const VERSION: u16 = 1;
/// Body checksum granularity.
pub const BLOCK: u64 = 64 * 1024;
/// Fixed part of a record header.
pub const FIXED: usize = 80;
/// Extra meta room reserved in a header, so a revalidated response with slightly different
/// headers can be rewritten in place (a packed header: see [`packed_header_len`]).
pub const META_SLACK: usize = 512;
/// The least of that room a packed record keeps (the rest comes out of its padding).
pub const MIN_PACKED_SLACK: usize = 64;
pub const FLAG_DEAD: u16 = 1;
const CRC_AT: usize = 72;

/// Largest primary or variant key accepted.
pub const MAX_KEY: usize = 64 * 1024;
/// Largest meta blob accepted.
pub const MAX_META: usize = 1024 * 1024;
/// Largest header accepted by the decoder: two maximal keys, a maximal meta blob and the
/// checksums of a 4 GiB body fit. Bounds what a corrupt header can make recovery allocate.
pub const MAX_HEADER_LEN: u64 = 4 << 20;

/// Number of checksum blocks for a body.
pub fn block_count(body_len: u64) -> u64 {
    body_len.div_ceil(BLOCK)
}

/// Header bytes a record needs without any meta slack.
fn used_len(primary: usize, variant: usize, body_len: u64, meta: usize) -> u64 {
    (FIXED + primary + variant + meta) as u64 + 4 * block_count(body_len)
}

/// Header length for the given sizes (a multiple of 4096): the header of a record whose body
/// starts at a block of its own, with [`META_SLACK`] bytes of room for a bigger meta.
pub fn header_len_for(primary: usize, variant: usize, body_len: u64, meta: usize) -> u64 {
    align_up(used_len(primary, variant, body_len, meta) + META_SLACK as u64)
}

/// Header length of a *packed* record (a multiple of 8, never of 4096): its body follows the
/// header in the same block, and the record as a whole is padded to 4096. The store packs
/// records it writes in one staging buffer (small objects), which saves the padding of the
/// header's block; a packed header's length is what tells it apart (a multiple of 4096 reads
/// the same either way: see [`record_len`]). Its room for a bigger meta is
/// [`MIN_PACKED_SLACK`] bytes plus what the padding of its last block leaves, up to
/// [`META_SLACK`] in all: a small record is not a block longer for room it may never use.
pub fn packed_header_len(primary: usize, variant: usize, body_len: u64, meta: usize) -> u64 {
    let least =
        (used_len(primary, variant, body_len, meta) + MIN_PACKED_SLACK as u64).next_multiple_of(8);
    let padding = align_up(least + body_len) - (least + body_len);
    let more = padding.min((META_SLACK - MIN_PACKED_SLACK) as u64) & !7;
    let hl = least + more;
    if !hl.is_multiple_of(4096) {
        hl
    } else if more > 0 {
        hl - 8
    } else {
        hl + 8
    }
}

/// Whether a header of `header_len` bytes is a packed one (its body in its last block).
pub fn is_packed(header_len: u64) -> bool {
    !header_len.is_multiple_of(4096)
}

/// Record length on disk: a 4096-aligned header plus the body padded to 4096, or a packed
/// header and its body padded to 4096 together.
pub fn record_len(header_len: u64, body_len: u64) -> u64 {
    if is_packed(header_len) {
        align_up(header_len + body_len)
    } else {
        header_len + align_up(body_len)
    }
}

/// A decoded record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub flags: u16,
    pub header_len: u32,
    pub nonce: u64,
    pub epoch: u64,
    pub seq: u64,
    pub body_len: u64,
    pub primary: Bytes,
    pub variant: Bytes,
    pub crcs: Vec<u32>,
    pub meta: Bytes,
    pub meta_cap: u32,
}

/// Why a header does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// No record here (zeros, or not our magic): the end of a segment's chain.
    Empty,
    /// A record of another store, layout or segment epoch: stale, not an error.
    Stale,
    /// Our magic but a bad checksum, version or bounds: torn or corrupt.
    Corrupt,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The bytes a header's checksum covers: its own (`used`), and for a packed header the rest of
/// its last block too (the body's first bytes, or padding), so a torn write of that block never
/// leaves a valid header over a torn body start.
fn checked_len(header_len: u64, used: usize) -> usize {
    if is_packed(header_len) {
        align_up(header_len) as usize
    } else {
        used
    }
}

/// Seal a packed record's first block(s) `head` (the encoded header followed by the body's
/// first bytes and padding, [`align_up`]`(header_len)` bytes): its checksum then covers them
/// all. A no-op for a header in blocks of its own.
pub fn seal(head: &mut [u8], header_len: u64) {
    if !is_packed(header_len) {
        return;
    }
    let n = align_up(header_len) as usize;
    let crc = crc_skipping(head, n);
    head[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

fn crc_skipping(b: &[u8], used: usize) -> u32 {
    let c = crc32c::crc32c(&b[..CRC_AT]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &b[CRC_AT + 4..used])
}

impl RecordHeader {
    /// Bytes of the header that are covered by its checksum.
    pub fn used(&self) -> usize {
        FIXED
            + self.primary.len()
            + self.variant.len()
            + 4 * self.crcs.len()
            + self.meta_cap as usize
    }

    pub fn is_dead(&self) -> bool {
        self.flags & FLAG_DEAD != 0
    }

    /// Offset of the meta blob inside the header.
    pub fn meta_at(&self) -> usize {
        FIXED + self.primary.len() + self.variant.len() + 4 * self.crcs.len()
    }

    /// Encode into `out` (at least `used()` bytes; the rest of `out` is zeroed).
    pub fn encode(&self, out: &mut [u8]) {
        let used = self.used();
        out.fill(0);
        out[0..8].copy_from_slice(&RECORD_MAGIC);
        out[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out[10..12].copy_from_slice(&self.flags.to_le_bytes());
        out[12..16].copy_from_slice(&self.header_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.nonce.to_le_bytes());
        out[24..32].copy_from_slice(&self.epoch.to_le_bytes());
        out[32..40].copy_from_slice(&self.seq.to_le_bytes());
        out[40..48].copy_from_slice(&self.body_len.to_le_bytes());
        out[48..52].copy_from_slice(&(self.primary.len() as u32).to_le_bytes());
        out[52..56].copy_from_slice(&(self.variant.len() as u32).to_le_bytes());
        out[56..60].copy_from_slice(&(self.meta.len() as u32).to_le_bytes());
        out[60..64].copy_from_slice(&self.meta_cap.to_le_bytes());
        out[64..68].copy_from_slice(&(self.crcs.len() as u32).to_le_bytes());
        out[68..72].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        let mut at = FIXED;
        for part in [&self.primary[..], &self.variant[..]] {
            out[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        for c in &self.crcs {
            out[at..at + 4].copy_from_slice(&c.to_le_bytes());
            at += 4;
        }
        out[at..at + self.meta.len()].copy_from_slice(&self.meta);
        let crc = crc_skipping(out, used);
        out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// A tombstone for a record: same lengths, so recovery can skip it, and nothing else.
    pub fn dead(nonce: u64, epoch: u64, seq: u64, header_len: u32, body_len: u64) -> RecordHeader {
        RecordHeader {
            flags: FLAG_DEAD,
            header_len,
            nonce,
            epoch,
            seq,
            body_len,
            primary: Bytes::new(),
            variant: Bytes::new(),
            crcs: Vec::new(),
            meta: Bytes::new(),
            meta_cap: 0,
        }
    }
}

/// From the first bytes of a header (at least [`FIXED`]), how many bytes the whole checksummed
/// header needs: `(header_len, used)`.
pub fn peek(b: &[u8]) -> Result<(u64, usize), HeaderError> {
    if b.len() < FIXED || b[0..8] != RECORD_MAGIC {
        return Err(HeaderError::Empty);
    }
    if u16_at(b, 8) != VERSION {
        return Err(HeaderError::Corrupt);
    }
    let header_len = u64::from(u32_at(b, 12));
    let used = FIXED as u64
        + u64::from(u32_at(b, 48))
        + u64::from(u32_at(b, 52))
        + 4 * u64::from(u32_at(b, 64))
        + u64::from(u32_at(b, 60));
    if header_len == 0 || header_len % 8 != 0 || header_len > MAX_HEADER_LEN || used > header_len {
        return Err(HeaderError::Corrupt);
    }
    Ok((header_len, used as usize))
}

/// Decode and verify a header. `b` must hold at least the `used` bytes reported by [`peek`]
/// (for a packed header, its whole last block: [`align_up`]`(header_len)`).
pub fn decode(b: &[u8], nonce: u64) -> Result<RecordHeader, HeaderError> {
    let (header_len, used) = peek(b)?;
    let checked = checked_len(header_len, used);
    if b.len() < checked {
        return Err(HeaderError::Corrupt);
    }
    if u32_at(b, CRC_AT) != crc_skipping(b, checked) {
        return Err(HeaderError::Corrupt);
    }
    if u64_at(b, 16) != nonce {
        return Err(HeaderError::Stale);
    }
    let plen = u32_at(b, 48) as usize;
    let vlen = u32_at(b, 52) as usize;
    let mlen = u32_at(b, 56) as usize;
    let mcap = u32_at(b, 60);
    let nblocks = u32_at(b, 64) as usize;
    let body_len = u64_at(b, 40);
    let flags = u16_at(b, 10);
    if mlen > mcap as usize || u64::from(u32_at(b, 68)) != BLOCK {
        return Err(HeaderError::Corrupt);
    }
    if flags & FLAG_DEAD == 0 && nblocks as u64 != block_count(body_len) {
        return Err(HeaderError::Corrupt);
    }
    let mut at = FIXED;
    let primary = Bytes::copy_from_slice(&b[at..at + plen]);
    at += plen;
    let variant = Bytes::copy_from_slice(&b[at..at + vlen]);
    at += vlen;
    let crcs = (0..nblocks).map(|i| u32_at(b, at + 4 * i)).collect();
    at += 4 * nblocks;
    let meta = Bytes::copy_from_slice(&b[at..at + mlen]);
    Ok(RecordHeader {
        flags,
        header_len: header_len as u32,
        nonce,
        epoch: u64_at(b, 24),
        seq: u64_at(b, 32),
        body_len,
        primary,
        variant,
        crcs,
        meta,
        meta_cap: mcap,
    })
}

/// Segment header (block 0 of every segment): magic, version, nonce, epoch, segment index, crc.
pub fn encode_segment(out: &mut [u8], nonce: u64, epoch: u64, seg: u32) {
    out[..4096].fill(0);
    out[0..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..10].copy_from_slice(&VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&nonce.to_le_bytes());
    out[24..32].copy_from_slice(&epoch.to_le_bytes());
    out[32..36].copy_from_slice(&seg.to_le_bytes());
    let crc = crc32c::crc32c(&out[..36]);
    out[36..40].copy_from_slice(&crc.to_le_bytes());
}

/// The epoch of a valid segment header of this store and segment, else `None` (empty segment).
pub fn decode_segment(b: &[u8], nonce: u64, seg: u32) -> Option<u64> {
    if b.len() < 40 || b[0..8] != SEGMENT_MAGIC || u16_at(b, 8) != VERSION {
        return None;
    }
    if u32_at(b, 36) != crc32c::crc32c(&b[..36]) || u64_at(b, 16) != nonce || u32_at(b, 32) != seg {
        return None;
    }
    Some(u64_at(b, 24))
}

/// The superblock: the store's nonce and layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub nonce: u64,
    pub segment_size: u64,
    pub segment_count: u32,
}

impl Superblock {
    pub fn encode(&self) -> [u8; 36] {
        let mut out = [0u8; 36];
        out[0..8].copy_from_slice(&SUPER_MAGIC);
        out[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out[12..20].copy_from_slice(&self.nonce.to_le_bytes());
        out[20..28].copy_from_slice(&self.segment_size.to_le_bytes());
        out[28..32].copy_from_slice(&self.segment_count.to_le_bytes());
        let crc = crc32c::crc32c(&out[..32]);
        out[32..36].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(b: &[u8]) -> Option<Superblock> {
        if b.len() != 36 || b[0..8] != SUPER_MAGIC || u16_at(b, 8) != VERSION {
            return None;
        }
        if u32_at(b, 32) != crc32c::crc32c(&b[..32]) {
            return None;
        }
        Some(Superblock {
            nonce: u64_at(b, 12),
            segment_size: u64_at(b, 20),
            segment_count: u32_at(b, 28),
        })
    }
}

/// Per-block crc32c of a body.
pub fn body_crcs(body: &[u8]) -> Vec<u32> {
    body.chunks(BLOCK as usize).map(crc32c::crc32c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_header_shares_its_block_with_the_body_and_its_checksum_covers_them() {
        let body = b"hello, packed world".repeat(100);
        let meta = Bytes::from_static(b"m");
        let hl = packed_header_len(2, 0, body.len() as u64, meta.len());
        assert!(hl.is_multiple_of(8) && !hl.is_multiple_of(4096), "{hl}");
        assert_eq!(record_len(hl, body.len() as u64), 4096);
        assert_eq!(
            record_len(4096, 1900),
            8192,
            "a header in blocks of its own"
        );
        let h = RecordHeader {
            flags: 0,
            header_len: hl as u32,
            nonce: 42,
            epoch: 1,
            seq: 1,
            body_len: body.len() as u64,
            primary: Bytes::from_static(b"/p"),
            variant: Bytes::new(),
            crcs: body_crcs(&body),
            meta,
            meta_cap: (hl as usize - FIXED - 2 - 4) as u32,
        };
        let mut block = vec![0u8; 4096];
        h.encode(&mut block[..hl as usize]);
        block[hl as usize..hl as usize + body.len()].copy_from_slice(&body);
        seal(&mut block, hl);
        assert_eq!(decode(&block, 42).unwrap(), h);
        // A body byte of the header's block torn: the header is refused with it.
        let mut torn = block.clone();
        torn[hl as usize + 10] ^= 1;
        assert_eq!(decode(&torn, 42), Err(HeaderError::Corrupt));
        // Only the header's bytes at hand: not enough to check it.
        assert_eq!(decode(&block[..hl as usize], 42), Err(HeaderError::Corrupt));
    }

    fn sample() -> RecordHeader {
        let body = vec![7u8; 200_000];
        let meta = Bytes::from_static(b"status: 200\r\n");
        let hl = header_len_for(5, 3, body.len() as u64, meta.len());
        let crcs = body_crcs(&body);
        let meta_cap = (hl as usize - FIXED - 8 - 4 * crcs.len()) as u32;
        RecordHeader {
            flags: 0,
            header_len: hl as u32,
            nonce: 42,
            epoch: 3,
            seq: 9,
            body_len: body.len() as u64,
            primary: Bytes::from_static(b"/a/b?"),
            variant: Bytes::from_static(b"gz!"),
            crcs,
            meta,
            meta_cap,
        }
    }

    #[test]
    fn header_round_trip() {
        let h = sample();
        let mut buf = vec![0u8; h.header_len as usize];
        h.encode(&mut buf);
        assert_eq!(peek(&buf).unwrap(), (u64::from(h.header_len), h.used()));
        assert_eq!(decode(&buf, 42).unwrap(), h);
        assert_eq!(decode(&buf, 43), Err(HeaderError::Stale));
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let h = sample();
        let mut buf = vec![0u8; h.header_len as usize];
        h.encode(&mut buf);
        for i in 0..h.used() {
            let mut b = buf.clone();
            b[i] ^= 0x10;
            assert!(decode(&b, 42).is_err(), "flip at {i} not detected");
        }
        assert_eq!(decode(&vec![0u8; 4096], 42), Err(HeaderError::Empty));
    }

    #[test]
    fn dead_header_keeps_lengths() {
        let d = RecordHeader::dead(1, 2, 3, 8192, 100_000);
        let mut buf = vec![0u8; 4096];
        d.encode(&mut buf);
        let got = decode(&buf, 1).unwrap();
        assert!(got.is_dead());
        assert_eq!((got.header_len, got.body_len), (8192, 100_000));
    }

    #[test]
    fn segment_and_superblock() {
        let mut b = vec![0u8; 4096];
        encode_segment(&mut b, 5, 77, 2);
        assert_eq!(decode_segment(&b, 5, 2), Some(77));
        assert_eq!(decode_segment(&b, 5, 3), None);
        let s = Superblock {
            nonce: 1,
            segment_size: 64 << 20,
            segment_count: 8,
        };
        assert_eq!(Superblock::decode(&s.encode()), Some(s));
    }
}
