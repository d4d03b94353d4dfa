//! The index as bytes, for the restart checkpoint (`src/checkpoint.rs`): each shard's geometry
//! and its slots as they are, so a restore is a copy, not ten million inserts. The `verified`
//! flags are cleared on the way back: a body is checked again once after every start.

use std::io::{self, Read, Write};

use super::{BUCKET, EXT_BITS, Index, MIN_BUCKETS, Packed, Rec, SHARDS, Shard};

impl Index {
    /// Write every shard: its bucket count, doublings left and used slots, then its tags and
    /// records. Takes each shard's lock in turn (call it when nothing writes).
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        for m in self.shards.iter() {
            let s = match m.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            w.write_all(&(s.nb as u64).to_le_bytes())?;
            w.write_all(&s.doublings.to_le_bytes())?;
            w.write_all(&(s.used as u64).to_le_bytes())?;
            let mut tags = Vec::with_capacity(s.tags.len() * 2);
            for t in &s.tags {
                tags.extend_from_slice(&t.to_le_bytes());
            }
            w.write_all(&tags)?;
            let mut recs = Vec::with_capacity(s.recs.len() * 10);
            for p in &s.recs {
                recs.extend_from_slice(&p.0);
            }
            w.write_all(&recs)?;
        }
        Ok(())
    }

    /// Read an index written by [`Index::write_to`]; `InvalidData` when its shape is not one
    /// an index can have (the caller also checks the file's checksum).
    pub fn read_from(r: &mut impl Read) -> io::Result<Index> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        let mut shards = Vec::with_capacity(SHARDS);
        for _ in 0..SHARDS {
            let nb = read_u64(r)? as usize;
            let doublings = u32::from_le_bytes(read_array(r)?);
            let used = read_u64(r)? as usize;
            // At most 2^40 slots a shard: far past any disk, and no huge allocation from a
            // corrupt count.
            if !(MIN_BUCKETS..=(1 << 37)).contains(&nb) || doublings > EXT_BITS {
                return Err(bad("index checkpoint: shard geometry"));
            }
            let slots = nb * BUCKET;
            if used > slots {
                return Err(bad("index checkpoint: used slots"));
            }
            // Decoded a piece at a time into the index's own vectors: a restore takes the
            // index's RAM and one small buffer, not a second copy of each shard. Sized up
            // front but for a count no real shard has (a corrupt one ends at the file's end).
            let room = slots.min(1 << 24);
            let mut tags: Vec<u16> = Vec::with_capacity(room);
            read_pieces(r, slots * 2, |piece| {
                tags.extend(
                    piece
                        .chunks_exact(2)
                        .map(|c| u16::from_le_bytes([c[0], c[1]])),
                );
            })?;
            let mut recs: Vec<Packed> = Vec::with_capacity(room);
            read_pieces(r, slots * 10, |piece| {
                recs.extend(piece.chunks_exact(10).map(|c| {
                    let mut p = [0u8; 10];
                    p.copy_from_slice(c);
                    // Not verified in this run.
                    p[7] &= 0x7f;
                    Packed(p)
                }));
            })?;
            if tags.iter().filter(|&&t| t != 0).count() != used {
                return Err(bad("index checkpoint: used slots"));
            }
            shards.push(std::sync::Mutex::new(Shard {
                nb,
                doublings,
                tags,
                recs,
                used,
            }));
        }
        Ok(Index {
            shards: shards.into_boxed_slice(),
        })
    }

    /// Call `f` with every occupied slot's record of one shard (live or stale), under its lock.
    pub fn for_each_in(&self, shard: usize, mut f: impl FnMut(Rec)) {
        let s = match self.shards[shard % SHARDS].lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for (t, p) in s.tags.iter().zip(&s.recs) {
            if *t != 0 {
                f(p.rec());
            }
        }
    }
}

/// Read `len` bytes in pieces of at most 60 KiB (a multiple of the 2- and 10-byte items),
/// handing each to `f`.
fn read_pieces(r: &mut impl Read, len: usize, mut f: impl FnMut(&[u8])) -> io::Result<()> {
    const PIECE: usize = 60 * 1024;
    let mut buf = vec![0u8; PIECE.min(len)];
    let mut left = len;
    while left > 0 {
        let n = PIECE.min(left);
        r.read_exact(&mut buf[..n])?;
        f(&buf[..n]);
        left -= n;
    }
    Ok(())
}

fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    Ok(u64::from_le_bytes(read_array(r)?))
}
