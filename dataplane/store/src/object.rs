//! What the store hands out for a stored object: [`ObjectRef`] (a candidate from the index, or
//! the complete ref of an opened object) and its [`DiskLocation`].

use bytes::Bytes;

use crate::state::Loc;

/// A stored object. [`Store::lookup`](crate::Store::lookup) returns *candidates*: what the index knows (where the
/// record is, its length, a 7-bit tag of its variant key), with `variant` and `meta` empty and
/// the body length unknown ([`ObjectRef::is_complete`] false); a candidate may even be another
/// key's object whose hash tag collides, which [`StoreWorker::open`](crate::StoreWorker::open) finds out
/// (`MissingOrReplaced`). The ref in an opened object ([`StoredObject::object_ref`](crate::StoredObject::object_ref)) is
/// complete: its header's variant key, meta and lengths.
#[derive(Debug, Clone)]
pub struct ObjectRef {
    /// The tag of the variant key ([`Store::variant_tag`](crate::Store::variant_tag)).
    pub variant_tag: u8,
    /// The record's length on disk (header and padded body) as the index has it: exact below
    /// 256 MiB, else a lower bound.
    pub record_len: u64,
    /// The variant key (empty until opened).
    pub variant: Bytes,
    /// The meta blob (empty until opened).
    pub meta: Bytes,
    pub(crate) primary: Bytes,
    pub(crate) loc: Loc,
    /// The index's `verified` flag at lookup.
    pub(crate) verified: bool,
    /// The header fields are filled (the record was read).
    pub(crate) complete: bool,
}

impl ObjectRef {
    /// Whether the header's fields (`variant`, `meta`, lengths) are filled in.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The body length, known once the record was read.
    pub fn body_len(&self) -> Option<u64> {
        self.complete.then_some(self.loc.body_len)
    }

    pub fn primary(&self) -> &Bytes {
        &self.primary
    }

    /// Where the record lives on disk (for tools and tests); the header length (and so the
    /// body offset) only for a complete ref, else 0.
    pub fn location(&self) -> DiskLocation {
        DiskLocation {
            segment: self.loc.seg,
            offset: self.loc.off,
            header_len: u64::from(self.loc.header_len),
            body_offset: self.loc.off + u64::from(self.loc.header_len),
        }
    }
}

/// A record's place on disk: segment file, header offset and body offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLocation {
    pub segment: u32,
    pub offset: u64,
    pub header_len: u64,
    pub body_offset: u64,
}
