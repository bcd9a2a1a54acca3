//! The CNI command set and the CNI error object, shared by the server and the pod handlers.
//!
//! A [`CniError`] is what the runtime finally sees (the shim prints it verbatim): a spec error
//! code, a one-line `msg` that names the field and the offending value, and optional `details`
//! (which step failed, what to do). Handlers build them with the per-code constructors, so the
//! code is chosen once, where the failure is understood. Codes below 100 are the spec's; 100 and
//! above are ours (see [`codes`]).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::version::CniVersion;

/// CNI error codes: the spec's well-known codes and ours (100 and above).
pub mod codes {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in the network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Container unknown or does not exist.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid necessary environment variables (CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS,
    /// CNI_IFNAME, CNI_ARGS, CNI_PATH).
    pub const INVALID_ENV: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content (bad JSON).
    pub const DECODE_FAILURE: u32 = 6;
    /// Invalid network configuration.
    pub const INVALID_CONFIG: u32 = 7;
    /// Try again later (transient: the agent is busy, starting or timed out).
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin is not available (new ADDs would fail).
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// STATUS: the plugin is not available and existing containers may have limited
    /// connectivity.
    pub const LIMITED_CONNECTIVITY: u32 = 51;
    /// Ours: an internal failure of the agent; `details` names the step.
    pub const INTERNAL: u32 = 100;
    /// Ours: the connecting process is not allowed to talk to the agent (SO_PEERCRED).
    pub const PERMISSION_DENIED: u32 = 101;
}

/// A CNI command forwarded by the shim (VERSION is answered by the shim itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Attach the container to the network.
    Add,
    /// Detach; idempotent.
    Del,
    /// Verify the attachment is as ADD left it (0.4.0+).
    Check,
    /// Remove resources of attachments not in the valid list (1.1.0+).
    Gc,
    /// Report whether the plugin is ready for ADDs (1.1.0+).
    Status,
}

impl Command {
    /// The `CNI_COMMAND` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
        }
    }

    /// Whether the command concerns one attachment (container id + ifname), as opposed to the
    /// whole network (GC, STATUS).
    pub fn is_per_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Command {
    type Err = CniError;

    /// Parses `CNI_COMMAND`; the error is code 4 (invalid environment variable).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ADD" => Ok(Command::Add),
            "DEL" => Ok(Command::Del),
            "CHECK" => Ok(Command::Check),
            "GC" => Ok(Command::Gc),
            "STATUS" => Ok(Command::Status),
            "VERSION" => Err(CniError::invalid_env(
                "CNI_COMMAND VERSION is answered by the sdn-cni shim and must not be forwarded to the agent",
            )),
            other => Err(CniError::invalid_env(format!(
                "CNI_COMMAND {other:?} is not one of ADD, DEL, CHECK, GC, STATUS"
            ))),
        }
    }
}

/// A CNI error object: what the runtime sees when a command fails.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CniError {
    /// The spec error code (or ours, 100 and above).
    pub code: u32,
    /// One line naming the field/object and the offending value.
    pub msg: String,
    /// More context (which step, what to do); may be empty.
    pub details: String,
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CNI error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct ErrorWire<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    code: u32,
    msg: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    details: &'a str,
}

impl CniError {
    /// An error with an explicit code.
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// Replaces the details.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Code 1: incompatible CNI version.
    pub fn incompatible_version(msg: impl Into<String>) -> Self {
        Self::new(codes::INCOMPATIBLE_VERSION, msg, "")
    }

    /// Code 2: unsupported field in the network configuration.
    pub fn unsupported_field(msg: impl Into<String>) -> Self {
        Self::new(codes::UNSUPPORTED_FIELD, msg, "")
    }

    /// Code 3: container unknown or does not exist.
    pub fn unknown_container(msg: impl Into<String>) -> Self {
        Self::new(codes::UNKNOWN_CONTAINER, msg, "")
    }

    /// Code 4: invalid environment variable (CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS...).
    pub fn invalid_env(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_ENV, msg, "")
    }

    /// Code 5: I/O failure.
    pub fn io_failure(msg: impl Into<String>) -> Self {
        Self::new(codes::IO_FAILURE, msg, "")
    }

    /// Code 6: failed to decode content.
    pub fn decode(msg: impl Into<String>) -> Self {
        Self::new(codes::DECODE_FAILURE, msg, "")
    }

    /// Code 7: invalid network configuration.
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_CONFIG, msg, "")
    }

    /// Code 11: try again later.
    pub fn try_again_later(msg: impl Into<String>) -> Self {
        Self::new(codes::TRY_AGAIN_LATER, msg, "")
    }

    /// Code 50 (STATUS): the plugin is not available.
    pub fn plugin_not_available(msg: impl Into<String>) -> Self {
        Self::new(codes::PLUGIN_NOT_AVAILABLE, msg, "")
    }

    /// Code 51 (STATUS): not available, existing containers may have limited connectivity.
    pub fn limited_connectivity(msg: impl Into<String>) -> Self {
        Self::new(codes::LIMITED_CONNECTIVITY, msg, "")
    }

    /// Code 100 (ours): internal failure; say which step in `details`.
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL, msg, "")
    }

    /// Code 101 (ours): the peer is not allowed to use the agent.
    pub fn permission_denied(msg: impl Into<String>) -> Self {
        Self::new(codes::PERMISSION_DENIED, msg, "")
    }

    /// Whether the error is the client's fault (spec codes 1 to 7).
    pub fn is_client_error(&self) -> bool {
        (1..=7).contains(&self.code)
    }

    /// The CNI error object as JSON, with `cniVersion` set to `version`; `details` is omitted
    /// when empty (as libcni does).
    pub fn to_json(&self, version: CniVersion) -> String {
        let wire = ErrorWire {
            cni_version: version.as_str(),
            code: self.code,
            msg: &self.msg,
            details: &self.details,
        };
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_string(&wire).unwrap_or_else(|_| {
            format!(
                "{{\"cniVersion\":\"{}\",\"code\":{},\"msg\":\"unencodable error\"}}",
                version.as_str(),
                self.code
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_parse() {
        for c in [
            Command::Add,
            Command::Del,
            Command::Check,
            Command::Gc,
            Command::Status,
        ] {
            assert_eq!(c.as_str().parse::<Command>().unwrap(), c);
        }
        let e = "VERSION".parse::<Command>().unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("answered by the sdn-cni shim"), "{e}");
        let e = "add".parse::<Command>().unwrap_err();
        assert_eq!(e.code, 4);
        assert_eq!(
            e.msg,
            "CNI_COMMAND \"add\" is not one of ADD, DEL, CHECK, GC, STATUS"
        );
    }

    #[test]
    fn constructors_use_spec_codes() {
        let cases = [
            (CniError::incompatible_version("x"), 1),
            (CniError::unsupported_field("x"), 2),
            (CniError::unknown_container("x"), 3),
            (CniError::invalid_env("x"), 4),
            (CniError::io_failure("x"), 5),
            (CniError::decode("x"), 6),
            (CniError::invalid_config("x"), 7),
            (CniError::try_again_later("x"), 11),
            (CniError::plugin_not_available("x"), 50),
            (CniError::limited_connectivity("x"), 51),
            (CniError::internal("x"), 100),
            (CniError::permission_denied("x"), 101),
        ];
        for (e, code) in cases {
            assert_eq!(e.code, code);
            assert_eq!(e.is_client_error(), (1..=7).contains(&code));
        }
    }

    #[test]
    fn error_json_per_version() {
        let e = CniError::invalid_env("netns \"x\" is not absolute").with_details("set CNI_NETNS");
        assert_eq!(
            e.to_json(CniVersion::V0_3_1),
            r#"{"cniVersion":"0.3.1","code":4,"msg":"netns \"x\" is not absolute","details":"set CNI_NETNS"}"#
        );
        let e = CniError::try_again_later("busy");
        assert_eq!(
            e.to_json(CniVersion::V1_0_0),
            r#"{"cniVersion":"1.0.0","code":11,"msg":"busy"}"#
        );
        assert_eq!(e.to_string(), "CNI error 11: busy");
    }
}
