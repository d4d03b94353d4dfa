//! OpenAPI schemas for the quantity types, so the CRD can use them directly ([`ByteSize`] and
//! [`Duration`] serialize as strings such as `10GiB` and `30s`). Behind the `crd` feature.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::quantity::{ByteSize, DiskSize, Duration};

/// The byte-size syntax [`ByteSize`] parses: a whole number with an optional binary or decimal
/// unit. Kubernetes quantities such as `2Gi` are accepted as well.
pub const BYTE_SIZE_PATTERN: &str =
    r"^[0-9]+ ?(TiB|GiB|MiB|KiB|Ti|Gi|Mi|Ki|TB|GB|MB|kB|KB|T|G|M|k|B)?$";

/// The disk-size syntax [`DiskSize`] parses: a byte size, or `auto`.
pub const DISK_SIZE_PATTERN: &str =
    r"^(auto|[0-9]+ ?(TiB|GiB|MiB|KiB|Ti|Gi|Mi|Ki|TB|GB|MB|kB|KB|T|G|M|k|B)?)$";

/// The duration syntax [`Duration`] parses: a whole number with a unit (`ms`, `s`, `m`, `h`, `d`).
pub const DURATION_PATTERN: &str = r"^[0-9]+(ms|s|m|h|d)?$";

/// A quantity type's schema: an inline string with its pattern.
macro_rules! text_schema {
    ($ty:ty, $name:literal, $pattern:expr, $description:literal) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "type": "string",
                    "pattern": $pattern,
                    "description": $description
                })
            }
        }
    };
}

text_schema!(
    ByteSize,
    "ByteSize",
    BYTE_SIZE_PATTERN,
    "A byte size: a whole number with an optional unit (KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti, kB, MB, GB, TB)."
);
text_schema!(
    DiskSize,
    "DiskSize",
    DISK_SIZE_PATTERN,
    "A disk budget: a byte size (a whole number with an optional unit: KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti, kB, MB, GB, TB), or auto (the filesystem's free space at start less a tenth of it, at least 1 GiB)."
);
text_schema!(
    Duration,
    "Duration",
    DURATION_PATTERN,
    "A duration: a whole number with a unit (ms, s, m, h or d)."
);
