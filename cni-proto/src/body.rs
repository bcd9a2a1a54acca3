//! The shim → agent request: `POST /cni` on the agent's Unix socket with one JSON object,
//!
//! ```text
//! {"protocol":1,"command":"ADD","containerId":..,"netns":..,"ifname":..,"args":..,"path":..,"config":{..}}
//! ```
//!
//! A key is absent when its variable is unset. `config` is the network config exactly as the
//! runtime wrote it on stdin (the shim sends it as a raw JSON value, so key order, numbers and
//! `prevResult` reach the agent unchanged); the type parameter is `&RawValue` on the shim's side
//! and `Value` on the agent's. The answer is the CNI result (HTTP 200, maybe an empty body) or a
//! CNI error object, rendered by the agent in the runtime's cniVersion; the shim prints either
//! verbatim.
//!
//! `protocol` versions this body. A shim without the key (older releases) is protocol 1; an
//! agent refuses a protocol it does not know with an error that says to install the matching
//! `sdn-cni`, rather than misreading the body.

use serde::{Deserialize, Serialize};

use crate::codes;
use crate::error::CniError;

/// The version of the request body this release speaks.
pub const PROTOCOL: u32 = 1;

/// The HTTP path of the endpoint.
pub const ENDPOINT: &str = "/cni";

/// The request body; `C` is the type the network config travels as.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestBody<C> {
    /// The body's protocol version ([`PROTOCOL`]); `None` from shims before the key existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// CNI_COMMAND.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// CNI_CONTAINERID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// CNI_NETNS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// CNI_IFNAME.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// CNI_ARGS, raw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// CNI_PATH, raw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The network configuration from stdin, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<C>,
}

impl<C> RequestBody<C> {
    /// Refuses a body of a protocol this side does not speak (code 1, saying what to install).
    pub fn check_protocol(&self) -> Result<(), CniError> {
        match self.protocol.unwrap_or(1) {
            PROTOCOL => Ok(()),
            other => Err(CniError::new(
                codes::INCOMPATIBLE_VERSION,
                format!(
                    "sdn-cni speaks shim protocol {other}, this sdn-agent speaks protocol {PROTOCOL}"
                ),
                "install the sdn-cni binary of this sdn-agent's release into the CNI bin directory",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_keys_are_absent_and_protocol_defaults_to_1() {
        let b: RequestBody<serde_json::Value> = RequestBody {
            protocol: Some(PROTOCOL),
            command: Some("DEL".into()),
            container_id: Some("c".into()),
            ifname: Some("eth0".into()),
            netns: Some(String::new()),
            ..RequestBody::default()
        };
        let text = serde_json::to_string(&b).unwrap();
        assert_eq!(
            text,
            r#"{"protocol":1,"command":"DEL","containerId":"c","netns":"","ifname":"eth0"}"#
        );
        let old: RequestBody<serde_json::Value> =
            serde_json::from_str(r#"{"command":"ADD","config":{"a":1}}"#).unwrap();
        assert_eq!(old.protocol, None);
        assert!(old.check_protocol().is_ok());
    }

    #[test]
    fn unknown_protocol_is_refused_naming_both() {
        let b: RequestBody<serde_json::Value> =
            serde_json::from_str(r#"{"protocol":2,"command":"ADD"}"#).unwrap();
        let e = b.check_protocol().unwrap_err();
        assert_eq!(e.code, 1);
        assert!(
            e.msg.contains("protocol 2") && e.msg.contains("protocol 1"),
            "{e}"
        );
        assert!(e.details.contains("sdn-cni"), "{e}");
    }
}
