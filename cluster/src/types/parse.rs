//! The one parser every source shares: YAML or JSON, one object, a list or many documents, into
//! [`ClusterObject`]s, with errors that name the document, the item and the field.

use serde::de::DeserializeOwned;

use super::*;

/// Why a text did not parse into objects. Validation of the values is separate
/// ([`crate::validate`]); this is about syntax and shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// YAML or JSON syntax (the message carries the line and column).
    #[error("document {document}: {message}")]
    Syntax {
        /// 1-based document number in the file.
        document: usize,
        /// The parser's message.
        message: String,
    },
    /// A document is not an object with `apiVersion` and `kind`.
    #[error("document {document}{item}: {message}", item = item_text(*item))]
    Shape {
        /// 1-based document number.
        document: usize,
        /// 0-based index in a `List`'s `items`.
        item: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A field has the wrong type, is missing or is unknown.
    #[error("document {document}{item}: {kind} {name:?}: field {path}: {message}", item = item_text(*item))]
    Field {
        /// 1-based document number.
        document: usize,
        /// 0-based index in a `List`'s `items`.
        item: Option<usize>,
        /// The object's kind.
        kind: Kind,
        /// The object's name when it could be read.
        name: String,
        /// The path of the field (`clusterNetworks[0].hostSubnetLength`, `.` for the object).
        path: String,
        /// serde's message.
        message: String,
    },
}

pub(crate) fn item_text(item: Option<usize>) -> String {
    item.map(|i| format!(" items[{i}]")).unwrap_or_default()
}

/// The format of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML, possibly several documents separated by `---`.
    Yaml,
    /// One JSON value.
    Json,
}

/// Parses a text into objects, in document order; `kind: List` (or `*List`) documents contribute
/// their `items`. Empty YAML documents are skipped.
pub fn parse_objects(text: &str, format: Format) -> Result<Vec<ClusterObject>, ParseError> {
    let documents: Vec<serde_json::Value> = match format {
        Format::Json => vec![serde_json::from_str(text).map_err(|e| ParseError::Syntax {
            document: 1,
            message: e.to_string(),
        })?],
        Format::Yaml => {
            crate::yaml::from_multiple::<serde_json::Value>(text).map_err(|e| {
                // The document holding the error: `---` lines before its line, plus one.
                let line = e.location().map_or(1, |l| l.line());
                let separators = text
                    .lines()
                    .take(usize::try_from(line.saturating_sub(1)).unwrap_or(usize::MAX))
                    .skip_while(|l| l.trim().is_empty() || l.starts_with('#'))
                    .skip(1)
                    .filter(|l| l.starts_with("---"))
                    .count();
                ParseError::Syntax {
                    document: separators + 1,
                    message: e.to_string(),
                }
            })?
        }
    };
    let mut objects = Vec::new();
    for (i, doc) in documents.into_iter().enumerate() {
        let document = i + 1;
        if doc.is_null() {
            continue;
        }
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
        if kind == "List" || (kind.ends_with("List") && doc.get("items").is_some()) {
            let items = match doc.get("items") {
                Some(serde_json::Value::Array(items)) => items.clone(),
                Some(serde_json::Value::Null) | None => Vec::new(),
                Some(_) => {
                    return Err(ParseError::Shape {
                        document,
                        item: None,
                        message: format!("{kind}: items must be a list"),
                    })
                }
            };
            for (j, item) in items.into_iter().enumerate() {
                objects.push(parse_object(item, document, Some(j))?);
            }
        } else {
            objects.push(parse_object(doc, document, None)?);
        }
    }
    Ok(objects)
}

/// Parses one object value by its `kind`.
pub(crate) fn parse_object(
    value: serde_json::Value,
    document: usize,
    item: Option<usize>,
) -> Result<ClusterObject, ParseError> {
    let shape = |message: String| ParseError::Shape {
        document,
        item,
        message,
    };
    let serde_json::Value::Object(map) = &value else {
        return Err(shape(format!(
            "expected an object with apiVersion and kind, found {}",
            json_type(&value)
        )));
    };
    let api_version = match map.get("apiVersion") {
        Some(serde_json::Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(shape(format!(
                "apiVersion must be a string, found {}",
                json_type(other)
            )))
        }
        None => return Err(shape("missing apiVersion".into())),
    };
    let kind_str = match map.get("kind") {
        Some(serde_json::Value::String(s)) => s.as_str(),
        _ => return Err(shape("missing kind (a string)".into())),
    };
    let Some(kind) = Kind::from_kind(kind_str) else {
        return Err(shape(format!(
            "unsupported kind {kind_str:?}: expected ClusterNetwork, HostSubnet, NetNamespace, EgressNetworkPolicy, ClusterNetworkPolicy, Node or List"
        )));
    };
    let expected = match kind {
        Kind::ClusterNetworkPolicy => [super::CNP_API_VERSION, super::CNP_API_VERSION],
        Kind::Node => [super::NODE_API_VERSION, super::NODE_API_VERSION],
        _ => [API_VERSION, LEGACY_API_VERSION],
    };
    if !expected.contains(&api_version) {
        return Err(shape(format!(
            "{kind} apiVersion {api_version:?}: expected {:?}",
            expected[0]
        )));
    }
    let name = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_string();
    let field = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        ParseError::Field {
            document,
            item,
            kind,
            name: name.clone(),
            path,
            message: e.into_inner().to_string(),
        }
    };
    fn typed<T: DeserializeOwned>(
        v: serde_json::Value,
    ) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
        serde_path_to_error::deserialize(v)
    }
    Ok(match kind {
        Kind::ClusterNetwork => ClusterObject::ClusterNetwork(typed(value).map_err(field)?),
        Kind::HostSubnet => ClusterObject::HostSubnet(typed(value).map_err(field)?),
        Kind::NetNamespace => ClusterObject::NetNamespace(typed(value).map_err(field)?),
        Kind::EgressNetworkPolicy => {
            ClusterObject::EgressNetworkPolicy(typed(value).map_err(field)?)
        }
        Kind::ClusterNetworkPolicy => ClusterObject::ClusterNetworkPolicy(
            super::ClusterPolicyObject::new(value)
                .map_err(|e| shape(format!("ClusterNetworkPolicy metadata: {e}")))?,
        ),
        Kind::Node => ClusterObject::Node(typed(value).map_err(field)?),
    })
}

pub(crate) fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Renders an object as YAML (the standalone writer's format).
pub fn to_yaml(obj: &ClusterObject) -> Result<String, crate::yaml::SerializeError> {
    crate::yaml::to_state_text(obj)
}
