//! Label and field selectors, parsed as kube-apiserver parses them and matched against JSON objects.
//!
//! Label selectors support every operator of the Kubernetes syntax: `k=v`, `k==v`, `k!=v`, `k`,
//! `!k`, `k in (a,b)`, `k notin (a,b)`, `k>n`, `k<n`. Field selectors support `=`, `==`, `!=` on the
//! labels the resource type declares selectable (see [`super::resources::ResourceType::fields`]);
//! a missing field reads as the empty string, a boolean as `true`/`false`, as on a real server.
//!
//! Limits: label values are not validated against the label value syntax.

use serde_json::Value;

/// A selector parse error (the message kube-apiserver would put in a 400 `Status`).
// A hand-written `Error` impl: the tests crate does not depend on thiserror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl std::fmt::Display for SelectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Exists,
    NotExists,
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            SelectorError(format!(
                "unable to parse requirement: found '{whole}', expected: '('"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses a selector string such as `app=web,tier!=db,!legacy,env in (a,b)`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for part in split_top(s) {
            let p = part.trim();
            let bad = || SelectorError(format!("unable to parse requirement: {p:?}"));
            if p.is_empty() {
                return Err(bad());
            }
            let (key, op) = if let Some(k) = p.strip_prefix('!') {
                (k.trim().to_string(), LabelOp::NotExists)
            } else if let Some((k, v)) = p.split_once("!=") {
                (k.trim().to_string(), LabelOp::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once("==") {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('=') {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('>') {
                let n = v.trim().parse().map_err(|_| bad())?;
                (k.trim().to_string(), LabelOp::Gt(n))
            } else if let Some((k, v)) = p.split_once('<') {
                let n = v.trim().parse().map_err(|_| bad())?;
                (k.trim().to_string(), LabelOp::Lt(n))
            } else if let Some((k, rest)) = p.split_once(" notin ") {
                (k.trim().to_string(), LabelOp::NotIn(parse_set(rest, p)?))
            } else if let Some((k, rest)) = p.split_once(" in ") {
                (k.trim().to_string(), LabelOp::In(parse_set(rest, p)?))
            } else {
                (p.to_string(), LabelOp::Exists)
            };
            if !valid_key(&key) {
                return Err(SelectorError(format!(
                    "invalid label key {key:?} in selector {s:?}"
                )));
            }
            reqs.push((key, op));
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.reqs.iter().all(|(key, op)| {
            let value = labels.get(key).and_then(Value::as_str);
            match op {
                LabelOp::Exists => value.is_some(),
                LabelOp::NotExists => value.is_none(),
                LabelOp::Eq(v) => value == Some(v.as_str()),
                LabelOp::NotEq(v) => value != Some(v.as_str()),
                LabelOp::In(vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
                LabelOp::NotIn(vs) => !value.is_some_and(|x| vs.iter().any(|v| v == x)),
                LabelOp::Gt(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                LabelOp::Lt(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// Splits on unescaped commas and unescapes `\,`, `\=`, `\\`.
fn split_fields(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    if !matches!(n, ',' | '=' | '\\' | '!') {
                        cur.push('\\');
                    }
                    cur.push(n);
                    // Mark escaped separators so the operator split below skips them.
                    if matches!(n, '=' | '!') {
                        cur.pop();
                        cur.push(if n == '=' { '\u{1}' } else { '\u{2}' });
                    }
                }
            }
            ',' => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn restore(s: &str) -> String {
    s.replace('\u{1}', "=").replace('\u{2}', "!")
}

impl FieldSelector {
    /// Parses `metadata.name=x,spec.nodeName!=y`; `allowed` says whether a label is selectable.
    pub fn parse(s: &str, allowed: impl Fn(&str) -> bool) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector { reqs });
        }
        for part in split_fields(s) {
            let (field, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{s}'; can't understand '{}'",
                    restore(&part)
                )));
            };
            let field = restore(field.trim());
            if !allowed(&field) {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            reqs.push((field, eq, restore(value)));
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether the object's fields satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(field, eq, want)| (field_value(obj, field) == *want) == *eq)
    }
}

/// The string value of a dotted field path, as field selectors see it.
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut v = obj;
    for seg in path.split('.') {
        match v.get(seg) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: &Value, node: &str) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels.clone()}, "spec": {"nodeName": node, "hostNetwork": true}})
    }

    #[test]
    fn label_selector_operators() {
        let o = pod(&json!({"app": "web", "tier": "front", "n": "5"}), "n1");
        let ok = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(ok(""));
        assert!(ok("app=web"));
        assert!(ok("app==web,tier"));
        assert!(!ok("app!=web"));
        assert!(ok("missing!=x"));
        assert!(ok("!missing"));
        assert!(!ok("!app"));
        assert!(ok("tier in (back,front)"));
        assert!(!ok("tier notin (back,front)"));
        assert!(ok("app=web,tier in (front, x),n>3,n<6"));
        assert!(!ok("n>5"));
        assert!(LabelSelector::parse("a b=c").is_err());
        assert!(LabelSelector::parse("a in x").is_err());
    }

    #[test]
    fn field_selector_values_and_allowed_labels() {
        let o = pod(&json!({}), "n1");
        let any = |_: &str| true;
        let ok = |s: &str| FieldSelector::parse(s, any).unwrap().matches(&o);
        assert!(ok("spec.nodeName=n1"));
        assert!(!ok("spec.nodeName=n2"));
        assert!(ok("spec.nodeName!=n2,metadata.name=p"));
        assert!(ok("spec.hostNetwork=true"));
        assert!(ok("status.podIP="));
        let only_name = |f: &str| f == "metadata.name";
        let err = FieldSelector::parse("host=n1", only_name).unwrap_err();
        assert_eq!(err.0, "field label not supported: host");
        assert!(FieldSelector::parse("metadata.name", only_name).is_err());
        let escaped = json!({"metadata": {"name": "a,b=c"}});
        assert!(FieldSelector::parse(r"metadata.name=a\,b\=c", any)
            .unwrap()
            .matches(&escaped));
    }
}
