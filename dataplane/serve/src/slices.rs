//! Large objects as fixed-size slices (pure: no I/O). An object larger than one slice is kept
//! as a *manifest* under its cache key (the response as stored, its freshness, with a private
//! field naming the slice size, the total length, the strong validator and a nonce) and one
//! ordinary stored object per slice under a derived key (the cache key, a slice marker, the
//! slice index and the version identity). Each slice is written atomically by the store, so
//! a crash mid-fill loses whole slices, never part of one; slices need not share a segment.
//!
//! The identity of a version is the validator, the total length and a nonce drawn when its
//! manifest is made: a purge removes the manifest, and the next one draws a new nonce, so no
//! slice written before a purge is reachable after it, even when the origin's validator did
//! not change. Slices combine only under one manifest: every slice response from the origin
//! must be a 206 of exactly that slice with the manifest's strong validator and total length
//! ([`Manifest::continuation`], checked by `policy::partial::Continuation::accepts`).
//!
//! nginx's slice module and Traffic Server's slice plugin work the same way (one cache object
//! per aligned range); here the slices are found through the manifest, never on their own.

use edgecache_policy::partial::{self, Continuation};
use http::StatusCode;
use http::header::{
    CONTENT_LENGTH, CONTENT_RANGE, ETAG, HeaderMap, HeaderName, HeaderValue, LAST_MODIFIED, VARY,
};

/// The private field of a manifest's stored response. Never sent to a client, and removed from
/// origin responses before they are stored (an origin cannot make a response a manifest).
pub const MARKER: HeaderName = HeaderName::from_static("edgecache-slices");

const META_MAGIC: &[u8; 4] = b"ECSL";

/// A sliced object's layout and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Bytes per slice (the last may be shorter).
    pub slice_size: u64,
    /// The representation's complete length.
    pub total: u64,
    /// The strong validator (an entity tag, or a strong Last-Modified) every slice carries.
    pub validator: HeaderValue,
    /// Drawn when the manifest is made: a new manifest names new slices.
    pub nonce: u64,
}

impl Manifest {
    /// The manifest of a response with `headers` (a 200, or a 206 of it), when it is sliced:
    /// longer than one slice, with a strong validator and no Vary. `None` otherwise (it is
    /// served and stored as before).
    pub fn plan(headers: &HeaderMap, total: u64, slice_size: u64, nonce: u64) -> Option<Self> {
        if slice_size == 0 || total <= slice_size || headers.contains_key(VARY) {
            return None;
        }
        Some(Manifest {
            slice_size,
            total,
            validator: partial::if_range_validator(headers)?,
            nonce,
        })
    }

    /// The manifest a stored response carries, if it is one.
    pub fn of(headers: &HeaderMap) -> Option<Self> {
        let v = headers.get(MARKER)?.to_str().ok()?;
        let mut it = v.splitn(5, ' ');
        if it.next()? != "v1" {
            return None;
        }
        let slice_size: u64 = it.next()?.parse().ok()?;
        let total: u64 = it.next()?.parse().ok()?;
        let nonce = u64::from_str_radix(it.next()?, 16).ok()?;
        let validator = HeaderValue::from_str(it.next()?).ok()?;
        (slice_size > 0 && total > 0).then_some(Manifest {
            slice_size,
            total,
            validator,
            nonce,
        })
    }

    /// The marker field's value ([`Manifest::of`] reads it back).
    pub fn marker(&self) -> Option<HeaderValue> {
        let v = format!(
            "v1 {} {} {:016x} {}",
            self.slice_size,
            self.total,
            self.nonce,
            self.validator.to_str().ok()?
        );
        HeaderValue::from_str(&v).ok()
    }

    /// Bytes `first..end` (end exclusive) of slice `index`, as offsets in the representation.
    pub fn bounds(&self, index: u64) -> std::ops::Range<u64> {
        let first = index.saturating_mul(self.slice_size).min(self.total);
        first..first.saturating_add(self.slice_size).min(self.total)
    }

    /// The slices that hold bytes `range` (end exclusive) of the representation.
    pub fn touched(&self, range: &std::ops::Range<u64>) -> std::ops::Range<u64> {
        let end = range.end.min(self.total);
        if range.start >= end {
            return 0..0;
        }
        range.start / self.slice_size..(end - 1) / self.slice_size + 1
    }

    /// The store key of slice `index`: the object's key, a marker no request key contains
    /// (a NUL byte), the index and the version identity.
    pub fn slice_key(&self, key: &[u8], index: u64) -> Vec<u8> {
        let mut k = key.to_vec();
        k.extend_from_slice(b"\0slice ");
        k.extend_from_slice(index.to_string().as_bytes());
        k.push(b' ');
        k.extend_from_slice(&self.identity());
        k
    }

    /// The version identity: a hash of the validator, the total length and the nonce (the
    /// sharding ring's stable hash; not a security boundary: the nonce and the check of every
    /// slice's meta are).
    fn identity(&self) -> Vec<u8> {
        let mut bytes = self.validator.as_bytes().to_vec();
        bytes.extend_from_slice(&self.total.to_be_bytes());
        bytes.extend_from_slice(&self.nonce.to_be_bytes());
        let h = edgecache_fleet::ring::hash64(&bytes);
        format!("{h:016x}{:016x}", self.nonce).into_bytes()
    }

    /// The meta blob stored with slice `index`: checked when it is read, so a record under
    /// the key that is anything else (a tag collision is caught by the store already) is not
    /// served.
    pub fn slice_meta(&self, index: u64) -> Vec<u8> {
        let mut m = META_MAGIC.to_vec();
        m.extend_from_slice(&index.to_be_bytes());
        m.extend_from_slice(&self.identity());
        m
    }

    /// Whether a stored slice with `meta` and `body_len` is slice `index` of this version.
    pub fn is_slice(&self, index: u64, meta: &[u8], body_len: u64) -> bool {
        let b = self.bounds(index);
        meta == self.slice_meta(index).as_slice() && body_len == b.end - b.start
    }

    /// The request for slice `index` from the origin (Range and If-Range bound to the
    /// validator), and the check of its answer (`Continuation::accepts` with the manifest's
    /// fields: a 206 of exactly that slice, the same strong validator and total length).
    pub fn continuation(&self, index: u64) -> Option<Continuation> {
        let b = self.bounds(index);
        (b.start < b.end).then(|| Continuation {
            first: b.start,
            last: b.end - 1,
            complete_length: self.total,
            validator: self.validator.clone(),
        })
    }

    /// Does an origin response (`status`, `headers`) to [`Manifest::continuation`]`(index)`
    /// hold slice `index` of this version? What `Continuation::accepts` checks (against the
    /// manifest's stored fields `stored`), and the response must carry the validator itself:
    /// a slice that names no version is not combined with the others.
    pub fn accepts(
        &self,
        index: u64,
        stored: &HeaderMap,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> bool {
        let carries = if self.validator.as_bytes().starts_with(b"\"") {
            headers
                .get(ETAG)
                .is_some_and(|t| t.as_bytes().trim_ascii() == self.validator.as_bytes())
        } else {
            headers.get(LAST_MODIFIED) == Some(&self.validator)
        };
        carries
            && self
                .continuation(index)
                .is_some_and(|c| c.accepts(stored, status, headers))
    }
}

/// What an origin response to a (slice-aligned) request holds, for slicing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The first byte of the body in the representation.
    pub first: u64,
    /// The body's length.
    pub len: u64,
    /// The representation's complete length.
    pub total: u64,
}

impl Received {
    /// A 200 with a Content-Length, or a 206 that `policy::partial::stored_range` accepts.
    pub fn of(status: StatusCode, headers: &HeaderMap) -> Option<Self> {
        match status {
            StatusCode::OK => {
                let len = partial::content_length(headers)?;
                Some(Received {
                    first: 0,
                    len,
                    total: len,
                })
            }
            StatusCode::PARTIAL_CONTENT => {
                let cr = partial::stored_range(headers)?;
                Some(Received {
                    first: cr.first,
                    len: cr.last - cr.first + 1,
                    total: cr.complete_length?,
                })
            }
            _ => None,
        }
    }

    /// Whether the body is the whole representation.
    pub fn whole(&self) -> bool {
        self.first == 0 && self.len == self.total
    }
}

/// The fields of the whole representation from a 206's: no Content-Range, the complete
/// length as Content-Length (what a 200 would have carried).
pub fn whole_fields(headers: &HeaderMap, total: u64) -> HeaderMap {
    let mut h = headers.clone();
    h.remove(CONTENT_RANGE);
    h.insert(CONTENT_LENGTH, HeaderValue::from(total));
    h
}

/// The `Range` a request for bytes `first..=last` of an object of unknown length sends
/// instead: from the first byte of its first slice to the last byte of its last slice.
pub fn aligned_range(first: u64, last: u64, slice_size: u64) -> Option<HeaderValue> {
    if slice_size == 0 || first > last {
        return None;
    }
    let a = first / slice_size * slice_size;
    let b = (last / slice_size)
        .checked_add(1)?
        .checked_mul(slice_size)?
        .checked_sub(1)?;
    HeaderValue::from_str(&format!("bytes={a}-{b}")).ok()
}

/// The Range a first request for one byte range (`value`, the client's Range field) sends
/// instead: widened to whole slices ([`aligned_range`]); `bytes=a-` from its slice's first
/// byte. `None` for a suffix range (its slices depend on the unknown length) or anything but
/// one byte range: the client's Range goes as it is.
pub fn aligned_request(value: &str, slice_size: u64) -> Option<HeaderValue> {
    let specs = edgecache_policy::range::parse(value)?;
    match specs.as_slice() {
        [
            edgecache_policy::range::RangeSpec::Int {
                first,
                last: Some(last),
            },
        ] => aligned_range(*first, *last, slice_size),
        [edgecache_policy::range::RangeSpec::Int { first, last: None }] => HeaderValue::from_str(
            &format!("bytes={}-", first / slice_size.max(1) * slice_size),
        )
        .ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http::header::DATE;

    fn fields(pairs: &[(HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn manifest() -> Manifest {
        Manifest::plan(&fields(&[(ETAG, "\"v1\"")]), 10_500, 1000, 7).unwrap()
    }

    #[test]
    fn only_large_objects_with_a_strong_validator_and_no_vary_are_sliced() {
        let strong = fields(&[(ETAG, "\"v1\"")]);
        assert!(
            Manifest::plan(&strong, 1000, 1000, 1).is_none(),
            "fits one slice"
        );
        assert!(Manifest::plan(&strong, 1001, 1000, 1).is_some());
        assert!(Manifest::plan(&strong, 1001, 0, 1).is_none(), "slicing off");
        let weak = fields(&[(ETAG, "W/\"v1\"")]);
        assert!(Manifest::plan(&weak, 5000, 1000, 1).is_none());
        assert!(Manifest::plan(&HeaderMap::new(), 5000, 1000, 1).is_none());
        let vary = fields(&[(ETAG, "\"v1\""), (VARY, "accept-encoding")]);
        assert!(Manifest::plan(&vary, 5000, 1000, 1).is_none());
        // A Last-Modified a minute older than Date is strong (RFC 9110 8.8.2.2).
        let lm = fields(&[
            (LAST_MODIFIED, "Tue, 01 Dec 2026 10:00:00 GMT"),
            (DATE, "Tue, 01 Dec 2026 10:05:00 GMT"),
        ]);
        let m = Manifest::plan(&lm, 5000, 1000, 1).unwrap();
        assert_eq!(m.validator, "Tue, 01 Dec 2026 10:00:00 GMT");
        let fresh_lm = fields(&[
            (LAST_MODIFIED, "Tue, 01 Dec 2026 10:05:00 GMT"),
            (DATE, "Tue, 01 Dec 2026 10:05:00 GMT"),
        ]);
        assert!(Manifest::plan(&fresh_lm, 5000, 1000, 1).is_none());
    }

    #[test]
    fn the_marker_round_trips_and_garbage_is_no_manifest() {
        let m = manifest();
        let mut h = HeaderMap::new();
        h.insert(MARKER, m.marker().unwrap());
        assert_eq!(Manifest::of(&h), Some(m));
        for bad in [
            "v2 1000 10500 7 \"v1\"",
            "v1 0 10 7 x",
            "v1 a b c d",
            "v1 1000",
        ] {
            let mut h = HeaderMap::new();
            h.insert(MARKER, HeaderValue::from_static(bad));
            assert_eq!(Manifest::of(&h), None, "{bad}");
        }
        assert_eq!(Manifest::of(&HeaderMap::new()), None);
    }

    #[test]
    fn slice_arithmetic() {
        let m = manifest();
        assert_eq!(m.bounds(0), 0..1000);
        assert_eq!(m.bounds(10), 10_000..10_500);
        assert_eq!(m.bounds(11), 10_500..10_500);
        assert_eq!(m.touched(&(0..10_500)), 0..11);
        assert_eq!(m.touched(&(999..1001)), 0..2);
        assert_eq!(m.touched(&(1000..2000)), 1..2);
        assert_eq!(m.touched(&(10_499..20_000)), 10..11);
        assert_eq!(m.touched(&(5..5)), 0..0);
        assert_eq!(m.touched(&(11_000..12_000)), 0..0);
    }

    #[test]
    fn aligned_ranges_cover_whole_slices() {
        assert_eq!(aligned_range(1500, 2500, 1000).unwrap(), "bytes=1000-2999");
        assert_eq!(aligned_range(0, 0, 1000).unwrap(), "bytes=0-999");
        assert_eq!(aligned_range(999, 1000, 1000).unwrap(), "bytes=0-1999");
        assert!(aligned_range(5, 4, 1000).is_none());
        assert!(aligned_range(0, 4, 0).is_none());
        assert!(aligned_range(0, u64::MAX, 1000).is_none());
    }

    #[test]
    fn aligned_requests() {
        assert_eq!(
            aligned_request("bytes=1500-2500", 1000).unwrap(),
            "bytes=1000-2999"
        );
        assert_eq!(aligned_request("bytes=1500-", 1000).unwrap(), "bytes=1000-");
        assert!(aligned_request("bytes=-500", 1000).is_none(), "suffix");
        assert!(
            aligned_request("bytes=0-1, 5-6", 1000).is_none(),
            "several ranges"
        );
        assert!(aligned_request("items=0-1", 1000).is_none());
    }

    #[test]
    fn keys_and_meta_name_one_slice_of_one_version() {
        let m = manifest();
        let k = m.slice_key(b"GET h/a", 3);
        assert!(k.starts_with(b"GET h/a\0slice 3 "));
        assert_ne!(k, m.slice_key(b"GET h/a", 4));
        let other_nonce = Manifest {
            nonce: 8,
            ..m.clone()
        };
        assert_ne!(
            k,
            other_nonce.slice_key(b"GET h/a", 3),
            "a new manifest, new slices"
        );
        let other_tag = Manifest {
            validator: HeaderValue::from_static("\"v2\""),
            ..m.clone()
        };
        assert_ne!(k, other_tag.slice_key(b"GET h/a", 3));
        assert!(m.is_slice(3, &m.slice_meta(3), 1000));
        assert!(!m.is_slice(3, &m.slice_meta(3), 999), "wrong length");
        assert!(!m.is_slice(3, &m.slice_meta(4), 1000));
        assert!(!m.is_slice(3, &other_nonce.slice_meta(3), 1000));
        assert!(
            m.is_slice(10, &m.slice_meta(10), 500),
            "the short last slice"
        );
    }

    #[test]
    fn a_slice_is_accepted_only_with_the_manifests_validator_and_length() {
        let m = manifest();
        let stored = fields(&[(ETAG, "\"v1\"")]);
        let c = m.continuation(2).unwrap();
        let req = c.request_fields().unwrap();
        assert_eq!(req.get(http::header::RANGE).unwrap(), "bytes=2000-2999");
        assert_eq!(req.get(http::header::IF_RANGE).unwrap(), "\"v1\"");
        let ok = fields(&[
            (ETAG, "\"v1\""),
            (CONTENT_RANGE, "bytes 2000-2999/10500"),
            (CONTENT_LENGTH, "1000"),
        ]);
        assert!(c.accepts(&stored, StatusCode::PARTIAL_CONTENT, &ok));
        let changed = fields(&[(ETAG, "\"v2\""), (CONTENT_RANGE, "bytes 2000-2999/10500")]);
        assert!(!c.accepts(&stored, StatusCode::PARTIAL_CONTENT, &changed));
        let longer = fields(&[(ETAG, "\"v1\""), (CONTENT_RANGE, "bytes 2000-2999/10600")]);
        assert!(!c.accepts(&stored, StatusCode::PARTIAL_CONTENT, &longer));
        assert!(!c.accepts(&stored, StatusCode::OK, &fields(&[(ETAG, "\"v1\"")])));
        assert!(m.continuation(11).is_none());
        // The manifest's own check: the slice must name its version.
        assert!(m.accepts(2, &stored, StatusCode::PARTIAL_CONTENT, &ok));
        assert!(!m.accepts(2, &stored, StatusCode::PARTIAL_CONTENT, &changed));
        assert!(
            !m.accepts(3, &stored, StatusCode::PARTIAL_CONTENT, &ok),
            "another slice"
        );
        let untagged = fields(&[(CONTENT_RANGE, "bytes 2000-2999/10500")]);
        assert!(c.accepts(&stored, StatusCode::PARTIAL_CONTENT, &untagged));
        assert!(!m.accepts(2, &stored, StatusCode::PARTIAL_CONTENT, &untagged));
    }

    #[test]
    fn received_bodies() {
        let r = Received::of(StatusCode::OK, &fields(&[(CONTENT_LENGTH, "5000")])).unwrap();
        assert!(r.whole());
        assert_eq!((r.first, r.len, r.total), (0, 5000, 5000));
        let h = fields(&[
            (CONTENT_RANGE, "bytes 1000-2999/5000"),
            (CONTENT_LENGTH, "2000"),
        ]);
        let r = Received::of(StatusCode::PARTIAL_CONTENT, &h).unwrap();
        assert_eq!((r.first, r.len, r.total), (1000, 2000, 5000));
        assert!(!r.whole());
        let w = whole_fields(&h, 5000);
        assert!(w.get(CONTENT_RANGE).is_none());
        assert_eq!(w.get(CONTENT_LENGTH).unwrap(), "5000");
        let torn = fields(&[
            (CONTENT_RANGE, "bytes 1000-2999/5000"),
            (CONTENT_LENGTH, "20"),
        ]);
        assert!(Received::of(StatusCode::PARTIAL_CONTENT, &torn).is_none());
        assert!(Received::of(StatusCode::OK, &HeaderMap::new()).is_none());
        assert!(Received::of(StatusCode::NOT_FOUND, &HeaderMap::new()).is_none());
    }
}
