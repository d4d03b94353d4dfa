//! What a real API server does to an object before it stores it, per kind: Secrets get their
//! `stringData` folded into `data`, and `data` that is not base64 is refused; kinds with a
//! structural schema (installed CRDs) lose the fields their schema does not declare.

use k8s_openapi::ByteString;
use serde_json::{Value, json};

use crate::{ApiError, ResourceInfo};

/// Resource key of Secrets.
pub const SECRETS: &str = "/v1/secrets";

/// Check and normalize `obj` (of resource `resource`) as the API server would on a write.
pub fn admit(resource: &str, info: Option<&ResourceInfo>, obj: &mut Value) -> Result<(), ApiError> {
    if resource == SECRETS {
        secret(obj)?;
    }
    if let Some(schema) = info.and_then(|i| i.schema.as_ref()) {
        prune(schema, obj, "", &mut Vec::new());
    }
    Ok(())
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

fn secret(obj: &mut Value) -> Result<(), ApiError> {
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
