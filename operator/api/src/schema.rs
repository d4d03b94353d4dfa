//! OpenAPI schemas for the quantity types, so the CRD can use them directly ([`ByteSize`] and
//! [`Duration`] serialize as strings such as `10GiB` and `30s`). Behind the `crd` feature.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::quantity::{ByteSize, Duration};

/// The byte-size syntax [`ByteSize`] parses: a whole number with an optional binary or decimal
/// unit. Kubernetes quantities such as `2Gi` are accepted as well.
pub const BYTE_SIZE_PATTERN: &str =
    r"^[0-9]+ ?(TiB|GiB|MiB|KiB|Ti|Gi|Mi|Ki|TB|GB|MB|kB|KB|T|G|M|k|B)?$";

/// The duration syntax [`Duration`] parses: a whole number with a unit (`ms`, `s`, `m`, `h`, `d`).
pub const DURATION_PATTERN: &str = r"^[0-9]+(ms|s|m|h|d)?$";

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": BYTE_SIZE_PATTERN,
            "description": "A byte size: a whole number with an optional unit (KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti, kB, MB, GB, TB)."
        })
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": DURATION_PATTERN,
            "description": "A duration: a whole number with a unit (ms, s, m, h or d)."
        })
    }
}
