//! The network configuration the runtime passed on the plugin's stdin (forwarded verbatim by
//! the shim), parsed into the keys the agent acts on.
//!
//! Only the keys we use are typed; everything else (`capabilities`, `ipam`, `args`, keys of
//! other plugins) is tolerated and stays available in
//! [`Request::raw_config`](crate::cni::Request::raw_config). Key types are checked strictly: a
//! `timeoutSeconds` of `"30"` is an error naming the key and the value, not a silent default.
//!
//! Error codes: an unsupported `cniVersion` is code 1; every other problem is code 7 (invalid
//! network configuration), except a bad `prevResult`, also code 7 (see [`AddResult::from_value`]).
//!
//! GC's valid attachments: CNI 1.1 puts them at the top level of the plugin config under
//! `cni.dev/valid-attachments`. An earlier spec text said `cni.dev/attachments`, and libcni
//! injects both with the same value; we read the first and fall back to the second.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::names::{
    check_ifname, is_container_id, is_dns1123_label, is_network_name, CONTAINER_ID_RULE,
    DNS1123_LABEL_RULE, NETWORK_NAME_RULE,
};
use super::result::AddResult;
use super::types::CniError;
use super::version::CniVersion;

/// The largest `timeoutSeconds` we accept (one day, as the shim).
pub const MAX_TIMEOUT_SECONDS: f64 = 86_400.0;

/// An attachment the runtime still considers valid (GC input).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValidAttachment {
    /// `containerID`.
    pub container_id: String,
    /// `ifname`.
    pub ifname: String,
}

/// The parsed network configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConf {
    /// `cniVersion`: results and errors are rendered in this version.
    pub cni_version: CniVersion,
    /// `name`: the network name (also the IPAM directory name).
    pub name: String,
    /// `type`: the plugin binary name (normally `sdn-cni`).
    pub plugin_type: String,
    /// `socket`: the agent socket the shim used (informational here).
    pub socket: Option<PathBuf>,
    /// `namespace`: the tenant namespace for pods without `K8S_POD_NAMESPACE`.
    pub namespace: Option<String>,
    /// `timeoutSeconds` (a positive number, fractions allowed, as the shim reads it): the shim's
    /// deadline; the server answers before it.
    pub timeout: Option<Duration>,
    /// `runtimeConfig` (an object), e.g. `portMappings`; parsed by the handlers that use it.
    pub runtime_config: Option<Value>,
    /// `prevResult`, parsed: the result of the previous plugin in a chain (ADD), or of our own
    /// ADD (CHECK, DEL).
    pub prev_result: Option<AddResult>,
    /// `cni.dev/valid-attachments` (GC); `None` when absent.
    pub valid_attachments: Option<Vec<ValidAttachment>>,
}

fn object(value: &Value) -> Result<&Map<String, Value>, CniError> {
    value.as_object().ok_or_else(|| {
        CniError::invalid_config(format!(
            "network config is not a JSON object (got {})",
            kind(value)
        ))
    })
}

/// A short description of a JSON value's type, for error messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, CniError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(CniError::invalid_config(format!(
            "network config key {key:?} must be a string, got {} {other}",
            kind(other)
        ))),
    }
}

impl NetConf {
    /// Reads only `cniVersion`: the server needs it to render any later error in the right
    /// version, even when the rest of the config is bad.
    pub fn parse_version(value: &Value) -> Result<CniVersion, CniError> {
        let obj = object(value)?;
        let v = string(obj, "cniVersion")?.ok_or_else(|| {
            CniError::invalid_config(format!(
                "network config has no \"cniVersion\" (supported: {})",
                CniVersion::supported_list()
            ))
        })?;
        v.parse().map_err(|e: super::version::UnsupportedVersion| {
            CniError::incompatible_version(e.to_string())
        })
    }

    /// Parses and validates the whole configuration.
    pub fn parse(value: &Value) -> Result<NetConf, CniError> {
        let cni_version = Self::parse_version(value)?;
        let obj = object(value)?;

        let name = string(obj, "name")?
            .ok_or_else(|| CniError::invalid_config("network config has no \"name\""))?;
        if !is_network_name(name) {
            return Err(CniError::invalid_config(format!(
                "network config \"name\" {name:?} is not a valid network name ({NETWORK_NAME_RULE})"
            )));
        }
        let plugin_type = string(obj, "type")?
            .filter(|t| !t.is_empty())
            .ok_or_else(|| CniError::invalid_config("network config has no \"type\""))?;

        let socket = match string(obj, "socket")? {
            None => None,
            Some(s) if s.starts_with('/') && !s.contains('\0') => Some(PathBuf::from(s)),
            Some(s) => {
                return Err(CniError::invalid_config(format!(
                    "network config \"socket\" {s:?} is not an absolute path"
                )))
            }
        };
        let namespace = match string(obj, "namespace")? {
            None => None,
            Some(ns) if is_dns1123_label(ns) => Some(ns.to_string()),
            Some(ns) => {
                return Err(CniError::invalid_config(format!(
                    "network config \"namespace\" {ns:?} is not a valid namespace name ({DNS1123_LABEL_RULE})"
                )))
            }
        };
        let timeout = match obj.get("timeoutSeconds") {
            None => None,
            Some(v) => match v.as_f64().and_then(|s| {
                (s > 0.0 && s <= MAX_TIMEOUT_SECONDS)
                    .then(|| Duration::try_from_secs_f64(s).ok())
                    .flatten()
            }) {
                Some(d) => Some(d),
                None => {
                    return Err(CniError::invalid_config(format!(
                        "network config \"timeoutSeconds\" must be a positive number of seconds up to {MAX_TIMEOUT_SECONDS}, got {v}"
                    )))
                }
            },
        };
        let runtime_config = match obj.get("runtimeConfig") {
            None | Some(Value::Null) => None,
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(other) => {
                return Err(CniError::invalid_config(format!(
                    "network config \"runtimeConfig\" must be an object, got {}",
                    kind(other)
                )))
            }
        };
        let prev_result = match obj.get("prevResult") {
            None | Some(Value::Null) => None,
            Some(v) => Some(AddResult::from_value(v)?),
        };
        let valid_attachments = match obj
            .get("cni.dev/valid-attachments")
            .map(|v| ("cni.dev/valid-attachments", v))
            .or_else(|| {
                obj.get("cni.dev/attachments")
                    .map(|v| ("cni.dev/attachments", v))
            }) {
            None => None,
            Some((key, v)) => Some(parse_attachments(key, v)?),
        };

        Ok(NetConf {
            cni_version,
            name: name.to_string(),
            plugin_type: plugin_type.to_string(),
            socket,
            namespace,
            timeout,
            runtime_config,
            prev_result,
            valid_attachments,
        })
    }
}

fn parse_attachments(key: &str, v: &Value) -> Result<Vec<ValidAttachment>, CniError> {
    let list = v.as_array().ok_or_else(|| {
        CniError::invalid_config(format!(
            "network config {key:?} must be an array, got {}",
            kind(v)
        ))
    })?;
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let field = |name: &str| -> Result<&str, CniError> {
            item.get(name).and_then(Value::as_str).ok_or_else(|| {
                CniError::invalid_config(format!(
                    "network config {key:?}[{i}] has no string {name:?} (got {item})"
                ))
            })
        };
        let container_id = field("containerID")?;
        if !is_container_id(container_id) {
            return Err(CniError::invalid_config(format!(
                "network config {key:?}[{i}].containerID {container_id:?} is not a container id ({CONTAINER_ID_RULE})"
            )));
        }
        let ifname = field("ifname")?;
        check_ifname(ifname).map_err(|why| {
            CniError::invalid_config(format!(
                "network config {key:?}[{i}].ifname {ifname:?} {why}"
            ))
        })?;
        out.push(ValidAttachment {
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
        });
    }
    Ok(out)
}

/// A key of a `runtimeConfig` object, spelt as the runtimes spell it: the exact key first, else
/// one that differs only in case. Runtimes serialise Go structs, some without JSON tags
/// (containerd 1.6 sends `{"IngressRate": .., "EgressBurst": ..}` for `bandwidth` and
/// `HostPort`/`HostIP` for `portMappings`), and the reference plugins decode them with Go's
/// case-insensitive matching; so does the agent.
pub fn runtime_key<'a>(obj: &'a Value, name: &str) -> Option<&'a Value> {
    let map = obj.as_object()?;
    map.get(name).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"cniVersion": "1.0.0", "name": "sdn", "type": "sdn-cni"})
    }

    fn with(key: &str, v: Value) -> Value {
        let mut c = base();
        c[key] = v;
        c
    }

    fn err(v: &Value) -> CniError {
        NetConf::parse(v).unwrap_err()
    }

    #[test]
    fn minimal_config() {
        let c = NetConf::parse(&base()).unwrap();
        assert_eq!(c.cni_version, CniVersion::V1_0_0);
        assert_eq!(c.name, "sdn");
        assert_eq!(c.plugin_type, "sdn-cni");
        assert_eq!(c.socket, None);
        assert_eq!(c.namespace, None);
        assert_eq!(c.timeout, None);
        assert_eq!(c.runtime_config, None);
        assert_eq!(c.prev_result, None);
        assert_eq!(c.valid_attachments, None);
    }

    #[test]
    fn full_config() {
        let c = NetConf::parse(&json!({
            "cniVersion": "1.1.0", "name": "tenant-a", "type": "sdn-cni",
            "socket": "/var/run/sdn/cni.sock", "namespace": "tenant-a", "timeoutSeconds": 30,
            "capabilities": {"portMappings": true}, "ipam": {},
            "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
            "prevResult": {"cniVersion": "1.1.0", "interfaces": [{"name": "x"}]},
            "cni.dev/valid-attachments": [{"containerID": "abc", "ifname": "eth0"}]
        }))
        .unwrap();
        assert_eq!(
            c.socket.as_deref(),
            Some(std::path::Path::new("/var/run/sdn/cni.sock"))
        );
        assert_eq!(c.namespace.as_deref(), Some("tenant-a"));
        assert_eq!(c.timeout, Some(Duration::from_secs(30)));
        assert_eq!(
            c.runtime_config.unwrap()["portMappings"][0]["hostPort"],
            json!(8080)
        );
        assert_eq!(c.prev_result.unwrap().interfaces[0].name, "x");
        assert_eq!(
            c.valid_attachments.unwrap(),
            vec![ValidAttachment {
                container_id: "abc".into(),
                ifname: "eth0".into()
            }]
        );
    }

    #[test]
    fn fractional_timeout_seconds_as_the_shim_reads_them() {
        let c = NetConf::parse(&with("timeoutSeconds", json!(1.5))).unwrap();
        assert_eq!(c.timeout, Some(Duration::from_millis(1500)));
        let c = NetConf::parse(&with("timeoutSeconds", json!(86400))).unwrap();
        assert_eq!(c.timeout, Some(Duration::from_secs(86400)));
    }

    #[test]
    fn legacy_attachments_key_is_read() {
        let c = NetConf::parse(&with(
            "cni.dev/attachments",
            json!([{"containerID": "a1", "ifname": "eth0"}]),
        ))
        .unwrap();
        assert_eq!(c.valid_attachments.unwrap()[0].container_id, "a1");
        let c = NetConf::parse(&with("cni.dev/valid-attachments", json!([]))).unwrap();
        assert_eq!(c.valid_attachments, Some(vec![]));
    }

    #[test]
    fn version_errors() {
        let e = err(&with("cniVersion", json!("0.2.0")));
        assert_eq!(e.code, 1);
        assert_eq!(
            e.msg,
            "cniVersion \"0.2.0\" is not supported (supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)"
        );
        let mut c = base();
        c.as_object_mut().unwrap().remove("cniVersion");
        let e = err(&c);
        assert_eq!(e.code, 7);
        assert_eq!(
            e.msg,
            "network config has no \"cniVersion\" (supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)"
        );
        let e = err(&with("cniVersion", json!(1)));
        assert_eq!(e.code, 7);
        assert_eq!(
            e.msg,
            "network config key \"cniVersion\" must be a string, got a number 1"
        );
        let e = err(&json!([1]));
        assert_eq!(e.msg, "network config is not a JSON object (got an array)");
    }

    #[test]
    fn field_errors_name_key_and_value() {
        let cases = [
            (
                with("name", json!("my net")),
                format!("network config \"name\" \"my net\" is not a valid network name ({NETWORK_NAME_RULE})"),
            ),
            (with("name", json!("")), format!("network config \"name\" \"\" is not a valid network name ({NETWORK_NAME_RULE})")),
            (with("type", json!("")), "network config has no \"type\"".into()),
            (
                with("socket", json!("run/sdn.sock")),
                "network config \"socket\" \"run/sdn.sock\" is not an absolute path".into(),
            ),
            (
                with("namespace", json!("Team_A")),
                format!("network config \"namespace\" \"Team_A\" is not a valid namespace name ({DNS1123_LABEL_RULE})"),
            ),
            (
                with("timeoutSeconds", json!("30")),
                "network config \"timeoutSeconds\" must be a positive number of seconds up to 86400, got \"30\"".into(),
            ),
            (
                with("timeoutSeconds", json!(0)),
                "network config \"timeoutSeconds\" must be a positive number of seconds up to 86400, got 0".into(),
            ),
            (
                with("timeoutSeconds", json!(86401)),
                "network config \"timeoutSeconds\" must be a positive number of seconds up to 86400, got 86401".into(),
            ),
            (
                with("runtimeConfig", json!([])),
                "network config \"runtimeConfig\" must be an object, got an array".into(),
            ),
            (
                with("cni.dev/valid-attachments", json!({})),
                "network config \"cni.dev/valid-attachments\" must be an array, got an object".into(),
            ),
            (
                with("cni.dev/valid-attachments", json!([{"containerID": "a"}])),
                "network config \"cni.dev/valid-attachments\"[0] has no string \"ifname\" (got {\"containerID\":\"a\"})".into(),
            ),
            (
                with("cni.dev/valid-attachments", json!([{"containerID": "-a", "ifname": "eth0"}])),
                format!("network config \"cni.dev/valid-attachments\"[0].containerID \"-a\" is not a container id ({CONTAINER_ID_RULE})"),
            ),
            (
                with("cni.dev/valid-attachments", json!([{"containerID": "a", "ifname": "a/b"}])),
                "network config \"cni.dev/valid-attachments\"[0].ifname \"a/b\" contains '/'; interface names may not contain '/', ':', whitespace or control characters".into(),
            ),
            (
                with("prevResult", json!({"ips": [{"address": "x"}]})),
                "prevResult.ips[0].address \"x\" is not an IP address with prefix length".into(),
            ),
        ];
        for (conf, msg) in cases {
            let e = err(&conf);
            assert_eq!(e.code, 7, "{conf}");
            assert_eq!(e.msg, msg, "{conf}");
        }
        let mut c = base();
        c.as_object_mut().unwrap().remove("name");
        assert_eq!(err(&c).msg, "network config has no \"name\"");
    }
}
