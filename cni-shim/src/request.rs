//! The JSON body of a request to the agent (the shim <-> agent protocol, `POST /cni`).
//!
//! `{"command","containerId","netns","ifname","args","path","config"}`; a key is absent when its
//! variable is unset. `config` is the network config exactly as read from stdin, spliced in as
//! text: the caller has already checked that it is one JSON object, so the body stays valid JSON
//! and the agent sees the runtime's bytes (key order, numbers, `prevResult`) unchanged.
//!
//! Limits: the body is built in memory; network configs are small (kilobytes).

use crate::env::{CniEnv, Command};
use crate::error::json_str;

/// The request body for `command` with the forwarded variables and the raw config text.
pub fn body(command: Command, env: &CniEnv, raw_config: &str) -> String {
    let mut out = String::with_capacity(raw_config.len() + 256);
    out.push_str("{\"command\":");
    out.push_str(&json_str(command.as_str()));
    let fields = [
        ("containerId", &env.container_id),
        ("netns", &env.netns),
        ("ifname", &env.ifname),
        ("args", &env.args),
        ("path", &env.path),
    ];
    for (key, value) in fields {
        if let Some(v) = value {
            out.push_str(",\"");
            out.push_str(key);
            out.push_str("\":");
            out.push_str(&json_str(v));
        }
    }
    out.push_str(",\"config\":");
    out.push_str(raw_config.trim());
    out.push('}');
    out
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
        let b = body(Command::Add, &env, raw);
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
        let b = body(Command::Del, &env, "{}");
        let v: Value = serde_json::from_str(&b).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 5, "{b}");
        assert_eq!(v["netns"], "");
        assert!(!obj.contains_key("args") && !obj.contains_key("path"));
    }
}
