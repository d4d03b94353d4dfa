//! The patches the fake applies: RFC 7386 JSON merge patch, and server-side apply as one field
//! manager sees it.

use serde_json::{Map, Value};

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

/// Server-side apply of `applied` onto `target` by a manager whose previous apply was `before`:
/// the fields it applied before and leaves out now are removed, then what it applies is merged
/// in (maps field by field, lists and values whole). Fields only others wrote stay. So
/// re-applying the same object changes nothing, and a field the operator stops applying goes.
/// The real server also tracks each field's owners (a field two managers applied stays when one
/// lets go), merges list-maps item by item and refuses conflicting applies without `force`:
/// that is the cluster tier's to test (kind.rs
/// `a_field_another_manager_takes_on_a_child_is_forced_back`).
pub fn apply(target: &mut Value, before: Option<&Value>, applied: &Value) {
    if let Some(before) = before {
        prune(target, before, applied);
    }
    merge_patch(target, applied);
}

/// Remove from `target` the fields of `before` that `now` no longer has.
fn prune(target: &mut Value, before: &Value, now: &Value) {
    let (Some(t), Some(b)) = (target.as_object_mut(), before.as_object()) else {
        return;
    };
    for (k, was) in b {
        match now.get(k) {
            None => {
                t.remove(k);
            }
            Some(is) => {
                if let Some(child) = t.get_mut(k) {
                    prune(child, was, is);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut v = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge_patch(&mut v, &json!({"a": {"b": null, "e": 3}, "d": [2]}));
        assert_eq!(v, json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }

    #[test]
    fn apply_prunes_what_the_manager_stopped_applying_and_keeps_the_rest() {
        let mut v = json!({"spec": {"a": 1, "b": [1, 2], "other": true}});
        let first = json!({"spec": {"a": 1, "b": [1, 2]}});
        apply(&mut v, None, &first);
        let again = v.clone();
        apply(&mut v, Some(&first), &first);
        assert_eq!(v, again, "the same apply changes nothing");
        apply(&mut v, Some(&first), &json!({"spec": {"b": [3]}}));
        assert_eq!(v, json!({"spec": {"b": [3], "other": true}}));
    }
}
