//! What a real API server does to an object before it stores it, per kind: Secrets get their
//! `stringData` folded into `data` and their type defaulted to `Opaque`, `data` that is not
//! base64 is refused, and so is a `kubernetes.io/tls` Secret without `tls.crt` and `tls.key`
//! (and the other well-known types without their keys) or a change of a Secret's type; kinds with a
//! structural schema (installed CRDs) lose the fields their schema does not declare, get the
//! schema's defaults, and are checked against its types, enums, patterns, bounds and set-lists
//! (`x-kubernetes-list-type: set`, each item once) and its CEL
//! rules (`x-kubernetes-validations`, evaluated by kube's `cel` feature); built-in kinds are
//! checked as [`crate::validation`] says. Invalid objects are a `422 Invalid` naming every cause.

use k8s_openapi::ByteString;
use kube::core::cel::{Validator, apply_defaults};
use serde_json::{Value, json};

use crate::validation::{self, Cause};
use crate::{ApiError, ResourceInfo};

/// Resource key of Secrets.
pub const SECRETS: &str = "/v1/secrets";

/// Check and normalize `obj` (of resource `resource`) as the API server would on a write;
/// `old` is the stored object an update replaces. With `validate` false (an admin's direct
/// write, standing for an object stored under an older schema) nothing is refused.
///
/// Updates ratchet as the real server's CRD validation does: a cause the stored object already
/// had does not fail the update (so a status write to an object that an older schema let in
/// still goes through). The fake ratchets built-in kinds too, which only matters for objects an
/// admin wrote past validation.
pub fn admit(
    resource: &str,
    info: Option<&ResourceInfo>,
    obj: &mut Value,
    old: Option<&Value>,
    validate: bool,
) -> Result<(), ApiError> {
    if resource == SECRETS {
        secret(obj)?;
    }
    let schema = info.and_then(|i| i.schema.as_ref());
    if let Some(schema) = schema {
        prune(schema, obj, "", &mut Vec::new());
        *obj = apply_defaults(schema, obj);
    }
    if !validate {
        return Ok(());
    }
    let causes_of = |v: &Value, old: Option<&Value>| match schema {
        Some(schema) => schema_causes(schema, v, old),
        None => validation::builtin(resource, v),
    };
    let mut causes = causes_of(obj, old);
    if let Some(old) = old {
        let before = causes_of(old, None);
        causes.retain(|c| !before.contains(c));
        if resource == SECRETS {
            causes.extend(validation::secret_update(obj, old));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    causes.dedup();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (kind, group) = info.map_or(("", ""), |i| (i.kind.as_str(), i.group.as_str()));
    Err(validation::invalid(kind, group, name, &causes))
}

/// The OpenAPI checks, then the CEL rules (with `old` for transition rules).
fn schema_causes(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    openapi(schema, obj, "", &mut causes);
    // As the real server: the CEL rules do not run on an object of the wrong shape.
    if causes
        .iter()
        .any(|c| matches!(c.reason, "FieldValueTypeInvalid" | "FieldValueRequired"))
    {
        causes.push(Cause::invalid(
            "<nil>",
            &Value::Null,
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ));
        return causes;
    }
    if let Err(errors) = Validator::new().validate(schema, obj, old) {
        for e in errors {
            let field = e.field_path.trim_start_matches('.').to_string();
            causes.push(Cause::invalid(field, &json!("object"), &e.message));
        }
    }
    causes
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The structural schema's own checks: type, nullable, enum, pattern, bounds, lengths and
/// required properties, with the real server's messages.
fn openapi(schema: &Value, v: &Value, path: &str, causes: &mut Vec<Cause>) {
    if v.is_null() {
        if schema["nullable"] != true && schema.get("type").is_some() {
            let want = schema["type"].as_str().unwrap_or("object");
            causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                ..Cause::invalid(
                    path,
                    v,
                    &format!("{path} in body must be of type {want}: \"null\""),
                )
            });
        }
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    let type_ok = match schema["type"].as_str() {
        _ if int_or_string => v.is_string() || v.is_i64() || v.is_u64(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        _ => true,
    };
    if !type_ok {
        let got = match v {
            Value::String(_) => "string",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::Array(_) => "array",
            _ => "object",
        };
        let want = schema["type"].as_str().unwrap_or("object");
        causes.push(Cause {
            reason: "FieldValueTypeInvalid",
            ..Cause::invalid(
                path,
                &json!(got),
                &format!("{path} in body must be of type {want}: \"{got}\""),
            )
        });
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_string(),
            message: format!(
                "Unsupported value: {v}: supported values: {}",
                list.join(", ")
            ),
        });
    }
    let mut fail = |bad: bool, detail: String| {
        if bad {
            causes.push(Cause::invalid(path, v, &format!("{path} in body {detail}")));
        }
    };
    match v {
        Value::String(s) => {
            if let Some(p) = schema["pattern"].as_str() {
                let bad = regex::Regex::new(p).is_ok_and(|re| !re.is_match(s));
                fail(bad, format!("should match '{p}'"));
            }
            let chars = s.chars().count() as u64;
            if let Some(min) = schema["minLength"].as_u64() {
                fail(chars < min, format!("should be at least {min} chars long"));
            }
            if let Some(max) = schema["maxLength"].as_u64()
                && chars > max
            {
                causes.push(Cause::too_long(path, max));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            if let Some(min) = schema["minimum"].as_f64() {
                fail(x < min, format!("should be greater than or equal to {min}"));
            }
            if let Some(max) = schema["maximum"].as_f64() {
                fail(x > max, format!("should be less than or equal to {max}"));
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema["minItems"].as_u64() {
                fail(
                    (items.len() as u64) < min,
                    format!("should have at least {min} items"),
                );
            }
            if let Some(max) = schema["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_string(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                });
            }
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    openapi(s, item, &format!("{path}[{i}]"), causes);
                }
            }
            // `x-kubernetes-list-type: set`: each item once (the real server names every
            // repeat, by its index).
            if schema["x-kubernetes-list-type"] == "set" {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        causes.push(Cause::duplicate(format!("{path}[{i}]"), item));
                    }
                }
            }
        }
        Value::Object(map) => {
            // `metadata` at the root is the server's own (checked as ObjectMeta, not here).
            for req in schema["required"].as_array().into_iter().flatten() {
                if let Some(r) = req.as_str()
                    && !map.contains_key(r)
                {
                    causes.push(Cause::required(join(path, r)));
                }
            }
            for (k, child) in map {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let sub = schema["properties"]
                    .get(k)
                    .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
                if let Some(sub) = sub {
                    openapi(sub, child, &join(path, k), causes);
                }
            }
        }
        _ => {}
    }
}

/// `fieldValidation=Strict`: a write whose body has a field the schema does not declare is
/// refused (422), naming every such field.
pub fn strict(info: &ResourceInfo, body: &Value) -> Result<(), ApiError> {
    let Some(schema) = &info.schema else {
        return Ok(());
    };
    let mut unknown = Vec::new();
    prune(schema, &mut body.clone(), "", &mut unknown);
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    Err(ApiError::new(
        422,
        "Invalid",
        format!("strict decoding error: {}", fields.join(", ")),
    ))
}

/// Remove (and list) the fields `schema` does not declare; `apiVersion`, `kind` and `metadata`
/// at the root are the server's own.
fn prune(schema: &Value, v: &mut Value, path: &str, unknown: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    if let Some(items) = v.as_array_mut() {
        if let Some(s) = schema.get("items") {
            for (i, item) in items.iter_mut().enumerate() {
                prune(s, item, &format!("{path}[{i}]"), unknown);
            }
        }
        return;
    }
    let Some(map) = v.as_object_mut() else {
        return;
    };
    let props = schema["properties"].as_object();
    let additional = schema.get("additionalProperties");
    if props.is_none() && additional.is_none() {
        return;
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        let field = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let root_own =
            path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata");
        match (props.and_then(|p| p.get(&key)), additional) {
            _ if root_own => {}
            (Some(s), _) => {
                if let Some(child) = map.get_mut(&key) {
                    prune(s, child, &field, unknown);
                }
            }
            (None, Some(a)) if a.is_object() => {
                if let Some(child) = map.get_mut(&key) {
                    prune(a, child, &field, unknown);
                }
            }
            (None, Some(Value::Bool(true))) => {}
            (None, _) => {
                map.remove(&key);
                unknown.push(field);
            }
        }
    }
}

/// A Secret as the real server stores it: `stringData` folded into `data` (after `data` is
/// checked to be base64), and the type defaulted to `Opaque` (`SetDefaults_Secret`).
fn secret(obj: &mut Value) -> Result<(), ApiError> {
    if obj["type"].as_str().is_none_or(str::is_empty) {
        obj["type"] = json!("Opaque");
    }
    if let Some(data) = obj.get("data").and_then(Value::as_object) {
        for (key, v) in data {
            if serde_json::from_value::<ByteString>(v.clone()).is_err() {
                return Err(ApiError::new(
                    400,
                    "BadRequest",
                    format!(
                        "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at data.{key}"
                    ),
                ));
            }
        }
    }
    let string_data = obj
        .as_object_mut()
        .and_then(|m| m.remove("stringData"))
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    for (key, v) in string_data {
        let text = v.as_str().unwrap_or_default().as_bytes().to_vec();
        let encoded = serde_json::to_value(ByteString(text)).unwrap_or(Value::Null);
        if !obj["data"].is_object() {
            obj["data"] = json!({});
        }
        obj["data"][key] = encoded;
    }
    Ok(())
}
