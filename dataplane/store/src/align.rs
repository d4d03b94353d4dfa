//! The 4096-byte alignment of O_DIRECT: the unit the record format lays records out in and
//! every buffer, offset and length of the disk I/O (`io`, which re-exports it) keeps to. A leaf,
//! so the record format need not import the I/O engines.

/// The alignment of every buffer, offset and length that goes through O_DIRECT.
pub const ALIGN: usize = 4096;

/// Round `n` up to the next multiple of [`ALIGN`].
pub const fn align_up(n: u64) -> u64 {
    n.div_ceil(ALIGN as u64) * ALIGN as u64
}
