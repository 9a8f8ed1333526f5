//! A change between two JSON documents, and applying it (`gpufree
//! record`'s changes between two full snapshots). Unlike a JSON merge
//! patch (RFC 7396), a field set to `null` stays a field, and an array is
//! changed item by item, so a holder's memory changing does not write the
//! whole list of holders again. RFC 6902 (the json-patch crate) would
//! carry the same changes, each operation with its whole JSON pointer
//! path; this typed form is SPEC.md's PATCH of a recording, which files in
//! the field are written in, so it stays (about 60 lines of code).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// What changed from one JSON value to the next.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Patch {
    /// The value, replaced whole.
    Set(Value),
    /// An object whose fields changed: those patched, those removed.
    Object {
        /// The fields changed or added.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        fields: BTreeMap<String, Patch>,
        /// The fields removed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removed: Vec<String>,
    },
    /// An array whose items changed, by index, and its new length (items
    /// past it are gone; an item past the old length is `Set`).
    Array {
        /// The items changed or added, each with its index, in order.
        items: Vec<(usize, Patch)>,
        /// The array's new length.
        len: usize,
    },
}

/// What changed from `old` to `new`; None when nothing did.
pub fn diff(old: &Value, new: &Value) -> Option<Patch> {
    if old == new {
        return None;
    }
    Some(match (old, new) {
        (Value::Object(o), Value::Object(n)) => object(o, n),
        (Value::Array(o), Value::Array(n)) => {
            let items = n
                .iter()
                .enumerate()
                .filter_map(|(i, v)| match o.get(i) {
                    Some(was) => diff(was, v).map(|p| (i, p)),
                    None => Some((i, Patch::Set(v.clone()))),
                })
                .collect();
            Patch::Array {
                items,
                len: n.len(),
            }
        }
        _ => Patch::Set(new.clone()),
    })
}

/// The patch of one object into another.
fn object(o: &Map<String, Value>, n: &Map<String, Value>) -> Patch {
    let fields = n
        .iter()
        .filter_map(|(k, v)| match o.get(k) {
            Some(was) => diff(was, v).map(|p| (k.clone(), p)),
            None => Some((k.clone(), Patch::Set(v.clone()))),
        })
        .collect();
    let removed = o.keys().filter(|k| !n.contains_key(*k)).cloned().collect();
    Patch::Object { fields, removed }
}

/// Why a patch does not fit the value it is applied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Misfit;

/// Applies `patch` to `target` (what [`diff`] made from it gives back
/// what it was made to). On a misfit `target` may be left part-changed:
/// the caller drops it (a replay stops at that line), rather than each
/// change cloning the whole document first.
pub fn apply(target: &mut Value, patch: &Patch) -> Result<(), Misfit> {
    match (target, patch) {
        (target, Patch::Set(v)) => *target = v.clone(),
        (Value::Object(map), Patch::Object { fields, removed }) => {
            for k in removed {
                map.remove(k);
            }
            for (k, p) in fields {
                match (map.get_mut(k), p) {
                    (Some(v), p) => apply(v, p)?,
                    (None, Patch::Set(v)) => {
                        map.insert(k.clone(), v.clone());
                    }
                    (None, _) => return Err(Misfit),
                }
            }
        }
        (
            Value::Array(items),
            Patch::Array {
                items: changed,
                len,
            },
        ) => {
            items.truncate(*len);
            for (i, p) in changed {
                let i = *i;
                let len = items.len();
                match (items.get_mut(i), p) {
                    (Some(v), p) => apply(v, p)?,
                    (None, Patch::Set(v)) if i == len => items.push(v.clone()),
                    _ => return Err(Misfit),
                }
            }
            if items.len() != *len {
                return Err(Misfit);
            }
        }
        _ => return Err(Misfit),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{apply, diff, Patch};
    use serde_json::json;

    #[test]
    fn a_diff_applied_gives_the_new_document_back() {
        let pairs = [
            (
                json!({"a": 1, "b": [1, 2, 3]}),
                json!({"a": 2, "b": [1, 5]}),
            ),
            (
                json!({"a": null, "b": [1]}),
                json!({"b": [1, {"x": null}], "c": null}),
            ),
            (
                json!([{"pid": 1, "m": 5}]),
                json!([{"pid": 1, "m": 6}, {"pid": 2}]),
            ),
            (
                json!({"a": {"b": {"c": 1}}}),
                json!({"a": {"b": {"c": 1, "d": 2}}}),
            ),
            (json!(1), json!("one")),
        ];
        for (old, new) in pairs {
            let p = diff(&old, &new).unwrap();
            let mut got = old.clone();
            apply(&mut got, &p).unwrap();
            assert_eq!(got, new, "{old} → {new} by {p:?}");
        }
        assert_eq!(diff(&json!({"a": 1}), &json!({"a": 1})), None);
    }

    #[test]
    fn only_what_changed_is_in_the_patch() {
        let old = json!({"processes": [{"pid": 1, "bytes": 5, "cmd": "long"}], "t": 1});
        let new = json!({"processes": [{"pid": 1, "bytes": 6, "cmd": "long"}], "t": 1});
        let p = serde_json::to_string(&diff(&old, &new).unwrap()).unwrap();
        assert!(!p.contains("long"), "{p}");
        assert!(p.contains("\"bytes\":{\"set\":6}"), "{p}");
        // A patch that does not fit is refused, said as a misfit.
        let mut other = json!(3);
        assert!(apply(
            &mut other,
            &Patch::Array {
                items: Vec::new(),
                len: 1
            }
        )
        .is_err());
    }
}
