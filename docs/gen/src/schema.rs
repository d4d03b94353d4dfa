//! A JSON schema (schemars' for the data-plane config, the openAPIV3Schema of a CRD) as a table
//! of fields: each field's dotted path, type, default and description, parents before their
//! children. `$ref`s are resolved against the root's `$defs` (or `definitions`). A string whose
//! `pattern` is one of the caller's [`NamedFormat`]s is called by that format's name (`duration`
//! rather than the regular expression), and [`formats_legend`] lists them.

use serde_json::Value;

use crate::page::cell;

/// A string format the caller names: its schema `pattern` and the name tables use for it.
#[derive(Debug, Clone, Copy)]
pub struct NamedFormat {
    pub pattern: &'static str,
    pub name: &'static str,
    /// An example value, for the legend.
    pub example: &'static str,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// `storage.size`, `sites[].hosts`.
    pub path: String,
    pub kind: String,
    /// The default as JSON, empty when the schema gives none.
    pub default: String,
    pub description: String,
}

/// Every field below `schema` (itself resolved in `root`), depth first, in the schema's order.
pub fn fields(root: &Value, schema: &Value, prefix: &str, formats: &[NamedFormat]) -> Vec<Field> {
    let walker = Walker { root, formats };
    let mut out = Vec::new();
    walker.walk(schema, prefix, &mut out);
    out
}

/// The schema's root (for `$ref`s) and the caller's named formats.
struct Walker<'a> {
    root: &'a Value,
    formats: &'a [NamedFormat],
}

impl Walker<'_> {
    fn walk(&self, schema: &Value, prefix: &str, out: &mut Vec<Field>) {
        let root = self.root;
        let schema = object_part(root, schema);
        for (name, sub) in sorted_properties(schema) {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            let kind = self.type_name(sub);
            // An object's default is the sum of its fields' defaults, each on its own row.
            let default = match sub.get("default") {
                Some(_) if kind == "object" => String::new(),
                Some(d) => default_text(d),
                None => String::new(),
            };
            out.push(Field {
                path: path.clone(),
                kind,
                default,
                description: description(root, sub),
            });
            let inner = resolve(root, sub);
            match items(root, inner) {
                Some(item) => self.walk(item, &format!("{path}[]"), out),
                None => self.walk(inner, &path, out),
            }
        }
    }

    /// A short name of the schema's type: `string`, `integer`, `list of string`, `duration`,
    /// `` one of `a`, `b` ``, `` one of `a`, `b` or object ``.
    fn type_name(&self, schema: &Value) -> String {
        let root = self.root;
        let s = resolve(root, schema);
        if let Some(values) = s.get("enum").and_then(Value::as_array) {
            return one_of(values.iter().map(compact_text));
        }
        if let Some(c) = s.get("const") {
            return one_of([compact_text(c)].into_iter());
        }
        let variants = non_null_variants(s);
        if !variants.is_empty() {
            let names: Vec<String> = variants.iter().map(|v| self.type_name(v)).collect();
            let consts: Vec<&str> = names
                .iter()
                .filter_map(|n| n.strip_prefix("one of "))
                .collect();
            let others: Vec<&str> = names
                .iter()
                .filter(|n| !n.starts_with("one of "))
                .map(String::as_str)
                .collect();
            return match (consts.is_empty(), others.is_empty()) {
                (true, _) => others.join(" or "),
                (false, true) => format!("one of {}", consts.join(", ")),
                (false, false) => {
                    format!("one of {} or {}", consts.join(", "), others.join(" or "))
                }
            };
        }
        if s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
            return "integer or string".into();
        }
        let kind = match s.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect::<Vec<_>>()
                .join(" or "),
            _ => String::new(),
        };
        match kind.as_str() {
            "array" => match items(root, s) {
                Some(item) => format!("list of {}", self.type_name(item)),
                None => "list".into(),
            },
            "object" => match s.get("additionalProperties").filter(|v| v.is_object()) {
                Some(value) => format!("map of string to {}", self.type_name(value)),
                None => "object".into(),
            },
            "string" => match s.get("pattern").and_then(Value::as_str) {
                Some(p) => match self.formats.iter().find(|f| f.pattern == p) {
                    Some(f) => f.name.to_string(),
                    None => format!("string matching `{p}`"),
                },
                None => "string".into(),
            },
            _ => kind,
        }
    }
}

/// The `properties` of `schema`, sorted by name: the order of a JSON object depends on
/// serde_json's features, which differ between a build of one package and of the workspace.
pub fn sorted_properties(schema: &Value) -> Vec<(&String, &Value)> {
    let mut properties: Vec<(&String, &Value)> = schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .collect();
    properties.sort_by_key(|(name, _)| *name);
    properties
}

/// `schema` with `$ref` followed, and of an `anyOf`/`oneOf` the one variant that is not null.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        let name = target.rsplit('/').next().unwrap_or(target);
        let defs = root.get("$defs").or_else(|| root.get("definitions"));
        if let Some(def) = defs.and_then(|d| d.get(name)) {
            return resolve(root, def);
        }
    }
    let variants = non_null_variants(schema);
    match variants.as_slice() {
        [one] => resolve(root, one),
        _ => schema,
    }
}

/// The object variant of `schema`, whose properties are its fields (a plain object, or the
/// one object among an enum's variants, as in `preserve | origin | {rewrite: ...}`).
fn object_part<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let schema = resolve(root, schema);
    if schema.get("properties").is_some() {
        return schema;
    }
    non_null_variants(schema)
        .into_iter()
        .map(|v| resolve(root, v))
        .find(|v| v.get("properties").is_some())
        .unwrap_or(schema)
}

fn non_null_variants(schema: &Value) -> Vec<&Value> {
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|k| schema.get(*k).and_then(Value::as_array))
        .flatten()
        .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
        .collect()
}

/// The item schema of an array (resolved), if `schema` is one.
fn items<'a>(root: &'a Value, schema: &'a Value) -> Option<&'a Value> {
    let item = schema.get("items")?;
    Some(resolve(root, item))
}

/// The field's own description, else its type's.
fn description(root: &Value, schema: &Value) -> String {
    let own = schema.get("description").and_then(Value::as_str);
    let of_type = resolve(root, schema)
        .get("description")
        .and_then(Value::as_str);
    cell(own.or(of_type).unwrap_or(""))
}

fn one_of(values: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = values.map(|v| format!("`{v}`")).collect();
    format!("one of {}", v.join(", "))
}

/// A default as a table shows it: `unset` for null, the value in backticks otherwise.
fn default_text(v: &Value) -> String {
    match v {
        Value::Null => "unset".into(),
        Value::String(s) if s.is_empty() => "`\"\"`".into(),
        other => format!("`{}`", compact_text(other)),
    }
}

fn compact_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What each named format means, one line each, for a page's introduction.
pub fn formats_legend(formats: &[NamedFormat]) -> String {
    formats
        .iter()
        .map(|f| {
            format!(
                "- {}: a string matching `{}`, e.g. `{}`.\n",
                f.name, f.pattern, f.example
            )
        })
        .collect()
}

/// The fields as one markdown table.
pub fn table(fields: &[Field]) -> String {
    let mut out = String::from("| Field | Type | Default | Description |\n|---|---|---|---|\n");
    for f in fields {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            f.path,
            cell(&f.kind),
            cell(&f.default),
            f.description
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nested_objects_lists_refs_enums_and_options_become_rows() {
        let root = json!({
            "type": "object",
            "properties": {
                "storage": {"$ref": "#/$defs/Storage", "description": "The store."},
                "sites": {"type": "array", "items": {"$ref": "#/$defs/Site"}},
                "mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}], "default": null},
                "wait": {"type": "string", "pattern": "^[0-9]+s$", "default": ""}
            },
            "$defs": {
                "Storage": {"type": "object", "default": {"size": "1GiB"}, "properties": {
                    "size": {"type": "string", "default": "1GiB", "description": "Disk | budget."}
                }},
                "Site": {"type": "object", "properties": {
                    "hosts": {"type": "array", "items": {"type": "string"}}
                }},
                "Mode": {"oneOf": [
                    {"const": "off", "type": "string"}, {"enum": ["on", "auto"], "type": "string"},
                    {"type": "object", "properties": {"level": {"type": "integer"}}}
                ]}
            }
        });
        let formats = [NamedFormat {
            pattern: "^[0-9]+s$",
            name: "duration",
            example: "5s",
        }];
        let rows: Vec<_> = fields(&root, &root, "", &formats)
            .into_iter()
            .map(|f| (f.path, f.kind, f.default, f.description))
            .collect();
        let row = |p: &str, k: &str, d: &str, t: &str| {
            (p.to_string(), k.to_string(), d.to_string(), t.to_string())
        };
        assert_eq!(
            rows,
            [
                row("mode", "one of `off`, `on`, `auto` or object", "unset", ""),
                row("mode.level", "integer", "", ""),
                row("sites", "list of object", "", ""),
                row("sites[].hosts", "list of string", "", ""),
                row("storage", "object", "", "The store."),
                row("storage.size", "string", "`1GiB`", "Disk \\| budget."),
                row("wait", "duration", "`\"\"`", ""),
            ]
        );
    }
}
