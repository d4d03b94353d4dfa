//! Content codings the cache may apply itself (issue 33 §1): which one a request accepts, and
//! whether a response may be compressed by the cache. Pure: the proxy compresses.
//!
//! - [`negotiate`]: Accept-Encoding (RFC 9110 12.5.3) into one of four buckets, zstd, br, gzip
//!   or identity, q-values honoured; the bucket is what a compressed response varies on, so
//!   the variants of an object stay at most four whatever the clients send.
//! - [`eligible`]: a response the cache may compress: a 200 the origin sent without a content
//!   coding, of a compressible media type, at least the minimum size when its length is known,
//!   and without `Cache-Control: no-transform` (RFC 9111 5.2.2.6 / RFC 9110 7.7).
//! - [`etag_for`]: the validator of a compressed representation. A strong ETag is suffixed
//!   per coding (`"v1"` becomes `"v1-gzip"`, RFC 9110 8.8.3: another representation has
//!   another strong validator), so a conditional request never matches the wrong one.

use std::borrow::Cow;

use http::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG,
    HeaderName, VARY,
};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::syntax;

/// A content coding the cache produces (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Coding {
    Zstd,
    Br,
    Gzip,
    Identity,
}

/// The codings the cache produces, in the order it prefers them when a client weighs several
/// alike: zstd and brotli make smaller bodies than gzip at the levels an edge can afford.
pub const PREFERENCE: [Coding; 3] = [Coding::Zstd, Coding::Br, Coding::Gzip];

impl Coding {
    /// The content-coding token (Content-Encoding, the Vary bucket, metric labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Br => "br",
            Coding::Gzip => "gzip",
            Coding::Identity => "identity",
        }
    }

    fn of_token(token: &str) -> Option<Coding> {
        // x-gzip is gzip (RFC 9110 8.4.1.3).
        match token {
            t if t.eq_ignore_ascii_case("zstd") => Some(Coding::Zstd),
            t if t.eq_ignore_ascii_case("br") => Some(Coding::Br),
            t if t.eq_ignore_ascii_case("gzip") || t.eq_ignore_ascii_case("x-gzip") => {
                Some(Coding::Gzip)
            }
            t if t.eq_ignore_ascii_case("identity") => Some(Coding::Identity),
            _ => None,
        }
    }
}

/// A qvalue in thousandths (RFC 9110 12.4.2: `0`, `1` or up to three decimals); `None` when
/// malformed (the element is then ignored, as a recipient may).
fn qvalue(text: &str) -> Option<u16> {
    let t = text.trim_matches([' ', '\t']);
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// What an Accept-Encoding says of each coding: its weight, explicit or through `*`.
#[derive(Debug, Default)]
struct Weights {
    explicit: [Option<u16>; 4],
    any: Option<u16>,
}

impl Weights {
    fn of(headers: &HeaderMap) -> Weights {
        let mut w = Weights::default();
        for line in headers.get_all(ACCEPT_ENCODING) {
            let Ok(text) = line.to_str() else {
                continue;
            };
            for element in syntax::split_list(text) {
                let mut params = element.split(';');
                let token = params.next().unwrap_or("").trim_matches([' ', '\t']);
                let mut q = Some(1000);
                for p in params {
                    if let Some((k, v)) = p.split_once('=')
                        && k.trim_matches([' ', '\t']).eq_ignore_ascii_case("q")
                    {
                        q = qvalue(v);
                    }
                }
                let Some(q) = q else {
                    continue;
                };
                if token == "*" {
                    w.any = Some(w.any.map_or(q, |a| a.max(q)));
                } else if let Some(c) = Coding::of_token(token) {
                    let slot = &mut w.explicit[c as usize];
                    *slot = Some(slot.map_or(q, |s| s.max(q)));
                }
            }
        }
        w
    }

    fn weight(&self, c: Coding) -> u16 {
        self.explicit[c as usize].or(self.any).unwrap_or(0)
    }
}

/// The coding to answer a request with, among `offered` (the codings the cache will produce
/// for this response, a subset of [`PREFERENCE`]): the one the client weighs highest, ties to
/// the cache's preference; identity when the client sent no Accept-Encoding (some clients
/// that send none cannot decode), accepts none of the offered ones, or names identity with a
/// higher weight. A client that refuses identity too (`identity;q=0`) still gets it: the cache never
/// answers 406 for a representation the origin sent.
pub fn negotiate(headers: &HeaderMap, offered: &[Coding]) -> Coding {
    if !headers.contains_key(ACCEPT_ENCODING) {
        return Coding::Identity;
    }
    let w = Weights::of(headers);
    let mut best = (0u16, Coding::Identity);
    for &c in PREFERENCE.iter().filter(|c| offered.contains(c)) {
        let q = w.weight(c);
        if q > best.0 {
            best = (q, c);
        }
    }
    // Identity is the fallback (acceptable unless refused, RFC 9110 12.5.3): it wins over an
    // accepted coding only when the client weighs it higher by name.
    let identity = w.explicit[Coding::Identity as usize];
    if best.0 == 0 || identity.is_some_and(|q| q > best.0) {
        return Coding::Identity;
    }
    best.1
}

/// Settings of the cache's own compression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressionConfig {
    /// Media types compressed: `type/subtype`, `type/*`, or `*/*+suffix` (e.g. `*/*+json`).
    pub types: Vec<String>,
    /// Responses whose Content-Length is below this are sent as they are.
    pub min_size: u64,
    /// The level of each coding.
    pub levels: Levels,
}

/// The level of each coding the cache makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// 1 to 9.
    pub gzip: u32,
    /// 0 to 11.
    pub br: u32,
    /// 1 to 19.
    pub zstd: u32,
}

/// The default levels, chosen by measurement on a corpus of JavaScript, CSS, JSON and SVG from
/// npm packages (bench/BENCHMARKS.md, "Compression"; `bench/compress.sh --skip-caches`): each
/// object is compressed once, at its fill, and served compressed many times, so a level past
/// the cheapest pays while it stays near or above ~100 MB/s per core, well above the rate an
/// origin delivers misses. gzip 4 runs at about twice gzip 6's rate for 3.6% more bytes (6 was
/// at ~45 MB/s); brotli 5 is 9% smaller than brotli 4 (the largest step of the sweep) at
/// ~50 MB/s; zstd 6 is at ~100 MB/s and 3% smaller than zstd 5.
pub const DEFAULT_LEVELS: Levels = Levels {
    gzip: 4,
    br: 5,
    zstd: 6,
};

impl Levels {
    /// The level of `coding` (0 for identity).
    pub fn of(&self, coding: Coding) -> u32 {
        match coding {
            Coding::Zstd => self.zstd,
            Coding::Br => self.br,
            Coding::Gzip => self.gzip,
            Coding::Identity => 0,
        }
    }
}

/// The media types compressed by default: text, scripts, JSON, XML, SVG and WebAssembly.
pub const DEFAULT_TYPES: [&str; 9] = [
    "text/*",
    "application/javascript",
    "application/json",
    "application/xml",
    "application/wasm",
    "image/svg+xml",
    "*/*+json",
    "*/*+xml",
    "application/manifest+json",
];

/// The default minimum size: below about a kilobyte a compressed body saves less than its
/// coding costs.
pub const DEFAULT_MIN_SIZE: u64 = 1024;

impl Default for CompressionConfig {
    fn default() -> Self {
        CompressionConfig {
            types: DEFAULT_TYPES.iter().map(|t| t.to_string()).collect(),
            min_size: DEFAULT_MIN_SIZE,
            levels: DEFAULT_LEVELS,
        }
    }
}

/// Whether the media type of `content_type` (parameters ignored, case-insensitive) is among
/// `types`.
pub fn compressible_type(content_type: &str, types: &[String]) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim_matches([' ', '\t']);
    let Some((top, sub)) = essence.split_once('/') else {
        return false;
    };
    if top.is_empty() || sub.is_empty() {
        return false;
    }
    types.iter().any(|t| {
        if let Some(suffix) = t.strip_prefix("*/*") {
            // `*/*+json`: any subtype with that structured-syntax suffix.
            let (sub, suffix) = (sub.as_bytes(), suffix.as_bytes());
            return !suffix.is_empty()
                && sub.len() >= suffix.len()
                && sub[sub.len() - suffix.len()..].eq_ignore_ascii_case(suffix);
        }
        // `top/sub` or `top/*`: `t` starts with `top` and a `/` (`top` has none, so that is
        // `t`'s first), compared in place without searching `t` for it.
        let t = t.as_bytes();
        let Some((tt, rest)) = t.split_at_checked(top.len()) else {
            return false;
        };
        match rest.split_first() {
            Some((b'/', ts)) if tt.eq_ignore_ascii_case(top.as_bytes()) => {
                ts == b"*" || ts.eq_ignore_ascii_case(sub.as_bytes())
            }
            _ => false,
        }
    })
}

/// Why a response is sent as the origin coded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ineligible {
    /// Not a 200 (a 206's range is of the origin's representation).
    Status,
    /// The origin already applied a content coding: never compressed twice.
    AlreadyCoded,
    /// `Cache-Control: no-transform`.
    NoTransform,
    /// No Content-Type, or one not in the configured list.
    Type,
    /// Content-Length below the minimum.
    Small,
}

impl Ineligible {
    pub fn as_str(self) -> &'static str {
        match self {
            Ineligible::Status => "status",
            Ineligible::AlreadyCoded => "already-coded",
            Ineligible::NoTransform => "no-transform",
            Ineligible::Type => "type",
            Ineligible::Small => "small",
        }
    }
}

/// Whether the cache may compress a response of `status` with `headers` (see the module doc).
pub fn eligible(
    status: StatusCode,
    headers: &HeaderMap,
    cfg: &CompressionConfig,
) -> Result<(), Ineligible> {
    if status != StatusCode::OK {
        return Err(Ineligible::Status);
    }
    // The type first: most responses an edge fills (images, video, archives) stop here, before
    // Cache-Control is parsed.
    let typed = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| compressible_type(t, &cfg.types));
    if !typed {
        return Err(Ineligible::Type);
    }
    let coded = headers.get_all(CONTENT_ENCODING).iter().any(|v| {
        v.to_str().map_or(true, |t| {
            syntax::split_list(t)
                .any(|c| !c.trim_matches([' ', '\t']).eq_ignore_ascii_case("identity"))
        })
    });
    if coded {
        return Err(Ineligible::AlreadyCoded);
    }
    let no_transform = super::cache_control::CacheControl::from_field(headers, &CACHE_CONTROL)
        .is_some_and(|cc| cc.no_transform);
    if no_transform {
        return Err(Ineligible::NoTransform);
    }
    let len = syntax::content_length(headers);
    if len.is_some_and(|n| n < cfg.min_size) {
        return Err(Ineligible::Small);
    }
    Ok(())
}

/// The ETag of the `coding` representation made from a response with `etag`: a strong one
/// suffixed with the coding inside its quotes (`"v1"` → `"v1-gzip"`), a weak one likewise
/// (`W/"v1"` → `W/"v1-gzip"`); `None` for identity or a value that is no entity-tag.
pub fn etag_for(etag: &HeaderValue, coding: Coding) -> Option<HeaderValue> {
    if coding == Coding::Identity {
        return None;
    }
    let text = etag.to_str().ok()?.trim_matches([' ', '\t']);
    let (weak, opaque) = match text.strip_prefix("W/") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let inner = opaque.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('"') {
        return None;
    }
    let value = format!(
        "{}\"{inner}-{}\"",
        if weak { "W/" } else { "" },
        coding.as_str()
    );
    HeaderValue::from_str(&value).ok()
}

/// The field that marks a stored response as compressed by the cache, with the coding it
/// applied (`edgecache-coded: gzip`): its validators are the origin's with the coding's suffix
/// ([`origin_view`] takes it off to revalidate). The cache's own: never sent to a client or a
/// peer, never taken from an origin.
pub const CODED: HeaderName = HeaderName::from_static("edgecache-coded");

/// The fields of the `coding` representation the cache makes of a response with `headers`
/// (which [`eligible`] allowed): Content-Encoding, no Content-Length (the compressed length is
/// known only at the end), the ETag of [`etag_for`], Vary naming Accept-Encoding (the
/// representation depends on it), and the [`CODED`] mark. Identity changes only Vary: the
/// identity response of a compressible one varies on Accept-Encoding too, or it would answer
/// clients that get a compressed one.
pub fn compressed_fields(headers: &mut HeaderMap, coding: Coding) {
    vary_on_accept_encoding(headers);
    if coding == Coding::Identity {
        return;
    }
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.as_str()));
    headers.remove(CONTENT_LENGTH);
    match headers.get(ETAG).and_then(|e| etag_for(e, coding)) {
        Some(tag) => {
            headers.insert(ETAG, tag);
        }
        // A value that is no entity-tag validates nothing of the new representation.
        None => {
            headers.remove(ETAG);
        }
    }
    headers.insert(CODED, HeaderValue::from_static(coding.as_str()));
}

/// Add Accept-Encoding to Vary unless it is named already or Vary is `*`.
pub(crate) fn vary_on_accept_encoding(headers: &mut HeaderMap) {
    let named = headers.get_all(VARY).iter().any(|v| {
        v.to_str().is_ok_and(|t| {
            syntax::split_list(t).any(|f| {
                let f = f.trim_matches([' ', '\t']);
                f == "*" || f.eq_ignore_ascii_case("accept-encoding")
            })
        })
    });
    if !named {
        headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

/// The coding the cache applied to a stored response, from its [`CODED`] mark.
pub fn coded(headers: &HeaderMap) -> Option<Coding> {
    let v = headers.get(CODED)?.to_str().ok()?;
    Coding::of_token(v).filter(|c| *c != Coding::Identity)
}

/// The fields of a stored response as the origin sent them, as far as validation reads them:
/// for a response the cache compressed, its ETag without the coding's suffix and no
/// Content-Length or Content-Encoding (they describe the cache's representation); any other
/// response as it is.
pub fn origin_view(headers: &HeaderMap) -> Cow<'_, HeaderMap> {
    let Some(coding) = coded(headers) else {
        return Cow::Borrowed(headers);
    };
    let mut h = headers.clone();
    h.remove(CODED);
    h.remove(CONTENT_LENGTH);
    h.remove(CONTENT_ENCODING);
    let origin_tag = headers
        .get(ETAG)
        .and_then(|e| e.to_str().ok())
        .and_then(|t| {
            let suffix = format!("-{}\"", coding.as_str());
            let cut = t.strip_suffix(suffix.as_str())?;
            HeaderValue::from_str(&format!("{cut}\"")).ok()
        });
    match origin_tag {
        Some(tag) => {
            h.insert(ETAG, tag);
        }
        None => {
            h.remove(ETAG);
        }
    }
    Cow::Owned(h)
}

/// Fields the origin sent (a 304's, a HEAD's) made fit to update a stored response the cache
/// compressed with `coding`: an ETag gets the coding's suffix ([`etag_for`]), as the stored
/// one has, and Content-Encoding or Content-Length of the origin's identity are left out.
pub fn received_for_coded(received: &HeaderMap, coding: Coding) -> HeaderMap {
    let mut h = received.clone();
    h.remove(CONTENT_LENGTH);
    h.remove(CONTENT_ENCODING);
    h.remove(CODED);
    if let Some(tag) = received.get(ETAG) {
        match etag_for(tag, coding) {
            Some(t) => {
                h.insert(ETAG, t);
            }
            None => {
                h.remove(ETAG);
            }
        }
    }
    h
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ae(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const ALL: [Coding; 3] = PREFERENCE;

    #[test]
    fn accept_encoding_falls_into_four_buckets() {
        use Coding::*;
        for (values, want) in [
            (&[][..], Identity),
            (&[""][..], Identity),
            (&["gzip, deflate, br"][..], Br),
            (&["gzip, deflate, br, zstd"][..], Zstd),
            (&["gzip, deflate"][..], Gzip),
            (&["deflate"][..], Identity),
            (&["GZIP"][..], Gzip),
            (&["x-gzip"][..], Gzip),
            (&["br;q=0.5, gzip;q=0.9"][..], Gzip),
            (&["br;q=0.9, gzip;q=0.9"][..], Br),
            (&["*"][..], Zstd),
            (&["*;q=0.5, zstd;q=0"][..], Br),
            (&["gzip;q=0"][..], Identity),
            (&["identity"][..], Identity),
            (&["identity;q=1, gzip;q=0.5"][..], Identity),
            (&["gzip;q=1.0, identity;q=0.5"][..], Gzip),
            (&["gzip;q=0.001"][..], Gzip),
            (&["gzip;q=1.5"][..], Identity),
            (&["gzip;q=0.0001"][..], Identity),
            (&["gzip;q=abc, br"][..], Br),
            (&["gzip", "br"][..], Br),
            (&[" gzip ; q=0.8 , br ; Q=0.7 "][..], Gzip),
            (&["identity;q=0, *;q=0"][..], Identity),
        ] {
            assert_eq!(negotiate(&ae(values), &ALL), want, "{values:?}");
        }
        // Only what the cache offers for this response.
        assert_eq!(
            negotiate(&ae(&["zstd, br, gzip"]), &[Coding::Gzip]),
            Coding::Gzip
        );
        assert_eq!(negotiate(&ae(&["zstd"]), &[Coding::Gzip]), Coding::Identity);
        assert_eq!(negotiate(&ae(&["zstd"]), &[]), Coding::Identity);
    }

    #[test]
    fn qvalues_are_read_as_rfc_9110_writes_them() {
        for (text, want) in [
            ("1", Some(1000)),
            ("1.", Some(1000)),
            ("1.000", Some(1000)),
            ("0", Some(0)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.123", Some(123)),
            ("1.001", None),
            ("2", None),
            ("0.1234", None),
            ("", None),
            ("-1", None),
            (".5", None),
        ] {
            assert_eq!(qvalue(text), want, "{text:?}");
        }
    }

    #[test]
    fn compressible_types_by_type_wildcard_and_suffix() {
        let types = CompressionConfig::default().types;
        for (ct, want) in [
            ("text/html", true),
            ("text/css; charset=utf-8", true),
            ("TEXT/Plain", true),
            ("application/javascript", true),
            ("application/json", true),
            ("application/ld+json", true),
            ("application/atom+xml", true),
            ("image/svg+xml", true),
            ("application/wasm", true),
            ("image/png", false),
            ("application/octet-stream", false),
            ("video/mp4", false),
            ("text", false),
            ("/json", false),
            ("text/", false),
            ("texts/html", false),
            ("tex/html", false),
            ("text/html/x", true),
            ("application/json/x", false),
            ("application/xjson", false),
            ("", false),
        ] {
            assert_eq!(compressible_type(ct, &types), want, "{ct:?}");
        }
    }

    fn response(fields: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in fields {
            h.append(
                http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn only_plain_200s_of_compressible_types_are_eligible() {
        let cfg = CompressionConfig::default();
        let ok = |s: u16, f: &[(&str, &str)]| {
            eligible(StatusCode::from_u16(s).unwrap(), &response(f), &cfg)
        };
        let js = ("content-type", "application/javascript");
        assert_eq!(ok(200, &[js, ("content-length", "5000")]), Ok(()));
        assert_eq!(ok(200, &[js]), Ok(()), "unknown length (chunked)");
        assert_eq!(ok(200, &[js, ("content-encoding", "identity")]), Ok(()));
        assert_eq!(ok(206, &[js]), Err(Ineligible::Status));
        assert_eq!(ok(404, &[js]), Err(Ineligible::Status));
        assert_eq!(
            ok(200, &[js, ("content-encoding", "gzip")]),
            Err(Ineligible::AlreadyCoded)
        );
        assert_eq!(
            ok(200, &[js, ("content-encoding", "br")]),
            Err(Ineligible::AlreadyCoded)
        );
        assert_eq!(
            ok(200, &[js, ("cache-control", "public, No-Transform")]),
            Err(Ineligible::NoTransform)
        );
        assert_eq!(
            ok(200, &[("content-type", "image/jpeg")]),
            Err(Ineligible::Type)
        );
        assert_eq!(ok(200, &[]), Err(Ineligible::Type));
        assert_eq!(
            ok(200, &[js, ("content-length", "1023")]),
            Err(Ineligible::Small)
        );
        assert_eq!(ok(200, &[js, ("content-length", "1024")]), Ok(()));
    }

    #[test]
    fn each_coding_has_its_own_validator() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(etag_for(&v("\"v1\""), Coding::Gzip), Some(v("\"v1-gzip\"")));
        assert_eq!(etag_for(&v("\"v1\""), Coding::Br), Some(v("\"v1-br\"")));
        assert_eq!(
            etag_for(&v("W/\"v1\""), Coding::Zstd),
            Some(v("W/\"v1-zstd\""))
        );
        assert_eq!(etag_for(&v("\"\""), Coding::Gzip), Some(v("\"-gzip\"")));
        assert_eq!(etag_for(&v("\"v1\""), Coding::Identity), None);
        assert_eq!(etag_for(&v("v1"), Coding::Gzip), None, "not an entity-tag");
        assert_eq!(etag_for(&v("\"a\"b\""), Coding::Gzip), None);
        // Distinct from the identity one and from each other: no wrong 304.
        let tags: Vec<_> = PREFERENCE
            .iter()
            .map(|&c| etag_for(&v("\"x\""), c))
            .collect();
        assert!(tags.iter().all(|t| t.as_ref() != Some(&v("\"x\""))));
        assert_ne!(tags[0], tags[1]);
        assert_ne!(tags[1], tags[2]);
    }
}
