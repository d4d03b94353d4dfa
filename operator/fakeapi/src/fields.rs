//! Field paths, field sets and patches: the pieces of the server-side-apply approximation.
//!
//! A field path is the list of elements from the object root to a leaf, in the API server's
//! `fieldsV1` vocabulary: a map key (`spec`), a list-map item by its key fields
//! (`k:{"name":"dataplane"}`) and, after an item, `.` for the item itself. Lists whose OpenAPI
//! schema declares list-map keys ([`ListKeys`]) are merged item by item, so two managers can each
//! own items of one list (containers by name, ports by port and protocol, owner references by
//! uid); every other list is atomic: one manager owns it whole. Leaves are scalars, atomic lists
//! and empty maps.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// The path element of a list-map item itself (its existence), after the item's `k:` element.
pub const ITEM: &str = ".";

/// What [`get`] returns for an [`ITEM`] path whose item exists.
static PRESENT: Value = Value::Bool(true);

/// Metadata fields that belong to the server, never to a manager.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Which lists of one resource are list-maps, and their key fields: the built-in kinds' from
/// their OpenAPI `x-kubernetes-list-map-keys` (the ones the operator's objects use), an installed
/// CRD's from its schema.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListKeys<'a> {
    /// `group/version/plural`.
    pub resource: &'a str,
    /// The CRD's structural schema, if the kind comes from one.
    pub schema: Option<&'a Value>,
}

impl ListKeys<'_> {
    /// The key fields of the list at `path` (map keys and `k:` elements), if it is a list-map.
    pub fn keys(&self, path: &[String]) -> Option<Vec<String>> {
        if let Some(schema) = self.schema {
            return schema_keys(schema, path);
        }
        let names: Vec<&str> = path
            .iter()
            .map(|e| if e.starts_with("k:") { "*" } else { e.as_str() })
            .collect();
        let keys: &[&str] = match names.as_slice() {
            ["metadata", "ownerReferences"] => &["uid"],
            ["spec", "ports"] if self.resource == "/v1/services" => &["port", "protocol"],
            [
                ..,
                "spec",
                "containers" | "initContainers" | "ephemeralContainers",
            ] => &["name"],
            [.., "spec", "volumes"] => &["name"],
            [.., "containers" | "initContainers", "*", "env"] => &["name"],
            [.., "containers" | "initContainers", "*", "ports"] => &["containerPort", "protocol"],
            [.., "containers" | "initContainers", "*", "volumeMounts"] => &["mountPath"],
            ["status", "conditions"] => &["type"],
            _ => return None,
        };
        Some(keys.iter().map(|k| k.to_string()).collect())
    }
}

/// `x-kubernetes-list-map-keys` of the schema node at `path`, when it is a list-map.
fn schema_keys(schema: &Value, path: &[String]) -> Option<Vec<String>> {
    let mut node = schema;
    for e in path {
        node = if e.starts_with("k:") {
            node.get("items")?
        } else {
            node["properties"]
                .get(e)
                .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?
        };
    }
    if node["x-kubernetes-list-type"] != "map" {
        return None;
    }
    let keys: Vec<String> = node["x-kubernetes-list-map-keys"]
        .as_array()?
        .iter()
        .filter_map(|k| k.as_str().map(String::from))
        .collect();
    (!keys.is_empty()).then_some(keys)
}

/// The value a missing key field has (the API server defaults `protocol` to TCP).
fn key_default(field: &str) -> Option<Value> {
    (field == "protocol").then(|| Value::String("TCP".into()))
}

/// The `k:{...}` element of `item` in a list keyed by `keys`; `None` when it lacks a key field
/// that has no default.
fn item_element(item: &Value, keys: &[String]) -> Option<String> {
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    let mut m = Map::new();
    for k in sorted {
        let v = item.get(k).cloned().or_else(|| key_default(k))?;
        m.insert(k.clone(), v);
    }
    Some(format!("k:{}", Value::Object(m)))
}

/// The key fields an element names.
fn element_keys(e: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(e.strip_prefix("k:")?) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn item_matches(item: &Value, keys: &Map<String, Value>) -> bool {
    keys.iter()
        .all(|(k, v)| item.get(k).cloned().or_else(|| key_default(k)).as_ref() == Some(v))
}

/// The path element of each item, or `None` if the list cannot be merged by its keys (an item
/// without a key field, or two items with the same keys): then it is atomic.
fn item_elements(items: &[Value], keys: &[String]) -> Option<Vec<String>> {
    let elems: Option<Vec<String>> = items.iter().map(|i| item_element(i, keys)).collect();
    let elems = elems?;
    let unique: BTreeSet<&String> = elems.iter().collect();
    (unique.len() == elems.len()).then_some(elems)
}

/// The leaf paths of `obj` that a manager can own, restricted to `status` when `status_only`,
/// and without `status` when `skip_status` (a main-resource write of a kind with a status
/// subresource).
pub fn leaf_paths(obj: &Value, status_only: bool, skip_status: bool, keys: &ListKeys) -> FieldSet {
    let mut out = FieldSet::new();
    if let Value::Object(m) = obj {
        for (k, v) in m {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "status" if skip_status => {}
                "status" => walk(v, vec![k.clone()], &mut out, keys),
                _ if status_only => {}
                "metadata" => {
                    if let Value::Object(meta) = v {
                        for (mk, mv) in meta {
                            if !SERVER_METADATA.contains(&mk.as_str()) {
                                walk(mv, vec![k.clone(), mk.clone()], &mut out, keys);
                            }
                        }
                    }
                }
                _ => walk(v, vec![k.clone()], &mut out, keys),
            }
        }
    }
    out
}

fn walk(v: &Value, path: Path, out: &mut FieldSet, keys: &ListKeys) {
    match v {
        Value::Null => {}
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let mut p = path.clone();
                p.push(k.clone());
                walk(child, p, out, keys);
            }
        }
        // An empty list-map owns no item, so it shares the list with whoever owns items in it.
        Value::Array(items) if items.is_empty() && keys.keys(&path).is_some() => {}
        Value::Array(items) if !items.is_empty() => {
            let elems = keys.keys(&path).and_then(|k| item_elements(items, &k));
            let Some(elems) = elems else {
                out.insert(path);
                return;
            };
            for (item, e) in items.iter().zip(elems) {
                let mut p = path.clone();
                p.push(e);
                let mut marker = p.clone();
                marker.push(ITEM.into());
                out.insert(marker);
                walk(item, p, out, keys);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// The part of the object a path stands for when asking whether another manager shares it: an
/// item's marker stands for the whole item.
pub fn scope(path: &Path) -> &[String] {
    match path.split_last() {
        Some((last, rest)) if last == ITEM => rest,
        _ => path,
    }
}

/// Whether two paths overlap (one is a prefix of the other).
pub fn overlaps(a: &Path, b: &Path) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Whether a manager owning `owned` shares the field `q` names (so dropping `q` from another
/// manager's apply must not remove it): it owns `q` itself or something inside it (an item's
/// marker stands for the whole item), or an atomic value that holds `q`. Owning an item's
/// marker does not share the items of lists inside that item.
pub fn shares(owned: &Path, q: &Path) -> bool {
    owned.starts_with(scope(q)) || (q.starts_with(owned) && owned.last().is_some_and(|l| l != ITEM))
}

pub fn get<'a>(obj: &'a Value, path: &Path) -> Option<&'a Value> {
    let mut cur = obj;
    for e in path {
        if e == ITEM {
            return Some(&PRESENT);
        }
        cur = match element_keys(e) {
            Some(keys) => cur.as_array()?.iter().find(|i| item_matches(i, &keys))?,
            None => cur.get(e)?,
        };
    }
    Some(cur)
}

/// The child at element `e` (a map key or a list-map item), created when missing: maps on the
/// way, and items holding just their key fields (a defaulted key left out).
fn child_mut<'a>(cur: &'a mut Value, e: &str) -> Option<&'a mut Value> {
    match element_keys(e) {
        Some(keys) => {
            if !cur.is_array() {
                *cur = Value::Array(Vec::new());
            }
            let items = cur.as_array_mut()?;
            let i = match items.iter().position(|i| item_matches(i, &keys)) {
                Some(i) => i,
                None => {
                    let fresh: Map<String, Value> = keys
                        .into_iter()
                        .filter(|(k, v)| key_default(k).as_ref() != Some(v))
                        .collect();
                    items.push(Value::Object(fresh));
                    items.len() - 1
                }
            };
            items.get_mut(i)
        }
        None => {
            if !cur.is_object() {
                *cur = Value::Object(Map::new());
            }
            Some(
                cur.as_object_mut()?
                    .entry(e.to_string())
                    .or_insert_with(|| Value::Object(Map::new())),
            )
        }
    }
}

/// Set `path` to `value`, creating maps and list-map items on the way; an [`ITEM`] path makes
/// sure the item exists.
pub fn set(obj: &mut Value, path: &Path, value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for e in parents {
        let Some(next) = child_mut(cur, e) else {
            return;
        };
        cur = next;
    }
    if last == ITEM {
        return;
    }
    if let Some(slot) = child_mut(cur, last) {
        *slot = value;
    }
}

/// Remove `path` (for an [`ITEM`] path, the whole item), then every parent map or list it
/// leaves empty.
pub fn remove(obj: &mut Value, path: &Path) {
    fn drop_child(v: &mut Value, e: &str) {
        match (element_keys(e), v) {
            (Some(keys), Value::Array(items)) => items.retain(|i| !item_matches(i, &keys)),
            (None, Value::Object(m)) => {
                m.remove(e);
            }
            _ => {}
        }
    }
    fn child<'a>(v: &'a mut Value, e: &str) -> Option<&'a mut Value> {
        match element_keys(e) {
            Some(keys) => v
                .as_array_mut()?
                .iter_mut()
                .find(|i| item_matches(i, &keys)),
            None => v.as_object_mut()?.get_mut(e),
        }
    }
    fn go(v: &mut Value, path: &[String]) {
        match path {
            [] => {}
            [item, dot] if dot == ITEM => drop_child(v, item),
            [last] => drop_child(v, last),
            [first, rest @ ..] => {
                let Some(c) = child(v, first) else {
                    return;
                };
                go(c, rest);
                let empty = match c {
                    Value::Object(m) => m.is_empty(),
                    Value::Array(a) => a.is_empty(),
                    _ => false,
                };
                if empty {
                    drop_child(v, first);
                }
            }
        }
    }
    go(obj, path);
}

/// Put the list-map items of `new` in the order `applied` lists them (the items it does not
/// list keep their place after those), recursively: what a real apply's merged lists look like.
pub fn order_like(new: &mut Value, applied: &Value, keys: &ListKeys) {
    fn go(new: &mut Value, applied: &Value, path: &mut Path, keys: &ListKeys) {
        match (new, applied) {
            (Value::Object(n), Value::Object(a)) => {
                for (k, av) in a {
                    if let Some(nv) = n.get_mut(k) {
                        path.push(k.clone());
                        go(nv, av, path, keys);
                        path.pop();
                    }
                }
            }
            (Value::Array(n), Value::Array(a)) => {
                let Some(k) = keys.keys(path) else {
                    return;
                };
                let Some(order) = item_elements(a, &k) else {
                    return;
                };
                let Some(live) = item_elements(n, &k) else {
                    return;
                };
                // As structured-merge-diff merges: items only the stored list has keep their
                // place; the applied items come in the applied order, each no later than where
                // the stored list had it.
                let mut items: Vec<Option<Value>> =
                    std::mem::take(n).into_iter().map(Some).collect();
                let mut take = |e: &String, out: &mut Vec<Value>| {
                    if let Some(i) = live.iter().position(|l| l == e)
                        && let Some(item) = items.get_mut(i).and_then(Option::take)
                    {
                        out.push(item);
                    }
                };
                let mut out = Vec::new();
                let mut next = 0;
                for e in &live {
                    match order.iter().position(|o| o == e) {
                        None => take(e, &mut out),
                        Some(j) if j >= next => {
                            for o in &order[next..=j] {
                                take(o, &mut out);
                            }
                            next = j + 1;
                        }
                        Some(_) => {}
                    }
                }
                for o in &order[next..] {
                    take(o, &mut out);
                }
                for (e, av) in order.iter().zip(a) {
                    if let Some(i) =
                        item_elements(&out, &k).and_then(|els| els.iter().position(|x| x == e))
                        && let Some(item) = out.get_mut(i)
                    {
                        path.push(e.clone());
                        go(item, av, path, keys);
                        path.pop();
                    }
                }
                *n = out;
            }
            _ => {}
        }
    }
    go(new, applied, &mut Vec::new(), keys);
}

/// Paths whose value differs between `old` and `new` (added, changed or removed leaves).
pub fn changed_paths(
    old: &Value,
    new: &Value,
    status_only: bool,
    skip_status: bool,
    keys: &ListKeys,
) -> FieldSet {
    let a = leaf_paths(old, status_only, skip_status, keys);
    let b = leaf_paths(new, status_only, skip_status, keys);
    a.union(&b)
        .filter(|p| get(old, p) != get(new, p))
        .cloned()
        .collect()
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// A field set in the API server's `fieldsV1` shape (`{"f:spec":{"f:replicas":{}}}`).
pub fn fields_v1(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for p in set {
        let path: Path = p
            .iter()
            .map(|k| {
                if k == ITEM || k.starts_with("k:") {
                    k.clone()
                } else {
                    format!("f:{k}")
                }
            })
            .collect();
        set_if_absent(&mut root, &path);
    }
    root
}

fn set_if_absent(root: &mut Value, path: &Path) {
    let mut cur = root;
    for k in path {
        let Value::Object(m) = cur else { return };
        cur = m
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn p(s: &str) -> Path {
        s.split('.').map(String::from).collect()
    }

    #[test]
    fn leaves_skip_server_metadata_and_treat_lists_as_atomic() {
        let obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "uid": "u", "labels": {"a": "1"}, "annotations": {}},
            "data": {"k": "v"},
            "spec": {"list": [1, 2], "nested": {"deep": true}},
            "status": {"ready": 1}
        });
        let all: Vec<_> = leaf_paths(&obj, false, false, &ListKeys::default())
            .into_iter()
            .collect();
        assert_eq!(
            all,
            [
                p("data.k"),
                p("metadata.annotations"),
                p("metadata.labels.a"),
                p("spec.list"),
                p("spec.nested.deep"),
                p("status.ready"),
            ]
        );
        assert_eq!(
            leaf_paths(&obj, true, false, &ListKeys::default())
                .into_iter()
                .collect::<Vec<_>>(),
            [p("status.ready")]
        );
        assert!(!leaf_paths(&obj, false, true, &ListKeys::default()).contains(&p("status.ready")));
    }

    #[test]
    fn set_remove_and_changes() {
        let mut obj = json!({});
        set(&mut obj, &p("spec.a.b"), json!(1));
        set(&mut obj, &p("spec.c"), json!(2));
        assert_eq!(obj, json!({"spec": {"a": {"b": 1}, "c": 2}}));
        remove(&mut obj, &p("spec.a.b"));
        assert_eq!(obj, json!({"spec": {"c": 2}}));
        let new = json!({"spec": {"c": 3, "d": 1}});
        let changed: Vec<_> = changed_paths(&obj, &new, false, false, &ListKeys::default())
            .into_iter()
            .collect();
        assert_eq!(changed, [p("spec.c"), p("spec.d")]);
        assert!(overlaps(&p("spec"), &p("spec.c")));
        assert!(!overlaps(&p("spec.a"), &p("spec.c")));
    }

    #[test]
    fn list_map_items_are_addressed_by_their_keys() {
        let keys = ListKeys {
            resource: "apps/v1/daemonsets",
            schema: None,
        };
        let obj = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "i", "ports": [{"containerPort": 80}]}
        ], "tolerations": [{"key": "x"}]}}}});
        let paths: Vec<String> = leaf_paths(&obj, false, false, &keys)
            .iter()
            .map(|p| p.join("|"))
            .collect();
        let c = "spec|template|spec|containers|k:{\"name\":\"a\"}";
        let port = format!("{c}|ports|k:{{\"containerPort\":80,\"protocol\":\"TCP\"}}");
        assert_eq!(
            paths,
            [
                format!("{c}|."),
                format!("{c}|image"),
                format!("{c}|name"),
                format!("{port}|."),
                format!("{port}|containerPort"),
                "spec|template|spec|tolerations".to_string(),
            ]
        );
        let item: Path = c.split('|').map(String::from).collect();
        let mut marker = item.clone();
        marker.push(ITEM.into());
        assert_eq!(get(&obj, &marker), Some(&json!(true)));
        let mut image = item.clone();
        image.push("image".into());
        assert_eq!(get(&obj, &image), Some(&json!("i")));
        // A new item is created from its keys (a defaulted protocol left out).
        let mut out = json!({});
        let new_port: Path = port
            .replace("80", "81")
            .split('|')
            .map(String::from)
            .collect();
        let mut leaf = new_port.clone();
        leaf.push("name".into());
        set(&mut out, &leaf, json!("http"));
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "ports": [{"containerPort": 81, "name": "http"}]}])
        );
        let mut gone = new_port;
        gone.push(ITEM.into());
        remove(&mut out, &gone);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a"}])
        );
        // Sharing: a container's marker shares its fields, not the items of its lists.
        assert!(shares(&image, &marker));
        assert!(!shares(&marker, &gone));
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        merge_patch(&mut t, &json!({"c": [1]}));
        assert_eq!(t, json!({"a": "z", "c": [1]}));
    }

    #[test]
    fn fields_v1_shape() {
        let set: FieldSet = [p("spec.replicas"), p("metadata.labels.a")].into();
        assert_eq!(
            fields_v1(&set),
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:replicas": {}}})
        );
    }
}
