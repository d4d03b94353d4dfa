//! Which index entries that share a new record's tags hold the same object.
//!
//! The index keeps 24 bits of a key's hash and 7 of its variant key's, so two variants of one
//! key share their tags one time in 128 (two keys in one window, far more rarely). Before a
//! publish replaces an entry with its tags, the writer reads that entry's header: only a record
//! of the same primary and variant key is replaced (and a newer one of those wins over the
//! publish); any other object with the tags stays. Recovery has every header in hand and
//! settles the same question by sorting (see `Store::recover`).

use super::body::read_timed;
use super::index::Rec;
use super::record;
use super::state::Loc;
use crate::io::{FileId, IoBudget, WorkerIo};
use crate::store::Store;

/// The first read of a header, and the most a header is read to (a longer one is not ours).
const FIRST_READ: u64 = 4096;
const MAX_HEADER: u64 = 4 << 20;

/// The entries with a record's tags, each with whether its header named the same object.
#[derive(Debug, Default)]
pub(crate) struct Checked(Vec<(u32, bool)>);

impl Checked {
    /// Whether the entry `rec` holds the same object: as its header said, or, for an entry
    /// indexed after the check (a racing publish, not read), as its tags say.
    pub fn same(&self, rec: Rec) -> bool {
        self.0
            .iter()
            .find(|(block, _)| *block == rec.block)
            .is_none_or(|(_, same)| *same)
    }
}

impl Store {
    /// Read the headers of the entries with tags (`primary`'s hash, `vtag`) and say which
    /// hold `primary` with `variant`. One header read each (4 KiB; none when there is no such
    /// entry, the common case of a first fill). An unreadable header is another object: the
    /// publish keeps it, and a duplicate of the same object would leave with its segment.
    pub(crate) async fn check_same(
        &self,
        io: &WorkerIo,
        budget: &IoBudget,
        primary: &[u8],
        variant: &[u8],
        vtag: u8,
    ) -> Checked {
        let mut out = Vec::new();
        for f in self.found(primary) {
            if f.vtag == vtag {
                let loc = self.loc_of(f.rec);
                let same = self.header_names(io, budget, &loc, primary, variant).await;
                out.push((f.rec.block, same));
            }
        }
        Checked(out)
    }

    /// Whether the live record at `loc` is `primary` with `variant`.
    async fn header_names(
        &self,
        io: &WorkerIo,
        budget: &IoBudget,
        loc: &Loc,
        primary: &[u8],
        variant: &[u8],
    ) -> bool {
        let file = FileId {
            seg: loc.seg,
            direct: true,
        };
        let mut want = FIRST_READ;
        loop {
            let buf = budget.alloc(want as usize).await;
            let Ok(buf) = read_timed(io, self, file, buf, want, loc.off, None).await else {
                return false;
            };
            if !self.epoch_is(loc.seg, loc.epoch) {
                return false;
            }
            let bytes = &buf.as_slice()[..want as usize];
            if let Ok((hl, used)) = record::peek(bytes)
                && used as u64 > want
                && hl > want
                && hl <= MAX_HEADER
            {
                want = crate::io::align_up(hl);
                continue;
            }
            return record::decode(bytes, self.nonce()).is_ok_and(|h| {
                !h.is_dead() && h.epoch == loc.epoch && h.primary == primary && h.variant == variant
            });
        }
    }
}
