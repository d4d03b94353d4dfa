//! Deletion and the garbage collector, as the real ones behave: `propagationPolicy` Background
//! (the default: the owner goes at once, its dependents after it), Foreground (the owner gets a
//! `deletionTimestamp` and the `foregroundDeletion` finalizer and stays until every dependent
//! with `blockOwnerDeletion` is gone) and Orphan (the dependents lose their owner reference and
//! stay). A dependent that still has another live owner is not deleted; it only loses the
//! reference to the one that went.

use serde_json::{Value, json};

use crate::{ApiError, ChangeType, ObjKey, State, now};

/// Manager name of the garbage collector's writes (as on a real cluster).
pub const GARBAGE_COLLECTOR: &str = "generic-garbage-collector";
/// The finalizer of an owner in foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";

/// How a delete treats the dependents of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    /// From the DeleteOptions body (what kube sends) or the `propagationPolicy` query parameter.
    pub fn parse(query: Option<&str>, body: &[u8]) -> Result<Self, ApiError> {
        let options: Option<Value> = serde_json::from_slice(body).ok();
        let from_body = options
            .as_ref()
            .and_then(|o| o.get("propagationPolicy"))
            .and_then(Value::as_str);
        match from_body.or(query) {
            None | Some("Background") => Ok(Self::Background),
            Some("Foreground") => Ok(Self::Foreground),
            Some("Orphan") => Ok(Self::Orphan),
            Some(other) => Err(ApiError::new(
                400,
                "BadRequest",
                format!(
                    "unsupported propagationPolicy {other:?}: Background, Foreground or Orphan"
                ),
            )),
        }
    }
}

fn refs(o: &Value) -> &[Value] {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn finalizers(o: &Value) -> Vec<String> {
    o.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
}

impl State {
    /// Delete `k` with `policy`: with finalizers (or in the foreground), mark it for deletion;
    /// without, remove it (and collect its dependents).
    pub(crate) fn delete_object(
        &mut self,
        k: &ObjKey,
        policy: Propagation,
    ) -> Result<Value, ApiError> {
        let obj = self
            .objects
            .get(k)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&format!("{} {}", k.0, k.2)))?;
        let uid = obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if policy == Propagation::Orphan {
            self.orphan_dependents(&uid);
        }
        let mut fins = finalizers(&obj);
        let marking = obj.pointer("/metadata/deletionTimestamp").is_none();
        if policy == Propagation::Foreground && marking && !fins.iter().any(|f| f == FOREGROUND) {
            fins.push(FOREGROUND.into());
        }
        if fins.is_empty() {
            return self.remove_object(k, obj);
        }
        if !marking {
            return Ok(obj);
        }
        let mut marked = obj;
        marked["metadata"]["deletionTimestamp"] = json!(now());
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        marked["metadata"]["finalizers"] = json!(fins);
        // commit_raw keeps the old deletionTimestamp, so store it directly.
        self.rv += 1;
        marked["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(k.clone(), marked.clone());
        self.emit(k, ChangeType::Modified, marked.clone(), false);
        if policy == Propagation::Foreground {
            self.collect_dependents(&uid);
            self.finish_foreground(&uid);
        }
        Ok(marked)
    }

    /// Objects with an owner reference to `uid`.
    fn dependents(&self, uid: &str) -> Vec<ObjKey> {
        self.objects
            .iter()
            .filter(|(_, o)| refs(o).iter().any(|r| r["uid"] == uid))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn live(&self, uid: &str) -> bool {
        self.objects.values().any(|o| {
            o["metadata"]["uid"] == uid && o.pointer("/metadata/deletionTimestamp").is_none()
        })
    }

    /// The dependents of `uid` (gone, or being deleted in the foreground): deleted, unless
    /// another live owner keeps them, which then only lose the reference to `uid`.
    pub(crate) fn collect_dependents(&mut self, uid: &str) {
        for d in self.dependents(uid) {
            let Some(o) = self.objects.get(&d) else {
                continue;
            };
            let kept = refs(o)
                .iter()
                .filter_map(|r| r["uid"].as_str())
                .any(|other| other != uid && self.live(other));
            if kept {
                self.drop_reference(&d, uid);
            } else {
                let _ = self.delete_object(&d, Propagation::Background);
            }
        }
    }

    /// An object written through the API whose owner references all name objects that no
    /// longer exist (a controller that wrote from a stale cache) is deleted in the background,
    /// as the real collector does with dangling owners. Objects the test puts directly are left
    /// alone.
    pub(crate) fn collect_if_orphaned(&mut self, k: &ObjKey) {
        let Some(o) = self.objects.get(k) else {
            return;
        };
        let owners: Vec<&str> = refs(o).iter().filter_map(|r| r["uid"].as_str()).collect();
        let exists = |uid: &&str| self.objects.values().any(|o| o["metadata"]["uid"] == *uid);
        if owners.is_empty() || owners.iter().any(exists) {
            return;
        }
        let _ = self.delete_object(k, Propagation::Background);
    }

    fn orphan_dependents(&mut self, uid: &str) {
        for d in self.dependents(uid) {
            self.drop_reference(&d, uid);
        }
    }

    fn drop_reference(&mut self, k: &ObjKey, uid: &str) {
        let Some(mut o) = self.objects.get(k).cloned() else {
            return;
        };
        let left: Vec<Value> = refs(&o)
            .iter()
            .filter(|r| r["uid"] != uid)
            .cloned()
            .collect();
        match o["metadata"].as_object_mut() {
            Some(m) if left.is_empty() => {
                m.remove("ownerReferences");
            }
            Some(m) => {
                m.insert("ownerReferences".into(), json!(left));
            }
            None => return,
        }
        let _ = self.commit(k, o, GARBAGE_COLLECTOR, None, "Update");
    }

    /// An owner in foreground deletion loses its `foregroundDeletion` finalizer (and goes, if
    /// it was the last) once no dependent with `blockOwnerDeletion` is left.
    pub(crate) fn finish_foreground(&mut self, owner_uid: &str) {
        let Some((k, owner)) = self
            .objects
            .iter()
            .find(|(_, o)| o["metadata"]["uid"] == owner_uid)
            .map(|(k, o)| (k.clone(), o.clone()))
        else {
            return;
        };
        if !finalizers(&owner).iter().any(|f| f == FOREGROUND) {
            return;
        }
        let blocked = self.objects.values().any(|o| {
            refs(o)
                .iter()
                .any(|r| r["uid"] == owner_uid && r["blockOwnerDeletion"] == true)
        });
        if blocked {
            return;
        }
        let mut done = owner;
        let left: Vec<String> = finalizers(&done)
            .into_iter()
            .filter(|f| f != FOREGROUND)
            .collect();
        done["metadata"]["finalizers"] = json!(left);
        let _ = self.commit(&k, done, GARBAGE_COLLECTOR, None, "Update");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_comes_from_the_body_or_the_query() {
        let body =
            br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#;
        assert_eq!(Propagation::parse(None, body), Ok(Propagation::Foreground));
        assert_eq!(
            Propagation::parse(Some("Orphan"), b""),
            Ok(Propagation::Orphan)
        );
        assert_eq!(Propagation::parse(None, b""), Ok(Propagation::Background));
        let err = Propagation::parse(Some("Sideways"), b"").unwrap_err();
        assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
    }
}
