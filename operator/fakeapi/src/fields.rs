//! Field paths, field sets and patches: the pieces of the server-side-apply approximation.
//!
//! A field path is the list of map keys from the object root to a leaf. Leaves are scalars,
//! lists (every list is atomic: one manager owns it whole, unlike the real API server's
//! list-map merge keys) and empty maps.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

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

/// The leaf paths of `obj` that a manager can own, restricted to `status` when `status_only`,
/// and without `status` when `skip_status` (a main-resource write of a kind with a status
/// subresource).
pub fn leaf_paths(obj: &Value, status_only: bool, skip_status: bool) -> FieldSet {
    let mut out = FieldSet::new();
    if let Value::Object(m) = obj {
        for (k, v) in m {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "status" if skip_status => {}
                "status" => walk(v, vec![k.clone()], &mut out),
                _ if status_only => {}
                "metadata" => {
                    if let Value::Object(meta) = v {
                        for (mk, mv) in meta {
                            if !SERVER_METADATA.contains(&mk.as_str()) {
                                walk(mv, vec![k.clone(), mk.clone()], &mut out);
                            }
                        }
                    }
                }
                _ => walk(v, vec![k.clone()], &mut out),
            }
        }
    }
    out
}

fn walk(v: &Value, path: Path, out: &mut FieldSet) {
    match v {
        Value::Null => {}
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let mut p = path.clone();
                p.push(k.clone());
                walk(child, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// Whether two paths overlap (one is a prefix of the other).
pub fn overlaps(a: &Path, b: &Path) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

pub fn get<'a>(obj: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

/// Set `path` to `value`, creating maps on the way.
pub fn set(obj: &mut Value, path: &Path, value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for k in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(m) = cur else { return };
        cur = m
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    if let Value::Object(m) = cur {
        m.insert(last.clone(), value);
    }
}

/// Remove `path`, then every parent map it leaves empty.
pub fn remove(obj: &mut Value, path: &Path) {
    fn go(v: &mut Value, path: &[String]) {
        let Value::Object(m) = v else { return };
        match path {
            [] => {}
            [last] => {
                m.remove(last);
            }
            [first, rest @ ..] => {
                if let Some(child) = m.get_mut(first) {
                    go(child, rest);
                    if child.as_object().is_some_and(Map::is_empty) {
                        m.remove(first);
                    }
                }
            }
        }
    }
    go(obj, path);
}

/// Paths whose value differs between `old` and `new` (added, changed or removed leaves).
pub fn changed_paths(old: &Value, new: &Value, status_only: bool, skip_status: bool) -> FieldSet {
    let a = leaf_paths(old, status_only, skip_status);
    let b = leaf_paths(new, status_only, skip_status);
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
        let path: Path = p.iter().map(|k| format!("f:{k}")).collect();
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
        let all: Vec<_> = leaf_paths(&obj, false, false).into_iter().collect();
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
            leaf_paths(&obj, true, false)
                .into_iter()
                .collect::<Vec<_>>(),
            [p("status.ready")]
        );
        assert!(!leaf_paths(&obj, false, true).contains(&p("status.ready")));
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
        let changed: Vec<_> = changed_paths(&obj, &new, false, false)
            .into_iter()
            .collect();
        assert_eq!(changed, [p("spec.c"), p("spec.d")]);
        assert!(overlaps(&p("spec"), &p("spec.c")));
        assert!(!overlaps(&p("spec.a"), &p("spec.c")));
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
