//! The patch formats of `PATCH` requests: JSON merge patch (RFC 7396) and JSON patch (RFC 6902).
//!
//! Strategic merge patch and server-side apply are served as merge patches (see the server), which
//! differs from kube-apiserver only for lists with merge keys (containers, ports, conditions): a
//! merge patch replaces such a list where a strategic merge would merge it by key.
//!
//! JSON patch supports every RFC 6902 operation (`add`, `remove`, `replace`, `move`, `copy`,
//! `test`); a failing operation leaves the target untouched (patches are applied to a copy).

use serde_json::Value;

/// A JSON patch that cannot be applied (message for a 422 or 400 `Status`).
// A hand-written `Error` impl: the tests crate does not depend on thiserror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError(pub String);

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PatchError {}

/// Applies a JSON merge patch (RFC 7396) to `target` in place.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
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

/// Splits a JSON pointer (RFC 6901) into unescaped tokens.
fn pointer_tokens(ptr: &str) -> Result<Vec<String>, PatchError> {
    if ptr.is_empty() {
        return Ok(Vec::new());
    }
    let rest = ptr
        .strip_prefix('/')
        .ok_or_else(|| PatchError(format!("invalid json pointer {ptr:?}")))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn array_index(token: &str, len: usize, allow_end: bool, ptr: &str) -> Result<usize, PatchError> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let i: usize = token
        .parse()
        .map_err(|_| PatchError(format!("invalid array index {token:?} in {ptr:?}")))?;
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > max || (!allow_end && len == 0) {
        return Err(PatchError(format!(
            "array index {i} out of bounds in {ptr:?}"
        )));
    }
    Ok(i)
}

/// The parent container of `ptr` and the last token.
fn parent_mut<'a>(doc: &'a mut Value, ptr: &str) -> Result<(&'a mut Value, String), PatchError> {
    let mut tokens = pointer_tokens(ptr)?;
    let last = tokens
        .pop()
        .ok_or_else(|| PatchError("the root cannot be the target here".to_string()))?;
    let mut cur = doc;
    for t in &tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => {
                let i = array_index(t, a.len(), false, ptr)?;
                a.get_mut(i)
            }
            _ => None,
        }
        .ok_or_else(|| PatchError(format!("path {ptr:?} does not exist")))?;
    }
    Ok((cur, last))
}

fn get<'a>(doc: &'a Value, ptr: &str) -> Result<&'a Value, PatchError> {
    doc.pointer(ptr)
        .ok_or_else(|| PatchError(format!("path {ptr:?} does not exist")))
}

fn add(doc: &mut Value, ptr: &str, value: Value) -> Result<(), PatchError> {
    if ptr.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_mut(doc, ptr)?;
    match parent {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            let i = array_index(&last, a.len(), true, ptr)?;
            a.insert(i, value);
        }
        _ => return Err(PatchError(format!("parent of {ptr:?} is not a container"))),
    }
    Ok(())
}

fn remove(doc: &mut Value, ptr: &str) -> Result<Value, PatchError> {
    let (parent, last) = parent_mut(doc, ptr)?;
    match parent {
        Value::Object(m) => m
            .remove(&last)
            .ok_or_else(|| PatchError(format!("path {ptr:?} does not exist"))),
        Value::Array(a) => {
            let i = array_index(&last, a.len(), false, ptr)?;
            Ok(a.remove(i))
        }
        _ => Err(PatchError(format!("path {ptr:?} does not exist"))),
    }
}

fn str_field<'a>(op: &'a Value, name: &str, i: usize) -> Result<&'a str, PatchError> {
    op.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| PatchError(format!("operation {i}: missing string field {name:?}")))
}

fn value_field(op: &Value, i: usize) -> Result<Value, PatchError> {
    op.get("value")
        .cloned()
        .ok_or_else(|| PatchError(format!("operation {i}: missing field \"value\"")))
}

/// Applies a JSON patch (RFC 6902, an array of operations) to `target`; on error `target` is
/// unchanged.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| PatchError("a json patch must be an array of operations".to_string()))?;
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        let kind = str_field(op, "op", i)?;
        let path = str_field(op, "path", i)?;
        match kind {
            "add" => add(&mut doc, path, value_field(op, i)?)?,
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                let value = value_field(op, i)?;
                if path.is_empty() {
                    doc = value;
                } else {
                    get(&doc, path)?;
                    remove(&mut doc, path)?;
                    add(&mut doc, path, value)?;
                }
            }
            "move" => {
                let from = str_field(op, "from", i)?;
                if path.starts_with(&format!("{from}/")) {
                    return Err(PatchError(format!(
                        "operation {i}: cannot move {from:?} into its own child {path:?}"
                    )));
                }
                let v = remove(&mut doc, from)?;
                add(&mut doc, path, v)?;
            }
            "copy" => {
                let from = str_field(op, "from", i)?;
                let v = get(&doc, from)?.clone();
                add(&mut doc, path, v)?;
            }
            "test" => {
                let want = value_field(op, i)?;
                let have = get(&doc, path)?;
                if *have != want {
                    return Err(PatchError(format!(
                        "testing value {path} failed: have {have}, want {want}"
                    )));
                }
            }
            other => {
                return Err(PatchError(format!(
                    "operation {i}: unknown operation {other:?}"
                )))
            }
        }
    }
    *target = doc;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7396_examples() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(
            &mut t,
            &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"x": 1}}),
        );
        assert_eq!(
            t,
            json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"x": 1}})
        );
        let mut s = json!("x");
        merge_patch(&mut s, &json!({"a": 1}));
        assert_eq!(s, json!({"a": 1}));
    }

    #[test]
    fn json_patch_operations() {
        let mut t = json!({"metadata": {"labels": {"a/b": "1"}}, "l": [1, 2, 3]});
        json_patch(
            &mut t,
            &json!([
                {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
                {"op": "add", "path": "/metadata/labels/x", "value": "y"},
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "replace", "path": "/l/0", "value": 9},
                {"op": "add", "path": "/l/-", "value": 4},
                {"op": "add", "path": "/l/1", "value": 8},
                {"op": "copy", "from": "/l/0", "path": "/c"},
                {"op": "move", "from": "/c", "path": "/m"},
            ]),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"labels": {"x": "y"}}, "l": [9, 8, 2, 3, 4], "m": 9})
        );
        let before = t.clone();
        let err = json_patch(
            &mut t,
            &json!([
                {"op": "add", "path": "/z", "value": 1},
                {"op": "test", "path": "/m", "value": 1},
            ]),
        )
        .unwrap_err();
        assert!(err.0.contains("testing value /m failed"), "{err}");
        assert_eq!(t, before, "a failed patch changes nothing");
        assert!(json_patch(
            &mut t,
            &json!([{"op": "replace", "path": "/nope", "value": 1}])
        )
        .is_err());
        assert!(json_patch(&mut t, &json!([{"op": "remove", "path": "/l/7"}])).is_err());
        assert!(json_patch(&mut t, &json!({"op": "add"})).is_err());
    }
}
