//! The little of Kubernetes' protobuf wire format clients send the fake API server without
//! being asked: `kubectl create namespace` (kubectl 1.26 and later) posts a protobuf-encoded
//! Namespace, and a server that answers 415 breaks it. The envelope is the magic `k8s\0` then a
//! `runtime.Unknown` (field 1: TypeMeta {apiVersion, kind}; field 2: the object's own message);
//! a Namespace is {1: ObjectMeta, 2: NamespaceSpec {1: finalizers}, 3: status}, and of
//! ObjectMeta the fields a create carries are read: name (1), generateName (2), namespace (3),
//! labels (11) and annotations (12), maps of {1: key, 2: value}. Other kinds are refused with
//! 415 naming what the fake reads. Answers stay JSON (clients ask for JSON too).

use serde_json::{json, Map, Value};

/// One field of a protobuf message: length-delimited ones as bytes; varints and fixed-width
/// fields (nothing the fake reads) only skipped.
enum Field<'a> {
    Bytes(&'a [u8]),
    Other,
}

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of one message, in order; `None` when it is malformed.
fn fields(b: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let key = varint(b, &mut at)?;
        let (number, wire) = (key >> 3, key & 7);
        let f = match wire {
            0 => {
                varint(b, &mut at)?;
                Field::Other
            }
            1 => {
                at = at.checked_add(8).filter(|a| *a <= b.len())?;
                Field::Other
            }
            2 => {
                let len = usize::try_from(varint(b, &mut at)?).ok()?;
                let end = at.checked_add(len).filter(|e| *e <= b.len())?;
                let v = &b[at..end];
                at = end;
                Field::Bytes(v)
            }
            5 => {
                at = at.checked_add(4).filter(|a| *a <= b.len())?;
                Field::Other
            }
            _ => return None,
        };
        out.push((number, f));
    }
    Some(out)
}

fn text(f: &Field<'_>) -> Option<String> {
    match f {
        Field::Bytes(b) => String::from_utf8(b.to_vec()).ok(),
        _ => None,
    }
}

fn string_map(entries: &[&[u8]]) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    for e in entries {
        let mut k = String::new();
        let mut v = String::new();
        for (n, f) in fields(e)? {
            match n {
                1 => k = text(&f)?,
                2 => v = text(&f)?,
                _ => {}
            }
        }
        m.insert(k, Value::String(v));
    }
    Some(m)
}

fn object_meta(b: &[u8]) -> Option<Value> {
    let mut meta = Map::new();
    let (mut labels, mut annotations) = (Vec::new(), Vec::new());
    for (n, f) in fields(b)? {
        match (n, &f) {
            (1, _) => {
                meta.insert("name".into(), Value::String(text(&f)?));
            }
            (2, _) => {
                meta.insert("generateName".into(), Value::String(text(&f)?));
            }
            (3, _) => {
                meta.insert("namespace".into(), Value::String(text(&f)?));
            }
            (11, Field::Bytes(e)) => labels.push(*e),
            (12, Field::Bytes(e)) => annotations.push(*e),
            _ => {}
        }
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(string_map(&labels)?));
    }
    if !annotations.is_empty() {
        meta.insert(
            "annotations".into(),
            Value::Object(string_map(&annotations)?),
        );
    }
    Some(Value::Object(meta))
}

/// A protobuf request body as the JSON object it stands for, or why it cannot be read.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or("a protobuf body must start with the magic k8s\\0")?;
    let unknown = fields(rest).ok_or("malformed protobuf envelope")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for (n, f) in &unknown {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (m, g) in fields(tm).ok_or("malformed TypeMeta")? {
                    match m {
                        1 => api_version = text(&g).ok_or("bad apiVersion")?,
                        2 => kind = text(&g).ok_or("bad kind")?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(r)) => raw = Some(*r),
            _ => {}
        }
    }
    if (api_version.as_str(), kind.as_str()) != ("v1", "Namespace") {
        return Err(format!(
            "this fake API server reads protobuf bodies of v1 Namespaces only (got {api_version} {kind}); send JSON"
        ));
    }
    let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}});
    for (n, f) in fields(raw.unwrap_or_default()).ok_or("malformed Namespace")? {
        match (n, f) {
            (1, Field::Bytes(m)) => {
                ns["metadata"] = object_meta(m).ok_or("malformed ObjectMeta")?
            }
            (2, Field::Bytes(s)) => {
                let finalizers: Vec<Value> = fields(s)
                    .ok_or("malformed NamespaceSpec")?
                    .iter()
                    .filter(|(n, _)| *n == 1)
                    .filter_map(|(_, f)| text(f).map(Value::String))
                    .collect();
                if !finalizers.is_empty() {
                    ns["spec"] = json!({ "finalizers": finalizers });
                }
            }
            _ => {}
        }
    }
    Ok(ns)
}

/// `GET /openapi/v2` in the protobuf form clients ask for (`gnostic`'s `openapi_v2.Document`):
/// the empty document, i.e. no schemas. kubectl validates an object against its kind's schema
/// when there is one and skips validation when there is none, as for a CRD without a schema;
/// the fake validates what it stores itself. The content type is the one kube-apiserver answers
/// with (clients ask with `@v1.0`, which Go's media type parser refuses in an answer).
pub const OPENAPI_V2_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![
            u8::try_from(n << 3 | 2).unwrap(),
            u8::try_from(bytes.len()).unwrap(),
        ];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn a_namespace_as_kubectl_sends_it() {
        let label = [field(1, b"team"), field(2, b"red")].concat();
        let meta = [field(1, b"tenant-a"), field(11, &label)].concat();
        let raw = field(1, &meta);
        let type_meta = [field(1, b"v1"), field(2, b"Namespace")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["metadata"]["name"], "tenant-a");
        assert_eq!(v["metadata"]["labels"]["team"], "red");
        assert_eq!(v["kind"], "Namespace");
        assert!(decode(b"{}").is_err());
        let pod = [
            b"k8s\0".to_vec(),
            field(1, &[field(1, b"v1"), field(2, b"Pod")].concat()),
        ]
        .concat();
        assert!(decode(&pod).unwrap_err().contains("Namespaces only"));
        assert!(decode(b"k8s\0\x0a\xff").is_err(), "truncated");
    }
}
