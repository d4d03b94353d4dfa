//! Human-readable quantities used in configs: byte sizes (`1GiB`, `512Mi`, `4096`) and
//! durations (`250ms`, `2s`, `5m`, `1h`). Both serialize back to the canonical text form, so a
//! config written by the operator round-trips unchanged through the data plane.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// Why a quantity could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuantityError(String);

/// A number of bytes. Accepts a plain integer or a number with a binary (`Ki`, `KiB`, `Mi`,
/// `MiB`, `Gi`, `GiB`, `Ti`, `TiB`) or decimal (`k`, `kB`, `M`, `MB`, `G`, `GB`, `T`, `TB`) suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn b(n: u64) -> Self {
        Self(n)
    }
    pub const fn kib(n: u64) -> Self {
        Self(n << 10)
    }
    pub const fn mib(n: u64) -> Self {
        Self(n << 20)
    }
    pub const fn gib(n: u64) -> Self {
        Self(n << 30)
    }
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

const BYTE_UNITS: &[(&str, u64)] = &[
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("kB", 1_000),
    ("KB", 1_000),
    ("T", 1_000_000_000_000),
    ("G", 1_000_000_000),
    ("M", 1_000_000),
    ("k", 1_000),
    ("B", 1),
];

impl FromStr for ByteSize {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let (num, mult) = BYTE_UNITS
            .iter()
            .find_map(|(suf, m)| t.strip_suffix(suf).map(|n| (n.trim_end(), *m)))
            .unwrap_or((t, 1));
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            return Err(QuantityError(format!(
                "`{s}` is not a byte size (expected a whole number with an optional unit such as KiB, MiB, GiB, Mi, Gi, MB)"
            )));
        }
        let n: u64 = num
            .parse()
            .map_err(|_| QuantityError(format!("`{s}` is too large")))?;
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| QuantityError(format!("`{s}` is too large")))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (suf, m) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if self.0 >= m && self.0.is_multiple_of(m) {
                return write!(f, "{}{suf}", self.0 / m);
            }
        }
        write!(f, "{}", self.0)
    }
}

/// Both quantities are written as text, and read from text or a bare number (`from_number`).
/// A value that is neither says what was expected, in the words of a config's reader
/// (`expecting`), which [`crate::dataplane`] puts in its error as `must be <expecting>`.
macro_rules! text_serde {
    ($ty:ty, $from_number:expr, $expecting:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct TextOrNumber;
                impl<'de> de::Visitor<'de> for TextOrNumber {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_u64<E: de::Error>(self, n: u64) -> Result<$ty, E> {
                        Ok($from_number(n))
                    }
                    fn visit_i64<E: de::Error>(self, n: i64) -> Result<$ty, E> {
                        u64::try_from(n)
                            .map($from_number)
                            .map_err(|_| E::invalid_value(de::Unexpected::Signed(n), &self))
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$ty, E> {
                        s.parse().map_err(|_: QuantityError| {
                            E::invalid_value(de::Unexpected::Str(s), &self)
                        })
                    }
                }
                d.deserialize_any(TextOrNumber)
            }
        }
    };
}

text_serde!(ByteSize, ByteSize, "a size like 10GiB or 500MiB");
text_serde!(
    DiskSize,
    |n| DiskSize::Size(ByteSize(n)),
    "a size like 10GiB or 500MiB, or auto"
);

/// A disk budget: a size, or `auto`: the free space of the cache directory's filesystem at start
/// less a reserve (a tenth of the filesystem, at least 1 GiB), so a node's whole NVMe is used
/// without knowing its size in advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiskSize {
    Auto,
    Size(ByteSize),
}

impl DiskSize {
    /// The size, when one is set.
    pub const fn size(self) -> Option<ByteSize> {
        match self {
            DiskSize::Auto => None,
            DiskSize::Size(s) => Some(s),
        }
    }

    /// Whether an object of `len` may fit: at most the size (with `auto`, any: the size is
    /// known only at start).
    pub fn may_hold(self, len: ByteSize) -> bool {
        self.size().is_none_or(|s| len <= s)
    }
}

impl From<ByteSize> for DiskSize {
    fn from(s: ByteSize) -> Self {
        DiskSize::Size(s)
    }
}

impl FromStr for DiskSize {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim() == "auto" {
            return Ok(DiskSize::Auto);
        }
        s.parse().map(DiskSize::Size)
    }
}

impl fmt::Display for DiskSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiskSize::Auto => f.write_str("auto"),
            DiskSize::Size(s) => s.fmt(f),
        }
    }
}
text_serde!(Duration, Duration::secs, "a duration like 30s, 500ms or 5m");

/// A span of time, written `250ms`, `2s`, `5m`, `1h` or `1d` (a bare number means seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    pub const fn secs(n: u64) -> Self {
        Self(std::time::Duration::from_secs(n))
    }
    pub const fn millis(n: u64) -> Self {
        Self(std::time::Duration::from_millis(n))
    }
    pub const fn get(self) -> std::time::Duration {
        self.0
    }
}

impl FromStr for Duration {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let bad = || {
            QuantityError(format!(
                "`{s}` is not a duration (expected a whole number with a unit: ms, s, m, h or d)"
            ))
        };
        if num.is_empty() {
            return Err(bad());
        }
        let n: u64 = num.parse().map_err(|_| bad())?;
        let ms_per = match unit.trim() {
            "ms" => 1,
            "" | "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        n.checked_mul(ms_per)
            .map(|ms| Duration(std::time::Duration::from_millis(ms)))
            .ok_or_else(|| QuantityError(format!("`{s}` is too large")))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (suf, m) in [
            ("d", 86_400_000u128),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if ms >= m && ms.is_multiple_of(m) {
                return write!(f, "{}{suf}", ms / m);
            }
        }
        write!(f, "{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse() {
        for (text, want) in [
            ("4096", 4096),
            ("1KiB", 1024),
            ("1Ki", 1024),
            ("10Gi", 10 << 30),
            ("1GiB", 1 << 30),
            ("512MiB", 512 << 20),
            ("2MB", 2_000_000),
            ("3k", 3000),
            (" 7 MiB ", 7 << 20),
        ] {
            assert_eq!(text.parse::<ByteSize>().unwrap().bytes(), want, "{text}");
        }
    }

    #[test]
    fn bad_byte_sizes_are_rejected_with_the_value() {
        for text in [
            "",
            "GiB",
            "-1",
            "1.5GiB",
            "12 parsecs",
            "99999999999999999999",
            "99999999TiB",
        ] {
            let err = text.parse::<ByteSize>().unwrap_err().to_string();
            assert!(err.contains(&format!("`{text}`")), "{err}");
        }
    }

    #[test]
    fn byte_size_display_round_trips() {
        for n in [0, 1, 1023, 1024, 4096, 1 << 20, 3 << 30, (1 << 30) + 1] {
            let b = ByteSize(n);
            assert_eq!(b.to_string().parse::<ByteSize>().unwrap(), b);
        }
        assert_eq!(ByteSize::gib(1).to_string(), "1GiB");
    }

    #[test]
    fn durations_parse_and_round_trip() {
        for (text, ms) in [
            ("250ms", 250),
            ("2s", 2000),
            ("2", 2000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
        ] {
            let d: Duration = text.parse().unwrap();
            assert_eq!(d.get().as_millis(), ms, "{text}");
            assert_eq!(d.to_string().parse::<Duration>().unwrap(), d);
        }
        for bad in ["", "s", "1.5s", "-1s", "10 fortnights"] {
            assert!(bad.parse::<Duration>().is_err(), "{bad}");
        }
    }
}
