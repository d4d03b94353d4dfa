//! Deterministic object content.
//!
//! An object of `size` bytes with id `id` is a sequence of 32-byte records, the
//! last one truncated to fit. The record that starts at byte offset `off`
//! (a multiple of 32) reads, in ASCII:
//!
//! ```text
//! IIIIIIIIII|SSSSSSSSS|OOOOOOOOOO\n
//! ```
//!
//! where `I` is the id tag (10 characters, see [`id_tag`]), `S` the object size
//! in lowercase hex (9 digits) and `O` the record's offset in lowercase hex
//! (10 digits). So every byte says which object, which size and which offset it
//! belongs to: a misplaced, torn, shifted or mixed-up byte is detected, and the
//! first bad record tells what was served instead (`head -c 64` is readable).

use bytes::Bytes;
use std::fmt;

/// Length of one record.
pub const RECORD: u64 = 32;
/// Largest object size the pattern can describe (9 hex digits).
pub const MAX_SIZE: u64 = (1 << 36) - 1;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The 10-character tag that identifies an id inside the content.
///
/// A decimal id of at most 10 digits is written zero-padded (`0000000042`);
/// any other id is written as `#` and 9 hex digits of its FNV-1a hash.
pub fn id_tag(id: &str) -> [u8; 10] {
    let mut tag = [b'0'; 10];
    if !id.is_empty() && id.len() <= 10 && id.bytes().all(|b| b.is_ascii_digit()) {
        let start = 10 - id.len();
        tag[start..].copy_from_slice(id.as_bytes());
    } else {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in id.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        tag[0] = b'#';
        write_hex(&mut tag[1..], h);
    }
    tag
}

fn write_hex(out: &mut [u8], mut v: u64) {
    for slot in out.iter_mut().rev() {
        *slot = HEX[(v & 0xf) as usize];
        v >>= 4;
    }
}

/// Generator for one object's content.
#[derive(Clone, Copy)]
pub struct Pattern {
    size: u64,
    template: [u8; RECORD as usize],
}

impl Pattern {
    /// The pattern of object (`size`, `id`). Sizes above [`MAX_SIZE`] wrap in
    /// the size field (they are refused by the server anyway).
    pub fn new(size: u64, id: &str) -> Pattern {
        let mut template = [0u8; RECORD as usize];
        template[0..10].copy_from_slice(&id_tag(id));
        template[10] = b'|';
        write_hex(&mut template[11..20], size);
        template[20] = b'|';
        template[31] = b'\n';
        Pattern { size, template }
    }

    /// The object size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The full record that starts at `rec_off` (a multiple of 32).
    #[inline]
    pub fn record(&self, rec_off: u64) -> [u8; RECORD as usize] {
        let mut r = self.template;
        write_hex(&mut r[21..31], rec_off);
        r
    }

    /// Fill `out` with the content at `[start, start + out.len())`. Bytes past
    /// the object's end are filled as if the object continued (callers slice).
    pub fn fill(&self, start: u64, out: &mut [u8]) {
        let mut pos = start;
        let mut i = 0usize;
        // Leading partial record.
        let within = (pos % RECORD) as usize;
        if within != 0 && !out.is_empty() {
            let rec = self.record(pos - within as u64);
            let n = (RECORD as usize - within).min(out.len());
            out[..n].copy_from_slice(&rec[within..within + n]);
            i = n;
            pos += n as u64;
        }
        // Whole records.
        let mut chunks = out[i..].chunks_exact_mut(RECORD as usize);
        for c in &mut chunks {
            c.copy_from_slice(&self.record(pos));
            pos += RECORD;
        }
        // Trailing partial record.
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let rec = self.record(pos);
            let n = rest.len();
            rest.copy_from_slice(&rec[..n]);
        }
    }

    /// The bytes `[start, end)` of the object (clamped to the object's size).
    pub fn range(&self, start: u64, end: u64) -> Bytes {
        let end = end.min(self.size);
        if start >= end {
            return Bytes::new();
        }
        let mut v = vec![0u8; (end - start) as usize];
        self.fill(start, &mut v);
        Bytes::from(v)
    }
}

/// The exact body the origin serves for `GET /obj/<size>/<id>`.
///
/// `id` is the path segment as written in the URL (`7`, `"abc"`).
pub fn expected_body(size: u64, id: impl fmt::Display) -> Bytes {
    let id = id.to_string();
    Pattern::new(size, &id).range(0, size)
}

/// Where a body differs from the expected content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyMismatch {
    /// Expected length.
    pub expected_len: u64,
    /// Actual length.
    pub actual_len: u64,
    /// First differing byte offset, if any byte within the common length differs.
    pub first_diff: Option<u64>,
    /// The 32-byte record expected at the first difference.
    pub expected_record: String,
    /// The bytes found there instead (lossy).
    pub found: String,
}

impl fmt::Display for BodyMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.first_diff {
            Some(off) => write!(
                f,
                "body differs at byte {off} (len {} expected {}): expected record {:?}, found {:?}",
                self.actual_len, self.expected_len, self.expected_record, self.found
            ),
            None => write!(
                f,
                "body length {} != expected {} (common prefix is correct)",
                self.actual_len, self.expected_len
            ),
        }
    }
}

impl std::error::Error for BodyMismatch {}

/// Check that `body` is exactly the content of object (`size`, `id`).
pub fn check_body(size: u64, id: impl fmt::Display, body: &[u8]) -> Result<(), BodyMismatch> {
    let id = id.to_string();
    let p = Pattern::new(size, &id);
    check_range(&p, 0, body).and_then(|()| {
        if body.len() as u64 == size {
            Ok(())
        } else {
            Err(BodyMismatch {
                expected_len: size,
                actual_len: body.len() as u64,
                first_diff: None,
                expected_record: String::new(),
                found: String::new(),
            })
        }
    })
}

/// Check that `data` is the object's content starting at byte `start`
/// (for ranges or partial bodies). Does not check the total length, except
/// that the data must not extend past the object's end.
pub fn check_range(p: &Pattern, start: u64, data: &[u8]) -> Result<(), BodyMismatch> {
    let mut buf = [0u8; 64 * 1024];
    let mut done = 0usize;
    let expected_total = p.size();
    while done < data.len() {
        let off = start + done as u64;
        let n = (data.len() - done).min(buf.len());
        if off + n as u64 > expected_total {
            // Compare what can be compared, then report the overflow.
            let valid = expected_total.saturating_sub(off) as usize;
            p.fill(off, &mut buf[..valid]);
            if let Some(i) = first_diff(&buf[..valid], &data[done..done + valid]) {
                return Err(mismatch(p, off + i as u64, data, start));
            }
            return Err(BodyMismatch {
                expected_len: expected_total,
                actual_len: start + data.len() as u64,
                first_diff: None,
                expected_record: String::new(),
                found: String::new(),
            });
        }
        p.fill(off, &mut buf[..n]);
        if let Some(i) = first_diff(&buf[..n], &data[done..done + n]) {
            return Err(mismatch(p, off + i as u64, data, start));
        }
        done += n;
    }
    Ok(())
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

fn mismatch(p: &Pattern, at: u64, data: &[u8], start: u64) -> BodyMismatch {
    let rec_off = at - at % RECORD;
    let rec = p.record(rec_off);
    let from = (rec_off.max(start) - start) as usize;
    let to = (from + RECORD as usize).min(data.len());
    BodyMismatch {
        expected_len: p.size(),
        actual_len: start + data.len() as u64,
        first_diff: Some(at),
        expected_record: String::from_utf8_lossy(&rec).into_owned(),
        found: String::from_utf8_lossy(&data[from..to]).into_owned(),
    }
}

/// Parse an object size: plain bytes (`4096`) or with a binary suffix
/// `k`, `m`, `g` (case-insensitive, optionally followed by `i`, `ib` or `b`):
/// `4k` = 4096, `100k`, `1m` = 1048576.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return None;
    }
    let n: u64 = s[..digits_end].parse().ok()?;
    let suffix = s[digits_end..].to_ascii_lowercase();
    let mult: u64 = match suffix.as_str() {
        "" | "b" => 1,
        "k" | "kb" | "ki" | "kib" => 1 << 10,
        "m" | "mb" | "mi" | "mib" => 1 << 20,
        "g" | "gb" | "gi" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("100K"), Some(102_400));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("k"), None);
        assert_eq!(parse_size("4x"), None);
        assert_eq!(parse_size("-4"), None);
        assert_eq!(parse_size("99999999999999999999999g"), None);
    }

    #[test]
    fn records_are_readable() {
        let b = expected_body(100, 42);
        assert_eq!(b.len(), 100);
        assert_eq!(&b[..32], b"0000000042|000000064|0000000000\n");
        assert_eq!(&b[32..64], b"0000000042|000000064|0000000020\n");
        assert_eq!(&b[96..], b"0000");
        let h = expected_body(32, "abc");
        assert_eq!(h[0], b'#');
        assert_ne!(expected_body(64, "abc"), expected_body(64, "abd"));
        assert_ne!(expected_body(64, 1), expected_body(64, 2));
        // Same id, different size: different content from byte 0.
        assert_ne!(expected_body(4096, 1)[..64], expected_body(8192, 1)[..64]);
    }

    #[test]
    fn fill_any_range_matches_whole() {
        let p = Pattern::new(1000, "7");
        let whole = p.range(0, 1000);
        for start in [0u64, 1, 31, 32, 33, 500, 999] {
            for end in [start, start + 1, start + 31, start + 64, 1000] {
                let end = end.min(1000);
                assert_eq!(
                    p.range(start, end),
                    whole.slice(start as usize..end as usize)
                );
            }
        }
        assert!(p.range(10, 5).is_empty());
        assert_eq!(p.range(990, 5000).len(), 10);
    }

    #[test]
    fn checker_finds_errors() {
        let good = expected_body(200_000, 9).to_vec();
        assert!(check_body(200_000, 9, &good).is_ok());
        let mut bad = good.clone();
        bad[150_001] ^= 1;
        let e = check_body(200_000, 9, &bad).unwrap_err();
        assert_eq!(e.first_diff, Some(150_001));
        assert!(e.to_string().contains("150001"), "{e}");
        let e = check_body(200_000, 9, &good[..1000]).unwrap_err();
        assert_eq!(e.first_diff, None);
        assert_eq!(e.actual_len, 1000);
        // Another object's bytes.
        let other = expected_body(200_000, 10);
        let e = check_body(200_000, 9, &other).unwrap_err();
        assert_eq!(e.first_diff, Some(8));
        // Too long.
        let mut long = good.clone();
        long.push(b'x');
        assert!(check_body(200_000, 9, &long).is_err());
        // Ranges.
        let p = Pattern::new(200_000, "9");
        assert!(check_range(&p, 777, &good[777..5000]).is_ok());
        assert!(check_range(&p, 778, &good[777..5000]).is_err());
    }
}
