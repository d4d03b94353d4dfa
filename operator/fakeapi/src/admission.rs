//! What a real API server does to an object before it stores it, per kind: Secrets get their
//! `stringData` folded into `data`, and `data` that is not base64 is refused.

use k8s_openapi::ByteString;
use serde_json::{Value, json};

use crate::ApiError;

/// Resource key of Secrets.
pub const SECRETS: &str = "/v1/secrets";

/// Check and normalize `obj` (of resource `resource`) as the API server would on a write.
pub fn admit(resource: &str, obj: &mut Value) -> Result<(), ApiError> {
    if resource == SECRETS {
        secret(obj)?;
    }
    Ok(())
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
