//! The JSON body of a request to the agent (`cni_proto::RequestBody`, `POST /cni`).
//!
//! `{"protocol","command","containerId","netns","ifname","args","path","config"}`; a key is
//! absent when its variable is unset. `config` is the network config exactly as read from stdin,
//! carried as a raw JSON value: the caller has already checked that it is one JSON object, so
//! the agent sees the runtime's bytes (key order, numbers, `prevResult`) unchanged.
//!
//! Limits: the body is built in memory; network configs are small (kilobytes).

use cni_proto::RequestBody;
use serde_json::value::RawValue;

use crate::env::{CniEnv, Command};

/// The request body for `command` with the forwarded variables and the raw config text (one
/// JSON object; surrounding whitespace is dropped). `None` only if `raw_config` is not JSON,
/// which the caller has ruled out.
pub(crate) fn body(command: Command, env: &CniEnv, raw_config: &str) -> Option<String> {
    let config = RawValue::from_string(raw_config.trim().to_owned()).ok()?;
    let body = RequestBody {
        protocol: Some(cni_proto::PROTOCOL),
        command: Some(command.as_str().to_owned()),
        container_id: env.container_id.clone(),
        netns: env.netns.clone(),
        ifname: env.ifname.clone(),
        args: env.args.clone(),
        path: env.path.clone(),
        config: Some(config),
    };
    serde_json::to_string(&body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn all_fields_and_config_verbatim() {
        let env = CniEnv {
            container_id: Some("abc".into()),
            netns: Some("/run/netns/x".into()),
            ifname: Some("eth0".into()),
            args: Some("IgnoreUnknown=1;K8S_POD_NAME=p;X=a=b\"c".into()),
            path: Some("/opt/cni/bin".into()),
        };
        let raw = "\n {\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"b\":1.50,\"a\":2}\n";
        let b = body(Command::Add, &env, raw).unwrap();
        assert!(b.ends_with(
            ",\"config\":{\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"b\":1.50,\"a\":2}}"
        ));
        let v: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["command"], "ADD");
        assert_eq!(v["containerId"], "abc");
        assert_eq!(v["netns"], "/run/netns/x");
        assert_eq!(v["ifname"], "eth0");
        assert_eq!(v["args"], "IgnoreUnknown=1;K8S_POD_NAME=p;X=a=b\"c");
        assert_eq!(v["path"], "/opt/cni/bin");
        assert_eq!(v["config"]["name"], "n");
    }

    #[test]
    fn unset_variables_are_absent() {
        let env = CniEnv {
            container_id: Some("c".into()),
            ifname: Some("eth0".into()),
            netns: Some(String::new()),
            ..CniEnv::default()
        };
        let b = body(Command::Del, &env, "{}").unwrap();
        let v: Value = serde_json::from_str(&b).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 6, "{b}");
        assert_eq!(v["protocol"], 1);
        assert_eq!(v["netns"], "");
        assert!(!obj.contains_key("args") && !obj.contains_key("path"));
    }
}
