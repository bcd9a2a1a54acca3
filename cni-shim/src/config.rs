//! The network config on stdin: the few keys the shim itself needs, and the VERSION answer.
//!
//! The shim reads only what it must to reach the agent and to speak the right version:
//! `cniVersion`, `name`, and our keys `socket` and `timeoutSeconds`. The config is forwarded to
//! the agent as the exact text read from stdin (validated as JSON here), so nothing is lost or
//! reordered (`prevResult`, `runtimeConfig`, numbers as written). Every other key, `namespace`
//! included, is the agent's business.
//!
//! Limits: `timeoutSeconds` is capped at one day so that deadline arithmetic cannot overflow; the
//! per-command minimum versions (CHECK >= 0.4.0, GC/STATUS >= 1.1.0) are enforced by the agent.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{CniError, DECODE_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG};

/// The CNI versions the shim and the agent speak (`cni-proto`'s list).
pub(crate) const SUPPORTED_VERSIONS: [&str; 5] = {
    let v = cni_proto::SUPPORTED_VERSIONS;
    [
        v[0].as_str(),
        v[1].as_str(),
        v[2].as_str(),
        v[3].as_str(),
        v[4].as_str(),
    ]
};
/// The version the VERSION answer carries when the runtime asked for none we support.
pub(crate) const LATEST_VERSION: &str = cni_proto::CniVersion::LATEST.as_str();
/// The agent socket when the config has no `socket` key.
pub(crate) use cni_proto::DEFAULT_SOCKET;
/// The request deadline when the config has no `timeoutSeconds` key.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(cni_proto::DEFAULT_TIMEOUT_SECS);
/// The largest accepted `timeoutSeconds`.
pub(crate) const MAX_TIMEOUT_SECONDS: f64 = 86_400.0;
/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// Whether `v` is one of [`SUPPORTED_VERSIONS`].
pub(crate) fn is_supported(v: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&v)
}

/// The VERSION answer: `stdin` holds `{"cniVersion":"x"}` (or nothing, or garbage). The result
/// carries the asked version when supported, else [`LATEST_VERSION`].
pub(crate) fn version_reply(stdin: &[u8]) -> String {
    let asked = serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| v.as_object().and_then(supported_version));
    let versions: Vec<String> = SUPPORTED_VERSIONS
        .iter()
        .map(|v| crate::error::json_str(v))
        .collect();
    format!(
        "{{\"cniVersion\":{},\"supportedVersions\":[{}]}}",
        crate::error::json_str(asked.as_deref().unwrap_or(LATEST_VERSION)),
        versions.join(",")
    )
}

/// The config's `cniVersion` if it is a supported version (used to tag the shim's errors).
pub(crate) fn supported_version(config: &Map<String, Value>) -> Option<String> {
    config
        .get("cniVersion")
        .and_then(Value::as_str)
        .filter(|v| is_supported(v))
        .map(str::to_owned)
}

/// Parses stdin as a JSON object (code 6 otherwise).
pub(crate) fn decode(stdin: &[u8]) -> Result<Map<String, Value>, CniError> {
    match serde_json::from_slice::<Value>(stdin) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(CniError::new(
            DECODE_FAILURE,
            "failed to decode the network config on stdin",
            format!("expected a JSON object, got {}", kind(&other)),
        )),
        Err(e) if stdin.iter().all(u8::is_ascii_whitespace) => Err(CniError::new(
            DECODE_FAILURE,
            "failed to decode the network config on stdin",
            format!("stdin is empty ({e})"),
        )),
        Err(e) => Err(CniError::new(
            DECODE_FAILURE,
            "failed to decode the network config on stdin",
            format!("not valid JSON: {e}"),
        )),
    }
}

/// What the shim takes from the network config.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NetConf {
    /// `cniVersion` (supported).
    pub cni_version: String,
    /// `name`.
    pub name: String,
    /// The agent's socket (`socket`, absolute).
    pub socket: PathBuf,
    /// The request deadline (`timeoutSeconds`).
    pub timeout: Duration,
}

/// Validates the decoded config: code 7 for a missing or malformed key, code 1 for an
/// unsupported `cniVersion`.
pub(crate) fn validate(config: &Map<String, Value>) -> Result<NetConf, CniError> {
    let invalid = |what: String| {
        CniError::new(
            INVALID_CONFIG,
            "invalid network config",
            format!("{what} (sdn-cni network config)"),
        )
    };
    let cni_version = match config.get("cniVersion") {
        Some(Value::String(v)) => v.clone(),
        None => return Err(invalid("`cniVersion` is missing".into())),
        Some(other) => {
            return Err(invalid(format!(
                "`cniVersion` must be a string, got {}",
                kind(other)
            )))
        }
    };
    if !is_supported(&cni_version) {
        return Err(CniError::new(
            INCOMPATIBLE_VERSION,
            format!(
                "incompatible CNI version {cni_version:?}: sdn-cni supports {}",
                SUPPORTED_VERSIONS.join(", ")
            ),
            format!(
                "set `cniVersion` of the network config to one of {}",
                SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    let name = match config.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        Some(Value::String(_)) => return Err(invalid("`name` is empty".into())),
        None => return Err(invalid("`name` is missing".into())),
        Some(other) => {
            return Err(invalid(format!(
                "`name` must be a string, got {}",
                kind(other)
            )))
        }
    };
    let socket = match config.get("socket") {
        None => PathBuf::from(DEFAULT_SOCKET),
        Some(Value::String(s)) if !s.starts_with('/') => {
            return Err(invalid(format!(
                "`socket` must be an absolute path, got {s:?}"
            )))
        }
        Some(Value::String(s)) if s.len() > MAX_SOCKET_PATH || s.contains('\0') => {
            return Err(invalid(format!(
                "`socket` {s:?} is not a usable Unix socket path (at most {MAX_SOCKET_PATH} bytes, no NUL)"
            )))
        }
        Some(Value::String(s)) => PathBuf::from(s),
        Some(other) => {
            return Err(invalid(format!(
                "`socket` must be a string, got {}",
                kind(other)
            )))
        }
    };
    let timeout = match config.get("timeoutSeconds") {
        None => DEFAULT_TIMEOUT,
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s <= MAX_TIMEOUT_SECONDS => Duration::try_from_secs_f64(s)
                .map_err(|e| invalid(format!("`timeoutSeconds` {s} is not a duration: {e}")))?,
            _ => {
                return Err(invalid(format!(
                    "`timeoutSeconds` must be a positive number of seconds up to \
                     {MAX_TIMEOUT_SECONDS}, got {v}"
                )))
            }
        },
    };
    Ok(NetConf {
        cni_version,
        name,
        socket,
        timeout,
    })
}

/// A JSON value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<NetConf, CniError> {
        validate(&decode(s.as_bytes())?)
    }

    #[test]
    fn version_reply_echoes_supported_version_else_latest() {
        let all = r#""supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}"#;
        assert_eq!(
            version_reply(br#"{"cniVersion":"0.4.0"}"#),
            format!(r#"{{"cniVersion":"0.4.0",{all}"#)
        );
        for stdin in [&b""[..], b"{\"cniVersion\":\"9.9.9\"}", b"garbage", b"[]"] {
            assert_eq!(
                version_reply(stdin),
                format!(r#"{{"cniVersion":"1.1.0",{all}"#)
            );
        }
    }

    #[test]
    fn defaults_apply() {
        let c = parse(r#"{"cniVersion":"1.0.0","name":"sdn","type":"sdn-cni"}"#).unwrap();
        assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert_eq!(c.name, "sdn");
        let c = parse(r#"{"cniVersion":"0.3.1","name":"n","socket":"/x/s","timeoutSeconds":1.5}"#)
            .unwrap();
        assert_eq!(c.socket, PathBuf::from("/x/s"));
        assert_eq!(c.timeout, Duration::from_millis(1500));
    }

    #[test]
    fn not_json_or_not_object_is_code_6() {
        for s in ["", "  ", "{", "nope", "[1]", "\"s\""] {
            assert_eq!(parse(s).unwrap_err().code, 6, "{s:?}");
        }
    }

    #[test]
    fn bad_keys_are_code_7() {
        for (s, word) in [
            (r#"{"name":"n"}"#, "cniVersion"),
            (r#"{"cniVersion":1,"name":"n"}"#, "cniVersion"),
            (r#"{"cniVersion":"1.0.0"}"#, "name"),
            (r#"{"cniVersion":"1.0.0","name":""}"#, "name"),
            (
                r#"{"cniVersion":"1.0.0","name":"n","socket":"rel/s"}"#,
                "socket",
            ),
            (r#"{"cniVersion":"1.0.0","name":"n","socket":5}"#, "socket"),
            (
                r#"{"cniVersion":"1.0.0","name":"n","timeoutSeconds":0}"#,
                "timeoutSeconds",
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","timeoutSeconds":-1}"#,
                "timeoutSeconds",
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","timeoutSeconds":"5"}"#,
                "timeoutSeconds",
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","timeoutSeconds":1e300}"#,
                "timeoutSeconds",
            ),
        ] {
            let e = parse(s).unwrap_err();
            assert_eq!(e.code, 7, "{s}: {e}");
            assert!(e.details.contains(word), "{s}: {e}");
        }
        let long = format!(
            r#"{{"cniVersion":"1.0.0","name":"n","socket":"/{}"}}"#,
            "a".repeat(120)
        );
        assert_eq!(parse(&long).unwrap_err().code, 7);
    }

    #[test]
    fn unsupported_version_is_code_1_listing_supported() {
        let e = parse(r#"{"cniVersion":"0.2.0","name":"n"}"#).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.msg.contains("0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"), "{e}");
        assert!(e.msg.contains("0.2.0"), "{e}");
    }
}
