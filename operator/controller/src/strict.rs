//! Pure: a manifest checked against the CRD's structural schema the way `kubectl apply` (strict
//! field validation) and the API server would, before it is turned into Rust types: every
//! unknown field, wrong type, value outside an enum, pattern or bound and missing required field,
//! each reported once by its path in the user's words. The offending values are removed, so the
//! rest can still be parsed (with defaults in their place) and checked further.

use serde_json::Value;

use crate::validate::FieldError;

/// Check `obj` against `schema` (an `openAPIV3Schema`), removing what does not fit; returns
/// every problem found, in document order. `apiVersion`, `kind` and `metadata` are the API
/// server's own (every object has them; `metadata` is checked by the server, not the schema).
pub fn check(schema: &Value, obj: &mut Value) -> Vec<FieldError> {
    let mut schema = schema.clone();
    if let Some(props) = schema["properties"].as_object_mut() {
        for (field, s) in [
            ("apiVersion", serde_json::json!({"type": "string"})),
            ("kind", serde_json::json!({"type": "string"})),
            ("metadata", serde_json::json!({"type": "object"})),
        ] {
            props.entry(field).or_insert(s);
        }
    }
    let mut problems = Vec::new();
    walk(&schema, obj, "", &mut problems);
    problems
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn got(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 60 {
        format!("{}...", &text[..text.floor_char_boundary(57)])
    } else {
        text
    }
}

/// Whether `v` fits `schema`; a problem is pushed (and `false` returned) when it does not, and
/// the caller removes `v`. Problems below `v` are pushed and removed here.
fn walk(schema: &Value, v: &mut Value, path: &str, problems: &mut Vec<FieldError>) -> bool {
    let mut bad = |reason: String| {
        problems.push(FieldError {
            field: path.to_string(),
            reason,
        });
        false
    };
    if v.is_null() && schema["nullable"] == true {
        return true;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return v.is_i64()
            || v.is_u64()
            || v.is_string()
            || bad(format!("must be an integer or a string (got {})", got(v)));
    }
    let ok = match schema["type"].as_str() {
        Some("object") => return object(schema, v, path, problems),
        Some("array") => {
            let Some(items) = v.as_array_mut() else {
                return bad(format!("must be a list (got {})", got(v)));
            };
            if let Some(item_schema) = schema.get("items") {
                let mut i = 0;
                items.retain_mut(|item| {
                    let keep = walk(item_schema, item, &format!("{path}[{i}]"), problems);
                    i += 1;
                    keep
                });
            }
            return true;
        }
        Some("string") if !v.is_string() => {
            return bad(format!("must be a string (got {})", got(v)));
        }
        Some("integer") if !(v.is_i64() || v.is_u64()) => {
            return bad(format!("must be an integer (got {})", got(v)));
        }
        Some("number") if !v.is_number() => {
            return bad(format!("must be a number (got {})", got(v)));
        }
        Some("boolean") if !v.is_boolean() => {
            return bad(format!("must be true or false (got {})", got(v)));
        }
        _ => true,
    };
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        let names: Vec<String> = allowed
            .iter()
            .map(|a| a.as_str().map_or_else(|| a.to_string(), String::from))
            .collect();
        return bad(format!(
            "must be one of {} (got {})",
            names.join(", "),
            got(v)
        ));
    }
    if let (Some(s), Some(pattern)) = (v.as_str(), schema["pattern"].as_str())
        && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s))
    {
        return bad(format!("must match {pattern} (got {})", got(v)));
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|m| len < m) {
            return bad(format!("must not be empty (got {})", got(v)));
        }
        if schema["maxLength"].as_u64().is_some_and(|m| len > m) {
            return bad(format!(
                "must be at most {} characters",
                schema["maxLength"]
            ));
        }
    }
    if let Some(n) = v.as_f64() {
        let min = schema["minimum"].as_f64();
        let max = schema["maximum"].as_f64();
        if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
            let range = match (min, max) {
                (Some(a), Some(b)) => format!("between {a} and {b}"),
                (Some(a), None) => format!("at least {a}"),
                (None, Some(b)) => format!("at most {b}"),
                (None, None) => String::new(),
            };
            return bad(format!("must be {range} (got {})", got(v)));
        }
    }
    ok
}

fn object(schema: &Value, v: &mut Value, path: &str, problems: &mut Vec<FieldError>) -> bool {
    let Some(map) = v.as_object_mut() else {
        problems.push(FieldError {
            field: path.to_string(),
            reason: format!("must be a mapping of fields (got {})", got(v)),
        });
        return false;
    };
    let properties = schema["properties"].as_object();
    let additional = schema.get("additionalProperties");
    // An object without declared fields (metadata) or one that keeps unknown fields is taken as
    // it is.
    if schema["x-kubernetes-preserve-unknown-fields"] == true
        || (properties.is_none() && additional.is_none())
    {
        return true;
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        let field = join(path, &key);
        let sub = match (properties.and_then(|p| p.get(&key)), additional) {
            (Some(s), _) => Some(s),
            (None, Some(a)) if a.is_object() => Some(a),
            (None, Some(Value::Bool(true))) => None,
            (None, _) => {
                problems.push(FieldError {
                    field,
                    reason: "unknown field".into(),
                });
                map.remove(&key);
                continue;
            }
        };
        if let (Some(s), Some(value)) = (sub, map.get_mut(&key))
            && !walk(s, value, &field, problems)
        {
            map.remove(&key);
        }
    }
    for required in schema["required"].as_array().into_iter().flatten() {
        if let Some(r) = required.as_str()
            && !map.contains_key(r)
            && !problems.iter().any(|p| p.field == join(path, r))
        {
            problems.push(FieldError {
                field: join(path, r),
                reason: "is required".into(),
            });
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "required": ["spec"], "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "required": ["url"], "properties": {
                "url": {"type": "string", "minLength": 1},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "size": {"type": "string", "pattern": "^[0-9]+$"},
                "n": {"x-kubernetes-int-or-string": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "list": {"type": "array", "items": {"type": "object", "properties": {
                    "key": {"type": "string"}}}},
                "maybe": {"type": "string", "nullable": true},
            }},
        }})
    }

    fn problems(obj: Value) -> (Vec<String>, Value) {
        let mut obj = obj;
        let p = check(&schema(), &mut obj);
        (p.into_iter().map(|e| e.to_string()).collect(), obj)
    }

    #[test]
    fn every_problem_by_path_and_the_rest_is_kept() {
        let (p, left) = problems(json!({
            "metadata": {"name": "x", "anything": 1},
            "spec": {"url": "u", "mode": "c", "port": 0, "size": "1x", "n": [1],
                     "labels": {"a": "b", "c": 1}, "list": [{"key": "k"}, {"kee": "k"}],
                     "maybe": null, "extra": true},
            "specs": {},
        }));
        assert_eq!(
            p,
            [
                "spec.extra: unknown field",
                "spec.labels.c: must be a string (got 1)",
                "spec.list[1].kee: unknown field",
                "spec.mode: must be one of a, b (got \"c\")",
                "spec.n: must be an integer or a string (got [1])",
                "spec.port: must be between 1 and 65535 (got 0)",
                "spec.size: must match ^[0-9]+$ (got \"1x\")",
                "specs: unknown field",
            ]
        );
        assert_eq!(
            left,
            json!({"metadata": {"name": "x", "anything": 1},
                   "spec": {"url": "u", "labels": {"a": "b"}, "list": [{"key": "k"}, {}],
                            "maybe": null}})
        );
    }

    #[test]
    fn missing_required_fields_and_wrong_shapes() {
        let (p, _) = problems(json!({"spec": {"list": {"key": "k"}}}));
        assert_eq!(
            p,
            [
                "spec.list: must be a list (got {\"key\":\"k\"})",
                "spec.url: is required"
            ]
        );
        let (p, _) = problems(json!({"spec": "x"}));
        assert_eq!(p, ["spec: must be a mapping of fields (got \"x\")"]);
    }

    /// The EdgeCache CRD's own patterns, bounds, types and enums refuse what they are for (as the
    /// API server's OpenAPI validation does with the same schema), and take `size: auto`.
    #[test]
    fn the_edgecache_crds_schema_refuses_bad_values() {
        let crd = serde_json::to_value(edgecache_api::schema::edgecache_crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let fields = |spec: Value| {
            let mut obj = json!({"apiVersion": "edgecache.dev/v1alpha1", "kind": "EdgeCache",
                                 "metadata": {"name": "web"}, "spec": spec});
            let p = check(schema, &mut obj);
            p.into_iter().map(|e| e.field).collect::<Vec<_>>()
        };
        let url = json!({"url": "http://origin:8080"});
        assert!(fields(json!({"origin": url, "storage": {"size": "auto"}})).is_empty());
        assert_eq!(
            fields(json!({"origin": url, "storage": {"size": "Auto"}})),
            ["spec.storage.size"]
        );
        assert_eq!(
            fields(json!({"origin": {"url": "ftp://o"},
                          "storage": {"size": "lots", "readsInFlight": 0, "sliceSize": "4 slices"},
                          "network": {"port": "http"}, "steering": {"mode": "adq"}})),
            [
                "spec.network.port",
                "spec.origin.url",
                "spec.steering.mode",
                "spec.storage.readsInFlight",
                "spec.storage.size",
                "spec.storage.sliceSize",
            ]
        );
        let site = json!({"hosts": ["Www.a.example", "c.example:8080"],
                          "origins": ["http://web:8080/shop"], "retries": 9});
        assert_eq!(
            fields(json!({"origin": url, "sites": [site],
                          "tls": {"minVersion": "1.1", "certificates": [{"secretName": "Web_TLS"}]},
                          "accessLog": {"sample": 2}, "http2": {"maxConcurrentStreams": 2000000}})),
            [
                "spec.accessLog.sample",
                "spec.http2.maxConcurrentStreams",
                "spec.sites[0].hosts[0]",
                "spec.sites[0].hosts[1]",
                "spec.sites[0].origins[0]",
                "spec.sites[0].retries",
                "spec.tls.certificates[0].secretName",
                "spec.tls.minVersion",
            ]
        );
    }
}
