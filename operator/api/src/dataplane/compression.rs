//! Compression of responses the origin sent uncompressed: the top-level `compression` section
//! applies to every site, and a site's `sites[].compression` overrides it field by field
//! (unset fields keep the top level's, and then the built-in defaults).

use serde::{Deserialize, Serialize};

use super::{ConfigError, err};
use crate::quantity::ByteSize;

/// Compression for clients that accept gzip, brotli or zstd (issue 33 §1). Every field is
/// optional: unset keeps the level above (a site's unset field keeps the top level's; the top
/// level's keeps the default given here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct CompressionConfig {
    /// Compress responses of the compressible types for clients that accept a coding the
    /// cache makes. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Media types compressed: `type/subtype`, `type/*` or `*/*+suffix` (e.g. `*/*+json`),
    /// lowercase. Default: `text/*`, `application/javascript`, `application/json`,
    /// `application/xml`, `application/wasm`, `image/svg+xml`, `*/*+json`, `*/*+xml`,
    /// `application/manifest+json` (edgecache_policy::encoding::DEFAULT_TYPES).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 64)))]
    pub types: Option<Vec<String>>,
    /// The smallest response compressed, when its length is known. Default: `1KiB`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_size: Option<ByteSize>,
    /// The level of each coding.
    #[serde(skip_serializing_if = "CompressionLevels::is_unset")]
    pub levels: CompressionLevels,
}

/// The level of each coding the cache makes; each is compressed once per object, at its fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct CompressionLevels {
    /// gzip, 1 to 9. Default: 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 9)))]
    pub gzip: Option<u32>,
    /// brotli, 0 to 11. Default: 5.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(max = 11)))]
    pub br: Option<u32>,
    /// zstd, 1 to 19. Default: 6.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 19)))]
    pub zstd: Option<u32>,
}

impl CompressionLevels {
    fn is_unset(&self) -> bool {
        *self == Self::default()
    }
}

/// The levels' ranges: (name, lowest, highest).
pub const LEVEL_RANGES: [(&str, u32, u32); 3] = [("gzip", 1, 9), ("br", 0, 11), ("zstd", 1, 19)];

impl CompressionConfig {
    /// Nothing set: everything from the level above.
    pub fn is_unset(&self) -> bool {
        *self == Self::default()
    }

    /// This config's set fields over `below`'s (a site's over the top level's).
    pub fn over(&self, below: &CompressionConfig) -> CompressionConfig {
        CompressionConfig {
            enabled: self.enabled.or(below.enabled),
            types: self.types.clone().or_else(|| below.types.clone()),
            min_size: self.min_size.or(below.min_size),
            levels: CompressionLevels {
                gzip: self.levels.gzip.or(below.levels.gzip),
                br: self.levels.br.or(below.levels.br),
                zstd: self.levels.zstd.or(below.levels.zstd),
            },
        }
    }
}

/// The value problems of a compression section at `path` (`compression`,
/// `sites[0].compression`).
pub(super) fn validate(c: &CompressionConfig, path: &str, errors: &mut Vec<ConfigError>) {
    let levels = [c.levels.gzip, c.levels.br, c.levels.zstd];
    for ((name, lo, hi), level) in LEVEL_RANGES.iter().zip(levels) {
        if let Some(l) = level
            && !(*lo..=*hi).contains(&l)
        {
            errors.push(err(
                &format!("{path}.levels.{name}"),
                Some(l.to_string()),
                format!("must be from {lo} to {hi}"),
            ));
        }
    }
    for (i, t) in c.types.iter().flatten().enumerate() {
        if let Err(why) = check_media_range(t) {
            errors.push(err(
                &format!("{path}.types[{i}]"),
                Some(format!("{t:?}")),
                why,
            ));
        }
    }
}

/// `type/subtype` or `type/*`, lowercase token characters.
fn check_media_range(t: &str) -> Result<(), &'static str> {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$&-^_.+".contains(&b))
    };
    if let Some(suffix) = t.strip_prefix("*/*+") {
        return if token(suffix) {
            Ok(())
        } else {
            Err("must be a lowercase media type: type/subtype, type/* or */*+suffix")
        };
    }
    match t.split_once('/') {
        Some((ty, sub)) if token(ty) && (sub == "*" || token(sub)) => Ok(()),
        _ => Err("must be a lowercase media type: type/subtype, type/* or */*+suffix"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_overrides_field_by_field() {
        let top = CompressionConfig {
            enabled: Some(true),
            min_size: Some(ByteSize::kib(2)),
            levels: CompressionLevels {
                gzip: Some(4),
                ..Default::default()
            },
            ..Default::default()
        };
        let site = CompressionConfig {
            enabled: Some(false),
            levels: CompressionLevels {
                br: Some(9),
                ..Default::default()
            },
            ..Default::default()
        };
        let got = site.over(&top);
        assert_eq!(got.enabled, Some(false));
        assert_eq!(got.min_size, Some(ByteSize::kib(2)));
        assert_eq!(got.levels.gzip, Some(4));
        assert_eq!(got.levels.br, Some(9));
        assert_eq!(got.types, None);
    }

    #[test]
    fn levels_and_types_out_of_range_are_named() {
        let c = CompressionConfig {
            types: Some(vec![
                "text/*".into(),
                "Text/HTML".into(),
                "json".into(),
                "*/*+json".into(),
            ]),
            levels: CompressionLevels {
                gzip: Some(10),
                br: Some(11),
                zstd: Some(0),
            },
            ..Default::default()
        };
        let mut errors = Vec::new();
        validate(&c, "sites[1].compression", &mut errors);
        let text = errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(errors.len(), 4, "{text}");
        for want in [
            "sites[1].compression.levels.gzip",
            "sites[1].compression.levels.zstd",
            "sites[1].compression.types[1]",
            "sites[1].compression.types[2]",
        ] {
            assert!(text.contains(want), "{want} missing from {text}");
        }
    }
}
