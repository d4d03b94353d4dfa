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

/// The quantity types by the names the reference pages give them, with an example each.
pub const QUANTITY_FORMATS: [edgecache_docgen::schema::NamedFormat; 3] = [
    edgecache_docgen::schema::NamedFormat {
        pattern: BYTE_SIZE_PATTERN,
        name: "byte size",
        example: "256MiB",
    },
    edgecache_docgen::schema::NamedFormat {
        pattern: DISK_SIZE_PATTERN,
        name: "disk size",
        example: "auto",
    },
    edgecache_docgen::schema::NamedFormat {
        pattern: DURATION_PATTERN,
        name: "duration",
        example: "30s",
    },
];

/// The data-plane config's JSON schema: every field's name, type, default and doc comment, as
/// serde reads the file (the source of `docs/reference/dataplane-config.md`).
pub fn dataplane_config_schema() -> serde_json::Value {
    schemars::schema_for!(crate::dataplane::DataplaneConfig).to_value()
}

#[cfg(feature = "crd")]
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    JSONSchemaPropsOrStringArray,
};

/// The EdgeCache CRD as the API server gets it (`crds/`, the chart, `edgecache-operator crd`).
#[cfg(feature = "crd")]
pub fn edgecache_crd() -> CustomResourceDefinition {
    for_api_server(<crate::v1alpha1::EdgeCache as kube::CustomResourceExt>::crd())
}

/// The EdgeCachePurge CRD as the API server gets it.
#[cfg(feature = "crd")]
pub fn edgecache_purge_crd() -> CustomResourceDefinition {
    for_api_server(<crate::purge::EdgeCachePurge as kube::CustomResourceExt>::crd())
}

/// kube's generated CRD with each integer `format` the API server does not know replaced by the
/// one it does that holds the range. schemars writes `uint8`, `uint16`, `uint32` and `uint64` for
/// unsigned fields; the API server knows `int32` and `int64` only and warns "unrecognized format"
/// on every apply otherwise. `uint8`/`uint16` become `int32`, `uint32`/`uint64` `int64` (the
/// server stores every integer as an int64); the `minimum: 0` schemars also writes still keeps
/// them unsigned.
#[cfg(feature = "crd")]
pub fn for_api_server(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            normalise_formats(schema);
        }
    }
    crd
}

/// The signed format the API server knows for an unsigned one schemars writes.
#[cfg(feature = "crd")]
fn known_integer_format(format: &str) -> Option<&'static str> {
    match format {
        "uint8" | "uint16" => Some("int32"),
        "uint32" | "uint64" => Some("int64"),
        _ => None,
    }
}

#[cfg(feature = "crd")]
fn normalise_formats(s: &mut JSONSchemaProps) {
    if let Some(known) = s.format.as_deref().and_then(known_integer_format) {
        s.format = Some(known.to_string());
    }
    let maps = [
        &mut s.properties,
        &mut s.pattern_properties,
        &mut s.definitions,
    ];
    for map in maps.into_iter().flatten() {
        map.values_mut().for_each(normalise_formats);
    }
    let lists = [&mut s.all_of, &mut s.any_of, &mut s.one_of];
    for list in lists.into_iter().flatten() {
        list.iter_mut().for_each(normalise_formats);
    }
    if let Some(not) = s.not.as_deref_mut() {
        normalise_formats(not);
    }
    match &mut s.items {
        Some(JSONSchemaPropsOrArray::Schema(one)) => normalise_formats(one),
        Some(JSONSchemaPropsOrArray::Schemas(many)) => many.iter_mut().for_each(normalise_formats),
        None => {}
    }
    for more in [&mut s.additional_properties, &mut s.additional_items] {
        if let Some(JSONSchemaPropsOrBool::Schema(one)) = more {
            normalise_formats(one);
        }
    }
    for dep in s.dependencies.iter_mut().flat_map(|d| d.values_mut()) {
        if let JSONSchemaPropsOrStringArray::Schema(one) = dep {
            normalise_formats(one);
        }
    }
}
